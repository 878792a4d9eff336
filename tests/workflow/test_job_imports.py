"""What a rule's job imports before it starts: every `script:` job is a Python process of its own, so
each module its script imports at the top costs every job of the rule (torch with transformers: about
3 s of CPU). The model jobs load their framework when they build the model, the statistics' jobs numba
(the permutation kernels) when they run their first test, the figures' jobs matplotlib; the rest never
load them; OpenCV loads where an image is decoded with it."""

import ast
import json
import subprocess
import sys

import pytest
from helpers import REPO

SCRIPTS = sorted((REPO / "workflow/scripts").glob("*.py"))
FRAMEWORKS = ("torch", "transformers", "open_clip", "torchvision")
# the jobs that draw a figure: matplotlib is theirs alone (a table job's start stays light)
FIGURES = ("grounded_figures", "grounded_mleat", "ieat_sweep", "mleat_table", "mlm_report", "robustness",
           "skew_propagation", "skew_table", "suite_figures")
# a last step that loads the permutation kernels: where numba's first importer must be
KERNELS = ("the kernels", "from vlbias.stats import _kernels")


def first_importers(steps, watched):
    """{watched module: the first of ``steps`` ((name, Python code) each) whose code loads it}, the steps
    run one after another in one fresh interpreter."""
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


def module_imports(path):
    """The module-level imports of the script ``path``: what its job runs before its first line of work."""
    return "\n".join(ast.unparse(node) for node in ast.parse(path.read_text()).body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


@pytest.fixture(scope="module")
def first_loaded():
    """first_importers of every script's imports, the jobs without figures first, then the figures' jobs, then
    the permutation kernels: one interpreter serves the tests below (its start and the imports cost seconds)."""
    scripts = sorted(SCRIPTS, key=lambda path: path.stem in FIGURES)
    assert {path.stem for path in SCRIPTS} >= set(FIGURES)
    return first_importers([(path.stem, module_imports(path)) for path in scripts] + [KERNELS],
                           FRAMEWORKS + ("numba", "matplotlib", "cv2"))


def test_no_job_imports_a_model_framework_before_it_builds_a_model(first_loaded):
    assert not set(FRAMEWORKS) & set(first_loaded), first_loaded


def test_no_job_imports_numba_before_its_first_permutation_test(first_loaded):
    # the kernels, after every script's imports, are numba's first importer (the check sees numba where it loads)
    assert first_loaded.get("numba") == KERNELS[0], first_loaded


def test_no_job_imports_opencv_before_it_decodes_an_image(first_loaded):
    assert "cv2" not in first_loaded, first_loaded


def test_the_jobs_without_figures_import_no_matplotlib(first_loaded):
    # they ran first: matplotlib's first importer is a figures' job (the check sees matplotlib where one loads it)
    assert first_loaded.get("matplotlib") in FIGURES, first_loaded
