r"""Grounded WEAT/SEAT (Ross, Katz & Barbu 2021, sections 3–4): experiments 1, 2 and 3.

Every embedding comes from one (caption, image) pair. Targets X and Y are embedded with images
of their own category; each attribute set is split by the category its images depict:
A_x, B_x show the attribute with target category x, A_y, B_y with category y. All six sets are
(n, dim) arrays. s(w, A, B) is the WEAT s-value (vlbias.stats.s_wAB); S(w, A, B) in the paper's
worked examples is the same thing.

Experiment 1 (section 4.1) — attributes pooled over both image categories:
    s = Σ_x s(x, A_x∪A_y, B_x∪B_y) − Σ_y s(y, A_x∪A_y, B_x∪B_y)
Experiment 2 (section 4.2) — each target against attribute images of its own category:
    s = Σ_x s(x, A_x, B_x) − Σ_y s(y, A_y, B_y)
Experiment 3, variant 1 (section 4.3) — each target against congruent vs. incongruent images:
    s = ½ ( |Σ_x s(x, A_x, B_x) − Σ_x s(x, A_y, B_y)| + |Σ_y s(y, A_y, B_y) − Σ_y s(y, A_x, B_x)| )
Experiment 3, variant 2 (section 4.3) — experiment 2's statistic (the paper's text; the authors'
    code used experiment 1's, ``statistic="1"``) on embeddings computed with the test's words
    masked in the captions (T) or person regions masked in the images (I); see
    ``experiment3_masked``.

Effect sizes follow eq. (3): difference of the two means of s-values over the sample standard
deviation (ddof=1) of all s-values that enter the numerator. The paper prints no effect size for
experiment 3 variant 1; ours is ½(|d_x| + |d_y|) with d_x, d_y eq. (3) applied to each half of its
statistic (the authors' code computes the same d_x and −d_y).

p-values come from the shared permutation engine (vlbias.stats.permutation): experiments 1 and 2
from ``permutation_test_sw``, exact over all partitions when there are at most ``n_samples`` of
them, else ``n_samples`` random ones; experiment 3 variant 1 pairs its values and uses the
sign-flip null of ``signflip_test``. Each function's docstring says which null it samples.
"""

from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from vlbias.stats.permutation import Exact, PermutationResult, permutation_test_sw, signflip_test
from vlbias.stats.weat import Embeddings, _check, effect_size_sw, s_wAB

SValues: TypeAlias = NDArray[np.float64]  # s(w, A, B) of each target w of a set

ROLES = ("X", "Y", "A_x", "A_y", "B_x", "B_y")


def _sets(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
          B_y: Embeddings) -> tuple[NDArray[np.float64], ...]:
    X = _check("X", X)
    dim = X.shape[1]
    return (X, *(_check(name, M, dim) for name, M in zip(ROLES[1:], (Y, A_x, A_y, B_x, B_y))))


@dataclass(frozen=True)
class GroundedResult:
    """One grounded test: the paper's statistic, its effect size and permutation p-value(s)."""

    experiment: str  # "1", "2", "3" (variant 1); variant 2 is experiment 2 on masked embeddings
    statistic: float  # s(X, Y, A, B) in the experiment's own form (section 4)
    effect_size: float
    p: float
    permutation: PermutationResult | None  # the engine's result (experiments 1, 2)
    # experiment 3: the X and Y halves (statistic, d, p each), "joint" (its test)
    parts: dict[str, dict[str, Any]] | None = None

    def asdict(self) -> dict[str, Any]:
        return asdict(self)


def experiment1_sw(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                   B_y: Embeddings) -> tuple[SValues, SValues]:
    """s(w, A_x∪A_y, B_x∪B_y) for w ∈ X and for w ∈ Y (two vectors)."""
    X, Y, A_x, A_y, B_x, B_y = _sets(X, Y, A_x, A_y, B_x, B_y)
    A, B = np.concatenate([A_x, A_y]), np.concatenate([B_x, B_y])
    return s_wAB(X, A, B), s_wAB(Y, A, B)


def experiment2_sw(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                   B_y: Embeddings) -> tuple[SValues, SValues]:
    """s(x, A_x, B_x) for x ∈ X and s(y, A_y, B_y) for y ∈ Y (two vectors)."""
    X, Y, A_x, A_y, B_x, B_y = _sets(X, Y, A_x, A_y, B_x, B_y)
    return s_wAB(X, A_x, B_x), s_wAB(Y, A_y, B_y)


def experiment3_sw(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                   B_y: Embeddings) -> tuple[tuple[SValues, SValues], tuple[SValues, SValues]]:
    """The four s-value vectors of experiment 3, congruent first:
    (s(x, A_x, B_x), s(x, A_y, B_y)) for x ∈ X and (s(y, A_y, B_y), s(y, A_x, B_x)) for y ∈ Y."""
    X, Y, A_x, A_y, B_x, B_y = _sets(X, Y, A_x, A_y, B_x, B_y)
    return (s_wAB(X, A_x, B_x), s_wAB(X, A_y, B_y)), (s_wAB(Y, A_y, B_y), s_wAB(Y, A_x, B_x))


def _two_sample(s_a: SValues, s_b: SValues, n_samples: int, seed: int,
                exact: Exact) -> tuple[float, float, PermutationResult]:
    s = np.concatenate([s_a, s_b])
    return (float(np.sum(s_a) - np.sum(s_b)), effect_size_sw(s_a, s_b),
            permutation_test_sw(s, len(s_a), n_samples=n_samples, seed=seed, exact=exact))


def experiment1(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                B_y: Embeddings, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto") -> GroundedResult:
    """Experiment 1: do joint embeddings encode social biases?

    Null sampled by the permutations: the labels "X" and "Y" are exchangeable over the pooled
    target pairs X∪Y — every split into sets of the observed sizes is equally likely — while
    every target keeps its s(w, A_x∪A_y, B_x∪B_y) and all four attribute sets stay fixed.
    One-sided: p = Pr[s(X_i, Y_i) ≥ s(X, Y)].
    """
    stat, d, perm = _two_sample(*experiment1_sw(X, Y, A_x, A_y, B_x, B_y), n_samples, seed, exact)
    return GroundedResult("1", stat, d, perm.p, perm)


def experiment2(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                B_y: Embeddings, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto") -> GroundedResult:
    """Experiment 2: can grounded evidence that counters a stereotype alleviate biases?

    Null sampled by the permutations: "X" and "Y" are exchangeable over the pooled targets,
    and each target carries the s-value against the attribute images of its own image category
    (s(x, A_x, B_x) for a target from X, s(y, A_y, B_y) for one from Y) into whichever side it
    is permuted to; the attribute sets stay fixed. This is the null of the authors' sampler
    (a target's s-value is never recomputed against the other category's attributes).
    One-sided: p = Pr[s(X_i, Y_i) ≥ s(X, Y)].
    """
    stat, d, perm = _two_sample(*experiment2_sw(X, Y, A_x, A_y, B_x, B_y), n_samples, seed, exact)
    return GroundedResult("2", stat, d, perm.p, perm)


def experiment3_masked(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                       B_y: Embeddings, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto",
                       statistic: str = "2") -> GroundedResult:
    """Experiment 3, variant 2: an experiment's test on masked embeddings. Pass embeddings computed
    with the test's mask terms replaced by [MASK] (T) or with person regions masked (I).

    ``statistic`` (protocol switch ``masked_statistic``, docs/grounded.md row 4): "2", the paper's
    text (section 4.3: "the same test as in Experiment 2 with the addition of masking"), or "1",
    what the authors' code ran (scripts/bias_test.py:262-274 calls experiment 1's test). The
    statistic, effect size and null are then that experiment's.
    """
    if statistic not in ("1", "2"):
        raise ValueError(f"masked statistic must be '1' or '2', got {statistic!r}")
    r = EXPERIMENTS[statistic](X, Y, A_x, A_y, B_x, B_y, n_samples=n_samples, seed=seed, exact=exact)
    return GroundedResult("3-masked", r.statistic, r.effect_size, r.p, r.permutation)


def experiment3(X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                B_y: Embeddings, n_samples: int = 100_000, seed: int = 0, exact: Exact = "auto") -> GroundedResult:
    r"""Experiment 3, variant 1: are biases encoded from language or from vision?

    statistic = ½(|S_x| + |S_y|) with S_x = Σ_x s(x,A_x,B_x) − Σ_x s(x,A_y,B_y) and
    S_y = Σ_y s(y,A_y,B_y) − Σ_y s(y,A_x,B_x); effect size ½(|d_x| + |d_y|), d_x the eq.-(3)
    effect size of the congruent vs. incongruent s-values of X (std over both, ddof=1), d_y
    likewise for Y.

    Null sampled (paired, ``signflip_test``): every target contributes one congruent and one
    incongruent s-value, d_i their difference, so S_x = Σ_x d_i. If the image category of the
    attribute pairs does not matter to a target, its two values are exchangeable: each d_i
    keeps or flips its sign with probability ½, independently over the targets of X and Y. ``p``
    is that null's probability of ½(|S*_x| + |S*_y|) ≥ the observed statistic — a test of the
    paper's statistic itself ("no difference for X and none for Y"). ``parts`` gives each half's
    own test: p_x = Pr[|S*_x| ≥ |S_x|] (two-sided, as the paper takes |S_x|), likewise p_y.
    (The authors' sampler never counts a permutation, scripts/weat/weat_images_intra_targ.py, so
    their p is 1.0 for every test with more than 20 targets, and it raises for fewer.)
    """
    (cx, ix), (cy, iy) = experiment3_sw(X, Y, A_x, A_y, B_x, B_y)
    dx, dy = cx - ix, cy - iy
    parts = {}
    for name, (con, inc), diff in (("X", (cx, ix), dx), ("Y", (cy, iy), dy)):
        r = signflip_test(diff, n_samples=n_samples, seed=seed, exact=exact)
        parts[name] = {"statistic": float(np.sum(con) - np.sum(inc)), "effect_size": effect_size_sw(con, inc),
                       "p": r.p, "p_se": r.p_se, "exact": r.exact, "n_samples": r.n_samples}
    joint = signflip_test(np.concatenate([dx, dy]), np.repeat([0, 1], [len(dx), len(dy)]), n_samples=n_samples,
                          seed=seed, exact=exact)
    stat = 0.5 * (abs(parts["X"]["statistic"]) + abs(parts["Y"]["statistic"]))
    d = 0.5 * (abs(parts["X"]["effect_size"]) + abs(parts["Y"]["effect_size"]))
    return GroundedResult("3", stat, d, joint.p, None, {**parts, "joint": joint.asdict()})


EXPERIMENTS = {"1": experiment1, "2": experiment2, "3": experiment3, "3-masked": experiment3_masked}


def grounded_test(experiment: str, X: Embeddings, Y: Embeddings, A_x: Embeddings, A_y: Embeddings, B_x: Embeddings,
                  B_y: Embeddings, **kwargs: Any) -> GroundedResult:
    """Run experiment "1", "2", "3" or "3-masked" (then pass masked embeddings)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"unknown grounded experiment {experiment!r}; expected one of {sorted(EXPERIMENTS)}")
    return EXPERIMENTS[experiment](X, Y, A_x, A_y, B_x, B_y, **kwargs)
