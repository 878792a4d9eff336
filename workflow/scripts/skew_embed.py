from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.suites.ieat import embed_image_store
from vlbias.suites.skew import query_texts
from vlbias.weights import localize, provenance, read_record

setup_logging(snakemake.log[0])
p = snakemake.params
# the verified files of the weights record, offline: a compute node needs no network
record = read_record(snakemake.input.weights)
spec = localize(f"skew/{snakemake.wildcards.model}", p.spec, record, cache=p.cache, lock_path=p.weights_lock)
encoder = build({**spec, "threads": p.threads})
texts = query_texts(snakemake.input.queries, p.names)
# the content cache: an image (by its pixels) or query this encoder has seen is not embedded again
with RecordCache(Path(p.cache, "embeddings", fingerprint(encoder.info))) as cache:
    embed_image_store(snakemake.input.images, encoder, snakemake.output[0],
                      {**p.provenance, "weights_record": provenance(record)}, cache, texts=texts)
