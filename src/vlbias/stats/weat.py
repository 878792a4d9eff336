r"""Embedding association tests (Caliskan et al. 2017; May et al. 2019; Steed & Caliskan 2021).

Symbols follow the papers. X, Y are target sets, A, B attribute sets, all (n, dim) arrays.

    s(w, A, B)    = mean_{a∈A} cos(w, a) − mean_{b∈B} cos(w, b)
    s(X, Y, A, B) = Σ_{x∈X} s(x, A, B) − Σ_{y∈Y} s(y, A, B)
    d             = [mean_{x∈X} s(x,A,B) − mean_{y∈Y} s(y,A,B)] / std_{w∈X∪Y} s(w,A,B)   (ddof=1)
    p             = Pr[ s(X_i, Y_i, A, B) ≥ s(X, Y, A, B) ]  over partitions (X_i, Y_i) of X∪Y
                    with |X_i| = |X|, |Y_i| = |Y|                                        (one-sided)

The null each permutation samples: the labels "X" and "Y" are exchangeable — every way of
splitting the pooled targets X∪Y into sets of the observed sizes is equally likely, while
A and B stay fixed.
"""

from contextlib import AbstractContextManager
from functools import cache
from typing import Any, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray
from threadpoolctl import ThreadpoolController

from vlbias.stats.permutation import Exact, PermutationResult, permutation_test_sw

Embeddings: TypeAlias = NDArray[np.floating[Any]]
"""One stimulus set: an (n, dim) array of embeddings, a row per stimulus."""


@cache
def _blas() -> ThreadpoolController:
    # finding the loaded BLAS takes milliseconds: once per process (numpy's is loaded by now)
    return ThreadpoolController()


def serial_blas() -> AbstractContextManager[Any]:
    """A context in which numpy's BLAS runs on one thread. Every matrix product of the statistics
    runs in one: OpenBLAS splits a product over its threads in blocks whose sums round differently,
    so a cosine changed in the last bit with the job's thread count (``--cores 1`` vs ``2``, a
    SLURM job vs a local one) and so did the bootstrap interval. The products are
    small; threads gain little on them."""
    return cast(AbstractContextManager[Any], _blas().limit(limits=1, user_api="blas"))


def _check(name: str, M: ArrayLike, dim: int | None = None) -> NDArray[np.float64]:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 2:
        raise ValueError(f"set {name}: expected a 2-D (n, dim) array, got shape {M.shape}")
    if M.shape[0] == 0:
        raise ValueError(f"set {name} is empty")
    if dim is not None and M.shape[1] != dim:
        raise ValueError(f"set {name}: dimension {M.shape[1]} does not match {dim} of set X")
    bad = ~np.isfinite(M).all(axis=1)
    if bad.any():
        raise ValueError(f"set {name}: row(s) {np.flatnonzero(bad).tolist()} contain NaN or inf")
    zero = ~(np.abs(M).max(axis=1) > 0)
    if zero.any():
        raise ValueError(
            f"set {name}: row(s) {np.flatnonzero(zero).tolist()} are zero vectors (cosine undefined)"
        )
    return M


def _unit(M: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rows of M scaled to unit length, without overflow or underflow: each row is divided by its
    largest magnitude first (a row of 1e200s would square to inf, one of 1e-170s to 0), then by
    its norm, summed in float64. M holds no zero rows (``_check`` refuses them)."""
    scaled: NDArray[np.float64] = np.asarray(M, dtype=np.float64) / np.abs(M).max(axis=1, keepdims=True)
    scaled /= np.sqrt(np.einsum("ij,ij->i", scaled, scaled))[:, None]  # in place: a third array cost 5x (page faults)
    return scaled


def s_wAB(W: Embeddings, A: Embeddings, B: Embeddings) -> NDArray[np.float64]:
    """s(w, A, B) for every row w of W, as a vector.

    One matrix product per attribute set: mean_a cos(w, a) = w·(mean_a â)/|w| with â = a/|a|,
    so the (n_w, n_a) cosine matrix is never formed.
    """
    W = _check("W", W)
    A = _check("A", A, W.shape[1])
    B = _check("B", B, W.shape[1])
    Wn = _unit(W)
    with serial_blas():
        s: NDArray[np.float64] = Wn @ _unit(A).mean(axis=0) - Wn @ _unit(B).mean(axis=0)
    return s


def s_XYAB(s_x: ArrayLike, s_y: ArrayLike) -> float:
    """s(X, Y, A, B) = Σ_x s(x,A,B) − Σ_y s(y,A,B) from precomputed s(w) values."""
    return float(np.sum(s_x) - np.sum(s_y))


def effect_size_sw(s_x: ArrayLike, s_y: ArrayLike) -> float:
    """Effect size d from precomputed s(w) values of X and Y (sample std, ddof=1)."""
    s_x = np.asarray(s_x, dtype=np.float64)
    s_y = np.asarray(s_y, dtype=np.float64)
    if s_x.size == 0 or s_y.size == 0:
        raise ValueError("effect size needs at least one target in X and in Y")
    s = np.concatenate([s_x, s_y])
    if s.size < 2:
        raise ValueError("effect size needs at least two targets in X∪Y")
    sd = np.std(s, ddof=1)
    if not sd > 0:
        raise ValueError("effect size undefined: s(w,A,B) has zero variance over X∪Y")
    return float((s_x.mean() - s_y.mean()) / sd)


def _sets(X: Embeddings, Y: Embeddings, A: Embeddings,
          B: Embeddings) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    X = _check("X", X)
    dim = X.shape[1]
    return X, _check("Y", Y, dim), _check("A", A, dim), _check("B", B, dim)


def effect_size(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings) -> float:
    """Effect size d of the association test on (n, dim) arrays X, Y, A, B."""
    X, Y, A, B = _sets(X, Y, A, B)
    s = s_wAB(np.concatenate([X, Y]), A, B)
    return effect_size_sw(s[: len(X)], s[len(X) :])


def permutation_pvalue(X: Embeddings, Y: Embeddings, A: Embeddings, B: Embeddings, n_samples: int = 100_000,
                       seed: int = 0, exact: Exact = "auto", threads: int | None = None) -> PermutationResult:
    """Permutation test of the association of X vs Y with A vs B; see vlbias.stats.permutation."""
    X, Y, A, B = _sets(X, Y, A, B)
    s = s_wAB(np.concatenate([X, Y]), A, B)
    return permutation_test_sw(s, len(X), n_samples=n_samples, seed=seed, exact=exact, threads=threads)
