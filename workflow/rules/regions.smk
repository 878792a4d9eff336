# Region features from a Faster R-CNN detector, one HDF5 file per (dataset, detector).
# The images come from a dataset's acquisition manifest (by default the grounded image rules').
# Each image's regions are cached by content: new images in the manifest are the only ones detected.
# Or read from a TSV file of released features (regions/tsv; rule regions_tsv).

REGIONS = config.get("regions") or {}
REGION_DETECTORS = REGIONS.get("detectors", {})
REGION_TSV = REGIONS.get("tsv", {})  # region stores read from released bottom-up-attention TSV files


def regions_manifest(dataset):
    """The image manifest of ``dataset``: set under regions/manifests, else the grounded rules' output."""
    return REGIONS.get("manifests", {}).get(dataset, f"results/images/grounded/{dataset}/manifest.tsv")


def regions_targets():
    targets = []
    for pair in REGIONS.get("build", []):
        targets += expand("results/regions/{dataset}/{detector}.{ext}", **pair, ext=["h5", "persons.tsv"])
    return targets


rule regions:
    input:
        manifest=lambda w: regions_manifest(w.dataset),
    output:
        store="results/regions/{dataset}/{detector}.h5",
        persons=report(
            "results/regions/{dataset}/{detector}.persons.tsv",
            caption="../report/regions_persons.rst",
            category="Regions",
            subcategory="{dataset}",
        ),
    log:
        "results/logs/regions/{dataset}/{detector}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        detector=alternatives(list(REGION_DETECTORS)),
    # torch's threads for the model; as many threads decode and resize the next images meanwhile
    threads: REGIONS.get("threads", 2)
    resources:
        mem_mb=8000,
    params:
        threads=REGIONS.get("threads", 2),
        spec=lambda w: REGION_DETECTORS[w.detector],
        cache=config["cache"],
    script:
        "../scripts/regions.py"


def regions_tsv_file(w):
    """The TSV file of source ``w.source`` for ``w.dataset`` (regions/tsv/<source>/files)."""
    files = REGION_TSV[w.source].get("files", {})
    if w.dataset not in files:
        raise ValueError(f"config/config.yaml: key 'regions/tsv/{w.source}/files' names no TSV file for dataset "
                         f"'{w.dataset}' (it has {sorted(files)})")
    return files[w.dataset]


# The same store from a TSV file of released features: the manifest's images, those the file lacks
# recorded as skipped. The store records the file's sha256 (read in the same pass as the features).
rule regions_tsv:
    input:
        manifest=lambda w: regions_manifest(w.dataset),
        tsv=regions_tsv_file,
    output:
        store="results/regions/{dataset}/{source}.h5",
        persons=report(
            "results/regions/{dataset}/{source}.persons.tsv",
            caption="../report/regions_persons.rst",
            category="Regions",
            subcategory="{dataset}",
        ),
    log:
        "results/logs/regions/{dataset}/{source}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        source=alternatives(list(REGION_TSV)),
    resources:
        mem_mb=8000,
    params:
        spec=lambda w: {k: v for k, v in REGION_TSV[w.source].items() if k != "files"},
        cache=config["cache"],
    script:
        "../scripts/regions_tsv.py"
