# The encoder zoo (Ghate et al. 2025; docs/zoo.md): the selection's models over the iEAT battery, each
# beside its metadata, and the model-level analyses. Per model: its weights (local, tolerant: a fetch that
# fails is a failure record) and one embedding job (every image and text of the battery, through the
# content-keyed cache), bundled to cluster jobs by the profile's group-components (profiles/slurm); then one
# job per table, each reading
# the stores one at a time. Planned in vlbias.suites.zoo.plan; declared in vlbias.suites.zoo.suite.

from vlbias.suites.zoo.plan import EMBED_GROUP, OASIS, UPSTREAM, ZooPlan

ZOO_PLAN = ZooPlan(config)
ZOO = ZOO_PLAN.zoo  # {} without a zoo section: its settings are read inside functions
ZOO_MODELS = ZOO_PLAN.models


# on a cluster (profiles/slurm) these run on the submitting node: the downloads, and the metadata (no model)
localrules:
    zoo_upstream,
    zoo_weights,
    zoo_models,


rule zoo_upstream:
    input:
        manifest=lambda w: ZOO["manifest"],
    output:
        f"{UPSTREAM}/{{file}}",
    log:
        "results/logs/zoo_upstream/{file}.log",
    wildcard_constraints:
        file="[^/]+",
    conda:
        "../../environment.yml"
    params:
        source=lambda w: source("open_clip"),
        mirror=mirror(),
        cache=config["cache"],
    script:
        "../scripts/zoo_upstream.py"


# Ghate et al.'s text tests, all in one job (where the battery has any)
if ZOO_PLAN.text_tests:

    localrules:
        zoo_text_tests,

    rule zoo_text_tests:
        input:
            manifest=lambda w: ZOO["text_manifest"],
        output:
            ZOO_PLAN.text_test_paths(),
        log:
            "results/logs/zoo_text_tests.log",
        conda:
            "../../environment.yml"
        params:
            names=ZOO_PLAN.text_tests,
            source=lambda w: source("clip_bias"),
            mirror=mirror(),
            cache=config["cache"],
        script:
            "../scripts/zoo_text_tests.py"


# the user's OASIS images (licensed), Ghate et al.'s selection checked against its manifest, where configured
if ZOO.get("oasis"):

    localrules:
        zoo_oasis,

    rule zoo_oasis:
        input:
            ratings=f"{ZOO['oasis']['folder']}/OASIS.csv",
            manifest=ZOO["oasis"]["manifest"],
        output:
            store=f"{OASIS}/images.h5",
            status=f"{OASIS}/manifest.tsv",
        log:
            "results/logs/zoo_oasis.log",
        conda:
            "../../environment.yml"
        threads: 2
        params:
            folder=ZOO["oasis"]["folder"],
            settings=lambda w: ZOO_PLAN.image_settings(),
        script:
            "../scripts/zoo_oasis.py"


# every model's weights in one job: fetched once, on the submitting node
rule zoo_weights:
    input:
        lock=ancient(config["weights_lock"]),
    output:
        [ZOO_PLAN.record(m) for m in ZOO_MODELS],
    log:
        "results/logs/zoo_weights.log",
    conda:
        "../../environment.yml"
    params:
        models=ZOO_MODELS,
        cache=config["cache"],
    script:
        "../scripts/zoo_weights.py"


rule zoo_embed:
    input:
        weights=ZOO_PLAN.record("{model}"),
        images=lambda w: ZOO_PLAN.image_stores(),
        stimuli=lambda w: ZOO_PLAN.text_stimuli(),
    output:
        ZOO_PLAN.store("{model}"),
    log:
        "results/logs/zoo_embed/{model}.log",
    wildcard_constraints:
        model=alternatives(list(ZOO_MODELS)),
    group:
        EMBED_GROUP
    conda:
        "../../environment.yml"
    threads: lambda w: ZOO["threads"]
    resources:
        mem_mb=8000,
    params:
        spec=lambda w: ZOO_MODELS[w.model],
        threads=lambda w: ZOO["threads"],
        provenance=lambda w: provenance(ZOO_MODELS[w.model]),
        cache=config["cache"],
        weights_lock=config["weights_lock"],
    script:
        "../scripts/zoo_embed.py"


rule zoo_models:
    input:
        datasets=lambda w: ZOO["datasets"],
        accuracy=lambda w: ZOO_PLAN.accuracy(),
    output:
        "results/zoo/models.csv",
    log:
        "results/logs/zoo_models.log",
    conda:
        "../../environment.yml"
    params:
        zoo=ZOO,
        models=ZOO_MODELS,
    script:
        "../scripts/zoo_models.py"


rule zoo_eats:
    input:
        stores=lambda w: ZOO_PLAN.stores(),
        stimuli=lambda w: ZOO_PLAN.battery(),
        cross_modal=lambda w: ZOO["cross_modal"] or [],
        models="results/zoo/models.csv",
    output:
        csv=report(
            "results/zoo/eats.csv",
            caption="../report/zoo_eats.rst",
            category="Zoo",
            labels={"table": "eats"},
        ),
        md="results/zoo/eats.md",
    log:
        "results/logs/zoo_eats.log",
    conda:
        "../../environment.yml"
    threads: 2
    params:
        models=list(ZOO_MODELS),
        cross_modal=lambda w: ZOO["cross_modal"],
        oasis=lambda w: bool(ZOO["oasis"]),
        stats=stats_params(),
        ci=STATS["ci"],
    script:
        "../scripts/zoo_eats.py"


rule zoo_predictors:
    input:
        "results/zoo/eats.csv",
    output:
        csv=report(
            "results/zoo/predictors.csv",
            caption="../report/zoo_predictors.rst",
            category="Zoo",
            labels={"table": "predictors"},
        ),
        md="results/zoo/predictors.md",
        png=report(
            "results/zoo/predictors.png",
            caption="../report/zoo_predictors.rst",
            category="Zoo",
            labels={"table": "predictors (figure)"},
        ),
    log:
        "results/logs/zoo_predictors.log",
    conda:
        "../../environment.yml"
    params:
        level=lambda w: ZOO["bootstrap"]["level"],
    script:
        "../scripts/zoo_predictors.py"


rule zoo_performance:
    input:
        "results/zoo/eats.csv",
    output:
        csv=report(
            "results/zoo/performance.csv",
            caption="../report/zoo_performance.rst",
            category="Zoo",
            labels={"table": "performance"},
        ),
        md="results/zoo/performance.md",
        png=report(
            "results/zoo/performance.png",
            caption="../report/zoo_performance.rst",
            category="Zoo",
            labels={"table": "performance (figure)"},
        ),
    log:
        "results/logs/zoo_performance.log",
    conda:
        "../../environment.yml"
    params:
        bootstrap=lambda w: ZOO["bootstrap"],
    script:
        "../scripts/zoo_performance.py"
