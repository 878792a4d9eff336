from vlbias.logs import setup_logging
from vlbias.suites.ieat import output_store

setup_logging(snakemake.log[0])
output_store(snakemake.input[0], snakemake.wildcards.output, snakemake.output[0])
