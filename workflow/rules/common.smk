# Names the rules share, bound to the planning in Python (vlbias.suites.plan, vlbias.suites.ieat.plan;
# unit-tested in tests/test_plan.py), the wildcard constraints, and the functions the rule files call
# (the default target, the report's mode).

import sys
from functools import partial
from pathlib import Path

from vlbias.io.fetch import read_manifest
from vlbias.suites import plan
from vlbias.suites.ieat.plan import IeatPlan
from vlbias.suites.seat import plan as seat_plan
from vlbias.suites.plan import alternatives, offline, offline_line, provenance, vector_files
from vlbias.weights import record_path

IEAT = config["ieat"]
SEAT = config["seat"]
STATS = config["stats"]
IEAT_PLAN = IeatPlan(config)
IEAT_TABLES = IEAT_PLAN.tables
IEAT_MODELS = IEAT_PLAN.models  # ieat/models and the sweep's entries
SWEEP_MODELS = IEAT_PLAN.sweep_models
TABLE_MODELS = IEAT_PLAN.table_models  # the names tables use: {name: (entry, output or None)}
PUBLISHED_MODELS = IEAT_PLAN.published_models
IMAGE_MODELS = IEAT_PLAN.image_models
VECTOR_MODELS = IEAT_PLAN.vector_models
SEVERAL_OUTPUTS = IEAT_PLAN.several_outputs  # image models giving several vectors per image: a store each
SEAT_VECTOR_MODELS = [m for m, spec in SEAT["models"].items() if spec["source"] == "vectors"]
DEFAULT_STORE = IEAT_PLAN.default_store
IMAGE_STORES = IEAT_PLAN.image_stores_settings  # every image store a model reads, and the default one

seat_tests = partial(seat_plan.seat_tests, config)
source = partial(plan.source, config)
mirror = partial(plan.mirror, config)
stats_params = partial(plan.stats_params, config)
image_store = IEAT_PLAN.image_store
image_stores = IEAT_PLAN.image_stores
paper_name = IEAT_PLAN.paper_name
sweep_tests = IEAT_PLAN.sweep_tests
model_tests = IEAT_PLAN.model_tests
text_stimuli = IEAT_PLAN.text_stimuli
checked_stimulus = IEAT_PLAN.checked_stimulus
table_stimuli = IEAT_PLAN.table_stimuli


wildcard_constraints:
    table=alternatives(list(IEAT_TABLES)),
    model=alternatives(sorted(set(IEAT_MODELS) | set(TABLE_MODELS) | set(SEAT["models"]))),


# --- the default target ----------------------------------------------------------------------------
# Without a local mirror the upstream files come from the pinned commits and the images from their
# sites. What does not answer (vlbias.suites.plan.offline) is left out of the default target, the rest
# is built, and the run ends with one line saying what it tried to reach and what to do (offline_end).
OFFLINE = {}


def default_targets(wildcards):
    down = {} if reporting() else offline(config, GROUNDED_DATASETS, GROUNDED_IMAGES.probe_urls)
    datasets = [name for kind, name in down if kind == "images"]
    ieat_up = ("sources", "ieat") not in down
    targets = (
        IEAT_PLAN.targets(upstream=ieat_up)
        + seat_targets()
        + grounded_targets(offline=datasets)
        + regions_targets(offline=datasets)
        + mlm_targets()
        + ([] if datasets else grounded_tests_targets())
        + report_targets(ieat_tables=ieat_up, grounded=not datasets)
    )
    if down:
        everything = IEAT_PLAN.targets() + grounded_targets() + regions_targets() + grounded_tests_targets()
        left_out = [t for t in everything + report_targets() if t not in targets]
        if "line" not in OFFLINE and workflow.dryrun:  # a dry run has no end of run: said now
            print(offline_line(config, down, left_out), file=sys.stderr)
        OFFLINE["line"] = offline_line(config, down, left_out)
    return existing(targets)


def offline_end(success):
    """The run's last line where the default target left out what cannot be reached; a run that built
    all the rest still fails (status 1): the default target is not complete."""
    if "line" in OFFLINE:
        print(OFFLINE["line"], file=sys.stderr)
        if success:
            sys.exit(1)


# --- the report (report.smk) ---------------------------------------------------------------------------
# Snakemake refuses a report when a file it would show is missing, so while it only writes the report
# the default target and the figures' inputs are what exists: a report of a partial run shows that part.


def reporting():
    """Whether this invocation only writes a report (`snakemake --report ...`, no job runs).

    Snakemake tells a workflow nothing of its mode: no execution settings (no job will run: a
    report, --dag, --summary) and --report on the command line together mean the report."""
    return workflow.execution_settings is None and any(
        arg == "--report" or arg.startswith("--report=") for arg in sys.argv[1:]
    )


def existing(paths):
    """``paths``, or while reporting only those that exist (a list, or a dict of named paths)."""
    if not reporting():
        return paths
    if isinstance(paths, dict):
        return {name: path for name, path in paths.items() if Path(path).exists()}
    return [path for path in paths if Path(path).exists()]


def report_targets(ieat_tables=True, grounded=True):
    """The suites' figures; the iEAT ones only with ``ieat_tables`` (they read every iEAT table), the
    grounded ones only with ``grounded`` (its datasets' images)."""
    targets = []
    if IEAT_TABLES and ieat_tables:
        targets += ["results/ieat/heatmap.png", "results/ieat/published.png"]
    if SEAT["models"]:
        targets.append("results/seat/heatmap.png")
    if grounded_tests_targets() and grounded:
        targets += ["results/grounded/heatmap.png", "results/grounded/published.png"]
    return targets


def mlm_report_output(name, caption):
    """An output of rule mlm_report shown in the report, under its model."""
    return report(
        f"results/mlm/{{model}}/{name}",
        caption=f"../report/{caption}",
        category="MLM association",
        subcategory="{model}",
    )
