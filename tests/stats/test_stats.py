"""The association statistics: hand-checked cases, brute force, and the May et al. loop."""

import itertools
from math import comb, erfc, sqrt

import numba
import numpy as np
import pytest

from vlbias.stats import effect_size, effect_size_sw, permutation_pvalue, permutation_test_sw, s_wAB
from vlbias.stats.permutation import _block_ranges, permutation_tails_sw
from vlbias.stats import reference
from vlbias.stats._kernels import BLOCK
from vlbias.stats.bootstrap import effect_size_ci
from vlbias.stats.specificity import false_positive_rates, random_partition_pvalues


def random_sets(rng, nx, ny, na, nb, dim=16):
    # a planted association: X leans towards A, Y towards B
    a_dir, b_dir = rng.normal(size=dim), rng.normal(size=dim)
    X = rng.normal(size=(nx, dim)) + 0.3 * a_dir
    Y = rng.normal(size=(ny, dim)) + 0.3 * b_dir
    A = rng.normal(size=(na, dim)) + a_dir
    B = rng.normal(size=(nb, dim)) + b_dir
    return X, Y, A, B


# --- hand-checked cases -------------------------------------------------------------------

def test_s_wAB_by_hand():
    A = np.array([[1.0, 0.0]])
    B = np.array([[0.0, 2.0]])  # length must not matter: cosine
    W = np.array([[3.0, 0.0], [1.0, 1.0], [0.0, -1.0]])
    # cos with A: 1, 1/√2, 0; with B: 0, 1/√2, -1
    np.testing.assert_allclose(s_wAB(W, A, B), [1.0, 0.0, 1.0], atol=1e-15)


def test_s_wAB_averages_over_attribute_sets():
    A = np.array([[1.0, 0.0], [0.0, 1.0]])
    B = np.array([[-1.0, 0.0]])
    W = np.array([[1.0, 0.0]])
    # mean cos with A = (1 + 0)/2; cos with B = -1
    np.testing.assert_allclose(s_wAB(W, A, B), [1.5])


def test_effect_size_by_hand():
    # s = [1, 2 | 0, 0]: mean difference 1.5; sample std of [1,2,0,0] = sqrt(2.75/3)
    assert effect_size_sw([1.0, 2.0], [0.0, 0.0]) == pytest.approx(1.5 / sqrt(2.75 / 3), rel=1e-12)


def test_effect_size_sign_follows_X_and_Y():
    rng = np.random.default_rng(1)
    X, Y, A, B = random_sets(rng, 8, 8, 8, 8)
    assert effect_size(X, Y, A, B) == pytest.approx(-effect_size(Y, X, A, B), rel=1e-12)
    assert effect_size(X, Y, A, B) == pytest.approx(-effect_size(X, Y, B, A), rel=1e-12)


@pytest.mark.parametrize("scale", [1e200, 1e-160, 1e-300])
def test_extreme_magnitudes_give_the_same_d_and_interval(scale):
    # the same d at any scale: one row of 1e200s overflowed the norm to inf and became a zero vector (d -0.80
    # instead of -0.22); rows of 1e-160 underflowed their squares into subnormals (d off in the 6th
    # digit), 1e-300 to zero. A cosine does not depend on a vector's length.
    X, Y, A, B = random_sets(np.random.default_rng(5), 8, 8, 8, 8, dim=384)
    unit = [M / np.abs(M).max(axis=1, keepdims=True) for M in (X, Y, A, B)]  # largest component 1
    scaled = [M.copy() for M in unit]
    scaled[0][3] *= scale  # one target
    scaled[2][1] *= scale  # one attribute
    assert effect_size(*scaled) == pytest.approx(effect_size(*unit), rel=1e-12, abs=1e-12)
    ci, ci_unit = effect_size_ci(*scaled, n_boot=200), effect_size_ci(*unit, n_boot=200)
    assert (ci.low, ci.high) == pytest.approx((ci_unit.low, ci_unit.high), rel=1e-12, abs=1e-12)
    every = [M * scale for M in unit]  # all rows scaled alike: s(w) itself unchanged
    np.testing.assert_allclose(s_wAB(every[0], *every[2:]), s_wAB(unit[0], *unit[2:]), rtol=1e-12, atol=1e-12)


def test_exact_p_by_hand():
    # subsets of size 2 of [3,2,1,0]: sums 5,4,3,3,2,1; observed {3,2} = 5 is the most extreme
    res = permutation_test_sw([3.0, 2.0, 1.0, 0.0], 2)
    assert res.exact and res.n_partitions == 6 and res.n_samples == 6
    assert res.p == pytest.approx(1 / 6) and res.p_se == 0.0


def test_exact_p_counts_ties_as_extreme():
    # observed {2,1} = 3; sums ≥ 3: 5, 4, 3 ({3,0}), 3 (observed) -> 4/6
    res = permutation_test_sw([2.0, 1.0, 3.0, 0.0], 2)
    assert res.p == pytest.approx(4 / 6)


def test_float_ties_count_whatever_the_summation_order():
    # {0.1, 0.2} and {0.3, 0.0} tie mathematically, but 0.1 + 0.2 != 0.3 in floating point
    assert permutation_test_sw([0.1, 0.2, 0.3, 0.0], 2).p == pytest.approx(4 / 6)


def test_exact_p_unequal_sizes():
    # |X| = 1, |Y| = 2: subsets {1}, {0}, {2}; observed 1; ≥ 1: {1}, {2}
    assert permutation_test_sw([1.0, 0.0, 2.0], 1).p == pytest.approx(2 / 3)
    # |X| = 2, |Y| = 1 on [0, 2, 1]: subsets {0,2}=2, {0,1}=1, {2,1}=3; observed 2 -> 2/3
    assert permutation_test_sw([0.0, 2.0, 1.0], 2).p == pytest.approx(2 / 3)


def test_statistic_is_s_XYAB():
    res = permutation_test_sw([3.0, 2.0, 1.0, 0.0], 2)
    assert res.statistic == pytest.approx((3 + 2) - (1 + 0))


def test_parametric_p_uses_exact_null_moments():
    s = np.array([3.0, 2.0, 1.0, 0.0])
    sums = np.array([sum(c) for c in itertools.combinations(s, 2)])
    z = (5.0 - sums.mean()) / sums.std()
    assert permutation_test_sw(s, 2).p_parametric == pytest.approx(0.5 * erfc(z / sqrt(2)), rel=1e-12)


# --- exact mode against brute force, sampled mode against the May et al. loop -----------

@pytest.mark.parametrize("nx,ny", [(4, 4), (5, 3), (2, 7), (6, 6)])
def test_exact_equals_brute_force(nx, ny):
    rng = np.random.default_rng(nx * 10 + ny)
    s = rng.normal(size=nx + ny)
    observed = s[:nx].sum()
    brute = np.mean([s[list(c)].sum() >= observed for c in itertools.combinations(range(nx + ny), nx)])
    res = permutation_test_sw(s, nx, n_samples=10**6)
    assert res.exact and res.n_partitions == comb(nx + ny, nx)
    assert res.p == brute


@pytest.mark.parametrize("nx,ny,na,nb", [(6, 6, 7, 7), (5, 7, 4, 9), (8, 8, 10, 3)])
def test_differential_against_reference_exact(nx, ny, na, nb):
    rng = np.random.default_rng(nx + ny + na + nb)
    X, Y, A, B = random_sets(rng, nx, ny, na, nb)
    assert effect_size(X, Y, A, B) == pytest.approx(reference.effect_size(X, Y, A, B), abs=1e-9)
    ours = permutation_pvalue(X, Y, A, B, n_samples=10**5)
    assert ours.exact
    assert ours.p == reference.p_value(X, Y, A, B, 10**5, rng)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_differential_against_reference_sampled(seed):
    rng = np.random.default_rng(100 + seed)
    X, Y, A, B = random_sets(rng, 12, 12, 10, 10)
    n = 20_000
    ours = permutation_pvalue(X, Y, A, B, n_samples=n, seed=seed)
    ref = reference.p_value(X, Y, A, B, n, np.random.default_rng(seed))
    assert not ours.exact and ours.n_samples == n
    se = sqrt(ours.p_se**2 + ref * (1 - ref) / n)
    assert abs(ours.p - ref) <= 4 * se + 1e-12
    assert effect_size(X, Y, A, B) == pytest.approx(reference.effect_size(X, Y, A, B), abs=1e-9)


def test_sampled_counts_observed_partition_once():
    # the observed X holds the largest values: no random partition of 60 reaches it (in practice),
    # so p is exactly 1/n_samples, never 0
    s = np.concatenate([np.full(30, 1.0), np.zeros(30)]) + np.linspace(0, 1e-3, 60)[::-1]
    res = permutation_test_sw(s, 30, n_samples=5000, seed=3)
    assert not res.exact
    assert res.n_extreme == 1 and res.p == 1 / 5000


def test_sampled_p_close_to_exact_p():
    rng = np.random.default_rng(7)
    s = rng.normal(size=16)
    exact = permutation_test_sw(s, 8, exact=True)
    sampled = permutation_test_sw(s, 8, n_samples=200_000, exact=False, seed=5)
    assert exact.exact and not sampled.exact
    assert abs(exact.p - sampled.p) <= 4 * sampled.p_se


def test_auto_switches_at_n_samples():
    s = np.arange(12.0)
    assert permutation_test_sw(s, 6, n_samples=924).exact  # C(12, 6) = 924
    assert not permutation_test_sw(s, 6, n_samples=923).exact


def test_same_seed_same_p_on_any_number_of_threads():
    rng = np.random.default_rng(11)
    s = rng.normal(size=80)
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        results.append(permutation_test_sw(s, 40, n_samples=100_001, seed=42, threads=threads))
    assert results[0].p == results[1].p
    assert permutation_test_sw(s, 40, n_samples=100_001, seed=43).p != results[0].p


@pytest.mark.parametrize("exact", [True, False])
def test_both_tails_in_one_pass_are_the_two_one_tailed_tests(exact):
    # ties included: integer-valued s puts many partitions on each observed sum (both thresholds matter)
    s = np.random.default_rng(4).integers(-3, 4, size=14).astype(float) / 7
    upper, lower = permutation_tails_sw(s, 6, n_samples=20_001, seed=9, exact=exact)
    assert (upper, lower) == (permutation_test_sw(s, 6, n_samples=20_001, seed=9, exact=exact),
                              permutation_test_sw(-s, 6, n_samples=20_001, seed=9, exact=exact))
    assert upper.p + lower.p > 1  # the ties on the observed sum count in both tails


def test_the_draws_go_to_threads_in_contiguous_ranges_of_blocks_at_most_one_thread_per_block():
    # a thread without a block of draws (BLOCK each) would only wait for the others: one block, one range
    assert _block_ranges(BLOCK, 2) == [(0, 1)] and _block_ranges(0, 4) == [(0, 0)]
    assert _block_ranges(BLOCK + 1, 2) == [(0, 1), (1, 2)]
    assert _block_ranges(7 * BLOCK, 3) == [(0, 2), (2, 4), (4, 7)]  # every block once, in order
    assert _block_ranges(7 * BLOCK, None) == _block_ranges(7 * BLOCK, numba.config.NUMBA_NUM_THREADS)


def test_monte_carlo_standard_error():
    rng = np.random.default_rng(2)
    s = rng.normal(size=40)
    res = permutation_test_sw(s, 20, n_samples=10_000, seed=0)
    assert res.p_se == pytest.approx(sqrt(res.p * (1 - res.p) / 10_000))


# --- bad inputs ---------------------------------------------------------------------------

def good_sets():
    return random_sets(np.random.default_rng(0), 4, 4, 4, 4)


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda X, Y, A, B: (X, Y, A[:0], B), "set A is empty"),
        (lambda X, Y, A, B: (X, Y, A, np.where(np.arange(4)[:, None] == 2, np.nan, B)), "set B: row(s) [2]"),
        (lambda X, Y, A, B: (np.vstack([X[:3], np.zeros((1, X.shape[1]))]), Y, A, B), "zero vector"),
        (lambda X, Y, A, B: (X, Y[:, :5], A, B), "set Y: dimension 5"),
        (lambda X, Y, A, B: (X[0], Y, A, B), "set X: expected a 2-D"),
    ],
)
def test_bad_inputs_name_the_set(mutate, message):
    sets = mutate(*good_sets())
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        permutation_pvalue(*sets)
    with pytest.raises(ValueError):
        effect_size(*sets)


def test_zero_variance_effect_size_is_an_error():
    with pytest.raises(ValueError, match="zero variance"):
        effect_size_sw([1.0, 1.0], [1.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="1 ≤ |X| < |X∪Y|"):
        permutation_test_sw([1.0, 2.0], 2)
    with pytest.raises(ValueError, match="exact must be"):
        permutation_test_sw([1.0, 2.0], 1, exact="yes")
    with pytest.raises(ValueError, match="NaN"):
        permutation_test_sw([1.0, np.nan], 1)
    with pytest.raises(ValueError, match="refused"):
        permutation_test_sw(np.arange(80.0), 40, exact=True)


# --- specificity --------------------------------------------------------------------------

def test_specificity_false_positive_rate_is_calibrated_and_seeded():
    rng = np.random.default_rng(5)
    X, Y, A, B = random_sets(rng, 10, 10, 12, 12)
    p = random_partition_pvalues(X, Y, A, B, n_tests=300, n_samples=2000, seed=9)
    assert p.shape == (300,) and (p > 0).all() and (p <= 1).all()
    rates = false_positive_rates(p, (0.1, 0.01))
    # 300 association-free tests: the rate at 0.1 has a binomial sd of about 0.017
    assert 0.03 <= rates[0.1] <= 0.18
    assert rates[0.01] <= 0.05
    # seeded: the same seed draws the same partitions and permutations (its first tests suffice)
    np.testing.assert_array_equal(p[:30], random_partition_pvalues(X, Y, A, B, n_tests=30, n_samples=2000, seed=9))
