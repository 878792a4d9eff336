"""Specificity of the permutation test (Steed & Caliskan 2021, Section 6).

Pool X∪Y∪A∪B, split it at random into sets of the original sizes many times, and run the
test on each split. No association was planted, so the fraction with p < α is the
false-positive rate at α; a calibrated test keeps it near α.
"""

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.stats.permutation import permutation_test_sw
from vlbias.stats.weat import _check, _unit, serial_blas

if TYPE_CHECKING:
    from vlbias.logs import Progress


def random_partition_pvalues(X: ArrayLike, Y: ArrayLike, A: ArrayLike, B: ArrayLike, n_tests: int = 1000,
                             n_samples: int = 10_000, seed: int = 0, threads: int | None = None,
                             progress: "Progress | None" = None) -> NDArray[np.float64]:
    """p-values of ``n_tests`` tests on random re-partitions of X∪Y∪A∪B (reproducible by seed);
    ``progress`` (vlbias.logs.Progress) advances by test."""
    sets = [_check(name, M) for name, M in zip("XYAB", (X, Y, A, B))]
    if len({M.shape[1] for M in sets}) != 1:
        raise ValueError("sets X, Y, A, B differ in dimension")
    sizes = np.cumsum([len(M) for M in sets])[:-1]
    pooled = _unit(np.concatenate(sets))
    with serial_blas():  # the same cosines for any thread count
        cos = pooled @ pooled.T  # once for all splits: each split only re-indexes it
    rng = np.random.default_rng(seed)
    p = np.empty(n_tests)
    for t in range(n_tests):
        x, y, a, b = np.split(rng.permutation(len(pooled)), sizes)
        xy = np.concatenate([x, y])
        s = cos[np.ix_(xy, a)].mean(axis=1) - cos[np.ix_(xy, b)].mean(axis=1)
        res = permutation_test_sw(s, len(x), n_samples=n_samples, seed=int(rng.integers(2**63)),
                                  threads=threads)
        p[t] = res.p
        if progress is not None:
            progress.advance()
    return p


def false_positive_rates(p: ArrayLike, alphas: Iterable[float] = (0.1, 0.01)) -> dict[float, float]:
    """Fraction of p-values below each α."""
    p = np.asarray(p)
    return {alpha: float((p < alpha).mean()) for alpha in alphas}
