from vlbias.suites.zoo.text import load_test
from vlbias.logs import setup_logging
from vlbias.suites.zoo import embed_or_failure, read_json

setup_logging(snakemake.log[0])
p = snakemake.params
embed_or_failure(read_json(snakemake.input.weights), f"zoo/{snakemake.wildcards.model}", p.spec,
                 snakemake.input.images, snakemake.output[0], threads=p.threads, cache=p.cache,
                 lock_path=p.weights_lock, stimuli=[load_test(f) for f in snakemake.input.stimuli],
                 provenance=p.provenance)
