# Masked-entity association scores (Srinivasan & Bisk 2022): one job per model reads the
# log-probabilities of every (entity, agent, image) query; one job per vision-language model turns
# them, with the text-only reference's, into the score tables and Figures 2-5.
# Without an `mlm:` section nothing here is built; `mlm: build` lists the models the default target
# builds, and every model's targets stay buildable by name (or all at once: `snakemake mlm_all`).
# Planned in vlbias.suites.mlm.plan; declared in vlbias.suites.mlm.suite.

from vlbias.suites.mlm.plan import (
    FIGURES as MLM_FIGURES,
    TABLES as MLM_TABLES,
    MlmPlan,
    logprobs_path,
    table_path as mlm_path,
)

MLM_PLAN = MlmPlan(config)
MLM = MLM_PLAN.mlm
MLM_MODELS = MLM_PLAN.models
MLM_REFERENCE = MLM_PLAN.reference
MLM_VL = MLM_PLAN.vl


rule mlm_all:
    input:
        [t for model in MLM_VL for t in MLM_PLAN.outputs(model)],


rule mlm_logprobs:
    input:
        unpack(lambda w: MLM_PLAN.logprobs_inputs(w.model)),
        weights=record_path("mlm/{model}"),
    output:
        logprobs=logprobs_path("{model}"),
        images=report(
            logprobs_path("{model}", "images.tsv"),
            caption="../report/mlm_images.rst",
            category="MLM association",
            subcategory="{model}",
        ),
    log:
        "results/logs/mlm/logprobs/{model}.log",
    wildcard_constraints:
        model=alternatives(list(MLM_MODELS)),
    conda:
        "../../environment.yml"
    threads: lambda w: MLM["threads"]
    resources:
        mem_mb=8000,
    params:
        threads=lambda w: MLM["threads"],
        spec=lambda w: MLM_MODELS[w.model],
        text_only=lambda w: w.model == MLM_REFERENCE,
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/mlm_logprobs.py"


rule mlm_report:
    input:
        stimuli=MLM_PLAN.stimuli(),
        logprobs=logprobs_path("{model}"),
        reference=logprobs_path(MLM_REFERENCE),
    output:
        **{f"{t}_{ext}": mlm_path("{model}", t, ext) for t in MLM_TABLES for ext in ["csv", "md", "tex"]},
        # in the report under its model, each with its caption (workflow/report/mlm_<table or figure>.rst)
        **{
            f"{t}_html": report(
                mlm_path("{model}", t, "html"),
                caption=f"../report/mlm_{t}.rst",
                category="MLM association",
                subcategory="{model}",
            )
            for t in MLM_TABLES
        },
        **{
            f: report(
                mlm_path("{model}", f, "png"),
                caption=f"../report/mlm_{f}.rst",
                category="MLM association",
                subcategory="{model}",
            )
            for f in MLM_FIGURES
        },
    log:
        "results/logs/mlm/report/{model}.log",
    wildcard_constraints:
        model=alternatives(MLM_VL),
    conda:
        "../../environment.yml"
    params:
        model=lambda w: {"name": w.model, **provenance(MLM_MODELS[w.model])},
        reference=lambda w: {"name": MLM_REFERENCE, **provenance(MLM_MODELS[MLM_REFERENCE])},
    script:
        "../scripts/mlm_report.py"
