"""The tests' own layout (CONTRIBUTING.md, "Tests"): a folder per package of src/vlbias, and no test
module imported by another module; what several modules share lives in tests/helpers/ (plain modules)
or in a conftest.py (fixtures), so a test module can move, or run alone, without breaking another."""

import ast
import re
from pathlib import Path

import pytest
from helpers import REPO

TESTS = REPO / "tests"
SRC = REPO / "src" / "vlbias"
# folders of tests that mirror no package: the real Snakefile on tiny projects, a SLURM cluster, the helpers
NOT_PACKAGES = {"workflow", "slurm", "helpers"}


def python_files(*roots):
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(path):
    """(line, module) of every import in ``path``, at module level or inside a function alike."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def bad_imports(path, root=REPO):
    """The imports of ``path`` that name a test module or a conftest.py, as "file:line module"."""
    for line, module in imported_modules(path):
        last = module.rsplit(".", 1)[-1]
        if last == "conftest" or last.startswith("test_"):
            yield f"{path.relative_to(root)}:{line} {module}"


def test_no_module_imports_a_test_module_or_a_conftest():
    # the benchmarks too: they import the tiny projects from tests/helpers/
    found = [bad for path in python_files(TESTS, REPO / "benchmarks") for bad in bad_imports(path)]
    assert not found, "import from tests/helpers/ (or take a fixture) instead of:\n" + "\n".join(found)


@pytest.mark.parametrize("source,found", [
    ("from test_workflow import make_project\n", ["x.py:1 test_workflow"]),
    ("import numpy\n\ndef f():\n    from conftest import REPO\n", ["x.py:4 conftest"]),
    ("import test_stats as s\n", ["x.py:1 test_stats"]),
    ("from tests.models.test_vlbert import E2E\n", ["x.py:1 tests.models.test_vlbert"]),
    ("from helpers.project import make_project\nfrom vlbias.stats import test_statistic\n", []),
])
def test_the_check_finds_every_kind_of_import(tmp_path, source, found):
    (tmp_path / "x.py").write_text(source)
    assert list(bad_imports(tmp_path / "x.py", tmp_path)) == found


def test_each_folder_mirrors_a_package_and_each_name_is_unique():
    folders = {p.parent.relative_to(TESTS) for p in TESTS.rglob("test_*.py")} - {Path(".")}
    strays = [f.as_posix() for f in folders
              if f.parts[0] not in NOT_PACKAGES and not (SRC / f / "__init__.py").is_file()]
    assert not strays, f"test folders that mirror no package of src/vlbias: {strays}"
    # no __init__.py in tests/ (pytest's default import mode): a module's name is its file name
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_a_module_that_runs_snakemake_is_under_tests_workflow_or_slurm():
    # the real Snakefile's tests in one place (the `workflow` marker's modules, the slow ones)
    runs = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")
            if re.search(r"^\s*from helpers\.project import [^\n]*\bsnakemake\b", p.read_text(), re.MULTILINE)]
    assert runs and [p for p in runs if p.split("/")[0] not in ("workflow", "slurm")] == []
