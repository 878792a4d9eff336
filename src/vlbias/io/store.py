"""Embedding stores: one HDF5 file per model (and dataset), one group per stimulus set.

Layout::

    /<key>/vectors   float32 or float64 (n, dim)   one row per stimulus (float64 only for vectors
                                                   published so: the authors' iEAT CSVs)
    /<key>/ids       utf-8 strings (n,) the stimulus (image file name, word, sentence)
    attrs            provenance: JSON under "provenance" (model id, revision, weights, ...)

``<key>`` is an image category ("insect-flower/flower") or a text set's "<test id>/<X|Y|A|B>".
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any

import h5py
import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.errors import InputError
from vlbias.io.hdf5 import atomic_hdf5, open_hdf5
from vlbias.io.paths import StrPath

_STR = h5py.string_dtype("utf-8")


def write_embeddings(path: StrPath, sets: Mapping[str, tuple[ArrayLike, Sequence[str]]],
                     provenance: Mapping[str, Any]) -> None:
    """Write ``sets`` ({key: (vectors, ids)}) and ``provenance`` (a JSON-able dict) atomically.

    Vectors keep float64 when given so (published vectors stay exactly as published); anything else
    is stored as float32, the precision models compute in.
    """
    with atomic_hdf5(path) as f:
        f.attrs["provenance"] = json.dumps(provenance, sort_keys=True, default=str)
        for key, (vectors, ids) in sets.items():
            vectors = np.asarray(vectors)
            vectors = vectors if vectors.dtype == np.float64 else vectors.astype(np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(ids):
                raise ValueError(f"set '{key}': {vectors.shape} vectors for {len(ids)} ids")
            g = f.create_group(key)
            g.create_dataset("vectors", data=vectors)
            g.create_dataset("ids", data=list(ids), dtype=_STR)


def read_provenance(path: StrPath) -> dict[str, Any]:
    with open_hdf5(path) as f:
        provenance: dict[str, Any] = json.loads(f.attrs.get("provenance", "{}"))
    return provenance


def read_set(path: StrPath, key: str) -> tuple[NDArray[np.float64], list[str]]:
    """(vectors float64 (n, dim), ids list[str]) of set ``key``; errors name file and key."""
    with open_hdf5(path) as f:
        if key not in f or "vectors" not in f[key]:
            known = []
            f.visit(lambda name: known.append(name[: -len("/vectors")]) if name.endswith("/vectors") else None)
            raise InputError(path, f"no stimulus set '{key}' (the store holds: {', '.join(sorted(known)) or 'none'})")
        g = f[key]
        try:
            ids = [i.decode() if isinstance(i, bytes) else i for i in g["ids"][()]]
        except UnicodeDecodeError as e:
            raise InputError(path, f"set '{key}': ids that are not UTF-8 text (byte 0x{e.object[e.start]:02x})") \
                from None
        return g["vectors"][()].astype(np.float64), ids
