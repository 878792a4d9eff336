# Grounded-WEAT/SEAT (Ross et al. 2021): image acquisition and the dataset table (paper Table 1).
# One job per dataset obtains its images (cached: a rerun asks only for what is not there yet).
# Planned in vlbias.suites.grounded.plan (GroundedImagesPlan); declared in vlbias.suites.grounded.suite.

from vlbias.suites.grounded.plan import GroundedImagesPlan

GROUNDED = config.get("grounded")  # None: no grounded section, no job of these rules
GROUNDED_IMAGES = GroundedImagesPlan(config)
GROUNDED_DATASETS = GROUNDED_IMAGES.datasets


# on a cluster (profiles/slurm) it runs on the submitting node: it downloads (compute nodes often have no network)
localrules:
    grounded_images,


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
    conda:
        "../../environment.yml"
    # downloads wait on the network, not the CPU: `download.workers` threads share one core
    threads: 1
    params:
        tests=lambda w: GROUNDED_IMAGES.tests(w.dataset),
        cache=lambda w: GROUNDED_IMAGES.folder(config["cache"], w.dataset),
        mirror=lambda w: mirror() and GROUNDED_IMAGES.folder(mirror(), w.dataset),
        mirror_layout=lambda w: GROUNDED_DATASETS[w.dataset]["mirror_layout"],
        download=lambda w: GROUNDED["images"]["download"],
    script:
        "../scripts/grounded_images.py"


rule grounded_table1:
    input:
        summaries=expand("results/images/grounded/{dataset}/summary.tsv", dataset=GROUNDED_DATASETS),
        failures=expand("results/images/grounded/{dataset}/failures.tsv", dataset=GROUNDED_DATASETS),
        published=lambda w: GROUNDED["table1"]["published"],
    output:
        csv="results/grounded/table1.csv",
        md="results/grounded/table1.md",
        tex="results/grounded/table1.tex",
        html=report(
            "results/grounded/table1.html",
            caption="../report/grounded_table1.rst",
            category="Grounded",
            subcategory="Tables",
            labels={"table": "table1"},
        ),
    log:
        "results/logs/grounded_table1.log",
    conda:
        "../../environment.yml"
    params:
        datasets=list(GROUNDED_DATASETS),
    script:
        "../scripts/grounded_table1.py"
