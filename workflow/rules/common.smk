# Helpers shared by the rules: config lookups, target lists, stimulus checks, wildcard constraints.

import re
from functools import cache
from pathlib import Path

from vlbias.config import encodes, ieat_models, table_models
from vlbias.errors import InputError
from vlbias.images.store import store_name
from vlbias.io.fetch import Source, read_manifest
from vlbias.io.stimuli import check_categories, load_stimulus
from vlbias.models.plan import outputs

IEAT = config["ieat"]
SEAT = config["seat"]
STATS = config["stats"]
IEAT_TABLES = IEAT["tables"]
IEAT_MODELS = ieat_models(IEAT)  # ieat/models and the sweep's open_clip entries
SWEEP_MODELS = [m for m in IEAT_MODELS if m not in IEAT["models"]]
TABLE_MODELS = table_models(IEAT_MODELS)  # the names tables use: {name: (entry, output or None)}
PUBLISHED_MODELS = [m for m, spec in IEAT_MODELS.items() if spec["source"] == "published"]
IMAGE_MODELS = [m for m, spec in IEAT_MODELS.items() if spec["source"] == "images"]
VECTOR_MODELS = [m for m, spec in IEAT_MODELS.items() if spec["source"] == "vectors"]
# image models giving several vectors per image (iGPT's layers and logits): one job, a store per output
SEVERAL_OUTPUTS = {m: outputs(IEAT_MODELS[m]) for m in IMAGE_MODELS if len(outputs(IEAT_MODELS[m])) > 1}
SEAT_VECTOR_MODELS = [m for m, spec in SEAT["models"].items() if spec["source"] == "vectors"]


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


def image_store_settings(images):
    """(store name, {size, crop, resample, decoder}) of an image store: ``ieat/images`` with ``images`` over it."""
    settings = {k: {**IEAT["images"], **images}[k] for k in ("size", "crop", "resample", "decoder")}
    return store_name(**settings), settings


DEFAULT_STORE = image_store_settings({})[0]
# every image store a model reads (and the default one): built once, shared by the models reading it
IMAGE_STORES = dict(image_store_settings(IEAT_MODELS[m].get("images", {})) for m in IMAGE_MODELS)
IMAGE_STORES[DEFAULT_STORE] = image_store_settings({})[1]


def image_store(model):
    """The folder of the image store a model (an entry, or a table's name for one of its outputs) reads."""
    entry = TABLE_MODELS.get(model, (model, None))[0]
    return f"results/images/ieat/{image_store_settings(IEAT_MODELS[entry].get('images', {}))[0]}"


def image_stores(models):
    """{model: manifest of its image store} of the models among ``models`` computed from the images."""
    return {m: f"{image_store(m)}/manifest.tsv" for m in models if TABLE_MODELS[m][0] in IMAGE_MODELS}


def paper_name(model):
    """The model of the published table whose printed numbers a table model's rows show (its `paper`)."""
    entry, output = TABLE_MODELS[model]
    paper = IEAT_MODELS[entry].get("paper")
    return (paper.get(output) if isinstance(paper, dict) else paper) or model


def sweep_tests():
    tests = IEAT["sweep"]["tests"]
    return stimulus_ids(IEAT["stimuli"]) if tests == "all" else list(tests)


@cache
def model_tests(entry):
    """The tests whose sets an iEAT model entry's store must hold: those of every table (and of the sweep
    or the specificity check) that names it or one of its outputs."""
    tests = set()
    for spec in IEAT_TABLES.values():
        if any(TABLE_MODELS[m][0] == entry for m in spec["models"]):
            tests.update(spec["tests"])
    if entry in SWEEP_MODELS:
        tests.update(sweep_tests())
    if any(TABLE_MODELS[m][0] == entry for m in IEAT["specificity"]["models"]):
        tests.add(IEAT["specificity"]["test"])
    return sorted(tests)


@cache
def text_set_names(test):
    """The sets of an iEAT test that list texts (a cross-modal test's words); none for an image test."""
    return [s for s, st in load_stimulus(checked_stimulus("ieat", test)).sets.items() if st.items is not None]


def text_stimuli(entry):
    """The stimulus files of an image model's tests that have text sets (cross-modal tests)."""
    return [checked_stimulus("ieat", t) for t in model_tests(entry) if text_set_names(t)]


def vector_files(spec):
    """The files of a ``source: vectors`` entry (its vectors, and the ids of an .npy array)."""
    return [spec["vectors"]] + ([spec["ids"]] if spec.get("ids") else [])


@cache
def image_categories():
    """The categories the iEAT stimulus images (or, without image models, the published vectors) have."""
    manifests = [IEAT["images"]["manifest"]] if IMAGE_MODELS or VECTOR_MODELS or IEAT["build_images"] else []
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


def table_stimuli(tests, models):
    """The checked stimulus files of ``tests``; a test with text sets on a model that embeds no text
    (published vectors, iGPT, SimCLR) fails its targets before any job runs, naming both."""
    paths = [checked_stimulus("ieat", t) for t in tests]
    for test, path in zip(tests, paths):
        texts = text_set_names(test)
        for model in models if texts else []:
            spec = IEAT_MODELS[TABLE_MODELS[model][0]]
            if "texts" not in encodes(spec):
                what = "published vectors" if spec["source"] == "published" else f"adapter {spec['adapter']}"
                raise InputError(path, f"sets {', '.join(texts)} are texts, and model '{model}' ({what}) embeds "
                                       "no texts: cross-modal tests need a model with a text tower in the images' "
                                       "space (open_clip) or `source: vectors`")
    return paths


wildcard_constraints:
    table=alternatives(list(IEAT_TABLES)),
    model=alternatives(sorted(set(IEAT_MODELS) | set(TABLE_MODELS) | set(SEAT["models"]))),
