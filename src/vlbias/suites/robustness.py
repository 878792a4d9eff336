"""The robustness stage (section ``robustness``, workflow/rules/robustness.smk; docs/robustness.md): a
specification curve and random-init twins of each chosen SEAT test on each chosen model
(vlbias.robustness), as the workflow and the config check see it (vlbias.suites.stage).

Not a suite: its tables are the SEAT tests' d read along the extraction choices, and its target
``robustness`` is built only when asked for (``snakemake robustness``), never by the default target:
a curve is many times one d's cost (benchmarks/robustness.py).
"""

from vlbias.suites.seat.plan import seat_tests
from vlbias.suites.stage import Stage, unknown_names
from vlbias.weights import record_path

SUITES = ("seat",)  # the suites whose tests a curve re-runs: texts, which the template and casing axes vary


def table_path(suite, ext="csv"):
    """The summary of ``suite``'s curves: a row per test × model."""
    return f"results/robustness/{suite}.{ext}"


def specifications_path(suite):
    """Every specification's and twin's row of ``suite``'s curves."""
    return f"results/robustness/{suite}/specifications.csv"


def curves_path(suite):
    """The folder of ``suite``'s curve figures, <model>/<test>.png."""
    return f"results/robustness/{suite}/curves"


def tests(config, suite="seat"):
    """The tests ``robustness/<suite>/tests`` names: `all`, the suite's every test in its tables' order."""
    return seat_tests({"seat": {**config[suite], "tests": config["robustness"][suite]["tests"]}})


def stimuli(config, suite="seat"):
    return [f"{config[suite]['stimuli']}/{test}.yaml" for test in tests(config, suite)]


def targets(config):
    """The files of the ``robustness`` target (none without the section)."""
    section = config.get("robustness") or {}
    return [*(table_path(s, ext) for s in SUITES if s in section for ext in ("csv", "md", "html")),
            *(specifications_path(s) for s in SUITES if s in section)]


def weights(config, suite="seat"):
    """The weights records of the models whose curves are drawn."""
    return [record_path(f"{suite}/{m}") for m in config["robustness"][suite]["models"]]


def check(config, root):
    """Each chosen model a model of the suite with an adapter (one's own vectors are not re-extracted), each
    chosen test one of its stimulus files."""
    from pathlib import Path

    from vlbias.suites.plan import stimulus_ids

    problems = []
    for suite in SUITES:
        chosen = config["robustness"].get(suite)
        if not chosen:
            continue
        if not config.get(suite):
            problems.append(f"key 'robustness/{suite}': the config has no '{suite}' section")
            continue
        models = config[suite]["models"]
        unknown_names(problems, ("robustness", suite, "models"), chosen["models"], models, f"a model under '{suite}/models'")
        for i, m in enumerate(chosen["models"]):
            if m in models and models[m].get("source") == "vectors":
                problems.append(f"key 'robustness/{suite}/models/{i}': '{m}' is one's own vectors: no extraction "
                                "choice to vary")
        if chosen["tests"] != "all":
            unknown_names(problems, ("robustness", suite, "tests"), chosen["tests"],
                          stimulus_ids(Path(root) / config[suite]["stimuli"]), f"a stimulus file in {config[suite]['stimuli']}")
    return problems


# its targets are not the default target's: none here (the rule file's `robustness` builds them)
STAGE = Stage(name="robustness", rules=("robustness.smk",), check=check)
