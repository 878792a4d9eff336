from vlbias.logs import setup_logging
from vlbias.report.zoo import write_performance

setup_logging(snakemake.log[0])
write_performance(snakemake.input[0], snakemake.output, **snakemake.params.bootstrap)
