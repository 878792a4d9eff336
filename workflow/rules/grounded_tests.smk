# Grounded WEAT/SEAT tests (Ross et al. 2021): embeddings of each test's (caption, image) pairs on
# each vision-language model, experiments 1-3, and the paper's Tables 3-7. One embedding job per
# (dataset, model), one model load for all its tests (pairs cached by content: an edited stimulus
# file re-embeds its new pairs only), and one experiment job per (dataset, model).
# Needs grounded.smk (datasets) and regions.smk (region stores) included before it.

GROUNDED_STIMULI = GROUNDED.get("stimuli", "resources/stimuli/grounded")
GROUNDED_MODELS = GROUNDED.get("models", {})
GROUNDED_EXPERIMENTS = GROUNDED.get("experiments", {})
GROUNDED_TABLES = GROUNDED.get("tables", {})
GROUNDED_LEVELS = GROUNDED.get("levels", ["W", "S", "C"])
GROUNDED_MASKS = GROUNDED.get("masks", {"T": ["S"], "I": ["S"]})
GROUNDED_COLUMNS = GROUNDED_EXPERIMENTS.get("columns", ["VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"])
TABLE_EXTS = ["csv", "md", "tex", "html", "rows.csv", "missing.tsv"]


def grounded_stimulus(dataset, test):
    return f"{GROUNDED_STIMULI}/{dataset}/{test}.yaml"


def grounded_models_on():
    """{column label: model name} of the models switched on (grounded/experiments/models; the config
    check has made sure each names a model and fills its own column)."""
    return {GROUNDED_MODELS[name]["column"]: name for name in GROUNDED_EXPERIMENTS.get("models", [])}


def grounded_dataset_on(dataset):
    """A dataset is on when its images are configured (or regions/manifests names its manifest)."""
    return dataset in GROUNDED_DATASETS or dataset in REGIONS.get("manifests", {})


def grounded_table_spec(table):
    """Everything the table script needs: the columns (label, model, dataset), the groups of
    tests, levels, masks; and the experiment results it reads."""
    spec = GROUNDED_TABLES[table]
    on = grounded_models_on()
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
    jobs = sorted({(c["dataset"], c["model"]) for c in columns if c["model"]})
    level = spec.get("level", "S")
    return {
        "table": table, "caption": spec.get("caption", ""), "columns": columns, "groups": spec["groups"],
        "levels": GROUNDED_LEVELS, "masks": [m for m, at in GROUNDED_MASKS.items() if level in at],
        "level": level, "experiments": spec.get("experiments", ["1", "2", "3-masked"]),
        "alpha": GROUNDED_EXPERIMENTS.get("alpha", 0.05),
        "results": [f"results/grounded/experiments/{d}/{m}.csv" for d, m in jobs],
        "missing": [f"results/embeddings/grounded/{d}/{m}.missing.tsv" for d, m in jobs],
    }


def grounded_dataset_tests(dataset):
    """The tests of ``dataset`` that a table shows (and that have a stimulus file), sorted."""
    tests = set()
    for spec in GROUNDED_TABLES.values():
        if dataset in (spec.get("datasets") or {"": spec.get("dataset")}).values():
            tests |= {t for ts in spec["groups"].values() for t in ts}
    return sorted(t for t in tests if Path(grounded_stimulus(dataset, t)).exists())


def grounded_tests_targets():
    if not (GROUNDED and GROUNDED_EXPERIMENTS.get("build")):
        return []
    return expand("results/grounded/{table}.{ext}", table=GROUNDED_TABLES, ext=TABLE_EXTS)



rule grounded_embed:
    input:
        stimuli=lambda w: [grounded_stimulus(w.dataset, t) for t in grounded_dataset_tests(w.dataset)],
        regions=lambda w: f"results/regions/{w.dataset}/{GROUNDED_MODELS[w.model]['detector']}.h5",
        manifest=lambda w: regions_manifest(w.dataset),
    output:
        h5="results/embeddings/grounded/{dataset}/{model}.h5",
        missing="results/embeddings/grounded/{dataset}/{model}.missing.tsv",
    log:
        "results/logs/grounded_embed/{dataset}/{model}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_MODELS)),
    threads: GROUNDED_EXPERIMENTS.get("threads", 2)
    resources:
        mem_mb=8000,
    params:
        spec=lambda w: GROUNDED_MODELS[w.model],
        levels=GROUNDED_LEVELS,
        masks=GROUNDED_MASKS,
        cache=config["cache"],
    script:
        "../scripts/grounded_embed.py"


rule grounded_experiment:
    input:
        "results/embeddings/grounded/{dataset}/{model}.h5",
    output:
        "results/grounded/experiments/{dataset}/{model}.csv",
    log:
        "results/logs/grounded_experiment/{dataset}/{model}.log",
    wildcard_constraints:
        dataset="[a-z0-9][a-z0-9_-]*",
        model=alternatives(list(GROUNDED_MODELS)),
    threads: 2
    params:
        stats=stats_params(),
    script:
        "../scripts/grounded_experiment.py"


rule grounded_table:
    input:
        results=lambda w: grounded_table_spec(w.table)["results"],
        missing=lambda w: grounded_table_spec(w.table)["missing"],
    output:
        csv="results/grounded/{table}.csv",
        md="results/grounded/{table}.md",
        tex="results/grounded/{table}.tex",
        html=report("results/grounded/{table}.html", caption="../report/grounded_tables.rst", category="Grounded",
                    subcategory="Tables", labels={"table": "{table}"}),
        rows="results/grounded/{table}.rows.csv",
        missing="results/grounded/{table}.missing.tsv",
    log:
        "results/logs/grounded_table/{table}.log",
    wildcard_constraints:
        table=alternatives(list(GROUNDED_TABLES)),
    params:
        spec=lambda w: {k: v for k, v in grounded_table_spec(w.table).items() if k not in ("results", "missing")},
    script:
        "../scripts/grounded_table.py"
