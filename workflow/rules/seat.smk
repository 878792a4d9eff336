# SEAT/WEAT (May et al. 2019): word and sentence stimuli on text encoders.


rule seat_embed:
    input:
        stimulus=f"{SEAT['stimuli']}/{{test}}.yaml",
    output:
        "results/embeddings/seat/{model}/{test}.h5",
    log:
        "results/logs/seat_embed/{model}/{test}.log",
    params:
        spec=lambda w: SEAT["models"][w.model],
        provenance=lambda w: provenance(SEAT["models"][w.model]),
    script:
        "../scripts/embed_texts.py"


rule seat_table:
    input:
        rows=expand("results/seat/{{model}}/{test}.csv", test=seat_tests()),
    output:
        csv=report(
            "results/seat/{model}/table.csv",
            caption="../report/seat_table.rst",
            category="SEAT",
            subcategory="{model}",
        ),
        md="results/seat/{model}/table.md",
    log:
        "results/logs/seat_table/{model}.log",
    params:
        tests=seat_tests(),
        models=lambda w: [w.model],
        caption=lambda w: f"Word- and sentence-level WEAT/SEAT (May et al. 2019) on {w.model}",
    script:
        "../scripts/seat_table.py"
