"""The schema files of this folder, read without importing an adapter (which imports torch).

    adapters("models")                       # the adapter names with a schema: models/<name>.yaml
    adapter_schema("models", "lxmert")       # the JSON schema of its keys, its includes merged
    defaults("detectors", "bua")             # {key: default} of every key its schema gives a default
    with_defaults({"adapter": "bua", ...}, "detectors")   # the entry with those defaults filled in

An adapter's schema ``<kind>/<adapter>.yaml`` (kind: models or detectors) declares the keys of its
config entries (``properties``, ``required``), each key's default once (``default:``: the
registry's build and the config check fill it in, so the adapter reads ``spec[key]``), and what the
workflow plans from the family without importing it (``family:``, read by vlbias.models.families and
vlbias.weights.declarations). ``include: [<fragment>, ...]`` merges shared fragments first, each a
file named relative to the including file's folder (``_hf``, ``../_runtime``); a key the including
file declares again replaces the fragment's. The stimulus schemas (``*.schema.yaml``) are
vlbias.io.stimuli's.
"""

import copy
import posixpath
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from vlbias import SCHEMA
from vlbias.errors import InputError, UsageError
from vlbias.safeyaml import load_yaml

SCHEMAS = Path(__file__).resolve().parent


def adapters(kind: str) -> list[str]:
    """The adapter names with a schema under vlbias/schemas/<kind>/ (every registered adapter has one)."""
    return sorted(p.stem for p in (SCHEMAS / kind).glob("*.yaml") if not p.stem.startswith("_"))


@cache
def document(name: str) -> dict[str, Any]:
    """The schema file ``<name>.yaml`` (a path below vlbias/schemas/, e.g. ``models/lxmert``) as
    written; {} for none (an unknown adapter)."""
    path = SCHEMAS / f"{name}.yaml"
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = load_yaml(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise InputError(path, f"not a readable schema file ({e})") from None
    if not isinstance(doc, dict):
        raise InputError(path, f"not a schema: a mapping of keys, got {type(doc).__name__}")
    return doc


def chain(kind: str, adapter: object) -> tuple[str, ...]:
    """The files that make ``adapter``'s schema, in merge order: each include's chain (depth first, in
    the order listed), then the adapter's own file; as names below vlbias/schemas/."""
    return _chain(f"{kind}/{adapter}") if isinstance(adapter, str) else ()


@cache
def _chain(name: str) -> tuple[str, ...]:
    out: list[str] = []
    for fragment in document(name).get("include", []):
        out += [n for n in _chain(posixpath.normpath(posixpath.join(posixpath.dirname(name), fragment)))
                if n not in out]
    return (*out, name)


@cache
def adapter_schema(kind: str, name: str) -> dict[str, Any]:
    """The JSON schema of adapter ``name``'s own keys: its file with its ``include``d fragments merged
    (its ``family`` declaration is vlbias.models.families's and vlbias.weights.declarations' to read)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for part in chain(kind, name):
        doc = document(part)
        properties |= doc.get("properties") or {}
        required += doc.get("required", [])
    own = {k: v for k, v in document(f"{kind}/{name}").items() if k not in ("family", "include")}
    return {**own, "type": "object", "properties": properties, "required": list(dict.fromkeys(required))}


def defaults(kind: str, name: object) -> dict[str, Any]:
    """{key: default} of ``name``'s keys whose schema declares one ({} for an unknown adapter)."""
    if not isinstance(name, str):
        return {}
    return {key: prop["default"] for key, prop in adapter_schema(kind, name)["properties"].items()
            if isinstance(prop, dict) and "default" in prop}


def with_defaults(spec: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A copy of entry ``spec`` with every key its adapter's schema gives a default and the entry leaves
    unset filled in (the schema's value copied: a caller may change its own)."""
    return {**copy.deepcopy(defaults(kind, spec.get("adapter"))), **spec}


def schema_path() -> Path:
    """The workflow's schema: in the working directory's workflow/, else the repository's beside src/
    (here, not in vlbias.config, so that the command line's parser finds it without the config checks)."""
    schemas = [Path(SCHEMA), Path(__file__).resolve().parents[3] / SCHEMA]
    schema = next((s for s in schemas if s.is_file()), None)
    if schema is None:
        raise UsageError(f"no {SCHEMA} here or beside the vlbias package: run in the repository")
    return schema
