import logging

from vlbias.images.acquire import FAILURE_COLUMNS, STATUS_COLUMNS, acquire, arrived, failures
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
p, test = snakemake.params, snakemake.wildcards.test
rows = [r for r in read_manifest(snakemake.input.manifest) if r["test"] == test]
settings = dict(p.download)  # keys left out take acquire()'s defaults
if "max_mb" in settings:
    settings["max_bytes"] = int(settings.pop("max_mb") * 2**20)
status = acquire(rows, p.cache, mirror=p.mirror, mirror_layout=p.mirror_layout, **settings)
write_manifest(snakemake.output.failures, failures(status), FAILURE_COLUMNS)
write_manifest(snakemake.output.status, status, STATUS_COLUMNS)
logging.getLogger("grounded_images").info("%s: %s", test, arrived(status))
