r"""Zero-shot retrieval skew: how far the attribute labels of the top-k images a text query retrieves
stand from a desired distribution.

Definitions (Geyik, Ambler & Kenthapadi, *Fairness-Aware Ranking in Search & Recommendation Systems*,
KDD 2019, arXiv:1905.01989, §3; as measured on CLIP by Berg et al., *A Prompt Array Keeps the Bias
Away*, AACL 2022, arXiv:2203.11933, §4 and github.com/oxai/debias-vision-lang, debias_clip/measuring_bias.py):
for a query ranking the N labelled images by similarity, an attribute with values a_1..a_A, the
proportion p_a of value a among the top k and its desired proportion d_a,

    Skew_a@k = ln(p_a / d_a)          MaxSkew@k = max_a Skew_a@k        MinSkew@k = min_a Skew_a@k
    NDKL@k   = (1/Z) Σ_{i=1..k} KL(D_i ‖ D) / log2(i + 1),     Z = Σ_{i=1..k} 1 / log2(i + 1)

D_i the label distribution of the top i, D the desired one, KL(P ‖ Q) = Σ_a P_a ln(P_a / Q_a) (0 ln 0 = 0).
The desired distribution (``desired``): "equal" (1/A each: Berg et al.'s equality of opportunity,
``eq_opp``) or "population" (the set's own proportions: demographic parity, ``dem_par``; Geyik et al.'s
p_{q,r,a}). Skew is 0 at the desired proportion, MaxSkew ≥ 0 always (the p_a sum to at least 1).

Where the authors' code and the prose differ (both are switches, ``ties``):

- "all" (their code, ``df.nlargest(k, keep="all")``: what produced their printed numbers): every image
  tied with the k-th similarity is in the top set, yet p_a still divides by k; NDKL sums over every
  position of that set (ties in image order), Z over k alone.
- "first" (the prose): exactly k images, ties at the k-th similarity broken by image order (the lower
  index ranks first), deterministic.

Both read a value absent from the top k as one image in k (p_a = 1/k): their code's rule; the prose
leaves ln 0 undefined. With continuous similarities ties are rare and the two agree.

The null and the interval: a permutation null shuffles the labels over the same images (the ranking
stays; what a label-blind ranker gives at this set's label balance, a value of MaxSkew above 0 is
expected of chance at small k), and a bootstrap resamples the images with replacement (a resampled
image keeps its similarity; the ranking of the resample is the original order, each image repeated
by its draw count, so no replicate sorts again). Both report the mean over the queries, as Berg et
al. average over their prompts.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.errors import UsageError

DESIRED = ("equal", "population")
TIES = ("all", "first")
MEASURES = ("max_skew", "min_skew", "ndkl")
Desired = Literal["equal", "population"]
Ties = Literal["all", "first"]


def cosine_scores(texts: ArrayLike, images: ArrayLike) -> NDArray[np.float64]:
    """(queries, images) cosine similarities, one matrix product of the unit vectors."""
    t = np.asarray(texts, dtype=np.float64)
    v = np.asarray(images, dtype=np.float64)
    t = t / np.linalg.norm(t, axis=1, keepdims=True)
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    scores: NDArray[np.float64] = t @ v.T
    return scores


def image_to_text_scores(cosines: ArrayLike, temperature: float) -> NDArray[np.float64]:
    """Image→text retrieval: each image's zero-shot probability of each query among the queries
    (softmax over the queries of ``temperature`` · cosine, CLIP's logit scale), by which the images are
    ranked per query: an image counts for a query as much as the query wins among the others for it."""
    logits = temperature * np.asarray(cosines, dtype=np.float64)
    logits = logits - logits.max(axis=0, keepdims=True)
    p: NDArray[np.float64] = np.exp(logits) / np.exp(logits).sum(axis=0, keepdims=True)
    return p


def _check(scores: NDArray[np.float64], codes: NDArray[np.int64], n_values: int, ks: list[int],
           desired: str, ties: str) -> None:
    if scores.ndim != 2 or scores.shape[1] != len(codes):
        raise UsageError(f"scores of shape {scores.shape}: one row per query, a column per image ({len(codes)} images)")
    if desired not in DESIRED:
        raise UsageError(f"desired '{desired}': one of {', '.join(DESIRED)}")
    if ties not in TIES:
        raise UsageError(f"ties '{ties}': one of {', '.join(TIES)}")
    if n_values < 2 or len(codes) and (codes.min() < 0 or codes.max() >= n_values):
        raise UsageError(f"labels: codes 0..{n_values - 1} of at least two values")
    bad = [k for k in ks if not 1 <= k <= len(codes)]
    if bad:
        raise UsageError(f"k {', '.join(map(str, bad))}: between 1 and the {len(codes)} images")


def _desired(counts: NDArray[np.float64], desired: str) -> NDArray[np.float64]:
    """D: 1/A each ("equal"), or the set's proportions ("population"; a value drawn no time counts once,
    as their code's ``max(count, 1)``)."""
    if desired == "equal":
        return np.full(len(counts), 1 / len(counts))
    d: NDArray[np.float64] = np.maximum(counts, 1) / counts.sum()
    return d


def _ranked(scores: NDArray[np.float64], order: NDArray[np.intp], ks: list[int], ties: str,
            weights: NDArray[np.int64] | None) -> tuple[NDArray[np.intp], dict[int, NDArray[np.intp]]]:
    """The images at the ranks each top set reaches ((queries, M), each image ``weights`` times in a row
    where given) and, per k, the size of each query's top set (k, or with ``ties`` "all" every rank
    whose similarity reaches the k-th's)."""
    n_q, n = scores.shape
    k_max = max(ks)
    if weights is None:
        cum = None
        top = order[:, :k_max]
    else:
        cum = np.cumsum(weights[order], axis=1)
        top = _expand(order, cum, k_max)
    sizes = {}
    for k in ks:
        if ties == "first":
            sizes[k] = np.full(n_q, k, dtype=np.intp)
            continue
        kth = np.take_along_axis(scores, top[:, k - 1:k], axis=1)
        reach = scores >= kth
        sizes[k] = (reach.sum(axis=1) if weights is None else (reach * weights).sum(axis=1)).astype(np.intp)
    width = max(int(s.max()) for s in sizes.values())
    if width > k_max:
        top = order[:, :width] if cum is None else _expand(order, cum, width)
    return top, sizes


def _expand(order: NDArray[np.intp], cum: NDArray[np.int64], width: int) -> NDArray[np.intp]:
    """The first ``width`` ranks of a resample: rank j holds the image whose cumulative draw count first
    exceeds j (copies of an image adjacent, distinct images in the original order)."""
    ranks = np.arange(width)
    return np.stack([row[np.searchsorted(c, ranks, side="right")] for row, c in zip(order, cum)])


def _measures(top: NDArray[np.intp], sizes: dict[int, NDArray[np.intp]], codes: NDArray[np.int64],
              d: NDArray[np.float64], ks: list[int]) -> dict[int, dict[str, NDArray[np.float64]]]:
    """Per k: Skew per value (queries, A), MaxSkew, MinSkew and NDKL per query, from the ranked images."""
    n_values = len(d)
    onehot = np.eye(n_values)[codes[top]]  # (queries, M, A)
    cum = np.cumsum(onehot, axis=1)
    ranks = np.arange(1, top.shape[1] + 1)
    share = cum / ranks[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(share > 0, share * np.log(share / d), 0.0).sum(axis=2)
    discounted = np.cumsum(kl / np.log2(ranks + 1), axis=1)
    z = np.cumsum(1 / np.log2(ranks + 1))
    rows = np.arange(top.shape[0])
    out = {}
    for k in ks:
        last = sizes[k] - 1
        p = cum[rows, last] / k
        p = np.where(p == 0, 1 / k, p)
        skew = np.log(p) - np.log(d)
        out[k] = {"skew": skew, "max_skew": skew.max(axis=1), "min_skew": skew.min(axis=1),
                  "ndkl": discounted[rows, last] / z[k - 1]}
    return out


def skew_measures(scores: ArrayLike, labels: ArrayLike, n_values: int, ks: list[int], desired: Desired = "equal",
                  ties: Ties = "all") -> dict[int, dict[str, NDArray[np.float64]]]:
    """Skew@k per value, MaxSkew@k, MinSkew@k and NDKL@k of every query (a row of ``scores``: its similarity
    to each image) over images labelled ``labels`` (codes 0..n_values-1), for each k of ``ks``:
    {k: {"skew": (queries, values), "max_skew": (queries,), "min_skew": ..., "ndkl": ...}}."""
    s = np.asarray(scores, dtype=np.float64)
    codes = np.asarray(labels, dtype=np.int64)
    _check(s, codes, n_values, ks, desired, ties)
    order = np.argsort(-s, axis=1, kind="stable")
    top, sizes = _ranked(s, order, ks, ties, None)
    d = _desired(np.bincount(codes, minlength=n_values).astype(np.float64), desired)
    return _measures(top, sizes, codes, d, ks)


@dataclass(frozen=True)
class SkewSummary:
    """One (k, measure): the mean over queries, its bootstrap interval over images, the permutation null."""

    k: int
    measure: str
    value: float
    low: float  # percentile bootstrap interval (images resampled)
    high: float
    null_mean: float  # the mean of the measure with the labels shuffled over the same images
    null_bound: float  # the null's quantile on the side of skew: ``level`` (MaxSkew, NDKL), 1 - ``level`` (MinSkew)
    p: float  # one-sided on that side: the share of shuffles at or beyond ``value`` (+1 smoothing)


def skew_summary(scores: ArrayLike, labels: ArrayLike, n_values: int, ks: list[int], *, desired: Desired = "equal",
                 ties: Ties = "all", n_permutations: int = 1000, n_bootstrap: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[list[SkewSummary], NDArray[np.float64]]:
    """The mean over queries of MaxSkew, MinSkew and NDKL at each k, with a percentile bootstrap interval
    (images resampled; ``n_bootstrap`` 0: none, NaN), a permutation null (labels shuffled over the images;
    ``n_permutations`` 0: none) and the p of the observed mean under it; and the mean Skew per value,
    (len(ks), values). One generator (``seed``) draws the shuffles, then the resamples."""
    s = np.asarray(scores, dtype=np.float64)
    codes = np.asarray(labels, dtype=np.int64)
    _check(s, codes, n_values, ks, desired, ties)
    order = np.argsort(-s, axis=1, kind="stable")
    counts = np.bincount(codes, minlength=n_values).astype(np.float64)
    d = _desired(counts, desired)
    top, sizes = _ranked(s, order, ks, ties, None)
    observed = _measures(top, sizes, codes, d, ks)
    mean = lambda found: np.array([[found[k][m].mean() for m in MEASURES] for k in ks])  # noqa: E731
    value = mean(observed)
    rng = np.random.default_rng(seed)
    null = np.array([mean(_measures(top, sizes, rng.permutation(codes), d, ks)) for _ in range(n_permutations)])
    boot = []
    for _ in range(n_bootstrap):
        weights = np.bincount(rng.integers(0, len(codes), len(codes)), minlength=len(codes))
        b_top, b_sizes = _ranked(s, order, ks, ties, weights)
        b_counts = np.bincount(codes, weights=weights, minlength=n_values).astype(np.float64)
        boot.append(mean(_measures(b_top, b_sizes, codes, _desired(b_counts, desired), ks)))
    tail = (1 - level) / 2
    nan = np.full(value.shape, np.nan)
    low, high = (np.quantile(boot, [tail, 1 - tail], axis=0) if boot else (nan, nan))
    # MinSkew's skew is downward: its null bound and p read the lower tail, as a negated measure
    sign = np.array([-1.0 if m == "min_skew" else 1.0 for m in MEASURES])
    null_mean = null.mean(axis=0) if n_permutations else nan
    null_bound = sign * np.quantile(sign * null, level, axis=0) if n_permutations else nan
    p = (1 + (sign * null >= sign * value - 1e-12).sum(axis=0)) / (1 + n_permutations) if n_permutations else nan
    summary = [SkewSummary(k, m, float(value[i, j]), float(low[i, j]), float(high[i, j]), float(null_mean[i, j]),
                           float(null_bound[i, j]), float(p[i, j]))
               for i, k in enumerate(ks) for j, m in enumerate(MEASURES)]
    per_value = np.array([observed[k]["skew"].mean(axis=0) for k in ks])
    return summary, per_value
