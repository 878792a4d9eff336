# Zero-shot retrieval skew (Geyik et al. 2019; Berg et al. 2022): labelled image sets and text queries →
# MaxSkew@k, MinSkew@k and NDKL@k per joint-space model, and the bridge to each model's d. Out of the
# default target (its models need weights, its sets are the user's): `snakemake skew`. One image store per
# labelled set, one embedding store per (set, model), one table job per set. Planned in
# vlbias.suites.skew.plan; declared in vlbias.suites.skew.suite.

# the module under its own name: every rule file shares one namespace (ieat.smk has an image_store too)
from vlbias.suites.skew import plan as skew_plan

# a config without a skew section defines none of its rules (the rule file is read whatever the config)
if "skew" in config:

    SKEW = config["skew"]
    SKEW_PLAN = skew_plan.SkewPlan(config)
    SKEW_MODELS = list(SKEW["models"])

    # on a cluster these run on the submitting node: the upstream query files (a download) and the record of
    # the sets not at hand (no work)
    localrules:
        skew_queries,
        skew_skipped,

    rule skew:
        input:
            SKEW_PLAN.targets(),

    rule skew_queries:
        input:
            manifest=SKEW["prompts_manifest"],
        output:
            "results/skew/queries/{name}.csv",
        log:
            "results/logs/skew_queries/{name}.log",
        wildcard_constraints:
            name=alternatives([n for n, spec in SKEW["queries"].items() if "source" in spec]),
        conda:
            "../../environment.yml"
        params:
            spec=lambda w: SKEW["queries"][w.name],
            source=lambda w: source(SKEW["queries"][w.name]["source"]),
            mirror=mirror(),
        script:
            "../scripts/skew_queries.py"

    rule skew_images:
        input:
            labels=lambda w: (
                [SKEW["datasets"][w.dataset]["labels"]] if SKEW["datasets"][w.dataset].get("labels") else []
            ),
            manifest=lambda w: (
                [SKEW["datasets"][w.dataset]["manifest"]] if SKEW["datasets"][w.dataset]["manifest"] else []
            ),
        output:
            store=f"{skew_plan.image_store('{dataset}')}/images.h5",
            status=report(
                f"{skew_plan.image_store('{dataset}')}/manifest.tsv",
                caption="../report/skew_images.rst",
                category="Retrieval skew",
            ),
        log:
            "results/logs/skew_images/{dataset}.log",
        wildcard_constraints:
            dataset=alternatives(SKEW_PLAN.present),
        conda:
            "../../environment.yml"
        threads: 2
        params:
            spec=lambda w: SKEW["datasets"][w.dataset],
            folder=lambda w: SKEW_PLAN.folder(w.dataset),
            settings=SKEW["images"],
        script:
            "../scripts/skew_images.py"

    rule skew_embed:
        input:
            weights=record_path("skew/{model}"),
            images=f"{skew_plan.image_store('{dataset}')}/images.h5",
            queries=SKEW_PLAN.query_files(),
        output:
            skew_plan.embedding_store("{dataset}", "{model}"),
        log:
            "results/logs/skew_embed/{dataset}/{model}.log",
        wildcard_constraints:
            dataset=alternatives(SKEW_PLAN.present),
            model=alternatives(SKEW_MODELS),
        conda:
            "../../environment.yml"
        threads: SKEW["threads"]
        resources:
            mem_mb=8000,
        params:
            spec=lambda w: SKEW["models"][w.model],
            names=list(SKEW["queries"]),
            threads=SKEW["threads"],
            provenance=lambda w: provenance(SKEW["models"][w.model]),
            cache=config["cache"],
            weights_lock=config["weights_lock"],
        script:
            "../scripts/skew_embed.py"

    rule skew_table:
        input:
            stores=lambda w: [skew_plan.embedding_store(w.dataset, m) for m in SKEW_MODELS],
            status=f"{skew_plan.image_store('{dataset}')}/manifest.tsv",
            published=SKEW["published"],
        output:
            csv=report(
                "results/skew/{dataset}.csv",
                caption="../report/skew_table.rst",
                category="Retrieval skew",
                labels={"table": "{dataset}"},
            ),
            md="results/skew/{dataset}.md",
            png=report(
                "results/skew/{dataset}.png",
                caption="../report/skew_table.rst",
                category="Retrieval skew",
                labels={"table": "{dataset} (figure)"},
            ),
        log:
            "results/logs/skew_table/{dataset}.log",
        wildcard_constraints:
            dataset=alternatives(SKEW_PLAN.present),
        conda:
            "../../environment.yml"
        threads: 1
        params:
            models=SKEW_MODELS,
            spec=lambda w: SKEW["datasets"][w.dataset],
            paper={m: SKEW_PLAN.published(m) for m in SKEW_MODELS},
            settings={k: SKEW[k] for k in SKEW_PLAN.SETTINGS},
        script:
            "../scripts/skew_table.py"

    rule skew_skipped:
        output:
            skew_plan.SKIPPED,
        log:
            "results/logs/skew_skipped.log",
        conda:
            "../../environment.yml"
        params:
            absent=SKEW_PLAN.absent,
        script:
            "../scripts/skew_skipped.py"

    # each model's d on the EAT its skew is linked to (docs/skew.md), against its skew; the correlation across models
    rule skew_propagation:
        input:
            tables=expand("results/skew/{dataset}.csv", dataset=SKEW_PLAN.present),
            eat=SKEW["propagation"]["eat"],
        output:
            csv=report(
                "results/skew/propagation.csv",
                caption="../report/skew_propagation.rst",
                category="Retrieval skew",
                labels={"table": "propagation"},
            ),
            png=report(
                "results/skew/propagation.png",
                caption="../report/skew_propagation.rst",
                category="Retrieval skew",
                labels={"table": "propagation (figure)"},
            ),
        log:
            "results/logs/skew_propagation.log",
        conda:
            "../../environment.yml"
        threads: 1
        params:
            propagation=SKEW["propagation"],
            k=SKEW["propagation"]["k"] or SKEW["k"][0],
            level=SKEW["level"],
        script:
            "../scripts/skew_propagation.py"
