# vlbias: social-bias association tests for vision, language and vision-language models.
# `snakemake --cores N` builds every table of the configured suites; see README.md.

import atexit
import gc
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from vlbias import CONFIG, SCHEMA
from vlbias.config import check_config, read_config
from vlbias.errors import InputError
from vlbias.suites.registry import rule_files, weights_entries
from vlbias.weights import Lock, stale_records
from vlbias.workdir import claim

min_version("8.20")


# read by vlbias's YAML reader first: Snakemake's own expands every alias (an alias bomb of 1 kB took
# minutes and gigabytes) and takes a key given twice silently
if Path(CONFIG).is_file():
    try:
        read_config(CONFIG)
    except InputError as e:
        sys.exit(f"error: {e}")


configfile: CONFIG


# every key, model and detector entry checked (defaults filled in) before anything runs; a mistake
# is said as such, without the traceback Snakemake adds to an exception (vlbias.logs)
try:
    check_config(config, Path(workflow.basedir, SCHEMA))
except InputError as e:
    sys.exit(f"error: {e}")

# after a run killed hard: its stale locks and temporary files go (half-written results, cache
# files, weights lock, huggingface_hub downloads), so this run just starts (not in the jobs a
# cluster executor starts: they run inside the main process's run)
if workflow.is_main_process:
    for path in claim(
        folders=["results", config["cache"]], files=[config["weights_lock"]], hub_caches=[Path(config["cache"], "hub")]
    ):
        print(f"removed {path}: left by an interrupted run", file=sys.stderr)
    # the weights lock is an input of every fetch (ancient: one entry written leaves the others'
    # records current); a record it no longer pins (a `git pull` of the lock) is dated back, older
    # than the fetch's script, so Snakemake's code trigger runs the fetch again, and what loads it
    try:
        Lock(config["weights_lock"]).ensure()
        for path in stale_records(weights_entries(config), config["weights_lock"]):
            os.utime(path, (0, 0))
            print(
                f"{path}: the weights lock {config['weights_lock']} changed since it was fetched: fetched again",
                file=sys.stderr,
            )
    except InputError as e:
        sys.exit(f"error: {e}")
    # as in the jobs (vlbias.logs.setup_logging): no garbage collections while the process exits
    atexit.register(gc.freeze)


include: "workflow/rules/common.smk"


# each stage's rules (vlbias.suites.registry: the suites and the region features), then the weights'
for rule_file in rule_files():

    include: f"workflow/rules/{rule_file}"


include: "workflow/rules/weights.smk"


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        default_targets,


onsuccess:
    offline_end(success=True)


onerror:
    offline_end(success=False)
