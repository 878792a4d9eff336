import logging

from vlbias.io.atomic import atomic_path
from vlbias.logs import setup_logging
from vlbias.report.grounded import paper_table, protocol_caption, read_left_out, read_printed, read_rows, write_layout
from vlbias.report.html import layout_html, write_page

setup_logging(snakemake.log[0])
out, spec = snakemake.output, snakemake.params.spec
spec = {**spec, "caption": protocol_caption(spec)}
printed = read_printed(snakemake.input.published) if snakemake.input.published else None
tests = {t for group in spec["groups"].values() for t in group}
rows = read_rows(snakemake.input.results, tests)
layout = paper_table(spec, rows.to_dict("records"), printed)
write_layout(layout, csv=out.csv, md=out.md, tex=out.tex)
write_page(out.html, layout.caption, [layout_html(layout)], heading=False)
left_out = read_left_out(snakemake.input.missing, tests)
with atomic_path(out.rows) as tmp:
    rows.to_csv(tmp, index=False)  # every result the table shows, with its provenance
with atomic_path(out.missing) as tmp:
    left_out.to_csv(tmp, sep="\t", index=False)
logging.getLogger("grounded_table").info("%s: %d results, %d pairs left out", out.csv, len(rows), len(left_out))
