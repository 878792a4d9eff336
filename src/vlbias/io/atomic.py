"""Write-then-rename, so a failed or interrupted step never leaves a half-written file.

A writer holds a shared ``flock`` on its temporary file for as long as it writes; the kernel drops
it when the writer dies, however it dies. So a temporary file is provably abandoned when an
exclusive lock on it can be taken (``remove_if_abandoned``): a run started beside a live one (a
``snakemake -n``, a second checkout sharing the cache) never removes what the live one is writing.
"""

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType

from vlbias.io.paths import StrPath

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:  # not POSIX: no flock, and no temporary file is ever called abandoned
    fcntl = None

PART = ".part"  # suffix of the temporary files (stale ones are removed by vlbias.workdir.claim)
# ".<name>.<8 of mkstemp's random characters>.part": only files of this name are ever removed
PART_NAME = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(PART))


@cache
def _umask() -> int:
    """The process's umask: from /proc on Linux, else by setting it and putting it straight back
    (which another thread could see for an instant, hence once per process)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def _names(fd: int, path: StrPath) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _locked_temporary(dest: Path) -> tuple[int, str]:
    """(fd holding a shared flock, path) of a new temporary file next to ``dest``."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=PART, dir=dest.parent)
        if fcntl is None:
            return fd, tmp
        fcntl.flock(fd, fcntl.LOCK_SH)
        if _names(fd, tmp):  # not removed by a recovery between mkstemp and the lock
            return fd, tmp
        os.close(fd)


@contextmanager
def atomic_path(dest: StrPath) -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; move it onto ``dest`` only if the block succeeds.

    The file gets the mode a plain ``open(dest, "w")`` would give (0666 less the umask): mkstemp
    makes it private (0600), which would hide every result from a group sharing the results folder.
    The writer's lock on it (shared, so HDF5's own shared locks of readers never conflict) is
    released only once the file is in place or removed.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _locked_temporary(dest)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


def remove_if_abandoned(path: StrPath) -> bool:
    """Remove the temporary file ``path`` if it has our name and no writer holds it; whether it was removed."""
    path = Path(path)
    if fcntl is None or not PART_NAME.fullmatch(path.name):
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # gone meanwhile (moved into place), a link, not readable: not ours to judge
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # a live writer holds it
        os.close(fd)
        return False
    try:
        if not _names(fd, path):  # moved into place while we opened it
            return False
        path.unlink()
        return True
    except OSError:  # e.g. a folder we may not write to
        return False
    finally:
        os.close(fd)
