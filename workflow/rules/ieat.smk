# iEAT (Steed & Caliskan 2021): image stimuli and embeddings → tables 1-3 and the specificity check.
# One embedding store per model (all image categories), one job per table (all its tests' statistics
# in one process).


def ieat_targets():
    targets = expand("results/ieat/{table}.{ext}", table=IEAT_TABLES, ext=["csv", "md", "html", "missing.tsv"])
    if IEAT["specificity"]["models"]:
        targets.append("results/ieat/specificity.csv")
    if IEAT["build_images"]:
        targets.append("results/images/ieat/manifest.tsv")
    return targets


rule ieat_published_embeddings:
    input:
        manifest=IEAT["embeddings_manifest"],
    output:
        "results/embeddings/ieat/{model}.h5",
    log:
        "results/logs/ieat_published_embeddings/{model}.log",
    wildcard_constraints:
        model=alternatives(PUBLISHED_MODELS),
    params:
        file=lambda w: IEAT["models"][w.model]["file"],
        provenance=lambda w: provenance(IEAT["models"][w.model]) | {"weights": "published embeddings"},
        source=source("ieat"),
        mirror=mirror(),
        cache=config["cache"],
    script:
        "../scripts/ieat_published_embeddings.py"


rule ieat_images:
    input:
        manifest=IEAT["images"]["manifest"],
    output:
        store="results/images/ieat/images.h5",
        status=report(
            "results/images/ieat/manifest.tsv",
            caption="../report/ieat_images.rst",
            category="iEAT",
        ),
    log:
        "results/logs/ieat_images.log",
    threads: 2
    params:
        size=IEAT["images"]["size"],
        crop=IEAT["images"]["crop"],
        source=source("ieat"),
        mirror=mirror(),
        cache=config["cache"],
    script:
        "../scripts/ieat_images.py"


rule ieat_embed_images:
    input:
        "results/images/ieat/images.h5",
    output:
        "results/embeddings/ieat/{model}.h5",
    log:
        "results/logs/ieat_embed_images/{model}.log",
    wildcard_constraints:
        model=alternatives(IMAGE_MODELS),
    threads: 2
    resources:
        mem_mb=8000,
    params:
        spec=lambda w: IEAT["models"][w.model],
        provenance=lambda w: provenance(IEAT["models"][w.model]),
        cache=config["cache"],
    script:
        "../scripts/embed_images.py"


rule ieat_table:
    input:
        stores=lambda w: expand("results/embeddings/ieat/{model}.h5", model=IEAT_TABLES[w.table]["models"]),
        stimuli=lambda w: [checked_stimulus("ieat", t) for t in IEAT_TABLES[w.table]["tests"]],
        published=IEAT["published"],
        images=lambda w: (
            ["results/images/ieat/manifest.tsv"] if set(IEAT_TABLES[w.table]["models"]) & set(IMAGE_MODELS) else []
        ),
    output:
        csv="results/ieat/{table}.csv",
        md="results/ieat/{table}.md",
        html=report(
            "results/ieat/{table}.html",
            caption="../report/ieat_table.rst",
            category="iEAT",
            subcategory="Tables",
            labels={"table": "{table}"},
        ),
        missing="results/ieat/{table}.missing.tsv",
    log:
        "results/logs/ieat_table/{table}.log",
    threads: 2
    params:
        table=lambda w: w.table,
        caption=lambda w: IEAT_TABLES[w.table]["caption"],
        models=lambda w: IEAT_TABLES[w.table]["models"],
        image_models=IMAGE_MODELS,
        stats=stats_params(),
        ci=STATS["ci"],
    script:
        "../scripts/ieat_table.py"


rule ieat_specificity:
    input:
        stimulus=lambda w: checked_stimulus("ieat", IEAT["specificity"]["test"]),
        stores=expand("results/embeddings/ieat/{model}.h5", model=IEAT["specificity"]["models"]),
    output:
        report(
            "results/ieat/specificity.csv",
            caption="../report/ieat_specificity.rst",
            category="iEAT",
        ),
    log:
        "results/logs/ieat_specificity.log",
    threads: 2
    params:
        models=IEAT["specificity"]["models"],
        n_tests=IEAT["specificity"]["n_tests"],
        n_samples=IEAT["specificity"]["n_samples"],
        alphas=IEAT["specificity"]["alphas"],
        seed=STATS["seed"],
    script:
        "../scripts/ieat_specificity.py"
