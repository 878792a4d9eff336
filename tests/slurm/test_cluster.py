"""A real one-node SLURM cluster (tests/slurm/up.sh): plain jobs, Snakemake's SLURM executor with the
profile keys the workflow's profile uses, and the tiny workflow of tests/helpers/project.py through
profiles/slurm, as the README says to run it: its SEAT model fetched from a loopback Hugging Face hub
by the weights stage on this node, the hub then stopped, and the same tables as a local run, byte for
byte.

One module, so that one test worker (pytest-xdist, --dist loadfile) brings the one cluster up."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from hub import Hub
from helpers.project import SNAKEMAKE, hub_env, make_project, seat_from_hub, serve_minilm

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


def start(root, env, *args):
    """Snakemake on the project in ``root`` in the background, its output into files beside the project."""
    with open(f"{root}.out", "w") as out, open(f"{root}.err", "w") as err:
        return subprocess.Popen([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(root), *args],
                                env=env, stdout=out, stderr=err)


def finish(proc, root):
    """The CompletedProcess of :func:`start` on ``root``: waited for, its output read back."""
    proc.wait(timeout=1200)
    return subprocess.CompletedProcess(proc.args, proc.returncode, Path(f"{root}.out").read_text(),
                                       Path(f"{root}.err").read_text())


def run_cluster(root, env, cluster, *targets):
    """Snakemake on the project in ``root`` through profiles/slurm, as the README runs it."""
    return subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(root),
                           "--profile", str(REPO / "profiles/slurm"), "--max-threads", "2",
                           *cluster.snakemake_args, *targets], check=False, env=env, capture_output=True,
                          text=True, timeout=1200)


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


# every table, page and figure the tiny workflow builds
OUTPUTS = ["ieat/t1.csv", "ieat/t1.md", "ieat/t1.html", "ieat/t2.csv", "ieat/t2.md", "ieat/t2.html",
           "ieat/specificity.csv", "ieat/heatmap.png", "ieat/published.png", "seat/minilm/table.csv",
           "seat/minilm/table.md", "seat/minilm/table.html", "seat/heatmap.png"]
# and those naming where a missing image was looked for: in the project's own directory
NAMING_PATHS = ["ieat/t1.missing.tsv", "ieat/t2.missing.tsv", "images/ieat/32px-center-bicubic-pil/manifest.tsv"]


@pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                    reason="needs the Snakemake SLURM executor plugin: pip install -e '.[slurm]'")
@pytest.mark.workflow
def test_the_workflow_on_slurm_gives_the_local_tables(slurm_cluster, tmp_path):
    local, cluster = tmp_path / "local", tmp_path / "slurm"
    hub = Hub().start()
    try:
        serve_minilm(hub)
        for root in (local, cluster):
            seat_from_hub(root, make_project(root))
        # the stand-in GPU of the test cluster: the GPU stage (ieat_embed_images) asks for it; the
        # cluster has 2 cores (--max-threads) and no accounting (job status from squeue)
        envs = {local: hub_env(hub, local), cluster: hub_env(hub, cluster, slurm_cluster.env)
                | {"VLBIAS_SLURM_GPUS": "1", "VLBIAS_SLURM_PARTITION": "debug"}}
        # the weights stage (README: `snakemake --profile profiles/slurm weights`) on this node
        fetching = start(local, envs[local], "--cores", "1", "weights")
        fetched = run_cluster(cluster, envs[cluster], slurm_cluster, "weights")
        assert finish(fetching, local).returncode == 0
    finally:
        hub.stop()
    assert fetched.returncode == 0 and "weights_fetch" in fetched.stderr, fetched.stderr[-4000:]
    assert "submitted with SLURM jobid" not in fetched.stderr
    # the hub gone, nothing told to be offline: each model job loads what its record verifies; the local
    # run meanwhile (the cluster run mostly waits on the scheduler)
    local_run = start(local, envs[local], "--cores", "2")
    proc = run_cluster(cluster, envs[cluster], slurm_cluster)
    local_run = finish(local_run, local)
    assert local_run.returncode == 0, local_run.stderr[-4000:]
    logs = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in (cluster / ".snakemake/slurm_logs").rglob("*.log"))
    assert proc.returncode == 0, proc.stderr[-4000:] + logs

    # the download rules and the figures ran on this node, every other job in a SLURM job of its own
    submitted = set(re.findall(r"submitted with SLURM jobid \d+ \(log: \S*/slurm_logs/rule_(\w+)/", proc.stderr))
    assert submitted == {"ieat_embed_images", "ieat_table", "seat_embed", "seat_table", "ieat_specificity",
                         "ieat_mleat", "seat_mleat"}
    # the GPU stage asked for its GPU (VLBIAS_SLURM_GPUS)
    assert re.search(r"rule ieat_embed_images:\n(?:    .*\n)*?    resources: [^\n]*, gpu=1\n", proc.stderr)
    assert "rule seat_embed:" in proc.stderr and "weights_fetch" not in proc.stderr  # fetched before
    for path in OUTPUTS:
        assert (cluster / "results" / path).read_bytes() == (local / "results" / path).read_bytes(), path
    for path in NAMING_PATHS:
        local_text, cluster_text = ((root / "results" / path).read_text().replace(str(root), "<root>")
                                    for root in (local, cluster))
        assert cluster_text == local_text, path
