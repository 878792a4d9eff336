"""Holm and Benjamini–Hochberg adjusted p-values: hand computations, the procedures' decisions."""

import numpy as np
import pandas as pd
import pytest

from vlbias.stats.adjust import add_adjusted, benjamini_hochberg, holm

NAN = float("nan")


# --- by hand ---------------------------------------------------------------------------------

def test_holm_by_hand():
    # sorted: 0.005, 0.01, 0.03, 0.04 times m-j+1 = 4, 3, 2, 1 → 0.02, 0.03, 0.06, 0.04;
    # running max → 0.02, 0.03, 0.06, 0.06 (the last is raised: monotonicity)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02], rtol=1e-12)


def test_bh_by_hand():
    # sorted: 0.005, 0.01, 0.03, 0.04 times m/j = 4, 2, 4/3, 1 → 0.02, 0.02, 0.04, 0.04;
    # running min from the largest down leaves them as they are
    np.testing.assert_allclose(benjamini_hochberg([0.01, 0.04, 0.03, 0.005]), [0.02, 0.04, 0.04, 0.02], rtol=1e-12)


def test_bh_monotonicity_enforced():
    # m p/j = 0.03, 0.03, 0.025: the smaller p's take the larger one's 0.025 (step-up)
    np.testing.assert_allclose(benjamini_hochberg([0.01, 0.02, 0.025]), [0.025] * 3, rtol=1e-12)
    # Holm: 0.03, 0.04, 0.025 → running max 0.03, 0.04, 0.04
    np.testing.assert_allclose(holm([0.01, 0.02, 0.025]), [0.03, 0.04, 0.04], rtol=1e-12)


def test_ties_and_nan():
    p = [0.02, NAN, 0.02, 0.5]
    # the family is the three finite p's (m = 3); the NaN stays NaN
    # Holm: 3·0.02, 2·0.02, 1·0.5 = 0.06, 0.04, 0.5 → running max 0.06, 0.06, 0.5
    np.testing.assert_allclose(holm(p), [0.06, NAN, 0.06, 0.5], rtol=1e-12)
    # BH: 3·0.02/1, 3·0.02/2, 3·0.5/3 = 0.06, 0.03, 0.5 → running min from the top 0.03, 0.03, 0.5
    np.testing.assert_allclose(benjamini_hochberg(p), [0.03, NAN, 0.03, 0.5], rtol=1e-12)


def test_capped_at_one():
    # Holm: 3·0.6 = 1.8, 2·0.7 = 1.4, 0.9 → running max 1.8 → capped to 1
    np.testing.assert_array_equal(holm([0.6, 0.7, 0.9]), [1.0, 1.0, 1.0])
    # BH: 1.8, 1.05, 0.9 → running min from the top 0.9 for all
    np.testing.assert_allclose(benjamini_hochberg([0.6, 0.7, 0.9]), [0.9, 0.9, 0.9], rtol=1e-12)
    np.testing.assert_array_equal(holm([1.0, 1.0]), [1.0, 1.0])
    np.testing.assert_array_equal(benjamini_hochberg([1.0, 1.0]), [1.0, 1.0])


def test_single_empty_and_all_nan_families():
    assert holm([0.03]).tolist() == [0.03] and benjamini_hochberg([0.03]).tolist() == [0.03]
    assert holm([]).shape == (0,) and benjamini_hochberg([]).shape == (0,)
    assert np.isnan(holm([NAN, NAN])).all() and np.isnan(benjamini_hochberg([NAN, NAN])).all()


def test_bad_p_values():
    with pytest.raises(ValueError, match=r"\[0, 1\].*1.5"):
        holm([0.1, 1.5])
    with pytest.raises(ValueError, match="1-D"):
        benjamini_hochberg([[0.1, 0.2]])


# --- the procedures' decisions ----------------------------------------------------------------

def _holm_rejects(p, alpha):
    """Holm's step-down procedure: reject p_(1..k) while p_(j) ≤ α/(m − j + 1)."""
    order, m, out = np.argsort(p), len(p), np.zeros(len(p), bool)
    for j, i in enumerate(order):
        if p[i] > alpha / (m - j):
            break
        out[i] = True
    return out


def _bh_rejects(p, alpha):
    """BH's step-up procedure: reject the k smallest, k = max{j: p_(j) ≤ jα/m}."""
    order, m = np.argsort(p), len(p)
    ok = [j for j in range(1, m + 1) if p[order[j - 1]] <= j * alpha / m]
    out = np.zeros(m, bool)
    out[order[: max(ok, default=0)]] = True
    return out


@pytest.mark.parametrize("seed", range(5))
def test_adjusted_p_gives_the_procedures_decisions(seed):
    rng = np.random.default_rng(seed)
    # a mix of small and uniform p's, with ties (rounded)
    p = np.round(np.concatenate([rng.uniform(0, 0.02, 6), rng.uniform(0, 1, 14)]), 3)
    for alpha in (0.01, 0.05, 0.1, 0.2):
        np.testing.assert_array_equal(holm(p) <= alpha, _holm_rejects(p, alpha))
        np.testing.assert_array_equal(benjamini_hochberg(p) <= alpha, _bh_rejects(p, alpha))
    # monotone in p, never below p (but for the rounding of m·p/m), BH never above Holm
    order = np.argsort(p)
    assert (np.diff(holm(p)[order]) >= 0).all() and (np.diff(benjamini_hochberg(p)[order]) >= 0).all()
    assert (holm(p) >= p).all() and (benjamini_hochberg(p) >= p * (1 - 1e-12)).all()
    assert (benjamini_hochberg(p) <= holm(p)).all()


# --- a table's rows ----------------------------------------------------------------------------

def test_add_adjusted_per_model_leaves_skipped_out():
    df = pd.DataFrame({
        "test": ["t1", "t2", "t3", "t1", "t2", "t3"],
        "model": ["m1"] * 3 + ["m2"] * 3,
        "p": [0.01, 0.04, "", 0.02, 0.02, 0.5],
        "status": ["ok", "ok", "skipped: no stimuli left in X (x)", "ok", "ok", "ok"],
    })
    out = add_adjusted(df)
    # m1: family {0.01, 0.04} (t3 skipped): Holm 0.02, 0.04; BH 0.02, 0.04
    # m2: family {0.02, 0.02, 0.5}: as test_ties_and_nan
    np.testing.assert_allclose(out["p_holm"], [0.02, 0.04, NAN, 0.06, 0.06, 0.5], rtol=1e-12)
    np.testing.assert_allclose(out["p_bh"], [0.02, 0.04, NAN, 0.03, 0.03, 0.5], rtol=1e-12)
    assert list(out.columns[:4]) == list(df.columns) and "p_holm" not in df


def test_add_adjusted_reads_status_not_just_p_and_keeps_unnamed_families():
    # (survivors of mutation testing) a row that is not "ok" stays out of its family even with a p in
    # its cell; a p that is no number is missing; rows without a family value are a family of their own
    df = pd.DataFrame({
        "model": ["m1", "m1", "m1", None, None],
        "p": [0.01, 0.02, 0.001, "n/a", 0.03],
        "status": ["ok", "ok", "failed: stale p", "ok", "ok"],
    })
    out = add_adjusted(df)
    np.testing.assert_allclose(out["p_holm"], [0.02, 0.02, NAN, NAN, 0.03], rtol=1e-12)
    np.testing.assert_allclose(out["p_bh"], [0.02, 0.02, NAN, NAN, 0.03], rtol=1e-12)


def test_results_table_carries_adjusted_p_after_p():
    from vlbias.report.tables import TABLE_COLUMNS, assemble

    rows = [{"test": t, "model": m, "p": p, "status": "ok"}
            for (t, m), p in {("t1", "a"): 0.01, ("t2", "a"): 0.04, ("t1", "b"): 0.3, ("t2", "b"): 0.2}.items()]
    df = assemble(rows, ["t2", "t1"], ["b", "a"])
    assert list(df.columns) == TABLE_COLUMNS
    assert TABLE_COLUMNS[TABLE_COLUMNS.index("p") + 1 : TABLE_COLUMNS.index("p") + 3] == ["p_holm", "p_bh"]
    # rows in the table's order; families per model: a {0.01, 0.04}, b {0.3, 0.2}
    assert list(zip(df["test"], df["model"])) == [("t2", "b"), ("t2", "a"), ("t1", "b"), ("t1", "a")]
    np.testing.assert_allclose(df["p_holm"], [0.4, 0.04, 0.4, 0.02], rtol=1e-12)
    np.testing.assert_allclose(df["p_bh"], [0.3, 0.04, 0.3, 0.02], rtol=1e-12)
