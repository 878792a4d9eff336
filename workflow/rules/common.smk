# Helpers shared by the rules: config lookups, target lists, stimulus checks, wildcard constraints.

import re
from functools import cache
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


@cache
def image_categories():
    """The categories the iEAT stimulus images (or, without image models, the published vectors) have."""
    manifests = [IEAT["images"]["manifest"]] if IMAGE_MODELS or IEAT["build_images"] else []
    manifests += [IEAT["embeddings_manifest"]] if PUBLISHED_MODELS else []
    return {m: {r["category"] for r in read_manifest(m)} for m in manifests}


@cache
def checked_stimulus(suite, test):
    """The stimulus file of ``test``, loaded and checked (errors name the file and key): called by the
    input functions, so a malformed file fails the targets that use it before any job runs."""
    path = f"{config[suite]['stimuli']}/{test}.yaml"
    stimulus = load_stimulus(path)
    if suite == "ieat":
        for manifest, known in image_categories().items():
            check_categories(stimulus, known, manifest)
    return path


wildcard_constraints:
    table=alternatives(list(IEAT_TABLES)),
    model=alternatives(list(IEAT["models"]) + list(SEAT["models"])),
