"""The tiny workflow of tests/test_workflow.py on a real one-node SLURM cluster (tests/slurm/up.sh)
through profiles/slurm, as the README says to run it: the same tables as a local run, byte for byte."""

import importlib.util
import re
import subprocess

import pytest
from conftest import REPO
from test_workflow import SNAKEMAKE, make_project, snakemake

pytestmark = [pytest.mark.slurm, pytest.mark.workflow]

# every table, page and figure the tiny workflow builds
OUTPUTS = ["ieat/t1.csv", "ieat/t1.md", "ieat/t1.html", "ieat/t2.csv", "ieat/t2.md", "ieat/t2.html",
           "ieat/specificity.csv", "ieat/heatmap.png", "ieat/published.png", "seat/minilm/table.csv",
           "seat/minilm/table.md", "seat/minilm/table.html", "seat/heatmap.png"]
# and those naming where a missing image was looked for: in the project's own directory
NAMING_PATHS = ["ieat/t1.missing.tsv", "ieat/t2.missing.tsv", "images/ieat/32px-center-bicubic-pil/manifest.tsv"]


@pytest.mark.skipif(importlib.util.find_spec("snakemake_executor_plugin_slurm") is None,
                    reason="needs the Snakemake SLURM executor plugin: pip install -e '.[slurm]'")
def test_the_workflow_on_slurm_gives_the_local_tables(slurm_cluster, tmp_path):
    local, cluster = tmp_path / "local", tmp_path / "slurm"
    for root in (local, cluster):
        make_project(root)
    snakemake(local)
    # the stand-in GPU of the test cluster: the GPU stage (ieat_embed_images) asks for it; the
    # cluster has 2 cores (--max-threads) and no accounting (job status from squeue)
    env = {**slurm_cluster.env, "VLBIAS_SLURM_GPUS": "1", "VLBIAS_SLURM_PARTITION": "debug",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(cluster),
                           "--profile", str(REPO / "profiles/slurm"), "--max-threads", "2",
                           *slurm_cluster.snakemake_args], check=False, env=env, capture_output=True, text=True,
                          timeout=1200)
    logs = "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in (cluster / ".snakemake/slurm_logs").rglob("*.log"))
    assert proc.returncode == 0, proc.stderr[-4000:] + logs

    # the download rules ran on this node, every other job in a SLURM job of its own
    submitted = set(re.findall(r"submitted with SLURM jobid \d+ \(log: \S*/slurm_logs/rule_(\w+)/", proc.stderr))
    assert submitted >= {"ieat_embed_images", "ieat_table", "seat_embed", "seat_table", "ieat_specificity"}
    assert not submitted & {"ieat_images", "ieat_published_embeddings"}
    # the GPU stage asked for its GPU (VLBIAS_SLURM_GPUS)
    assert re.search(r"rule ieat_embed_images:\n(?:    .*\n)*?    resources: [^\n]*, gpu=1\n", proc.stderr)
    for path in OUTPUTS:
        assert (cluster / "results" / path).read_bytes() == (local / "results" / path).read_bytes(), path
    for path in NAMING_PATHS:
        local_text, cluster_text = ((root / "results" / path).read_text().replace(str(root), "<root>")
                                    for root in (local, cluster))
        assert cluster_text == local_text, path
