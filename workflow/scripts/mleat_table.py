from vlbias.associate import run_mleats
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.report.mleat import write_mleat

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
found = run_mleats(stimuli, dict(zip(p.models, snakemake.input.stores)), threads=snakemake.threads, ci=p.ci,
                   **p.stats, **p.mleat)
write_mleat(found, csv=out.csv, page=out.html, summary=out.png, maps=out.maps, title=p.title, caption=p.caption)
