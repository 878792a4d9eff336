"""Recovery from a run that was killed hard, so the README's command simply runs again.

Snakemake locks the files it is producing (``.snakemake/locks``) and marks unfinished outputs as
incomplete; a run killed with SIGKILL (``kill -9``, the out-of-memory killer, a lost session)
leaves both behind, and the next run refuses to start until the user types ``--unlock`` and
``--rerun-incomplete``. Our writers leave ``.<name>.<random>.part`` files (vlbias.io.atomic).

``claim()``, called by the Snakefile in the main Snakemake process, holds a shared ``flock`` on
``.snakemake/vlbias.lock`` for the life of the process; the kernel drops it when the process
dies, however it dies. Before taking it, ``claim`` tries the lock exclusively: if that succeeds,
no run is alive in this directory, so any Snakemake lock found is stale and is removed. If another
run holds the lock, its Snakemake locks are left alone (Snakemake then refuses the second run only
if it would write the same files, as always). A ``.part`` file is removed only when it is provably
abandoned, whoever wrote it (a run of this directory, ``vlbias run``, another checkout sharing the
cache): its writer's lock on it is gone (vlbias.io.atomic.remove_if_abandoned). Incomplete outputs
are rerun by ``rerun-incomplete: true`` in ``profiles/default``, which Snakemake reads by itself.
"""

from pathlib import Path

from vlbias.io.atomic import PART, remove_if_abandoned

try:
    import fcntl
except ImportError:  # not POSIX: no flock, nothing is cleaned up
    fcntl = None

_held = []  # the open lock file of this process (kept open: closing it would release the lock)


def claim(workdir=".", folders=("results",)):
    """Take this directory's run lock; if no other run holds it, remove stale Snakemake locks; remove
    abandoned ``.part`` files below ``folders`` in any case. Returns the paths removed."""
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
    fcntl.flock(f, fcntl.LOCK_SH)  # held while this run lives; others may share it, not clean up
    _held.append(f)
    return removed
