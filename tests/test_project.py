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


# a name a rule file binds at its top level (or in a top-level `if` block): an import, an assignment, a def
BINDING = re.compile(r"(?:from \S+ import (?P<names>.+)|import (?P<module>[\w.]+)(?: as (?P<alias>\w+))?|"
                     r"(?P<name>[A-Za-z_]\w*)\s*=(?!=)|def (?P<function>\w+)\()")


def top_level_names(text):
    """The names a Snakefile's Python binds where every rule file's code runs: the workflow's one namespace."""
    names, block, lines, i = set(), "", text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if indent == 0 and line.strip():
            block = line
        m = BINDING.match(line.strip()) if indent == 0 or (indent == 4 and block.startswith("if ")) else None
        if m and m["names"] is not None:
            imported = m["names"]
            while imported.lstrip().startswith("(") and ")" not in imported:  # `from x import (` over lines
                i += 1
                imported += lines[i]
            names |= {item.split(" as ")[-1].strip() for item in imported.strip("() ").split(",") if item.strip()}
        elif m and m["module"]:
            names.add(m["alias"] or m["module"].split(".")[0])
        elif m:
            names.add(m["name"] or m["function"])
        i += 1
    return names


def test_no_two_rule_files_bind_one_name():
    """Every rule file runs in the workflow's one namespace: a name a second file binds replaces the first's
    for the first file's input functions too (skew.smk's `image_store` once sent iEAT's jobs to the skew
    sets' stores; the grounded rules' `embedding_path` did the same to iEAT's and SEAT's)."""
    files = {f.name: top_level_names(f.read_text()) for f in sorted((REPO / "workflow/rules").glob("*.smk"))}
    assert {"image_store", "IEAT_PLAN", "SKEW", "plan", "registry"} <= set().union(*files.values())  # it reads them
    twice = {n: [f for f, names in files.items() if n in names] for names in files.values() for n in names}
    assert {n: fs for n, fs in twice.items() if len(fs) > 1} == {}
