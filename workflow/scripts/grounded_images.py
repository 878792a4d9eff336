import logging

from vlbias.images.acquire import (FAILURE_COLUMNS, STATUS_COLUMNS, SUMMARY_COLUMNS, acquire, arrived, failures,
                                   summarize)
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
tests = set(p.tests)
rows = [r for r in read_manifest(snakemake.input.manifest) if r["test"] in tests]
settings = dict(p.download)  # keys left out take acquire()'s defaults
if "max_mb" in settings:
    settings["max_bytes"] = int(settings.pop("max_mb") * 2**20)
# duplicates are marked across the whole dataset: the first image with a content keeps it
status = acquire(rows, p.cache, mirror=p.mirror, mirror_layout=p.mirror_layout, **settings)
write_manifest(snakemake.output.failures, failures(status), FAILURE_COLUMNS)
write_manifest(snakemake.output.summary, summarize(status), SUMMARY_COLUMNS)
write_manifest(snakemake.output.manifest, status, STATUS_COLUMNS)
logging.getLogger("grounded_images").info("grounded images %s: %s", snakemake.wildcards.dataset,
                                          arrived(status, snakemake.output.failures))
