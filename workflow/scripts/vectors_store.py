import logging

from vlbias.io.stimuli import load_stimulus
from vlbias.io.vectors import read_vectors, stimulus_sets, vectors_store
from vlbias.logs import setup_logging
from vlbias.suites.stores import image_files

setup_logging(snakemake.log[0])
spec = snakemake.params.spec
vectors = read_vectors(spec["vectors"], ids=spec.get("ids"), format=spec.get("format"), dim=spec.get("dim"))
stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
images = image_files(snakemake.input.manifest) if "manifest" in snakemake.input.keys() else None
sets = stimulus_sets(stimuli, images)
vectors_store(vectors, sets, snakemake.output[0], snakemake.params.provenance)
logging.getLogger("vectors").info("%d sets, %d stimuli from %d vectors of dimension %d in %s", len(sets),
                                  sum(len(ids) for ids, _ in sets.values()), len(vectors), vectors.dim, spec["vectors"])
