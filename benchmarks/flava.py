"""Benchmark: FLAVA (vlbias.models.flava) on CPU, random weights, tiny and FLAVA-sized.

1. Grounded: (caption, image) pairs per second of ``embed`` at levels S and C, at batch 1 and 32,
   on real sentence captions of a grounded stimulus (benchmarks/grounded_embed.py's) paired with a
   pool of ``--images`` distinct generated 640x480 RGB images, cycled (in the grounded suite many
   captions share an image; the adapter processes and encodes each distinct image of a batch once).
2. Masked LM: captions per second of ``mask_logprobs`` (one [MASK]) without an image (text encoder
   and mlm_head) and with one (image, text and multimodal encoders, mmm_text_head), batch 1 and 32.

"base" is FlavaConfig's defaults, facebook/flava-full's architecture (ViT-B/16 at 224 px, a 12-layer
text encoder, a 6-layer multimodal encoder, all 768 wide); "tiny" is the tests' TINY_FLAVA sizes.
The fastest of ``--repeats`` counts (the first pass also warms up each input shape).

    python benchmarks/flava.py [--sizes tiny,base] [--pairs 64,32] [--batch-sizes 1,32] [--images 8]
        [--repeats 2] [--threads N] [--device cpu] [--cases S,C,S/I,lm,lm/I]
"""

import argparse
import os

import numpy as np
from grounded_embed import captions_and_words, timed

from vlbias.models import build
from vlbias.visual import Visual

SIZES = {
    "tiny": {"hidden_size": 32, "projection_dim": 16,
             "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37},
             "image_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                              "intermediate_size": 29, "image_size": 32, "patch_size": 16, "vocab_size": 64},
             "multimodal_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                   "intermediate_size": 41}},
    "base": {},
}
IMAGE_SIZE = (480, 640)


def images(n, rng):
    """n generated images with 4 boxes each, one a person (mask I paints it)."""
    out = []
    for _ in range(n):
        xy = np.sort(rng.random((4, 2, 2)), axis=1)
        out.append(Visual(np.zeros((4, 0), np.float32), np.concatenate([xy[:, 0], xy[:, 1]], axis=1).astype(np.float32),
                          np.array([True, False, False, False]), IMAGE_SIZE,
                          rng.integers(0, 256, (*IMAGE_SIZE, 3), dtype=np.uint8)))
    return out


def rates(encoder, run, n, batch_sizes, repeats):
    """{batch size: items/s} of ``run(n)``; ``run(k)`` handles the first k items."""
    out = {}
    for bs in batch_sizes:
        encoder.batch_size = bs
        run(bs)  # warm-up: each new input shape
        out[bs] = n / min(timed(run, n) for _ in range(repeats))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="tiny,base", type=lambda s: s.split(","))
    ap.add_argument("--pairs", default="64,32", type=lambda s: [int(x) for x in s.split(",")],
                    help="pairs (and captions) per measurement, one number per size")
    ap.add_argument("--batch-sizes", default="1,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--images", type=int, default=8, help="distinct images the pairs cycle through")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cases", default="S,C,S/I,lm,lm/I", type=lambda s: s.split(","),
                    help="grounded S, C, S with mask I; masked LM without (lm) and with an image (lm/I)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}; "
          f"{args.images} distinct {IMAGE_SIZE[1]}x{IMAGE_SIZE[0]} images", flush=True)
    pool = images(args.images, np.random.default_rng(0))
    for size, n in zip(args.sizes, args.pairs):
        encoder = build({"adapter": "flava", "weights": "random", "seed": 0, "device": args.device,
                         "config": SIZES[size]})
        params = sum(p.numel() for p in encoder.model.flava.parameters())
        print(f"flava {size}: FlavaModel {params / 1e6:.1f} M parameters, dim {encoder.dim}", flush=True)
        captions, words = captions_and_words(n)
        regions = [pool[i % len(pool)] for i in range(n)]
        for level, mask in (c for c in (("S", None), ("C", None), ("S", "I")) if "/".join(filter(None, c)) in args.cases):
            def grounded(k, level=level, mask=mask):
                return encoder.embed(captions[:k], regions[:k], level, mask=mask,
                                     words=words[:k] if level == "C" else None)

            got = rates(encoder, grounded, n, args.batch_sizes, args.repeats)
            print(f"  grounded {level}{' mask ' + mask if mask else ''}: "
                  + ", ".join(f"batch {bs}: {r:.1f} pairs/s" for bs, r in got.items()), flush=True)
        masked = [f"The person is carrying a [MASK]. {c}" for c in captions]
        for label, seen in ((label, seen) for case, label, seen in (("lm", "no image (mlm_head)", [None] * n),
                                                                    ("lm/I", "image (mmm_text_head)", regions))
                            if case in args.cases):
            def lm(k, seen=seen):
                return encoder.mask_logprobs(masked[:k], seen[:k])

            got = rates(encoder, lm, n, args.batch_sizes, args.repeats)
            print(f"  masked LM, {label}: " + ", ".join(f"batch {bs}: {r:.1f} captions/s" for bs, r in got.items()),
                  flush=True)

if __name__ == "__main__":
    main()
