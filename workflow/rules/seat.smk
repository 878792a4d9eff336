# SEAT/WEAT (May et al. 2019): word and sentence stimuli on text encoders. One embedding job per
# model (every test's texts; cached by content, so an edited test re-encodes its new texts only), or
# per set of a user's own vectors, and one table job per model (all its tests' statistics in one process).
# Planned in vlbias.suites.seat.plan; declared in vlbias.suites.seat.suite.

from functools import cache

from vlbias.suites.seat import plan as seat_plan

SEAT = config["seat"]
SEAT_VECTOR_MODELS = [m for m, spec in SEAT["models"].items() if spec["source"] == "vectors"]
seat_stimuli = cache(partial(seat_plan.stimuli, config))  # checked once per model


# on a cluster (profiles/slurm) these run on the submitting node: they copy vectors or plot a table's
# numbers (seconds; no queue wait)
localrules:
    seat_vectors,
    seat_figures,


rule seat_embed:
    input:
        weights=record_path("seat/{model}"),
        stimuli=lambda w: seat_stimuli(w.model),
    output:
        embedding_path("seat", "{model}"),
    log:
        "results/logs/seat_embed/{model}.log",
    wildcard_constraints:
        model=alternatives([m for m in SEAT["models"] if m not in SEAT_VECTOR_MODELS]),
    conda:
        "../../environment.yml"
    # seat/threads (default 1: short texts, one thread each for this and another job uses two cores
    # better than two threads here); torch's threads come from params.threads, never the job's cores
    threads: SEAT["threads"]
    resources:
        mem_mb=4000,
    params:
        spec=lambda w: SEAT["models"][w.model],
        threads=SEAT["threads"],
        provenance=lambda w: provenance(SEAT["models"][w.model]),
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/seat_embed.py"


rule seat_vectors:
    input:
        vectors=lambda w: vector_files(SEAT["models"][w.model]),
        stimuli=lambda w: seat_stimuli(w.model),
    output:
        embedding_path("seat", "{model}"),
    log:
        "results/logs/seat_vectors/{model}.log",
    wildcard_constraints:
        model=alternatives(SEAT_VECTOR_MODELS),
    conda:
        "../../environment.yml"
    params:
        spec=lambda w: SEAT["models"][w.model],
        provenance=lambda w: provenance(SEAT["models"][w.model]),
    script:
        "../scripts/vectors_store.py"


rule seat_table:
    input:
        store=embedding_path("seat", "{model}"),
        stimuli=lambda w: seat_stimuli(w.model),
    output:
        csv="results/seat/{model}/table.csv",
        md="results/seat/{model}/table.md",
        html=report(
            "results/seat/{model}/table.html",
            caption="../report/seat_table.rst",
            category="SEAT",
            subcategory="Tables",
            labels={"model": "{model}"},
        ),
        rows="results/seat/{model}/table.rows.json",  # at full precision: the ML-EAT reads Level 1 there
    log:
        "results/logs/seat_table/{model}.log",
    wildcard_constraints:
        model=alternatives(list(SEAT["models"])),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        stats=stats_params(),
        ci=STATS["ci"],
        caption=lambda w: seat_plan.caption(w.model),
    script:
        "../scripts/seat_table.py"


# the ML-EAT of a model's tests: results/seat/mleat/<model>.* (vlbias.report.mleat; docs/mleat.md)
rule seat_mleat:
    input:
        stores=[embedding_path("seat", "{model}")],
        stimuli=lambda w: seat_stimuli(w.model),
        rows=["results/seat/{model}/table.rows.json"],
    output:
        csv=mleat_path("seat", "{model}"),
        html=report(
            mleat_path("seat", "{model}", "html"),
            caption="../report/mleat_table.rst",
            category="SEAT",
            subcategory="ML-EAT",
            labels={"model": "{model}", "file": "table and figures"},
        ),
        png=report(
            mleat_path("seat", "{model}", "png"),
            caption="../report/mleat_summary.rst",
            category="SEAT",
            subcategory="ML-EAT",
            labels={"model": "{model}", "file": "pattern summary"},
        ),
        maps=report(
            directory(mleat_path("seat", "{model}", "maps")),
            patterns=["{eat_test}/{eat_model}.png"],
            caption="../report/mleat_map.rst",
            category="SEAT",
            subcategory="EAT-Maps",
            labels={"model": "{model}", "test": "{eat_test}"},
        ),
    log:
        "results/logs/seat_mleat/{model}.log",
    wildcard_constraints:
        model=alternatives(list(SEAT["models"])),
    conda:
        "../../environment.yml"
    threads: 2
    params:
        models=lambda w: [w.model],
        title=lambda w: f"ML-EAT of WEAT/SEAT on {w.model}",
        caption=lambda w: seat_plan.caption(w.model),
        stats=stats_params(),
        ci=STATS["ci"],
        mleat=mleat_params(),
    script:
        "../scripts/mleat_table.py"


# the heatmap of every model's table: results/seat/heatmap.png (vlbias.suites.seat.suite.HEATMAP)
rule seat_figures:
    input:
        unpack(lambda w: existing({model: f"results/seat/{model}/table.csv" for model in SEAT["models"]})),
    output:
        heatmap="results/seat/heatmap.png",
        # shown in the report as a page (vlbias.report.html.figure_page)
        page=report(
            "results/seat/heatmap.html",
            caption="../report/seat_heatmap.rst",
            category="SEAT",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
    log:
        "results/logs/seat_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        title="WEAT/SEAT",
    script:
        "../scripts/suite_figures.py"
