"""The HDF5 files the workflow writes and reads back (embedding, image and region stores, cache
shards), written atomically and checked when read.

The writer reserves HDF5's user block (bytes at the start of the file that the library leaves to
the application) and, once the file is complete, writes there the sha256 of everything after it.
``open_hdf5`` checks that digest once per process and version of the file (about a second per GB),
so a store whose bytes changed on disk is a named error, never a number read from it. A file without
the digest (written before stores carried one, or by another program) is read unchecked, with a
warning that says so.
"""

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.paths import StrPath

log = logging.getLogger(__name__)

USERBLOCK = 512  # HDF5's smallest user block
MAGIC = b"vlbias-sha256:"
SIGNATURE = b"\x89HDF\r\n\x1a\n"  # the HDF5 superblock's, at the start of a file without a user block
_checked: dict[Path, tuple[int, int, int]] = {}    # path -> (inode, size, mtime) of the version checked in this process


def _content_sha256(path: StrPath) -> str:
    """Hex sha256 of the file after its user block."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(USERBLOCK)
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def atomic_hdf5(dest: StrPath) -> Iterator[h5py.File]:
    """An HDF5 file open for writing at a temporary path; when the block succeeds its digest is written
    into its user block and it is moved onto ``dest`` (vlbias.io.atomic.atomic_path).

    HDF5 takes an exclusive ``flock`` of a file it creates, which the writer's own lock on its temporary
    file would refuse; the file is ours alone until it is moved, so HDF5's lock is left out.
    """
    with atomic_path(dest) as tmp:
        with h5py.File(tmp, "w", locking=False, userblock_size=USERBLOCK) as f:
            yield f
        digest = _content_sha256(tmp)
        with open(tmp, "r+b") as out:
            out.write(MAGIC + digest.encode() + b"\n")


def open_hdf5(path: StrPath) -> h5py.File:
    """``path`` open for reading (an h5py.File), after checking its content against the digest its writer
    left in its user block: InputError "<path>: damaged ..." when they differ."""
    path = Path(path)
    try:
        st = path.stat()
        version = (st.st_ino, st.st_size, st.st_mtime_ns)
        if _checked.get(path) != version:
            with open(path, "rb") as f:
                head = f.read(USERBLOCK + len(SIGNATURE))
            if head.startswith(SIGNATURE):  # HDF5 from byte 0: no user block, no digest
                log.warning("%s: carries no checksum (written before vlbias checked its stores, or by another "
                            "program): read unchecked; delete it and rerun to have it rebuilt with one", path)
            elif head[USERBLOCK:] == SIGNATURE and (  # our layout: the digest in the user block before it
                    not head.startswith(MAGIC)
                    or _content_sha256(path) != head[len(MAGIC):len(MAGIC) + 64].decode("ascii", "replace")):
                raise InputError(path, "damaged: its content differs from what was written (checksum mismatch); "
                                       "delete it and rerun to rebuild it")
            _checked[path] = version
    except OSError:
        pass  # not there, not readable: h5py says so below, as it did before
    return h5py.File(path, "r")
