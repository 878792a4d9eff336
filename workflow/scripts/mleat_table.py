from vlbias.associate import run_mleats, table_level1
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.mleat import write_mleat

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
# Level 1 as the table's job computed it, where it did with these settings (the sweep's table has no rows file)
computed = {k: l1 for path in snakemake.input.rows for k, l1 in table_level1(path, ci=p.ci, **p.stats).items()}
found = run_mleats(stimuli, dict(zip(p.models, snakemake.input.stores)), computed, threads=snakemake.threads,
                   ci=p.ci, **p.stats, **p.mleat)
write_mleat(found, csv=out.csv, page=out.html, summary=out.png, maps=out.maps, title=p.title, caption=p.caption)
