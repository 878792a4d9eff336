"""Stimulus files: one YAML file per association test, validated against
``workflow/schemas/stimulus.schema.yaml`` before anything uses it."""

import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from vlbias.errors import InputError
from vlbias.safeyaml import load_yaml
from vlbias.io.paths import StrPath
from vlbias.schemas import SCHEMAS
from vlbias.validation import problems

SETS = ("X", "Y", "A", "B")
# the multiple-comparison family of a stimulus file that names none: one's own tests, adjusted among
# themselves, never with a paper's (the shipped files name theirs: may2019, steed2021, cross-modal)
OWN = "own"


@cache
def schema(name: str) -> dict[str, Any]:
    """A JSON schema shipped in vlbias/schemas/ (workflow/schemas/ links to some), so an installed vlbias
    validates too."""
    with open(SCHEMAS / name) as f:
        doc: dict[str, Any] = load_yaml(f)
    return doc


def validate(doc: object, source: object, schema: dict[str, Any]) -> None:
    """Raise InputError naming ``source`` and each offending key, in one line, as the config check says
    them (vlbias.validation: an unknown key with the closest valid one, "did you mean 'A'?")."""
    found = problems(doc, schema)
    if found:
        raise InputError(source, "; ".join(found))


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
    family: str = OWN  # the tests a table adjusts its p-values with (per model): the paper's, or one's own

    @property
    def sets(self) -> dict[str, StimulusSet]:
        return {s: getattr(self, s) for s in SETS}


def read_stimulus_file(path: StrPath, schema_name: str, keys: str) -> dict[str, Any]:
    """The YAML mapping in ``path``, valid against ``schema_name`` (a file in vlbias/schemas/) and with
    an ``id`` equal to the file name; errors name the file and the key. ``keys`` (for the error on a
    file that is not a mapping) lists what the mapping should hold."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = load_yaml(f)
    except FileNotFoundError:
        raise InputError(path, "stimulus file not found") from None
    except OSError as e:
        raise InputError(path, f"cannot read stimulus file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise InputError(path, f"not UTF-8 text: byte 0x{e.object[e.start]:02x} on line {line} (save the file "
                               "as UTF-8)") from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(doc, dict):
        raise InputError(path, f"expected a mapping with keys {keys}")
    validate(doc, path, schema(schema_name))
    if doc["id"] != path.stem:
        raise InputError(path, f"key 'id': '{doc['id']}' does not match the file name '{path.stem}'")
    return doc


def load_stimulus(path: StrPath) -> Stimulus:
    """Load and validate one stimulus file; errors name the file and the key."""
    path = Path(path)
    return stimulus_from(read_stimulus_file(path, "stimulus.schema.yaml", "id, name, suite, X, Y, A, B"), path)


def stimulus_from(doc: dict[str, Any], path: StrPath) -> Stimulus:
    """The test ``doc`` (a stimulus file's mapping, valid against its schema) describes; errors name
    ``path``, its file (or what stands for one: vlbias.api's queries)."""
    path = Path(path)
    sets: dict[str, StimulusSet] = {}
    owner: dict[str | None, str] = {}
    seen: dict[str, tuple[str, str]] = {}
    for s in SETS:
        d = doc[s]
        items = tuple(d["items"]) if "items" in d else None
        if items is not None and len(set(items)) != len(items):
            dup = sorted({i for i in items if items.count(i) > 1})
            raise InputError(path, f"key '{s}/items': duplicate stimuli {dup}")
        # a stimulus in two sets would count for both sides of the test
        for item in items or [d.get("category")]:
            if item in owner:
                raise InputError(path, f"key '{s}': '{item}' is also in set {owner[item]}")
            owner[item] = s
        # ... and so would two texts an uncased model reads alike (most models here lowercase)
        for item in items or []:
            first = seen.setdefault(same_text(item), (item, s))
            if first != (item, s):
                raise InputError(path, f"key '{s}/items': {item!r} and {first[0]!r} (set {first[1]}) differ only by "
                                       "case, spaces or invisible characters: one stimulus to an uncased model")
        # image categories are shared by many tests (one store per model); text sets are the test's own
        key = d.get("category") or f"{doc['id']}/{s}"
        sets[s] = StimulusSet(key=key, label=d["label"], category=d.get("category"), items=items)
    _check_modalities(doc, sets, path)
    return Stimulus(
        id=doc["id"], name=doc["name"], suite=doc["suite"], level=doc.get("level"),
        source=doc.get("source"), path=str(path), family=doc.get("family", OWN), **sets,
    )


# zero-width and invisible formatting characters a text may carry unseen (and a tokenizer drop)
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff"))


def same_text(text: str) -> str:
    """``text`` as a text stimulus is compared with the others: NFKC-normalised, case-folded, without
    invisible characters, its whitespace runs one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().translate(_INVISIBLE).split())


def _check_modalities(doc: dict[str, Any], sets: dict[str, StimulusSet], path: Path) -> None:
    """SEAT sets are texts; an iEAT test of ``level: image`` has image sets only, a ``cross-modal`` one both."""
    texts = [s for s, st in sets.items() if st.items is not None]
    images = [s for s in SETS if s not in texts]
    if doc["suite"] == "seat" and images:
        raise InputError(path, f"key '{images[0]}': a SEAT set lists its text `items` (image categories are iEAT's)")
    level = doc.get("level")
    if level == "image" and texts:
        raise InputError(path, f"key '{texts[0]}': level 'image' takes image categories only (level 'cross-modal' "
                               "mixes them with text sets)")
    if level == "cross-modal" and not (texts and images):
        raise InputError(path, "level 'cross-modal': expected image categories and text items among X, Y, A, B")


def check_categories(stimulus: Stimulus, known: Collection[str], listed_in: str) -> None:
    """Every image category the test names must be one the dataset lists (``known``)."""
    for s, st in stimulus.sets.items():
        if st.category is not None and st.category not in known:
            raise InputError(stimulus.path, f"key '{s}/category': '{st.category}' is not listed in {listed_in}")
