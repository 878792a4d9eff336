"""Stimulus files: one YAML file per association test, validated against
``workflow/schemas/stimulus.schema.yaml`` before anything uses it."""

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jsonschema
import yaml

from vlbias.errors import InputError

# Shipped inside the package (workflow/schemas/ links to it) so an installed vlbias validates too.
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "stimulus.schema.yaml"
SETS = ("X", "Y", "A", "B")


@lru_cache(maxsize=None)
def _schema(path=SCHEMA_PATH):
    with open(path) as f:
        return yaml.safe_load(f)


def _key(error):
    return "/".join(str(p) for p in error.absolute_path) or "(top level)"


def validate(doc, source, schema):
    """Raise InputError naming ``source`` and the offending key for the first schema violation."""
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        raise InputError(source, f"key '{_key(e)}': {e.message}")


@dataclass(frozen=True)
class StimulusSet:
    key: str  # name of the set's vectors in an embedding store: the category, or X/Y/A/B
    label: str
    category: str | None = None
    items: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Stimulus:
    id: str
    name: str
    suite: str
    level: str | None
    source: str | None
    X: StimulusSet
    Y: StimulusSet
    A: StimulusSet
    B: StimulusSet
    path: str

    @property
    def sets(self):
        return {s: getattr(self, s) for s in SETS}


def load_stimulus(path):
    """Load and validate one stimulus file; errors name the file and the key."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise InputError(path, "stimulus file not found") from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(path, "expected a mapping with keys id, name, suite, X, Y, A, B")
    validate(doc, path, _schema())
    if doc["id"] != path.stem:
        raise InputError(path, f"key 'id': '{doc['id']}' does not match the file name '{path.stem}'")
    sets = {}
    for s in SETS:
        d = doc[s]
        items = tuple(d["items"]) if "items" in d else None
        if items is not None and len(set(items)) != len(items):
            dup = sorted({i for i in items if items.count(i) > 1})
            raise InputError(path, f"key '{s}/items': duplicate stimuli {dup}")
        # image categories are shared by many tests' stores; text sets live in a per-test store
        key = d.get("category", s)
        sets[s] = StimulusSet(key=key, label=d["label"], category=d.get("category"), items=items)
    return Stimulus(
        id=doc["id"], name=doc["name"], suite=doc["suite"], level=doc.get("level"),
        source=doc.get("source"), path=str(path), **sets,
    )


def check_categories(stimulus, known, listed_in):
    """Every image category the test names must be one the dataset lists (``known``)."""
    for s, st in stimulus.sets.items():
        if st.category is not None and st.category not in known:
            raise InputError(stimulus.path, f"key '{s}/category': '{st.category}' is not listed in {listed_in}")
