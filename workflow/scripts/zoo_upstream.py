from vlbias.logs import setup_logging
from vlbias.suites.zoo import upstream_file

setup_logging(snakemake.log[0])
p = snakemake.params
upstream_file(snakemake.input.manifest, snakemake.wildcards.file, p.source, p.mirror, p.cache, snakemake.output[0])
