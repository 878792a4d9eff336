from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.suites.seat import embed_stimulus

setup_logging(snakemake.log[0])
encoder = build({**snakemake.params.spec, "threads": snakemake.threads})
embed_stimulus(load_stimulus(snakemake.input.stimulus), encoder, snakemake.output[0], snakemake.params.provenance)
