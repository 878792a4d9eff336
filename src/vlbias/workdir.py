"""Recovery from a run that was killed hard, so the README's command simply runs again.

Snakemake locks the files it is producing (``.snakemake/locks``) and marks unfinished outputs as
incomplete; a run killed with SIGKILL (``kill -9``, the out-of-memory killer, a lost session)
leaves both behind, and the next run refuses to start until the user types ``--unlock`` and
``--rerun-incomplete``. Our writers leave ``.<name>.<random>.part`` files (vlbias.io.atomic), and
huggingface_hub its ``blobs/<etag>.<random>.incomplete`` downloads in the weights cache.

``claim()``, called by the Snakefile in the main Snakemake process, holds a shared ``flock`` on
``.snakemake/vlbias.lock`` for the life of the process; the kernel drops it when the process
dies, however it dies. Before taking it, ``claim`` tries the lock exclusively: if that succeeds,
no run is alive in this directory, so any Snakemake lock found is stale and is removed. If another
run holds the lock, its Snakemake locks are left alone (Snakemake then refuses the second run only
if it would write the same files, as always). A ``.part`` file is removed only when it is provably
abandoned, whoever wrote it (a run of this directory, ``vlbias run``, another checkout sharing the
cache): its writer's lock on it is gone (vlbias.io.atomic.remove_if_abandoned); so is an
``.incomplete`` download when no process holds huggingface_hub's lock of its blob
(``<hub cache>/.locks/<repo folder>/<etag>.lock``, an flock held for the whole download).
Incomplete outputs are rerun by ``rerun-incomplete: true`` in ``profiles/default``, which
Snakemake reads by itself.
"""

import os

from pathlib import Path

from vlbias.io.atomic import PART, remove_if_abandoned

try:
    import fcntl
except ImportError:  # not POSIX: no flock, nothing is cleaned up
    fcntl = None

_held = []  # the open lock file of this process (kept open: closing it would release the lock)


def claim(workdir=".", folders=("results",), files=(), hub_caches=()):
    """Take this directory's run lock; if no other run holds it, remove stale Snakemake locks; remove
    abandoned ``.part`` files below ``folders`` and beside ``files`` (the weights lock: its folder is
    the config's, not searched), and abandoned downloads in the huggingface_hub caches
    ``hub_caches``, in any case. Returns the paths removed."""
    if fcntl is None or _held:
        return []
    state = Path(workdir, ".snakemake")
    state.mkdir(exist_ok=True)
    f = open(state / "vlbias.lock", "a")  # noqa: SIM115 - held open for the life of the process
    removed = []
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # another run is alive here: its locks are not stale
    else:
        removed = [p for p in sorted(state.glob("locks/*")) if p.is_file()]
        for p in removed:
            p.unlink(missing_ok=True)
    for folder in folders:
        removed += [p for p in sorted(Path(workdir, folder).rglob(f".*{PART}")) if remove_if_abandoned(p)]
    for file in map(Path, files):
        siblings = Path(workdir, file.parent).glob(f".{file.name}.*{PART}")
        removed += [p for p in sorted(siblings) if remove_if_abandoned(p)]
    for hub in (Path(workdir, h) for h in hub_caches):
        removed += [p for p in sorted(hub.glob("*/blobs/*.incomplete")) if _abandoned_download(p, hub)]
    fcntl.flock(f, fcntl.LOCK_SH)  # held while this run lives; others may share it, not clean up
    _held.append(f)
    return removed


def _abandoned_download(path, hub):
    """Remove the huggingface_hub download ``path`` (``<hub>/<repo folder>/blobs/<etag>[.<random>].incomplete``)
    if no process holds the lock huggingface_hub takes for that blob while it downloads; whether it was."""
    etag = path.name.removesuffix(".incomplete").split(".")[0]
    lock = Path(hub, ".locks", path.parent.parent.name, f"{etag}.lock")
    fd = None
    try:
        if lock.exists():  # none: no download of that blob is under way
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until removed: no download starts meanwhile
        if path.is_symlink() or not path.is_file():
            return False
        path.unlink()
        return True
    except OSError:  # a live download holds the lock, or the file is gone or not ours to remove
        return False
    finally:
        if fd is not None:
            os.close(fd)
