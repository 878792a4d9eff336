# Grounded WEAT/SEAT tests (Ross et al. 2021): embeddings of each test's (caption, image) pairs on
# each vision-language model, experiments 1-3, and the paper's Tables 3-7, under each protocol
# (`authors`: what produced the printed tables; `paper`: the paper's text; docs/grounded.md).
# One embedding job per (protocol, dataset, model), one model load for all its tests (pairs cached by
# content, shared between protocols where their switches agree: an edited stimulus file re-embeds
# its new pairs only), one experiment job per (protocol, dataset, model), one job per table.
# Targets: results/grounded/table{3..7}.* under `grounded: protocol`, results/grounded/<protocol>/
# table{3..7}.* under every other protocol, results/grounded/comparison.{csv,md} (printed / each).
# Needs grounded.smk (datasets) and regions.smk (region stores) included before it.

from vlbias.suites.grounded.protocol import encoder_options, region_store, resolve

GROUNDED_STIMULI = GROUNDED.get("stimuli", "resources/stimuli/grounded")
GROUNDED_MODELS = GROUNDED.get("models", {})
GROUNDED_EXPERIMENTS = GROUNDED.get("experiments", {})
GROUNDED_TABLES = GROUNDED.get("tables", {})
GROUNDED_LEVELS = GROUNDED.get("levels", ["W", "S", "C"])
GROUNDED_MASKS = GROUNDED.get("masks", {"T": ["S"], "I": ["S"]})
GROUNDED_COLUMNS = GROUNDED_EXPERIMENTS.get("columns", ["VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"])
# {name: {switch: value}}; the config check has resolved each already
PROTOCOLS = {name: resolve(spec) for name, spec in GROUNDED.get("protocols", {"paper": "paper"}).items()}
MAIN_PROTOCOL = GROUNDED.get("protocol", next(iter(PROTOCOLS)))
TABLE_EXTS = ["csv", "md", "tex", "html", "rows.csv", "missing.tsv"]


def grounded_stimulus(dataset, test):
    return f"{GROUNDED_STIMULI}/{dataset}/{test}.yaml"


def table_target(protocol, table):
    """The target name of ``table`` under ``protocol``: "table3" for the main protocol, "paper/table3" else."""
    return table if protocol == MAIN_PROTOCOL else f"{protocol}/{table}"


TABLE_TARGETS = {table_target(p, t): (p, t) for p in PROTOCOLS for t in GROUNDED_TABLES}


def grounded_models_on(protocol):
    """{column label: model name} of the models switched on (grounded/experiments/models) under
    ``protocol``: an entry with a `visualbert` key fills its column only when the protocol's
    `visualbert` switch has that value (the config check has made sure the columns are unique)."""
    switches = PROTOCOLS[protocol]
    return {GROUNDED_MODELS[m]["column"]: m for m in GROUNDED_EXPERIMENTS.get("models", [])
            if GROUNDED_MODELS[m].get("visualbert", switches["visualbert"]) == switches["visualbert"]}


def grounded_dataset_on(dataset):
    """A dataset is on when its images are configured (or regions/manifests names its manifest)."""
    return dataset in GROUNDED_DATASETS or dataset in REGIONS.get("manifests", {})


def grounded_jobs(protocol, table):
    """The (dataset, model) embedding and experiment jobs ``table`` reads under ``protocol``, and its columns."""
    spec = GROUNDED_TABLES[table]
    on = grounded_models_on(protocol)
    datasets = spec.get("datasets") or {c: spec["dataset"] for c in spec.get("columns", GROUNDED_COLUMNS)}
    columns = []
    for label in spec.get("columns", GROUNDED_COLUMNS):
        dataset = datasets.get(label)
        model = on.get(label) if dataset and grounded_dataset_on(dataset) else None
        columns.append({"label": label, "model": model, "dataset": dataset})
    for group, tests in spec["groups"].items():
        for test in tests:
            if not any(Path(grounded_stimulus(d, test)).exists() for d in set(datasets.values())):
                raise ValueError(f"config/config.yaml: key 'grounded/tables/{table}/groups/{group}' names '{test}', "
                                 f"which has no stimulus file in {GROUNDED_STIMULI}/<dataset> for "
                                 f"{sorted(set(datasets.values()))}")
    return sorted({(c["dataset"], c["model"]) for c in columns if c["model"]}), columns


def grounded_table_spec(target):
    """Everything the table script needs: the columns (label, model, dataset), the groups of
    tests, levels, masks; and the experiment results it reads."""
    protocol, table = TABLE_TARGETS[target]
    spec = GROUNDED_TABLES[table]
    jobs, columns = grounded_jobs(protocol, table)
    level = spec.get("level", "S")
    return {
        "table": table, "protocol": protocol, "switches": PROTOCOLS[protocol], "caption": spec.get("caption", ""),
        "columns": columns, "groups": spec["groups"], "levels": GROUNDED_LEVELS,
        "masks": [m for m, at in GROUNDED_MASKS.items() if level in at], "level": level,
        "experiments": spec.get("experiments", ["1", "2", "3-masked"]),
        "alpha": GROUNDED_EXPERIMENTS.get("alpha", 0.05),
        "results": [f"results/grounded/experiments/{protocol}/{d}/{m}.csv" for d, m in jobs],
        "missing": [f"results/embeddings/grounded/{protocol}/{d}/{m}.missing.tsv" for d, m in jobs],
    }


def grounded_dataset_tests(dataset):
    """The tests of ``dataset`` that a table shows (and that have a stimulus file), sorted."""
    tests = set()
    for spec in GROUNDED_TABLES.values():
        if dataset in (spec.get("datasets") or {"": spec.get("dataset")}).values():
            tests |= {t for ts in spec["groups"].values() for t in ts}
    return sorted(t for t in tests if Path(grounded_stimulus(dataset, t)).exists())


def grounded_experiment_results():
    """Every experiment result file of every protocol's tables (the comparison reads them all)."""
    return sorted({f for target in TABLE_TARGETS for f in grounded_table_spec(target)["results"]})


def grounded_tests_targets():
    if not (GROUNDED and GROUNDED_EXPERIMENTS.get("build")):
        return []
    targets = expand("results/grounded/{target}.{ext}", target=TABLE_TARGETS, ext=TABLE_EXTS)
    return targets + (expand("results/grounded/comparison.{ext}", ext=["csv", "md"]) if GROUNDED.get("published")
                      else [])


def grounded_region_store(w):
    """The region store (detector or regions/tsv source) the embedding job of ``w`` reads (switch region_source)."""
    return region_store(PROTOCOLS[w.protocol], GROUNDED_MODELS[w.model], w.dataset)


rule grounded_embed:
    input:
        stimuli=lambda w: [grounded_stimulus(w.dataset, t) for t in grounded_dataset_tests(w.dataset)],
        regions=lambda w: f"results/regions/{w.dataset}/{grounded_region_store(w)}.h5",
        manifest=lambda w: regions_manifest(w.dataset),
    output:
        h5="results/embeddings/grounded/{protocol}/{dataset}/{model}.h5",
        missing="results/embeddings/grounded/{protocol}/{dataset}/{model}.missing.tsv",
    log:
        "results/logs/grounded_embed/{protocol}/{dataset}/{model}.log",
    wildcard_constraints:
        protocol=alternatives(list(PROTOCOLS)),
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_MODELS)),
    threads: GROUNDED_EXPERIMENTS.get("threads", 2)
    resources:
        mem_mb=8000,
    params:
        threads=GROUNDED_EXPERIMENTS.get("threads", 2),
        spec=lambda w: {**GROUNDED_MODELS[w.model],
                        **encoder_options(PROTOCOLS[w.protocol], GROUNDED_MODELS[w.model]["adapter"],
                                          GROUNDED_MODELS[w.model].get("config"))},
        switches=lambda w: PROTOCOLS[w.protocol],
        region_store=grounded_region_store,
        levels=GROUNDED_LEVELS,
        masks=GROUNDED_MASKS,
        cache=config["cache"],
    script:
        "../scripts/grounded_embed.py"


rule grounded_experiment:
    input:
        "results/embeddings/grounded/{protocol}/{dataset}/{model}.h5",
    output:
        "results/grounded/experiments/{protocol}/{dataset}/{model}.csv",
    log:
        "results/logs/grounded_experiment/{protocol}/{dataset}/{model}.log",
    wildcard_constraints:
        protocol=alternatives(list(PROTOCOLS)),
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_MODELS)),
    threads: 2
    params:
        stats=stats_params(),
        masked_statistic=lambda w: PROTOCOLS[w.protocol]["masked_statistic"],
    script:
        "../scripts/grounded_experiment.py"


rule grounded_table:
    input:
        results=lambda w: grounded_table_spec(w.target)["results"],
        missing=lambda w: grounded_table_spec(w.target)["missing"],
        published=GROUNDED.get("published", []),
    output:
        csv="results/grounded/{target}.csv",
        md="results/grounded/{target}.md",
        tex="results/grounded/{target}.tex",
        html=report("results/grounded/{target}.html", caption="../report/grounded_tables.rst", category="Grounded",
                    subcategory="Tables", labels={"table": "{target}"}),
        rows="results/grounded/{target}.rows.csv",
        missing="results/grounded/{target}.missing.tsv",
    log:
        "results/logs/grounded_table/{target}.log",
    wildcard_constraints:
        target=alternatives(list(TABLE_TARGETS)),
    params:
        spec=lambda w: {k: v for k, v in grounded_table_spec(w.target).items() if k not in ("results", "missing")},
    script:
        "../scripts/grounded_table.py"


rule grounded_comparison:
    input:
        results=lambda w: grounded_experiment_results(),
        published=GROUNDED.get("published", []),
    output:
        csv=report("results/grounded/comparison.csv", caption="../report/grounded_comparison.rst",
                   category="Grounded"),
        md="results/grounded/comparison.md",
    log:
        "results/logs/grounded_comparison.log",
    params:
        protocols=list(PROTOCOLS),
        alpha=GROUNDED_EXPERIMENTS.get("alpha", 0.05),
    script:
        "../scripts/grounded_comparison.py"
