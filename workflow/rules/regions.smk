# Region features from a Faster R-CNN detector, one HDF5 file per (dataset, detector).
# The images come from a dataset's acquisition manifest (by default the grounded image rules').
# Each image's regions are cached by content: new images in the manifest are the only ones detected.
# Or read from a TSV file of released features (regions/tsv; rule regions_tsv).
# Planned in vlbias.regions.plan; declared in vlbias.suites.regions (a stage, not a suite).

from vlbias.regions.plan import RegionsPlan, store_path

REGIONS_PLAN = RegionsPlan(config)
REGIONS = REGIONS_PLAN.regions
REGION_DETECTORS = REGIONS_PLAN.detectors
REGION_TSV = REGIONS_PLAN.tsv
regions_manifest = REGIONS_PLAN.manifest


rule regions:
    input:
        weights=record_path("regions/{detector}"),
        manifest=lambda w: regions_manifest(w.dataset),
    output:
        store=store_path("{dataset}", "{detector}"),
        persons=report(
            store_path("{dataset}", "{detector}", "persons.tsv"),
            caption="../report/regions_persons.rst",
            category="Regions",
            subcategory="{dataset}",
        ),
    log:
        "results/logs/regions/{dataset}/{detector}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        detector=alternatives(list(REGION_DETECTORS)),
    # ahead of other ready jobs: every grounded embedding and MLM job of the dataset waits for its store
    priority: 1
    conda:
        "../../environment.yml"
    # torch's threads for the model; as many threads decode and resize the next images meanwhile
    threads: lambda w: REGIONS["threads"]
    resources:
        mem_mb=8000,
    params:
        threads=lambda w: REGIONS["threads"],
        spec=lambda w: REGION_DETECTORS[w.detector],
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/regions.py"


# The same store from a TSV file of released features: the manifest's images, those the file lacks
# recorded as skipped. The store records the file's sha256 (read in the same pass as the features).
rule regions_tsv:
    input:
        manifest=lambda w: regions_manifest(w.dataset),
        tsv=lambda w: REGIONS_PLAN.tsv_file(w.source, w.dataset),
    output:
        store=store_path("{dataset}", "{source}"),
        persons=report(
            store_path("{dataset}", "{source}", "persons.tsv"),
            caption="../report/regions_persons.rst",
            category="Regions",
            subcategory="{dataset}",
        ),
    log:
        "results/logs/regions/{dataset}/{source}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        source=alternatives(list(REGION_TSV)),
    conda:
        "../../environment.yml"
    resources:
        # the reader streams (each image written as it is parsed): ~100 MiB whatever the file's size
        mem_mb=1000,
    params:
        spec=lambda w: {k: v for k, v in REGION_TSV[w.source].items() if k != "files"},
        cache=config["cache"],
    script:
        "../scripts/regions_tsv.py"
