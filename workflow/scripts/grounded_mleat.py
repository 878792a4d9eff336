from vlbias.logs import setup_logging
from vlbias.report.mleat import write_mleat
from vlbias.suites.grounded.jobs import read_mleat_results

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
found = [item for path in snakemake.input.results for item in read_mleat_results(path, p.tests)]
write_mleat(found, csv=out.csv, page=out.html, summary=out.png, maps=out.maps, title=p.title, caption=p.caption,
            workers=snakemake.threads)
