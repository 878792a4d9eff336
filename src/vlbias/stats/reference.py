"""A plain-numpy association test written the way May et al.'s ``weat.py`` is: one Python
iteration per partition. It is the yardstick for the differential tests and the engine
benchmark, not something the pipeline runs.
"""

import itertools
from math import comb

import numpy as np
from numpy.typing import NDArray


def cosine(U: NDArray[np.float64], V: NDArray[np.float64]) -> NDArray[np.float64]:
    U = U / np.linalg.norm(U, axis=1, keepdims=True)
    V = V / np.linalg.norm(V, axis=1, keepdims=True)
    return U @ V.T


def s_wAB(W: NDArray[np.float64], A: NDArray[np.float64], B: NDArray[np.float64]) -> NDArray[np.float64]:
    s: NDArray[np.float64] = cosine(W, A).mean(axis=1) - cosine(W, B).mean(axis=1)
    return s


def effect_size(X: NDArray[np.float64], Y: NDArray[np.float64], A: NDArray[np.float64],
                B: NDArray[np.float64]) -> float:
    s_x, s_y = s_wAB(X, A, B), s_wAB(Y, A, B)
    d: float = (s_x.mean() - s_y.mean()) / np.std(np.concatenate([s_x, s_y]), ddof=1)
    return d


def p_value(X: NDArray[np.float64], Y: NDArray[np.float64], A: NDArray[np.float64], B: NDArray[np.float64],
            n_samples: int, rng: np.random.Generator) -> float:
    """One-sided p: exact when the partitions number ≤ n_samples, else the observed
    partition once plus n_samples − 1 shuffles; ties count as extreme."""
    s = s_wAB(np.concatenate([X, Y]), A, B)
    n, n_x = len(s), len(X)
    observed = s[:n_x].sum()
    if comb(n, n_x) <= n_samples:
        hits = total = 0
        for Xi in itertools.combinations(range(n), n_x):
            hits += s[list(Xi)].sum() >= observed
            total += 1
        return hits / total
    hits, total = 1, 1
    idx = np.arange(n)
    for _ in range(n_samples - 1):
        rng.shuffle(idx)
        hits += s[idx[:n_x]].sum() >= observed
        total += 1
    return hits / total
