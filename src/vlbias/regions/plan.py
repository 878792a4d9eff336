"""What the region rules (workflow/rules/regions.smk) build, planned from the checked config alone."""

from vlbias import CONFIG
from vlbias.errors import InputError
from vlbias.weights import record_path


def store_path(dataset, store, ext="h5"):
    """A region store (``store``: a detector or a regions/tsv source) of ``dataset``; ext persons.tsv beside it."""
    return f"results/regions/{dataset}/{store}.{ext}"


def images_path(dataset, name="manifest"):
    """A grounded dataset's acquisition output: its manifest, failures or summary (.tsv)."""
    return f"results/images/grounded/{dataset}/{name}.tsv"


class RegionsPlan:
    def __init__(self, config):
        self.regions = config.get("regions") or {}
        self.detectors = self.regions.get("detectors", {})
        self.tsv = self.regions.get("tsv", {})  # region stores read from released bottom-up-attention TSV files

    def manifest(self, dataset):
        """The image manifest of ``dataset``: set under regions/manifests, else the grounded rules' output."""
        return self.regions.get("manifests", {}).get(dataset, images_path(dataset))

    def targets(self, offline=()):
        """The region stores of regions/build, but those of the datasets ``offline`` (their images cannot be had)."""
        return [store_path(pair["dataset"], pair["detector"], ext) for pair in self.regions.get("build", [])
                if pair["dataset"] not in offline for ext in ("h5", "persons.tsv")]

    def weights(self):
        """The weights records the targets need: the detectors of regions/build (not the TSV sources)."""
        return sorted({record_path(f"regions/{p['detector']}") for p in self.regions.get("build", [])
                       if p["detector"] in self.detectors})

    def tsv_file(self, source, dataset):
        """The TSV file of ``source`` for ``dataset`` (regions/tsv/<source>/files)."""
        files = self.tsv[source].get("files", {})
        if dataset not in files:
            raise InputError(CONFIG, f"key 'regions/tsv/{source}/files' names no TSV file for dataset '{dataset}' "
                                     f"(it has {sorted(files)})")
        return files[dataset]
