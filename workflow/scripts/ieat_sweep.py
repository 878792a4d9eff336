from vlbias.associate import run_tests
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.figures import plot_suite_heatmap
from vlbias.report.formats import FAMILY, significance_note
from vlbias.report.tables import assemble, effects_grid, missing_inputs, write_tables

setup_logging(snakemake.log[0])
p = snakemake.params
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
rows = run_tests(stimuli, dict(zip(p.models, snakemake.input.stores)), threads=snakemake.threads, **p.stats)
table = assemble(rows, [s.id for s in stimuli], p.models)
write_tables(table, p.caption, csv=snakemake.output.csv)
write_tables(effects_grid(table), p.caption, md=snakemake.output.md,
             note=f"Effect size d (sample std, ddof=1) of each test (rows) on each model (columns), starred by its "
                  f"one-sided permutation p: {significance_note(FAMILY)}. Every row with its n, p (raw and adjusted) "
                  "and provenance is in the CSV beside this file.")
plot_suite_heatmap(table, snakemake.output.png, p.caption)
missing = [row for model, status in p.image_stores.items()
           for row in missing_inputs(stimuli, read_manifest(status), [model])]
write_manifest(snakemake.output.missing, missing, ["model", "test", "set", "category", "file", "status", "reason"])
