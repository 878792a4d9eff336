"""What the iEAT workflow builds (workflow/rules/ieat.smk), planned from the checked config alone:
its models (the entries and the sweep's), the image store each reads, the tests each store must
hold, the stimulus files each table reads (checked before any job runs).

    plan = IeatPlan(config)       # config as check_config left it (schema defaults filled in)
    plan.image_store("igpt-l/layer20")   # results/images/ieat/224px-center-bicubic-pil
    plan.model_tests("clip")             # the tests whose sets its store must hold
"""

import re
from functools import cache
from pathlib import Path

from vlbias.errors import InputError
from vlbias.images.store import store_name
from vlbias.io.fetch import read_manifest
from vlbias.io.stimuli import check_categories, load_stimulus
from vlbias.models.families import embeds, outputs
from vlbias.suites.plan import MLEAT_KINDS, mleat_on, mleat_path, stimulus_ids
from vlbias.weights import record_path


SPECIFICITY_CAPTION = ("Specificity of the permutation test: the false-positive rate of random re-partitions of "
                       "one test")


def table_path(table, ext="csv"):
    """An iEAT table's file: ``table`` a name under ieat/tables, "specificity" or "sweep"."""
    return f"results/ieat/{table}.{ext}"


# --- the iEAT models: their names, their outputs, what each embeds ----------------------------------------


def sweep_name(entry):
    """A sweep entry's model name: its ``name``, else "<model>-<weights>" in lower case, other characters
    than a-z 0-9 _ . - as "-". The model: the first of ``arch`` (open_clip), the last part of ``model_id``
    or of ``path``, ``architecture``, the adapter; the weights: the ``pretrained`` tag, the checkpoint's
    file name, "random<seed>" (the entry as the config check fills it: its adapter schema's default
    seed), or nothing where the model's id or directory names them ("vit-b-32-openai",
    "clip-vit-base-patch32", "clip-random0")."""
    if entry.get("name"):
        return entry["name"]
    model = (entry.get("arch") or next((Path(entry[k]).name for k in ("model_id", "path") if entry.get(k)), None)
             or entry.get("architecture") or entry.get("adapter", ""))
    weights = entry.get("pretrained") or (Path(entry["checkpoint"]).stem if entry.get("checkpoint") else
                                          f"random{entry['seed']}" if entry.get("weights") == "random" else "")
    return re.sub(r"[^a-z0-9_.-]+", "-", f"{model}-{weights}".lower()).strip("-")


def ieat_models(ieat):
    """{name: entry} of every iEAT model: ``ieat/models`` and the sweep's entries (``sweep_name``;
    ``source: images``). A sweep name taken twice, or by ``ieat/models``, keeps the first (the config
    check names the clash)."""
    models = dict(ieat["models"])
    for entry in ieat["sweep"]["models"]:
        models.setdefault(sweep_name(entry), {"source": "images", **entry})
    return models


def table_models(models):
    """{name a table uses: (entry name, output or None)}: an entry with one output by its own name, each
    output of an entry with several (vlbias.models.families.outputs: iGPT's layers and logits) as "<entry>/<output>"."""
    names = {}
    for name, spec in models.items():
        several = outputs(spec) if spec.get("source") == "images" else []
        if len(several) > 1:
            names.update({f"{name}/{o}": (name, o) for o in several})
        else:
            names[name] = (name, None)
    return names


def encodes(spec):
    """What a model entry embeds: published vectors images; a user's vectors whatever their ids name;
    an adapter what its family declares (vlbias.models.families.embeds)."""
    source = spec.get("source", "images" if spec.get("adapter") else None)
    if source == "published":
        return ("images",)
    if source == "vectors":
        return ("images", "texts")
    return embeds(spec.get("adapter"))


class IeatPlan:
    def __init__(self, config):
        self.config = config
        self.ieat = ieat = config["ieat"]
        self.tables = ieat["tables"]
        self.models = ieat_models(ieat)  # ieat/models and the sweep's entries
        self.sweep_models = [m for m in self.models if m not in ieat["models"]]
        self.table_models = table_models(self.models)  # the names tables use: {name: (entry, output or None)}
        self.published_models = [m for m, spec in self.models.items() if spec["source"] == "published"]
        self.image_models = [m for m, spec in self.models.items() if spec["source"] == "images"]
        self.vector_models = [m for m, spec in self.models.items() if spec["source"] == "vectors"]
        # image models giving several vectors per image (iGPT's layers and logits): one job, a store per output
        self.several_outputs = {m: outputs(self.models[m]) for m in self.image_models
                                if len(outputs(self.models[m])) > 1}
        self.default_store = self.image_store_settings({})[0]
        # every image store a model reads (and the default one): built once, shared by the models reading it
        self.image_stores_settings = dict(self.image_store_settings(self.models[m].get("images", {}))
                                          for m in self.image_models)
        self.image_stores_settings[self.default_store] = self.image_store_settings({})[1]
        # cached per plan (functools.cache on a method would keep every plan alive)
        self.model_tests = cache(self.model_tests)
        self.text_set_names = cache(self.text_set_names)
        self.image_categories = cache(self.image_categories)
        self.checked_stimulus = cache(self.checked_stimulus)

    def targets(self, upstream=True):
        """The default target's iEAT files; with ``upstream`` False only those that need no upstream
        file (the `ieat` source: its images, the published vectors), e.g. a table of one's own vectors."""
        needs = lambda models: any(self.models[self.table_models[m][0]]["source"] != "vectors" for m in models)
        keep = lambda models: upstream or not needs(models)
        targets = [table_path(t, ext) for t, spec in self.tables.items() if keep(spec["models"])
                   for ext in ("csv", "md", "html", "missing.tsv")]
        if self.ieat["specificity"]["models"] and keep(self.ieat["specificity"]["models"]):
            targets += [table_path("specificity"), table_path("specificity", "html")]
        if self.ieat["build_images"] and upstream:
            targets.append(f"results/images/ieat/{self.default_store}/manifest.tsv")
        if self.sweep_models and upstream:  # image models: they read the images
            targets += [table_path("sweep", ext) for ext in ("csv", "md", "png", "missing.tsv")]
        if mleat_on(self.config):  # each table's ML-EAT (the sweep's too) beside it
            tables = [t for t, spec in self.tables.items() if keep(spec["models"])]
            tables += ["sweep"] if self.sweep_models and upstream else []
            targets += [mleat_path("ieat", t, kind) for t in tables for kind in MLEAT_KINDS]
        return targets

    def weights(self):
        """The weights records the targets need: those of the image models a table, the sweep or the
        specificity check reads (an entry only configured, e.g. for a table it is not in yet, needs none)."""
        read = [m for t in self.tables.values() for m in t["models"]] + self.ieat["specificity"]["models"]
        used = {self.table_models[m][0] for m in read} | set(self.sweep_models)
        return [record_path(f"ieat/{m}") for m in self.image_models if m in used]

    def image_store_settings(self, images):
        """(store name, {size, crop, resample, decoder}) of an image store: ``ieat/images`` with ``images`` over it."""
        settings = {k: {**self.ieat["images"], **images}[k] for k in ("size", "crop", "resample", "decoder")}
        return store_name(**settings), settings

    def image_store(self, model):
        """The folder of the image store a model (an entry, or a table's name for one of its outputs) reads."""
        entry = self.table_models.get(model, (model, None))[0]
        return f"results/images/ieat/{self.image_store_settings(self.models[entry].get('images', {}))[0]}"

    def image_stores(self, models):
        """{model: manifest of its image store} of the models among ``models`` computed from the images."""
        return {m: f"{self.image_store(m)}/manifest.tsv" for m in models
                if self.table_models[m][0] in self.image_models}

    def paper_name(self, model):
        """The model of the published table whose printed numbers a table model's rows show (its `paper`)."""
        entry, output = self.table_models[model]
        paper = self.models[entry].get("paper")
        return (paper.get(output) if isinstance(paper, dict) else paper) or model

    def mleat_table(self, table):
        """(tests, models, caption) of a table's ML-EAT: an ieat/tables entry's, or the sweep's."""
        if table == "sweep":
            return self.sweep_tests(), self.sweep_models, self.ieat["sweep"]["caption"]
        spec = self.tables[table]
        return spec["tests"], spec["models"], spec["caption"]

    def sweep_tests(self):
        tests = self.ieat["sweep"]["tests"]
        return stimulus_ids(self.ieat["stimuli"]) if tests == "all" else list(tests)

    def model_tests(self, entry):
        """The tests whose sets an iEAT model entry's store must hold: those of every table (and of the sweep
        or the specificity check) that names it or one of its outputs."""
        tests = set()
        for spec in self.tables.values():
            if any(self.table_models[m][0] == entry for m in spec["models"]):
                tests.update(spec["tests"])
        if entry in self.sweep_models:
            tests.update(self.sweep_tests())
        if any(self.table_models[m][0] == entry for m in self.ieat["specificity"]["models"]):
            tests.add(self.ieat["specificity"]["test"])
        return sorted(tests)

    def text_set_names(self, test):
        """The sets of an iEAT test that list texts (a cross-modal test's words); none for an image test."""
        return [s for s, st in load_stimulus(self.checked_stimulus("ieat", test)).sets.items() if st.items is not None]

    def text_stimuli(self, entry):
        """The stimulus files of an image model's tests that have text sets (cross-modal tests)."""
        return [self.checked_stimulus("ieat", t) for t in self.model_tests(entry) if self.text_set_names(t)]

    def image_categories(self):
        """The categories the iEAT stimulus images (or, without image models, the published vectors) have."""
        manifests = ([self.ieat["images"]["manifest"]]
                     if self.image_models or self.vector_models or self.ieat["build_images"] else [])
        manifests += [self.ieat["embeddings_manifest"]] if self.published_models else []
        return {m: {r["category"] for r in read_manifest(m)} for m in manifests}

    def checked_stimulus(self, suite, test):
        """The stimulus file of ``test``, loaded and checked (errors name the file and key): called by the
        input functions, so a malformed file fails the targets that use it before any job runs."""
        path = f"{self.config[suite]['stimuli']}/{test}.yaml"
        stimulus = load_stimulus(path)
        if suite == "ieat":
            for manifest, known in self.image_categories().items():
                check_categories(stimulus, known, manifest)
        return path

    def table_stimuli(self, tests, models):
        """The checked stimulus files of ``tests``; a test with text sets on a model that embeds no text
        (published vectors, iGPT, SimCLR) fails its targets before any job runs, naming both."""
        paths = [self.checked_stimulus("ieat", t) for t in tests]
        for test, path in zip(tests, paths):
            texts = self.text_set_names(test)
            for model in models if texts else []:
                spec = self.models[self.table_models[model][0]]
                if "texts" not in encodes(spec):
                    what = "published vectors" if spec["source"] == "published" else f"adapter {spec['adapter']}"
                    raise InputError(path, f"sets {', '.join(texts)} are texts, and model '{model}' ({what}) embeds "
                                           "no texts: cross-modal tests need a model with a text tower in the images' "
                                           "space (an adapter that embeds images and texts) or `source: vectors`")
        return paths
