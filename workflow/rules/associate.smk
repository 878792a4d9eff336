# One association test on one model: effect size d and permutation p (the compiled engine).


def embedding_store(w):
    if w.suite == "ieat":
        return f"results/embeddings/ieat/{w.model}.h5"
    return f"results/embeddings/seat/{w.model}/{w.test}.h5"


rule associate:
    input:
        stimulus=lambda w: f"{config[w.suite]['stimuli']}/{w.test}.yaml",
        store=embedding_store,
    output:
        "results/{suite}/{model}/{test}.csv",
    log:
        "results/logs/associate/{suite}/{model}/{test}.log",
    params:
        stats=stats_params(),
    script:
        "../scripts/associate.py"
