"""Write-then-rename, so a failed or interrupted step never leaves a half-written file."""

import os
import tempfile
from contextlib import contextmanager
from functools import cache
from pathlib import Path

PART = ".part"  # suffix of the temporary files (stale ones are removed by vlbias.workflow.recover)


@cache
def _umask():
    """The process's umask: from /proc on Linux, else by setting it and putting it straight back
    (which another thread could see for an instant, hence once per process)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


@contextmanager
def atomic_path(dest):
    """Yield a temporary path next to ``dest``; move it onto ``dest`` only if the block succeeds.

    The file gets the mode a plain ``open(dest, "w")`` would give (0666 less the umask): mkstemp
    makes it private (0600), which would hide every result from a group sharing the results folder.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=PART, dir=dest.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
