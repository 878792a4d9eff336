r"""The Multilevel Embedding Association Test (ML-EAT; Wolfe, Hiniker & Howe 2024, arXiv 2408.01966).

An EAT's d says that X and Y differ in their relative association with A and B, not which of the four
associations carries it. The ML-EAT reads one test at three levels of increasing granularity (the
paper's abstract: "the differential association between two target concepts with two attribute
concepts; the individual effect size of each target concept with two attribute concepts; and the
association between each individual target concept and each individual attribute concept").

Symbols: X, Y target sets, A, B attribute sets, all (n, dim) arrays; cos(u, v) the cosine similarity;
T ∈ {X, Y} a target set, C ∈ {A, B} an attribute set; std the sample standard deviation (ddof=1).

Level 1, the differential EAT — today's test (vlbias.stats.weat and .permutation, called as the
results tables call them, so d₁ and p₁ are the tables' d and p bit for bit):
    s(w, A, B) = mean_{a∈A} cos(w, a) − mean_{b∈B} cos(w, b)                       w ∈ X∪Y
    d₁ = [mean_{x∈X} s(x,A,B) − mean_{y∈Y} s(y,A,B)] / std_{w∈X∪Y} s(w,A,B)
    p₁ = Pr[Σ_{X_i} s ≥ Σ_X s] over the partitions (X_i, Y_i) of X∪Y                 (one-sided)
Level 2, the single-target EAT of each target set T against A and B (authors' code: mleat.py ML_EAT,
"level2_effect_X"; the single-category EAT, SC-EAT, of one stimulus when |T| = 1):
    s(c, T) = mean_{t∈T} cos(c, t)                                                  c ∈ A∪B
    d_T = [mean_{a∈A} s(a,T) − mean_{b∈B} s(b,T)] / std_{c∈A∪B} s(c,T)
    p_T = the permutation null of Σ_{A_i} s(·,T) over the partitions (A_i, B_i) of A∪B, read in the
          direction of d_T (see ``null``)
Level 3, each target concept with each attribute concept (mleat.py: "L3 A-X Mean", "L3 A-X Std"):
    μ_TC = mean_{t∈T, c∈C} cos(t, c),   σ_TC = std_{t∈T, c∈C} cos(t, c)
The levels nest: mean_{a∈A} s(a,T) = μ_TA, so d_T's numerator is μ_TA − μ_TB, and d₁'s is
mean_X s − mean_Y s = (μ_XA − μ_XB) − (μ_YA − μ_YB). Level 2 is Level 1 with the roles turned: the
attribute stimuli are the ones permuted, each scored by its mean cosine with one target set.

The pattern of a test (its "EAT pattern"; nine outcomes) is what Level 2 finds for each target:
    o_T = A   if d_T > 0 and p_T < α           (T is associated with A rather than B)
    o_T = B   if d_T < 0 and p_T < α
    o_T = –   otherwise
and the pattern names the significant (target, attribute) pairs, which are the quadrants an EAT-Map
lights (vlbias.report.mleat): XA-YB, XA, YB, XB-YA, XB, YA, XA-YA, XB-YB, none (``PATTERNS``). A
Level-2 d that is undefined makes the pattern "undefined". (The rule: the abstract's "nine possible
outcomes", three per target, and the authors' code, which reads patterns off the Level-2 p-values
(histwords_analysis.ipynb). The codes name the lit quadrants; they are ours, not the paper's labels.)

``cosine_uninformative`` flags a test where cosine similarity cannot tell the concepts apart: every
target concept is near every attribute concept, min(μ_XA, μ_XB, μ_YA, μ_YB) ≥ ``saturation`` (an
anisotropic space, such as GPT-2's last layer, where all cosines sit near 1 and an EAT measures
differences in their third decimal).

The p of Level 2, ``null`` (where the paper's statistics and the authors' code part: both kept):
    "normal"  the authors' code (mleat.py compute_p_value): a normal distribution fitted to the
              permutation null's mean and variance, the tail in the observed direction,
              min(Φ(z), 1 − Φ(z)); the paper's analyses ran it (empirical_analysis.ipynb). Here the
              null's exact moments (vlbias.stats.permutation ``p_parametric``), which their 1,000 or
              10,000 sampled permutations estimate. (Their HistWords notebook takes 1 − Φ(z) alone.)
    "count"   the share of partitions at least as extreme in the observed direction (the engine's
              count, exact or sampled, ties counting as extreme: Level 1's kind of p). With few
              attribute stimuli it cannot get small: 3 + 3 stimuli have 20 partitions, so p ≥ 0.05.
The authors' code reads Level 1 the same way (normal, observed direction); Level 1 here keeps the
tables' one-sided count p, with the normal reading beside it (``Level1.p_normal``).

Undefined statistics are NaN with a status, never an error: d₁ needs |X| ≥ 2 and |Y| ≥ 2, d_T needs
|A| ≥ 2 and |B| ≥ 2 (two sets of one give d = ±√2 whatever the vectors; the rule for
every d), each needs s-values that vary; σ_TC needs two cosines. Malformed vectors (NaN, zero rows, mismatched dimensions) raise ValueError
naming the set (vlbias.stats.weat).

    r = mleat(X, Y, A, B, n_samples=100_000, seed=0)
    r.level1.d, r.level2["X"].d, r.level3["XA"].mean, r.pattern, r.cosine_uninformative
    row = r.row()                     # flat: one line of a results table (vlbias.stats.row.MLEAT)
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.stats.bootstrap import cosines, effect_size_ci_cos
from vlbias.stats.permutation import Exact, PermutationResult, permutation_tails_sw, permutation_test_sw
from vlbias.stats.row import SIZES
from vlbias.stats.weat import Embeddings, _sets, effect_size_sw, s_wAB

NULLS = ("normal", "count")
TARGETS = ("X", "Y")
ATTRIBUTES = ("A", "B")
QUADRANTS = ("XA", "XB", "YA", "YB")

# Every pattern, keyed by the (o_X, o_Y) outcomes of Level 2 ("" for none), in the order the figures'
# legends list them: both targets carrying the test, one, reversed, both with one attribute, none.
PATTERNS = {
    ("A", "B"): ("XA-YB", "X with A and Y with B: both targets carry the association"),
    ("A", ""): ("XA", "X with A; Y with neither"),
    ("", "B"): ("YB", "Y with B; X with neither"),
    ("B", "A"): ("XB-YA", "X with B and Y with A: both carry the reverse association"),
    ("B", ""): ("XB", "X with B; Y with neither"),
    ("", "A"): ("YA", "Y with A; X with neither"),
    ("A", "A"): ("XA-YA", "both targets with A (Level 1 says which more)"),
    ("B", "B"): ("XB-YB", "both targets with B (Level 1 says which more)"),
    ("", ""): ("none", "neither target with either attribute"),
}
UNDEFINED = "undefined"


@dataclass(frozen=True)
class Level1:
    """The differential EAT: today's effect size d and one-sided permutation p (vlbias.stats.weat)."""

    d: float
    p: float  # Pr[Σ_{X_i} s ≥ Σ_X s]: the tables' p
    p_se: float
    p_normal: float  # the authors' reading: normal null, tail in the observed direction
    exact: bool
    n_samples: int
    n_partitions: int
    seed: int | None
    d_low: float = np.nan  # bootstrap interval of d (vlbias.stats.bootstrap) when asked for
    d_high: float = np.nan
    status: str = "ok"


@dataclass(frozen=True)
class Level2:
    """One target set T against A and B: its effect size d_T and p in the direction of d_T."""

    target: str  # "X" or "Y"
    d: float
    p: float  # p_normal or p_count, as ``null`` chose
    p_count: float  # share of partitions of A∪B at least as extreme in the direction of d_T
    p_normal: float  # normal null, tail in the direction of d_T
    p_se: float  # Monte-Carlo error of p_count (0 when exact)
    exact: bool
    n_samples: int
    n_partitions: int
    seed: int | None
    s_a: tuple[float, ...] = ()  # s(a, T) for a ∈ A: the values d_T compares (an EAT-Map's points)
    s_b: tuple[float, ...] = ()  # s(b, T) for b ∈ B
    status: str = "ok"


@dataclass(frozen=True)
class Level3:
    """Target concept T with attribute concept C: the mean and sample std of their cosines."""

    target: str
    attribute: str
    mean: float  # μ_TC
    std: float  # σ_TC (NaN for a single cosine)
    n: int  # |T|·|C| cosines


@dataclass(frozen=True)
class MLEATResult:
    """All three levels of one test, its pattern and flag, and the settings that reproduce them."""

    level1: Level1
    level2: dict[str, Level2]  # {"X": Level2, "Y": Level2}
    level3: dict[str, Level3]  # {"XA": Level3, "XB": ..., "YA": ..., "YB": ...}
    pattern: str  # a code of PATTERNS, or "undefined"
    cosine_uninformative: bool
    sizes: tuple[int, int, int, int]  # (|X|, |Y|, |A|, |B|)
    alpha: float
    null: str
    saturation: float
    outcomes: tuple[str | None, ...]  # (o_X, o_Y): "A", "B", "" (neither) or None (undefined)

    @property
    def status(self) -> str:
        """"ok", or each level's reason for an undefined statistic, "; "-joined."""
        notes = [f"level 1: {self.level1.status}"] if self.level1.status != "ok" else []
        notes += [f"level 2 {t}: {self.level2[t].status}" for t in TARGETS if self.level2[t].status != "ok"]
        notes += [f"level 3 {q}: one cosine, no std" for q in QUADRANTS if self.level3[q].n < 2]
        return "; ".join(notes) or "ok"

    def asdict(self) -> dict[str, Any]:
        """The result as plain values (``from_dict`` reads it back): what a JSON file of results holds."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MLEATResult":
        """The result ``asdict`` gave, its lists (a JSON file's) read back as the tuples they were."""
        return cls(**{**d, "level1": Level1(**d["level1"]),
                      "level2": {t: Level2(**{**l2, "s_a": tuple(l2["s_a"]), "s_b": tuple(l2["s_b"])})
                                 for t, l2 in d["level2"].items()},
                      "level3": {q: Level3(**l3) for q, l3 in d["level3"].items()},
                      "sizes": tuple(d["sizes"]), "outcomes": tuple(d["outcomes"])})

    def row(self) -> dict[str, Any]:
        """The result as one flat row (vlbias.stats.row.MLEAT's sizes, statistics and status, in order): a
        line of a results table."""
        l1 = self.level1
        row = {**dict(zip(SIZES, self.sizes)), "pattern": self.pattern, "cosine_uninformative": self.cosine_uninformative,
               "l1_d": l1.d, "l1_d_low": l1.d_low, "l1_d_high": l1.d_high, "l1_p": l1.p, "l1_p_se": l1.p_se,
               "l1_p_normal": l1.p_normal, "l1_exact": l1.exact, "l1_n_samples": l1.n_samples,
               "l1_n_partitions": str(l1.n_partitions)}
        for t in TARGETS:
            l2, k = self.level2[t], f"l2{t.lower()}_"
            row |= {k + "d": l2.d, k + "p": l2.p, k + "p_count": l2.p_count, k + "p_normal": l2.p_normal,
                    k + "p_se": l2.p_se, k + "exact": l2.exact, k + "n_samples": l2.n_samples,
                    k + "n_partitions": str(l2.n_partitions)}
        for q in QUADRANTS:
            row |= {f"l3_{q.lower()}_mean": self.level3[q].mean, f"l3_{q.lower()}_std": self.level3[q].std}
        seed = l1.seed if l1.seed is not None else next((self.level2[t].seed for t in TARGETS
                                                          if self.level2[t].seed is not None), None)
        row |= {"alpha": self.alpha, "null": self.null, "saturation": self.saturation,
                "seed": "" if seed is None else seed, "status": self.status}
        return row


def _d(s_1: ArrayLike, s_2: ArrayLike, sizes: Mapping[str, int]) -> tuple[float, str]:
    """effect_size_sw of two s-value vectors, or (NaN, why) where it is undefined: a set of fewer than
    two (``sizes``: {set name: size}) or s-values without variance."""
    small = [f"|{name}| = {n}" for name, n in sizes.items() if n < 2]
    if small:
        return np.nan, f"{', '.join(small)}: an effect size needs at least 2 stimuli per set"
    try:
        return effect_size_sw(s_1, s_2), "ok"
    except ValueError as e:  # zero variance (inputs were checked before)
        return np.nan, str(e)


def p_normal(p_parametric: float) -> float:
    """The normal null's p as the authors' code reads it, min(Φ(z), 1 − Φ(z)), from the upper tail's
    p_parametric (vlbias.stats.permutation)."""
    return min(p_parametric, 1.0 - p_parametric)


def _directional(s: NDArray[np.float64], n_first: int, d: float, n_samples: int, seed: int, exact: Exact,
                 threads: int | None) -> tuple[float, float, PermutationResult]:
    """(p_count, p_normal, the PermutationResult of the tail in the direction of ``d``) of ``s`` split
    after ``n_first``. The lower tail is the upper tail of −s, counted on the same partitions in the
    same pass (permutation_tails_sw)."""
    upper, lower = permutation_tails_sw(s, n_first, n_samples=n_samples, seed=seed, exact=exact, threads=threads)
    normal = p_normal(upper.p_parametric)
    tail = upper if d >= 0 else lower
    return tail.p, normal, tail


def level1(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings, *, n_samples: int = 100_000, seed: int = 0,
           exact: Exact = "auto", threads: int | None = None, ci: Mapping[str, Any] | None = None,
           C: NDArray[np.float64] | None = None) -> Level1:
    """Level 1: d₁ and p₁ exactly as vlbias.associate computes a table's d and p (s_wAB on X∪Y,
    effect_size_sw, permutation_test_sw); ``ci`` ({level, n_boot, seed, method}) adds the bootstrap
    interval of d₁ (vlbias.stats.bootstrap), from the cosine matrix ``C`` when the caller has it."""
    n_x, n_y = len(X), len(Y)
    s = s_wAB(np.concatenate([X, Y]), A, B)
    d, status = _d(s[:n_x], s[n_x:], {"X": n_x, "Y": n_y})
    if status != "ok":
        return Level1(np.nan, np.nan, np.nan, np.nan, False, 0, 0, None, status=status)
    res = permutation_test_sw(s, n_x, n_samples=n_samples, seed=seed, exact=exact, threads=threads)
    low = high = np.nan
    if ci is not None:
        interval = effect_size_ci_cos(C if C is not None else cosines(X, Y, A, B), (n_x, n_y, len(A), len(B)), d,
                                      **ci)
        low, high = interval.low, interval.high
    return Level1(d, res.p, res.p_se, p_normal(res.p_parametric), res.exact, res.n_samples,
                  res.n_partitions, res.seed, low, high)


def level2(s_a: ArrayLike, s_b: ArrayLike, target: str = "T", *, null: str = "normal", n_samples: int = 100_000,
           seed: int = 0, exact: Exact = "auto", threads: int | None = None) -> Level2:
    """Level 2 of one target set from its s(a, T) (a ∈ A) and s(b, T) (b ∈ B) values: d_T, and p in
    the direction of d_T over the partitions of A∪B (module docstring; ``null`` picks ``p``)."""
    if null not in NULLS:
        raise ValueError(f"null must be one of {NULLS}, got {null!r}")
    s_a, s_b = np.asarray(s_a, dtype=np.float64), np.asarray(s_b, dtype=np.float64)
    kept: dict[str, Any] = {"s_a": tuple(map(float, s_a)), "s_b": tuple(map(float, s_b))}
    d, status = _d(s_a, s_b, {"A": len(s_a), "B": len(s_b)})
    if status != "ok":
        return Level2(target, np.nan, np.nan, np.nan, np.nan, np.nan, False, 0, 0, None, **kept, status=status)
    p_count, p_normal, res = _directional(np.concatenate([s_a, s_b]), len(s_a), d, n_samples, seed, exact,
                                          threads)
    return Level2(target, d, p_normal if null == "normal" else p_count, p_count, p_normal, res.p_se, res.exact,
                  res.n_samples, res.n_partitions, res.seed, **kept)


def level3(C_TC: ArrayLike, target: str = "T", attribute: str = "C") -> Level3:
    """Level 3 of one (target, attribute) block of cosines: μ_TC and σ_TC (ddof=1)."""
    c = np.asarray(C_TC, dtype=np.float64).ravel()
    return Level3(target, attribute, float(c.mean()), float(c.std(ddof=1)) if c.size > 1 else np.nan, int(c.size))


def outcome(l2: Level2, alpha: float) -> str | None:
    """o_T of a Level2 (module docstring): "A", "B", "" (neither), or None when d_T is undefined."""
    if not np.isfinite(l2.d):
        return None
    if l2.p < alpha and l2.d != 0:
        return "A" if l2.d > 0 else "B"
    return ""


def pattern(o_x: str | None, o_y: str | None) -> str:
    """The pattern code of Level 2's outcomes (o_X, o_Y); "undefined" when either is None."""
    if o_x is None or o_y is None:
        return UNDEFINED
    return PATTERNS[(o_x, o_y)][0]


def mleat(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings, *, n_samples: int = 100_000, seed: int = 0,
          exact: Exact = "auto", alpha: float = 0.05, null: str = "normal", saturation: float = 0.9,
          ci: Mapping[str, Any] | None = None, threads: int | None = None,
          l1: Level1 | None = None) -> MLEATResult:
    """The ML-EAT of X vs Y with A vs B ((n, dim) arrays): its three levels, pattern and flag.

    ``n_samples``, ``seed``, ``exact``, ``threads``: the permutation engine's (vlbias.stats.permutation),
    for Level 1 and each Level 2 test alike; ``alpha``: the level below which a Level-2 p counts for the
    pattern; ``null``: "normal" (the authors' code, default) or "count" — how Level 2's p is read;
    ``saturation``: the Level-3 mean above which every cosine is "near" (``cosine_uninformative``);
    ``ci``: bootstrap interval settings of d₁ (vlbias.stats.bootstrap), None for none; ``l1``: Level 1
    as ``level1`` computed it already for these sets and settings (a table's row, vlbias.associate
    .table_level1), taken as it is.
    """
    if null not in NULLS:
        raise ValueError(f"null must be one of {NULLS}, got {null!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    X, Y, A, B = _sets(X, Y, A, B)
    n_x, n_y, n_a, n_b = sizes = (len(X), len(Y), len(A), len(B))
    C = cosines(X, Y, A, B)  # rows X then Y, columns A then B
    blocks = {"XA": C[:n_x, :n_a], "XB": C[:n_x, n_a:], "YA": C[n_x:, :n_a], "YB": C[n_x:, n_a:]}
    settings: dict[str, Any] = {"n_samples": n_samples, "seed": seed, "exact": exact, "threads": threads}
    if l1 is None:
        l1 = level1(X, Y, A, B, ci=ci, C=C, **settings)
    # s(c, T) = mean_{t∈T} cos(c, t): the column means of T's rows of C
    l2 = {t: level2(blocks[t + "A"].mean(axis=0), blocks[t + "B"].mean(axis=0), t, null=null, **settings)
          for t in TARGETS}
    l3 = {q: level3(blocks[q], q[0], q[1]) for q in QUADRANTS}
    o = tuple(outcome(l2[t], alpha) for t in TARGETS)
    flag = bool(min(l3[q].mean for q in QUADRANTS) >= saturation)
    return MLEATResult(l1, l2, l3, pattern(*o), flag, sizes, float(alpha), null, float(saturation), o)
