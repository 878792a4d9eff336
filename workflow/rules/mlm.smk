# Masked-entity association scores (Srinivasan & Bisk 2022): one job per model reads the
# log-probabilities of every (entity, agent, image) query; one job per vision-language model turns
# them, with the text-only reference's, into the score tables and Figures 2-5.
# Without an `mlm:` section nothing here is built; `mlm: build` lists the models the default target
# builds, and every model's targets stay buildable by name (or all at once: `snakemake mlm_all`).

MLM = config.get("mlm") or {}
MLM_MODELS = MLM.get("models", {})
MLM_REFERENCE = MLM.get("reference")
MLM_VL = [m for m in MLM_MODELS if m != MLM_REFERENCE]
MLM_TABLES = ["scores", "bias", "contradictions", "entities"]
MLM_FIGURES = ["figure2", "figure3", "figure4", "figure5a", "figure5b"]


def mlm_stimuli():
    return [MLM["case_study"], MLM["entities"]]


def mlm_manifest():
    return regions_manifest(MLM["images"]) if MLM.get("images") else None


def mlm_has_images():
    """Whether the case-study manifest lists any usable image: only then is a region store needed."""
    manifest = mlm_manifest()
    return manifest is not None and any(r["status"] == "ok" for r in read_manifest(manifest))


def mlm_logprobs_input(wildcards):
    inputs = {"stimuli": mlm_stimuli()}
    if wildcards.model != MLM_REFERENCE and mlm_manifest():
        inputs["manifest"] = mlm_manifest()
        if mlm_has_images():
            inputs["store"] = f"results/regions/{MLM['images']}/{MLM_MODELS[wildcards.model]['detector']}.h5"
    return inputs


def mlm_outputs(model):
    return (expand("results/mlm/{model}/{table}.{ext}", model=model, table=MLM_TABLES, ext=["csv", "md", "tex", "html"])
            + expand("results/mlm/{model}/{figure}.png", model=model, figure=MLM_FIGURES)
            + [f"results/mlm/logprobs/{model}.images.tsv"])


def mlm_targets():
    return [t for model in MLM.get("build", []) for t in mlm_outputs(model)] if MLM else []


rule mlm_all:
    input:
        [t for model in MLM_VL for t in mlm_outputs(model)] if MLM else [],


rule mlm_logprobs:
    input:
        unpack(mlm_logprobs_input),
    output:
        logprobs="results/mlm/logprobs/{model}.tsv",
        images=report(
            "results/mlm/logprobs/{model}.images.tsv",
            caption="../report/mlm_images.rst",
            category="MLM association",
            subcategory="{model}",
        ),
    log:
        "results/logs/mlm/logprobs/{model}.log",
    wildcard_constraints:
        model=alternatives(list(MLM_MODELS)),
    threads: MLM.get("threads", 2)
    resources:
        mem_mb=8000,
    params:
        threads=MLM.get("threads", 2),
        spec=lambda w: MLM_MODELS[w.model],
        text_only=lambda w: w.model == MLM_REFERENCE,
        cache=config["cache"],
    script:
        "../scripts/mlm_logprobs.py"


def mlm_report_output(name, caption):
    return report(f"results/mlm/{{model}}/{name}", caption=f"../report/{caption}", category="MLM association",
                  subcategory="{model}")


rule mlm_report:
    input:
        stimuli=mlm_stimuli() if MLM else [],
        logprobs="results/mlm/logprobs/{model}.tsv",
        reference=f"results/mlm/logprobs/{MLM_REFERENCE}.tsv",
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
    params:
        model=lambda w: {"name": w.model, **provenance(MLM_MODELS[w.model])},
        reference={"name": MLM_REFERENCE, **provenance(MLM_MODELS.get(MLM_REFERENCE, {}))},
    script:
        "../scripts/mlm_report.py"
