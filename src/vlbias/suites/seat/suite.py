"""The SEAT/WEAT suite as the workflow, the config check and the command line see it
(vlbias.suites.stage): its section ``seat``, its rules (workflow/rules/seat.smk), the references its
keys make, its targets, its weights, its tests and tables."""

from pathlib import Path

from vlbias.models.families import embeds
from vlbias.suites.plan import stimulus_ids
from vlbias.suites.seat import plan
from vlbias.suites.stage import Suite, Table, mleat_tables, unknown_names

HEATMAP = "results/seat/heatmap.png"  # of every model's table (rule seat_figures)
HEATMAP_PAGE = "results/seat/heatmap.html"  # the report's view of it


def check(config, root):
    """The tests ``seat/tests`` and each model's ``tests`` name; a model's adapter embeds texts."""
    seat, problems = config["seat"], []
    tests, where = stimulus_ids(Path(root) / seat["stimuli"]), f"a stimulus file in {seat['stimuli']}"
    if seat["tests"] != "all":
        unknown_names(problems, ("seat", "tests"), seat["tests"], tests, where)
    for name, spec in seat["models"].items():
        if spec.get("tests") not in (None, "all"):  # absent: seat/tests
            unknown_names(problems, ("seat", "models", name, "tests"), spec["tests"], tests, where)
        if spec["source"] != "vectors" and spec.get("adapter") and "texts" not in embeds(spec["adapter"]):
            problems.append(f"key 'seat/models/{name}/adapter': adapter '{spec['adapter']}' embeds no texts")
    return problems


def targets(config, down):
    return plan.targets(config) + ([HEATMAP, HEATMAP_PAGE] if config["seat"]["models"] else [])


def tests(config):
    folder = Path(config["seat"]["stimuli"])
    return [("seat", p.stem, str(p)) for p in sorted(folder.glob("*.yaml"))]


def tables(config):
    found = {model: Table(plan.table_path(model), plan.caption(model)) for model in config["seat"]["models"]}
    return found | mleat_tables("seat", found)


SUITE = Suite(
    name="seat", rules=("seat.smk",), adapters={"models": "models"},
    check=check, targets=targets, weights=plan.weights, tests=tests, tables=tables,
)
