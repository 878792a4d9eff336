r"""A confidence interval for the effect size d: the stratified bootstrap over stimuli.

What is resampled: the stimuli of each set, within the set. One bootstrap replicate draws |X|
targets from X with replacement, |Y| from Y, |A| attributes from A and |B| from B, all four
independently, and recomputes d (vlbias.stats.weat) on the drawn sets: s(w, A*, B*) for every
drawn target, then d over X*, Y*. The sets keep their sizes, so a replicate is a test of the same
design on another draw of stimuli from the same populations. Resampling A and B as well as X and
Y matters: s(w, A, B) is an average over the attribute stimuli, and the sampling error of those
few stimuli (iEAT: 5 to 55 images) is part of the uncertainty of d. An embedding model is fixed;
the interval says nothing about another model trained on other data.

Fast: cos(w, a) for every target w and attribute a is computed once (C, (|X|+|Y|, |A|+|B|)); a
replicate only re-weights it. With c_A, c_B the replicate's draw counts per attribute,
s*(w) = C[w, A]·c_A/|A| − C[w, B]·c_B/|B| — one matrix product for a block of replicates — and d*
is the count-weighted mean difference over the count-weighted pooled standard deviation (ddof=1 on
the |X|+|Y| drawn values), exactly d of the resampled sets with their repeats.

The interval is BCa (bias-corrected and accelerated; Efron 1987; Efron & Tibshirani 1993, ch. 14),
not the percentile interval. d is bounded (|d| < 2 for |X| = |Y|: the pooled standard deviation
includes the difference of the means), so where the effect is large its sampling distribution is
skewed and d falls short of the population value; the percentile interval then lies below the
true d far more often than its level says. BCa corrects the median bias (z0, from the share of
replicates below d) and the skew (the acceleration a, from the jackknife: each stimulus of each
set left out in turn). ``benchmarks/bootstrap_ci.py`` measures the coverage of both on simulated
Gaussian embeddings; ``method="percentile"`` stays for that comparison.

Replicates whose d is undefined (zero variance of the drawn s-values: possible when X and Y hold
the same vector) are dropped and counted in ``n_undefined``.
"""

from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.stats.weat import Embeddings, _sets, _unit, effect_size_sw, serial_blas

METHODS = ("bca", "percentile")
BLOCK = 1024  # replicates per matrix product: bounds memory at BLOCK × (|X|+|Y|) floats
Sizes = tuple[int, int, int, int]  # (|X|, |Y|, |A|, |B|)


@dataclass(frozen=True)
class EffectSizeCI:
    """A bootstrap confidence interval of d, with the settings that reproduce it."""

    low: float
    high: float
    level: float  # nominal coverage, e.g. 0.95
    method: str  # "bca" or "percentile"
    n_boot: int  # bootstrap replicates drawn
    seed: int
    n_undefined: int  # replicates dropped because d was undefined (zero variance)
    z0: float  # BCa bias correction (NaN for percentile)
    acceleration: float  # BCa acceleration (NaN for percentile)

    def asdict(self) -> dict[str, Any]:
        return asdict(self)


def cosines(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings) -> NDArray[np.float64]:
    """The (|X|+|Y|, |A|+|B|) matrix of cos(w, a): rows X then Y, columns A then B."""
    X, Y, A, B = _sets(X, Y, A, B)
    with serial_blas():
        return _unit(np.concatenate([X, Y])) @ _unit(np.concatenate([A, B])).T


def weighted_d(C: NDArray[np.float64], n_x: int, n_a: int, cX: NDArray[np.float64], cY: NDArray[np.float64],
               cA: NDArray[np.float64], cB: NDArray[np.float64]) -> NDArray[np.float64]:
    """d for each row of draw counts (R, n) per set, from the cosine matrix C.

    ``cX`` (R, |X|) ... ``cB`` (R, |B|) count how often each stimulus is in a replicate (a
    bootstrap draw; a 0/1 mask for the jackknife). Returns (R,) d values, NaN where the drawn
    s-values have zero variance.
    """
    C_A, C_B = C[:, :n_a], C[:, n_a:]
    s = (cA @ C_A.T) / cA.sum(1, keepdims=True) - (cB @ C_B.T) / cB.sum(1, keepdims=True)  # (R, n_t)
    c = np.concatenate([cX, cY], axis=1)
    nx, ny = cX.sum(1), cY.sum(1)
    mx = (cX * s[:, :n_x]).sum(1) / nx
    my = (cY * s[:, n_x:]).sum(1) / ny
    m = (nx * mx + ny * my) / (nx + ny)
    var = (c * (s - m[:, None]) ** 2).sum(1) / (nx + ny - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d: NDArray[np.float64] = (mx - my) / np.sqrt(var)
    # s-values are differences of cosines (|s| ≤ 2): a variance at rounding level is zero, and
    # d would be rounding noise over rounding noise
    d[~(var > 1e-24)] = np.nan
    return d


def _draws(rng: np.random.Generator, n: int, R: int) -> NDArray[np.float64]:
    """(R, n) counts of a uniform draw of n from n items with replacement, per replicate."""
    idx = rng.integers(0, n, size=(R, n)) + n * np.arange(R)[:, None]
    return np.bincount(idx.ravel(), minlength=R * n).reshape(R, n).astype(np.float64)


def bootstrap_d(C: NDArray[np.float64], sizes: Sizes, n_boot: int, seed: int) -> NDArray[np.float64]:
    """``n_boot`` bootstrap replicates of d, stimuli drawn within each set; (n_boot,) array.

    ``sizes`` = (|X|, |Y|, |A|, |B|), the row and column blocks of C. Replicates are drawn in
    blocks of BLOCK from one generator seeded with ``seed``, X, Y, A, B in turn: the same seed
    gives the same replicates.
    """
    n_x, _, n_a, _ = sizes
    rng = np.random.default_rng(seed)
    out = np.empty(n_boot)
    for start in range(0, n_boot, BLOCK):
        R = min(BLOCK, n_boot - start)
        counts = [_draws(rng, n, R) for n in sizes]
        out[start : start + R] = weighted_d(C, n_x, n_a, *counts)
    return out


def jackknife_d(C: NDArray[np.float64], sizes: Sizes) -> list[NDArray[np.float64]]:
    """d with each stimulus left out in turn: a list of four arrays (one per set X, Y, A, B;
    empty for a set of one stimulus, which cannot lose one)."""
    n_x, _, n_a, _ = sizes
    out = []
    for k, n in enumerate(sizes):
        if n < 2:
            out.append(np.empty(0))
            continue
        counts = [np.ones((n, m)) for m in sizes]
        counts[k] = 1.0 - np.eye(n)
        out.append(weighted_d(C, n_x, n_a, *counts))
    return out


def acceleration(jack: list[NDArray[np.float64]]) -> float:
    """BCa acceleration from the leave-one-out values of each set.

    a is a sixth of the skewness of the linear approximation of d,
    d* − d ≈ Σ_k (1/n_k) Σ_j (draws of stimulus j of set k − 1) l_kj, whose variance is
    Σ_k n_k⁻² Σ_j l_kj² and third cumulant Σ_k n_k⁻³ Σ_j l_kj³; the empirical influence values
    are estimated by the jackknife, l_kj ≈ (n_k − 1)(mean_j θ_(kj) − θ_(kj)). So
    a = Σ_k n_k⁻³ Σ_j l_kj³ / (6 (Σ_k n_k⁻² Σ_j l_kj²)^{3/2}) — for one set, Efron's jackknife
    acceleration (Efron & Tibshirani 1993, ch. 14); for several, its stratified form.
    """
    num = den = 0.0
    for theta in jack:
        n = theta.size
        theta = theta[np.isfinite(theta)]  # a left-out stimulus whose d is undefined adds nothing
        if theta.size < 2:
            continue
        l = (n - 1) * (theta.mean() - theta)
        num += (l**3).sum() / n**3
        den += (l**2).sum() / n**2
    return float(num / (6.0 * den**1.5)) if den > 0 else 0.0


def effect_size_ci_cos(C: ArrayLike, sizes: Sizes, d: float, level: float = 0.95, n_boot: int = 10_000, seed: int = 0,
                       method: str = "bca") -> EffectSizeCI:
    """Bootstrap interval of the effect size ``d`` from the cosine matrix C (see ``cosines``).

    ``sizes`` = (|X|, |Y|, |A|, |B|). Returns an :class:`EffectSizeCI`; its bounds are NaN when
    the interval is undefined (fewer than two defined replicates, or BCa with every replicate on
    one side of d).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 2:
        raise ValueError(f"n_boot must be ≥ 2, got {n_boot}")
    C = np.asarray(C, dtype=np.float64)
    if C.shape != (sizes[0] + sizes[1], sizes[2] + sizes[3]):
        raise ValueError(f"cosine matrix of shape {C.shape} does not match set sizes {tuple(sizes)}")
    # the products here are small ((BLOCK, |A|) by (|A|, |X|+|Y|)): threads gain nothing, and on a
    # busy machine OpenBLAS's waiting threads made the bootstrap 4x slower (measured); one thread
    # also keeps the interval the same for any thread count (serial_blas)
    with serial_blas():
        theta = bootstrap_d(C, sizes, n_boot, seed)
        jack = jackknife_d(C, sizes) if method == "bca" else []
    defined = theta[np.isfinite(theta)]
    n_undefined = n_boot - defined.size
    alpha = (1.0 - level) / 2.0
    z0 = a = np.nan
    low = high = np.nan
    if defined.size >= 2:
        if method == "percentile":
            low, high = np.quantile(defined, [alpha, 1.0 - alpha])
        else:
            below = (np.sum(defined < d) + 0.5 * np.sum(defined == d)) / defined.size
            a = acceleration(jack)
            if 0.0 < below < 1.0:
                normal = NormalDist()
                z0 = normal.inv_cdf(below)
                q = [normal.cdf(z0 + (z0 + z) / (1.0 - a * (z0 + z)))
                     for z in (normal.inv_cdf(alpha), normal.inv_cdf(1.0 - alpha))]
                low, high = np.quantile(defined, q)
    return EffectSizeCI(float(low), float(high), float(level), method, int(n_boot), int(seed), int(n_undefined),
                        float(z0), float(a))


def effect_size_ci(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings, level: float = 0.95,
                   n_boot: int = 10_000, seed: int = 0, method: str = "bca") -> EffectSizeCI:
    """Bootstrap confidence interval of the effect size d of X vs Y with A vs B ((n, dim) arrays),
    stimuli resampled within each set; see the module docstring."""
    C = cosines(X, Y, A, B)
    sizes = (len(X), len(Y), len(A), len(B))
    s = C[:, : len(A)].mean(axis=1) - C[:, len(A) :].mean(axis=1)
    d = effect_size_sw(s[: len(X)], s[len(X) :])
    return effect_size_ci_cos(C, sizes, d, level=level, n_boot=n_boot, seed=seed, method=method)
