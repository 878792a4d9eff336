"""Benchmark: ``precision: bf16`` (torch.autocast to bfloat16) against fp32, per model adapter: the
speed of the adapter's own call and how far its association effect sizes move.

For each adapter of benchmarks/gpu_check.py (the same random-weight entries, tiny and base sizes,
the same inputs: grounded (caption, image) pairs at level S, images, texts; detectors run fp32 only)
the fp32 and the bf16 entry embed n items on the device; reported per adapter:

    fp32 it/s, bf16 it/s, speed-up   the adapter's call after a warm-up, fastest of --repeats
    max |Δ|, min cos                 bf16 vectors against fp32 (bert_mlm: its log-probabilities)
    |Δd| median, max                 the effect size d of --tests random WEATs on the vectors (sets of
                                     8 items drawn without replacement for X, Y, A, B; vlbias.stats.weat),
                                     fp32 against bf16 (not for bert_mlm: its rows are log-probabilities)

    python benchmarks/precision.py [--sizes tiny,base] [--only visualbert,...] [--n 32] [--tests 200]
        [--repeats 2] [--threads 2] [--device cpu]

bf16 pays where the hardware computes in it: CPUs with AVX-512 BF16 or AMX, GPUs; elsewhere
autocast converts and is slower.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import CASES, call, compare, entry, inputs  # noqa: E402  (the benchmarks share their cases)


def timed(repeats, fn, *args):
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - started)
    return best, out


def delta_d(a, b, tests, seed=0):
    """|d(a) - d(b)| of ``tests`` random WEATs (X, Y, A, B: 8 rows each, disjoint) on two vector sets."""
    from vlbias.stats.weat import effect_size

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(tests):
        x, y, p, q = np.split(rng.permutation(len(a))[:32], 4)
        out.append(abs(effect_size(a[x], a[y], a[p], a[q]) - effect_size(b[x], b[y], b[p], b[q])))
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,base")
    ap.add_argument("--only", help="comma-separated adapters (default: every model adapter)")
    ap.add_argument("--n", type=int, default=32, help="items per call (at least 32: four sets of 8)")
    ap.add_argument("--tests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import torch

    from vlbias.models import build

    torch.set_num_threads(args.threads)
    names = args.only.split(",") if args.only else [k for k, v in CASES.items() if v[0] != "detector"]
    print(f"device {args.device}, {args.threads} threads, torch {torch.__version__}, n {args.n}, "
          f"{args.tests} WEATs of 4 x 8 items")
    print(f"{'adapter':<15} {'size':<5} {'fp32 it/s':>10} {'bf16 it/s':>10} {'speed-up':>8} {'max|Δ|':>9} "
          f"{'min cos':>9} {'|Δd| med':>9} {'|Δd| max':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            for name in names:
                kind = CASES[name][0]
                fp32 = build({**entry(name, size, args.device, tmp=tmp), "threads": args.threads})
                data = inputs(name, size, fp32, args.n)
                call(name, fp32, data)  # warm-up
                t32, a = timed(args.repeats, call, name, fp32, data)
                del fp32
                bf16 = build(entry(name, size, args.device, "bf16", tmp=tmp))
                call(name, bf16, data)
                t16, b = timed(args.repeats, call, name, bf16, data)
                del bf16
                c = compare(a, b)
                d = delta_d(a, b, args.tests) if kind != "mlm" else None
                dd = f"{np.median(d):>9.4f} {d.max():>9.4f}" if d is not None else f"{'-':>9} {'-':>9}"
                print(f"{name:<15} {size:<5} {args.n / t32:>10.2f} {args.n / t16:>10.2f} {t32 / t16:>8.2f} "
                      f"{c['max_abs']:>9.2e} {c['min_cos']:>9.6f} {dd}", flush=True)


if __name__ == "__main__":
    main()
