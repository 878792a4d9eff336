# Names every rule file shares, bound to the planning in Python (vlbias.suites.plan; unit-tested in
# tests/suites/test_plan.py), and the functions the Snakefile calls: the default target (each stage's targets,
# vlbias.suites.registry), the report's mode. A stage's own names are in its rule file.

import sys
from functools import partial
from pathlib import Path

from vlbias.suites import plan, registry
from vlbias.suites.plan import alternatives, embedding_path, mleat_path, offline, offline_line, provenance, vector_files
from vlbias.weights import record_path

STATS = config["stats"]

source = partial(plan.source, config)
mirror = partial(plan.mirror, config)
stats_params = partial(plan.stats_params, config)
mleat_params = partial(plan.mleat_params, config)


# --- the default target ----------------------------------------------------------------------------
# Without a local mirror the upstream files come from the pinned commits and the images from their
# sites. What does not answer (vlbias.suites.plan.offline) is left out of the default target, the rest
# is built, and the run ends with one line saying what it tried to reach and what to do (offline_end).
OFFLINE = {}


def default_targets(wildcards):
    probes = registry.probes(config)
    down = {} if reporting() else offline(config, list(probes), lambda dataset: probes[dataset]())
    targets = registry.default_targets(config, down)
    if down:
        left_out = [t for t in registry.default_targets(config, {}) if t not in targets]
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


# --- the report ------------------------------------------------------------------------------------
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
