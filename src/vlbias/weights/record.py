"""Fetch, record, verify, load: the one way weights reach a model.

    record = fetch(name, spec, cache=..., lock_path=...)      # downloads, checked against the lock
    write_record(record_path(name), record); read_record(record_path(name))
    spec = localize(name, spec, record, cache=..., lock_path=...)   # job side: verified, offline
    spec = prepare(name, spec, cache=..., lock_path=...)      # both at once (vlbias run, a library user)

A record names every file of every source with its size and sha256. ``localize`` derives what the
job loads from the record's file list and the cache (a hub snapshot folder at the recorded commit,
the cached file of a URL, the local folder as it is now), checks the record against the entry as
configured and against the lock's entry, and every file's digest, before the adapter sees a path.
"""

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.checkpoints import refuse_custom_code
from vlbias.io.fetch import sha256_file
from vlbias.io.paths import StrPath
from vlbias.weights.declarations import kind_of
from vlbias.weights.download import hub_snapshot
from vlbias.weights.lock import Lock
from vlbias.weights.sources import REMOTE, Spec, locate, remote_sources, request, resolve

KINDS = (*REMOTE, "local", "random")
RESOLVED = ("commit", "pinned", "files")  # what a record's source adds to the source as configured
# files that hold weights: a snapshot folder holding one the record does not list is refused (a
# loader could pick it instead of the verified one)
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5", ".msgpack", ".gguf", ".onnx",
                ".npz", ".index.json")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# every field a record's source may have, with its types (None: null allowed), and those each kind needs:
# a record is read back from disk, and a field of another type reached the loaders (`"repo": 5`: a traceback)
_FIELDS: dict[str, tuple[type | None, ...]] = {
    "kind": (str,), "repo": (str,), "revision": (str, None), "commit": (str,), "url": (str,), "sha256": (str, None),
    "folder": (str,), "path": (str,), "request": (str,), "arch": (str, None), "tag": (str,), "enum": (str,),
    "origin": (str,), "sha256_prefix": (str, None), "pinned": (bool,), "seed": (int,), "config": (dict,),
    "files": (dict, list)}
_NEEDS = {"hub": ("repo", "commit"), "url": ("url", "folder"), "local": ("path",), "open_clip": ("arch", "tag"),
          "torchvision": ("arch", "enum", "url"), "random": ("seed",)}
Record: TypeAlias = dict[str, Any]  # a weights record (``fetch``): JSON-able


# --- fetching -------------------------------------------------------------------------------------


def fetch(name: str, spec: Spec, *, cache: StrPath, lock_path: StrPath | None, update: bool = False) -> Record:
    """The record of entry ``name`` (``<section>/<name>``): every source resolved (remote files
    downloaded into ``cache``, vlbias.weights.sources.resolve) and hashed; at the locked commit and
    checked against the locked digests when the lock at ``lock_path`` (None: no lock) has the entry
    and not ``update``, else resolved and then locked.

    The record (JSON-able)::

        {"entry": "seat/minilm", "adapter": "sentence", "request": <what the lock keeps: request()>,
         "sources": {"path": {"kind": "hub", "repo": ..., "revision": "main", "commit": "<sha>", "files":
                              {"config.json": {"size": 612, "sha256": ..., "path": <in the cache>}}}}}

    Raises InputError for a request other than the locked one and for content other than the locked
    (naming the lock, the entry, the file, both digests and the update command); a refused cached
    file is removed from the cache (never what a link in it points to outside it)."""
    sources = remote_sources(spec, kind_of(name))
    wanted = request(spec, sources)
    lock = Lock(lock_path) if lock_path and wanted else None
    locked = lock.entry(name) if lock and not update else None
    where = f"weights lock {lock.path}" if lock else ""  # the errors naming it arise only where there is one
    if locked and locked["request"] != wanted:
        raise InputError(where, f"entry '{name}' was locked for {_brief(locked['request'])}; the config now asks "
                                f"for {_brief(wanted)}; if intended, run `vlbias weights --update {name}`")
    pins = locked["sources"] if locked else {}
    out = {}
    for key, source in sources.items():
        out[key] = got = resolve(source, cache, pins.get(key))
        for file, pinned in (pins.get(key) or {"files": {}})["files"].items():
            have = got["files"].get(file)
            if have is None or (have["sha256"], have["size"]) != (pinned["sha256"], pinned["size"]):
                if have:  # not kept: a later fetch downloads it again rather than refusing the cached copy
                    _discard(have["path"], cache)
                raise InputError(where, f"entry '{name}', file '{file}': sha256 {have and have['sha256']}, locked "
                                        f"{pinned['sha256']}; if intended, run `vlbias weights --update {name}`")
        if got["kind"] == "hub":  # refused before any job would load it
            refuse_custom_code(hub_snapshot(Path(cache) / "hub", got["repo"], got["commit"]), list(got["files"]))
        elif got["kind"] == "local" and Path(got["path"]).is_dir():
            refuse_custom_code(got["path"], list(got["files"]))
    record = {"entry": name, "adapter": spec.get("adapter"), "request": wanted, "sources": out}
    if lock and (update or not locked):
        lock.put(name, lock_entry(record))
    return record


def lock_entry(record: Record) -> dict[str, Any]:
    """The lock's entry for ``record``: its request and each remote source's commit and file digests."""
    return {"request": record["request"], "sources": {
        key: {**({"commit": s["commit"]} if s.get("commit") else {}),
              "files": {f: {"size": v["size"], "sha256": v["sha256"]} for f, v in s["files"].items()}}
        for key, s in record["sources"].items() if s["kind"] in REMOTE}}


def _brief(req: Mapping[str, Any] | None) -> str:
    return json.dumps(req, sort_keys=True) if req else "nothing remote"


def _discard(path: StrPath, cache: StrPath) -> None:
    """Remove the cached file ``path`` (refused: another sha256 than locked) from the cache: the cache's
    own entry, a link itself never what it points to, and where that entry is a huggingface_hub
    snapshot link, the blob it names, if that lies in the cache's hub folder. Nothing outside the
    cache, nor anything reached through a linked folder that leads out of it, is removed."""
    path, root = Path(path), Path(cache).resolve()
    where = Path(os.path.realpath(path.parent)) / path.name  # the entry itself, its folders' links followed
    if not where.is_relative_to(root):
        return
    blob = Path(os.path.realpath(path)) if path.is_symlink() else None
    where.unlink(missing_ok=True)
    hub = (Path(cache) / "hub").resolve()
    if blob is not None and blob.is_relative_to(hub) and blob.parent.name == "blobs" and not blob.is_symlink():
        blob.unlink(missing_ok=True)


# --- records --------------------------------------------------------------------------------------


def record_path(name: str) -> Path:
    """Where the workflow keeps entry ``name``'s record: ``results/weights/<section>/<name>.json``."""
    return Path("results", "weights", f"{name}.json")


def write_record(path: StrPath, record: Record) -> None:
    """Write ``record`` as JSON at ``path``, atomically."""
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_record(path: StrPath) -> Record:
    """The record written by :func:`write_record`, checked (``check_record``)."""
    try:
        record: Record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(path, f"cannot read the weights record ({e}); run the weights stage again") from None
    check_record(record, path)
    return record


def check_record(record: object, where: object) -> None:
    """Raise InputError naming ``where`` (and the entry) in one line unless ``record`` has a record's shape."""
    entry = record.get("entry") if isinstance(record, dict) else None

    def bad(what: str) -> InputError:
        name = f"entry '{entry}': " if isinstance(entry, str) else ""
        again = f"`vlbias weights {entry}`" if isinstance(entry, str) else "the weights stage"
        return InputError(where, f"{name}not a weights record ({what}); run {again} again")

    if not isinstance(record, dict):
        raise bad(f"expected a mapping, got {type(record).__name__}")
    if not isinstance(entry, str) or not isinstance(record.get("sources"), dict):
        raise bad("expected entry (a name) and sources (a mapping)")
    if "request" not in record or not isinstance(record["request"], dict | None):
        raise bad("no request (what the entry asked for, as the lock keeps it)")
    for key, asked in (record["request"] or {}).items():
        if key == "adapter":
            problem = None if isinstance(asked, str | None) else f"expected a name, got {asked!r}"
        elif not isinstance(asked, dict):
            problem = f"expected a mapping, got {type(asked).__name__}"
        else:
            problem = _field_problem(asked, ())
            if problem is None and not all(isinstance(f, str) for f in asked.get("files") or []):
                problem = "files: expected file names"
        if problem:
            raise bad(f"request {key}: {problem}")
    for key, source in record["sources"].items():
        if not isinstance(source, dict) or source.get("kind") not in KINDS:
            raise bad(f"source {key}: expected a mapping with kind one of {', '.join(KINDS)}")
        if problem := _field_problem(source, _NEEDS[source["kind"]]):
            raise bad(f"source {key}: {problem}")
        files = source.get("files")
        if not isinstance(files, dict):
            raise bad(f"source {key}: files is {type(files).__name__}, expected a mapping")
        for file, v in files.items():
            if not (isinstance(v, dict) and isinstance(v.get("sha256"), str) and _SHA256.fullmatch(v["sha256"])
                    and isinstance(v.get("size"), int) and isinstance(v.get("path"), str)):
                raise bad(f"source {key}, file '{file}': expected its size, sha256 and path")
        if source["kind"] == "hub" and not isinstance(source.get("commit"), str):
            raise bad(f"source {key}: a hub source without its commit")


def _field_problem(fields: Mapping[str, Any], needs: Iterable[str]) -> str | None:
    """What is wrong with a record's source (or request) ``fields``: an unknown field, one of another
    type than _FIELDS says, or one of ``needs`` missing; None when nothing is."""
    for name, value in fields.items():
        types = _FIELDS.get(name)
        if types is None:
            return f"unknown field {name!r}"
        if not any(value is None if t is None else isinstance(value, t) and not (t is int and isinstance(value, bool))
                   for t in types):
            kinds = " or ".join("null" if t is None else t.__name__ for t in types)
            return f"{name}: expected {kinds}, got {value!r:.60}"
    missing = [n for n in needs if n not in fields]
    return f"missing {', '.join(missing)}" if missing else None


def provenance(record: Record) -> Record:
    """``record`` without what is local to one machine (file paths): the same weights give the same
    provenance anywhere (for the stores' attributes and the tables)."""
    return {**record, "sources": {
        key: {**{k: v for k, v in source.items() if k != "path"},
              "files": {f: {"size": v["size"], "sha256": v["sha256"]} for f, v in source["files"].items()}}
        for key, source in record["sources"].items()}}


def matches_lock(record: Record, locked: Mapping[str, Any] | None) -> bool:
    """Whether ``record``'s remote sources are what the lock entry ``locked`` (None: no entry) pins."""
    ours = lock_entry(record)
    if ours["request"] is None:  # nothing remote: nothing to pin (an entry left from another config is not read)
        return True
    return locked == ours


def stale_records(names: Iterable[str], lock_path: StrPath) -> list[Path]:
    """The workflow's records (``record_path``) of entries ``names`` that the lock at ``lock_path`` no
    longer pins (its entry changed, e.g. a `git pull`, or is gone), or that are not records: their
    fetch must run again."""
    lock, stale = Lock(lock_path), []
    for name in names:
        path = record_path(name)
        if not path.is_file():
            continue
        try:
            record = read_record(path)
        except InputError:
            stale.append(path)
            continue
        if not matches_lock(record, lock.entry(name)):
            stale.append(path)
    return stale


# --- the job side ------------------------------------------------------------------------------------


def localize(name: str, spec: Spec, record: Record, *, cache: StrPath, lock_path: StrPath | None = None,
             offline: bool = True) -> dict[str, Any]:
    """``spec`` of entry ``name`` made to load from the files ``record`` verifies, with no network.

    Refused (InputError, one line, naming the record's entry and the command that fetches it again):
    a record of another entry or of another request than ``spec`` (the config changed since), one
    that the lock at ``lock_path`` no longer pins (the lock changed since), a file whose size or
    sha256 is not the recorded one, a file in another place than the cache keeps it, a local folder
    that holds other files than recorded, a snapshot folder that holds other weights, and a folder
    that asks to run code of its own.

    Returns a copy of ``spec`` whose remote weights keys name the files (URLs, open_clip and
    torchvision files) or snapshot folders (hub) derived from the record's files in ``cache`` (local
    keys are left as they are), with ``fetched``: ``{key: {"request": the value as written (or the
    declared default), "revision", "commit", "config", "origin", "files": {name: sha256}}}`` for the
    adapters' provenance (read with :func:`fetched`). ``offline``: turn huggingface_hub and
    transformers offline in this process (a job's; vlbias.weights.prepare leaves them as they are).
    """
    where = f"weights record of '{name}'"
    check_record(record, where)
    again = f"run `vlbias weights {name}` (or the workflow's weights stage) to fetch it again"
    if record["entry"] != name:
        raise InputError(where, f"the record is of entry '{record['entry']}'; {again}")
    sources = remote_sources(spec, kind_of(name))
    # what the entry asks for now: its remote requests, and its local and random sources as they are
    now = _plain({"request": request(spec, sources), **{key: s for key, s in sources.items() if s["kind"] not in REMOTE}})
    then = _plain({"request": record["request"], **{key: {k: v for k, v in s.items() if k not in RESOLVED}
                                                    for key, s in record["sources"].items() if s["kind"] not in REMOTE}})
    if now != then or set(sources) != set(record["sources"]):
        changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k)) or sorted(sources)
        raise InputError(where, f"fetched for another {', '.join(changed)} than the entry now names (the config "
                                f"changed since); {again}")
    if lock_path and record["request"]:
        if not matches_lock(record, Lock(lock_path).entry(name)):
            raise InputError(where, f"not what the weights lock {lock_path} pins for the entry (the lock changed "
                                    f"since the record was fetched); {again}")
    out, got = dict(spec), {}
    for key, source in record["sources"].items():
        paths = locate(source, cache, list(source["files"]))
        if set(paths) != set(source["files"]):
            added, gone = sorted(set(paths) - set(source["files"])), sorted(set(source["files"]) - set(paths))
            raise InputError(source.get("path") or where, f"holds other files than the weights record of '{name}' "
                                                          f"lists (new: {', '.join(added) or 'none'}; gone: "
                                                          f"{', '.join(gone) or 'none'}); {again}")
        for file, want in source["files"].items():
            _verify(paths[file], want, name, file, remote=source["kind"] in REMOTE)
        if source["kind"] == "local" and Path(source["path"]).is_dir():
            refuse_custom_code(source["path"], list(paths))
        if source["kind"] not in REMOTE:
            continue
        if source["kind"] == "hub":
            folder = hub_snapshot(Path(cache) / "hub", source["repo"], source["commit"])
            _snapshot_holds_nothing_else(folder, set(paths), name)
            out[key] = str(folder)
        else:
            out[key] = str(next(iter(paths.values())))
        got[key] = {"request": source.get("repo") if source["kind"] == "hub" else
                    source.get("tag") or source.get("enum") or source.get("url"),
                    "revision": source.get("revision"), "commit": source.get("commit"),
                    "config": source.get("config"), "origin": source.get("origin"),
                    "files": {f: v["sha256"] for f, v in source["files"].items()}}
    if offline:
        go_offline()
    out["fetched"] = got
    return out


def _plain(value: object) -> Any:
    """``value`` as JSON gives it back (tuples as lists): a record's sources are compared after reading."""
    return json.loads(json.dumps(value))


def _verify(path: Path, want: Mapping[str, Any], name: str, file: str, remote: bool) -> None:
    """The file ``path`` has the recorded size and sha256 (and, for a remote source, is where the record
    says the cache keeps it)."""
    again = f"run `vlbias weights {name}`"
    if remote and Path(want["path"]) != path:
        raise InputError(want["path"], f"weights entry '{name}', file '{file}': the record names another file than "
                                       f"the cache keeps ({path}); {again}")
    if not path.is_file():
        raise InputError(path, f"weights entry '{name}', file '{file}': missing; {again}")
    if (got := sha256_file(path)) != want["sha256"] or path.stat().st_size != want["size"]:
        raise InputError(path, f"weights entry '{name}', file '{file}': sha256 {got}, recorded {want['sha256']}; "
                               f"the file changed: {again}")


def _snapshot_holds_nothing_else(folder: Path, recorded: set[str], name: str) -> None:
    """A hub snapshot folder holds no weights besides the recorded files, and no code."""
    present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    other = sorted(f for f in present - recorded if f.endswith(WEIGHT_FILES))
    if other:
        raise InputError(folder / other[0], f"weights not in the record of '{name}' beside the recorded ones: a "
                                            f"loader could read them instead; remove them or run "
                                            f"`vlbias weights --update {name}`")
    refuse_custom_code(folder, sorted(present))


def prepare(name: str, spec: Spec, *, cache: StrPath, lock_path: StrPath | None = None,
            update: bool = False) -> dict[str, Any]:
    """``spec`` of entry ``name`` (``<section>/<name>``) ready for ``vlbias.models.build`` (or
    ``vlbias.regions.build``): fetched into ``cache`` (checked against, or recorded in, the lock at
    ``lock_path``), verified and localized. The registry refuses an entry with remote weights that
    did not come through here (or the workflow's localize)."""
    record = fetch(name, spec, cache=cache, lock_path=lock_path, update=update)
    return localize(name, spec, record, cache=cache, lock_path=lock_path, offline=False)


def fetched(spec: Spec, key: str) -> dict[str, Any] | None:
    """What localize recorded for ``key`` of a localized spec (``request``, ``revision``, ``commit``,
    ``config``, ``files``), or None for a spec (or key) not localized."""
    return (spec.get("fetched") or {}).get(key)


def as_written(spec: Spec, key: str, default: Any = None) -> Any:
    """The entry's ``key`` as the config wrote it, for provenance: in a localized spec a fetched key
    names a local file or directory; its request is what was written (or the declared default)."""
    got = fetched(spec, key)
    return got["request"] if got else spec.get(key, default)


def go_offline() -> None:
    """Turn huggingface_hub and transformers offline, in this process and its children, whether or not
    they are already imported (huggingface_hub reads the variables once, at import)."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import sys

    constants: Any = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def unfetched(spec: Spec, kind: str) -> str | None:
    """The first key of ``spec`` naming remote weights (hub, URL, open_clip tag, torchvision weights)
    that did not come through ``localize`` (a spec with ``fetched`` did), or None."""
    if "fetched" in spec:
        return None
    return next((key for key, s in remote_sources(spec, kind).items() if s["kind"] in REMOTE), None)
