# vlbias: social-bias association tests for vision, language and vision-language models.
# `snakemake --cores N` builds every table of the configured suites; see README.md.

import atexit
import gc
import os
import sys
from pathlib import Path

from snakemake.utils import min_version

from vlbias.config import check_config, weights_entries
from vlbias.errors import InputError
from vlbias.weights import Lock, stale_records
from vlbias.workdir import claim

min_version("8.20")


configfile: "config/config.yaml"


# every key, model and detector entry checked (defaults filled in) before anything runs; a mistake
# is said as such, without the traceback Snakemake adds to an exception (vlbias.logs)
try:
    check_config(config, Path(workflow.basedir, "workflow/schemas/config.schema.yaml"))
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
include: "workflow/rules/ieat.smk"
include: "workflow/rules/seat.smk"
include: "workflow/rules/grounded_images.smk"
include: "workflow/rules/regions.smk"
include: "workflow/rules/mlm.smk"
include: "workflow/rules/grounded_tables.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/weights.smk"


# on a cluster (profiles/slurm) these run on the submitting node: the first four download (compute
# nodes often have no network; the model jobs load offline from what weights_fetch fetched), the
# others copy vectors between files or plot a table's numbers (seconds; no queue wait)
localrules:
    weights_fetch,
    grounded_images,
    ieat_images,
    ieat_published_embeddings,
    ieat_output_store,
    ieat_vectors,
    seat_vectors,
    ieat_figures,
    seat_figures,
    grounded_figures,


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        default_targets,


onsuccess:
    offline_end(success=True)


onerror:
    offline_end(success=False)
