"""The robustness stage (section ``robustness``, workflow/rules/robustness.smk; docs/robustness.md): a
specification curve and random-init twins of each chosen test of a suite on each chosen model
(vlbias.robustness), as the workflow and the config check see it (vlbias.suites.stage).

Not a suite: its tables are a suite's tests' d read along the extraction choices, and its target
``robustness`` is built only when asked for (``snakemake robustness``), never by the default target:
a curve is many times one d's cost (benchmarks/robustness.py).
"""

from vlbias.suites.plan import stimulus_ids
from vlbias.suites.seat.plan import natural_key
from vlbias.suites.stage import Stage, unknown_names
from vlbias.weights import record_path

# the suites whose tests a curve re-runs: SEAT's texts (the template and casing axes vary them), iEAT's
# images (the image axes) and its cross-modal tests' words
SUITES = ("seat", "ieat")


def table_path(suite, ext="csv"):
    """The summary of ``suite``'s curves: a row per test × model."""
    return f"results/robustness/{suite}.{ext}"


def specifications_path(suite):
    """Every specification's and twin's row of ``suite``'s curves."""
    return f"results/robustness/{suite}/specifications.csv"


def curves_path(suite):
    """The folder of ``suite``'s curve figures, <model>/<test>.png."""
    return f"results/robustness/{suite}/curves"


def tests(config, suite):
    """The tests ``robustness/<suite>/tests`` names: `all`, the suite's every test in its natural order."""
    chosen = config["robustness"][suite]["tests"]
    return sorted(stimulus_ids(config[suite]["stimuli"]), key=natural_key) if chosen == "all" else list(chosen)


def stimuli(config, suite):
    return [f"{config[suite]['stimuli']}/{test}.yaml" for test in tests(config, suite)]


def suite_models(config, suite):
    """{name: entry} of every model of ``suite`` (iEAT's: its models and its sweep's)."""
    from vlbias.suites.ieat.plan import ieat_models

    return ieat_models(config["ieat"]) if suite == "ieat" else config[suite]["models"]


def models(config, suite):
    """{name: entry} of the models whose curves are drawn."""
    known = suite_models(config, suite)
    return {m: known[m] for m in config["robustness"][suite]["models"]}


def axes(config, suite):
    """The axes, twins and statistics of ``suite``'s curves: its own ``axes``, else robustness/axes."""
    return config["robustness"][suite].get("axes", config["robustness"]["axes"])


def targets(config):
    """The files of the ``robustness`` target (none without the section)."""
    section = config.get("robustness") or {}
    return [*(table_path(s, ext) for s in SUITES if s in section for ext in ("csv", "md", "html")),
            *(specifications_path(s) for s in SUITES if s in section)]


def inputs(config, suite):
    """The files a suite's curves read: the chosen models' weights records and the chosen tests' stimuli;
    for iEAT also the images manifest and each model's image store manifest (the images it decoded)."""
    files = {"weights": [record_path(f"{suite}/{m}") for m in models(config, suite)],
             "stimuli": stimuli(config, suite)}
    if suite == "ieat":
        from vlbias.suites.ieat.plan import IeatPlan

        plan = IeatPlan(config)
        files |= {"manifest": config["ieat"]["images"]["manifest"],
                  "stores": [f"{plan.image_store(m)}/manifest.tsv" for m in models(config, suite)]}
    return files


def image_settings(config, suite):
    """{model: its image store's settings {size, crop, resample, decoder}}, which the image axes vary
    ({} for a text suite)."""
    if suite != "ieat":
        return {}
    from vlbias.suites.ieat.plan import IeatPlan

    plan = IeatPlan(config)
    return {m: plan.image_store_settings(entry.get("images", {}))[1] for m, entry in models(config, suite).items()}


def image_sets(stimuli, entries, status):
    """{test id: {set: [image files]}} of the image sets of ``stimuli``: the files of each set's category
    (``entries``: vlbias.suites.ieat.image_entries) that the model's image store decoded (``status``: its
    manifest's rows), as the suite's table reads them."""
    decoded = {(r["category"], r["file"]) for r in status if r["status"] == "ok"}
    files = {}
    for e in entries:
        if (e["category"], e["file"]) in decoded:
            files.setdefault(e["category"], []).append(str(e["path"]))
    return {s.id: {name: files.get(st.category, []) for name, st in s.sets.items() if st.items is None}
            for s in stimuli if any(st.items is None for st in s.sets.values())}


VECTORS = {"vectors": "one's own vectors", "published": "published vectors"}  # sources with nothing to extract


def check(config, root):
    """Each chosen model a model of the suite with an adapter and one output (one's own or published
    vectors are not re-extracted; several outputs are several models), each chosen test one of its
    stimulus files."""
    from pathlib import Path

    from vlbias.models.families import outputs

    problems = []
    for suite in SUITES:
        chosen = config["robustness"].get(suite)
        if not chosen:
            continue
        if not config.get(suite):
            problems.append(f"key 'robustness/{suite}': the config has no '{suite}' section")
            continue
        known = suite_models(config, suite)
        unknown_names(problems, ("robustness", suite, "models"), chosen["models"], known,
                      f"a model under '{suite}/models'")
        for i, m in enumerate(chosen["models"]):
            where = f"key 'robustness/{suite}/models/{i}': '{m}'"
            if m in known and (given := VECTORS.get(known[m].get("source"))):
                problems.append(f"{where} is {given}: no extraction choice to vary")
            elif m in known and len(outputs(known[m])) > 1:
                problems.append(f"{where} gives several vectors per image ({', '.join(outputs(known[m]))}): "
                                "give each its entry (one layer, one output); the layer axis varies the layer")
        if chosen["tests"] != "all":
            unknown_names(problems, ("robustness", suite, "tests"), chosen["tests"],
                          stimulus_ids(Path(root) / config[suite]["stimuli"]),
                          f"a stimulus file in {config[suite]['stimuli']}")
    return problems


# its targets are not the default target's: none here (the rule file's `robustness` builds them)
STAGE = Stage(name="robustness", rules=("robustness.smk",), check=check)
