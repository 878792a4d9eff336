"""Benchmark: the grounded embedding jobs' plans, no model run: how full the calls are, how often the
region store is read, and how many ML-EATs the grounded targets compute.

For the Google and COCO jobs of the paper tables (config/config.yaml's stimuli, levels and masks, the
main protocol's encoder options; every image taken as present), per grounded family of the config:

- at each of ``--batch-sizes``: mean pairs per ``embed`` call and the share of pairs in full calls, as
  the job hands them out (vlbias.suites.grounded.jobs ``read_order`` and ``Batches``, the tiny model's
  ``memo_images()``: ``image_memo``, 256; a base model whose image work would pass ``memo_bytes`` keeps
  fewer, BLIP's 72 images: 90.6% full at 128, which gpu_check.py --plan reports). Shape keys are the family's own (``shape_keys`` of a tiny random model of its real
  config class: the token counts of its tokenizer, ``--regions`` regions per image, 480 x 640 pixels);
  the pairs of one key batch alike at any width, so the tiny model's keys are the base model's;
- the store reads per distinct (image, mask I or not): the job reads each (image, labels) once
  (``read_order``); a feed that depends on the authors' batch (VL-BERT's attended padding) first reads
  each role's listed pairs through the job's own reader (``_Visuals``, counted here on stand-in regions).

ML-EAT: the (embedding file, test, level) ML-EATs the grounded ML-EAT jobs compute (one job per embedding
file the table targets read: its tests x the levels), against the distinct ones the targets show (each
target's files x its tests x the levels; GroundedPlan.mleat_counts). Targets: >= 90% of pairs in full calls at
batch 128 for every family; <= 1.05 reads per (image, mask); computed = distinct.

    python benchmarks/grounded_plan.py [--datasets google,coco] [--batch-sizes 32,128] [--regions 36]
        [--families visualbert,...] [--json]

``--json``: the same figures as one JSON object on the last line.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests")]
from helpers.tiny import TINY_BLIP, TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, TINY_VL, tiny_bpe_tokenizer  # noqa: E402

from vlbias.config import load_config  # noqa: E402
from vlbias.models import build  # noqa: E402
from vlbias.suites.grounded import jobs  # noqa: E402
from vlbias.suites.grounded.plan import GroundedPlan  # noqa: E402
from vlbias.suites.grounded.protocol import encoder_options  # noqa: E402
from vlbias.suites.grounded.stimulus import load_grounded_stimulus  # noqa: E402
from vlbias.visual import Visual  # noqa: E402

TINY = {**TINY_VL, "blip": TINY_BLIP, "flava": TINY_FLAVA, "vilt": TINY_VILT, "bridgetower": TINY_BRIDGETOWER}
IMAGE_HW = (480, 640)


def encoders(config, plan, tmp, only=None):
    """{family: a tiny encoder of it with the main protocol's options}, the config's grounded families
    (those of ``only`` where given)."""
    out = {}
    for entry in config["grounded"]["models"].values():
        family = entry["adapter"]
        if family in out or family not in TINY or (only and family not in only):
            continue
        spec = {**TINY[family], **encoder_options(plan.protocols[plan.main_protocol], family, TINY[family].get("config"))}
        if family == "bridgetower":
            spec["tokenizer"] = str(tiny_bpe_tokenizer(Path(tmp, "bpe")))
        out[family] = build(spec)
    return out


def job_groups(stimuli, encoder, levels, masks):
    """The job's groups ((test, level, mask, role): rows, labels, terms) of every image taken as present."""
    combos, _ = jobs.embedding_combos(levels, masks, encoder.supports_image_masking)
    groups = []
    for s in stimuli:
        images = set(s.image_ids())
        for level, mask in combos:
            if jobs.LEVEL_SOURCE[level] not in s.levels:
                continue
            terms = s.levels[jobs.LEVEL_SOURCE[level]]["mask"]["tokens"] if mask == "T" else None
            for role, rows in jobs.plan_pairs(s, level, mask, images, str)[0].items():
                groups.append(jobs._Group(s, level, mask, terms, None, (), role, None, rows, None, [None] * len(rows)))
    return groups


def stand_in(encoder, regions):
    """One image's regions as the family reads them: ``regions`` regions, 480 x 640 pixels."""
    k = regions
    boxes = np.tile(np.float32([[0, 0, 0.5, 0.5]]), (k, 1))
    return Visual(np.zeros((k, encoder.feature_dim or 2048), np.float32), boxes, np.zeros(k, bool), IMAGE_HW,
                  np.zeros((*IMAGE_HW, 3), np.uint8), np.zeros(k, np.int64))


def job_calls(encoder, groups, batch_size, entry):
    """The job's calls, [((level C or not, mask, mask terms), [(caption, word span, image id)])], as its
    ``Batches`` hands them out over ``groups`` (each distinct pair once; every image's regions ``entry``)."""
    batches, out, seen = jobs.Batches(batch_size, encoder.memo_images()), [], set()
    shapes = {}
    for (image, _), members in jobs.read_order(groups):
        for gi, ri in members:
            g = groups[gi]
            caption, _, span = g.rows[ri]
            pair = (g.level, g.mask, caption, image)
            if pair in seen:
                continue
            seen.add(pair)
            if caption not in shapes:
                shapes[caption] = encoder.shape_keys([caption], [entry])[0]
            out += batches.add((g.level == "C", g.mask, g.terms and tuple(g.terms)), shapes[caption],
                               (image, g.mask == "I"), (caption, span, image))
    return out + batches.close()


def calls(encoder, groups, batch_size, entry):
    """[pairs per call] of the job's calls (``job_calls``)."""
    return [len(part) for _, part in job_calls(encoder, groups, batch_size, entry)]


def plan_stimuli(plan, dataset):
    """The stimuli of the main protocol's ``dataset`` job."""
    return [load_grounded_stimulus(REPO / p) for p in plan.embed_stimuli(plan.main_protocol, dataset, None)]


def reads(encoder, groups, entry):
    """Store reads of the job: one per (image, labels), and a batch-dependent feed's reads ahead."""
    if not encoder.batch_dependent:
        return len(jobs.read_order(groups))
    store = SimpleNamespace(ids=set(), skipped={})
    reader = jobs._Visuals(store)
    images = {i for g in groups for _, i, _ in g.rows}
    with mock.patch("vlbias.visual.visual_from_store", lambda *a: entry):
        jobs._authors_feeds(encoder, groups, reader, images, [])
    return reader.reads


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="google,coco")
    ap.add_argument("--batch-sizes", default="32,128")
    ap.add_argument("--regions", type=int, default=36, help="regions per image (the detector's max_boxes)")
    ap.add_argument("--families", help="comma-separated (default: every grounded family of the config)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.chdir(REPO)  # the config's paths are the repository's
    config = load_config("config/config.yaml")
    plan, g = GroundedPlan(config), config["grounded"]
    out = {"plans": {}}
    with tempfile.TemporaryDirectory() as tmp:
        families = encoders(config, plan, tmp, args.families and args.families.split(","))
        print(f"{'dataset':8s} {'family':12s} {'pairs':>7s} " +
              " ".join(f"{'rows/call@' + b:>14s} {'full@' + b:>9s}" for b in args.batch_sizes.split(",")) +
              f" {'reads/(image,mask)':>19s}")
        for dataset in args.datasets.split(","):
            stimuli = plan_stimuli(plan, dataset)
            out["plans"][dataset] = {}
            for family, encoder in families.items():
                groups = job_groups(stimuli, encoder, g["levels"], g["masks"])
                entry = stand_in(encoder, args.regions)
                row = {"batches": {}}
                for b in map(int, args.batch_sizes.split(",")):
                    sizes = calls(encoder, groups, b, entry)
                    row["batches"][str(b)] = {"rows_per_call": round(sum(sizes) / len(sizes), 1),
                                              "full_share": round(sum(s for s in sizes if s == b) / sum(sizes), 4)}
                images = {(i, g_.mask == "I") for g_ in groups for _, i, _ in g_.rows}
                row["reads_per_image_mask"] = round(reads(encoder, groups, entry) / len(images), 3)
                out["plans"][dataset][family] = row
                print(f"{dataset:8s} {family:12s} {sum(sizes):7d} " +
                      " ".join(f"{v['rows_per_call']:14.1f} {v['full_share']:9.1%}" for v in row["batches"].values())
                      + f" {row['reads_per_image_mask']:19.3f}")
    computed, distinct = plan.mleat_counts()
    out["mleat"] = {"computed": computed, "distinct": distinct}
    print(f"ML-EAT of the grounded targets: {computed} computed, {distinct} distinct")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
