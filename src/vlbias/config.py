"""The workflow configuration, checked before any job runs.

    check_config(config, "workflow/schemas/config.schema.yaml")   # the Snakefile's first step

Three passes, each error naming the config key by its path (``ieat/models/clip/poolng``):

1. the whole config against the workflow's JSON schema; defaults it declares are filled in, so
   every reader (the rules, the plans, the command line) reads each key's default from there;
2. every model and detector entry against its adapter's own schema
   (``vlbias/schemas/{models,detectors}/<adapter>.yaml``), so a misspelt key is an error with the
   closest valid key suggested, not a key silently ignored or a job failing halfway; the
   defaults it declares are filled in too;
3. the references between keys, each stage's own check (vlbias.suites.registry: a table, the
   specificity check or a build list naming a model, test, detector or dataset that does not exist).

The passes are generic: which sections hold adapter entries and what references each section makes
are declared by its stage (vlbias.suites.stage). No adapter module is imported (they import torch):
checking stays cheap enough for every Snakemake invocation.
"""

import copy
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from vlbias import CONFIG
from vlbias.errors import InputError, UsageError
from vlbias.models.families import family
from vlbias.safeyaml import load_yaml
from vlbias.schemas import adapter_schema, adapters, schema_path
from vlbias.suites import registry
from vlbias.validation import Validator, key_path, suggest
from vlbias.validation import problems as schema_errors

MAX_ERRORS = 10


class ConfigError(InputError):
    """The configuration is invalid; the message lists every problem found, one per line."""

    def __init__(self, problems, source=CONFIG):
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
        problems = registry.reference_problems(config, Path(root))
    if problems:
        raise ConfigError(problems)
    return config


def load_config(path):
    """The config at ``path``, checked as the workflow checks it (defaults filled in)."""
    return check_config(read_config(path), schema_path())


def read_config(path):
    """The document in the config file ``path``, unchecked, read by vlbias.safeyaml (an alias bomb refused
    from the file's size, a key given twice refused): InputError naming the file otherwise."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:  # a file: the error's line names it
            return load_yaml(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config (run in the repository, or give --config)") from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {e}") from None


def configured_models(config):
    """[(suite, name, entry)] of every configured model, suite by suite."""
    return [(suite.name, name, spec) for suite in registry.suites(config)
            for name, spec in suite.model_entries(config).items()]


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
    """Pass 1 for a ``stats`` mapping alone (the command line's flags over the config's ``stats``); its
    defaults are filled in."""
    schema = _read_yaml(schema_path)
    return _problems(stats, _below(schema, schema["properties"]["stats"]), ("stats",))


def robustness_problems(settings, schema_path):
    """Pass 1 for the settings of a specification curve (the schema's ``$defs/robustness``: vlbias.api's
    ``robustness=``); its defaults are filled in."""
    schema = _read_yaml(schema_path)
    return _problems(settings, _below(schema, schema["$defs"]["robustness"]), ("robustness",))


def entry_problems(section, name, entry, schema_path):
    """Pass 2 for one model entry of ``<section>: models`` alone (a library user's: vlbias.api), its
    defaults filled in."""
    return adapter_problems({section: {"models": {name: entry}}}, _read_yaml(schema_path))


def _below(schema, node):
    """``node`` of ``schema`` as a schema of its own: with the definitions its ``$ref``s name."""
    return {**node, "$defs": schema.get("$defs", {})}


@cache
def _read_yaml(path):
    with open(path, encoding="utf-8") as f:
        return load_yaml(f)


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
    for section, kind in registry.adapter_sections():
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
            problems += _problems(entry, _below(schema, merged), where)
    return problems
