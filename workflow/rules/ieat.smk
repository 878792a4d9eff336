# iEAT (Steed & Caliskan 2021): image stimuli and embeddings → tables 1-3 and the specificity check.


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
    script:
        "../scripts/embed_images.py"


rule ieat_table:
    input:
        rows=lambda w: expand(
            "results/ieat/{model}/{test}.csv",
            model=ieat_table_models(w.table),
            test=IEAT_TABLES[w.table]["tests"],
        ),
        published=IEAT["published"],
        stimuli=lambda w: expand(f"{IEAT['stimuli']}/{{test}}.yaml", test=IEAT_TABLES[w.table]["tests"]),
        images=lambda w: (
            ["results/images/ieat/manifest.tsv"]
            if set(ieat_table_models(w.table)) & set(IMAGE_MODELS)
            else []
        ),
    output:
        csv=report(
            "results/ieat/{table}.csv",
            caption="../report/ieat_table.rst",
            category="iEAT",
            subcategory="{table}",
        ),
        md="results/ieat/{table}.md",
        missing="results/ieat/{table}.missing.tsv",
    log:
        "results/logs/ieat_table/{table}.log",
    params:
        table=lambda w: w.table,
        caption=lambda w: IEAT_TABLES[w.table]["caption"],
        tests=lambda w: IEAT_TABLES[w.table]["tests"],
        models=lambda w: ieat_table_models(w.table),
        image_models=IMAGE_MODELS,
    script:
        "../scripts/ieat_table.py"


rule ieat_specificity:
    input:
        stimulus=f"{IEAT['stimuli']}/{IEAT['specificity']['test']}.yaml",
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
