import logging
from pathlib import Path

from vlbias.io.cache import RecordCache
from vlbias.io.fetch import read_manifest, write_manifest
from vlbias.logs import setup_logging
from vlbias.models import build_recorded
from vlbias.regions.store import RegionStore
from vlbias.suites.grounded.jobs import MISSING_COLUMNS, cache_fingerprint, embed_tests, store_attrs
from vlbias.suites.grounded.protocol import label_offset
from vlbias.suites.grounded.stimulus import load_grounded_stimulus

setup_logging(snakemake.log[0])
w, switches = snakemake.wildcards, snakemake.params.switches
stimuli = [load_grounded_stimulus(p, caption_indices=switches["caption_indices"]) for p in snakemake.input.stimuli]
encoder, spec, record = build_recorded(f"grounded/{w.model}", snakemake.params.spec, snakemake.input.weights,
                                       cache=snakemake.params.cache, lock_path=snakemake.params.weights_lock,
                                       threads=snakemake.params.threads)
with RegionStore(snakemake.input.regions) as store, \
        RecordCache(Path(snakemake.params.cache, "embeddings", cache_fingerprint(encoder))) as cache:
    dropped = embed_tests(
        stimuli, encoder, store, snakemake.output.h5, snakemake.params.levels, snakemake.params.masks,
        manifest_rows=read_manifest(snakemake.input.manifest), cache=cache, image_mask=switches["image_mask"],
        mask_labels=spec.get("mask_region_labels"), label_offset=label_offset(switches, spec["adapter"], store.attrs),
        attrs=store_attrs((w.protocol, w.dataset, w.model), spec["column"], switches, encoder.info, record,
                          snakemake.params.region_store, snakemake.input.regions, store.attrs.get("weights", "")))
write_manifest(snakemake.output.missing, dropped, MISSING_COLUMNS)
logging.getLogger("grounded_embed").info("%s: %d (caption, image) pairs left out (listed in %s)",
                                         snakemake.output.h5, len(dropped), snakemake.output.missing)
