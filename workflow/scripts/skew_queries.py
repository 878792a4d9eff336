from vlbias.io.fetch import fetch, read_manifest
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
pins = {(r["source"], r["path"]): r["sha256"] for r in read_manifest(snakemake.input.manifest, required=("source", "path", "sha256"))}
fetch(p.source, p.spec["path"], snakemake.output[0], sha256=pins.get((p.spec["source"], p.spec["path"])), mirror=p.mirror)
