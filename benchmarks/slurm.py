"""Benchmark: the tiny workflow of tests/helpers/project.py locally and on a one-node SLURM cluster.

Brings up the cluster of the tests (tests/slurm/up.sh: root, Debian's slurm packages, state under a
temporary folder), builds the tiny project twice from scratch (`make_project`: tiny images, a tiny
random open_clip model, published embeddings, two SEAT tests on MiniLM), once with
`snakemake --cores N` and once with `--profile profiles/slurm` (the test cluster's status options,
`--max-threads` N), and stops the daemons. Prints the wall seconds of each and the jobs run (local
rules on this node, SLURM jobs), and whether the tables are the same bytes.

    python benchmarks/slurm.py [--cores 2] [--gpus 1]

Needs the executor plugin (pip install -e '.[slurm]').
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers.project import SNAKEMAKE, make_project  # noqa: E402  (the tests' tiny project, from sys.path above)

TABLES = ["ieat/t1.csv", "ieat/t2.csv", "ieat/specificity.csv", "seat/minilm/table.csv"]


def build(root, env, *args):
    """(wall s, stderr) of a clean build of the tiny project in ``root``."""
    t = time.perf_counter()
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(root), *args],
                          check=False, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{proc.stderr[-5000:]}")
    return wall, proc.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cores", default="2")
    ap.add_argument("--gpus", default="1", help="VLBIAS_SLURM_GPUS (the test cluster has one stand-in GPU)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vlbias-bench-slurm-"))
    cluster_dir = Path(tempfile.mkdtemp(prefix="vlbias-slurm-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    up = subprocess.run([REPO / "tests/slurm/up.sh", cluster_dir], check=False, capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(f"no SLURM cluster: {up.stderr[-2000:]}")
    try:
        for name in ("local", "slurm"):
            make_project(work / name)
        local, _ = build(work / "local", env, "--cores", args.cores)
        slurm_env = {**env, "SLURM_CONF": str(cluster_dir / "slurm.conf"), "VLBIAS_SLURM_GPUS": args.gpus}
        slurm, log = build(work / "slurm", slurm_env, "--profile", str(REPO / "profiles/slurm"),
                           "--max-threads", args.cores, "--slurm-status-command", "squeue",
                           "--slurm-init-seconds-before-status-checks", "1")
    finally:
        subprocess.run([REPO / "tests/slurm/down.sh", cluster_dir], check=False, capture_output=True)
    submitted = len(re.findall(r"submitted with SLURM jobid", log))
    local_jobs = len(re.findall(r"^localrule (?!all:)\w+:", log, re.MULTILINE))
    same = all((work / "local/results" / t).read_bytes() == (work / "slurm/results" / t).read_bytes() for t in TABLES)
    print(f"work {work}, --cores/--max-threads {args.cores}")
    print(f"local  {local:7.1f} s")
    print(f"SLURM  {slurm:7.1f} s  ({submitted} SLURM jobs, {local_jobs} local rules)")
    print(f"tables the same bytes: {same}")


if __name__ == "__main__":
    main()
