import logging
from collections import Counter

from vlbias.images.store import build_image_store
from vlbias.io.fetch import write_manifest
from vlbias.logs import setup_logging
from vlbias.suites.ieat import image_entries

setup_logging(snakemake.log[0])
p = snakemake.params
entries = image_entries(snakemake.input.manifest, p.source, p.mirror, p.cache)
status = build_image_store(entries, snakemake.output.store, workers=snakemake.threads, **p.settings)
write_manifest(snakemake.output.status, status, ["category", "file", "status", "reason", "sha256", "decoder"])
bad = Counter(r["status"] for r in status if r["status"] != "ok")
logging.getLogger("ieat_images").info(
    "iEAT images %s: %d of %d arrived and decoded%s", snakemake.wildcards.store, len(status) - sum(bad.values()),
    len(status), f"; {', '.join(f'{n} {s}' for s, n in bad.items())} — see {snakemake.output.status}" if bad else "")
