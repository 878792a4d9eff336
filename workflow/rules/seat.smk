# SEAT/WEAT (May et al. 2019): word and sentence stimuli on text encoders. One embedding job per
# model (every test's texts; cached by content, so an edited test re-encodes its new texts only), or
# per set of a user's own vectors, and one table job per model (all its tests' statistics in one process).


seat_targets = partial(seat_plan.targets, config)


rule seat_embed:
    input:
        weights=record_path("seat/{model}"),
        stimuli=lambda w: [checked_stimulus("seat", t) for t in seat_tests(w.model)],
    output:
        "results/embeddings/seat/{model}.h5",
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
        stimuli=lambda w: [checked_stimulus("seat", t) for t in seat_tests(w.model)],
    output:
        "results/embeddings/seat/{model}.h5",
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
        store="results/embeddings/seat/{model}.h5",
        stimuli=lambda w: [checked_stimulus("seat", t) for t in seat_tests(w.model)],
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
    log:
        "results/logs/seat_table/{model}.log",
    conda:
        "../../environment.yml"
    threads: 2
    params:
        stats=stats_params(),
        ci=STATS["ci"],
        caption=lambda w: f"Word- and sentence-level WEAT/SEAT (May et al. 2019) on {w.model}",
    script:
        "../scripts/seat_table.py"
