"""The project's own files agree with each other: the jobs' conda environment lists pyproject.toml's
dependencies, CITATION.cff names this version and license (each rule's `conda:` directive is
`snakemake --lint`'s to check, in CI)."""

import re
import tomllib

import yaml
from helpers import REPO


def pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_conda_environment_lists_the_package_dependencies():
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == pyproject()["dependencies"]
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert pyproject()["requires-python"] == f">={python.removeprefix('python=')}"


def test_the_citation_names_this_version_and_license_and_the_three_papers():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert (cff["version"], cff["license"]) == (pyproject()["version"], pyproject()["license"])
    assert [r["authors"][0]["family-names"] for r in cff["references"]] == ["Ross", "Steed", "Srinivasan"]
    assert "MIT License" in (REPO / "LICENSE").read_text() and "the vlbias developers" in (REPO / "LICENSE").read_text()


def test_no_rule_file_spells_a_store_path_the_library_builds():
    # vlbias.suites.plan.embedding_path (the command line's), and the grounded suite's own
    for path in (REPO / "workflow/rules").glob("*.smk"):
        assert "results/embeddings/" not in path.read_text(), path.name


def test_every_rule_runs_in_the_one_environment():
    # docs/development.md says why one: each job is a script calling the library, whose pins are pyproject's
    for path in (REPO / "workflow/rules").glob("*.smk"):
        for rule in re.split(r"^(?=rule \w+:)", path.read_text(), flags=re.MULTILINE)[1:]:
            if re.search(r"^    (script|shell|run):", rule, re.MULTILINE):  # a job (not an aggregate)
                assert '    conda:\n        "../../environment.yml"\n' in rule, f"{path.name}: {rule.split(':')[0]}"
