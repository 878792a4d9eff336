"""The iEAT authors' published embeddings (Steed & Caliskan, github.com/ryansteed/ieat).

One CSV per (test folder, category, model): an unnamed index column, one column per
dimension named 0..dim-1, and an ``img`` column with the image file name.
"""

import numpy as np
import pandas as pd

from vlbias.errors import InputError


def read_ieat_csv(path):
    """(vectors float64 (n, dim), image names) from one published CSV; malformed files are named."""
    try:
        df = pd.read_csv(path, index_col=0)  # pandas >= 3 parses each number to its exact float64
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise InputError(path, f"not a readable embeddings CSV: {e}") from None
    if "img" not in df.columns:
        raise InputError(path, "no 'img' column (expected the iEAT embeddings format)")
    dims = [c for c in df.columns if c != "img"]
    if [str(c) for c in dims] != [str(i) for i in range(len(dims))]:
        raise InputError(path, "dimension columns are not named 0..dim-1")
    if df.empty:
        raise InputError(path, "no embeddings (empty file)")
    try:
        vectors = df[dims].to_numpy(dtype=np.float64)
    except ValueError as e:
        raise InputError(path, f"non-numeric value in the dimension columns: {e}") from None
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        raise InputError(path, f"rows {df['img'][bad].tolist()} contain NaN or inf")
    return vectors, df["img"].astype(str).tolist()
