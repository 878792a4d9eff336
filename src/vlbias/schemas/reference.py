"""The configuration reference, generated from the schemas: every key of the workflow's config
(workflow/schemas/config.schema.yaml) and of each adapter's entries (vlbias/schemas/{models,detectors}),
with its type, default and the schema's description, each said once, there.

    python -m vlbias.schemas.reference [SCHEMA] > configuration.md   # what docs/hooks.py puts in the docs

A key is named by its path (``ieat.models.<name>.images.size``; ``<name>`` for an entry of a mapping,
``[]`` for an item of a list); a ``$ref`` is followed, and a key that only repeats another's
definition (a YAML anchor) is listed where it is, with that description.
"""

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vlbias.safeyaml import load_yaml
from vlbias.schemas import adapter_schema, adapters, document

Row = tuple[str, str, str, str]  # key path, type, default, description

INTRO = """# Configuration reference

Generated from the schemas when the docs are built (`vlbias.schemas.reference`): every key of
`config/config.yaml` (`workflow/schemas/config.schema.yaml`), then the keys of each adapter's
entries (`src/vlbias/schemas/{models,detectors}/<adapter>.yaml`). The config check fills in each
default and names a misspelt key with the closest valid one (see [Getting started](getting-started.md)).
"""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while isinstance(node, dict) and "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def type_of(node: dict[str, Any], defs: dict[str, Any] | None = None) -> str:
    """A key's type as the reference writes it: ``integer ≥ 1``, ``one of: center, top-left``, ..."""
    node = _resolve(node, defs or {})
    if "enum" in node:
        return "one of: " + ", ".join(_value(v) for v in node["enum"])
    if "const" in node:
        return _value(node["const"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return " or ".join(dict.fromkeys(type_of(n, defs) for n in node[key]))
    kind = node.get("type", "")
    kind = " or ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
    if kind == "array" and isinstance(node.get("items"), dict) and not node["items"].get("properties"):
        kind = f"list of {type_of(node['items'], defs) or 'values'}"
    bounds = [f"≥ {node['minimum']}" if "minimum" in node else "", f"≤ {node['maximum']}" if "maximum" in node else ""]
    return " ".join([kind, *filter(None, bounds)]).strip()


def _value(v: Any) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def rows(node: dict[str, Any], defs: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[Row]:
    """(path, type, default, description) of ``node``'s keys, depth first in the schema's order."""
    node = _resolve(node, defs)
    if path:
        default = _value(node["default"]) if "default" in node else ""
        yield ".".join(path), type_of(node, defs), default, " ".join(str(node.get("description", "")).split())
    for key, sub in (node.get("properties") or {}).items():
        yield from rows(sub, defs, (*path, key))
    for pattern, sub in (node.get("patternProperties") or {}).items():
        yield from rows(sub, defs, (*path, f"<{pattern}>"))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        yield from rows(extra, defs, (*path, "<name>"))
    items = node.get("items")
    if isinstance(items, dict) and items.get("properties"):
        yield from rows(items, defs, (*path, "[]"))


def _has_keys(node: dict[str, Any]) -> bool:
    return bool(node.get("properties") or node.get("patternProperties")
                or isinstance(node.get("additionalProperties"), dict))


def escape(text: str) -> str:
    """``text`` as Markdown shows it: a placeholder (``<mirror>/<name>``) outside a code span escaped,
    which Markdown would otherwise pass on as an HTML tag and the browser drop."""
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;")
                   for part in re.split(r"(`[^`]*`)", text))


def _table(found: list[Row]) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, kind, default, text in found:
        cells = [f"`{key}`", escape(kind), f"`{default}`" if default else "", escape(text)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def _described(node: dict[str, Any]) -> str:
    return escape(" ".join(str(node.get("description", "")).split()))


def reference(schema_path: str | Path) -> str:
    """The reference page (Markdown): a section per top-level key of the config, then per adapter."""
    schema = load_yaml(Path(schema_path).read_text(encoding="utf-8"))
    defs = schema.get("$defs", {})
    sections = {key: _resolve(node, defs) for key, node in schema["properties"].items()}
    scalar = [key for key, node in sections.items() if not _has_keys(node)]
    out = [INTRO, "## Top level", "", *_table([r for key in scalar for r in rows(sections[key], defs, (key,))]), ""]
    for key, node in sections.items():
        if key not in scalar:  # the section's description heads it, its keys follow
            out += [f"## `{key}`", "", _described(node), ""]
            out += [*_table(list(rows(node, defs, (key,)))[1:]), ""]
    for kind, title in (("models", "Model adapters"), ("detectors", "Detector adapters")):
        out += [f"## {title}", "", f"The keys of an entry with `adapter: <name>` (`src/vlbias/schemas/{kind}/`), "
                "beside its section's own keys above.", ""]
        for name in adapters(kind):
            own = adapter_schema(kind, name)
            out += [f"### `{name}`", "", _described(document(f"{kind}/{name}")), ""]
            out += [*_table([r for key, sub in own["properties"].items() for r in rows(sub, {}, (key,))]), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference(sys.argv[1] if len(sys.argv) > 1 else "workflow/schemas/config.schema.yaml"))
