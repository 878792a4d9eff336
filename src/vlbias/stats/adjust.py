r"""Multiple-testing adjusted p-values: Holm (family-wise error) and Benjamini–Hochberg (false
discovery rate).

For m p-values sorted ascending, p_(1) ≤ … ≤ p_(m):

    Holm:  p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) p_(j))           (Holm 1979)
    BH:    p̃_(i) = min(1, min_{j ≥ i} m p_(j) / j)                 (Benjamini & Hochberg 1995)

The running max / min makes the adjusted values monotone in p, so tied p-values get the same
adjusted value whatever order the sort puts them in. A hypothesis is rejected at level α when
p̃ ≤ α — the same decisions as the step-down (Holm) and step-up (BH) procedures. Both hold for
any dependence between the tests (Holm) or for positively dependent ones (BH, e.g. tests sharing
attribute sets).

NaN marks a test with no p-value (skipped): it is not a member of the family (m counts only the
finite p-values) and its adjusted value stays NaN.
"""

from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray


def _family(p: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"expected a 1-D array of p-values, got shape {p.shape}")
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise ValueError(f"p-values must lie in [0, 1], got {p[ok][(p[ok] < 0) | (p[ok] > 1)].tolist()}")
    return p, np.flatnonzero(ok)


def holm(p: ArrayLike) -> NDArray[np.float64]:
    """Holm's step-down adjusted p-values of a family (1-D array, NaN left out and kept NaN)."""
    p, idx = _family(p)
    out = np.full(p.shape, np.nan)
    m = idx.size
    order = idx[np.argsort(p[idx], kind="stable")]
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def benjamini_hochberg(p: ArrayLike) -> NDArray[np.float64]:
    """Benjamini–Hochberg step-up adjusted p-values (q-values) of a family (1-D array, NaN left out
    and kept NaN)."""
    p, idx = _family(p)
    out = np.full(p.shape, np.nan)
    m = idx.size
    order = idx[np.argsort(p[idx], kind="stable")][::-1]  # largest first
    rank = m - np.arange(m)  # rank of each in ascending order
    out[order] = np.minimum(1.0, np.minimum.accumulate(m * p[order] / rank))
    return out


def add_adjusted(df: pd.DataFrame, family: Sequence[str] = ("model",), p: str = "p") -> pd.DataFrame:
    """``df`` (a DataFrame) with columns ``p_holm`` and ``p_bh``: ``p`` adjusted within each family,
    the rows sharing the values of the ``family`` columns (in a results table: one model's tests).
    Rows whose ``status`` is not "ok" (when there is a status column) or whose p is missing are
    left out of their family and get NaN."""
    out = df.copy()
    values = pd.to_numeric(out[p], errors="coerce").astype(np.float64)
    if "status" in out:
        values = values.where(out["status"] == "ok")
    out["p_holm"] = np.nan
    out["p_bh"] = np.nan
    for rows in out.groupby(list(family), sort=False, dropna=False).indices.values():
        out.iloc[rows, out.columns.get_loc("p_holm")] = holm(values.iloc[rows].to_numpy())
        out.iloc[rows, out.columns.get_loc("p_bh")] = benjamini_hochberg(values.iloc[rows].to_numpy())
    return out
