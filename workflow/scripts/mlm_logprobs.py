import json
import logging
from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.io.fetch import write_manifest
from vlbias.logs import setup_logging
from vlbias.suites.mlm.probability import load_visuals
from vlbias.suites.mlm.scores import logprob_table, write_logprob_table
from vlbias.suites.mlm.stimuli import load_mlm_stimulus, read_image_manifest
from vlbias.models import build
from vlbias.regions.store import RegionStore
from vlbias.weights import localize, provenance, read_record

setup_logging(snakemake.log[0])
log = logging.getLogger("mlm_logprobs")
case_study, entities = (load_mlm_stimulus(p) for p in snakemake.input.stimuli)
stimuli = list({s.id: s for s in (case_study, entities)}.values())  # the same file twice is one stimulus

# the verified files of the weights record, offline: a compute node needs no network
record = read_record(snakemake.input.weights)
spec = localize(f"mlm/{snakemake.wildcards.model}", snakemake.params.spec, record, cache=snakemake.params.cache,
                lock_path=snakemake.params.weights_lock)
model = build({**spec, "threads": snakemake.params.threads})

# the case study's images: every manifest row gets a status; only images with regions are queried
status, visuals, images = [], {}, None
if "manifest" in snakemake.input.keys():
    rows = read_image_manifest(snakemake.input.manifest, [e.entity for e in case_study.entities])
    usable = [r.id for r in rows if r.status == "ok"]
    missing = {}
    if usable:
        # a model that computes region features itself (VL-BERT end to end) reads the pixels too
        paths = {r.id: r.path for r in rows if r.status == "ok"} if getattr(model, "needs_pixels", False) else None
        with RegionStore(snakemake.input.store) as store:
            visuals, missing = load_visuals(store, usable, paths)
    for r in rows:
        used = r.id in visuals
        status.append({"id": r.id, "entity": r.entity, "gender": r.gender,
                       "status": "used" if used else r.status if r.status != "ok" else "no regions",
                       "reason": "" if used else missing.get(r.id, r.reason)})
    images = {case_study.id: [r for r in rows if r.id in visuals]}

with RecordCache(Path(snakemake.params.cache, "mlm", fingerprint(model.info))) as cache:
    df = logprob_table(model, stimuli, images, visuals, cache)
info = json.dumps(model.info, sort_keys=True, default=str)
write_logprob_table(snakemake.output.logprobs, df,
                    comments=[f"model: {snakemake.wildcards.model}", f"info: {info}",
                              f"weights: {json.dumps(provenance(record), sort_keys=True)}",
                              "logprob: ln P([MASK] = entity | caption, image); multi-piece entities by the chain rule"])
note = ("text-only model: no images" if snakemake.params.text_only else
        "no image manifest configured (mlm: images)" if "manifest" not in snakemake.input.keys() else
        f"{sum(s['status'] == 'used' for s in status)} of {len(status)} images used")
write_manifest(snakemake.output.images, status, ["id", "entity", "gender", "status", "reason"], comments=[note])
log.info("%s: %d queries; %s", snakemake.wildcards.model, len(df), note)
