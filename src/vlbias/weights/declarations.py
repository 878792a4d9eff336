"""What an entry loads, as its adapter schema declares it once (``family: weights:`` in
``vlbias/schemas/<kind>/<adapter>.yaml``, merged over the fragments it includes), read without
importing the adapter::

    model_id:   {hub: [config.json, "model.safetensors|pytorch_model.bin"], revision: revision,
                 default: <id when unset>, unless: [checkpoint, path]}   # no source while those are set
    checkpoint: {file: models, sha256: sha256}   # a local file or an http(s) URL into <cache>/models
    path:       directory                       # a local directory
    pretrained: {open_clip: arch}               # an open_clip pretrained tag of the entry's arch
    weights:    {torchvision: arch}             # a torchvision weights enum name (or random)
    unused:     ["cls.seq_relationship.*"]      # checkpoint entries the family never reads (see below)

A hub file list item ``a|b`` is the first of those the repository has, ``*.json`` every match; with
``or_local: true`` a value that is a local directory or ``package:<name>`` is local. ``random_reads:
true``: ``weights: random`` reads the key's files too (sentence's ``path``: its config.json and
tokenizer), so a random-init twin keeps it (vlbias.robustness.twin_entries).

``unused`` (not a key of the entry) names, as fnmatch patterns, the parameters a family's published
checkpoints carry and its model never reads (a pre-training head, a pooler): the only entries a
load may drop. Any other parameter missing from the files, left over or of another shape is an
error; nothing is ever filled in at random.
"""

from functools import cache
from typing import Any

from vlbias.schemas import chain, document

# the stage whose entries are detectors (vlbias.suites.regions); every other stage's are models (the
# stages, and the kind of each, are declared once in vlbias.suites; a test holds the two to agree)
DETECTOR_STAGE = "regions"


def kind_of(name: str) -> str:
    """The adapter kind of entry ``name`` (``<stage>/<name>``): detectors, or models."""
    return "detectors" if name.split("/", 1)[0] == DETECTOR_STAGE else "models"


@cache
def _family_weights(adapter: object, kind: str) -> dict[str, Any]:
    """The ``family: weights:`` block of ``adapter``, merged over its includes' (the adapter's own
    declarations add to or override an included one's, key by key; ``unused`` lists add up)."""
    merged: dict[str, Any] = {}
    for part in chain(kind, adapter):
        for key, declared in ((document(part).get("family") or {}).get("weights") or {}).items():
            if key == "unused":
                merged[key] = merged.get(key, []) + list(declared)
                continue
            declared = {declared: True} if isinstance(declared, str) else declared  # e.g. `path: directory`
            merged[key] = {**merged.get(key, {}), **declared}
    return merged


def declared(adapter: object, kind: str = "models") -> dict[str, dict[str, Any]]:
    """{key: declaration} of the keys of ``adapter``'s entries that name weights."""
    return {key: d for key, d in _family_weights(adapter, kind).items() if key != "unused"}


def unused(adapter: object, kind: str = "models") -> tuple[str, ...]:
    """The fnmatch patterns of the checkpoint entries ``adapter``'s model never reads (a tuple)."""
    return tuple(_family_weights(adapter, kind).get("unused", ()))
