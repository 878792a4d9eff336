"""What the grounded workflow builds, planned from the checked config alone: the images and Table 1
(GroundedImagesPlan, workflow/rules/grounded_images.smk); Tables 3-7 (GroundedPlan,
workflow/rules/grounded_tables.smk): the targets, every job's input and output paths, what each
table job reads.

    plan = GroundedPlan(config)          # config as check_config left it (schema defaults filled in)
    plan.targets()                       # results/grounded/table3.csv, ..., comparison.md
    plan.table_spec("paper/table3")      # the table job's columns, groups, levels, results it reads
    GroundedImagesPlan(config).targets() # each dataset's manifest, failures, summary; Table 1

Tables 3-7 of the main protocol (``grounded/protocol``) are results/grounded/<table>.*, those of
every other protocol results/grounded/<protocol>/<table>.*. The extended tables (``grounded/extended``:
models the paper did not test, e.g. BLIP) are results/grounded/extended/<table>.*: the same layouts
under the main protocol, the paper's columns and then a column per extended model, never mixed into
the paper's own tables.
"""

from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from vlbias import CONFIG
from vlbias.errors import InputError
from vlbias.io.fetch import Source, read_manifest
from vlbias.models.families import embeds
from vlbias.regions.plan import images_path, store_path
from vlbias.suites.grounded.protocol import encoder_options, region_store, resolve
from vlbias.suites.plan import MLEAT_KINDS, mleat_on, mleat_path
from vlbias.weights import record_path

# the paper's tables: the caption of each (a table's own `caption` in the config replaces it)
CAPTIONS = {
    "table3": "Experiment 1 on Google Images: do joint embeddings encode social biases? (Ross et al. 2021, Table 3)",
    "table4": "Experiment 2 on Google Images: can grounded evidence that counters a stereotype alleviate biases? "
              "(Ross et al. 2021, Table 4)",
    "table5": "Experiment 3 with masked tokens (T) and masked image regions (I), sentence-level encodings, "
              "Google Images (Ross et al. 2021, Table 5)",
    "table6": "Experiments 1, 2 and 3 (masking) on COCO and Conceptual Captions (Ross et al. 2021, Table 6)",
    "table7": "Number of significant tests per group of tests, Google Images (Ross et al. 2021, Table 7)",
}
TABLE1_CAPTION = ("Number of images per bias test (Ross et al. 2021, Table 1): listed upstream, obtained here, "
                  "duplicated content, and the paper's number")
COMPARISON_CAPTION = "Ross et al. (2021), Tables 3-7 and Section 5: each printed number beside ours under each protocol"
TABLE_EXTS = ["csv", "md", "tex", "html", "rows.csv", "missing.tsv"]
EXTENDED = "extended"  # results/grounded/extended/<table>: the paper's layouts with the extended models
# the cell of a model that gives no caption-and-image vector (an adapter that ``embeds`` images and texts
# apart: a dual encoder, open_clip or transformers' CLIP/SigLIP); docs/grounded.md says why
NOT_GROUNDED = "n/a: dual encoder"


def embedding_path(protocol, dataset, model, ext="h5"):
    """The embedding job's output: ``ext`` h5 (the vectors) or missing.tsv (the pairs left out)."""
    return f"results/embeddings/grounded/{protocol}/{dataset}/{model}.{ext}"


def embedding_job(path, ext="missing.tsv"):
    """(protocol, dataset, model) of an ``embedding_path`` of ``ext``: whose pairs a missing.tsv lists (a
    model's name may hold dots)."""
    *_, protocol, dataset, name = Path(path).parts
    return protocol, dataset, name.removesuffix(f".{ext}")


def experiment_path(protocol, dataset, model):
    return f"results/grounded/experiments/{protocol}/{dataset}/{model}.csv"


def mleat_job_path(protocol, dataset, model):
    """The ML-EAT job's output of one embedding file: each (test, level) any table reads from it, once."""
    return f"results/grounded/mleat/jobs/{protocol}/{dataset}/{model}.json"


def table_path(target, ext="csv"):
    """A table's file: ``target`` "table3" (the main protocol) or "<protocol>/table3"."""
    return f"results/grounded/{target}.{ext}"


class GroundedPlan:
    def __init__(self, config):
        self.config = config
        grounded = config.get("grounded") or {}
        self.grounded = grounded
        self.models = grounded.get("models") or {}
        self.experiments = grounded.get("experiments") or {}
        self.tables = grounded.get("tables") or {}
        # {name: {switch: value}}; the config check has resolved each already
        self.protocols = {name: resolve(spec) for name, spec in (grounded.get("protocols") or {}).items()}
        self.main_protocol = grounded.get("protocol") or next(iter(self.protocols), None)
        self.extended = grounded.get("extended") or {}
        # the paper's Tables 3-7 as printed (a file; [] for none): an input of the jobs that show them
        self.published = grounded.get("published") or []
        # {target: (protocol, table, extended)}
        self.table_targets = {self.table_target(p, t): (p, t, False) for p in self.protocols for t in self.tables}
        if self.extended.get("models") and self.main_protocol:
            self.table_targets |= {f"{EXTENDED}/{t}": (self.main_protocol, t, True) for t in self.tables}

    def stimulus(self, dataset, test):
        return f"{self.grounded['stimuli']}/{dataset}/{test}.yaml"

    def figure_groups(self):
        """The groups of tests the figures show: Table 3's (experiment 1); None: each test by itself."""
        return self.tables.get("table3", {}).get("groups")

    def caption(self, target):
        """A table target's caption: the table's (or the paper's), its protocol, whether extended."""
        protocol, table, extended = self.table_targets[target]
        caption = self.tables[table].get("caption") or CAPTIONS[table]
        return f"{caption}. Protocol '{protocol}'" + ("; extended" if extended else "")

    def table_target(self, protocol, table):
        """The target name of ``table`` under ``protocol``: "table3" for the main protocol, "paper/table3" else."""
        return table if protocol == self.main_protocol else f"{protocol}/{table}"

    def models_on(self, protocol):
        """{column label: model name} of the models switched on (grounded/experiments/models) under
        ``protocol``: an entry with a `visualbert` key fills its column only when the protocol's
        `visualbert` switch has that value (the config check has made sure the columns are unique)."""
        switches = self.protocols[protocol]
        return {self.models[m]["column"]: m for m in self.experiments.get("models", [])
                if self.models[m].get("visualbert", switches["visualbert"]) == switches["visualbert"]}

    def dataset_on(self, dataset):
        """A dataset is on when its images are configured (or regions/manifests names its manifest)."""
        manifests = (self.config.get("regions") or {}).get("manifests") or {}
        return dataset in self.grounded["images"]["datasets"] or dataset in manifests

    def extended_models(self):
        """{column label: model name} of the extended tables' own columns, in the configured order."""
        return {self.models[m]["column"]: m for m in self.extended.get("models", [])}

    def jobs(self, protocol, table, extended=False):
        """The (dataset, model) embedding and experiment jobs ``table`` reads under ``protocol``, and its
        columns; ``extended``: with a column per extended model after the paper's (its dataset, in a
        table of per-column datasets, from ``grounded/extended/datasets``; none: an empty column). A
        model that gives no grounded vector (NOT_GROUNDED) has no job: its column's ``not_applicable``
        says so. A test no dataset of the table has a stimulus file for is an InputError."""
        spec = self.tables[table]
        on = self.models_on(protocol)
        labels = list(spec.get("columns", self.experiments["columns"]))
        datasets = dict(spec.get("datasets") or {c: spec["dataset"] for c in labels})
        added = self.extended_models() if extended else {}
        if added:
            on, labels = {**on, **added}, labels + list(added)
            datasets |= ({c: d for c, d in (self.extended.get("datasets") or {}).items() if c in added}
                         if spec.get("datasets") else {c: spec["dataset"] for c in added})
        columns = []
        for label in labels:
            dataset = datasets.get(label)
            model = on.get(label) if dataset and self.dataset_on(dataset) else None
            columns.append({"label": label, "model": model, "dataset": dataset})
            if label in added:  # no published numbers beside it
                columns[-1]["extended"] = True
            if model and embeds(self.models[model]["adapter"]):
                columns[-1]["not_applicable"] = NOT_GROUNDED
        for group, tests in spec["groups"].items():
            for test in tests:
                if not any(Path(self.stimulus(d, test)).exists() for d in set(datasets.values())):
                    raise InputError(CONFIG, f"key 'grounded/tables/{table}/groups/{group}' names '{test}', which "
                                             f"has no stimulus file in {self.grounded['stimuli']}/<dataset> for "
                                             f"{sorted(set(datasets.values()))}")
        return sorted({(c["dataset"], c["model"]) for c in columns
                       if c["model"] and "not_applicable" not in c}), columns

    def table_spec(self, target):
        """Everything the table script needs: the columns (label, model, dataset), the groups of
        tests, levels, masks; and the experiment results it reads."""
        protocol, table, extended = self.table_targets[target]
        spec = self.tables[table]
        jobs, columns = self.jobs(protocol, table, extended)
        level = spec["level"]
        return {
            "table": table, "protocol": protocol, "switches": self.protocols[protocol], "extended": extended,
            "caption": spec.get("caption", ""), "columns": columns, "groups": spec["groups"],
            "levels": self.grounded["levels"],
            "masks": [m for m, at in self.grounded["masks"].items() if level in at], "level": level,
            "experiments": spec["experiments"],
            "alpha": self.experiments["alpha"],
            "results": [experiment_path(protocol, d, m) for d, m in jobs],
            "missing": [embedding_path(protocol, d, m, "missing.tsv") for d, m in jobs],
        }

    def dataset_tests(self, dataset):
        """The tests of ``dataset`` that a table shows (and that have a stimulus file), sorted."""
        tests = set()
        for spec in self.tables.values():
            datasets = set((spec.get("datasets") or {"": spec.get("dataset")}).values())
            if spec.get("datasets"):  # the extended columns' own (Table 6)
                datasets |= set((self.extended.get("datasets") or {}).values())
            if dataset in datasets:
                tests |= {t for ts in spec["groups"].values() for t in ts}
        return sorted(t for t in tests if Path(self.stimulus(dataset, t)).exists())

    def experiment_results(self):
        """Every experiment result file of every protocol's paper tables (the comparison reads them all)."""
        return sorted({f for target, (*_, extended) in self.table_targets.items() if not extended
                       for f in self.table_spec(target)["results"]})

    def main_results(self):
        """The experiment results of the main protocol's paper tables (the figures read them)."""
        return sorted({f for target, (protocol, _, extended) in self.table_targets.items()
                       if protocol == self.main_protocol and not extended for f in self.table_spec(target)["results"]})

    def mleat_targets(self):
        """The table targets whose ML-EAT the default target builds (stats/mleat/build): the main
        protocol's (the paper's tables and the extended ones); another protocol's on request."""
        if not mleat_on(self.config):
            return []
        return [t for t, (protocol, _, _) in self.table_targets.items() if protocol == self.main_protocol]

    def mleat_spec(self, target):
        """What a table's ML-EAT job reads: the ML-EAT job results of its (dataset, model) embedding
        files (``mleat_job_tests``), its tests."""
        protocol, table, extended = self.table_targets[target]
        jobs, _ = self.jobs(protocol, table, extended)
        return {"results": [mleat_job_path(protocol, d, m) for d, m in jobs],
                "tests": [t for group in self.tables[table]["groups"].values() for t in group],
                "caption": self.caption(target)}

    def mleat_job_tests(self, protocol, dataset, model):
        """The tests the ML-EAT job of one embedding file computes: those of every table under
        ``protocol`` that reads the file and that the file holds, each once, whichever tables show it."""
        tests = {t for p, table, extended in self.table_targets.values()
                 if p == protocol and (dataset, model) in self.jobs(p, table, extended)[0]
                 for group in self.tables[table]["groups"].values() for t in group}
        return sorted(tests & set(self.dataset_tests(dataset)))

    def mleat_counts(self):
        """(computed, distinct) (embedding file, test, level) ML-EATs of the targets (each level of
        grounded/levels counted): computed, those of the ML-EAT jobs the targets' ML-EAT files read,
        each job once; distinct, those the targets show (each target's files x its tests), repeats once."""
        levels = self.grounded["levels"]
        distinct, job_files = set(), set()
        for target in self.mleat_targets():
            protocol, table, extended = self.table_targets[target]
            spec = self.mleat_spec(target)
            job_files |= set(spec["results"])
            for dataset, model in self.jobs(protocol, table, extended)[0]:
                distinct |= {(embedding_path(protocol, dataset, model), t, lv) for t in spec["tests"]
                             if t in self.dataset_tests(dataset) for lv in levels}
        computed = sum(len(self.mleat_job_tests(*embedding_job(f, "json"))) * len(levels) for f in job_files)
        return computed, len(distinct)

    def targets(self):
        if not (self.grounded and self.experiments.get("build")):
            return []
        targets = [table_path(target, ext) for target in self.table_targets for ext in TABLE_EXTS]
        targets += [mleat_path("grounded", t, kind) for t in self.mleat_targets() for kind in MLEAT_KINDS]
        return targets + ([table_path("comparison", ext) for ext in ("csv", "md")] if self.published else [])

    def weights(self):
        """The weights records the targets need: the model of every embedding job of every protocol's
        tables (the extended ones too), and the detector of each region store those jobs read (not a
        released TSV source)."""
        if not self.targets():
            return []
        jobs = {(p, d, m) for p, t, x in self.table_targets.values() for d, m in self.jobs(p, t, x)[0]}
        detectors = (self.config.get("regions") or {}).get("detectors", {})
        stores = {self.embed_region_store(p, d, m) for p, d, m in jobs}
        return sorted({record_path(f"grounded/{m}") for _, _, m in jobs}
                      | {record_path(f"regions/{s}") for s in stores if s in detectors})

    # --- the embedding job of one (protocol, dataset, model) ----------------------------------------

    def embed_stimuli(self, protocol, dataset, model):
        return [self.stimulus(dataset, t) for t in self.dataset_tests(dataset)]

    def embed_region_store(self, protocol, dataset, model):
        """The region store (detector or regions/tsv source) the embedding job reads (switch region_source)."""
        return region_store(self.protocols[protocol], self.models[model], dataset)

    def embed_regions(self, protocol, dataset, model):
        return store_path(dataset, self.embed_region_store(protocol, dataset, model))

    def embed_spec(self, protocol, dataset, model):
        """The model entry with the protocol's encoder options (vlbias.suites.grounded.protocol)."""
        spec = self.models[model]
        return {**spec, **encoder_options(self.protocols[protocol], spec["adapter"], spec.get("config"))}


class GroundedImagesPlan:
    """The grounded datasets' images (grounded/images) and the dataset table (paper Table 1)."""

    def __init__(self, config):
        self.config = config
        self.grounded = config.get("grounded") or {}
        self.datasets = self.grounded["images"]["datasets"] if self.grounded else {}
        self.tests = cache(self.tests)

    def tests(self, dataset):
        """The tests of ``dataset`` to obtain: all in its manifest (in manifest order) or those listed."""
        spec = self.datasets[dataset]
        listed = list(dict.fromkeys(r["test"] for r in read_manifest(spec["manifest"])))
        if spec["tests"] == "all":
            return listed
        unknown = sorted(set(spec["tests"]) - set(listed))
        if unknown:
            raise InputError(CONFIG, f"key 'grounded/images/datasets/{dataset}/tests' names tests that "
                                     f"{spec['manifest']} does not list: {unknown}")
        return list(spec["tests"])

    def source(self, dataset):
        """The upstream repository that holds ``dataset``'s images, or None (``source: null``: the
        manifest's URLs point at the images' own site, e.g. images.cocodataset.org)."""
        name = self.datasets[dataset]["source"]
        return None if name is None else Source(**self.config["sources"][name])

    def folder(self, root, dataset):
        """Where ``dataset``'s images lie below ``root`` (the mirror or the cache): as upstream, or
        ``<root>/<mirror_dir>`` for a dataset in no upstream repository."""
        src = self.source(dataset)
        return str(Path(root, *([src.mirror_name] if src else []), self.datasets[dataset]["mirror_dir"]))

    def probe_urls(self, dataset, hosts=8):
        """A URL of each of the first ``hosts`` hosts in ``dataset``'s manifest (of the tests obtained):
        what a run without a mirror asks before it plans the downloads (vlbias.suites.plan.offline)."""
        tests, urls = set(self.tests(dataset)), {}
        for r in read_manifest(self.datasets[dataset]["manifest"]):
            if r["test"] in tests and r.get("url") and len(urls) < hosts:
                urls.setdefault(urlsplit(r["url"]).netloc, r["url"])
        return list(urls.values())

    def targets(self, offline=()):
        """Each dataset's acquisition tables and Table 1; without the datasets ``offline`` (their images
        cannot be had now), and then without Table 1, which counts every dataset's."""
        if not self.grounded:
            return []
        return ([images_path(d, name) for d in self.datasets if d not in offline
                 for name in ("manifest", "failures", "summary")]
                + ([] if offline else [table_path("table1", ext) for ext in ("csv", "md", "tex", "html")]))
