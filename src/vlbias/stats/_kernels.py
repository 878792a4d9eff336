"""Compiled permutation kernels (numba).

The permutation null only needs Σ_{x∈X'} s(x,A,B) for each partition (X', Y') of
X∪Y (see :func:`vlbias.stats.permutation.permutation_test_sw`), so a kernel works on the
vector ``s`` of s(w,A,B) values alone: O(|X|) additions per partition.

Reproducibility across thread counts: sampled partitions are drawn in fixed-size
blocks, each block with its own counter-based random stream derived from
(seed, block index). A block's count does not depend on which thread runs it, so the
total — and hence p — is the same on 1 or N cores. The sampled kernels count a range of blocks
without the GIL, and vlbias.stats.permutation hands the ranges to threads: a kernel compiled for
numba's own parallel loops costs a process 2 CPU-s to compile where this one costs 0.8.
"""

import numpy as np
from numba import njit

BLOCK = 1 << 14  # partitions per random stream; part of the seed → p contract

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LOW = np.uint64(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _mix(z):
    # SplitMix64 finaliser (Steele et al. 2014): a bijective 64-bit scrambler.
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def stream_seed(seed, block):
    """Seed of block ``block``'s random stream: two SplitMix64 rounds of (seed, block)."""
    return _mix(_mix(np.uint64(seed) + _GOLDEN) ^ (np.uint64(block) * _GOLDEN))


@njit(cache=True)
def _count_block(s, n_x, n_draws, state, upper, lower):
    """Draw ``n_draws`` uniform n_x-subsets of ``s`` (partial Fisher–Yates) and count, on the same
    draws, those whose sum reaches ``upper`` and those whose negated sum reaches ``lower`` (the upper
    tail of −s: negation is exact, so each count is what a pass over −s would give).

    Each 64-bit random word yields two 32-bit halves; a half r picks j uniformly in
    [i, n) as i + ⌊r·(n−i)/2³²⌋ (Lemire's multiply-shift; bias < n/2³², negligible).
    The index array is not reset between draws: a partial Fisher–Yates shuffle picks a
    uniform random subset whatever order the array starts in.
    """
    n = s.shape[0]
    idx = np.arange(n)
    n_upper = 0
    n_lower = 0
    for _ in range(n_draws):
        acc = 0.0
        for i in range(0, n_x, 2):
            state = state + _GOLDEN
            word = _mix(state)
            acc += _pick(s, idx, i, n, word & _LOW)
            if i + 1 < n_x:
                acc += _pick(s, idx, i + 1, n, word >> np.uint64(32))
        if acc >= upper:
            n_upper += 1
        if -acc >= lower:
            n_lower += 1
    return n_upper, n_lower


@njit(cache=True, inline="always")
def _pick(s, idx, i, n, r):
    """Swap a uniform pick from idx[i:] into place i and return its s value."""
    j = i + np.int64((r * np.uint64(n - i)) >> np.uint64(32))
    t = idx[j]
    idx[j] = idx[i]
    idx[i] = t
    return s[t]


@njit(cache=True, nogil=True)
def count_sampled(s, n_x, n_draws, seed, upper, lower, first, last):
    """Of the ``n_draws`` random partitions, those of blocks [first, last): (number with Σ_{X'} s ≥ upper,
    number with Σ_{X'} −s ≥ lower)."""
    n_upper = 0
    n_lower = 0
    for b in range(first, last):
        draws = min(BLOCK, n_draws - b * BLOCK)
        u, lo = _count_block(s, n_x, draws, stream_seed(seed, b), upper, lower)
        n_upper += u
        n_lower += lo
    return n_upper, n_lower


@njit(cache=True)
def count_exact(s, n_x, upper, lower):
    """Enumerate every n_x-subset of ``s`` in lexicographic order; return (number with Σ ≥ upper,
    number with −Σ ≥ lower, number of subsets)."""
    n = s.shape[0]
    c = np.arange(n_x)
    n_upper = 0
    n_lower = 0
    total = 0
    while True:
        acc = 0.0
        for i in range(n_x):
            acc += s[c[i]]
        if acc >= upper:
            n_upper += 1
        if -acc >= lower:
            n_lower += 1
        total += 1
        # advance to the next combination: rightmost index that can still move
        i = n_x - 1
        while i >= 0 and c[i] == n - n_x + i:
            i -= 1
        if i < 0:
            return n_upper, n_lower, total
        c[i] += 1
        for k in range(i + 1, n_x):
            c[k] = c[k - 1] + 1


# --- paired (sign-flip) null ---------------------------------------------------------------
# The paired tests see one difference d_i per target (its congruent minus its incongruent
# s-value) and a group label per target (X or Y). A draw flips the sign of each d_i with
# probability ½ and scores Σ_g |Σ_{i∈g} ε_i d_i|. Blocks and streams as above, so p is the
# same on any number of threads.


@njit(cache=True, inline="always")
def _signflip_score(d, group, n_groups, signs, sums):
    for g in range(n_groups):
        sums[g] = 0.0
    for i in range(d.shape[0]):
        sums[group[i]] += d[i] if signs[i] else -d[i]
    acc = 0.0
    for g in range(n_groups):
        acc += abs(sums[g])
    return acc


@njit(cache=True)
def count_signflip_exact(d, group, n_groups, threshold):
    """Enumerate every sign vector ε ∈ {±1}^n (bit i of a counter: ε_i = −1); return (number with
    Σ_g |Σ_{i∈g} ε_i d_i| ≥ threshold, 2^n)."""
    n = d.shape[0]
    signs = np.ones(n, dtype=np.bool_)
    sums = np.zeros(n_groups)
    total = np.int64(1) << np.int64(n)
    count = 0
    for code in range(total):
        for i in range(n):
            signs[i] = ((code >> i) & 1) == 0
        if _signflip_score(d, group, n_groups, signs, sums) >= threshold:
            count += 1
    return count, total


@njit(cache=True)
def _count_signflip_block(d, group, n_groups, n_draws, state, threshold):
    n = d.shape[0]
    signs = np.ones(n, dtype=np.bool_)
    sums = np.zeros(n_groups)
    count = 0
    for _ in range(n_draws):
        for start in range(0, n, 64):
            state = state + _GOLDEN
            word = _mix(state)
            for i in range(start, min(start + 64, n)):
                signs[i] = ((word >> np.uint64(i - start)) & np.uint64(1)) == 0
        if _signflip_score(d, group, n_groups, signs, sums) >= threshold:
            count += 1
    return count


@njit(cache=True, nogil=True)
def count_signflip_sampled(d, group, n_groups, n_draws, seed, threshold, first, last):
    """Of ``n_draws`` uniform random sign vectors, the number of blocks [first, last) with
    Σ_g |Σ_{i∈g} ε_i d_i| ≥ threshold."""
    count = 0
    for b in range(first, last):
        draws = min(BLOCK, n_draws - b * BLOCK)
        count += _count_signflip_block(d, group, n_groups, draws, stream_seed(seed, b), threshold)
    return count
