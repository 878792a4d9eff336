from vlbias.associate import run_tests, write_rows
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.tables import assemble, write_table

setup_logging(snakemake.log[0])
p, model = snakemake.params, snakemake.wildcards.model
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
rows = run_tests(stimuli, {model: snakemake.input.store}, threads=snakemake.threads, ci=p.ci,
                 **p.stats)
write_rows(rows, snakemake.output.rows, ci=p.ci, **p.stats)
write_table(assemble(rows, [s.id for s in stimuli], [model]), snakemake.output.csv, snakemake.output.md, p.caption,
            snakemake.output.html)
