"""The workflow configuration, checked before any job runs.

    check_config(config, "workflow/schemas/config.schema.yaml")   # the Snakefile's first step

Three passes, each error naming the config key by its path (``ieat/models/clip/poolng``):

1. the whole config against the workflow's JSON schema; defaults it declares are filled in;
2. every model and detector entry against its adapter's own schema
   (``vlbias/schemas/{models,detectors}/<adapter>.yaml``), so a misspelt key is an error with the
   closest valid key suggested, not a key silently ignored or a job failing halfway;
3. the references between keys: a table, the specificity check or a build list naming a model,
   test, detector or dataset that does not exist.

No adapter module is imported (they import torch): checking stays cheap enough for every
Snakemake invocation.
"""

import copy
import re
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from vlbias.errors import InputError
from vlbias.models.plan import embeds, family, outputs
from vlbias.schemas import adapter_schema, adapters
from vlbias.suites.grounded.protocol import resolve
from vlbias.validation import Validator, key_path, suggest
from vlbias.validation import problems as schema_errors
from vlbias.weights import SECTIONS

SOURCE = "config/config.yaml"
MAX_ERRORS = 10

# (section path, adapter kind): the config mappings whose entries are built by an adapter registry
ADAPTER_SECTIONS = [
    (("ieat", "models"), "models"),
    (("ieat", "sweep", "models"), "models"),  # a list (adapter default: open_clip)
    (("seat", "models"), "models"),
    (("grounded", "models"), "models"),
    (("mlm", "models"), "models"),
    (("regions", "detectors"), "detectors"),
]


class ConfigError(InputError):
    """The configuration is invalid; the message lists every problem found, one per line."""

    def __init__(self, problems, source=SOURCE):
        self.problems = list(problems)
        shown = self.problems[:MAX_ERRORS]
        more = len(self.problems) - len(shown)
        lines = [*shown, *([f"... and {more} more"] if more else [])]
        super().__init__(source, "invalid configuration:\n  " + "\n  ".join(lines))


def check_config(config, schema_path, root="."):
    """Validate ``config`` in place (defaults filled in); raise ConfigError listing every problem.

    ``root`` is the directory relative paths of the config are read from (stimulus folders).
    """
    schema = _read_yaml(schema_path)
    problems = schema_problems(config, schema)
    if not problems:  # the later passes assume the shapes the schema guarantees
        problems = adapter_problems(config, schema)
    if not problems:  # and the references the shapes the adapters' schemas guarantee (an iGPT `layer: {}`)
        problems = reference_problems(config, Path(root))
    if problems:
        raise ConfigError(problems)
    return config


# --- pass 1 and 2: JSON schemas -------------------------------------------------------------------


def _fill_defaults(validator_class):
    """A validator class that also sets each missing property that has a ``default`` (as Snakemake's
    ``validate`` does), so the rules can read every documented key."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))  # the schema's own stays as is
        yield from validate_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": properties})


_Validator = _fill_defaults(Validator)


def _problems(instance, schema, where=()):
    return schema_errors(instance, schema, where, _Validator)


def schema_problems(config, schema):
    """Pass 1: the config against the workflow's schema (unknown top-level keys in one short line)."""
    if not isinstance(config, dict):
        return [f"expected a mapping of keys, got {type(config).__name__}"]
    return _problems(config, schema)


def stats_problems(stats, schema_path):
    """Pass 1 for a ``stats`` mapping alone (the command line's flags over the config's ``stats``)."""
    return _problems(stats, _read_yaml(schema_path)["properties"]["stats"], ("stats",))


@cache
def _read_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _entry_schema(schema, section):
    """The schema of one entry of ``section`` (a path of keys) in the workflow's config schema."""
    node = schema
    for key in section:
        node = node["properties"][key]
    entry = node.get("items") if node.get("type") == "array" else node.get("additionalProperties")
    return entry if isinstance(entry, dict) else {}


def adapter_problems(config, schema):
    """Pass 2: each entry of an adapter section against its section's keys plus its adapter's keys."""
    problems = []
    for section, kind in ADAPTER_SECTIONS:
        entries = config
        for key in section:
            entries = (entries or {}).get(key) or {}
        base = _entry_schema(schema, section)
        for name, entry in entries.items() if isinstance(entries, dict) else enumerate(entries):
            where = (*section, name)
            adapter = entry.get("adapter")
            if adapter is None:  # e.g. an iEAT model with published vectors: the section's keys only
                own = {"properties": {}, "required": []}
            elif adapter not in adapters(kind):
                known = adapters(kind)
                problems.append(f"key '{key_path((*where, 'adapter'))}': unknown adapter '{adapter}'"
                                f"{suggest(adapter, known)}; known: {', '.join(known)}")
                continue
            else:
                own = adapter_schema(kind, adapter)
                renamed = family(adapter).get("renamed", {}) if kind == "models" else {}
                if stale := [old for old in renamed if old in entry]:  # said once, not as unknown keys too
                    problems += [f"key '{key_path((*where, old))}': no longer read; write `{renamed[old]}` instead"
                                 for old in stale]
                    entry = {k: v for k, v in entry.items() if k not in stale}
            merged = {"type": "object", "additionalProperties": False,
                      "properties": {**base.get("properties", {}), **own["properties"]},
                      "required": list(dict.fromkeys([*base.get("required", []), *own.get("required", [])]))}
            problems += _problems(entry, merged, where)
    return problems


# --- the models the iEAT rules plan for ------------------------------------------------------------


def sweep_name(entry):
    """A sweep entry's model name: its ``name``, else "<model>-<weights>" in lower case, other characters
    than a-z 0-9 _ . - as "-". The model: the first of ``arch`` (open_clip), the last part of ``model_id``
    or of ``path``, ``architecture``, the adapter; the weights: the ``pretrained`` tag, the checkpoint's
    file name, "random<seed>", or nothing where the model's id or directory names them
    ("vit-b-32-openai", "clip-vit-base-patch32", "clip-random0")."""
    if entry.get("name"):
        return entry["name"]
    model = (entry.get("arch") or next((Path(entry[k]).name for k in ("model_id", "path") if entry.get(k)), None)
             or entry.get("architecture") or entry.get("adapter", ""))
    weights = entry.get("pretrained") or (Path(entry["checkpoint"]).stem if entry.get("checkpoint") else
                                          f"random{entry.get('seed', 0)}" if entry.get("weights") == "random" else "")
    return re.sub(r"[^a-z0-9_.-]+", "-", f"{model}-{weights}".lower()).strip("-")


def ieat_models(ieat):
    """{name: entry} of every iEAT model: ``ieat/models`` and the sweep's entries (``sweep_name``;
    ``source: images``). A sweep name taken twice, or by ``ieat/models``, keeps the first (the check
    names the clash)."""
    models = dict(ieat["models"])
    for entry in (ieat.get("sweep") or {}).get("models", []):
        models.setdefault(sweep_name(entry), {"source": "images", **entry})
    return models


def weights_entries(config):
    """{entry name: spec} of every configured entry that loads weights (vlbias.weights):
    ``ieat/<name>`` (models with ``source: images`` and the sweep's open_clip entries),
    ``seat/<name>``, ``grounded/<name>``, ``mlm/<name>``, ``regions/<name>`` (detectors). Read from
    the config alone (no adapter import)."""
    found = {}
    for section, kind in SECTIONS.items():
        part = config.get(section) or {}
        if section == "ieat":  # the sweep's entries are open_clip's (the schema's default, for an unchecked config)
            sweep = [{"adapter": "open_clip", **e} for e in (part.get("sweep") or {}).get("models", [])]
            specs = {name: spec for name, spec in ieat_models({"models": part.get("models") or {},
                                                               "sweep": {"models": sweep}}).items()
                     if spec.get("source") == "images"}  # published and own vectors load no weights
        else:
            specs = part.get(kind) or {}
        found.update({f"{section}/{name}": spec for name, spec in specs.items()
                      if isinstance(spec, dict) and spec.get("adapter")})
    return found


def table_models(models):
    """{name a table uses: (entry name, output or None)}: an entry with one output by its own name, each
    output of an entry with several (vlbias.models.plan.outputs: iGPT's layers and logits) as "<entry>/<output>"."""
    names = {}
    for name, spec in models.items():
        several = outputs(spec) if spec.get("source") == "images" else []
        if len(several) > 1:
            names.update({f"{name}/{o}": (name, o) for o in several})
        else:
            names[name] = (name, None)
    return names


def encodes(spec):
    """What a model entry embeds: published vectors images; a user's vectors whatever their ids name;
    an adapter what its family declares (vlbias.models.plan.embeds)."""
    source = spec.get("source", "images" if spec.get("adapter") else None)
    if source == "published":
        return ("images",)
    if source == "vectors":
        return ("images", "texts")
    return embeds(spec.get("adapter"))


# --- pass 3: references between keys -------------------------------------------------------------


def _names(problems, where, names, known, what):
    """Check that each of ``names`` (a list at key ``where``) is one of ``known``."""
    for i, name in enumerate(names or []):
        if name not in known:
            problems.append(f"key '{key_path((*where, i))}': '{name}' is not {what}{suggest(name, known)}")


def _stimulus_ids(folder):
    return {p.stem for p in Path(folder).glob("*.yaml")}


def reference_problems(config, root=Path(".")):
    """Pass 3: names that must exist elsewhere in the config (or as a stimulus file)."""
    problems = []
    ieat, seat = config["ieat"], config["seat"]
    ieat_tests = _stimulus_ids(root / ieat["stimuli"])
    problems += _ieat_model_references(ieat, ieat_tests)
    for table, spec in ieat["tables"].items():
        _names(problems, ("ieat", "tables", table, "tests"), spec["tests"], ieat_tests,
               f"a stimulus file in {ieat['stimuli']}")
    spec = ieat["specificity"]
    if spec["models"] and spec["test"] not in ieat_tests:
        problems.append(f"key 'ieat/specificity/test': '{spec['test']}' is not a stimulus file in "
                        f"{ieat['stimuli']}{suggest(spec['test'], ieat_tests)}")
    seat_ids = _stimulus_ids(root / seat["stimuli"])
    if seat["tests"] != "all":
        _names(problems, ("seat", "tests"), seat["tests"], seat_ids, f"a stimulus file in {seat['stimuli']}")
    for name, spec in seat["models"].items():
        if spec.get("tests", "all") != "all":
            _names(problems, ("seat", "models", name, "tests"), spec["tests"], seat_ids,
                   f"a stimulus file in {seat['stimuli']}")
        if spec.get("adapter") and "texts" not in encodes(spec):
            problems.append(f"key 'seat/models/{name}/adapter': adapter '{spec['adapter']}' embeds no texts")
    detectors = set((config.get("regions") or {}).get("detectors", {}))
    tsv = (config.get("regions") or {}).get("tsv", {})
    for name in sorted(detectors & set(tsv)):  # both would write results/regions/<dataset>/<name>.h5
        problems.append(f"key 'regions/tsv/{name}': '{name}' is also a detector under 'regions/detectors'")
    if config.get("regions"):
        for i, pair in enumerate(config["regions"]["build"]):
            if pair["detector"] not in detectors | set(tsv):
                problems.append(f"key 'regions/build/{i}/detector': '{pair['detector']}' is not a detector under "
                                f"'regions/detectors' nor a source under 'regions/tsv'"
                                f"{suggest(pair['detector'], detectors | set(tsv))}")
            elif pair["detector"] in tsv and pair["dataset"] not in tsv[pair["detector"]]["files"]:
                problems.append(f"key 'regions/build/{i}': 'regions/tsv/{pair['detector']}/files' names no TSV "
                                f"file for dataset '{pair['dataset']}'")
    problems += _grounded_references(config, detectors, tsv) + _mlm_references(config, detectors)
    return problems


def _ieat_model_references(ieat, tests):
    """The models tables and the specificity check name (an entry with several outputs: one of them),
    the sweep's names and tests, each entry's ``paper`` names and what its adapter embeds."""
    problems, models = [], ieat_models(ieat)
    names = table_models(models)
    sweep = ieat.get("sweep") or {}
    seen = {}
    for i, entry in enumerate(sweep.get("models", [])):
        name = sweep_name(entry)
        if name in ieat["models"] or name in seen:
            other = f"'ieat/models/{name}'" if name in ieat["models"] else f"'ieat/sweep/models/{seen[name]}'"
            problems.append(f"key 'ieat/sweep/models/{i}': its name '{name}' is taken by {other} (set `name`)")
        seen.setdefault(name, i)
        if "images" not in encodes({"source": "images", **entry}):
            problems.append(f"key 'ieat/sweep/models/{i}/adapter': adapter '{entry['adapter']}' embeds no images")
    if sweep.get("tests", "all") != "all":
        _names(problems, ("ieat", "sweep", "tests"), sweep["tests"], tests, f"a stimulus file in {ieat['stimuli']}")

    def check(where, listed):
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
        check(("ieat", "tables", table, "models"), spec["models"])
    check(("ieat", "specificity", "models"), ieat["specificity"]["models"])
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


def _grounded_references(config, detectors, tsv):
    grounded, problems = config.get("grounded"), []
    if not grounded:
        return problems
    for name, spec in grounded["images"]["datasets"].items():
        source = spec.get("source", "grounded")
        if source is not None and source not in config["sources"]:
            problems.append(f"key 'grounded/images/datasets/{name}/source': '{source}' is not an entry of "
                            f"'sources'{suggest(source, config['sources'])}")
    models = grounded.get("models", {})
    protocols = {}
    for name, spec in grounded.get("protocols", {"paper": "paper"}).items():
        try:
            protocols[name] = resolve(spec)
        except InputError as e:
            problems.append(f"key 'grounded/protocols/{name}': {e}")
    if grounded.get("protocol") is not None and grounded["protocol"] not in grounded.get("protocols", {}):
        problems.append(f"key 'grounded/protocol': '{grounded['protocol']}' is not a protocol under "
                        f"'grounded/protocols'{suggest(grounded['protocol'], grounded.get('protocols', {}))}")
    for protocol, switches in protocols.items():
        columns = {}
        for i, name in enumerate(grounded.get("experiments", {}).get("models", [])):
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
    problems, paper = [], {models[m]["column"] for m in grounded.get("experiments", {}).get("models", [])
                           if m in models} | set(grounded.get("experiments", {}).get("columns", []))
    columns = {}
    for i, name in enumerate((grounded.get("extended") or {}).get("models", [])):
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


def _mlm_references(config, detectors):
    mlm, problems = config.get("mlm"), []
    if not mlm:
        return problems
    models = mlm["models"]
    if mlm["reference"] not in models:
        problems.append(f"key 'mlm/reference': '{mlm['reference']}' is not a model under 'mlm/models'"
                        f"{suggest(mlm['reference'], models)}")
    for name, spec in models.items():
        if family(spec.get("adapter")).get("mlm_head") is False:  # declared in its schema (BLIP's retrieval model)
            problems.append(f"key 'mlm/models/{name}': adapter '{spec['adapter']}' has no masked-language head: "
                            "the masked-LM study does not apply to it")
    vl = [m for m in models if m != mlm["reference"]]
    _names(problems, ("mlm", "build"), mlm["build"], vl,
           "a vision-language model under 'mlm/models' (the reference is built with them)")
    dataset = mlm.get("images")
    if dataset is not None:
        manifests = (config.get("regions") or {}).get("manifests", {})
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
