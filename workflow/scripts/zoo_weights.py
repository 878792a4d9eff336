from vlbias.logs import setup_logging
from vlbias.suites.zoo import fetch_all

setup_logging(snakemake.log[0])
fetch_all(snakemake.params.models, snakemake.output, cache=snakemake.params.cache, lock_path=snakemake.input.lock)
