"""The bootstrap interval of d: replicates are d of resampled sets, and the interval covers a
known population d at about its nominal rate."""

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from helpers.stats import gaussian_sets, population_d

from vlbias.stats import effect_size, permutation_pvalue
from vlbias.stats.bootstrap import (
    bootstrap_d, cosines, effect_size_ci, effect_size_ci_cos, jackknife_d, weighted_d,
)


def test_replicate_is_d_of_the_resampled_sets():
    rng = np.random.default_rng(0)
    sets = gaussian_sets(rng, (5, 7, 4, 6), [np.full(8, 0.3)] * 4)
    C = cosines(*sets)
    for _ in range(20):
        idx = [rng.integers(0, len(S), len(S)) for S in sets]
        counts = [np.bincount(i, minlength=len(S))[None].astype(float) for i, S in zip(idx, sets)]
        expected = effect_size(*(S[i] for S, i in zip(sets, idx)))
        assert weighted_d(C, 5, 4, *counts)[0] == pytest.approx(expected, abs=1e-12)


def test_jackknife_leaves_each_stimulus_out():
    rng = np.random.default_rng(1)
    sets = gaussian_sets(rng, (4, 3, 5, 1), [np.full(6, 0.2)] * 4)
    jack = jackknife_d(cosines(*sets), (4, 3, 5, 1))
    assert [j.size for j in jack] == [4, 3, 5, 0]  # a set of one cannot lose its stimulus
    for k in range(3):
        for i in range(len(sets[k])):
            left = [np.delete(S, i, axis=0) if j == k else S for j, S in enumerate(sets)]
            assert jack[k][i] == pytest.approx(effect_size(*left), abs=1e-12)


def test_seeded_and_around_d():
    rng = np.random.default_rng(2)
    sets = gaussian_sets(rng, (12, 10, 8, 9), [np.r_[0.5, np.zeros(7)], np.zeros(8), np.r_[1, np.zeros(7)],
                                               np.r_[-1, np.zeros(7)]])
    a = effect_size_ci(*sets, n_boot=2000, seed=5)
    assert a == effect_size_ci(*sets, n_boot=2000, seed=5)
    assert a != effect_size_ci(*sets, n_boot=2000, seed=6)
    d = effect_size(*sets)
    assert a.low < d < a.high and a.method == "bca" and a.n_undefined == 0 and a.level == 0.95
    assert np.isfinite(a.z0) and np.isfinite(a.acceleration)
    # a wider level gives a wider interval from the same replicates
    wide = effect_size_ci(*sets, level=0.99, n_boot=2000, seed=5)
    assert wide.low < a.low and wide.high > a.high
    # the percentile interval is the quantiles of the replicates
    C, sizes = cosines(*sets), tuple(map(len, sets))
    pct = effect_size_ci_cos(C, sizes, d, n_boot=2000, seed=5, method="percentile")
    np.testing.assert_allclose([pct.low, pct.high], np.quantile(bootstrap_d(C, sizes, 2000, 5), [0.025, 0.975]))


def test_same_numbers_on_any_number_of_threads():
    # the same interval on any thread count: --cores 1 vs --cores 2 gave the same d and p but an interval differing in the
    # last digits: the cosine matrix was a multi-threaded OpenBLAS product, its sums split by thread
    rng = np.random.default_rng(6)
    sets = gaussian_sets(rng, (25, 25, 25, 25), [np.full(768, 0.05)] * 4)
    before = numba.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            with threadpool_limits(limits=threads, user_api="blas"):
                ci = effect_size_ci(*sets, n_boot=500, seed=3)
                res = permutation_pvalue(*sets, n_samples=20_000, seed=3)
                results.append((effect_size(*sets), res.p, ci.low, ci.high, ci.acceleration, cosines(*sets).tobytes()))
    finally:
        numba.set_num_threads(before)
    assert results[0] == results[1]  # bit for bit


def test_undefined_replicates_are_dropped_and_counted():
    # X = {x, x2}, Y = {x}: a replicate that draws x twice for X has three equal s-values
    # (probability 1/4), zero variance and no d; every other replicate has one
    x, x2 = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    A = np.array([[1.0, 1.0, 0.0], [1.0, -1.0, 0.0]])
    B = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    ci = effect_size_ci(np.array([x, x2]), np.array([x]), A, B, n_boot=400, seed=0, method="percentile")
    assert 60 < ci.n_undefined < 140 and np.isfinite(ci.low) and np.isfinite(ci.high)


def test_bad_settings():
    sets = gaussian_sets(np.random.default_rng(3), (4, 4, 4, 4), [np.ones(3)] * 4)
    with pytest.raises(ValueError, match="method"):
        effect_size_ci(*sets, method="basic")
    with pytest.raises(ValueError, match="level"):
        effect_size_ci(*sets, level=95)
    with pytest.raises(ValueError, match="n_boot"):
        effect_size_ci(*sets, n_boot=1)
    with pytest.raises(ValueError, match="set B"):
        effect_size_ci(*sets[:3], np.zeros((2, 3)))
    with pytest.raises(ValueError, match="does not match"):
        effect_size_ci_cos(np.zeros((3, 3)), (2, 2, 2, 1), 0.0)


# --- coverage on simulated data ---------------------------------------------------------------




def test_coverage_near_nominal_on_gaussian_embeddings():
    """Fresh X, Y, A, B from Gaussian populations in each replication; the interval must cover the
    population d at about its nominal rate, at 95 % and at 80 % (an interval that is merely too
    wide fails the second). 250 replications: the standard error of a coverage is 0.014 (95 %) and
    0.025 (80 %); the bounds are about 3 of them. With 12 attribute stimuli per set their sampling
    error matters: an interval resampling X and Y alone covers 69 % at 80 % here and fails."""
    dim, sizes = 16, (12, 12, 12, 12)
    e = np.eye(dim)
    means = (0.5 * e[0], 0.5 * e[1], e[0], e[1])  # X leans to A, Y to B
    d_pop = population_d(means, 0.5, np.random.default_rng(123))
    assert 0.6 < d_pop < 0.7  # a moderate effect, as most published ones
    rng = np.random.default_rng(7)
    hits = {0.95: 0, 0.8: 0}
    reps = 250
    for r in range(reps):
        sets = gaussian_sets(rng, sizes, means)
        C = cosines(*sets)
        s = C[:, :12].mean(1) - C[:, 12:].mean(1)
        d = (s[:12].mean() - s[12:].mean()) / s.std(ddof=1)
        for level in hits:
            ci = effect_size_ci_cos(C, sizes, d, level=level, n_boot=1000, seed=r)
            hits[level] += ci.low <= d_pop <= ci.high
    assert 0.91 <= hits[0.95] / reps <= 0.99
    assert 0.72 <= hits[0.8] / reps <= 0.88


# --- a result row ----------------------------------------------------------------------------

def test_run_test_adds_the_interval_and_its_settings(tmp_path):
    from vlbias.associate import run_test
    from vlbias.stats.row import ASSOCIATION
    from vlbias.io.stimuli import load_stimulus
    from vlbias.io.store import write_embeddings

    rng = np.random.default_rng(4)
    sets = gaussian_sets(rng, (6, 5, 4, 7), [np.r_[1, 0, 0, 0], np.zeros(4), np.r_[2, 0, 0, 0], np.r_[-2, 0, 0, 0]])
    names = {s: [f"{s.lower()}{i}" for i in range(len(v))] for s, v in zip("XYAB", sets)}
    path = tmp_path / "toy.yaml"
    path.write_text("id: toy\nname: Toy\nsuite: seat\n" + "".join(
        f"{s}:\n  label: {s}-words\n  items: [{', '.join(names[s])}]\n" for s in "XYAB"))
    store = tmp_path / "toy.h5"
    write_embeddings(store, {f"toy/{s}": (v, names[s]) for s, v in zip("XYAB", sets)}, {"model_id": "toy"})
    settings = {"level": 0.9, "n_boot": 500, "seed": 3, "method": "bca"}
    row = run_test(load_stimulus(path), store, "toy", n_samples=1000, seed=0, ci=settings)
    expected = effect_size_ci(*sets, **settings)  # float64 vectors are stored as they are
    assert (row["d_low"], row["d_high"]) == pytest.approx((expected.low, expected.high), abs=1e-9)
    assert row["d_low"] < row["d"] < row["d_high"]
    assert {k: row[k] for k in ("ci_level", "ci_n_boot", "ci_seed", "ci_method")} == {
        "ci_level": 0.9, "ci_n_boot": 500, "ci_seed": 3, "ci_method": "bca"}
    assert set(row) <= set(ASSOCIATION.columns)
    plain = run_test(load_stimulus(path), store, "toy", n_samples=1000, seed=0)
    assert "d_low" not in plain and plain["d"] == row["d"]


def test_bca_matches_scipy_on_the_same_replicates():
    # pins z0, the acceleration's sign and size and the adjusted levels: scipy's BCa (its stratified
    # jackknife for several samples) on our replicates, passed to it as a previous result
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    sizes = (6, 7, 5, 4)
    sets = gaussian_sets(rng, sizes, [np.full(8, 0.6), np.zeros(8), np.full(8, 0.6), np.zeros(8)])
    C = cosines(*sets)
    d = effect_size(*sets)
    ours = effect_size_ci_cos(C, sizes, d, level=0.9, n_boot=2000, seed=1)
    assert abs(ours.acceleration) > 0.01 and abs(ours.z0) > 0.01  # both corrections matter here

    def d_of(*idx):  # d of the sets drawn by index, through the same cosine matrix
        counts = [np.bincount(np.asarray(i, dtype=int), minlength=n)[None].astype(float) for i, n in zip(idx, sizes)]
        return weighted_d(C, sizes[0], sizes[2], *counts)[0]

    theta = bootstrap_d(C, sizes, 2000, seed=1)
    previous = stats._resampling.BootstrapResult(confidence_interval=None, bootstrap_distribution=theta,
                                                  standard_error=None)
    ref = stats.bootstrap([np.arange(n, dtype=float) for n in sizes], d_of, n_resamples=0, vectorized=False,
                          confidence_level=0.9, method="BCa", bootstrap_result=previous)
    assert d_of(*(np.arange(n) for n in sizes)) == pytest.approx(d, abs=1e-12)
    assert (ours.low, ours.high) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)


def test_acceleration_skips_only_a_set_that_cannot_lose_a_stimulus():
    # (a mutation-testing survivor) a set of one stimulus, first or anywhere, adds nothing; the rest count
    from vlbias.stats.bootstrap import acceleration

    rng = np.random.default_rng(8)
    jack = [rng.normal(size=5) ** 2, rng.normal(size=4) ** 2]
    assert acceleration([np.empty(0), *jack]) == acceleration(jack) != 0.0
