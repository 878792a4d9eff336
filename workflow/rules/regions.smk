# Region features from a Faster R-CNN detector, one HDF5 file per (dataset, detector).
# The images come from a dataset's acquisition manifest (by default the grounded image rules').
# Each image's regions are cached by content: new images in the manifest are the only ones detected.

REGIONS = config.get("regions") or {}
REGION_DETECTORS = REGIONS.get("detectors", {})


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
