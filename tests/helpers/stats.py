"""Simulated association sets (tests/stats/test_bootstrap.py, benchmarks/bootstrap_ci.py)."""

import numpy as np


def gaussian_sets(rng, sizes, means):
    return [rng.normal(size=(n, len(m))) + m for n, m in zip(sizes, means)]


def _unit(M):
    return M / np.linalg.norm(M, axis=1, keepdims=True)


def population_d(means, w, rng, n=200_000):
    """d of the populations: s(w) = ŵ·(E[â] − E[b̂]) with the attribute populations' mean unit
    vectors, then (E s_x − E s_y) over the standard deviation of the mixture w·X + (1 − w)·Y —
    what d over X∪Y (|X|/(|X|+|Y|) = w) converges to. Expectations by a large sample."""
    mx, my, ma, mb = means
    dim = len(mx)
    v = _unit(rng.normal(size=(n, dim)) + ma).mean(0) - _unit(rng.normal(size=(n, dim)) + mb).mean(0)
    sx = _unit(rng.normal(size=(n, dim)) + mx) @ v
    sy = _unit(rng.normal(size=(n, dim)) + my) @ v
    delta = sx.mean() - sy.mean()
    return delta / np.sqrt(w * sx.var() + (1 - w) * sy.var() + w * (1 - w) * delta**2)
