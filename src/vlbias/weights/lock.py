"""The weights lock (``config/weights.lock.yaml`` by default): per entry the request (adapter and the
remote source keys), each remote source's resolved commit (hub) and every file's size and sha256.
Later fetches download at these commits and refuse other content; only ``vlbias weights --update``
resolves anew. An entry that pins less than that (no commit for a hub source, a file without its
sha256, a requested source without files) is refused, naming the lock and the entry."""

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.paths import StrPath
from vlbias.safeyaml import load_yaml

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # not POSIX: concurrent writers of one lock are not supported
    fcntl = None

HEADER = """\
# The weights lock of vlbias (written by `vlbias weights` and the workflow's weights stage).
# Per model or detector entry (<section>/<name>): the request (adapter and the keys naming remote
# weights), each remote source's resolved commit and every file's size and sha256. Later fetches
# download at these commits and refuse any other content. Part of a table's provenance: commit it.
# To resolve an entry anew (another revision, a file replaced on purpose):
#     vlbias weights --update <entry>
"""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class Lock:
    """The weights lock file at ``path`` (YAML: the header comment, then ``{entry: {request, sources}}``).

    ``entry(name)`` reads one entry, checked; ``put(name, entry)`` re-reads and rewrites the file
    (atomically) under an exclusive flock on its folder, so that concurrent fetches never lose each
    other's entries.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)

    def entries(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(self.path, f"cannot read the weights lock ({e})") from None
        try:
            doc = load_yaml(text)
        except yaml.YAMLError as e:
            raise InputError(self.path, f"not valid YAML: {' '.join(str(e).split())}") from None
        doc = {} if doc is None else doc
        if not isinstance(doc, dict):
            raise InputError(self.path, "expected a mapping of weights entries (<section>/<name>: {request, sources})")
        return doc

    def entry(self, name: str) -> dict[str, Any] | None:
        """The lock's entry ``name`` (None if it has none), checked: see ``check``."""
        entry = self.entries().get(name)
        if entry is not None:
            check(entry, f"weights lock {self.path}", name)
        return entry

    def ensure(self) -> None:
        """Create the lock, empty, if there is none (the workflow's fetch jobs read it)."""
        if not self.path.exists():
            with self.locked():
                if not self.path.exists():
                    self._write({})

    @contextmanager
    def locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        fd = os.open(self.path.parent, os.O_RDONLY)  # the folder: the file itself is replaced on write
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def put(self, name: str, entry: dict[str, Any]) -> None:
        with self.locked():
            doc = self.entries()
            doc[name] = entry
            self._write(doc)

    def _write(self, doc: dict[str, Any]) -> None:
        body = yaml.safe_dump(dict(sorted(doc.items())), sort_keys=False, width=110) if doc else ""
        with atomic_path(self.path) as tmp:
            Path(tmp).write_text(HEADER + body, encoding="utf-8")


def check(entry: object, where: str, name: str) -> None:
    """Raise InputError (naming ``where``, the entry and what is wrong, in one line) unless ``entry``
    is a lock entry that pins every remote source it requests: ``request`` a mapping with the adapter
    and each source's request, ``sources`` one per requested key with its files (each a size and a
    sha256) and, for a hub repository, its commit."""

    def bad(what: str) -> InputError:
        return InputError(where, f"entry '{name}': {what}; fix it or run `vlbias weights --update {name}`")

    if not isinstance(entry, dict):
        raise bad(f"expected a mapping with request and sources, got {type(entry).__name__}")
    req, sources = entry.get("request"), entry.get("sources")
    if not isinstance(req, dict) or not req.get("adapter"):
        raise bad("no request (a mapping naming the adapter and each remote source)")
    if not isinstance(sources, dict):
        raise bad("no sources (a mapping of each remote source's commit and files)")
    for key, asked in req.items():
        if key == "adapter":
            continue
        if not isinstance(asked, dict):
            raise bad(f"request {key}: expected a mapping")
        pinned = sources.get(key)
        if not isinstance(pinned, dict):
            raise bad(f"source {key} is requested but not pinned (no commit or files)")
        if "repo" in asked and not (isinstance(pinned.get("commit"), str) and _COMMIT.fullmatch(pinned["commit"])):
            raise bad(f"source {key}: no commit (40 hex digits) pins the repository {asked['repo']}")
        files = pinned.get("files")
        if not isinstance(files, dict) or not files:
            raise bad(f"source {key}: no files pinned (a mapping of file names to size and sha256)")
        for file, pin in files.items():
            if not (isinstance(pin, dict) and isinstance(pin.get("sha256"), str) and _SHA256.fullmatch(pin["sha256"])
                    and isinstance(pin.get("size"), int) and not isinstance(pin["size"], bool) and pin["size"] >= 0):
                raise bad(f"source {key}, file '{file}': expected its size and sha256 (64 hex digits)")
    extra = sorted(set(sources) - set(req))
    if extra:
        raise bad(f"sources {', '.join(extra)} pinned but not requested")
