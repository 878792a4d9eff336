"""Benchmark: retrieval skew at scale — 10,000 labelled images × 100 queries (a FairFace validation split is
10,954 images; Berg et al.'s prompt array ~700 queries), random unit vectors of a joint space (--dim).

1. The similarity product: the (queries, images) cosine matrix, once per (model, set), in seconds.
2. The measures (vlbias.stats.skew.skew_measures: one sort per query, MaxSkew, MinSkew and NDKL of
   every query at each k from one cumulative count), vectorised: seconds, and per (query, k) as a ratio
   to the product.
3. The null and the interval (skew_summary): seconds per label shuffle and per image resample (both
   reuse the one sort), and the whole summary at --n-permutations, --n-bootstrap.

    python benchmarks/skew.py [--images 10000] [--queries 100] [--dim 512] [--values 7]
                              [--k 10 100 1000] [--n-permutations 100] [--n-bootstrap 100]
"""

import argparse
import time

import numpy as np

from vlbias.stats.skew import cosine_scores, skew_measures, skew_summary


def timed(f, repeats=3):
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--values", type=int, default=7, help="attribute values (FairFace race: 7)")
    p.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--n-permutations", type=int, default=100)
    p.add_argument("--n-bootstrap", type=int, default=100)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.images, args.dim)).astype(np.float32)
    texts = rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    labels = rng.integers(0, args.values, args.images)

    product, scores = timed(lambda: cosine_scores(texts, images))
    measures, _ = timed(lambda: skew_measures(scores, labels, args.values, args.k))
    per = measures / (args.queries * len(args.k))
    print(f"{args.images} images x {args.queries} queries, dim {args.dim}, {args.values} values, k {args.k}")
    print(f"similarity product      {product:8.3f} s")
    print(f"measures, all (q, k)    {measures:8.3f} s   per (query, k) {1e3 * per:.3f} ms = "
          f"{per / product:.4f} x the product")
    shuffles, _ = timed(lambda: skew_summary(scores, labels, args.values, args.k, n_permutations=10, n_bootstrap=0),
                        repeats=1)
    resamples, _ = timed(lambda: skew_summary(scores, labels, args.values, args.k, n_permutations=0,
                                              n_bootstrap=10), repeats=1)
    print(f"per label shuffle       {(shuffles - measures) / 10:8.3f} s   per image resample "
          f"{(resamples - measures) / 10:8.3f} s")
    total, _ = timed(lambda: skew_summary(scores, labels, args.values, args.k, n_permutations=args.n_permutations,
                                          n_bootstrap=args.n_bootstrap), repeats=1)
    print(f"summary ({args.n_permutations} shuffles, {args.n_bootstrap} resamples) {total:8.2f} s")


if __name__ == "__main__":
    main()
