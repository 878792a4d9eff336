"""What the region rules (workflow/rules/regions.smk) and the grounded image rules
(workflow/rules/grounded_images.smk) build, planned from the checked config alone."""

from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from vlbias.errors import InputError
from vlbias.io.fetch import Source, read_manifest
from vlbias.weights import record_path

SOURCE = "config/config.yaml"


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
            raise InputError(SOURCE, f"key 'regions/tsv/{source}/files' names no TSV file for dataset '{dataset}' "
                                     f"(it has {sorted(files)})")
        return files[dataset]


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
        if spec.get("tests", "all") == "all":
            return listed
        unknown = sorted(set(spec["tests"]) - set(listed))
        if unknown:
            raise InputError(SOURCE, f"key 'grounded/images/datasets/{dataset}/tests' names tests that "
                                     f"{spec['manifest']} does not list: {unknown}")
        return list(spec["tests"])

    def source(self, dataset):
        """The upstream repository that holds ``dataset``'s images, or None (``source: null``: the
        manifest's URLs point at the images' own site, e.g. images.cocodataset.org)."""
        name = self.datasets[dataset].get("source", "grounded")
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
                + ([] if offline else [f"results/grounded/table1.{ext}" for ext in ("csv", "md", "tex", "html")]))
