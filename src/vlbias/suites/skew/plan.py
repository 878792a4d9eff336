"""What the skew stage builds (workflow/rules/skew.smk), planned from the checked config alone: the labelled
sets at hand and those absent (a recorded skip naming each and how to provide it), the image store of each
set, the embedding store of each (set, model), the query files, the tables and the bridge.

    plan = SkewPlan(config)          # config as check_config left it (schema defaults filled in)
    plan.targets()                   # `snakemake skew`: results/skew/<set>.{csv,md,png}, skipped.tsv, propagation.*
    plan.folder("fairface")          # where the set's images are read: <mirror>/<mirror_dir>
    plan.absent                      # {set: why} of the sets not at hand
"""

from pathlib import Path

from vlbias.suites.plan import mirror
from vlbias.weights import record_path

HOW = {
    "fairface": "FairFace's validation images (val/) and its fairface_label_val.csv (github.com/joojs/fairface)",
    "utkface": "UTKFace's cropped faces, labels in their names (susanqq.github.io/UTKFace)",
    "csv": "its images and the labels CSV (a path column and a column per attribute)",
}
SKIPPED = "results/skew/skipped.tsv"


def table_path(name, ext="csv"):
    """A skew table's file: ``name`` a labelled set, or "propagation"."""
    return f"results/skew/{name}.{ext}"


def image_store(dataset):
    return f"results/images/skew/{dataset}"


def embedding_store(dataset, model):
    return f"results/embeddings/skew/{dataset}/{model}.h5"


def query_file(name, spec):
    """Where a queries entry's file is read: an upstream file fetched to results/skew/queries/ (its
    sha256 checked), or the user's own file."""
    return f"results/skew/queries/{name}{Path(spec['path']).suffix}" if "source" in spec else spec["file"]


class SkewPlan:
    # the keys of the skew section a table's measures read
    SETTINGS = ("k", "directions", "desired", "ties", "temperature", "n_permutations", "n_bootstrap", "level", "seed")

    def __init__(self, config):
        self.config = config
        self.skew = skew = config["skew"]
        self.models = skew["models"]
        self.queries = skew["queries"]
        self.datasets = skew["datasets"]
        self.absent = {name: why for name in self.datasets if (why := self.missing(name))}
        self.present = [name for name in self.datasets if name not in self.absent]

    def folder(self, dataset):
        """The set's image folder: ``mirror_dir`` under the mirror (a path as given without one); a CSV set
        without ``mirror_dir`` the labels file's folder."""
        spec = self.datasets[dataset]
        if not spec.get("mirror_dir"):
            return str(Path(spec["labels"]).parent)
        root = mirror(self.config)
        return str(Path(root, spec["mirror_dir"]) if root else Path(spec["mirror_dir"]))

    def missing(self, dataset):
        """Why a labelled set is not at hand (its folder, labels file or manifest absent), or None."""
        spec = self.datasets[dataset]
        folder = Path(self.folder(dataset))
        needed = [folder] + ([Path(spec["labels"])] if spec["format"] == "csv" else
                             [folder / "fairface_label_val.csv"] if spec["format"] == "fairface" else [])
        needed += [Path(spec["manifest"])] if spec.get("manifest") else []
        absent = [str(p) for p in needed if not p.exists()]
        if not absent:
            return None
        return (f"skew dataset '{dataset}' ({spec['format']}) is not at hand: {', '.join(absent)} absent; provide "
                f"{HOW[spec['format']]} there (docs/skew.md, 'Labelled image sets')")

    def targets(self):
        """The files of `snakemake skew`: each set at hand's table, the record of those absent, the bridge."""
        targets = [table_path(d, ext) for d in self.present for ext in ("csv", "md", "png")] + [SKIPPED]
        if self.skew["propagation"]["map"] and self.present:
            targets += [table_path("propagation", ext) for ext in ("csv", "png")]
        return targets

    def weights(self):
        """The weights records the skew target needs: every model's (none of the default target's)."""
        return [record_path(f"skew/{m}") for m in self.models]

    def query_files(self):
        return [query_file(name, spec) for name, spec in self.queries.items()]

    def published(self, model):
        """The published model whose printed numbers a model's rows show (its `paper`, default its name)."""
        return self.models[model].get("paper") or model
