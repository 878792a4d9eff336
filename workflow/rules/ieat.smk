# iEAT (Steed & Caliskan 2021): image stimuli and embeddings → tables 1-3, the specificity check and the
# sweep. One image store per (size, crop, resampling) the models need, one embedding store per
# model (all image categories, and the text sets of its cross-modal tests), one job per table (all its
# tests' statistics in one process). Planned in vlbias.suites.ieat.plan; declared in vlbias.suites.ieat.suite.

from vlbias.suites.ieat.plan import SPECIFICITY_CAPTION, IeatPlan

IEAT = config["ieat"]
IEAT_PLAN = IeatPlan(config)
IEAT_TABLES = IEAT_PLAN.tables
IEAT_MODELS = IEAT_PLAN.models  # ieat/models and the sweep's entries
SWEEP_MODELS = IEAT_PLAN.sweep_models
IMAGE_STORES = IEAT_PLAN.image_stores_settings  # every image store a model reads, and the default one
image_store = IEAT_PLAN.image_store
image_stores = IEAT_PLAN.image_stores
table_stimuli = IEAT_PLAN.table_stimuli


# on a cluster (profiles/slurm) these run on the submitting node: the downloads (compute nodes often
# have no network) and the copies of vectors and plots of a table's numbers (seconds; no queue wait)
localrules:
    ieat_images,
    ieat_published_embeddings,
    ieat_output_store,
    ieat_vectors,
    ieat_figures,


rule ieat_published_embeddings:
    input:
        manifest=IEAT["embeddings_manifest"],
    output:
        embedding_path("ieat", "{model}"),
    log:
        "results/logs/ieat_published_embeddings/{model}.log",
    wildcard_constraints:
        model=alternatives(IEAT_PLAN.published_models),
    conda:
        "../../environment.yml"
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
        store="results/images/ieat/{store}/images.h5",
        status=report(
            "results/images/ieat/{store}/manifest.tsv",
            caption="../report/ieat_images.rst",
            category="iEAT",
        ),
    log:
        "results/logs/ieat_images/{store}.log",
    wildcard_constraints:
        store=alternatives(list(IMAGE_STORES)),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        settings=lambda w: IMAGE_STORES[w.store],
        source=source("ieat"),
        mirror=mirror(),
        cache=config["cache"],
    script:
        "../scripts/ieat_images.py"


rule ieat_embed_images:
    input:
        weights=record_path("ieat/{model}"),
        images=lambda w: f"{image_store(w.model)}/images.h5",
        stimuli=lambda w: IEAT_PLAN.text_stimuli(w.model),
    output:
        embedding_path("ieat", "{model}"),
    log:
        "results/logs/ieat_embed_images/{model}.log",
    wildcard_constraints:
        model=alternatives(IEAT_PLAN.image_models),
    conda:
        "../../environment.yml"
    threads: IEAT["threads"]
    resources:
        mem_mb=8000,
    params:
        spec=lambda w: IEAT_MODELS[w.model],
        threads=IEAT["threads"],
        provenance=lambda w: provenance(IEAT_MODELS[w.model]),
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/embed_images.py"


# a model with several outputs (iGPT's layers and logits from one pass): each output a store of its own
rule ieat_output_store:
    input:
        embedding_path("ieat", "{model}"),
    output:
        embedding_path("ieat", "{model}/{output}"),
    log:
        "results/logs/ieat_output_store/{model}/{output}.log",
    wildcard_constraints:
        model=alternatives(list(IEAT_PLAN.several_outputs)),
        output=alternatives(sorted({o for names in IEAT_PLAN.several_outputs.values() for o in names})),
    conda:
        "../../environment.yml"
    script:
        "../scripts/ieat_output_store.py"


rule ieat_vectors:
    input:
        vectors=lambda w: vector_files(IEAT_MODELS[w.model]),
        manifest=IEAT["images"]["manifest"],
        stimuli=lambda w: [IEAT_PLAN.checked_stimulus("ieat", t) for t in IEAT_PLAN.model_tests(w.model)],
    output:
        embedding_path("ieat", "{model}"),
    log:
        "results/logs/ieat_vectors/{model}.log",
    wildcard_constraints:
        model=alternatives(IEAT_PLAN.vector_models),
    conda:
        "../../environment.yml"
    params:
        spec=lambda w: IEAT_MODELS[w.model],
        provenance=lambda w: provenance(IEAT_MODELS[w.model]),
    script:
        "../scripts/vectors_store.py"


rule ieat_table:
    input:
        stores=lambda w: [embedding_path("ieat", m) for m in IEAT_TABLES[w.table]["models"]],
        stimuli=lambda w: table_stimuli(IEAT_TABLES[w.table]["tests"], IEAT_TABLES[w.table]["models"]),
        published=IEAT["published"],
        images=lambda w: sorted(set(image_stores(IEAT_TABLES[w.table]["models"]).values())),
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
        rows="results/ieat/{table}.rows.json",  # at full precision: the ML-EAT reads Level 1 there
    log:
        "results/logs/ieat_table/{table}.log",
    wildcard_constraints:
        table=alternatives(list(IEAT_TABLES)),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        table=lambda w: w.table,
        caption=lambda w: IEAT_TABLES[w.table]["caption"],
        models=lambda w: IEAT_TABLES[w.table]["models"],
        image_stores=lambda w: image_stores(IEAT_TABLES[w.table]["models"]),
        paper=lambda w: {m: IEAT_PLAN.paper_name(m) for m in IEAT_TABLES[w.table]["models"]},
        stats=stats_params(),
        ci=STATS["ci"],
    script:
        "../scripts/ieat_table.py"


# the models of ieat/sweep (open_clip, hf_dual, ...) over its tests (the iEAT suite and the cross-modal tests): one
# table, tests x models, and its heatmap
rule ieat_sweep:
    input:
        stores=lambda w: [embedding_path("ieat", m) for m in SWEEP_MODELS],
        stimuli=lambda w: table_stimuli(IEAT_PLAN.sweep_tests(), SWEEP_MODELS),
        images=lambda w: sorted(set(image_stores(SWEEP_MODELS).values())),
    output:
        csv=report(
            "results/ieat/sweep.csv",
            caption="../report/ieat_sweep.rst",
            category="iEAT",
            subcategory="Tables",
            labels={"table": "sweep"},
        ),
        md="results/ieat/sweep.md",
        png=report(
            "results/ieat/sweep.png",
            caption="../report/ieat_sweep.rst",
            category="iEAT",
            subcategory="Figures",
            labels={"figure": "sweep (heatmap)"},
        ),
        missing="results/ieat/sweep.missing.tsv",
    log:
        "results/logs/ieat_sweep.log",
    conda:
        "../../environment.yml"
    threads: 2
    params:
        caption=IEAT["sweep"]["caption"],
        models=SWEEP_MODELS,
        image_stores=lambda w: image_stores(SWEEP_MODELS),
        stats=stats_params(),
    script:
        "../scripts/ieat_sweep.py"


# the ML-EAT of a table's tests (the sweep's too): its three levels and pattern per test and model, the
# pattern summary, an EAT-Map per (test, model) and the report's page (vlbias.report.mleat; docs/mleat.md)
rule ieat_mleat:
    input:
        stores=lambda w: [embedding_path("ieat", m) for m in IEAT_PLAN.mleat_table(w.table)[1]],
        stimuli=lambda w: table_stimuli(*IEAT_PLAN.mleat_table(w.table)[:2]),
        # the table job's rows (Level 1 at full precision); the sweep's job writes none
        rows=lambda w: [f"results/ieat/{w.table}.rows.json"] if w.table in IEAT_TABLES else [],
    output:
        csv=mleat_path("ieat", "{table}"),
        html=report(
            mleat_path("ieat", "{table}", "html"),
            caption="../report/mleat_table.rst",
            category="iEAT",
            subcategory="ML-EAT",
            labels={"table": "{table}", "file": "table and figures"},
        ),
        png=report(
            mleat_path("ieat", "{table}", "png"),
            caption="../report/mleat_summary.rst",
            category="iEAT",
            subcategory="ML-EAT",
            labels={"table": "{table}", "file": "pattern summary"},
        ),
        maps=report(
            directory(mleat_path("ieat", "{table}", "maps")),
            patterns=["{eat_test}/{eat_model}.png"],
            caption="../report/mleat_map.rst",
            category="iEAT",
            subcategory="EAT-Maps",
            labels={"table": "{table}", "test": "{eat_test}", "model": "{eat_model}"},
        ),
    log:
        "results/logs/ieat_mleat/{table}.log",
    wildcard_constraints:
        table=alternatives([*IEAT_TABLES, "sweep"]),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        models=lambda w: IEAT_PLAN.mleat_table(w.table)[1],
        title=lambda w: f"ML-EAT of iEAT {w.table}",
        caption=lambda w: IEAT_PLAN.mleat_table(w.table)[2],
        stats=stats_params(),
        ci=STATS["ci"],
        mleat=mleat_params(),
    script:
        "../scripts/mleat_table.py"


rule ieat_specificity:
    input:
        stimulus=lambda w: table_stimuli([IEAT["specificity"]["test"]], IEAT["specificity"]["models"])[0],
        stores=[embedding_path("ieat", m) for m in IEAT["specificity"]["models"]],
    output:
        csv="results/ieat/specificity.csv",
        # a page in the report (a CSV there is a download)
        html=report(
            "results/ieat/specificity.html",
            caption="../report/ieat_specificity.rst",
            category="iEAT",
        ),
    log:
        "results/logs/ieat_specificity.log",
    conda:
        "../../environment.yml"
    threads: 2
    params:
        models=IEAT["specificity"]["models"],
        n_tests=IEAT["specificity"]["n_tests"],
        n_samples=IEAT["specificity"]["n_samples"],
        alphas=IEAT["specificity"]["alphas"],
        seed=STATS["seed"],
        caption=SPECIFICITY_CAPTION,
    script:
        "../scripts/ieat_specificity.py"


# the figures of every table: results/ieat/{heatmap,published}.png (vlbias.suites.ieat.suite.FIGURES)
rule ieat_figures:
    input:
        unpack(lambda w: existing({table: f"results/ieat/{table}.csv" for table in IEAT_TABLES})),
    output:
        heatmap="results/ieat/heatmap.png",
        # shown in the report as a page (vlbias.report.html.figure_page)
        page=report(
            "results/ieat/heatmap.html",
            caption="../report/ieat_heatmap.rst",
            category="iEAT",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
        published=report(
            "results/ieat/published.png",
            caption="../report/ieat_published.rst",
            category="iEAT",
            subcategory="Figures",
            labels={"figure": "published vs reproduced d"},
        ),
    log:
        "results/logs/ieat_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        title="iEAT",
    script:
        "../scripts/suite_figures.py"
