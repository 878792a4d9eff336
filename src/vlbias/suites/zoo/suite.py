"""The zoo as the workflow, the config check and the command line see it (vlbias.suites.stage): its
section ``zoo``, its rules (workflow/rules/zoo.smk), the references its keys make, its targets, its
tests and tables. Its models' weights are its own rule's (zoo_weights: a model that cannot be fetched
is a failure row, not a failed run), so the weights stage lists none of them."""

from pathlib import Path

from vlbias.errors import InputError
from vlbias.suites.plan import stimulus_ids
from vlbias.suites.stage import Suite, Table, unknown_names
from vlbias.suites.zoo.plan import ZooPlan, table_path
from vlbias.suites.zoo.select import zoo_models
from vlbias.suites.zoo.text import text_tests

CAPTIONS = {
    "eats": "The zoo's battery: a row per (model, test) with d, its interval, p (Holm within the model), n per set, "
            "provenance and the model's metadata",
    "predictors": "Which upstream choices predict d: OLS of d on pretraining dataset, log parameters, log samples "
                  "seen and architecture family, per test and pooled; coefficients and type-II ANOVA",
    "performance": "Bias and downstream accuracy: Pearson and Spearman r between d and ImageNet-1k and the "
                   "38-dataset average, per test, bootstrap intervals, Holm across tests",
    "models": "The zoo's models and their metadata (vlbias list zoo)",
}


def check(config, root):
    """The zoo needs the ieat section (its stimuli and image store); its tests are iEAT stimulus files; its
    selection expands (an unknown architecture, pair or dataset: the error names the closest); the
    upstream accuracy table needs sources/open_clip, the text tests (each in zoo/text_manifest)
    sources/clip_bias; the OASIS images, the cross-modal tests."""
    zoo, problems = config["zoo"], []
    if not config.get("ieat"):
        return ["key 'zoo': the zoo reads the iEAT stimuli and images: configure the 'ieat' section too"]
    if zoo["tests"] != "all":
        unknown_names(problems, ("zoo", "tests"), zoo["tests"], stimulus_ids(Path(root) / config["ieat"]["stimuli"]),
                      f"a stimulus file in {config['ieat']['stimuli']}")
    if zoo["accuracy"] == "upstream" and "open_clip" not in config["sources"]:
        problems.append("key 'zoo/accuracy': upstream needs sources/open_clip (mlfoundations/open_clip at a commit)")
    if zoo["oasis"] and not zoo["cross_modal"]:
        problems.append("key 'zoo/oasis': the OASIS images serve the cross-modal tests alone: set zoo/cross_modal")
    try:
        texts = text_tests(zoo)
        if texts and "clip_bias" not in config["sources"]:
            problems.append("key 'zoo/text_tests': the text tests need sources/clip_bias (kshitishghate/CLIP_bias at "
                            "a commit), or set it to []")
        if zoo["cross_modal"]:
            problems += cross_modal_problems(zoo["cross_modal"], texts, Path(root) / config["ieat"]["stimuli"])
    except InputError as e:
        problems.append(str(e))
    try:
        zoo_models(zoo)
    except InputError as e:
        problems.append(str(e))
    return problems


def cross_modal_problems(path, texts, ieat_stimuli):
    """A cross-modal test whose text test the battery does not run, or whose image category no iEAT
    stimulus file names (the image store lacks it)."""
    from vlbias.io.stimuli import load_stimulus
    from vlbias.suites.zoo.cross_modal import read_cross_modal

    categories = {st.category for test in stimulus_ids(ieat_stimuli)
                  for st in load_stimulus(Path(ieat_stimuli) / f"{test}.yaml").sets.values()}
    problems = []
    for row in read_cross_modal(path):
        if row["text_test"] not in texts:
            problems.append(f"{path}: test '{row['test']}': its text test {row['text_test']} is not among "
                            "zoo/text_tests (add it, or set zoo/cross_modal to null)")
        problems += [f"{path}: test '{row['test']}': no iEAT stimulus file names the image category {row[c]!r}"
                     for c in ("image_x", "image_y") if row[c] not in categories]
    return problems


def tests(config):
    plan = ZooPlan(config)
    return [("zoo", test, path) for test, path in zip(plan.tests(), plan.stimuli())]


def tables(config):
    return {name: Table(table_path(name), caption) for name, caption in CAPTIONS.items() if name != "models"}


SUITE = Suite(
    name="zoo", rules=("zoo.smk",), adapters={"models": "models"}, check=check,
    targets=lambda config, down: ZooPlan(config).targets() if config.get("zoo") else [], entries=lambda config: {}, tests=tests, tables=tables,
    models=lambda config: ZooPlan(config).models,
)
