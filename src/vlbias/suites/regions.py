"""The region-features stage (section ``regions``, workflow/rules/regions.smk) as the workflow and the
config check see it (vlbias.suites.stage).

Not a suite: it runs no association test and has no tables to list, but like a suite it is built
from a section of its own, holds adapter entries (detectors) whose weights the weights stage
fetches, and adds region stores to the default target (``regions/build``). Two suites read its
stores (grounded and mlm), and a user may build them with neither, so it is a Stage of its own in
the registry beside them rather than a part of one; its planning is vlbias.regions.plan.
"""

from vlbias.regions.plan import RegionsPlan
from vlbias.suites.stage import Stage
from vlbias.validation import suggest


def check(config, root):
    """A name both a detector and a TSV source; each build pair's detector (or source) and its TSV file."""
    regions, problems = config["regions"], []
    detectors, tsv = set(regions["detectors"]), regions.get("tsv") or {}
    for name in sorted(detectors & set(tsv)):  # both would write the same region store
        problems.append(f"key 'regions/tsv/{name}': '{name}' is also a detector under 'regions/detectors'")
    for i, pair in enumerate(regions["build"]):
        if pair["detector"] not in detectors | set(tsv):
            problems.append(f"key 'regions/build/{i}/detector': '{pair['detector']}' is not a detector under "
                            f"'regions/detectors' nor a source under 'regions/tsv'"
                            f"{suggest(pair['detector'], detectors | set(tsv))}")
        elif pair["detector"] in tsv and pair["dataset"] not in tsv[pair["detector"]]["files"]:
            problems.append(f"key 'regions/build/{i}': 'regions/tsv/{pair['detector']}/files' names no TSV "
                            f"file for dataset '{pair['dataset']}'")
    return problems


def targets(config, down):
    """The region stores of ``regions/build``, but those of the datasets whose images cannot be had now."""
    return RegionsPlan(config).targets(offline=[name for kind, name in down if kind == "images"])


STAGE = Stage(
    name="regions", rules=("regions.smk",), adapters={"detectors": "detectors"},
    check=check, targets=targets, weights=lambda config: RegionsPlan(config).weights(),
)
