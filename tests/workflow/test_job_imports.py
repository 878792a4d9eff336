"""What a rule's job imports before it starts: every `script:` job is a Python process of its own, so
each module its script imports at the top costs every job of the rule (torch with transformers: about
3 s of CPU). The model jobs load their framework when they build the model; the rest never load it."""

import ast
import json
import subprocess
import sys

import pytest
from helpers import REPO

SCRIPTS = sorted((REPO / "workflow/scripts").glob("*.py"))
FRAMEWORKS = ("torch", "transformers", "open_clip", "torchvision")
# the jobs that run no permutation test nor ML-EAT: numba (the permutation kernels) stays out too
NO_STATISTICS = ("grounded_embed", "grounded_experiment", "grounded_figures", "grounded_images", "grounded_table",
                 "embed_images", "ieat_images", "ieat_output_store", "ieat_published_embeddings", "mlm_logprobs",
                 "regions", "regions_tsv", "seat_embed", "skew_embed", "skew_images", "skew_propagation",
                 "skew_queries", "skew_skipped", "skew_table", "suite_figures", "vectors_store", "weights_fetch")


def first_importers(scripts, watched):
    """{watched module: the first of ``scripts`` whose module-level imports load it}, the scripts' imports
    run one script after another in one fresh interpreter."""
    steps = [(path.stem, "\n".join(ast.unparse(node) for node in ast.parse(path.read_text()).body
                                   if isinstance(node, (ast.Import, ast.ImportFrom)))) for path in scripts]
    code = f"""
import json, sys
found = {{}}
for name, imports in {steps!r}:
    exec(imports, {{}})
    found.update({{m: name for m in {watched!r} if m in sys.modules and m not in found}})
print(json.dumps(found))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def first_loaded():
    """first_importers of every script, the jobs without statistics first, ieat_table (a statistic's
    job) next: one interpreter serves both tests below (its start and the imports cost seconds)."""
    rest = [path for path in SCRIPTS if path.stem not in NO_STATISTICS and path.stem != "ieat_table"]
    scripts = [REPO / f"workflow/scripts/{name}.py" for name in (*NO_STATISTICS, "ieat_table")] + rest
    assert sorted(scripts) == SCRIPTS  # every script, each once
    return first_importers(scripts, FRAMEWORKS + ("numba",))


def test_no_job_imports_a_model_framework_before_it_builds_a_model(first_loaded):
    assert not set(FRAMEWORKS) & set(first_loaded), first_loaded


def test_the_jobs_without_statistics_import_no_numba(first_loaded):
    # the jobs without statistics ran first: numba's first importer is the statistic's job after them
    # (the check sees numba where a statistic's job loads it)
    assert first_loaded.get("numba") == "ieat_table", first_loaded
