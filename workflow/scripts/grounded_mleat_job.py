from vlbias.logs import setup_logging
from vlbias.suites.grounded.jobs import write_mleat_results

setup_logging(snakemake.log[0])
p = snakemake.params
write_mleat_results(snakemake.input[0], snakemake.output[0], p.tests, p.levels, **p.stats, **p.mleat)
