from vlbias.logs import setup_logging
from vlbias.report.zoo import write_predictors

setup_logging(snakemake.log[0])
write_predictors(snakemake.input[0], snakemake.output, level=snakemake.params.level)
