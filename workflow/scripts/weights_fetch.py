import logging

from vlbias.logs import setup_logging
from vlbias.weights import fetch, write_record

setup_logging(snakemake.log[0])
log = logging.getLogger("weights_fetch")
p = snakemake.params
record = fetch(p.name, p.spec, cache=p.cache, lock_path=snakemake.input.lock)
write_record(snakemake.output[0], record)
for key, source in record["sources"].items():
    files = source["files"].values()
    log.info("%s, %s: %s%s, %d file(s), %d bytes", p.name, key, source["kind"],
             f" at commit {source['commit']}" if source.get("commit") else "", len(files), sum(f["size"] for f in files))
    if source.get("pinned") is False:  # a URL the config gives no sha256 for: the lock pins what came
        log.warning("%s, %s: no pinned sha256 in the config for %s", p.name, key, source["url"])
