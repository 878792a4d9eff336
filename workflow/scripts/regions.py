import json
import logging
from pathlib import Path

from vlbias.io.cache import RecordCache
from vlbias.io.fetch import sha256_file
from vlbias.logs import setup_logging
from vlbias.regions import build_recorded
from vlbias.regions.extract import detector_fingerprint, extract_regions, manifest_entries
from vlbias.regions.store import write_person_list
from vlbias.weights import provenance

setup_logging(snakemake.log[0])
manifest = snakemake.input.manifest
# the record's verified files: bua's vocabularies among them
detector, spec, record = build_recorded(f"regions/{snakemake.wildcards.detector}", snakemake.params.spec,
                                        snakemake.input.weights, cache=snakemake.params.cache,
                                        lock_path=snakemake.params.weights_lock, threads=snakemake.params.threads)
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
