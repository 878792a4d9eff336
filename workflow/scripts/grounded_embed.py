import json
import logging
from pathlib import Path

from vlbias.io.cache import RecordCache
from vlbias.io.fetch import read_manifest, sha256_file, write_manifest
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.regions.store import RegionStore
from vlbias.suites.grounded.jobs import MISSING_COLUMNS, cache_fingerprint, embed_tests
from vlbias.suites.grounded.protocol import label_offset
from vlbias.suites.grounded.stimulus import load_grounded_stimulus
from vlbias.weights import localize, provenance, read_record

setup_logging(snakemake.log[0])
w, spec, switches = snakemake.wildcards, snakemake.params.spec, snakemake.params.switches
stimuli = [load_grounded_stimulus(p, caption_indices=switches["caption_indices"]) for p in snakemake.input.stimuli]
# the verified files of the weights record, offline: a compute node needs no network
record = read_record(snakemake.input.weights)
spec = localize(f"grounded/{w.model}", spec, record, cache=snakemake.params.cache,
                lock_path=snakemake.params.weights_lock)
encoder = build({**spec, "threads": snakemake.params.threads})
info = encoder.info
with RegionStore(snakemake.input.regions) as store, \
        RecordCache(Path(snakemake.params.cache, "embeddings", cache_fingerprint(encoder))) as cache:
    dropped = embed_tests(
        stimuli, encoder, store, snakemake.output.h5, snakemake.params.levels, snakemake.params.masks,
        manifest_rows=read_manifest(snakemake.input.manifest), cache=cache, image_mask=switches["image_mask"],
        mask_labels=spec.get("mask_region_labels"), label_offset=label_offset(switches, spec["adapter"], store.attrs),
        attrs={"protocol": w.protocol, "switches": json.dumps(switches, sort_keys=True), "dataset": w.dataset,
               "model": w.model, "column": spec["column"], "model_id": info["model_id"] or "",
               "revision": info["revision"] or "", "commit": info["commit"] or "", "weights": info["weights"],
               "weights_sha256": info["weights_sha256"] or "", "detector": snakemake.params.region_store,
               "region_store": snakemake.input.regions, "region_store_sha256": sha256_file(snakemake.input.regions),
               "region_weights": str(store.attrs.get("weights", "")),
               "weights_record": json.dumps(provenance(record), sort_keys=True)})
write_manifest(snakemake.output.missing, dropped, MISSING_COLUMNS)
logging.getLogger("grounded_embed").info("%s: %d (caption, image) pairs left out (listed in %s)",
                                         snakemake.output.h5, len(dropped), snakemake.output.missing)
