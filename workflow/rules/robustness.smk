# How robust each d is (docs/robustness.md): a suite's chosen tests on its chosen models re-run along the
# extraction choices of robustness/axes (a specification curve) and on random-init twins, one job per suite
# (SEAT, iEAT); each vector through the embedding cache, so what the suite's tables encoded is not encoded
# again. Built by `snakemake robustness` only, never by the default target. Planned and declared in
# vlbias.suites.robustness.

from vlbias.suites import robustness as robustness_plan


rule robustness:
    input:
        lambda w: robustness_plan.targets(config),


rule robustness_suite:
    input:
        unpack(lambda w: robustness_plan.inputs(config, w.rb_suite)),
    output:
        csv=robustness_plan.table_path("{rb_suite}"),
        md=robustness_plan.table_path("{rb_suite}", "md"),
        html=report(
            robustness_plan.table_path("{rb_suite}", "html"),
            caption="../report/robustness_table.rst",
            category="Robustness",
            subcategory="{rb_suite}",
            labels={"file": "summary and curves"},
        ),
        specifications=robustness_plan.specifications_path("{rb_suite}"),
        curves=report(
            directory(robustness_plan.curves_path("{rb_suite}")),
            patterns=["{rb_model}/{rb_test}.png"],
            caption="../report/robustness_curve.rst",
            category="Robustness",
            subcategory="{rb_suite} curves",
            labels={"model": "{rb_model}", "test": "{rb_test}"},
        ),
    log:
        "results/logs/robustness_{rb_suite}.log",
    wildcard_constraints:
        rb_suite=alternatives(list(robustness_plan.SUITES)),
    conda:
        "../../environment.yml"
    threads: lambda w: config[w.rb_suite]["threads"]
    resources:
        mem_mb=4000,
    params:
        suite=lambda w: w.rb_suite,
        models=lambda w: robustness_plan.models(config, w.rb_suite),
        image_settings=lambda w: robustness_plan.image_settings(config, w.rb_suite),
        axes=lambda w: robustness_plan.axes(config, w.rb_suite),
        stats=stats_params(),
        threads=lambda w: config[w.rb_suite]["threads"],
        source=source("ieat"),
        mirror=mirror(),
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/robustness.py"
