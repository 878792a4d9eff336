"""The one-node SLURM cluster the tests of this folder run on (tests/slurm/up.sh)."""

import os
import select
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node SLURM cluster (tests/slurm/up.sh): ``env`` is os.environ with SLURM_CONF
    set, for srun, sbatch and snakemake; ``snakemake_args`` what the SLURM executor plugin needs on
    this cluster (no accounting: job status from squeue) and the shortest wait between its checks,
    1 s: after a check that finds no job ended it waits 10 s longer than the last time (plugin 2.8),
    so a job of a few seconds is seen 12 s after its submission (14 s with 2)."""

    dir: Path
    env: dict
    snakemake_args: tuple = ("--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1")


@pytest.fixture(scope="session")
def slurm_cluster():
    """Bring up a one-node SLURM cluster for the session and stop its daemons afterwards, even when
    pytest is killed (tests/slurm/hold.sh holds it while the pipe to it is open: the kernel closes
    that pipe however this process ends); skip with the reason where it cannot be had (not root,
    packages not installable, daemons failing)."""
    # not under pytest's base temp: that is private to its owner, and munged runs as user munge
    root = Path(tempfile.mkdtemp(prefix="vlbias-slurm-"))
    hold = subprocess.Popen([REPO / "tests/slurm/hold.sh", root], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    status = None
    try:
        if select.select([hold.stdout], [], [], 900)[0]:
            status = hold.stdout.readline().strip()
        if status is None:
            pytest.skip("no SLURM cluster: tests/slurm/up.sh took more than 15 minutes")
        if status != "0":
            err = (root / "up.err").read_text()
            reason = " ".join(line for line in err.splitlines() if line.startswith("up.sh:"))
            pytest.skip(f"no SLURM cluster here: {reason or err.strip()[-500:]}")
        yield SlurmCluster(root, {**os.environ, "SLURM_CONF": str(root / "slurm.conf")})
    finally:
        hold.stdin.close()  # hold.sh stops the daemons and removes root (after up.sh, if that still runs)
        hold.stdout.close()
        if status is not None:
            hold.wait(timeout=120)
