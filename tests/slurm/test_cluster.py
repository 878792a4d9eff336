"""A real one-node SLURM cluster (tests/slurm/up.sh): plain jobs, and Snakemake's SLURM executor
with the profile keys the workflow's profile uses."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slurm


def run(cmd, cluster, **kw):
    return subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=120, **kw)


def test_srun_and_sbatch(slurm_cluster, tmp_path):
    out = run(["srun", "-N1", "hostname"], slurm_cluster)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    job = run(["sbatch", "--wait", "--parsable", "-o", str(tmp_path / "%j.out"),
               "--wrap", "echo hi from $SLURM_JOB_ID"], slurm_cluster)
    assert job.returncode == 0, job.stderr
    jid = job.stdout.strip()
    assert (tmp_path / f"{jid}.out").read_text().strip() == f"hi from {jid}"
    # the node's one stand-in GPU is allocated to a job that asks for it
    gpu = run(["srun", "--gpus=1", "printenv", "CUDA_VISIBLE_DEVICES"], slurm_cluster)
    assert gpu.returncode == 0 and gpu.stdout.strip() == "0", gpu.stderr


def words(path):
    return dict(w.split("=", 1) for w in path.read_text().split())


@pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                    reason="needs the Snakemake SLURM executor plugin: pip install '.[slurm]'")
def test_snakemake_profile_keys(slurm_cluster, tmp_path):
    shutil.copytree(HERE / "probe", tmp_path, dirs_exist_ok=True)
    env = {**slurm_cluster.env, "VLBIAS_SLURM_PARTITION": "debug", "VLBIAS_SLURM_GPUS": "1"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profile", *slurm_cluster.snakemake_args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    logs = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in (tmp_path / ".snakemake/slurm_logs").rglob("*.log"))
    assert proc.returncode == 0, proc.stderr[-3000:] + logs

    assert words(tmp_path / "download.txt") == {"job": "none"}  # a local rule never reaches SLURM
    assert words(tmp_path / "gpu.txt")["gpus"] == "0"  # gpu: 1 from VLBIAS_SLURM_GPUS
    retry = words(tmp_path / "retry.txt")
    assert retry["mem"] == "2000" and retry["runtime"] == "20"  # the second attempt: 2 x mem_mb, runtime
    assert "Trying to restart job" in proc.stderr
    threads = words(tmp_path / "threads.txt")
    assert threads == {"job": threads["job"], "cpus": "2", "threads": "2", "partition": "debug"}
    small = [words(tmp_path / f"small/{i}.txt")["job"] for i in range(4)]
    assert len(set(small)) == 2  # four jobs in two SLURM jobs
    jobs = {words(tmp_path / f)["job"] for f in ("gpu.txt", "retry.txt", "threads.txt")} | set(small)
    assert all(re.fullmatch(r"\d+", j) for j in jobs) and len(jobs) == 5
