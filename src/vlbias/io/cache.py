"""Content-keyed caches: the results of expensive work (an embedding, a detector pass, a
log-probability) kept under a digest of everything that determined them.

A Snakemake job reruns when any of its inputs changed: a model's embedding job when one stimulus
file of dozens was edited, a region job when ten images arrived among ten thousand. Such a job
looks every item up here first and computes only the misses, so an edit costs what it changed.

    cache = RecordCache(f"{cache_dir}/embeddings/{fingerprint(encoder.info)}")
    record = cache.get(key)                   # {"vector": array} or None
    cache.put(key, {"vector": vector})
    cache.flush()                             # also on its own every FLUSH_SECONDS, and in close()

A cache directory belongs to one producer (a model or detector with its settings: ``fingerprint``);
a key names one item (``digest`` of the item's inputs). Records are dicts of numpy arrays with at
least one dimension (the first may differ between records: an image's regions). They are kept in
shards, HDF5 files written atomically each by one process: jobs running at once never write one
file, so no locking is needed, and a job killed half-way keeps what it flushed.

Shard layout: ``/keys`` (n,) ASCII hex digests; per field ``/data/<name>`` (rows of all records
concatenated) and ``/offsets/<name>`` (n + 1,) int64, record i's rows ``offsets[i]:offsets[i+1]``;
``/digests`` (n,) the ``record_digest`` of each record (its key, fields, dtypes, shapes and bytes).

Every record is checked against its digest when read: one whose bytes (or offsets) are not what was
written is logged with the shard's path and its key, and recomputed like a miss. A shard from before
the digests (no ``/digests``) cannot be checked: it is removed, and its records are recomputed.
"""

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import h5py
import numpy as np
from numpy.typing import ArrayLike, NDArray

from vlbias.io.hdf5 import atomic_hdf5
from vlbias.io.paths import StrPath

if TYPE_CHECKING:
    from hashlib import _Hash

    from vlbias.logs import Progress

log = logging.getLogger(__name__)

FLUSH_SECONDS = 60          # a long job persists its work at least this often
FLUSH_BYTES = 256 * 2**20   # ... and whenever this much waits in memory
MERGE_SHARDS = 32           # more small shards than this are merged into one when flushing
SMALL_SHARD = 16 * 2**20
# keys of an adapter's ``info`` that say where files lie, not what they hold (their sha256 does)
PATH_KEYS = ("path", "model_dir", "processor_dir", "weights_file", "region_store", "cache")

Record: TypeAlias = dict[str, NDArray[Any]]
"""A cache record: named arrays, each with at least one dimension."""
Layout: TypeAlias = tuple[tuple[str, str, tuple[int, ...]], ...]  # (name, dtype, shape after the first axis) per field


def _feed(h: "_Hash", part: object) -> None:
    """Hash ``part`` unambiguously: its type, and its length or shape, precede its content."""
    if part is None:
        h.update(b"N")
    elif isinstance(part, (bytes, bytearray, memoryview)):
        h.update(b"B%d:" % len(part))
        h.update(part)
    elif isinstance(part, str):
        _feed(h, part.encode("utf-8"))
    elif isinstance(part, np.ndarray):
        a = np.ascontiguousarray(part)
        h.update(f"A{a.dtype.str}{a.shape}:".encode())
        h.update(a.tobytes())
    elif isinstance(part, (list, tuple)):
        h.update(b"L%d:" % len(part))
        for p in part:
            _feed(h, p)
    elif isinstance(part, dict):
        _feed(h, json.dumps(part, sort_keys=True, default=str))
    elif isinstance(part, (bool, int, float, np.generic)):
        h.update(f"S{type(part).__name__}:{part!r}".encode())
    else:
        raise TypeError(f"cannot digest a {type(part).__name__}")


def digest(*parts: object) -> str:
    """Hex sha256 of ``parts`` (str, bytes, numbers, None, numpy arrays, lists, dicts)."""
    h = hashlib.sha256()
    _feed(h, list(parts))
    return h.hexdigest()


def digester(head: Sequence[object], n: int) -> Callable[..., str]:
    """A function of ``n`` parts giving ``digest(*head, *parts)``: the parts every call shares hashed
    once (a job's cache keys differ in a pair's own parts, not in its group's)."""
    start = hashlib.sha256()
    start.update(b"L%d:" % (len(head) + n))  # as ``digest``'s list of them all
    for part in head:
        _feed(start, part)

    def of(*parts: object) -> str:
        h = start.copy()
        for part in parts:
            _feed(h, part)
        return h.hexdigest()

    return of


def record_digest(key: str, record: Mapping[str, NDArray[Any]]) -> str:
    """Digest of a cache record and the key it is stored under (kept beside it, checked when read)."""
    h = hashlib.sha256()
    _feed(h, key)
    for name in sorted(record):  # as ``digest`` would, without its detours (this runs per record read)
        _feed(h, name)
        _feed(h, record[name])
    return h.hexdigest()


def fingerprint(info: Mapping[str, Any]) -> str:
    """Digest of a producer's provenance (an adapter's ``info``), leaving out where its files lie."""
    return digest({k: v for k, v in info.items() if k not in PATH_KEYS})


class RecordCache:
    """Records (dicts of arrays) by key, in the shards of one directory; see the module docstring."""

    def __init__(self, directory: StrPath) -> None:
        self.directory = Path(directory)
        self.index: dict[str, tuple[Path, int]] = {}  # key -> (shard path, row)
        self.pending: dict[str, Record] = {}          # key -> record, not yet written
        self.pending_bytes, self.last_flush = 0, time.monotonic()
        self._open: dict[Path, h5py.File] = {}
        # shards found damaged: rewritten without their damaged records by the next flush
        self.damaged: set[Path] = set()
        for shard in sorted(self.directory.glob("*.h5")):
            try:
                with h5py.File(shard, "r") as f:
                    keys, checked = f["keys"][()], "digests" in f
            except (OSError, KeyError) as e:  # a shard another job is merging away, or not ours
                log.warning("%s: cache shard not read (%s)", shard, e)
                continue
            if not checked:
                log.warning("%s: cache shard written before records carried digests, so unverifiable: removed, "
                            "its %d records are recomputed", shard, len(keys))
                with contextlib.suppress(OSError):  # another job's, or not ours to remove: skipped all the same
                    shard.unlink()
                continue
            self.index.update((k.decode(), (shard, i)) for i, k in enumerate(keys))
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self.index) + len(self.pending)

    def lists(self, key: str) -> bool:
        """Whether the cache lists ``key``: from its index, nothing read (a damaged record is found out when
        read, ``get_many``); a key it lacks counts as a miss."""
        listed = key in self.pending or key in self.index
        self.misses += not listed
        return listed

    def get(self, key: str) -> Record | None:
        """The record stored under ``key``, or None."""
        if key in self.pending:
            self.hits += 1
            return self.pending[key]
        where = self.index.get(key)
        record = self._records(where[0], [(key, where[1])]).get(key) if where else None
        self.hits += record is not None
        self.misses += record is None
        return record

    def get_many(self, keys: Sequence[str]) -> dict[str, Record]:
        """{key: record} of those of ``keys`` the cache holds intact: each shard read once, whole fields at a
        time (a record at a time costs a file access each)."""
        found: dict[str, Record] = {}
        rows: dict[Path, list[tuple[str, int]]] = {}
        for key in keys:
            if key in self.pending:
                found[key] = self.pending[key]
            elif key in self.index:
                shard, row = self.index[key]
                rows.setdefault(shard, []).append((key, row))
        for shard, wanted in rows.items():
            found |= self._records(shard, wanted)
        self.hits += len(found)
        self.misses += len(set(keys)) - len(found)
        return found

    def _records(self, shard: Path, wanted: list[tuple[str, int]]) -> dict[str, Record]:
        """{key: record} of ``wanted`` ((key, row) pairs) in ``shard`` whose digests match; the others are
        logged with the shard's path and left out, so that they are recomputed."""
        found: dict[str, Record] = {}
        damaged: list[str] = []
        try:
            f = self._open.get(shard) or self._open.setdefault(shard, h5py.File(shard, "r"))
            fields = {name: (f["offsets"][name], f["data"][name]) for name in f["data"]}
            digests = f["digests"]
            if len(wanted) > 1:  # whole fields at once: far fewer file accesses than a record at a time
                fields = {name: (offsets[()], data[()]) for name, (offsets, data) in fields.items()}
                digests = digests[()]
            for key, row in wanted:
                # damaged offsets slice out nothing, or other records' rows: the digest (of the key too) tells
                record = {name: data[offsets[row]:offsets[row + 1]] for name, (offsets, data) in fields.items()}
                if record_digest(key, record) == digests[row].decode("ascii", "replace"):
                    found[key] = record
                else:
                    damaged.append(key)
        except FileNotFoundError:  # merged away by another job meanwhile: recompute
            return {}
        except (OSError, KeyError, ValueError, TypeError, IndexError) as e:  # HDF5's own structures damaged
            damaged = [key for key, _ in wanted if key not in found]
            log.warning("%s: cache shard damaged (%s); its %d records asked for are recomputed", shard, e,
                        len(damaged))
        else:
            if damaged:
                log.warning("%s: %d cache record(s) damaged (not the bytes written), recomputed: %s%s", shard,
                            len(damaged), ", ".join(damaged[:3]), " ..." if len(damaged) > 3 else "")
        for key in damaged:  # never read again: the recomputed record replaces it
            self.index.pop(key, None)
        if damaged:
            self.damaged.add(shard)
        return found

    def put(self, key: str, record: Mapping[str, ArrayLike]) -> None:
        """Keep ``record`` ({name: array with ndim >= 1}) under ``key``; written by the next flush."""
        self.put_many([key], {name: np.asarray(value)[None] for name, value in record.items()})

    def put_many(self, keys: Sequence[str], block: Mapping[str, ArrayLike]) -> None:
        """Keep the records of a block ({name: array (len(keys), ...) with ndim >= 2}): record i, row i of
        each field (a view), under ``keys[i]``; one call for a batch of vectors."""
        arrays = {name: np.asarray(value) for name, value in block.items()}
        if any(v.ndim < 2 or len(v) != len(keys) for v in arrays.values()):
            raise ValueError(f"records {', '.join(keys[:3])}: fields need at least one dimension, a row per key")
        for i, key in enumerate(keys):
            self.pending[key] = {name: v[i] for name, v in arrays.items()}
        self.pending_bytes += sum(v.nbytes for v in arrays.values())
        if self.pending_bytes >= FLUSH_BYTES or time.monotonic() - self.last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the pending records as one new shard (and merge small shards when there are many, and
        shards found damaged)."""
        self.last_flush = time.monotonic()
        if not self.pending and not self.damaged:
            return
        written = []
        for records in _by_layout(self.pending).values():
            shard = self._write(records)
            self.index.update((k, (shard, i)) for i, k in enumerate(records))
            written.append(shard)
        self.pending, self.pending_bytes = {}, 0
        if self.damaged:  # their intact records rewritten, so that no damaged one is ever met again
            damaged, self.damaged = sorted(self.damaged), set()
            self._merge(damaged)
        small = [p for p in {s for s, _ in self.index.values()} if p not in written and p.stat().st_size < SMALL_SHARD]
        if len(small) > MERGE_SHARDS:
            self._merge(small)

    def _write(self, records: Mapping[str, Record]) -> Path:
        fields = sorted(next(iter(records.values())))
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-{hashlib.sha256(''.join(records).encode()).hexdigest()[:12]}.h5"
        dest = self.directory / name
        with atomic_hdf5(dest) as f:
            f.create_dataset("keys", data=np.array(list(records), dtype="S64"))
            f.create_dataset("digests", data=np.array([record_digest(k, r) for k, r in records.items()], dtype="S64"))
            for field in fields:  # every record has these fields, of one dtype and trailing shape (_by_layout)
                values = [r[field] for r in records.values()]
                counts = [len(v) for v in values]
                f.create_dataset(f"offsets/{field}", data=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
                f.create_dataset(f"data/{field}", data=np.concatenate(values))
        return dest

    def _merge(self, shards: Iterable[Path]) -> None:
        """Rewrite ``shards`` as one; a shard another job merged first is skipped."""
        records: dict[str, Record] = {}
        for shard in shards:
            records |= self._records(shard, [(k, i) for k, (s, i) in self.index.items() if s == shard])
        for group in _by_layout(records).values():
            merged = self._write(group)
            self.index.update((k, (merged, i)) for i, k in enumerate(group))
        self._close_shards()
        for shard in shards:
            shard.unlink(missing_ok=True)

    def _close_shards(self) -> None:
        for f in self._open.values():
            f.close()
        self._open = {}

    def close(self) -> None:
        """Flush and release the shards."""
        self.flush()
        self._close_shards()

    def __enter__(self) -> "RecordCache":
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        # flushed even when the job fails: every record is complete, and the rerun starts from them
        self.close()
        return False


def _by_layout(records: Mapping[str, Record]) -> dict[Layout, dict[str, Record]]:
    """``records`` grouped by layout (field names, dtypes, shapes after the first axis): a shard
    concatenates its records field by field, so one producer's records of other shapes (a two-stream
    model's W/S vectors and its C vectors) go to shards of their own."""
    groups: dict[Layout, dict[str, Record]] = {}
    for key, r in records.items():
        layout = tuple(sorted((name, v.dtype.str, v.shape[1:]) for name, v in r.items()))
        groups.setdefault(layout, {})[key] = r
    return groups


def cached_vectors(cache: RecordCache | None, keys: Sequence[str], compute: Callable[[list[int]], NDArray[Any]],
                   progress: "Progress | None" = None, chunk: int = 256) -> NDArray[Any]:
    """float (len(keys), dim): the vector of each key, from ``cache`` where it has one, else from
    ``compute(indices)`` (the vectors of those items, in order; called on chunks of ``chunk``), which
    are then cached. ``cache`` None computes everything. ``progress`` (vlbias.logs.Progress) advances
    by item."""
    if not keys:
        if progress is not None:
            progress.done()
        return np.zeros((0, 0), dtype=np.float32)
    return cached_outputs(cache, keys, lambda todo: {"vector": compute(todo)}, progress, chunk)["vector"]


def cached_outputs(cache: RecordCache | None, keys: Sequence[str],
                   compute: Callable[[list[int]], Mapping[str, NDArray[Any]]], progress: "Progress | None" = None,
                   chunk: int = 256) -> dict[str, NDArray[Any]]:
    """{name: float (len(keys), dim_name)}: as ``cached_vectors`` for a producer that gives several
    vectors per item (``compute(indices)`` returns {name: (len(indices), dim_name)}, e.g. iGPT's
    layers and logits from one pass); each item's vectors are one cache record. {} for no keys."""
    rows: dict[int, dict[str, NDArray[Any]]] = {}
    todo: list[int] = []
    found = cache.get_many(keys) if cache is not None else {}
    for i, key in enumerate(keys):
        if key in found:
            rows[i] = {name: value[0] for name, value in found[key].items()}
        else:
            todo.append(i)
    if progress is not None:
        progress.advance(len(rows))
    for start in range(0, len(todo), chunk):
        part = todo[start:start + chunk]
        computed = compute(part)
        for j, i in enumerate(part):
            rows[i] = {name: vectors[j] for name, vectors in computed.items()}
        if cache is not None:
            cache.put_many([keys[i] for i in part], {name: np.asarray(v)[:, None] for name, v in computed.items()})
        if progress is not None:
            progress.advance(len(part))
    if progress is not None:
        progress.done(f"{len(keys) - len(todo)} from the cache" if cache is not None else "")
    if not keys:
        return {}
    return {name: np.stack([rows[i][name] for i in range(len(keys))]) for name in rows[0]}
