from vlbias.associate import run_tests
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.tables import assemble, missing_inputs, read_published, write_table

setup_logging(snakemake.log[0])
p = snakemake.params
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
rows = run_tests(stimuli, dict(zip(p.models, snakemake.input.stores)), threads=snakemake.threads, ci=p.ci,
                 **p.stats)
table = assemble(rows, [s.id for s in stimuli], p.models, read_published(snakemake.input.published), table=p.table)
write_table(table, snakemake.output.csv, snakemake.output.md, p.caption, snakemake.output.html)
status = read_manifest(snakemake.input.images[0]) if snakemake.input.images else []
missing = missing_inputs(stimuli, status, [m for m in p.models if m in p.image_models])
write_manifest(snakemake.output.missing, missing, ["model", "test", "set", "category", "file", "status", "reason"])
