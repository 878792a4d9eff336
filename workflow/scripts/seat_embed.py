from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.models import build_recorded
from vlbias.suites.stores import embed_stimuli
from vlbias.weights import provenance

setup_logging(snakemake.log[0])
encoder, _, record = build_recorded(f"seat/{snakemake.wildcards.model}", snakemake.params.spec, snakemake.input.weights,
                                   cache=snakemake.params.cache, lock_path=snakemake.params.weights_lock,
                                   threads=snakemake.params.threads)
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
with RecordCache(Path(snakemake.params.cache, "embeddings", fingerprint(encoder.info))) as cache:
    embed_stimuli(stimuli, encoder, snakemake.output[0],
                  {**snakemake.params.provenance, "weights_record": provenance(record)}, cache)
