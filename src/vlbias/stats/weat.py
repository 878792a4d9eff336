r"""Embedding association tests (Caliskan et al. 2017; May et al. 2019; Steed & Caliskan 2021).

Symbols follow the papers. X, Y are target sets, A, B attribute sets, all (n, dim) arrays.

    s(w, A, B)    = mean_{a∈A} cos(w, a) − mean_{b∈B} cos(w, b)
    s(X, Y, A, B) = Σ_{x∈X} s(x, A, B) − Σ_{y∈Y} s(y, A, B)
    d             = [mean_{x∈X} s(x,A,B) − mean_{y∈Y} s(y,A,B)] / std_{w∈X∪Y} s(w,A,B)   (ddof=1)
    p             = Pr[ s(X_i, Y_i, A, B) ≥ s(X, Y, A, B) ]  over partitions (X_i, Y_i) of X∪Y
                    with |X_i| = |X|, |Y_i| = |Y|                                        (one-sided)

The null each permutation samples: the labels "X" and "Y" are exchangeable — every way of
splitting the pooled targets X∪Y into sets of the observed sizes is equally likely, while
A and B stay fixed.
"""

from dataclasses import asdict, dataclass
from functools import cache
from math import comb, erfc, sqrt

import numpy as np
from threadpoolctl import ThreadpoolController

from vlbias.stats import _kernels

# Floating-point sums over different orders of the same values differ in the last bits;
# a partition within this relative distance of the observed statistic is a tie, and ties
# count as at least as extreme (May et al.'s conservative rule).
TIE_RTOL = 1e-10

# Above this many partitions an exact test is refused even when asked for.
MAX_EXACT = 10**9


@cache
def _blas():
    # finding the loaded BLAS takes milliseconds: once per process (numpy's is loaded by now)
    return ThreadpoolController()


def serial_blas():
    """A context in which numpy's BLAS runs on one thread. Every matrix product of the statistics
    runs in one: OpenBLAS splits a product over its threads in blocks whose sums round differently,
    so a cosine changed in the last bit with the job's thread count (``--cores 1`` vs ``2``, a
    SLURM job vs a local one) and so did the bootstrap interval (issue 18 row 6). The products are
    small; threads gain little on them."""
    return _blas().limit(limits=1, user_api="blas")


def _check(name, M, dim=None):
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"set {name}: expected a 2-D (n, dim) array, got shape {M.shape}")
    if M.shape[0] == 0:
        raise ValueError(f"set {name} is empty")
    if dim is not None and M.shape[1] != dim:
        raise ValueError(f"set {name}: dimension {M.shape[1]} does not match {dim} of set X")
    bad = ~np.isfinite(M).all(axis=1)
    if bad.any():
        raise ValueError(f"set {name}: row(s) {np.flatnonzero(bad).tolist()} contain NaN or inf")
    zero = ~(np.abs(M).max(axis=1) > 0)
    if zero.any():
        raise ValueError(
            f"set {name}: row(s) {np.flatnonzero(zero).tolist()} are zero vectors (cosine undefined)"
        )
    return M


def _unit(M):
    """Rows of M scaled to unit length, without overflow or underflow: each row is divided by its
    largest magnitude first (a row of 1e200s would square to inf, one of 1e-170s to 0), then by
    its norm, summed in float64. M holds no zero rows (``_check`` refuses them)."""
    scaled = np.asarray(M, dtype=np.float64) / np.abs(M).max(axis=1, keepdims=True)
    scaled /= np.sqrt(np.einsum("ij,ij->i", scaled, scaled))[:, None]  # in place: a third array cost 5x (page faults)
    return scaled


def s_wAB(W, A, B):
    """s(w, A, B) for every row w of W, as a vector.

    One matrix product per attribute set: mean_a cos(w, a) = w·(mean_a â)/|w| with â = a/|a|,
    so the (n_w, n_a) cosine matrix is never formed.
    """
    W = _check("W", W)
    A = _check("A", A, W.shape[1])
    B = _check("B", B, W.shape[1])
    Wn = _unit(W)
    with serial_blas():
        return Wn @ _unit(A).mean(axis=0) - Wn @ _unit(B).mean(axis=0)


def s_XYAB(s_x, s_y):
    """s(X, Y, A, B) = Σ_x s(x,A,B) − Σ_y s(y,A,B) from precomputed s(w) values."""
    return float(np.sum(s_x) - np.sum(s_y))


def effect_size_sw(s_x, s_y):
    """Effect size d from precomputed s(w) values of X and Y (sample std, ddof=1)."""
    s_x = np.asarray(s_x, dtype=np.float64)
    s_y = np.asarray(s_y, dtype=np.float64)
    if s_x.size == 0 or s_y.size == 0:
        raise ValueError("effect size needs at least one target in X and in Y")
    s = np.concatenate([s_x, s_y])
    if s.size < 2:
        raise ValueError("effect size needs at least two targets in X∪Y")
    sd = np.std(s, ddof=1)
    if not sd > 0:
        raise ValueError("effect size undefined: s(w,A,B) has zero variance over X∪Y")
    return float((s_x.mean() - s_y.mean()) / sd)


def _sets(X, Y, A, B):
    X = _check("X", X)
    dim = X.shape[1]
    return X, _check("Y", Y, dim), _check("A", A, dim), _check("B", B, dim)


def effect_size(X, Y, A, B):
    """Effect size d of the association test on (n, dim) arrays X, Y, A, B."""
    X, Y, A, B = _sets(X, Y, A, B)
    s = s_wAB(np.concatenate([X, Y]), A, B)
    return effect_size_sw(s[: len(X)], s[len(X) :])


@dataclass(frozen=True)
class PermutationResult:
    """A one-sided permutation p-value with what a reader needs to trust it."""

    p: float  # fraction of partitions at least as extreme as the observed one
    p_se: float  # Monte-Carlo standard error of p (0 when exact)
    exact: bool  # all partitions enumerated, or sampled
    n_samples: int  # partitions evaluated (the observed one included)
    n_extreme: int  # of those, at least as extreme as the observed one
    n_partitions: int  # number of distinct partitions of X∪Y with the observed sizes
    seed: int | None  # seed of the sampled partitions (None when exact)
    statistic: float  # s(X, Y, A, B)
    p_parametric: float  # normal approximation to the same null (see permutation_test_sw)

    def asdict(self):
        return asdict(self)


def permutation_test_sw(s_w, n_x, n_samples=100_000, seed=0, exact="auto", threads=None):
    r"""One-sided permutation test on precomputed s(w, A, B) values.

    ``s_w`` holds s(w,A,B) for X∪Y with the ``n_x`` members of X first. This is the
    low-level entry the grounded experiments share: they compute s(w) their own way and
    reuse this kernel.

    Shortcut (May et al.): for partitions with |X_i| = |X| and |Y_i| = |Y|,
    Σ_{X_i} s + Σ_{Y_i} s = C (the same constant for all), so
    s(X_i, Y_i, A, B) = 2 Σ_{X_i} s − C is increasing in Σ_{X_i} s. Comparing Σ_{X_i} s
    with Σ_X s therefore orders partitions exactly as the full statistic does, for
    equal and unequal sizes alike.

    Modes (``exact="auto"``): exact over all C(n, n_x) partitions when that count is
    ≤ ``n_samples``; otherwise ``n_samples`` partitions where the observed one counts once
    (it is a member of the null distribution, and it keeps p > 0) and ``n_samples − 1`` are
    drawn uniformly at random with replacement. ``exact=True`` / ``False`` forces a mode.

    ``p_parametric`` fits a normal distribution to the same null with its exact moments:
    a sum of n_x values drawn without replacement from s has mean n_x·s̄ and variance
    n_x·(n − n_x)/(n − 1)·σ² (σ² the population variance of s). May et al. estimate these
    two moments from the samples; these are the values those estimates converge to.
    """
    s = np.ascontiguousarray(s_w, dtype=np.float64)
    n = s.shape[0]
    if s.ndim != 1 or not 1 <= n_x < n:
        raise ValueError(f"need 1 ≤ |X| < |X∪Y|, got |X|={n_x}, |X∪Y|={n}")
    if not np.isfinite(s).all():
        raise ValueError("s(w,A,B) contains NaN or inf")
    if exact not in ("auto", True, False):
        raise ValueError(f"exact must be 'auto', True or False, got {exact!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be ≥ 1, got {n_samples}")
    n_partitions = comb(n, n_x)
    observed = float(s[:n_x].sum())
    threshold = observed - TIE_RTOL * max(float(np.abs(s).sum()), np.finfo(float).tiny)
    use_exact = n_partitions <= n_samples if exact == "auto" else bool(exact)
    if use_exact and n_partitions > MAX_EXACT:
        raise ValueError(f"exact test over {n_partitions} partitions refused (limit {MAX_EXACT})")

    if threads is not None:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    if use_exact:
        n_extreme, total = _kernels.count_exact(s, n_x, threshold)
        p_se = 0.0
        used_seed = None
    else:
        total = int(n_samples)
        n_extreme = 1 + int(_kernels.count_sampled(s, n_x, total - 1, int(seed), threshold))
        used_seed = int(seed)
    p = n_extreme / total
    if not use_exact:
        p_se = sqrt(p * (1.0 - p) / total)

    mean = n_x * s.mean()
    var = n_x * (n - n_x) / (n - 1) * s.var()
    if var > 0:
        p_param = 0.5 * erfc((observed - mean) / sqrt(2.0 * var))
    else:
        p_param = 1.0  # every partition has the same statistic: a tie with all
    return PermutationResult(
        p=p,
        p_se=p_se,
        exact=use_exact,
        n_samples=int(total),
        n_extreme=int(n_extreme),
        n_partitions=n_partitions,
        seed=used_seed,
        statistic=2.0 * observed - float(s.sum()),
        p_parametric=float(p_param),
    )


def permutation_pvalue(X, Y, A, B, n_samples=100_000, seed=0, exact="auto", threads=None):
    """Permutation test of the association of X vs Y with A vs B; see permutation_test_sw."""
    X, Y, A, B = _sets(X, Y, A, B)
    s = s_wAB(np.concatenate([X, Y]), A, B)
    return permutation_test_sw(s, len(X), n_samples=n_samples, seed=seed, exact=exact, threads=threads)
