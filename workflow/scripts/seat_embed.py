from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.suites.stores import embed_stimuli
from vlbias.weights import localize, provenance, read_record

setup_logging(snakemake.log[0])
# the verified files of the weights record, offline: a compute node needs no network
record = read_record(snakemake.input.weights)
spec = localize(f"seat/{snakemake.wildcards.model}", snakemake.params.spec, record, cache=snakemake.params.cache,
                lock_path=snakemake.params.weights_lock)
encoder = build({**spec, "threads": snakemake.params.threads})
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
with RecordCache(Path(snakemake.params.cache, "embeddings", fingerprint(encoder.info))) as cache:
    embed_stimuli(stimuli, encoder, snakemake.output[0],
                  {**snakemake.params.provenance, "weights_record": provenance(record)}, cache)
