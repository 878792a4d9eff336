# Masked-entity association scores (Srinivasan & Bisk 2022): one job per model reads the
# log-probabilities of every (entity, agent, image) query; one job per vision-language model turns
# them, with the text-only reference's, into the score tables and Figures 2-5.
# Without an `mlm:` section nothing here is built; `mlm: build` lists the models the default target
# builds, and every model's targets stay buildable by name (or all at once: `snakemake mlm_all`).

from vlbias.suites.mlm.plan import FIGURES as MLM_FIGURES, TABLES as MLM_TABLES, MlmPlan, logprobs_path

MLM_PLAN = MlmPlan(config)
MLM = MLM_PLAN.mlm
MLM_MODELS = MLM_PLAN.models
MLM_REFERENCE = MLM_PLAN.reference
MLM_VL = MLM_PLAN.vl
mlm_targets = MLM_PLAN.targets


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
    threads: MLM.get("threads", 2)
    resources:
        mem_mb=8000,
    params:
        threads=MLM.get("threads", 2),
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
        **{f"{t}_{ext}": f"results/mlm/{{model}}/{t}.{ext}" for t in MLM_TABLES for ext in ["csv", "md", "tex"]},
        scores_html=mlm_report_output("scores.html", "mlm_scores.rst"),
        bias_html=mlm_report_output("bias.html", "mlm_bias.rst"),
        contradictions_html=mlm_report_output("contradictions.html", "mlm_contradictions.rst"),
        entities_html=mlm_report_output("entities.html", "mlm_entities.rst"),
        figure2=mlm_report_output("figure2.png", "mlm_figure2.rst"),
        figure3=mlm_report_output("figure3.png", "mlm_figure3.rst"),
        figure4=mlm_report_output("figure4.png", "mlm_figure4.rst"),
        figure5a=mlm_report_output("figure5a.png", "mlm_figure5a.rst"),
        figure5b=mlm_report_output("figure5b.png", "mlm_figure5b.rst"),
    log:
        "results/logs/mlm/report/{model}.log",
    wildcard_constraints:
        model=alternatives(MLM_VL),
    conda:
        "../../environment.yml"
    params:
        model=lambda w: {"name": w.model, **provenance(MLM_MODELS[w.model])},
        reference={"name": MLM_REFERENCE, **provenance(MLM_MODELS.get(MLM_REFERENCE, {}))},
    script:
        "../scripts/mlm_report.py"
