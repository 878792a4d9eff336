from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.suites.ieat import embed_image_store

setup_logging(snakemake.log[0])
encoder = build({**snakemake.params.spec, "threads": snakemake.threads})
embed_image_store(snakemake.input[0], encoder, snakemake.output[0], snakemake.params.provenance)
