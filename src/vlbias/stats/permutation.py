r"""The permutation engine every test of the package shares: the WEAT/SEAT/iEAT test and grounded
experiments 1 and 2 (``permutation_test_sw``: partitions of X∪Y; ``permutation_tails_sw``: its upper
and lower tail counted on the same partitions, for the ML-EAT's Level 2, read in the direction of d)
and experiment 3's paired test (``signflip_test``: sign vectors).

Both count how many arrangements of the null score at least the observed statistic, the same way
(``_count``): ties within a relative ``TIE_RTOL`` count as at least as extreme; exact over all
arrangements when there are at most ``n_samples`` of them (``exact="auto"``), else ``n_samples``
arrangements where the observed one counts once (it is a member of the null distribution, and it
keeps p > 0) and ``n_samples − 1`` are drawn uniformly at random by the compiled kernels of
vlbias.stats._kernels, from counter-based streams per block of draws, so the same ``seed`` gives
the same p on any number of threads.
"""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from math import comb, erfc, sqrt
from typing import Any, Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Floating-point sums over different orders of the same values differ in the last bits;
# a partition within this relative distance of the observed statistic is a tie, and ties
# count as at least as extreme (May et al.'s conservative rule).
TIE_RTOL = 1e-10

# Above this many partitions an exact test is refused even when asked for.
MAX_EXACT = 10**9

Exact: TypeAlias = bool | Literal["auto"]  # a test's ``exact``: enumerate every arrangement, sample, or "auto"


@dataclass(frozen=True)
class NullCount:
    """A permutation p-value with what a reader needs to trust it."""

    p: float  # fraction of the arrangements evaluated that score at least the observed statistic
    p_se: float  # Monte-Carlo standard error of p (0 when exact)
    exact: bool  # all arrangements enumerated, or sampled
    n_samples: int  # arrangements evaluated (the observed one included)
    n_extreme: int  # of those, at least as extreme as the observed one
    seed: int | None  # seed of the sampled arrangements (None when exact)

    def asdict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PermutationResult(NullCount):
    """``permutation_test_sw``: the arrangements are the partitions of X∪Y."""

    n_partitions: int  # number of distinct partitions of X∪Y with the observed sizes
    statistic: float  # s(X, Y, A, B)
    p_parametric: float  # normal approximation to the same null (see permutation_test_sw)


@dataclass(frozen=True)
class SignFlipResult(NullCount):
    """``signflip_test``: the arrangements are the sign vectors."""

    n_configurations: int  # 2^n
    statistic: float  # Σ_g |Σ_{i∈g} d_i|


def _finite(values: NDArray[np.float64], what: str) -> None:
    if not np.isfinite(values).all():
        raise ValueError(f"{what} contains NaN or inf")


def _count(kernels: tuple[Callable[..., Any], Callable[..., Any]], args: tuple[Any, ...], values: NDArray[np.float64],
           observed: tuple[float, ...], n_null: int, unit: str, n_samples: int, seed: int, exact: Exact,
           threads: int | None) -> list[dict[str, Any]]:
    """The fields of NullCount for each of ``observed`` among the ``n_null`` arrangements (``unit``, e.g.
    "partitions") counted by ``kernels`` (count_exact, count_sampled of vlbias.stats._kernels, called
    with ``args`` first and a threshold per observed statistic; they count every threshold on the same
    arrangements); ``values`` (the kernels' input) scale the tie threshold."""
    if exact not in ("auto", True, False):
        raise ValueError(f"exact must be 'auto', True or False, got {exact!r}")
    if n_samples < 1:
        raise ValueError(f"n_samples must be ≥ 1, got {n_samples}")
    tie = TIE_RTOL * max(float(np.abs(values).sum()), np.finfo(float).tiny)
    thresholds = [o - tie for o in observed]
    use_exact = n_null <= n_samples if exact == "auto" else bool(exact)
    if use_exact and n_null > MAX_EXACT:
        raise ValueError(f"exact test over {n_null} {unit} refused (limit {MAX_EXACT})")
    count_exact, count_sampled = kernels
    if use_exact:
        *counts, total = count_exact(*args, *thresholds)
        n_extremes, p_se, used_seed = [int(c) for c in counts], 0.0, None
    else:
        total = int(n_samples)
        parts = _block_ranges(total - 1, threads)
        if len(parts) == 1:
            results = [count_sampled(*args, total - 1, int(seed), *thresholds, *parts[0])]
        else:  # the kernels release the GIL: a thread per range of blocks
            with ThreadPoolExecutor(len(parts)) as pool:
                results = list(pool.map(lambda part: count_sampled(*args, total - 1, int(seed), *thresholds, *part),
                                        parts))
        counts = np.sum([np.atleast_1d(r) for r in results], axis=0)
        n_extremes, used_seed = [1 + int(c) for c in counts], int(seed)
    out = []
    for n_extreme in n_extremes:
        p = n_extreme / total
        if not use_exact:
            p_se = sqrt(p * (1.0 - p) / total)
        out.append({"p": p, "p_se": p_se, "exact": use_exact, "n_samples": int(total), "n_extreme": n_extreme,
                    "seed": used_seed})
    return out


def _block_ranges(n_draws: int, threads: int | None) -> list[tuple[int, int]]:
    """The blocks of ``n_draws`` draws (vlbias.stats._kernels.BLOCK each) in one contiguous range per thread:
    ``threads`` of them (None: numba's, NUMBA_NUM_THREADS, the cores), at most one per block (a thread
    without a block would only wait)."""
    import numba

    from vlbias.stats._kernels import BLOCK

    n_blocks = -(-n_draws // BLOCK)
    n = max(1, min(int(threads) if threads is not None else numba.config.NUMBA_NUM_THREADS, n_blocks))
    edges = [n_blocks * k // n for k in range(n + 1)]
    return list(zip(edges, edges[1:]))


def permutation_test_sw(s_w: ArrayLike, n_x: int, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto",
                        threads: int | None = None) -> PermutationResult:
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
    return permutation_tails_sw(s_w, n_x, n_samples, seed, exact, threads)[0]


def permutation_tails_sw(s_w: ArrayLike, n_x: int, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto",
                         threads: int | None = None) -> tuple[PermutationResult, PermutationResult]:
    """(upper, lower): ``permutation_test_sw`` of s and of −s (the lower tail: X's s-values unusually
    low), counted in one pass over the same partitions. Each equals its own call of permutation_test_sw
    (the same seed draws the same partitions; −s's sums and tie threshold are s's negated, exactly)."""
    s = np.ascontiguousarray(s_w, dtype=np.float64)
    n = s.shape[0]
    if s.ndim != 1 or not 1 <= n_x < n:
        raise ValueError(f"need 1 ≤ |X| < |X∪Y|, got |X|={n_x}, |X∪Y|={n}")
    _finite(s, "s(w,A,B)")
    n_partitions = comb(n, n_x)
    tails = (s, -s)
    observed = tuple(float(t[:n_x].sum()) for t in tails)
    from vlbias.stats import _kernels  # numba: loaded by a job's first test, not by every job that imports this

    counted = _count((_kernels.count_exact, _kernels.count_sampled), (s, n_x), s, observed, n_partitions,
                     "partitions", n_samples, seed, exact, threads)
    upper, lower = (PermutationResult(**c, n_partitions=n_partitions, statistic=2.0 * o - float(t.sum()),
                                      p_parametric=_p_parametric(t, n_x, o))
                    for t, o, c in zip(tails, observed, counted, strict=True))
    return upper, lower


def _p_parametric(s: NDArray[np.float64], n_x: int, observed: float) -> float:
    """The normal approximation's upper-tail p of ``observed`` = Σ_X s (permutation_test_sw)."""
    n = s.shape[0]
    mean = n_x * s.mean()
    var = n_x * (n - n_x) / (n - 1) * s.var()
    if var > 0:
        return float(0.5 * erfc((observed - mean) / sqrt(2.0 * var)))
    return 1.0  # every partition has the same statistic: a tie with all


def signflip_test(d: ArrayLike, groups: ArrayLike | None = None, n_samples: int = 100_000, seed: int = 0,
                  exact: Exact = "auto", threads: int | None = None) -> SignFlipResult:
    r"""Paired permutation test of T = Σ_g |Σ_{i∈g} d_i| under the sign-flip null.

    ``d`` (n,): one difference per pair, d_i = a_i − b_i of two values measured on the same unit
    i; ``groups`` (n,) int labels 0..G−1 (default: one group), so T = |Σ d| for one group.

    The null and why: if, for every unit, which of its two values is labelled "a" carries no
    information (the labels are exchangeable within the pair), then swapping the two values of any
    set of pairs leaves the joint distribution unchanged. A swap of pair i turns d_i into −d_i, so
    conditional on the observed pairs the 2^n sign vectors ε ∈ {±1}^n are equally likely and
    T(ε) = Σ_g |Σ_{i∈g} ε_i d_i| has the permutation distribution
        p = #{ε : T(ε) ≥ T(1)} / 2^n.
    Units stay whole: unlike an unpaired null, a unit's own level (what both its values share)
    never moves between the two sides. T(ε) = T(−ε), so the test is two-sided for one group, and
    for several groups tests "no difference in any group" with the |·| of each, as the statistic
    does. Ties (within a relative 1e-10, as the engine) count as at least as extreme.

    Modes (``exact="auto"``): all 2^n sign vectors when 2^n ≤ ``n_samples``; otherwise
    ``n_samples`` vectors where the observed one counts once and ``n_samples − 1`` are uniform
    random draws, from counter-based streams per block of draws (vlbias.stats._kernels), so the
    same ``seed`` gives the same p on any number of threads.
    """
    d = np.ascontiguousarray(d, dtype=np.float64)
    n = d.shape[0]
    if d.ndim != 1 or n < 1:
        raise ValueError(f"need a 1-D array of at least one difference, got shape {d.shape}")
    _finite(d, "differences")
    groups = np.zeros(n, dtype=np.int64) if groups is None else np.ascontiguousarray(groups, dtype=np.int64)
    if groups.shape != (n,) or groups.min() < 0:
        raise ValueError(f"groups must be {n} labels 0..G-1, got shape {groups.shape}")
    n_groups = int(groups.max()) + 1
    observed = float(sum(abs(d[groups == g].sum()) for g in range(n_groups)))
    from vlbias.stats import _kernels

    (counted,) = _count((_kernels.count_signflip_exact, _kernels.count_signflip_sampled), (d, groups, n_groups), d,
                        (observed,), 2**n, "sign vectors", n_samples, seed, exact, threads)
    return SignFlipResult(**counted, n_configurations=2**n, statistic=observed)
