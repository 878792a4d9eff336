# How robust each d is (docs/robustness.md): the chosen SEAT tests on the chosen models re-run along the
# extraction choices of robustness/axes (a specification curve) and on random-init twins, in one job;
# each vector through the embedding cache, so what the SEAT tables encoded is not encoded again.
# Built by `snakemake robustness` only, never by the default target. Planned and declared in
# vlbias.suites.robustness.

from vlbias.suites import robustness as robustness_plan


rule robustness:
    input:
        lambda w: robustness_plan.targets(config),


rule robustness_seat:
    input:
        weights=lambda w: robustness_plan.weights(config),
        stimuli=lambda w: robustness_plan.stimuli(config),
    output:
        csv=robustness_plan.table_path("seat"),
        md=robustness_plan.table_path("seat", "md"),
        html=report(
            robustness_plan.table_path("seat", "html"),
            caption="../report/robustness_table.rst",
            category="Robustness",
            subcategory="SEAT",
            labels={"file": "summary and curves"},
        ),
        specifications=robustness_plan.specifications_path("seat"),
        curves=report(
            directory(robustness_plan.curves_path("seat")),
            patterns=["{rb_model}/{rb_test}.png"],
            caption="../report/robustness_curve.rst",
            category="Robustness",
            subcategory="SEAT curves",
            labels={"model": "{rb_model}", "test": "{rb_test}"},
        ),
    log:
        "results/logs/robustness_seat.log",
    conda:
        "../../environment.yml"
    threads: lambda w: config["seat"]["threads"]
    resources:
        mem_mb=4000,
    params:
        models=lambda w: {m: config["seat"]["models"][m] for m in config["robustness"]["seat"]["models"]},
        axes=lambda w: config["robustness"]["axes"],
        stats=stats_params(),
        threads=lambda w: config["seat"]["threads"],
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/robustness.py"
