"""Benchmark: a full specification curve's cost relative to one d (vlbias.robustness; docs/robustness.md).

For a tiny and a base-size open_clip model (random weights: the speed is the real model's; the base one
is ViT-B/32's architecture) on SEAT stimulus files of the shipped config:
- one d:  what ``run_query`` computes for the tests: the model built, their texts encoded into a fresh
          embedding cache, d, the permutation p and the interval of each test (the curve's settings);
- curve:  the same tests along the axes below (every combination; each specification's d, p and
          interval, Holm within it) and R random-init twins at the default, on another fresh cache.
Both after a warm-up (one d of the model on a cache of its own: the imports, numba's compilation and the
first build paid). Printed per model: seconds of each, their ratio, the specifications and twins per
test, the vectors the curve computed (each once: vlbias.robustness.Embedder.computed) and those it would
compute encoding each specification's texts anew (every template of an ensemble, each draw's stimuli).

    python benchmarks/robustness.py [--models tiny base] [--tests weat6 weat7] [--templates photo imagenet]
                                    [--draws 5] [--twins 5] [--threads 2]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from helpers.tiny import TINY_OPEN_CLIP_TEXT  # noqa: E402  (the tests' tiny CLIP with OpenAI's vocabulary)

from vlbias.config import robustness_problems, schema_path  # noqa: E402
from vlbias.io.stimuli import load_stimulus  # noqa: E402
from vlbias.models import build  # noqa: E402
from vlbias.robustness import Embedder, run, templates  # noqa: E402

MODELS = {"tiny": TINY_OPEN_CLIP_TEXT,
          "base": {"adapter": "open_clip", "arch": "ViT-B-32", "weights": "random", "seed": 0, "device": "cpu"}}
STATS = {"seed": 0, "exact": "auto"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--tests", nargs="+", default=["weat6", "weat7"])
    ap.add_argument("--templates", nargs="+", default=["photo", "imagenet"])
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--twins", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    stimuli = [load_stimulus(REPO / "resources/stimuli/seat" / f"{t}.yaml") for t in args.tests]
    curve_settings = {"template": args.templates, "casing": ["lower"], "subsample": {"draws": args.draws},
                      "seeds": [1], "twins": args.twins}
    one_settings = {"subsample": {"draws": 0}}
    for settings in (curve_settings, one_settings):
        assert robustness_problems(settings, schema_path()) == []
    print(f"tests {', '.join(args.tests)}; {args.threads} threads, torch {torch.__version__}")
    print(f"{'model':6} {'one d s':>8} {'curve s':>8} {'ratio':>6} {'specs':>6} {'twins':>6} {'computed':>9} {'anew':>9}")
    for name in args.models:
        entry = MODELS[name]
        with tempfile.TemporaryDirectory() as cache, Embedder(build, cache) as embedder:
            run(stimuli, name, entry, one_settings, STATS, embedder)
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            with Embedder(build, cache) as embedder:
                run(stimuli, name, entry, one_settings, STATS, embedder)
            one = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            with Embedder(build, cache) as embedder:
                curve, twins = run(stimuli, name, entry, curve_settings, STATS, embedder)
            full = time.perf_counter() - start
        specs = len(curve) // len(stimuli)
        rows = pd.concat([curve, twins])
        anew = int(sum(r.n_t + r.n_y + r.n_a + r.n_b for r in rows.itertuples()
                       for _ in templates(r.template)))
        print(f"{name:6} {one:8.1f} {full:8.1f} {full / one:6.1f} {specs:6d} {len(twins) // len(stimuli):6d} "
              f"{sum(embedder.computed.values()):9d} {anew:9d}", flush=True)


if __name__ == "__main__":
    main()
