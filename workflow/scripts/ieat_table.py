from vlbias.associate import run_tests, write_rows
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.formats import read_published
from vlbias.report.tables import assemble, missing_inputs, published_as, write_table

setup_logging(snakemake.log[0])
p = snakemake.params
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
rows = run_tests(stimuli, dict(zip(p.models, snakemake.input.stores)), threads=snakemake.threads, ci=p.ci,
                 **p.stats)
write_rows(rows, snakemake.output.rows, ci=p.ci, **p.stats)
published = published_as(read_published(snakemake.input.published), p.paper)
table = assemble(rows, [s.id for s in stimuli], p.models, published, table=p.table)
write_table(table, snakemake.output.csv, snakemake.output.md, p.caption, snakemake.output.html)
missing = [row for model, status in p.image_stores.items()
           for row in missing_inputs(stimuli, read_manifest(status), [model])]
write_manifest(snakemake.output.missing, missing, ["model", "test", "set", "category", "file", "status", "reason"])
