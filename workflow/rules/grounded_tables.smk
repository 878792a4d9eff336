# Grounded WEAT/SEAT tests (Ross et al. 2021): embeddings of each test's (caption, image) pairs on
# each vision-language model, experiments 1-3, and the paper's Tables 3-7, under each protocol
# (`authors`: what produced the printed tables; `paper`: the paper's text; docs/grounded.md).
# One embedding job per (protocol, dataset, model), one model load for all its tests (pairs cached by
# content, shared between protocols where their switches agree: an edited stimulus file re-embeds
# its new pairs only), one experiment job per (protocol, dataset, model), one job per table; one ML-EAT
# job per (protocol, dataset, model), each table's ML-EAT files assembled from them.
# Targets: results/grounded/table{3..7}.* under `grounded: protocol`, results/grounded/<protocol>/
# table{3..7}.* under every other protocol, results/grounded/comparison.{csv,md} (printed / each).
# Planned in vlbias.suites.grounded.plan (targets, inputs, paths; unit-tested in tests/suites/test_plan.py);
# declared in vlbias.suites.grounded.suite. A setting is read in a function of the job (`lambda w`):
# without a grounded section there is none to read, and no job.

# its embedding_path under its own name: the rule files share one namespace, where embedding_path is the
# iEAT and SEAT stores' (vlbias.suites.plan)
from vlbias.suites.grounded.plan import GroundedPlan, experiment_path, mleat_job_path, table_path
from vlbias.suites.grounded.plan import embedding_path as grounded_embedding_path

GROUNDED_PLAN = GroundedPlan(config)
PROTOCOLS = GROUNDED_PLAN.protocols


# on a cluster (profiles/slurm) it runs on the submitting node: it plots a table's numbers (seconds; no queue wait)
localrules:
    grounded_figures,


rule grounded_embed:
    input:
        weights=record_path("grounded/{model}"),
        stimuli=lambda w: GROUNDED_PLAN.embed_stimuli(w.protocol, w.dataset, w.model),
        regions=lambda w: GROUNDED_PLAN.embed_regions(w.protocol, w.dataset, w.model),
        manifest=lambda w: regions_manifest(w.dataset),
    output:
        h5=grounded_embedding_path("{protocol}", "{dataset}", "{model}"),
        missing=grounded_embedding_path("{protocol}", "{dataset}", "{model}", "missing.tsv"),
    log:
        "results/logs/grounded_embed/{protocol}/{dataset}/{model}.log",
    wildcard_constraints:
        protocol=alternatives(list(PROTOCOLS)),
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_PLAN.models)),
    conda:
        "../../environment.yml"
    threads: lambda w: GROUNDED["experiments"]["threads"]
    resources:
        mem_mb=8000,
    params:
        threads=lambda w: GROUNDED["experiments"]["threads"],
        spec=lambda w: GROUNDED_PLAN.embed_spec(w.protocol, w.dataset, w.model),
        switches=lambda w: PROTOCOLS[w.protocol],
        region_store=lambda w: GROUNDED_PLAN.embed_region_store(w.protocol, w.dataset, w.model),
        levels=lambda w: GROUNDED["levels"],
        masks=lambda w: GROUNDED["masks"],
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/grounded_embed.py"


rule grounded_experiment:
    input:
        grounded_embedding_path("{protocol}", "{dataset}", "{model}"),
    output:
        experiment_path("{protocol}", "{dataset}", "{model}"),
    log:
        "results/logs/grounded_experiment/{protocol}/{dataset}/{model}.log",
    wildcard_constraints:
        protocol=alternatives(list(PROTOCOLS)),
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_PLAN.models)),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        stats=stats_params(),
        masked_statistic=lambda w: PROTOCOLS[w.protocol]["masked_statistic"],
    script:
        "../scripts/grounded_experiment.py"


rule grounded_table:
    input:
        results=lambda w: GROUNDED_PLAN.table_spec(w.target)["results"],
        missing=lambda w: GROUNDED_PLAN.table_spec(w.target)["missing"],
        published=GROUNDED_PLAN.published,
    output:
        csv=table_path("{target}", "csv"),
        md=table_path("{target}", "md"),
        tex=table_path("{target}", "tex"),
        html=report(
            table_path("{target}", "html"),
            caption="../report/grounded_tables.rst",
            category="Grounded",
            subcategory="Tables",
            labels={"table": "{target}"},
        ),
        rows=table_path("{target}", "rows.csv"),
        missing=table_path("{target}", "missing.tsv"),
    log:
        "results/logs/grounded_table/{target}.log",
    wildcard_constraints:
        target=alternatives(list(GROUNDED_PLAN.table_targets)),
    conda:
        "../../environment.yml"
    params:
        spec=lambda w: {k: v for k, v in GROUNDED_PLAN.table_spec(w.target).items() if k not in ("results", "missing")},
    script:
        "../scripts/grounded_table.py"


# the ML-EAT of each test at each level that any table reads from one embedding file (experiment 1's sets:
# the attributes pooled over both image categories), computed once: results/grounded/mleat/jobs/...json
rule grounded_mleat_job:
    input:
        grounded_embedding_path("{protocol}", "{dataset}", "{model}"),
    output:
        mleat_job_path("{protocol}", "{dataset}", "{model}"),
    log:
        "results/logs/grounded_mleat_job/{protocol}/{dataset}/{model}.log",
    wildcard_constraints:
        protocol=alternatives(list(PROTOCOLS)),
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_PLAN.models)),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        tests=lambda w: GROUNDED_PLAN.mleat_job_tests(w.protocol, w.dataset, w.model),
        levels=lambda w: GROUNDED["levels"],
        stats=stats_params(),
        mleat=mleat_params(),
    script:
        "../scripts/grounded_mleat_job.py"


# a table's ML-EAT files, assembled from its embedding files' ML-EAT job results (nothing recomputed):
# results/grounded/mleat/<target>.* (vlbias.report.mleat; docs/mleat.md)
rule grounded_mleat:
    input:
        results=lambda w: GROUNDED_PLAN.mleat_spec(w.target)["results"],
    output:
        csv=mleat_path("grounded", "{target}"),
        html=report(
            mleat_path("grounded", "{target}", "html"),
            caption="../report/mleat_table.rst",
            category="Grounded",
            subcategory="ML-EAT",
            labels={"table": "{target}", "file": "table and figures"},
        ),
        png=report(
            mleat_path("grounded", "{target}", "png"),
            caption="../report/mleat_summary.rst",
            category="Grounded",
            subcategory="ML-EAT",
            labels={"table": "{target}", "file": "pattern summary"},
        ),
        maps=report(
            directory(mleat_path("grounded", "{target}", "maps")),
            patterns=["{eat_test}/{eat_model}.png"],
            caption="../report/mleat_map.rst",
            category="Grounded",
            subcategory="EAT-Maps",
            labels={"table": "{target}", "test": "{eat_test}", "model": "{eat_model}"},
        ),
    log:
        "results/logs/grounded_mleat/{target}.log",
    wildcard_constraints:
        target=alternatives(list(GROUNDED_PLAN.table_targets)),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        tests=lambda w: GROUNDED_PLAN.mleat_spec(w.target)["tests"],
        title=lambda w: f"ML-EAT of grounded {w.target}",
        caption=lambda w: GROUNDED_PLAN.mleat_spec(w.target)["caption"],
    script:
        "../scripts/grounded_mleat.py"


rule grounded_comparison:
    input:
        results=lambda w: GROUNDED_PLAN.experiment_results(),
        published=GROUNDED_PLAN.published,
    output:
        csv=report("results/grounded/comparison.csv", caption="../report/grounded_comparison.rst", category="Grounded"),
        md="results/grounded/comparison.md",
    log:
        "results/logs/grounded_comparison.log",
    conda:
        "../../environment.yml"
    params:
        protocols=list(PROTOCOLS),
        alpha=lambda w: GROUNDED["experiments"]["alpha"],
    script:
        "../scripts/grounded_comparison.py"


# the figures of the main protocol's tables: results/grounded/{heatmap,published}.png
# (vlbias.suites.grounded.suite.FIGURES)
rule grounded_figures:
    input:
        results=lambda w: existing(GROUNDED_PLAN.main_results()),
        published=GROUNDED_PLAN.published,
    output:
        heatmap="results/grounded/heatmap.png",
        # shown in the report as a page (vlbias.report.html.figure_page)
        page=report(
            "results/grounded/heatmap.html",
            caption="../report/grounded_heatmap.rst",
            category="Grounded",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
        published=report(
            "results/grounded/published.png",
            caption="../report/grounded_published.rst",
            category="Grounded",
            subcategory="Figures",
            labels={"figure": "published vs reproduced d"},
        ),
    log:
        "results/logs/grounded_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        columns=lambda w: GROUNDED["experiments"]["columns"],
        levels=lambda w: GROUNDED["levels"],
        groups=lambda w: GROUNDED_PLAN.figure_groups(),
    script:
        "../scripts/grounded_figures.py"
