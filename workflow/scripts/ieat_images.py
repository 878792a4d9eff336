import logging

from vlbias.images.store import build_image_store
from vlbias.io.fetch import write_manifest
from vlbias.logs import setup_logging
from vlbias.suites.ieat import image_entries

setup_logging(snakemake.log[0])
p = snakemake.params
entries = image_entries(snakemake.input.manifest, p.source, p.mirror, p.cache)
status = build_image_store(entries, snakemake.output.store, workers=snakemake.threads, **p.settings)
write_manifest(snakemake.output.status, status, ["category", "file", "status", "reason", "sha256", "decoder"])
ok = sum(r["status"] == "ok" for r in status)
logging.getLogger("ieat_images").info("%d of %d images arrived and decoded", ok, len(status))
