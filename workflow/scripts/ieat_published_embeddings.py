from vlbias.logs import setup_logging
from vlbias.suites.ieat import published_store

setup_logging(snakemake.log[0])
p = snakemake.params
published_store(snakemake.input.manifest, p.file, p.source, p.mirror, p.cache, snakemake.output[0], p.provenance)
