"""A user's own embeddings (``source: vectors``): one vector per stimulus id, from CSV, NPY or HDF5.

Stimulus ids: an iEAT image is ``<category>/<file>`` (``insect-flower/flower/rose.jpg``, as the image
manifest lists it); a text stimulus (a SEAT word or sentence, a text set of a cross-modal test) is
the text itself.

Formats (by the file's suffix, or ``format``):
    csv    UTF-8, comma-separated, a header line whose first column is ``id``; then one line per
           stimulus: its id and its ``dim`` numbers (the other header names are free)
    npy    a numeric array (n, dim), no pickles; its ids in a UTF-8 text file (``ids``), one per
           line in the array's row order
    hdf5   (``.h5``, ``.hdf5``) datasets ``ids`` (n,) strings and ``vectors`` (n, dim) at the root

    vectors = read_vectors("mine.csv")            # or read_vectors("mine.npy", ids="mine.ids.txt")
    vectors.lookup(["insect-flower/flower/rose.jpg"], "set insect-flower/flower")   # float64 (1, dim)
    vectors.provenance                            # the files with their sha256, format, n, dim

Every problem is an InputError naming the file and the id (and the line or row): an id given
twice, a value that is not a number, NaN or inf, a zero vector (its cosine is undefined), a row of
another length, a dimension other than the configured ``dim``, and (``lookup``) a stimulus the file
has no vector for.
"""

import csv
import tokenize
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import h5py
import numpy as np
from numpy.typing import NDArray

from vlbias.errors import InputError
from vlbias.io.fetch import sha256_file
from vlbias.io.paths import StrPath
from vlbias.io.store import write_embeddings

if TYPE_CHECKING:
    from vlbias.io.stimuli import Stimulus

FORMATS = {".csv": "csv", ".npy": "npy", ".h5": "hdf5", ".hdf5": "hdf5"}
SHOWN = 5  # ids named in one error message

Where: TypeAlias = Callable[[int], str]  # row i -> where it is in the file ("line 7", "row 3")
Parsed: TypeAlias = tuple[list[str], NDArray[np.float64], Where]  # (ids, float64 (n, dim), where row i is)


def _some(items: Iterable[str]) -> str:
    items = list(items)
    shown = ", ".join(f"'{i}'" for i in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


class UserVectors:
    """Validated vectors keyed by stimulus id (built by ``read_vectors``)."""

    def __init__(self, path: StrPath, ids: list[str], vectors: NDArray[np.float64], where: Where,
                 provenance: dict[str, Any]) -> None:
        self.path, self.ids, self.vectors, self.provenance = Path(path), ids, vectors, provenance
        self.dim = vectors.shape[1]
        self.row: dict[str, int] = {}
        for i, stimulus in enumerate(ids):
            if not stimulus:
                raise InputError(self.path, f"{where(i)}: empty id")
            if stimulus in self.row:
                raise InputError(self.path, f"id '{stimulus}' is given twice ({where(self.row[stimulus])} and "
                                            f"{where(i)})")
            self.row[stimulus] = i
        bad = ~np.isfinite(vectors).all(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(self.path, f"id '{ids[i]}' ({where(i)}): NaN or inf in its vector"
                                        + (f" (and {int(bad.sum()) - 1} more ids)" if bad.sum() > 1 else ""))
        zero = ~vectors.any(axis=1)
        if zero.any():
            i = int(np.flatnonzero(zero)[0])
            raise InputError(self.path, f"id '{ids[i]}' ({where(i)}): a zero vector (its cosine with any other is "
                                        "undefined)")

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, ids: Sequence[str], what: str) -> NDArray[np.float64]:
        """float64 (len(ids), dim): the vectors of ``ids`` in order; an id the file lacks is an
        InputError naming the file, the ids and ``what`` needs them (e.g. "set insect-flower/flower")."""
        missing = [i for i in ids if i not in self.row]
        if missing:
            raise InputError(self.path, f"no vector for {len(missing)} stimulus id(s) of {what}: {_some(missing)}")
        return self.vectors[[self.row[i] for i in ids]] if ids else np.zeros((0, self.dim))


def read_vectors(path: StrPath, ids: StrPath | None = None, format: str | None = None,
                 dim: int | None = None) -> UserVectors:
    """The vectors in ``path`` (``ids``: the ids file of an NPY array), validated (module docstring).

    ``format``: csv | npy | hdf5 (default: from the suffix); ``dim``: the dimension the vectors must
    have (default: any, the same for all).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "vectors file not found")
    format = format or FORMATS.get(path.suffix.lower())
    if format not in FORMATS.values():
        raise InputError(path, f"unknown vectors format (give `format`: csv, npy or hdf5; or name the file "
                               f"{', '.join(FORMATS)})")
    if (ids is not None) != (format == "npy"):
        raise InputError(path, "an .npy array needs its ids file (`ids`)" if format == "npy"
                         else f"`ids` is for .npy arrays only; a {format} file holds its ids")
    provenance = {"vectors_file": str(path), "vectors_sha256": sha256_file(path), "format": format}
    if format == "csv":
        names, vectors, where = _read_csv(path)
    elif format == "npy":
        assert ids is not None  # checked above: an .npy array comes with its ids file
        names, vectors, where = _read_npy(path, Path(ids))
        provenance |= {"ids_file": str(ids), "ids_sha256": sha256_file(ids)}
    else:
        names, vectors, where = _read_hdf5(path)
    if len(names) == 0:
        raise InputError(path, "no vectors")
    if dim is not None and vectors.shape[1] != dim:
        raise InputError(path, f"vectors of dimension {vectors.shape[1]}, but the entry's `dim` is {dim}")
    return UserVectors(path, names, vectors, where, provenance | {"n": len(names), "dim": vectors.shape[1]})


def _read_csv(path: Path) -> Parsed:
    """(ids, float64 (n, dim), line of row i) from a CSV file of ``id,<dim numbers>`` lines."""
    ids: list[str] = []
    rows: list[NDArray[np.float64]] = []
    lines: list[int] = []
    line = 0
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header or header[0].strip() != "id" or len(header) < 2:
                raise InputError(path, "line 1: expected a header `id,<component>,...` (the first column `id`, "
                                       "then one column per dimension)")
            dim = len(header) - 1
            line = reader.line_num  # the last line read; a row starts on the next one
            for row in reader:
                first, line = line + 1, reader.line_num
                if not row or row == [""]:
                    continue
                if line != first:  # a newline inside quotes: nobody's id or number has one
                    raise InputError(path, f"line {first}: a quoted field runs on to line {line} (a quote left "
                                           "open?)")
                stimulus = row[0]
                if len(row) != dim + 1:
                    raise InputError(path, f"line {line} (id '{stimulus}'): {len(row) - 1} values, expected {dim} "
                                           "(the header's)")
                try:
                    rows.append(np.array(row[1:], dtype=np.float64))
                except ValueError:
                    bad = next(v for v in row[1:] if not _is_number(v))
                    raise InputError(path, f"line {line} (id '{stimulus}'): '{bad}' is not a number") from None
                ids.append(stimulus)
                lines.append(line)
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (byte 0x{e.object[e.start]:02x}); save the file as UTF-8") from None
    except csv.Error as e:  # e.g. a quote left open until the field limit: the line where it opened
        raise InputError(path, f"line {line + 1}: not readable as CSV ({e}; a quote left open?)") from None
    vectors = np.stack(rows) if rows else np.zeros((0, dim))
    return ids, vectors, lambda i: f"line {lines[i]}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _numeric_2d(path: Path, array: NDArray[Any], what: str) -> NDArray[np.float64]:
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise InputError(path, f"{what}: expected a numeric array (n, dim), got {array.dtype} {array.shape}")
    return array.astype(np.float64)


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _read_npy(path: Path, ids_path: Path) -> Parsed:
    """(ids, float64 (n, dim), row of row i) from an .npy array and its ids file."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = _NPY_HEADERS.get(version)
            if read_header is None:
                raise ValueError(f"format version {version}: numpy.save writes 1.0 or 2.0 for numbers")
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
    except (ValueError, OSError, tokenize.TokenError) as e:  # numpy tokenizes a 1.0 header: a cut one is a TokenError
        raise InputError(path, f"not a readable .npy array without pickled objects ({e})") from None
    if dtype.hasobject:
        raise InputError(path, "not a readable .npy array without pickled objects (it holds Python objects)")
    # the header's claim checked against the file before anything is allocated
    size = dtype.itemsize * int(np.prod(shape, dtype=object))
    if offset + size != path.stat().st_size:
        raise InputError(path, f"the header says {dtype} {shape} ({size} bytes of data), the file holds "
                               f"{path.stat().st_size - offset}: truncated or not an .npy file")
    array = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C") \
        if size else np.zeros(shape, dtype)
    vectors = _numeric_2d(path, array, "the array")
    if not ids_path.is_file():
        raise InputError(ids_path, "ids file not found")
    try:
        # lines end at "\n" (and "\r\n") only: str.splitlines() also cuts at \x0c, \x85, \u2028, ... and
        # would shift every later id onto another row's vector
        ids = [i.removesuffix("\r") for i in ids_path.read_text(encoding="utf-8-sig").split("\n")]
    except UnicodeDecodeError as e:
        raise InputError(ids_path, f"not UTF-8 text (byte 0x{e.object[e.start]:02x})") from None
    while ids and not ids[-1]:  # a trailing newline
        ids.pop()
    if len(ids) != len(vectors):
        raise InputError(ids_path, f"{len(ids)} ids for the {len(vectors)} rows of {path}")
    return ids, vectors, lambda i: f"row {i + 1}"


def _read_hdf5(path: Path) -> Parsed:
    """(ids, float64 (n, dim), row of row i) from an HDF5 file's ``ids`` and ``vectors`` datasets."""
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in ("ids", "vectors") if not isinstance(f.get(k), h5py.Dataset)]
            if missing:
                raise InputError(path, f"no dataset {' or '.join(missing)} at the root (expected `ids` (n,) strings "
                                       "and `vectors` (n, dim))")
            raw_ids, array = f["ids"][()], f["vectors"][()]
    except OSError as e:
        raise InputError(path, f"not a readable HDF5 file ({e})") from None
    vectors = _numeric_2d(path, np.asarray(array), "dataset `vectors`")
    raw_ids = np.asarray(raw_ids)
    if raw_ids.ndim != 1 or raw_ids.dtype.kind not in "OSU":
        raise InputError(path, f"dataset `ids`: expected (n,) strings, got {raw_ids.dtype} {raw_ids.shape}")
    try:
        ids = [i.decode("utf-8") if isinstance(i, bytes) else str(i) for i in raw_ids]
    except UnicodeDecodeError as e:
        raise InputError(path, f"dataset `ids`: not UTF-8 text (byte 0x{e.object[e.start]:02x} in row "
                               f"{next(n for n, i in enumerate(raw_ids, 1) if not _utf8(i))})") from None
    if len(ids) != len(vectors):
        raise InputError(path, f"{len(ids)} ids for {len(vectors)} vectors")
    return ids, vectors, lambda i: f"row {i + 1}"


def stimulus_sets(stimuli: Iterable["Stimulus"], images: Mapping[str, Sequence[str]] | None = None
                  ) -> dict[str, tuple[list[str], list[str]]]:
    """{store key: (vector-file ids, store ids)} of every set of ``stimuli`` (vlbias.io.stimuli.Stimulus):
    an image category, each image ``images`` ({category: [file, ...]}, e.g. the image manifest's) lists
    for it, keyed "<category>/<file>" (stored as the file, as in image stores); a text set, its items."""
    sets: dict[str, tuple[list[str], list[str]]] = {}
    for stimulus in stimuli:
        for st in stimulus.sets.values():
            if st.items is not None:
                sets[st.key] = (list(st.items), list(st.items))
            else:
                files = None if st.category is None else (images or {}).get(st.category)
                if files is None:
                    raise InputError(stimulus.path, f"image category '{st.category}' is listed in no image manifest")
                sets[st.key] = ([f"{st.category}/{f}" for f in files], list(files))
    return sets


def vectors_store(vectors: UserVectors, sets: Mapping[str, tuple[Sequence[str], Sequence[str]]], out: StrPath,
                  provenance: Mapping[str, Any]) -> None:
    """Write the embedding store ``out`` (vlbias.io.store) of ``sets`` ({key: (lookup ids, stored ids)}:
    the ids the file keys the set's stimuli by, and the ids the store lists) from ``vectors``."""
    data = {key: (vectors.lookup(list(lookup), f"set '{key}'"), list(stored)) for key, (lookup, stored) in sets.items()}
    write_embeddings(out, data, {**provenance, **vectors.provenance, "weights": "user vectors",
                                 "n": {k: len(v[1]) for k, v in data.items()}})
