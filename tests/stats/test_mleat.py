"""The ML-EAT (vlbias.stats.mleat) on hand-checked embeddings, its nine patterns, its edge cases and
figures (vlbias.report.mleat), and on the iEAT authors' published vectors."""

import itertools
from math import erfc, sqrt

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from PIL import Image

from vlbias.report.mleat import adjusted, draw_maps, lit, mleat_frame, plot_eat_map, plot_pattern_summary
from vlbias.stats import effect_size, permutation_pvalue
from vlbias.stats.bootstrap import effect_size_ci
from vlbias.stats.mleat import PATTERNS, QUADRANTS, mleat
from vlbias.stats.row import MLEAT

# --- hand-checked: every statistic of one tiny test ------------------------------------------------
# Vectors of length 5 in 3-D, so every cosine is a dot product / 25:
#            a1=(5,0,0) a2=(4,3,0) | b1=(0,0,5) b2=(0,3,4)
# x1=(4,0,3)    0.80       0.64    |    0.60       0.48
# x2=(3,4,0)    0.60       0.96    |    0.00       0.48
# y1=(0,4,3)    0.00       0.48    |    0.60       0.96
# y2=(3,0,4)    0.60       0.48    |    0.80       0.64
X = np.array([[4.0, 0, 3], [3, 4, 0]])
Y = np.array([[0.0, 4, 3], [3, 0, 4]])
A = np.array([[5.0, 0, 0], [4, 3, 0]])
B = np.array([[0.0, 0, 5], [0, 3, 4]])


def normal_upper(z):
    return 0.5 * erfc(z / sqrt(2))


def test_level3_by_hand():
    r = mleat(X, Y, A, B)
    # μ_XA = (.8 + .64 + .6 + .96)/4 = .75; deviations .05 −.11 −.15 .21, squares sum .0812, /3
    assert r.level3["XA"].mean == pytest.approx(0.75, abs=1e-12)
    assert r.level3["XA"].std == pytest.approx(sqrt(0.0812 / 3), abs=1e-12)
    # μ_XB = (.6 + .48 + 0 + .48)/4 = .39; deviations .21 .09 −.39 .09, squares sum .2124
    assert r.level3["XB"].mean == pytest.approx(0.39, abs=1e-12)
    assert r.level3["XB"].std == pytest.approx(sqrt(0.2124 / 3), abs=1e-12)
    # Y is X mirrored (A ↔ B): μ_YA = .39, μ_YB = .75
    assert (r.level3["YA"].mean, r.level3["YB"].mean) == pytest.approx((0.39, 0.75), abs=1e-12)
    assert [r.level3[q].n for q in QUADRANTS] == [4, 4, 4, 4]


def test_level2_by_hand():
    r = mleat(X, Y, A, B, alpha=0.2, null="count")
    x, y = r.level2["X"], r.level2["Y"]
    # s(c, X) = mean over x of cos(c, x): a1 (.8+.6)/2 = .7, a2 (.64+.96)/2 = .8, b1 (.6+0)/2 = .3, b2 .48
    assert x.s_a == pytest.approx((0.7, 0.8), abs=1e-12) and x.s_b == pytest.approx((0.3, 0.48), abs=1e-12)
    # d_X = (.75 − .39) / std(.7, .8, .3, .48): deviations from .57 are .13 .23 −.27 −.09, squares .1508
    assert x.d == pytest.approx(0.36 / sqrt(0.1508 / 3), rel=1e-12)
    # the 6 splits of A∪B into two pairs sum A's side to 1.5 (observed) 1.0 1.18 1.1 1.28 .78: 1.5 is the largest
    assert x.p_count == pytest.approx(1 / 6) and x.exact and x.n_samples == 6
    # the normal null: mean 2·.57 = 1.14, variance 2·2/3·(.1508/4): z = .36/√.0503 (the authors' reading)
    assert x.p_normal == pytest.approx(normal_upper(0.36 / sqrt(4 / 3 * 0.1508 / 4)), rel=1e-9)
    assert x.p == x.p_count  # null="count"
    # Y mirrors X: d_Y = −d_X, and its p is the lower tail (1.5 the smallest sum of its A side: .3+.48 = .78)
    assert y.d == pytest.approx(-x.d, rel=1e-12)
    assert y.p_count == pytest.approx(1 / 6) and y.p_normal == pytest.approx(x.p_normal, rel=1e-9)
    assert r.outcomes == ("A", "B") and r.pattern == "XA-YB"
    # at α = .05 neither 1/6 nor .054 counts
    assert mleat(X, Y, A, B).pattern == "none" and mleat(X, Y, A, B, null="count").pattern == "none"


def test_level1_by_hand():
    r = mleat(X, Y, A, B)
    # s(w, A, B): x1 .72−.54 = .18, x2 .78−.24 = .54, y1 −.54, y2 −.18; d = .72/std = .72/√(.648/3) = √2.4
    assert r.level1.d == pytest.approx(sqrt(2.4), rel=1e-12)
    # of the 6 pairs {.18, .54} alone sums to .72 or more
    assert r.level1.p == pytest.approx(1 / 6) and r.level1.exact
    # the normal null of Σ_X s: mean 0, variance 2·2/3·(.648/4) = .216
    assert r.level1.p_normal == pytest.approx(normal_upper(0.72 / sqrt(0.216)), rel=1e-9)


def test_the_levels_nest():
    rng = np.random.default_rng(3)
    X, Y, A, B = (rng.normal(size=(n, 6)) for n in (4, 5, 6, 3))
    r = mleat(X, Y, A, B, n_samples=200)
    l3 = {q: r.level3[q].mean for q in QUADRANTS}
    for t in "XY":  # mean_a s(a, T) = μ_TA: Level 2 averages what Level 3 does
        assert np.mean(r.level2[t].s_a) == pytest.approx(l3[t + "A"], abs=1e-14)
        assert np.mean(r.level2[t].s_b) == pytest.approx(l3[t + "B"], abs=1e-14)
    # d₁'s numerator is (μ_XA − μ_XB) − (μ_YA − μ_YB): recover the std it divides by from d₁ itself
    s = np.concatenate([(X_ := _s(X, A, B)), _s(Y, A, B)])
    numerator = (l3["XA"] - l3["XB"]) - (l3["YA"] - l3["YB"])
    assert numerator / np.std(s, ddof=1) == pytest.approx(r.level1.d, rel=1e-12)
    assert X_.mean() - _s(Y, A, B).mean() == pytest.approx(numerator, abs=1e-14)


def _s(W, A, B):
    unit = lambda M: M / np.linalg.norm(M, axis=1, keepdims=True)
    return (unit(W) @ unit(A).T).mean(1) - (unit(W) @ unit(B).T).mean(1)


def test_level2_of_a_single_target_is_the_sc_eat():
    r = mleat(X[:1], Y, A, B)
    # x1's cosines: A .8 .64, B .6 .48; SC-EAT d = (.72 − .54)/std(.8, .64, .6, .48) = .18/√(.0524/3)
    assert r.level2["X"].d == pytest.approx(0.18 / sqrt(0.0524 / 3), rel=1e-12)
    # Level 1 refuses a target set of one (d = ±√2 whatever the vectors); the others stand
    assert np.isnan(r.level1.d) and np.isnan(r.level1.p) and "|X| = 1" in r.level1.status
    assert r.status.startswith("level 1: |X| = 1") and r.pattern != "undefined"
    assert r.row()["status"] == r.status


def test_level1_is_todays_test_bit_for_bit():
    # sets large enough that another order of the same sums (cosine matrix, then means) moves d in the last bit
    rng = np.random.default_rng(1)
    X, Y, A, B = (rng.normal(size=(n, 64)) + shift for n, shift in ((19, 0.2), (17, -0.2), (26, 0.5), (28, -0.5)))
    ci = {"level": 0.9, "n_boot": 500, "seed": 4, "method": "bca"}
    r = mleat(X, Y, A, B, n_samples=3000, seed=11, exact=False, ci=ci)
    today = permutation_pvalue(X, Y, A, B, n_samples=3000, seed=11, exact=False)
    interval = effect_size_ci(X, Y, A, B, **ci)
    assert r.level1.d == effect_size(X, Y, A, B)
    assert (r.level1.p, r.level1.p_se, r.level1.seed) == (today.p, today.p_se, 11)
    assert (r.level1.d_low, r.level1.d_high) == (interval.low, interval.high)


# --- the nine patterns ------------------------------------------------------------------------------
# 2-D unit vectors by angle: A around 0° (−5, 0, 5), B around 90° (85, 90, 95). A target pair near 0° is
# nearer every A than every B (Level 2 → A), near 90° the reverse (→ B), and one placed symmetrically
# about 45° is as near A as B (d_T = 0 up to rounding → neither). X and Y take different angles so that
# Level 1's s-values vary whatever the pattern.


def unit(degrees):
    r = np.radians(degrees)
    return np.stack([np.cos(r), np.sin(r)], axis=1)


ANGLES = {"X": {"A": [0, 6], "B": [90, 84], "": [40, 50]}, "Y": {"A": [14, 20], "B": [76, 70], "": [38, 52]}}
A9, B9 = unit([-5, 0, 5]), unit([85, 90, 95])


@pytest.mark.parametrize("o_x, o_y", list(itertools.product("AB ", repeat=2)))
def test_each_of_the_nine_patterns(o_x, o_y):
    o_x, o_y = o_x.strip(), o_y.strip()
    X9, Y9 = unit(ANGLES["X"][o_x]), unit(ANGLES["Y"][o_y])
    r = mleat(X9, Y9, A9, B9)
    code = PATTERNS[(o_x, o_y)][0]
    assert r.outcomes == (o_x, o_y) and r.pattern == code and r.status == "ok"
    for t, o in zip("XY", (o_x, o_y)):
        l2 = r.level2[t]
        if o:  # 3 + 3 stimuli far apart: the normal null puts them near its 1.3 % tail
            assert l2.p < 0.02 and np.sign(l2.d) == (1 if o == "A" else -1)
        else:
            assert l2.p >= 0.4
    # the count null has 20 partitions: its smallest p is 1/20, which α = .05 does not take ...
    counted = mleat(X9, Y9, A9, B9, null="count")
    assert counted.pattern == "none"
    assert all(counted.level2[t].p_count == pytest.approx(0.05) for t, o in zip("XY", (o_x, o_y)) if o)
    # ... and α just above it does
    assert mleat(X9, Y9, A9, B9, null="count", alpha=0.051).pattern == code


def test_patterns_cover_every_outcome_once():
    assert len(PATTERNS) == 9 and len({code for code, _ in PATTERNS.values()}) == 9
    assert set(PATTERNS) == set(itertools.product(("A", "B", ""), repeat=2))


# --- edge cases ------------------------------------------------------------------------------------

def test_ties_identical_attribute_sets_give_no_pattern():
    # A and B the same vectors: s(a, T) = s(b, T) pairwise, d_T = 0 exactly; the ties count as extreme
    r = mleat(X, Y, A, A, null="count")
    for t in "XY":
        assert r.level2[t].d == 0.0 and r.level2[t].p_count >= 0.5
    assert r.pattern == "none"
    assert np.isnan(r.level1.d) and "zero variance" in r.level1.status  # every s(w, A, A) is 0


def test_identical_targets_give_level1_zero_and_ties():
    r = mleat(X, X, A, B, null="count")
    # s = (.18, .54 | .18, .54): the 6 splits sum X's side to .72 four times (the observed one among them),
    # .36 once and 1.08 once, so 5 of 6 reach .72
    assert r.level1.d == 0.0 and r.level1.p == pytest.approx(5 / 6)
    assert r.level2["X"].d == r.level2["Y"].d


def test_zero_variance_is_nan_with_its_reason():
    # every target the same vector: s(w, A, B) has no variance, Level 1 is undefined; Level 2 is not
    same = np.repeat(X[:1], 2, axis=0)
    r = mleat(same, same, A, B)
    assert np.isnan(r.level1.d) and "zero variance" in r.level1.status
    assert np.isfinite(r.level2["X"].d)


def test_an_attribute_set_of_one_leaves_level2_and_the_pattern_undefined():
    r = mleat(X, Y, A[:1], B)
    for t in "XY":
        assert np.isnan(r.level2[t].d) and np.isnan(r.level2[t].p) and "|A| = 1" in r.level2[t].status
    assert r.pattern == "undefined" and r.outcomes == (None, None)
    assert np.isfinite(r.level1.d)
    assert "level 2 X: |A| = 1" in r.status
    # one target and one attribute: a single cosine per quadrant, no std
    r = mleat(X[:1], Y[:1], A[:1], B[:1])
    assert np.isnan(r.level3["XA"].std) and r.level3["XA"].mean == pytest.approx(0.8)
    assert "level 3 XA: one cosine, no std" in r.status


def test_the_same_seed_gives_the_same_p_and_another_seed_another():
    rng = np.random.default_rng(5)
    X, Y, A, B = (rng.normal(size=(n, 5)) for n in (8, 8, 9, 9))
    run = lambda seed: mleat(X, Y, A, B, n_samples=2000, seed=seed, exact=False, null="count").row()
    first, again, other = run(3), run(3), run(4)
    assert all(first[k] == again[k] or (pd.isna(first[k]) and pd.isna(again[k])) for k in MLEAT.computed)
    assert first["seed"] == 3 and not first["l2x_exact"]
    # every level draws its partitions from the seed (Y's p is a lower tail here: d_Y < 0)
    assert first["l2y_d"] < 0 and all(first[k] != other[k] for k in ("l1_p", "l2x_p", "l2y_p"))


def test_the_seed_column_is_the_seed_of_whichever_level_sampled():
    """A row's one seed: Level 1 sampled (C(16, 8) = 12,870 partitions > 1,000) beside an exact Level 2
    (C(4, 2) = 6), and the other way round."""
    rng = np.random.default_rng(5)
    eight, two = rng.normal(size=(2, 8, 4)), rng.normal(size=(2, 2, 4))
    r = mleat(*eight, *two, n_samples=1000, seed=3)
    assert (r.level1.exact, r.level2["X"].exact, r.level2["Y"].exact) == (False, True, True)
    assert r.row()["seed"] == 3
    r = mleat(*two, *eight, n_samples=1000, seed=3)
    assert (r.level1.exact, r.level2["X"].exact) == (True, False) and r.row()["seed"] == 3
    assert mleat(X, Y, A, B, seed=3).row()["seed"] == ""  # every level exact: no seed drew anything


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="set B: row"):
        mleat(X, Y, A, np.array([[np.nan, 0, 1], [0, 1, 0]]))
    with pytest.raises(ValueError, match="set A: dimension 2"):
        mleat(X, Y, A[:, :2], B)
    with pytest.raises(ValueError, match="null must be one of"):
        mleat(X, Y, A, B, null="exact")
    with pytest.raises(ValueError, match="alpha"):
        mleat(X, Y, A, B, alpha=5)


def test_cosine_flag_marks_a_saturated_space():
    # every vector within a few degrees of one direction: all cosines above .99
    rng = np.random.default_rng(2)
    near = lambda n: np.array([1.0, 0, 0]) + 0.05 * rng.normal(size=(n, 3))
    r = mleat(near(3), near(3), near(4), near(4))
    assert r.cosine_uninformative and min(r.level3[q].mean for q in QUADRANTS) > 0.99
    assert not mleat(near(3), near(3), near(4), near(4), saturation=0.999).cosine_uninformative
    assert not mleat(X, Y, A, B).cosine_uninformative  # μ .39 to .75


def test_row_has_every_column_in_order():
    row = mleat(X, Y, A, B).row()
    assert list(row) == MLEAT.computed
    assert row["pattern"] == "none" and row["l1_n_partitions"] == "6" and row["null"] == "normal"


# --- figures ---------------------------------------------------------------------------------------

LABELS = {"X": "Flower", "Y": "Insect", "A": "Pleasant", "B": "Unpleasant"}


def test_eat_map_draws_each_quadrant_where_it_belongs(tmp_path):
    r = mleat(X, Y, A, B, alpha=0.2, null="count")  # pattern XA-YB
    fig = plot_eat_map(r, tmp_path / "map.png", "Tiny", LABELS)
    assert (tmp_path / "map.png").stat().st_size > 10_000
    axes = {ax.get_gid(): ax for ax in fig.axes}
    assert set(axes) == set(QUADRANTS)
    box = {q: axes[q].get_position() for q in QUADRANTS}
    assert box["XA"].x0 < box["XB"].x0 and box["YA"].x0 < box["YB"].x0  # A left of B
    assert box["XA"].y0 > box["YA"].y0 and box["XB"].y0 > box["YB"].y0  # X above Y
    for q in QUADRANTS:
        ax = axes[q]
        points = next(c for c in ax.collections if c.get_gid() == "points").get_offsets()[:, 1]
        expected = getattr(r.level2[q[0]], "s_" + q[1].lower())
        assert list(points) == pytest.approx(list(expected))  # Level 2's data: one point per attribute stimulus
        mean = next(line for line in ax.lines if line.get_gid() == "mean").get_ydata()
        assert mean[0] == pytest.approx(r.level3[q].mean)
        assert f"μ = {r.level3[q].mean:.3f}" in next(t for t in ax.texts if t.get_gid() == "level3").get_text()
    # shaded: X with A (red), Y with B (red); the other two blank
    assert to_rgba(axes["XA"].get_facecolor()) == to_rgba("#f6d2cf") == to_rgba(axes["YB"].get_facecolor())
    assert to_rgba(axes["XB"].get_facecolor()) == to_rgba("white") == to_rgba(axes["YA"].get_facecolor())
    assert axes["XA"].get_title() == "A: Pleasant" and axes["XB"].get_title() == "B: Unpleasant"
    assert axes["XA"].get_ylabel().startswith("X: Flower\nLevel 2: d = 1.61") and "p = 0.167" in axes["XA"].get_ylabel()
    assert axes["YA"].get_ylabel().startswith("Y: Insect\nLevel 2: d = -1.61")
    title = fig._suptitle.get_text()
    assert "Tiny" in title and "Level 1: d = 1.55, p = 0.167" in title and "pattern XA-YB" in title
    assert "uninformative" not in title


def test_stars_mark_the_holm_adjusted_p_as_the_tables_do(tmp_path):
    """The summary and the EAT-Maps starred the raw p where every table and heatmap stars
    the Holm-adjusted p (18 of 73 iEAT cells differed: "0.62**" on a map, "0.62*" in Table 1). Level 1's
    p adjusted within one model's tests as the results table adjusts it (vlbias.stats.adjust.add_adjusted,
    family model and stimulus family); Level 2's over those tests' targets."""
    from vlbias.stats.adjust import add_adjusted, holm

    r = mleat(X, Y, A, B, alpha=0.2, null="count")
    ps = {("m", "t1"): 0.004, ("m", "t2"): 0.02, ("m", "t3"): 0.03, ("n", "t1"): 0.004, ("n", "t2"): 0.9}
    rows = mleat_frame({"test": t, "name": t, "family": "own", "model": m, **r.row(), "l1_d": 0.5, "l1_p": p,
                        "l2x_p": p / 2, "l2y_p": p / 3} for (m, t), p in ps.items())
    df = adjusted(rows)
    table = add_adjusted(pd.DataFrame({"model": rows["model"], "family": "own", "p": rows["l1_p"], "status": "ok"}),
                         family=("model", "family"))
    assert list(df["l1_p_holm"]) == pytest.approx(list(table["p_holm"]))  # the table's adjusted p, its stars
    assert list(df["l1_p_holm"]) == pytest.approx([0.012, 0.04, 0.04, 0.008, 0.9])
    m = rows["model"] == "m"
    l2 = holm(np.stack([rows.loc[m, "l2x_p"], rows.loc[m, "l2y_p"]], axis=1).ravel()).reshape(-1, 2)
    assert np.allclose(df.loc[m, ["l2x_p_holm", "l2y_p_holm"]].to_numpy(), l2)
    fig = plot_pattern_summary(rows, tmp_path / "s.png", "table")
    label = {t.get_gid(): t.get_text() for t in fig.axes[0].texts}
    assert (label["t1|m|d"], label["t2|m|d"], label["t1|n|d"]) == ("0.50*", "0.50*", "0.50**")  # raw: ** * **
    # a map stars the p it is given: its table's (write_mleat hands each map its row's)
    fig = plot_eat_map(r, tmp_path / "map.png", p_holm={"l1_p_holm": 0.004, "l2x_p_holm": 0.03, "l2y_p_holm": 0.5})
    axes = {ax.get_gid(): ax for ax in fig.axes}
    assert "Level 1: d = 1.55**, p = 0.167" in fig._suptitle.get_text()
    assert "d = 1.61*, p = 0.167" in axes["XA"].get_ylabel() and "d = -1.61, p" in axes["YA"].get_ylabel()
    assert "Holm-adjusted" in fig._supxlabel.get_text()


def test_eat_map_of_a_reversed_pattern_shades_against_the_test(tmp_path):
    r = mleat(unit(ANGLES["X"]["B"]), unit(ANGLES["Y"]["A"]), A9, B9)
    fig = plot_eat_map(r, tmp_path / "map.png")
    axes = {ax.get_gid(): ax for ax in fig.axes}
    assert r.pattern == "XB-YA"
    assert to_rgba(axes["XB"].get_facecolor()) == to_rgba("#cfe0f1") == to_rgba(axes["YA"].get_facecolor())
    assert to_rgba(axes["XA"].get_facecolor()) == to_rgba("white")
    assert axes["XA"].get_title() == "A: A"  # no labels: the set symbols


def test_eat_map_says_when_cosine_is_uninformative(tmp_path):
    rng = np.random.default_rng(2)
    near = lambda n: np.array([1.0, 0, 0]) + 0.05 * rng.normal(size=(n, 3))
    fig = plot_eat_map(mleat(near(3), near(3), near(4), near(4)), tmp_path / "map.png")
    assert "cosine similarity uninformative: every μ ≥ 0.9" in fig._suptitle.get_text()


def test_maps_drawn_in_worker_processes_are_the_maps_drawn_here(tmp_path):
    results = [mleat(X, Y, A, B, alpha=0.2, null="count"), mleat(unit(ANGLES["X"]["B"]), unit(ANGLES["Y"]["A"]), A9, B9),
               mleat(X, Y, A, B)]
    maps = [(r, f"{i}.png", f"Test {i}", LABELS) for i, r in enumerate(results)]
    for folder, workers in (("here", 1), ("forked", 2)):
        (tmp_path / folder).mkdir()
        draw_maps([(r, tmp_path / folder / name, title, labels) for r, name, title, labels in maps], workers)
    for _, name, _, _ in maps:  # each map once, its own (not another's, not left out)
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name



def test_maps_share_one_figure_drawn_once_each_without_a_layout_engine(tmp_path, monkeypatch):
    """A map cost 0.26 CPU-s, three quarters of it a fresh Figure and its constrained layout (solved twice
    per savefig: a dry draw, then the real one): the maps share one Figure, placed by arithmetic on the
    texts' measured extents, and each is drawn once."""
    import matplotlib.layout_engine
    from matplotlib.figure import Figure

    draws, solves, draw = [], [], Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda fig, renderer: (draws.append(fig), draw(fig, renderer))[1])
    monkeypatch.setattr(matplotlib.layout_engine, "do_constrained_layout", lambda *a, **k: solves.append(a) or {})
    results = [mleat(X, Y, A, B, alpha=0.2, null="count"), mleat(unit(ANGLES["X"]["B"]), unit(ANGLES["Y"]["A"]), A9, B9)]
    draw_maps([(r, tmp_path / f"{i}.png", f"Test {i}", LABELS) for i, r in enumerate(results * 2)])
    assert len(draws) == 4 and len(set(map(id, draws))) == 1 and not solves


def test_a_map_whose_note_is_pasted_is_the_map_drawn_whole(tmp_path, monkeypatch):
    """A map after one with the same note is drawn without the note and gets its strip pasted back: the
    same pixels as the map drawn first in a fresh figure; a map whose note differs (another alpha) draws
    its own."""
    import vlbias.report.mleat as report

    first, second = mleat(X, Y, A, B), mleat(unit(ANGLES["X"]["B"]), unit(ANGLES["Y"]["A"]), A9, B9)
    other = mleat(X, Y, A, B, alpha=0.2, null="count")
    pixels = lambda path: np.asarray(Image.open(path))
    monkeypatch.setattr(report, "_FIGURE", None)
    for i, r in enumerate((first, second, other)):
        plot_eat_map(r, tmp_path / f"after-{i}.png", f"Test {i}", LABELS)
    for i, r in enumerate((second, other)):
        monkeypatch.setattr(report, "_FIGURE", None)  # a fresh figure: the map drawn whole
        plot_eat_map(r, tmp_path / f"whole-{i}.png", f"Test {i + 1}", LABELS)
    assert np.array_equal(pixels(tmp_path / "after-1.png"), pixels(tmp_path / "whole-0.png"))
    assert np.array_equal(pixels(tmp_path / "after-2.png"), pixels(tmp_path / "whole-1.png"))


def test_eat_map_places_its_y_labels_where_matplotlib_would(tmp_path):
    """The y labels are placed by hand (place), not at each draw: where matplotlib's own placement puts them."""
    from matplotlib.transforms import IdentityTransform, blended_transform_factory

    rng = np.random.default_rng(3)
    for scale in (1.0, 1e-3):  # tick labels of two widths, and an offset text
        r = mleat(*(scale * rng.normal(size=(n, 3)) + 1 for n in (8, 8, 9, 9)))
        fig = plot_eat_map(r, tmp_path / "map.png", "Test", LABELS)
        assert_texts_apart(fig)  # the second's offset text ("+1") too, after a map without one
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes[::2]:  # the left column
            placed = ax.yaxis.label.get_window_extent(renderer)
            # matplotlib's own: x in pixels, y in the axes' fraction, set at each draw
            ax.yaxis.label.set_transform(blended_transform_factory(IdentityTransform(), ax.transAxes))
            ax.yaxis._autolabelpos = True
            ax.yaxis._update_label_position(renderer)
            assert np.allclose(ax.yaxis.label.get_window_extent(renderer).extents, placed.extents), ax.get_gid()


def assert_texts_apart(fig):
    """Every text around an EAT-Map's quadrants inside the figure and clear of the others and of the axes."""
    renderer = fig.canvas.get_renderer()
    axes = {ax.get_gid(): ax for ax in fig.axes}
    lo, hi = axes["XA"].get_ylim()
    texts = [fig._suptitle, fig._supxlabel, axes["XA"].title, axes["XB"].title, axes["XA"].yaxis.label,
             axes["YA"].yaxis.label, *(axes[q].yaxis.offsetText for q in ("XA", "YA") if axes[q].yaxis.offsetText.get_text())]
    drawn = lambda tick: abs(tick.get_loc() - (lo + hi) / 2) <= (hi - lo) * (0.5 + 1e-9)  # a tick on a limit too
    texts += [t.label1 for q in ("XA", "YA") for t in axes[q].yaxis.get_major_ticks() if drawn(t)]
    boxes = [t.get_window_extent(renderer) for t in texts]
    for b, t in zip(boxes, texts, strict=True):
        assert fig.bbox.x0 <= b.x0 and b.x1 <= fig.bbox.x1 and fig.bbox.y0 <= b.y0 and b.y1 <= fig.bbox.y1, t
        assert not any(b.overlaps(ax.bbox) for ax in fig.axes), t
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_eat_map_fits_its_texts_in_the_figure_apart(tmp_path):
    """The titles, the y labels and tick labels, the suptitle (up to four lines) and the note under the map
    (it ran past both edges of the figure when it was two lines long) fit, clear of each other."""
    import vlbias.report.mleat as report

    rng = np.random.default_rng(2)
    near = lambda n: np.array([1.0, 0, 0]) + 0.05 * rng.normal(size=(n, 3))
    title = "Double bind, likable: male/female names × likable/unlikable (one word) on minilm"
    for r in (mleat(X, Y, A, B, alpha=0.2, null="count"), mleat(near(9), near(9), near(8), near(8))):
        fig = plot_eat_map(r, tmp_path / "map.png", title, LABELS)
        assert_texts_apart(fig)
    # a tick on either limit: its label reaches half its height beyond the axes, toward the note and the other row
    fig.axes[0].set_ylim(0.1, 0.3)  # the four share it: ticks 0.100 to 0.300
    report._FIGURE.place()
    fig.canvas.draw()
    assert_texts_apart(fig)


def summary_rows():
    rows = []
    for test, name, (o_x, o_y) in (("t1", "Test One", ("A", "B")), ("t2", "Test Two", ("B", "")),
                                   ("t3", "Test Three", ("", ""))):
        for model in ("m1", "m2"):
            o = (o_x, o_y) if model == "m1" else (o_y, o_x) if o_y in "AB" and o_x in "AB" else ("", "")
            r = mleat(unit(ANGLES["X"][o[0]]), unit(ANGLES["Y"][o[1]]), A9, B9)
            rows.append({"test": test, "name": name, "model": model, "X": "x", **r.row()})
    rows[5] = {"test": "t3", "name": "Test Three", "model": "m2", "status": "skipped: no stimuli left in A"}
    return mleat_frame(rows)


def test_mleat_frame_orders_identity_then_statistics():
    df = summary_rows()
    assert list(df.columns) == ["test", "name", "model", "X", *MLEAT.computed]
    assert df.loc[5, "status"].startswith("skipped") and pd.isna(df.loc[5, "pattern"])


def test_pattern_summary_draws_each_cells_pattern(tmp_path):
    df = summary_rows()
    df.loc[2, "cosine_uninformative"] = True  # (t2, m1)
    fig = plot_pattern_summary(df, tmp_path / "s.png", "table")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Test One", "Test Two", "Test Three"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["m1", "m2"]
    patch = {p.get_gid(): p for p in ax.patches}
    colour = lambda test, model, q: to_rgba(patch[f"{test}|{model}|{q}"].get_facecolor())
    on_with, on_against, off = to_rgba("#c53a32"), to_rgba("#3b75af"), to_rgba("0.86")
    # t1 on m1: XA-YB (both red); on m2 the reverse XB-YA (both blue)
    assert [colour("t1", "m1", q) for q in QUADRANTS] == [on_with, off, off, on_with]
    assert [colour("t1", "m2", q) for q in QUADRANTS] == [off, on_against, on_against, off]
    assert [colour("t2", "m1", q) for q in QUADRANTS] == [off, on_against, off, off]  # XB
    assert [colour("t3", "m1", q) for q in QUADRANTS] == [off] * 4  # none
    assert [colour("t3", "m2", q) for q in QUADRANTS] == [to_rgba("white")] * 4  # skipped
    # the squares sit as on the EAT-Map: XA top left (y grows downwards), YB bottom right
    xy = {q: patch[f"t1|m1|{q}"].get_xy() for q in QUADRANTS}
    assert xy["XA"][1] == xy["XB"][1] < xy["YA"][1] == xy["YB"][1]  # X's row above Y's
    assert xy["XA"][0] == xy["YA"][0] < xy["XB"][0] == xy["YB"][0]  # A's column left of B's
    xa = xy["XA"]
    assert patch["t2|m1|XA"].get_xy()[1] > xa[1]  # the second test below the first
    texts = {t.get_gid(): t.get_text() for t in ax.texts}
    assert texts["t3|m2|d"] == "skipped"
    assert texts["t1|m1|d"] == f"{df.loc[0, 'l1_d']:.2f}"
    assert to_rgba(patch["t2|m1|cell"].get_facecolor()) == to_rgba("#fff0b3")
    assert patch["t1|m1|cell"].get_facecolor()[3] == 0  # unflagged: no background


def test_pattern_summary_of_48_tests_stays_legible(tmp_path):
    df = summary_rows()
    big = pd.concat([df.assign(test=df["test"] + f"-{i}", name=df["name"] + f" {i}") for i in range(16)])
    fig = plot_pattern_summary(big, tmp_path / "big.png", "48 tests")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert len(ax.get_yticklabels()) == 48
    heights = [t.get_window_extent().height for t in ax.get_yticklabels()]
    rows = ax.get_window_extent().height / 48
    assert max(heights) < rows  # a row's label fits in its row: no overlap


def test_pattern_summary_refuses_two_rows_for_a_cell(tmp_path):
    df = summary_rows()
    with pytest.raises(ValueError, match=r"two rows for \(test, model\)"):
        plot_pattern_summary(pd.concat([df, df.iloc[[0]]]), tmp_path / "s.png", "t")


def test_lit_quadrants_of_a_pattern():
    assert lit("XA-YB") == {"XA", "YB"} and lit("YA") == {"YA"}
    assert lit("none") == lit("undefined") == lit(float("nan")) == set()


# --- the iEAT authors' vectors (iEAT Table 1) ------------------------------------------------------

def test_ieat_table1_level1_is_the_tables_d(mirror, tmp_path):
    from helpers import REPO
    from vlbias.associate import run_test
    from vlbias.io.fetch import Source
    from vlbias.io.stimuli import load_stimulus
    from vlbias.io.store import read_set
    from vlbias.report.formats import read_published
    from vlbias.suites.ieat import published_store

    source = Source(repo="ryansteed/ieat", commit="4d7639bfd0b6c17b127ce163af0ddf985f5a6510", mirror_name="ieat")
    stores = {}
    for model, file in {"igpt": "igpt_l_32", "simclr": "simclr_152_3x_sk1"}.items():
        stores[model] = tmp_path / f"{model}.h5"
        published_store(REPO / "resources/manifests/ieat_embeddings.tsv", file, source, mirror, tmp_path / "cache",
                        stores[model], {"model_id": file})
    published = read_published(REPO / "resources/published/ieat.tsv")
    table1 = published[published["table"] == "table1"].to_dict("records")
    assert len(table1) == 30
    for pub in table1:
        stim = load_stimulus(REPO / f"resources/stimuli/ieat/{pub['test']}.yaml")
        sets = {s: read_set(stores[pub["model"]], st.key)[0] for s, st in stim.sets.items()}
        r = mleat(*(sets[s] for s in "XYAB"), n_samples=20_000, seed=0)
        row = run_test(stim, stores[pub["model"]], pub["model"], n_samples=20_000, seed=0)
        assert (r.level1.d, r.level1.p) == (row["d"], row["p"]), pub["test"]
        assert abs(r.level1.d - float(pub["d"])) <= 0.005 + 1e-12, pub["test"]
        assert r.status == "ok" and r.pattern in {code for code, _ in PATTERNS.values()}
