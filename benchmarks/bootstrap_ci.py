"""Benchmark: the bootstrap confidence interval of d — its cost on a table, and its coverage.

1. Cost: the BCa interval (--n-boot replicates) of every (test, model) of the iEAT paper's three
   tables, on random embeddings of the set sizes the paper prints (|X| = |Y| = n_t,
   |A| = |B| = n_a, --dim): total seconds and per test.
2. Coverage, BCa against the percentile interval: --reps replications of Gaussian X, Y, A, B
   (dimension 16, X drawn towards A's axis and Y towards B's with strength k, A and B around
   their own axis with strength 1.5) for several set sizes and effects; the share of intervals
   holding the population d (from 200,000 draws per population; see tests/stats/test_bootstrap.py), and how often
   the interval lies entirely above it. Nominal 95 %.

    python benchmarks/bootstrap_ci.py [--n-boot 10000] [--reps 400] [--boot-reps 2000] [--dim 1536]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from vlbias.stats.bootstrap import cosines, effect_size_ci, effect_size_ci_cos

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from helpers.stats import gaussian_sets, population_d  # noqa: E402  (one simulation for both)

DESIGNS = [(8, 8, 8, 8), (20, 20, 20, 20), (40, 40, 21, 21), (6, 6, 55, 55), (10, 10, 5, 5)]
EFFECTS = [0.0, 0.5, 1.5]


def cost(n_boot, dim):
    published = pd.read_csv(REPO / "resources/published/ieat.tsv", sep="\t", comment="#")
    rng = np.random.default_rng(0)
    sets = [gaussian_sets(rng, (r.n_t, r.n_t, r.n_a, r.n_a), [np.zeros(dim)] * 4) for r in published.itertuples()]
    effect_size_ci(*sets[0], n_boot=10)  # warm up outside the timing
    t = time.perf_counter()
    for s in sets:
        effect_size_ci(*s, n_boot=n_boot, seed=0)
    total = time.perf_counter() - t
    print(f"cost: BCa, {n_boot:,} replicates, {len(sets)} iEAT (test, model) set sizes, dim {dim}: "
          f"{total:.2f} s in all, {1e3 * total / len(sets):.0f} ms per test")


def coverage(reps, n_boot):
    dim = 16
    e = np.eye(dim)
    print(f"coverage at 95 % over {reps} replications ({n_boot:,} replicates each): covered / interval above d_pop")
    print(f"{'|X|,|Y|,|A|,|B|':>16} {'k':>4} {'d_pop':>6} {'mean d':>7}   {'BCa':>12}   {'percentile':>12}")
    for sizes in DESIGNS:
        for k in EFFECTS:
            means = (k * e[0], k * e[1], e[0] * 1.5, e[1] * 1.5)
            d_pop = population_d(means, sizes[0] / (sizes[0] + sizes[1]), np.random.default_rng(123))
            rng = np.random.default_rng(7)
            hits = {"bca": [0, 0], "percentile": [0, 0]}
            ds = []
            for r in range(reps):
                sets = gaussian_sets(rng, sizes, means)
                C = cosines(*sets)
                s = C[:, : sizes[2]].mean(1) - C[:, sizes[2] :].mean(1)
                d = (s[: sizes[0]].mean() - s[sizes[0] :].mean()) / s.std(ddof=1)
                ds.append(d)
                for method, h in hits.items():
                    ci = effect_size_ci_cos(C, sizes, d, n_boot=n_boot, seed=r, method=method)
                    h[0] += ci.low <= d_pop <= ci.high
                    h[1] += d_pop < ci.low
            cells = "   ".join(f"{h[0] / reps:5.3f} / {h[1] / reps:4.3f}" for h in hits.values())
            print(f"{','.join(map(str, sizes)):>16} {k:4.1f} {d_pop:6.3f} {np.mean(ds):7.3f}   {cells}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-boot", type=int, default=10_000, help="replicates per interval in the cost part")
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--reps", type=int, default=400, help="replications per design in the coverage part")
    ap.add_argument("--boot-reps", type=int, default=2000, help="replicates per interval in the coverage part")
    args = ap.parse_args()
    cost(args.n_boot, args.dim)
    coverage(args.reps, args.boot_reps)


if __name__ == "__main__":
    main()
