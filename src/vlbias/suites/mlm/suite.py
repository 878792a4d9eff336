"""The masked-entity association suite as the workflow, the config check and the command line see it
(vlbias.suites.stage): its section ``mlm``, its rules (workflow/rules/mlm.smk), the references its
keys make, its targets, its weights, its tests and tables (each vision-language model's)."""

from pathlib import Path

from vlbias.models.families import family
from vlbias.suites.mlm.plan import TABLES, MlmPlan, table_path
from vlbias.suites.stage import Suite, Table, unknown_names
from vlbias.validation import suggest


def check(config, root):
    """The reference model and the built ones exist, each has a masked-language head; with images, the
    dataset's manifest and each vision-language model's detector (the regions stage's)."""
    mlm, problems = config["mlm"], []
    models = mlm["models"]
    if mlm["reference"] not in models:
        problems.append(f"key 'mlm/reference': '{mlm['reference']}' is not a model under 'mlm/models'"
                        f"{suggest(mlm['reference'], models)}")
    for name, spec in models.items():
        if family(spec.get("adapter")).get("mlm_head") is False:  # declared in its schema (BLIP's retrieval model)
            problems.append(f"key 'mlm/models/{name}': adapter '{spec['adapter']}' has no masked-language head: "
                            "the masked-LM study does not apply to it")
    vl = [m for m in models if m != mlm["reference"]]
    unknown_names(problems, ("mlm", "build"), mlm["build"], vl,
                  "a vision-language model under 'mlm/models' (the reference is built with them)")
    dataset = mlm.get("images")
    if dataset is not None:
        regions = config.get("regions") or {}
        manifests, detectors = regions.get("manifests") or {}, set(regions.get("detectors") or {})
        if dataset not in manifests:
            problems.append(f"key 'mlm/images': dataset '{dataset}' has no image manifest under "
                            f"'regions/manifests'{suggest(dataset, manifests)}")
        for model in vl:
            detector = models[model].get("detector")
            if detector not in detectors:
                problems.append(f"key 'mlm/models/{model}/detector': '{detector}' is not a detector under "
                                f"'regions/detectors' (the images of 'mlm/images' need region features)"
                                f"{suggest(detector, detectors) if detector else ''}")
    return problems


def tests(config):
    return [("mlm", Path(config["mlm"][key]).stem, config["mlm"][key]) for key in ("case_study", "entities")]


def tables(config):
    """Each vision-language model's tables, "<model>/<table>" (every model's: `mlm/build` names those the
    default target builds, the others are built by name)."""
    return {f"{model}/{table}": Table(table_path(model, table), f"{caption}: {model}")
            for model in MlmPlan(config).vl for table, caption in TABLES.items()}


SUITE = Suite(
    name="mlm", rules=("mlm.smk",), adapters={"models": "models"}, check=check,
    targets=lambda config, down: MlmPlan(config).targets(), weights=lambda config: MlmPlan(config).weights(),
    tests=tests, tables=tables,
)
