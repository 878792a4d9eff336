from vlbias.logs import setup_logging
from vlbias.suites.zoo.text import fetch_tests

setup_logging(snakemake.log[0])
p = snakemake.params
fetch_tests(snakemake.input.manifest, p.names, p.source, p.mirror, p.cache, snakemake.output)
