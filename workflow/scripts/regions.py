import json
import logging
from pathlib import Path

from vlbias.io.cache import RecordCache
from vlbias.io.fetch import sha256_file
from vlbias.logs import setup_logging
from vlbias.regions import build
from vlbias.regions.extract import detector_fingerprint, extract_regions, manifest_entries
from vlbias.regions.store import write_person_list
from vlbias.weights import localize, provenance, read_record

setup_logging(snakemake.log[0])
spec, manifest = snakemake.params.spec, snakemake.input.manifest
# the verified files of the weights record (bua's vocabularies among them), offline: a compute
# node needs no network
record = read_record(snakemake.input.weights)
spec = localize(f"regions/{snakemake.wildcards.detector}", spec, record, cache=snakemake.params.cache,
                lock_path=snakemake.params.weights_lock)
detector = build({**spec, "threads": snakemake.params.threads})
with RecordCache(Path(snakemake.params.cache, "regions", detector_fingerprint(detector))) as cache:
    summary = extract_regions(
        manifest_entries(manifest), detector, snakemake.output.store, batch_size=spec["batch_size"],
        workers=snakemake.threads, cache=cache,
        provenance={"detector": snakemake.wildcards.detector, "dataset": snakemake.wildcards.dataset,
                    "manifest": manifest, "manifest_sha256": sha256_file(manifest),
                    "weights_record": json.dumps(provenance(record), sort_keys=True)},
    )
logging.getLogger("vlbias").info("%s: %d images (%d from the cache), %d regions, %d skipped in %.1f s (%.1f s in "
                                 "the detector)", snakemake.output.store, summary["n_images"], summary["n_cached"],
                                 summary["n_regions"], summary["n_skipped"], summary["seconds"],
                                 summary["detect_seconds"])
write_person_list(snakemake.output.store, snakemake.output.persons)
