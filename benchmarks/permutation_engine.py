"""Benchmark: the compiled permutation engine against two numpy references: a per-permutation Python
loop (vlbias.stats.reference.p_value) and vectorised numpy (``Generator.permuted`` on blocks of index
rows, the sums of the X side's association scores in one indexing), the fastest plain-numpy way.

All run on the same inputs in this process. The bar: ≥ 20× the loop single-threaded at
|X| = |Y| = 40, |A| = |B| = 21 and 10⁶ samples; both ratios are printed.

    python benchmarks/permutation_engine.py [--samples 1000000] [--ref-samples 100000] [--dim 768]

The references are timed on --ref-samples permutations (their rates do not depend on the count); the
engine on --samples, once on one thread and once on all of numba's threads.
"""

import argparse
import time

import numba
import numpy as np

from vlbias.stats import permutation_test_sw, s_wAB
from vlbias.stats.reference import p_value


def vectorised_p(s, n_x, n_samples, rng, block=10_000):
    """One-sided p of the X side's sum of ``s`` over ``n_samples`` random partitions (the observed one
    counted once, as p_value), ``block`` permutations at a time: numpy throughout, no per-permutation Python."""
    observed, rows = s[:n_x].sum(), np.broadcast_to(np.arange(len(s)), (block, len(s)))
    hits, done = 1, 1
    while done < n_samples:
        m = min(block, n_samples - done)
        hits += int((s[rng.permuted(rows[:m], axis=1)[:, :n_x]].sum(axis=1) >= observed).sum())
        done += m
    return hits / n_samples


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--ref-samples", type=int, default=100_000)
    ap.add_argument("--nt", type=int, default=40)
    ap.add_argument("--na", type=int, default=21)
    ap.add_argument("--dim", type=int, default=768)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(2, args.nt, args.dim))
    A, B = rng.normal(size=(2, args.na, args.dim))
    s = s_wAB(np.concatenate([X, Y]), A, B)
    permutation_test_sw(s[:8], 4, n_samples=10, exact=False)  # compile outside the timing

    t = time.perf_counter()
    p_ref = p_value(X, Y, A, B, args.ref_samples, np.random.default_rng(1))
    ref_rate = args.ref_samples / (time.perf_counter() - t)

    t = time.perf_counter()
    p_vec = vectorised_p(s, args.nt, args.ref_samples, np.random.default_rng(1))
    vec_rate = args.ref_samples / (time.perf_counter() - t)

    rates = {}
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        t = time.perf_counter()
        res = permutation_test_sw(s, args.nt, n_samples=args.samples, seed=1, exact=False, threads=threads)
        rates[threads] = args.samples / (time.perf_counter() - t)

    print(f"inputs: |X|=|Y|={args.nt} |A|=|B|={args.na} dim={args.dim}")
    print(f"per-permutation loop: {ref_rate:14,.0f} permutations/s  ({args.ref_samples:,} samples, p={p_ref:.4f})")
    print(f"vectorised numpy    : {vec_rate:14,.0f} permutations/s  ({args.ref_samples:,} samples, p={p_vec:.4f})")
    for threads, rate in rates.items():
        print(f"engine, {threads} thread(s): {rate:14,.0f} permutations/s  ({args.samples:,} samples, "
              f"p={res.p:.4f} ± {res.p_se:.4f})  {rate / ref_rate:,.1f}x the loop, {rate / vec_rate:,.1f}x vectorised numpy")


if __name__ == "__main__":
    main()
