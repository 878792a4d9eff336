# Grounded-WEAT/SEAT (Ross et al. 2021): image acquisition and the dataset table (paper Table 1).
# One job per dataset obtains its images (cached: a rerun asks only for what is not there yet).

from functools import cache

GROUNDED = config.get("grounded") or {}
GROUNDED_DATASETS = GROUNDED["images"]["datasets"] if GROUNDED else {}


@cache
def grounded_tests(dataset):
    """The tests of ``dataset`` to obtain: all in its manifest (in manifest order) or those listed."""
    spec = GROUNDED_DATASETS[dataset]
    listed = list(dict.fromkeys(r["test"] for r in read_manifest(spec["manifest"])))
    if spec.get("tests", "all") == "all":
        return listed
    unknown = sorted(set(spec["tests"]) - set(listed))
    if unknown:
        raise ValueError(f"config/config.yaml: key 'grounded/images/datasets/{dataset}/tests' names tests that "
                         f"{spec['manifest']} does not list: {unknown}")
    return list(spec["tests"])


def grounded_source(dataset):
    """The upstream repository that holds ``dataset``'s images, or None (``source: null``: the
    manifest's URLs point at the images' own site, e.g. images.cocodataset.org)."""
    name = GROUNDED_DATASETS[dataset].get("source", "grounded")
    return None if name is None else source(name)


def grounded_dir(root, dataset):
    """Where ``dataset``'s images lie below ``root`` (the mirror or the cache): as upstream, or
    ``<root>/<mirror_dir>`` for a dataset in no upstream repository."""
    src = grounded_source(dataset)
    return str(Path(root, *([src.mirror_name] if src else []), GROUNDED_DATASETS[dataset]["mirror_dir"]))


def grounded_targets():
    if not GROUNDED:
        return []
    targets = expand("results/images/grounded/{dataset}/{name}.tsv", dataset=GROUNDED_DATASETS,
                     name=["manifest", "failures", "summary"])
    return targets + expand("results/grounded/table1.{ext}", ext=["csv", "md", "tex", "html"])


rule grounded_images:
    input:
        manifest=lambda w: GROUNDED_DATASETS[w.dataset]["manifest"],
    output:
        manifest=report(
            "results/images/grounded/{dataset}/manifest.tsv",
            caption="../report/grounded_images.rst",
            category="Grounded",
            subcategory="{dataset}",
        ),
        failures=report(
            "results/images/grounded/{dataset}/failures.tsv",
            caption="../report/grounded_failures.rst",
            category="Grounded",
            subcategory="{dataset}",
        ),
        summary="results/images/grounded/{dataset}/summary.tsv",
    log:
        "results/logs/grounded_images/{dataset}.log",
    wildcard_constraints:
        dataset=alternatives(list(GROUNDED_DATASETS)),
    # downloads wait on the network, not the CPU: `download.workers` threads share one core
    threads: 1
    params:
        tests=lambda w: grounded_tests(w.dataset),
        cache=lambda w: grounded_dir(config["cache"], w.dataset),
        mirror=lambda w: mirror() and grounded_dir(mirror(), w.dataset),
        mirror_layout=lambda w: GROUNDED_DATASETS[w.dataset].get("mirror_layout", "tests"),
        download=GROUNDED.get("images", {}).get("download", {}),
    script:
        "../scripts/grounded_images.py"


rule grounded_table1:
    input:
        summaries=expand("results/images/grounded/{dataset}/summary.tsv", dataset=GROUNDED_DATASETS),
        published=GROUNDED.get("table1", {}).get("published", []),
    output:
        csv="results/grounded/table1.csv",
        md="results/grounded/table1.md",
        tex="results/grounded/table1.tex",
        html=report("results/grounded/table1.html", caption="../report/grounded_table1.rst", category="Grounded",
                    subcategory="Tables", labels={"table": "table1"}),
    log:
        "results/logs/grounded_table1.log",
    params:
        datasets=list(GROUNDED_DATASETS),
    script:
        "../scripts/grounded_table1.py"
