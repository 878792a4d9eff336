import logging
from pathlib import Path

import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.logs import setup_logging
from vlbias.report.grounded import paper_table, read_printed, write_layout
from vlbias.report.html import layout_html, write_page
from vlbias.suites.grounded.jobs import MISSING_COLUMNS, RESULT_COLUMNS
from vlbias.suites.grounded.plan import CAPTIONS


def read(path, **kwargs):
    return pd.read_csv(path, dtype=str, keep_default_na=False, **kwargs)


def missing(path):
    """The pairs one embedding job left out, named by its (dataset, model)."""
    dataset, model = Path(path).parts[-2], Path(path).name.removesuffix(".missing.tsv")
    return read(path, sep="\t", comment="#").assign(dataset=dataset, model=model)


setup_logging(snakemake.log[0])
out, spec = snakemake.output, snakemake.params.spec
switches = ", ".join(f"{k} {v}" for k, v in spec["switches"].items())
spec = {**spec, "caption": f"{spec['caption'] or CAPTIONS[spec['table']]}. Protocol '{spec['protocol']}': {switches}"}
printed = read_printed(snakemake.input.published) if snakemake.input.published else None
tests = {t for group in spec["groups"].values() for t in group}
rows = pd.concat([read(p) for p in snakemake.input.results] or [pd.DataFrame(columns=RESULT_COLUMNS)],
                 ignore_index=True)
rows = rows[rows["test"].isin(tests)]  # an experiment job covers every table's tests of its dataset
layout = paper_table(spec, rows.to_dict("records"), printed)
write_layout(layout, csv=out.csv, md=out.md, tex=out.tex)
write_page(out.html, layout.caption, [layout_html(layout)], heading=False)
left_out = pd.concat([missing(p) for p in snakemake.input.missing] or [pd.DataFrame(columns=MISSING_COLUMNS)],
                     ignore_index=True)
left_out = left_out[left_out["test"].isin(tests)].reindex(columns=["dataset", "model", *MISSING_COLUMNS])
with atomic_path(out.rows) as tmp:
    rows.to_csv(tmp, index=False)  # every result the table shows, with its provenance
with atomic_path(out.missing) as tmp:
    left_out.to_csv(tmp, sep="\t", index=False)
logging.getLogger("grounded_table").info("%s: %d results, %d pairs left out", out.csv, len(rows), len(left_out))
