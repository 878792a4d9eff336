"""Association statistics shared by every suite (WEAT/SEAT, iEAT, grounded tests)."""

from vlbias.stats.weat import (
    PermutationResult,
    effect_size,
    effect_size_sw,
    permutation_pvalue,
    permutation_test_sw,
    s_wAB,
    s_XYAB,
)

__all__ = [
    "PermutationResult",
    "effect_size",
    "effect_size_sw",
    "permutation_pvalue",
    "permutation_test_sw",
    "s_wAB",
    "s_XYAB",
]
