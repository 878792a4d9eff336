import json
import logging
from pathlib import Path

from vlbias.io.cache import RecordCache, fingerprint
from vlbias.io.fetch import write_manifest
from vlbias.logs import setup_logging
from vlbias.suites.mlm.probability import IMAGE_STATUS_COLUMNS, case_study_images
from vlbias.suites.mlm.scores import logprob_table, write_logprob_table
from vlbias.suites.mlm.stimuli import load_mlm_stimulus, read_image_manifest
from vlbias.models import build_recorded
from vlbias.weights import provenance

setup_logging(snakemake.log[0])
log = logging.getLogger("mlm_logprobs")
case_study, entities = (load_mlm_stimulus(p) for p in snakemake.input.stimuli)
stimuli = list({s.id: s for s in (case_study, entities)}.values())  # the same file twice is one stimulus

model, _, record = build_recorded(f"mlm/{snakemake.wildcards.model}", snakemake.params.spec, snakemake.input.weights,
                                  cache=snakemake.params.cache, lock_path=snakemake.params.weights_lock,
                                  threads=snakemake.params.threads)

# the case study's images: every manifest row gets a status; only images with regions are queried
status, visuals, images = [], {}, None
if "manifest" in snakemake.input.keys():
    rows = read_image_manifest(snakemake.input.manifest, [e.entity for e in case_study.entities])
    status, visuals, used = case_study_images(rows, snakemake.input.store, getattr(model, "needs_pixels", False))
    images = {case_study.id: used}

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
write_manifest(snakemake.output.images, status, IMAGE_STATUS_COLUMNS, comments=[note])
log.info("%s: %d queries; %s", snakemake.wildcards.model, len(df), note)
