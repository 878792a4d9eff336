"""Each adapter default is written once, in the adapter's schema (vlbias/schemas/, vlbias.schemas): the
registry's build fills it in before the adapter sees the entry, whoever calls build, and no adapter
reads a key its schema defines with a default of its own (``spec.get(key, <default>)``)."""

import ast
from pathlib import Path

import pytest

import vlbias
from vlbias.registry import Registry
from vlbias.schemas import adapter_schema, adapters, defaults, with_defaults

SRC = Path(vlbias.__file__).parent


def schema_keys(kind):
    return set().union(*(adapter_schema(kind, a)["properties"] for a in adapters(kind)))


# the modules that read model or detector entries: the adapters, what they build on, the runtime and
# the weights layer (which reads both kinds); not regions/tsv.py or the planners, whose entries are the
# workflow config's own sections (its schema: workflow/schemas/config.schema.yaml)
READERS = [
    *[(p, schema_keys("models")) for p in sorted((SRC / "models").glob("*.py"))],
    *[(SRC / "regions" / f"{m}.py", schema_keys("detectors"))
      for m in (*adapters("detectors"), *(f"modeling_{a}" for a in adapters("detectors")), "resnet", "genome")
      if (SRC / "regions" / f"{m}.py").is_file()],
    *[(p, schema_keys("models") | schema_keys("detectors"))
      for p in [SRC / "runtime.py", *sorted((SRC / "weights").glob("*.py"))]],
]


def written(node):
    """Whether the expression ``node`` is a default written in the code: a literal, a container or
    negation of literals, or a module constant (an upper-case name)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(map(written, node.elts))
    if isinstance(node, ast.UnaryOp):
        return written(node.operand)
    return isinstance(node, ast.Name) and node.id.isupper()


def own_defaults(path, keys, root=SRC.parent):
    """["file:line: spec.get('key', ...)"] for each read of a schema key with a default written in the code
    (a default derived from the family's schema, e.g. the first of its ``ws_vectors``, is the schema's)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "spec" and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys and written(node.args[1])):
            found.append(f"{path.relative_to(root)}:{node.lineno}: spec.get({node.args[0].value!r}, ...)")
    return found


def test_no_adapter_keeps_a_default_of_its_own_for_a_schema_key():
    assert len(READERS) > 20
    found = [line for path, keys in READERS for line in own_defaults(path, keys)]
    assert not found, "\n".join(found)


def test_the_check_finds_a_default_of_the_codes_own(tmp_path):
    path = tmp_path / "vlbias" / "adapter.py"
    path.parent.mkdir()
    path.write_text('def f(spec):\n    return spec.get("seed", 0), spec.get("config"), spec.get("other", 1), d.get("seed", 0)\n'
                    'def g(spec, self):\n    return spec.get("size", SIZE), spec.get("scales", [6, -1]), '
                    'spec.get("ws_vector", self.ws_vectors[0])\n')
    assert own_defaults(path, {"seed", "config", "size", "scales", "ws_vector"}, tmp_path) == [
        "vlbias/adapter.py:2: spec.get('seed', ...)", "vlbias/adapter.py:4: spec.get('size', ...)",
        "vlbias/adapter.py:4: spec.get('scales', ...)"]


@pytest.mark.parametrize("kind,package,adapter", [("models", "vlbias.models", "vlbert"),
                                                  ("detectors", "vlbias.regions", "bua")])
def test_the_build_fills_in_the_schema_defaults(kind, package, adapter):
    registry, seen = Registry(kind.removesuffix("s"), package), []
    registry.register(adapter)(seen.append)  # the "adapter" records the spec it is given
    entry = {"adapter": adapter, "weights": "random", "seed": 7}
    registry.build(entry)
    assert seen[0] == {**defaults(kind, adapter), **entry} and seen[0]["seed"] == 7  # what the entry says wins
    assert entry == {"adapter": adapter, "weights": "random", "seed": 7}  # the caller's entry is left as it was
    assert {"device", "batch_size"} <= set(seen[0]) and len(defaults(kind, adapter)) > 4


def test_defaults_are_copies_of_the_schema():
    first = with_defaults({"adapter": "vlbert"}, "models")
    first["scales"].append(0)
    assert with_defaults({"adapter": "vlbert"}, "models")["scales"] == [600, 1000]
    assert with_defaults({"adapter": "no-such-adapter", "x": 1}, "models") == {"adapter": "no-such-adapter", "x": 1}


def test_a_shared_fragment_is_included_once_and_a_key_declared_again_replaces_it():
    # bua: _detector (../_runtime, ../_random), then its own keys; torchvision's `weights` is its own
    assert defaults("detectors", "bua")["batch_size"] == 2 and defaults("models", "lxmert")["batch_size"] == 32
    assert adapter_schema("detectors", "torchvision")["properties"]["weights"] == {
        "type": "string", "minLength": 1, "description": "COCO_V1 (torchvision's download) or random"}
    assert adapter_schema("models", "open_clip")["properties"]["weights"] == {
        "const": "random", "description": "seeded random weights (with seed), for tests and offline runs"}
    assert adapter_schema("detectors", "bua")["required"] == ["min_boxes", "max_boxes", "conf"]
