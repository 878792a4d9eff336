"""The grounded WEAT/SEAT suite as the workflow, the config check and the command line see it
(vlbias.suites.stage): its section ``grounded``, its rules (workflow/rules/grounded_images.smk: the
images and Table 1; grounded_tables.smk: Tables 3-7), the references its keys make, its targets,
its weights, its tests and tables. The region stores its models read are the regions stage's
(vlbias.suites.regions)."""

from functools import partial
from pathlib import Path

from vlbias.errors import InputError
from vlbias.models.families import embeds
from vlbias.suites.grounded.plan import COMPARISON_CAPTION, TABLE1_CAPTION, GroundedImagesPlan, GroundedPlan, table_path
from vlbias.suites.grounded.protocol import resolve
from vlbias.suites.stage import Suite, Table, mleat_tables
from vlbias.validation import suggest

FIGURES = ["heatmap", "published"]  # results/grounded/<figure>.png, of the main protocol's tables
FIGURE_PAGES = ["heatmap"]  # results/grounded/<figure>.html: the report's view of the figure (rule grounded_figures)
TABLE1 = "table1"  # the datasets' images (grounded_images.smk)
COMPARISON = "comparison"  # the printed numbers beside each protocol's


def check(config, root):
    """The image datasets' sources; the protocols, each resolved; the models the experiments and the
    extended tables switch on, one per column under each protocol; each model's detector and
    released region features (the regions stage's detectors and TSV sources)."""
    grounded, problems = config["grounded"], []
    regions = config.get("regions") or {}
    detectors, tsv = set(regions.get("detectors") or {}), regions.get("tsv") or {}
    for name, spec in grounded["images"]["datasets"].items():
        source = spec["source"]
        if source is not None and source not in config["sources"]:
            problems.append(f"key 'grounded/images/datasets/{name}/source': '{source}' is not an entry of "
                            f"'sources'{suggest(source, config['sources'])}")
    models = grounded.get("models") or {}
    protocols = {}
    for name, spec in grounded["protocols"].items():
        try:
            protocols[name] = resolve(spec)
        except InputError as e:
            problems.append(f"key 'grounded/protocols/{name}': {e}")
    if grounded.get("protocol") is not None and grounded["protocol"] not in grounded["protocols"]:
        problems.append(f"key 'grounded/protocol': '{grounded['protocol']}' is not a protocol under "
                        f"'grounded/protocols'{suggest(grounded['protocol'], grounded['protocols'])}")
    for protocol, switches in protocols.items():
        columns = {}
        for i, name in enumerate(grounded["experiments"].get("models") or []):
            if name not in models:
                if protocol == next(iter(protocols)):  # said once, not per protocol
                    problems.append(f"key 'grounded/experiments/models/{i}': '{name}' is not a model under "
                                    f"'grounded/models'{suggest(name, models)}")
                continue
            if models[name].get("visualbert", switches["visualbert"]) != switches["visualbert"]:
                continue  # this VisualBERT is the other protocols'
            column = models[name]["column"]
            if column in columns:
                problems.append(f"key 'grounded/experiments/models/{i}': '{name}' and '{columns[column]}' both "
                                f"fill column '{column}' under protocol '{protocol}'")
            columns[column] = name
    problems += _extended_references(grounded, models)
    for name, spec in models.items():
        if "detector" not in spec:
            if not embeds(spec["adapter"]):  # a dual encoder reads no regions: its column shows n/a
                problems.append(f"key 'grounded/models/{name}': needs 'detector', the region store it reads")
        elif spec["detector"] not in detectors:
            problems.append(f"key 'grounded/models/{name}/detector': '{spec['detector']}' is not a detector under "
                            f"'regions/detectors'{suggest(spec['detector'], detectors)}")
        for dataset, source in (spec.get("released_regions") or {}).items():
            if source not in tsv and source not in detectors:
                problems.append(f"key 'grounded/models/{name}/released_regions/{dataset}': '{source}' is not a "
                                f"source under 'regions/tsv' nor a detector{suggest(source, [*tsv, *detectors])}")
            elif source in tsv and dataset not in tsv[source]["files"]:
                problems.append(f"key 'grounded/models/{name}/released_regions/{dataset}': 'regions/tsv/{source}/"
                                f"files' names no TSV file for dataset '{dataset}'")
    return problems


def _extended_references(grounded, models):
    """The extended tables' models exist, each column its own and none of the paper's."""
    switched_on = grounded["experiments"].get("models") or []
    problems, paper = [], ({models[m]["column"] for m in switched_on if m in models}
                           | set(grounded["experiments"]["columns"]))
    columns = {}
    for i, name in enumerate(grounded["extended"].get("models") or []):
        if name not in models:
            problems.append(f"key 'grounded/extended/models/{i}': '{name}' is not a model under "
                            f"'grounded/models'{suggest(name, models)}")
            continue
        column = models[name]["column"]
        if column in paper or column in columns:
            problems.append(f"key 'grounded/extended/models/{i}': '{name}' fills column '{column}', which "
                            f"{'is a column of the paper' if column in paper else 'another extended model fills'}")
        columns[column] = name
    return problems


def targets(config, down):
    """Each dataset's images and Table 1; with every dataset's images to be had, Tables 3-7 of each
    protocol, the comparison and the figures (they read every dataset's)."""
    offline = [name for kind, name in down if kind == "images"]
    found = GroundedImagesPlan(config).targets(offline=offline)
    if not offline:
        tables = GroundedPlan(config).targets()
        found += tables + ([table_path(f, "png") for f in FIGURES] + [table_path(f, "html") for f in FIGURE_PAGES]
                           if tables else [])
    return found


def probes(config):
    images = GroundedImagesPlan(config)
    return {dataset: partial(images.probe_urls, dataset) for dataset in images.datasets}


def tests(config):
    folder = Path(config["grounded"]["stimuli"])
    return [(f"grounded/{p.parent.name}", p.stem, str(p)) for p in sorted(folder.glob("*/*.yaml"))]


def tables(config):
    plan = GroundedPlan(config)
    found = {TABLE1: Table(table_path(TABLE1), TABLE1_CAPTION)}
    targets = {target: Table(table_path(target), plan.caption(target)) for target in plan.table_targets}
    found |= targets | mleat_tables("grounded", targets)
    if plan.published:
        found[COMPARISON] = Table(table_path(COMPARISON), COMPARISON_CAPTION)
    return found


SUITE = Suite(
    name="grounded", rules=("grounded_images.smk", "grounded_tables.smk"),
    adapters={"models": "models"}, check=check, targets=targets,
    weights=lambda config: GroundedPlan(config).weights(), probes=probes, tests=tests, tables=tables,
)
