from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.suites.ieat import embed_image_store

setup_logging(snakemake.log[0])
encoder = build({**snakemake.params.spec, "threads": snakemake.threads})
with RecordCache(Path(snakemake.params.cache, "embeddings", fingerprint(encoder.info))) as cache:
    embed_image_store(snakemake.input[0], encoder, snakemake.output[0], snakemake.params.provenance, cache)
