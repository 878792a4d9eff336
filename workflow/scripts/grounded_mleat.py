from vlbias.logs import setup_logging
from vlbias.report.mleat import write_mleat
from vlbias.suites.grounded.jobs import run_mleat

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
found = [item for path in snakemake.input.embeddings
         for item in run_mleat(path, p.tests, p.levels, **p.stats, **p.mleat)]
write_mleat(found, csv=out.csv, page=out.html, summary=out.png, maps=out.maps, title=p.title, caption=p.caption,
            workers=snakemake.threads)
