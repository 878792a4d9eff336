"""The iEAT suite as the workflow, the config check and the command line see it (vlbias.suites.stage):
its section ``ieat``, its rules (workflow/rules/ieat.smk), the references its keys make, its targets,
its weights, its tests and tables."""

from pathlib import Path

from vlbias.suites.ieat.plan import SPECIFICITY_CAPTION, IeatPlan, encodes, ieat_models, sweep_name, table_models, table_path
from vlbias.suites.plan import stimulus_ids
from vlbias.suites.stage import Suite, Table, mleat_tables, unknown_names
from vlbias.validation import key_path, suggest

UPSTREAM = ("sources", "ieat")  # the authors' repository: the stimulus images and the published vectors
FIGURES = ["heatmap", "published"]  # results/ieat/<figure>.png, of every table (rule ieat_figures)
FIGURE_PAGES = ["heatmap"]  # results/ieat/<figure>.html: the report's view of the figure


def check(config, root):
    """The tests and models the tables, the sweep and the specificity check name; what each model embeds."""
    ieat = config["ieat"]
    tests = stimulus_ids(Path(root) / ieat["stimuli"])
    where = f"a stimulus file in {ieat['stimuli']}"
    problems = _model_references(ieat, tests)
    for table, spec in ieat["tables"].items():
        unknown_names(problems, ("ieat", "tables", table, "tests"), spec["tests"], tests, where)
    spec = ieat["specificity"]
    if spec["models"] and spec["test"] not in tests:
        problems.append(f"key 'ieat/specificity/test': '{spec['test']}' is not {where}{suggest(spec['test'], tests)}")
    return problems


def _model_references(ieat, tests):
    """The models tables and the specificity check name (an entry with several outputs: one of them),
    the sweep's names and tests, each entry's ``paper`` names and what its adapter embeds."""
    problems, models = [], ieat_models(ieat)
    names = table_models(models)
    sweep = ieat["sweep"]
    seen = {}
    for i, entry in enumerate(sweep["models"]):
        name = sweep_name(entry)
        if name in ieat["models"] or name in seen:
            other = f"'ieat/models/{name}'" if name in ieat["models"] else f"'ieat/sweep/models/{seen[name]}'"
            problems.append(f"key 'ieat/sweep/models/{i}': its name '{name}' is taken by {other} (set `name`)")
        seen.setdefault(name, i)
        if "images" not in encodes({"source": "images", **entry}):
            problems.append(f"key 'ieat/sweep/models/{i}/adapter': adapter '{entry['adapter']}' embeds no images")
    if sweep["tests"] != "all":
        unknown_names(problems, ("ieat", "sweep", "tests"), sweep["tests"], tests,
                      f"a stimulus file in {ieat['stimuli']}")

    def named(where, listed):
        for i, name in enumerate(listed or []):
            several = [n for n, (entry, _) in names.items() if entry == name and n != name]
            if name in names:
                continue
            if several:
                problems.append(f"key '{key_path((*where, i))}': '{name}' has several outputs; name one of "
                                f"{', '.join(several)}")
            else:
                problems.append(f"key '{key_path((*where, i))}': '{name}' is not a model under 'ieat/models'"
                                f"{suggest(name, names)}")

    for table, spec in ieat["tables"].items():
        named(("ieat", "tables", table, "models"), spec["models"])
    named(("ieat", "specificity", "models"), ieat["specificity"]["models"])
    for name, spec in ieat["models"].items():
        where = f"ieat/models/{name}"
        if spec["source"] == "images" and "images" not in encodes(spec):
            problems.append(f"key '{where}/adapter': adapter '{spec['adapter']}' embeds no images")
        own = [o for n, (entry, o) in names.items() if entry == name and o]
        paper = spec.get("paper")
        if isinstance(paper, dict) and set(paper) - set(own):
            has = f"it has: {', '.join(own)}" if own else "one output: give `paper` as a name"
            problems.append(f"key '{where}/paper': {', '.join(sorted(set(paper) - set(own)))}: not an output of "
                            f"'{name}' ({has})")
        elif isinstance(paper, str) and own:
            problems.append(f"key '{where}/paper': '{name}' has several outputs ({', '.join(own)}); give `paper` "
                            "as a mapping {output: published model}")
    return problems


def targets(config, down):
    """Tables 1-3, the specificity check, the sweep, the images and the figures; without the upstream
    repository (``down``) only the tables that need none of it (one's own vectors), and no figures."""
    plan, upstream = IeatPlan(config), UPSTREAM not in down
    figures = ([table_path(f, "png") for f in FIGURES] + [table_path(f, "html") for f in FIGURE_PAGES]
               if plan.tables and upstream else [])
    return plan.targets(upstream=upstream) + figures


def entries(config):
    """The models that load weights: ``source: images`` entries and the sweep's (published and one's own
    vectors load none)."""
    return {name: spec for name, spec in ieat_models(config["ieat"]).items() if spec.get("source") == "images"}


def tests(config):
    folder = Path(config["ieat"]["stimuli"])
    return [("ieat", p.stem, str(p)) for p in sorted(folder.glob("*.yaml"))]


def tables(config):
    ieat = config["ieat"]
    found = {name: Table(table_path(name), spec["caption"]) for name, spec in ieat["tables"].items()}
    if ieat["specificity"]["models"]:
        found["specificity"] = Table(table_path("specificity"), SPECIFICITY_CAPTION)
    if ieat["sweep"]["models"]:
        found["sweep"] = Table(table_path("sweep"), ieat["sweep"]["caption"])
    return found | mleat_tables("ieat", {name: t for name, t in found.items() if name != "specificity"})


SUITE = Suite(
    name="ieat", rules=("ieat.smk",), adapters={"models": "models", "sweep/models": "models"},
    check=check, targets=targets, weights=lambda config: IeatPlan(config).weights(), entries=entries,
    tests=tests, tables=tables,
)
