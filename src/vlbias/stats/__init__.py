"""Association statistics shared by every suite (WEAT/SEAT, iEAT, grounded tests).

The names below load their module when first asked for (PEP 562): a job that only adjusts p-values
or lays out a table (``vlbias.stats.adjust``) does not import numba and scipy with the permutation
engine and the bootstrap."""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vlbias.stats.adjust import benjamini_hochberg, holm
    from vlbias.stats.bootstrap import EffectSizeCI, effect_size_ci
    from vlbias.stats.permutation import PermutationResult, SignFlipResult, permutation_test_sw, signflip_test
    from vlbias.stats.weat import effect_size, effect_size_sw, permutation_pvalue, s_wAB, s_XYAB

_MODULES = {"benjamini_hochberg": "adjust", "holm": "adjust", "EffectSizeCI": "bootstrap", "effect_size_ci": "bootstrap",
            "PermutationResult": "permutation", "SignFlipResult": "permutation", "permutation_test_sw": "permutation",
            "signflip_test": "permutation", "effect_size": "weat", "effect_size_sw": "weat",
            "permutation_pvalue": "weat", "s_wAB": "weat", "s_XYAB": "weat"}

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


def __getattr__(name: str) -> object:
    if name in _MODULES:
        return getattr(importlib.import_module(f"vlbias.stats.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'vlbias.stats' has no attribute {name!r}")
