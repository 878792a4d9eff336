"""A real one-node SLURM cluster (tests/slurm/up.sh): plain jobs, Snakemake's SLURM executor with the
profile keys the workflow's profile uses, and the tiny workflow of tests/helpers/project.py through
profiles/slurm, as the README says to run it: its SEAT model fetched from a loopback Hugging Face hub
by the weights stage on this node, the hub then stopped, and the same tables as a local run, byte for
byte.

One module, so that one test worker (pytest-xdist, --dist loadfile) brings the one cluster up. Its
Snakemake runs mostly wait on the scheduler: the probe workflow of the profile keys runs in the
background from the module's start, beside the other tests, and its test reads what it left."""

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import REPO
from hub import Hub
from helpers.project import SNAKEMAKE, hub_env, make_project, seat_from_hub, serve_minilm
from helpers.zoo import GROUP_SIZE
from helpers.zoo import TARGETS as ZOO_TARGETS
from helpers.zoo import make_zoo

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slurm
needs_plugin = pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                                  reason="needs the Snakemake SLURM executor plugin: pip install '.[slurm]'")


def run(cmd, cluster, **kw):
    return subprocess.run(cmd, env=cluster.env, capture_output=True, text=True, timeout=120, **kw)


def ended(jid, cluster, timeout=120):
    """The JobState and ExitCode of SLURM job ``jid`` once it has ended, polled every 0.1 s (`sbatch
    --wait` polls at 2 s, then 8 s later)."""
    deadline = time.monotonic() + timeout
    while True:
        show = run(["scontrol", "show", "job", "-o", jid], cluster)
        state = dict(w.split("=", 1) for w in show.stdout.split() if w.startswith(("JobState=", "ExitCode=")))
        if state.get("JobState") not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state
        assert time.monotonic() < deadline, f"job {jid} still {state} after {timeout} s"
        time.sleep(0.1)


def test_srun_and_sbatch(slurm_cluster, tmp_path):
    out = run(["srun", "-N1", "hostname"], slurm_cluster)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    job = run(["sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), "--wrap", "echo hi from $SLURM_JOB_ID"],
              slurm_cluster)
    assert job.returncode == 0, job.stderr
    jid = job.stdout.strip()
    assert ended(jid, slurm_cluster) == {"JobState": "COMPLETED", "ExitCode": "0:0"}
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


@pytest.fixture(scope="module", autouse=True)
def probe(slurm_cluster, tmp_path_factory, request):
    """The probe workflow (tests/slurm/probe) through its profile on the cluster, started with the module:
    it mostly waits on the scheduler, so it runs beside the other tests; test_snakemake_profile_keys
    waits for it and reads what it left: (folder, process). None where that test does not run."""
    if (importlib.util.find_spec("snakemake_executor_plugin_slurm") is None
            or not any(item.name == "test_snakemake_profile_keys" for item in request.session.items)):
        yield None
        return
    root = tmp_path_factory.mktemp("probe")
    shutil.copytree(HERE / "probe", root, dirs_exist_ok=True)
    env = {**slurm_cluster.env, "VLBIAS_SLURM_PARTITION": "debug", "VLBIAS_SLURM_GPUS": "1"}
    with open(root / "snakemake.out", "w") as out, open(root / "snakemake.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", "profile",
                                 *slurm_cluster.snakemake_args], cwd=root, env=env, stdout=out, stderr=err)
    try:
        yield root, proc
    finally:
        proc.wait(timeout=900)  # its SLURM jobs end before the cluster does


# every table, page and figure the tiny workflow builds: iEAT's, whose local run is the session's local
# build of the same iEAT project (fixture built_project), and SEAT's, whose model comes from the hub here
IEAT_OUTPUTS = ["ieat/t1.csv", "ieat/t1.md", "ieat/t1.html", "ieat/t2.csv", "ieat/t2.md", "ieat/t2.html",
                "ieat/specificity.csv", "ieat/heatmap.png", "ieat/published.png"]
SEAT_OUTPUTS = ["seat/minilm/table.csv", "seat/minilm/table.md", "seat/minilm/table.html", "seat/heatmap.png"]
# and those naming where a missing image was looked for: in the project's own directory
NAMING_PATHS = ["ieat/t1.missing.tsv", "ieat/t2.missing.tsv", "images/ieat/32px-center-bicubic-pil/manifest.tsv"]


@needs_plugin
@pytest.mark.workflow
def test_the_workflow_on_slurm_gives_the_local_tables(slurm_cluster, tmp_path, request):
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
    # SEAT run meanwhile (the cluster run mostly waits on the scheduler)
    local_run = start(local, envs[local], "--cores", "2", *(f"results/{path}" for path in SEAT_OUTPUTS))
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
    # the iEAT tables of a local run: the session's build of make_project's project, asked for last (by
    # then another module has mostly built it); the same iEAT config, stimuli and manifests (their shas
    # name the mirror's files) as the cluster's
    built = request.getfixturevalue("built_project")
    config = [yaml.safe_load((root / "config/config.yaml").read_text())["ieat"] for root in (built, cluster)]
    assert config[0] == config[1]
    for path in sorted(p.relative_to(cluster) for p in (cluster / "resources").rglob("*") if p.is_file()):
        assert (built / path).read_bytes() == (cluster / path).read_bytes(), path
    for root, paths in ((built, IEAT_OUTPUTS), (local, SEAT_OUTPUTS)):
        for path in paths:
            assert (cluster / "results" / path).read_bytes() == (root / "results" / path).read_bytes(), path
    for path in NAMING_PATHS:
        local_text, cluster_text = ((root / "results" / path).read_text().replace(str(root), "<root>")
                                    for root in (built, cluster))
        assert cluster_text == local_text, path


@needs_plugin
def test_snakemake_profile_keys(probe):
    root, proc = probe
    proc.wait(timeout=900)
    stderr = (root / "snakemake.err").read_text()
    logs = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in (root / ".snakemake/slurm_logs").rglob("*.log"))
    assert proc.returncode == 0, stderr[-3000:] + logs

    assert words(root / "download.txt") == {"job": "none"}  # a local rule never reaches SLURM
    # gpu: 1 from VLBIAS_SLURM_GPUS; set-threads: 2 for the same rule
    gpu = words(root / "gpu.txt")
    assert gpu == {"job": gpu["job"], "gpus": "0", "cpus": "2", "threads": "2", "partition": "debug"}
    retry = words(root / "retry.txt")
    assert retry["mem"] == "2000" and retry["runtime"] == "20"  # the second attempt: 2 x mem_mb, runtime
    assert "Trying to restart job" in stderr
    small = [words(root / f"small/{i}.txt")["job"] for i in range(4)]
    assert len(set(small)) == 2  # four jobs in two SLURM jobs
    jobs = {words(root / f)["job"] for f in ("gpu.txt", "retry.txt")} | set(small)
    assert all(re.fullmatch(r"\d+", j) for j in jobs) and len(jobs) == 4


HELD = """
import time


def test_held(slurm_cluster):
    print(slurm_cluster.dir, flush=True)
    time.sleep(300)
"""


def test_a_killed_pytests_cluster_ends_with_it(tmp_path):
    """A pytest killed outright with its process group (as `timeout -s KILL` or a closed terminal would:
    no teardown runs) leaves no daemon behind: the fixture's cluster stops when its pytest ends, however
    it ends (tests/slurm/hold.sh)."""
    (tmp_path / "test_held.py").write_text(HELD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), str(REPO / "src")])}
    # the fixture as this folder's conftest gives it, to a pytest of its own in another folder
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-s", "-q",
                              str(tmp_path / "test_held.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        root = Path(child.stdout.readline().strip())
        assert (root / "daemons.pid").is_file(), child.stdout.read()
        pids = [int(line.split()[1]) for line in (root / "daemons.pid").read_text().splitlines()]
        assert len(pids) == 3 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in pids) or root.exists():
        assert time.monotonic() < deadline, f"daemons {pids} or {root} still there 60 s after their pytest was killed"
        time.sleep(0.2)


@needs_plugin
@pytest.mark.workflow
def test_the_tiny_zoo_submits_no_more_than_the_documented_jobs(slurm_cluster, tmp_path):
    # docs/zoo.md: ceil(models / group-components) embedding jobs, then eats, predictors and performance;
    # the weights, the metadata and the iEAT images on this node
    config = make_zoo(tmp_path)
    proc = run_cluster(tmp_path, {**slurm_cluster.env, "VLBIAS_SLURM_PARTITION": "debug"}, slurm_cluster,
                       *ZOO_TARGETS, "--group-components", f"zoo-embed={GROUP_SIZE}")  # last: it takes several
    assert proc.returncode == 0, proc.stderr[-4000:]
    submitted = re.findall(r"submitted with SLURM jobid \d+ \(log: \S*/slurm_logs/(\w+)", proc.stderr)
    groups = -(-len(config["zoo"]["models"]) // GROUP_SIZE)
    assert groups == 2 and len(submitted) <= groups + 3, submitted
    assert (tmp_path / "results/zoo/performance.csv").is_file()
