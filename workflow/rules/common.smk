# Helpers shared by the rules: config lookups, target lists, wildcard constraints.

import re
from pathlib import Path

from vlbias.io.fetch import Source, read_manifest
from vlbias.io.stimuli import check_categories, load_stimulus

IEAT = config["ieat"]
SEAT = config["seat"]
STATS = config["stats"]
IEAT_TABLES = IEAT["tables"]
PUBLISHED_MODELS = [m for m, spec in IEAT["models"].items() if spec["source"] == "published"]
IMAGE_MODELS = [m for m, spec in IEAT["models"].items() if spec["source"] == "images"]


def alternatives(names):
    """Regex matching exactly one of ``names`` (and nothing when the list is empty)."""
    return "|".join(map(re.escape, names)) if names else "(?!)"


def stimulus_ids(directory):
    return sorted(p.stem for p in Path(directory).glob("*.yaml"))


def seat_tests():
    return stimulus_ids(SEAT["stimuli"]) if SEAT["tests"] == "all" else list(SEAT["tests"])


def source(name):
    return Source(**config["sources"][name])


def mirror():
    return config["mirror"] and str(Path(config["mirror"]).resolve())


def stats_params():
    return {"n_samples": STATS["n_samples"], "seed": STATS["seed"], "exact": STATS["exact"]}


def provenance(spec):
    """What a store records about its model from the config entry."""
    return {k: spec[k] for k in ("model_id", "revision") if spec.get(k)}


def ieat_table_models(table):
    models = IEAT_TABLES[table]["models"]
    unknown = sorted(set(models) - set(IEAT["models"]))
    if unknown:
        raise ValueError(f"config/config.yaml: key 'ieat/tables/{table}/models' names unknown model(s) {unknown}")
    return models


def check_stimuli():
    """Fail before anything runs on a malformed stimulus file, a table naming an unknown test,
    or a test naming a category its dataset does not list; errors name the file and key."""
    for table, spec in IEAT_TABLES.items():
        missing = [t for t in spec["tests"] if not Path(IEAT["stimuli"], f"{t}.yaml").exists()]
        if missing:
            raise ValueError(f"config/config.yaml: key 'ieat/tables/{table}/tests' names tests with no "
                             f"stimulus file in {IEAT['stimuli']}: {missing}")
        ieat_table_models(table)
    manifests = {IEAT["images"]["manifest"]: "category"} if IMAGE_MODELS or IEAT["build_images"] else {}
    if PUBLISHED_MODELS:
        manifests[IEAT["embeddings_manifest"]] = "category"
    for manifest, column in manifests.items():
        known = {r[column] for r in read_manifest(manifest)}
        for test in sorted({t for spec in IEAT_TABLES.values() for t in spec["tests"]}):
            check_categories(load_stimulus(Path(IEAT["stimuli"], f"{test}.yaml")), known, manifest)
    for test in seat_tests():
        load_stimulus(Path(SEAT["stimuli"], f"{test}.yaml"))


def all_targets():
    targets = expand("results/ieat/{table}.{ext}", table=IEAT_TABLES, ext=["csv", "md", "missing.tsv"])
    if IEAT["specificity"]["models"]:
        targets.append("results/ieat/specificity.csv")
    if IEAT["build_images"]:
        targets.append("results/images/ieat/manifest.tsv")
    targets += expand("results/seat/{model}/table.{ext}", model=SEAT["models"], ext=["csv", "md"])
    return targets


check_stimuli()


wildcard_constraints:
    suite="ieat|seat",
    table=alternatives(list(IEAT_TABLES)),
    model=alternatives(list(IEAT["models"]) + list(SEAT["models"])),
    test=alternatives(stimulus_ids(IEAT["stimuli"]) + stimulus_ids(SEAT["stimuli"])),
