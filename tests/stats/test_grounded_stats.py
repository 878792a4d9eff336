"""Grounded WEAT/SEAT statistics (Ross et al. 2021, section 4): the paper's Table 2 toy dataset
by hand, brute force on small random sets, and a differential check against the authors' code."""

import importlib.util
import itertools
import math

import numpy as np
import pytest

from helpers import checkout
from vlbias.stats.grounded import (
    experiment1,
    experiment1_sw,
    experiment2,
    experiment3,
    experiment3_masked,
    experiment3_sw,
    grounded_test,
)
from vlbias.stats.permutation import signflip_test

# Table 2(b) of the paper: embedding index -> vector. 1 = "man"/any man, 2 = "man"/any woman,
# 4 = "woman"/any woman, 5 = "lawyer"/man lawyer, 7 = "lawyer"/woman lawyer,
# 10 = "teacher"/man teacher, 12 = "teacher"/woman teacher. The vectors are picked so every
# cosine is a multiple of 0.2:
#   cos(1,5)=.6 cos(1,7)=0  cos(1,10)=.8 cos(1,12)=.8
#   cos(4,5)=.8 cos(4,7)=.6 cos(4,10)=0  cos(4,12)=.6
#   cos(2,5)=0  cos(2,7)=.8 cos(2,10)=.6 cos(2,12)=0
TOY = {1: [1, 0, 0], 2: [0, 0, 1], 4: [0, 1, 0], 5: [3, 4, 0], 7: [0, 3, 4], 10: [4, 0, 3], 12: [4, 3, 0]}


def toy(*idx):
    return np.array([TOY[i] for i in idx], dtype=float)


def S(w, A, B):
    """The paper's S(w, A, B) on toy indices, by hand-written cosines."""
    cos = lambda u, v: np.dot(TOY[u], TOY[v]) / np.linalg.norm(TOY[u]) / np.linalg.norm(TOY[v])
    return np.mean([cos(w, a) for a in A]) - np.mean([cos(w, b) for b in B])


# X = {1} (man), Y = {4} (woman), A = lawyer, B = teacher; A_x = {5}, A_y = {7}, B_x = {10}, B_y = {12}
TOY_SETS = (toy(1), toy(4), toy(5), toy(7), toy(10), toy(12))


def test_toy_experiment1():
    # S(1,{5,7},{10,12}) - S(4,{5,7},{10,12}) = (0.3 - 0.8) - (0.7 - 0.3) = -0.9
    r = experiment1(*TOY_SETS)
    assert S(1, {5, 7}, {10, 12}) - S(4, {5, 7}, {10, 12}) == pytest.approx(-0.9)
    assert r.statistic == pytest.approx(-0.9)
    # one value per side: d = (a - b) / (|a - b| / sqrt 2) = -sqrt 2; both partitions are >= -0.5
    assert r.effect_size == pytest.approx(-math.sqrt(2))
    assert r.p == 1.0 and r.permutation.exact and r.permutation.n_partitions == 2
    # with the sides swapped the observed partition is the larger of the two: p = 1/2
    swapped = experiment1(toy(4), toy(1), toy(7), toy(5), toy(12), toy(10))
    assert swapped.statistic == pytest.approx(0.9) and swapped.p == 0.5


def test_toy_experiment2():
    # S(1,{5},{10}) - S(4,{7},{12}) = (0.6 - 0.8) - (0.6 - 0.6) = -0.2
    r = experiment2(*TOY_SETS)
    assert S(1, {5}, {10}) - S(4, {7}, {12}) == pytest.approx(-0.2)
    assert r.statistic == pytest.approx(-0.2)
    assert r.effect_size == pytest.approx(-math.sqrt(2))
    assert r.p == 1.0
    # masking variant of experiment 3 = experiment 2's statistic on (here: the same) embeddings,
    # or experiment 1's with the authors' masked_statistic "1"
    m = experiment3_masked(*TOY_SETS)
    assert (m.statistic, m.effect_size, m.p) == (r.statistic, r.effect_size, r.p)
    one = experiment3_masked(*TOY_SETS, statistic="1")
    assert one.experiment == "3-masked" and one.statistic == pytest.approx(experiment1(*TOY_SETS).statistic)
    with pytest.raises(ValueError, match="masked statistic must be '1' or '2'"):
        experiment3_masked(*TOY_SETS, statistic="3")


def test_toy_experiment3_formula_and_the_papers_worked_example():
    # The formula of section 4.3 (y ∈ Y, i.e. embedding 4):
    # S_x = S(1,{5},{10}) - S(1,{7},{12}) = -0.2 - (-0.8) = 0.6
    # S_y = S(4,{7},{12}) - S(4,{5},{10}) =  0.0 -   0.8  = -0.8      -> ½(0.6 + 0.8) = 0.7
    r = experiment3(*TOY_SETS)
    assert r.parts["X"]["statistic"] == pytest.approx(0.6)
    assert r.parts["Y"]["statistic"] == pytest.approx(-0.8)
    assert r.statistic == pytest.approx(0.7)
    assert r.effect_size == pytest.approx(math.sqrt(2))  # ½(|√2| + |−√2|)
    assert r.parts["X"]["p"] == 1.0 and r.p == 1.0  # two partitions: each tail is 1/2
    # The paper's worked example writes S(2,{7},{12}) - S(2,{5},{10}) for the Y half, i.e. the
    # word "man" shown with a woman (embedding 2), which contradicts its own formula (y ∈ Y).
    # We implement the formula; the literal example gives a different number:
    literal = 0.5 * (abs(S(1, {5}, {10}) - S(1, {7}, {12})) + abs(S(2, {7}, {12}) - S(2, {5}, {10})))
    assert literal == pytest.approx(1.0)
    assert r.statistic != pytest.approx(literal)


def _random_sets(rng, sizes=(5, 4, 3, 4, 2, 3), dim=6, shift=0.0):
    sets = [rng.normal(size=(n, dim)) for n in sizes]
    sets[0] = sets[0] + shift
    return sets


def _cos(u, v):
    return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))


def _s(w, A, B):
    return np.mean([_cos(w, a) for a in A]) - np.mean([_cos(w, b) for b in B])


def _exact_p(values, n_x):
    """One-sided exact permutation p by enumerating index subsets (ties count as extreme)."""
    obs = sum(values[:n_x])
    hits = total = 0
    for idx in itertools.combinations(range(len(values)), n_x):
        total += 1
        hits += sum(values[i] for i in idx) >= obs - 1e-12
    return hits / total


def test_brute_force_experiments_1_and_2():
    X, Y, Ax, Ay, Bx, By = _random_sets(np.random.default_rng(1), shift=0.3)
    A, B = np.concatenate([Ax, Ay]), np.concatenate([Bx, By])
    s1 = [_s(x, A, B) for x in X] + [_s(y, A, B) for y in Y]
    s2 = [_s(x, Ax, Bx) for x in X] + [_s(y, Ay, By) for y in Y]
    for f, s in ((experiment1, s1), (experiment2, s2)):
        r = f(X, Y, Ax, Ay, Bx, By, n_samples=1000)
        assert r.statistic == pytest.approx(sum(s[:5]) - sum(s[5:]))
        d = (np.mean(s[:5]) - np.mean(s[5:])) / np.std(s, ddof=1)
        assert r.effect_size == pytest.approx(d)
        assert r.permutation.exact and r.p == pytest.approx(_exact_p(s, 5))
    sx, sy = experiment1_sw(X, Y, Ax, Ay, Bx, By)
    np.testing.assert_allclose(np.concatenate([sx, sy]), s1)


def _signflip_p(d, groups):
    """p of T = Σ_g |Σ_{i∈g} ε_i d_i| by enumerating every sign vector (ties count as extreme)."""
    obs = sum(abs(sum(v for v, g in zip(d, groups) if g == k)) for k in set(groups))
    hits = total = 0
    for eps in itertools.product((1, -1), repeat=len(d)):
        t = sum(abs(sum(e * v for e, v, g in zip(eps, d, groups) if g == k)) for k in set(groups))
        total += 1
        hits += t >= obs - 1e-12
    return hits / total


def test_brute_force_experiment3():
    X, Y, Ax, Ay, Bx, By = _random_sets(np.random.default_rng(2))
    r = experiment3(X, Y, Ax, Ay, Bx, By, n_samples=1000)
    (cx, ix), (cy, iy) = experiment3_sw(X, Y, Ax, Ay, Bx, By)
    np.testing.assert_allclose(cx, [_s(x, Ax, Bx) for x in X])
    np.testing.assert_allclose(iy, [_s(y, Ax, Bx) for y in Y])
    halves = {}
    for name, con, inc in (("X", cx, ix), ("Y", cy, iy)):
        vals = list(con) + list(inc)
        stat = sum(con) - sum(inc)
        d = (np.mean(con) - np.mean(inc)) / np.std(vals, ddof=1)
        p = _signflip_p(list(con - inc), [0] * len(con))  # paired: one difference per target
        assert r.parts[name]["statistic"] == pytest.approx(stat)
        assert r.parts[name]["effect_size"] == pytest.approx(d)
        assert r.parts[name]["p"] == pytest.approx(p) and r.parts[name]["exact"]
        halves[name] = (stat, d, p)
    assert r.statistic == pytest.approx(0.5 * (abs(halves["X"][0]) + abs(halves["Y"][0])))
    assert r.effect_size == pytest.approx(0.5 * (abs(halves["X"][1]) + abs(halves["Y"][1])))
    # the joint null flips every target's sign independently; the statistic is the paper's
    joint = _signflip_p(list(cx - ix) + list(cy - iy), [0] * len(cx) + [1] * len(cy))
    assert r.p == pytest.approx(joint) and r.parts["joint"]["exact"]
    assert r.parts["joint"]["n_configurations"] == 2 ** (len(X) + len(Y))


@pytest.mark.parametrize("groups", [[0] * 9, [0] * 4 + [1] * 5, [0, 1, 2, 0, 1, 2, 0, 1, 2]])
def test_signflip_exact_matches_brute_force(groups):
    rng = np.random.default_rng(len(set(groups)))
    d = rng.normal(0.3, 1.0, size=len(groups))
    r = signflip_test(d, groups, n_samples=10_000)
    assert r.exact and r.n_samples == r.n_configurations == 2 ** len(d)
    assert r.p == pytest.approx(_signflip_p(list(d), groups), abs=1e-15)
    assert r.statistic == pytest.approx(sum(abs(d[np.array(groups) == g].sum()) for g in set(groups)))


def test_signflip_hand_checked_and_ties():
    # d = (1, 2): T over the four sign vectors = 3, 1, 1, 3 -> p = 2/4 (the observed one ties itself)
    assert signflip_test([1.0, 2.0]).p == 0.5
    # d = (1, 1, 1): |Σ ε| is 3 for (+++) and (---) only -> 2/8
    assert signflip_test([1.0, 1.0, 1.0]).p == 0.25
    # two groups of one: T = |d1| + |d2| whatever the signs -> every vector ties -> p = 1
    assert signflip_test([0.4, -2.0], [0, 1]).p == 1.0


def test_signflip_sampled_is_seeded_thread_independent_and_close_to_exact():
    import numba

    rng = np.random.default_rng(5)
    d = rng.normal(0.25, 1.0, size=16)
    groups = np.repeat([0, 1], 8)
    exact = signflip_test(d, groups, n_samples=2**16)
    threads = numba.get_num_threads()
    try:
        a = signflip_test(d, groups, n_samples=40_000, exact=False, seed=3, threads=1)
        b = signflip_test(d, groups, n_samples=40_000, exact=False, seed=3, threads=max(2, threads))
    finally:
        numba.set_num_threads(threads)
    assert exact.exact and not a.exact and a.seed == 3
    assert a.p == b.p and a.n_extreme == b.n_extreme
    assert signflip_test(d, groups, n_samples=40_000, exact=False, seed=4).p != a.p
    assert abs(a.p - exact.p) < 4 * a.p_se + 1e-4
    # more than 64 pairs: a draw takes several random words
    long = signflip_test(rng.normal(size=130), n_samples=5000, seed=1)
    assert not long.exact and 0.0 < long.p <= 1.0


def test_signflip_bad_inputs():
    with pytest.raises(ValueError, match="NaN or inf"):
        signflip_test([1.0, np.nan])
    with pytest.raises(ValueError, match="groups must be 2 labels"):
        signflip_test([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="refused"):
        signflip_test(np.ones(40), exact=True)


def test_sampled_mode_is_seeded_and_close_to_exact():
    X, Y, Ax, Ay, Bx, By = _random_sets(np.random.default_rng(3), sizes=(8, 8, 4, 4, 4, 4), shift=0.2)
    exact = experiment2(X, Y, Ax, Ay, Bx, By, n_samples=20_000)
    a = experiment2(X, Y, Ax, Ay, Bx, By, n_samples=20_000, exact=False, seed=7)
    b = experiment2(X, Y, Ax, Ay, Bx, By, n_samples=20_000, exact=False, seed=7)
    assert exact.permutation.exact and not a.permutation.exact
    assert a.p == b.p
    assert abs(a.p - exact.p) < 5 * a.permutation.p_se + 1e-4


def test_bad_inputs_name_the_set():
    X, Y, Ax, Ay, Bx, By = _random_sets(np.random.default_rng(4))
    with pytest.raises(ValueError, match="set B_y is empty"):
        experiment1(X, Y, Ax, Ay, Bx, By[:0])
    with pytest.raises(ValueError, match="set A_x: dimension 5"):
        experiment2(X, Y, Ax[:, :5], Ay, Bx, By)
    with pytest.raises(ValueError, match="unknown grounded experiment"):
        grounded_test("4", X, Y, Ax, Ay, Bx, By)
    assert grounded_test("2", X, Y, Ax, Ay, Bx, By).experiment == "2"


# --- differential check against the authors' implementation -------------------------------------

AUTHORS_WEAT = ("weat_images_union", "weat_images_targ_specific", "weat_images_intra_targ", "weat_images_masked_regions")


@pytest.fixture(scope="module")
def reference():
    """The authors' statistic modules (scripts/weat/*.py of candacelax/bias-in-vision-and-language
    at 162298016af6d728453a8c3d47554a6e87e18be2), imported from the directory in $VLBIAS_GROUNDED_REFERENCE."""
    root = checkout("VLBIAS_GROUNDED_REFERENCE", "a checkout of candacelax/bias-in-vision-and-language "
                    "(commit 162298016af6d728453a8c3d47554a6e87e18be2) to compare with the authors' statistics",
                    *(f"scripts/weat/{name}.py" for name in AUTHORS_WEAT))
    torch = pytest.importorskip("torch")
    pytest.importorskip("scipy")
    pytest.importorskip("tqdm")
    mp = pytest.MonkeyPatch()
    # The authors ran numpy < 1.24 (np.int) on a GPU (.cuda()); shim both for a CPU run.
    mp.setattr(np, "int", int, raising=False)
    mp.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    mods = {}
    for name in AUTHORS_WEAT:
        path = root / "scripts" / "weat" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"grounded_reference_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods[name] = mod
    yield mods
    mp.undo()


def _as_ref(rng, n, dim, shift):
    """One set as the authors' code takes it: {key: 1-D float64 tensor}, plus our (n, dim) array."""
    import torch

    M = rng.normal(size=(n, dim)) + shift
    return {f"w{i}": torch.tensor(row) for i, row in enumerate(M)}, M


def _inputs(seed, sizes, dim=16, shift=0.15):
    rng = np.random.default_rng(seed)
    pairs = [_as_ref(rng, n, dim, shift if i == 0 else 0.0) for i, n in enumerate(sizes)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _close_p(p_ref, n_ref, p_ours, n_ours):
    """Two independent Monte-Carlo estimates of one p agree within 4 standard errors."""
    pbar = (p_ref * n_ref + p_ours * n_ours) / (n_ref + n_ours)
    return abs(p_ref - p_ours) <= 4 * math.sqrt(pbar * (1 - pbar) * (1 / n_ref + 1 / n_ours)) + 2 / n_ref


def test_reference_experiment1_exact(reference):
    # |X| = |Y| = 8: the authors' numpy copy of the experiment-1 test enumerates all C(16, 8)
    # partitions, as ours does, so effect size and p must agree exactly.
    ref_sets, sets = _inputs(10, (8, 8, 5, 6, 7, 4))
    d_ref, p_ref = reference["weat_images_masked_regions"].run_test(*ref_sets, 20_000, "X", "Y", "A", "B")
    ours = experiment1(*sets, n_samples=20_000)
    print(f"\nexperiment 1 exact: d ours {ours.effect_size:.6f} ref {d_ref:.6f}; p ours {ours.p:.6f} ref {p_ref:.6f}")
    assert ours.permutation.exact
    assert ours.effect_size == pytest.approx(float(d_ref), rel=1e-9)
    assert ours.p == pytest.approx(p_ref, abs=1e-12)


def test_reference_experiments_1_and_2_sampled(reference):
    # |X| = |Y| = 24: the authors' torch code samples (its exact branch cannot index a tensor with
    # a tuple); compare effect sizes exactly and p within Monte-Carlo error.
    ref_sets, sets = _inputs(11, (24, 24, 6, 5, 5, 6))
    n = 4000
    for name, ours_f, exp in (("weat_images_union", experiment1, "1"), ("weat_images_targ_specific", experiment2, "2")):
        np.random.seed(0)
        d_ref, p_ref = reference[name].run_test(*ref_sets, n, "X", "Y", "A", "B")
        ours = ours_f(*sets, n_samples=n, seed=0)
        print(f"\nexperiment {exp} sampled (n={n}): d ours {ours.effect_size:.6f} ref {float(d_ref):.6f}; "
              f"p ours {ours.p:.4f} ref {p_ref:.4f}")
        assert not ours.permutation.exact
        assert ours.effect_size == pytest.approx(float(d_ref), rel=1e-5)  # authors' cosines are float32
        assert _close_p(p_ref, n, ours.p, n)


def test_reference_experiment3(reference):
    # The authors report d per target set: d_x as ours, d_y with the opposite orientation
    # (s(y,A_x,B_x) − s(y,A_y,B_y)); the paper's |·| removes the sign. Their sampler never adds a
    # permutation to its counts (the loop ends before computing s_i), so their p is always 1;
    # for |X| ≤ 20 it raises. Ours is the paired sign-flip p of the docstring.
    ref_sets, sets = _inputs(12, (24, 24, 6, 5, 5, 6), shift=0.5)
    # shift X's congruent attribute images A_x the same way as X: S_x > 0
    for k in ref_sets[2]:
        ref_sets[2][k] = ref_sets[2][k] + 0.5
    sets[2] = sets[2] + 0.5
    np.random.seed(0)
    d_x, p_x, d_y, p_y = reference["weat_images_intra_targ"].run_test(*ref_sets, 50, "X", "Y", "A", "B")
    ours = experiment3(*sets, n_samples=20_000)
    print(f"\nexperiment 3: d_x ours {ours.parts['X']['effect_size']:.6f} ref {d_x:.6f}; "
          f"d_y ours {ours.parts['Y']['effect_size']:.6f} ref {d_y:.6f} (sign flipped); "
          f"p_x ours {ours.parts['X']['p']:.4f} ref {p_x}; p_y ours {ours.parts['Y']['p']:.4f} ref {p_y}; "
          f"combined d {ours.effect_size:.6f} p {ours.p:.4f}")
    assert ours.parts["X"]["effect_size"] == pytest.approx(d_x, rel=1e-5)
    assert ours.parts["Y"]["effect_size"] == pytest.approx(-d_y, rel=1e-5)
    assert ours.effect_size == pytest.approx(0.5 * (abs(d_x) + abs(d_y)), rel=1e-5)
    assert p_x == 1.0 and p_y == 1.0  # the authors' p, whatever the data
    assert ours.parts["X"]["p"] < 0.05  # the shifted A_x is detected


def test_reference_masking_variant(reference):
    # Paper: variant 2 is experiment 2 on masked embeddings. The authors' code (run_weat_mask)
    # runs experiment 1's statistic instead. Ours equals their experiment-2 code on the same
    # (masked) inputs and differs from what their tables used.
    ref_sets, sets = _inputs(14, (24, 24, 5, 6, 7, 4))
    ours = experiment3_masked(*sets, n_samples=1000)
    np.random.seed(0)
    d_spec, _ = reference["weat_images_targ_specific"].run_test(*ref_sets, 200, "X", "Y", "A", "B")
    d_union, _ = reference["weat_images_union"].run_test(*ref_sets, 200, "X", "Y", "A", "B")
    print(f"\nmasking variant: d ours (exp-2 statistic) {ours.effect_size:.6f}; authors' exp-2 code "
          f"{float(d_spec):.6f}; authors' run_weat_mask (exp-1 statistic) {float(d_union):.6f}")
    assert ours.effect_size == pytest.approx(float(d_spec), rel=1e-5)
    assert ours.effect_size != pytest.approx(float(d_union), rel=1e-3)
    authors = experiment3_masked(*sets, n_samples=1000, statistic="1")  # masked_statistic: "1"
    assert authors.effect_size == pytest.approx(float(d_union), rel=1e-5)
