"""Benchmark: the grounded embedding stage, and the whole grid of grounded tests through the engine.

1. Embedding: (caption, image) pairs per second of each VL adapter (visualbert, lxmert, vilbert,
   vlbert, and blip of the extended tables) with random weights, tiny (hidden 32, 2 layers) and
   base-sized (the published architectures: the config classes' default sizes, 768 hidden,
   VisualBERT 12 layers, LXMERT 9/5/5 layers, ViLBERT bert_base_6layer_6conect: 12 language
   layers, 6 vision layers of 1024, 6 co-attention layers; VL-BERT base with precomputed features:
   12 layers over caption and boxes; BLIP: BlipConfig's, blip-itm-base's ViT-B/16 at 384 pixels
   under a 12-layer text encoder with cross-attention), on real captions of a grounded stimulus
   (sentence level) paired with images of 36 regions of 2048-d random features (and boxes; VL-BERT
   adds the whole-image box, ViLBERT the global token; BLIP reads the 640x480 RGB pixels instead,
   through its processor, each distinct image of a batch once: 16 images cycle over the pairs),
   levels S ([CLS]; BLIP [ENC]) and C (first sub-token of a contextual word), at each of
   ``--batch-sizes``, with the speed-up over batch size 1. The fastest of ``--repeats`` (the
   first pass also warms up each new input shape).
2. Statistics: every (test, model, level, experiment[, mask]) of the stimulus files, i.e. all
   models x the levels of config/config.yaml (grounded.levels, W/S/C) x experiments 1, 2, 3, and
   3-masked with T (all models) and I (all but VisualBERT) at the levels grounded.masks lists (the
   paper: S), on random embeddings with each test's real set sizes, through vlbias.stats.grounded
   with ``n_samples`` from the config (stats.n_samples): total seconds and tests/s (numba's
   compile time is excluded by a warm-up test).

    python benchmarks/grounded_embed.py [--sizes tiny,base] [--batch-sizes 1,8,32] [--pairs 256,32]
        [--repeats 2] [--threads N] [--device cpu] [--datasets google,coco,concap] [--n-samples N]
        [--models visualbert,lxmert,vilbert,vlbert,blip] [--only embed|grid]
"""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import yaml

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.tokenization import find_word
from vlbias.visual import Visual
from vlbias.stats.grounded import grounded_test
from vlbias.suites.grounded.stimulus import ROLES, load_grounded_stimulus

REPO = Path(__file__).resolve().parents[1]

SIZES = {
    "tiny": {
        "visualbert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37},
        "lxmert": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 37, "l_layers": 2,
                   "x_layers": 1, "r_layers": 1, "num_qa_labels": 10},
        "vilbert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
                    "v_hidden_size": 32, "v_num_hidden_layers": 2, "v_num_attention_heads": 2,
                    "v_intermediate_size": 37, "bi_hidden_size": 32, "bi_num_attention_heads": 2,
                    "v_biattention_id": [0, 1], "t_biattention_id": [0, 1]},
        "vlbert": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37},
        "blip": {"text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                 "intermediate_size": 37, "encoder_hidden_size": 32},
                 "vision_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                   "intermediate_size": 37, "image_size": 64, "patch_size": 16}},
    },
    # the config classes' defaults (+ VisualBERT's 2048-d features)
    "base": {"visualbert": {}, "lxmert": {}, "vilbert": {}, "vlbert": {}, "blip": {}},
}
# the masks each model takes (VisualBERT was never pre-trained with masked regions: no I; BLIP's I: the pixel fill)
MODELS = {"visualbert": ("T",), "lxmert": ("T", "I"), "vilbert": ("T", "I"), "vlbert": ("T", "I"), "blip": ("T", "I")}
LEVELS = {"W": "word", "S": "sentence", "C": "sentence"}  # embedding level -> stimulus level
CAPTIONS_FROM = REPO / "resources/stimuli/grounded/google/weat6.yaml"
N_REGIONS, FEATURE_DIM, GRID_DIM = 36, 2048, 768
IMAGE_SIZE = (480, 640)  # (height, width): VL-BERT reads its boxes in pixels


def images(n, rng):
    """n images of N_REGIONS random regions: 2048-d features, boxes inside the image, some persons;
    and random RGB pixels, for a model that reads them (BLIP)."""
    out = []
    for _ in range(n):
        xy = np.sort(rng.random((N_REGIONS, 2, 2)), axis=1)
        boxes = np.concatenate([xy[:, 0], xy[:, 1]], axis=1).astype(np.float32)  # x1, y1, x2, y2
        out.append(Visual(features=rng.random((N_REGIONS, FEATURE_DIM), dtype=np.float32) * 4,
                          boxes_norm=boxes, is_person=rng.random(N_REGIONS) < 0.2, image_size=IMAGE_SIZE,
                          image=rng.integers(0, 256, (*IMAGE_SIZE, 3), dtype=np.uint8)))
    return out


def captions_and_words(n):
    """n sentence captions of a real stimulus (cycled), each with the first contextual word it contains."""
    stimulus = load_grounded_stimulus(CAPTIONS_FROM)
    level = stimulus.levels["sentence"]
    pairs = []
    for caption in (c for s in "XYAB" for c in level["captions"][s]):
        for word in level["contextual_words"]:
            try:
                find_word(caption, word)
            except InputError:
                continue
            pairs.append((caption, word))
            break
    pairs = [pairs[i % len(pairs)] for i in range(n)]
    return [c for c, _ in pairs], [w for _, w in pairs]


def bench_embed(args):
    rng = np.random.default_rng(0)
    pool = images(16, rng)
    rows = []
    for size, n in zip(args.sizes, args.pairs):
        captions, words = captions_and_words(n)
        regions = [pool[i % len(pool)] for i in range(n)]
        for family in args.models:
            t = time.perf_counter()
            encoder = build({"adapter": family, "weights": "random", "seed": 0, "device": args.device,
                             "config": SIZES[size][family]})
            built = time.perf_counter() - t
            params = sum(p.numel() for p in encoder.model.parameters())
            print(f"{family} {size}: {params / 1e6:.1f} M parameters, dim {encoder.dim}, built in {built:.1f} s",
                  flush=True)
            for level in ("S", "C"):
                kwargs = {"words": words} if level == "C" else {}
                base = None
                for bs in args.batch_sizes:
                    encoder.batch_size = bs
                    encoder.embed(captions[:bs], regions[:bs], level, **({"words": words[:bs]} if kwargs else {}))
                    best = min(timed(encoder.embed, captions, regions, level, **kwargs) for _ in range(args.repeats))
                    rate = n / best
                    base = rate if bs == 1 else base
                    rows.append({"model": family, "size": size, "level": level, "batch": bs, "pairs": n,
                                 "seconds": best, "pairs_s": rate, "speedup": rate / base if base else float("nan")})
                    print(f"  {level} batch {bs:>3}: {rate:9.1f} pairs/s ({best:.2f} s for {n})"
                          + (f", x{rate / base:.2f} vs batch 1" if base and bs != 1 else ""), flush=True)
            del encoder
    return rows


def timed(fn, *a, **kw):
    t = time.perf_counter()
    fn(*a, **kw)
    return time.perf_counter() - t


def grid_cells(datasets, levels, masks):
    """(test, model, level, experiment, mask, set sizes) of every grounded test: experiments 1, 2, 3
    at each of ``levels``, 3-masked with each mask a model takes at the levels ``masks`` lists."""
    cells = []
    for dataset in datasets:
        for path in sorted((REPO / "resources/stimuli/grounded" / dataset).glob("*.yaml")):
            stimulus = load_grounded_stimulus(path)
            for level in levels:
                if LEVELS[level] not in stimulus.levels:
                    continue
                sizes = tuple(len(stimulus.pairs(LEVELS[level], r)) for r in ROLES)
                for model, model_masks in MODELS.items():
                    runs = [("1", None), ("2", None), ("3", None)]
                    runs += [("3-masked", m) for m in model_masks if level in masks.get(m, [])]
                    cells += [(f"{dataset}/{stimulus.id}", model, level, e, m, sizes) for e, m in runs]
    return cells


def bench_grid(args):
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    n_samples = args.n_samples or config["stats"]["n_samples"]
    grounded = config.get("grounded") or {}
    levels, masks = grounded.get("levels", list(LEVELS)), grounded.get("masks", {"T": ["S"], "I": ["S"]})
    cells = grid_cells(args.datasets, levels, masks)
    rng = np.random.default_rng(0)

    def run(cell):
        sets = [rng.standard_normal((n, GRID_DIM), dtype=np.float32) for n in cell[5]]
        t = time.perf_counter()
        grounded_test(cell[3], *sets, n_samples=n_samples, seed=0, exact="auto")
        return time.perf_counter() - t

    run(cells[0]), run(next(c for c in cells if c[3] == "3"))  # numba compiles its kernels once
    seconds = {}
    for cell in cells:
        seconds[cell[3]] = seconds.get(cell[3], 0.0) + run(cell)
    total = sum(seconds.values())
    sizes = [sum(c[5][:2]) for c in cells]
    print(f"grid: {len(cells)} tests ({len({c[0] for c in cells})} stimulus files, {len(MODELS)} models, "
          f"levels {'/'.join(levels)}, experiments 1, 2, 3, 3-masked {masks}; |X|+|Y| {min(sizes)}..{max(sizes)}), "
          f"n_samples {n_samples}, dim {GRID_DIM}: {total:.1f} s, {len(cells) / total:.1f} tests/s", flush=True)
    for experiment, s in seconds.items():
        n = sum(c[3] == experiment for c in cells)
        print(f"  experiment {experiment}: {n} tests, {s:.1f} s ({n / s:.1f} tests/s)")
    return {"tests": len(cells), "seconds": total, "tests_s": len(cells) / total, "n_samples": n_samples}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,base", type=lambda s: s.split(","))
    ap.add_argument("--pairs", default="256,32", type=lambda s: [int(x) for x in s.split(",")],
                    help="pairs embedded per measurement, one number per size")
    ap.add_argument("--batch-sizes", default="1,8,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--models", default=",".join(MODELS), type=lambda s: s.split(","),
                    help="adapters whose embedding speed is measured")
    ap.add_argument("--repeats", type=int, default=2,
                    help="the fastest counts: on a shared machine, a busy core stalls every multi-threaded op")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--datasets", default="google,coco,concap", type=lambda s: s.split(","))
    ap.add_argument("--n-samples", type=int, default=None, help="default: stats.n_samples of config/config.yaml")
    ap.add_argument("--only", choices=["embed", "grid"])
    args = ap.parse_args(argv)
    if len(args.pairs) != len(args.sizes) or set(args.sizes) - set(SIZES):
        ap.error(f"--sizes from {sorted(SIZES)}, and one --pairs number per size")
    if args.batch_sizes[0] != 1:
        args.batch_sizes = [1, *args.batch_sizes]  # the reference
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
          f"{N_REGIONS} regions x {FEATURE_DIM}-d per image", flush=True)
    if args.only != "grid":
        bench_embed(args)
    if args.only != "embed":
        bench_grid(args)


if __name__ == "__main__":
    main()
