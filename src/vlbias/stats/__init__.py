"""Association statistics shared by every suite (WEAT/SEAT, iEAT, grounded tests)."""

from vlbias.stats.adjust import benjamini_hochberg, holm
from vlbias.stats.bootstrap import EffectSizeCI, effect_size_ci
from vlbias.stats.permutation import PermutationResult, SignFlipResult, permutation_test_sw, signflip_test
from vlbias.stats.weat import effect_size, effect_size_sw, permutation_pvalue, s_wAB, s_XYAB

__all__ = [
    "EffectSizeCI",
    "PermutationResult",
    "SignFlipResult",
    "benjamini_hochberg",
    "effect_size",
    "effect_size_ci",
    "effect_size_sw",
    "holm",
    "permutation_pvalue",
    "permutation_test_sw",
    "s_wAB",
    "s_XYAB",
    "signflip_test",
]
