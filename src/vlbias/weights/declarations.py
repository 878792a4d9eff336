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
``or_local: true`` a value that is a local directory or ``package:<name>`` is local.

``unused`` (not a key of the entry) names, as fnmatch patterns, the parameters a family's published
checkpoints carry and its model never reads (a pre-training head, a pooler): the only entries a
load may drop. Any other parameter missing from the files, left over or of another shape is an
error; nothing is ever filled in at random.
"""

from functools import cache

from vlbias.schemas import chain, document

# the config sections whose entries load weights, and the kind of adapter each holds
SECTIONS = {"ieat": "models", "seat": "models", "grounded": "models", "mlm": "models", "regions": "detectors"}


def kind_of(name):
    """The adapter kind of entry ``name`` (``<section>/<name>``): models, or detectors."""
    return SECTIONS.get(name.split("/", 1)[0], "models")


@cache
def _family_weights(adapter, kind):
    """The ``family: weights:`` block of ``adapter``, merged over its includes' (the adapter's own
    declarations add to or override an included one's, key by key; ``unused`` lists add up)."""
    merged = {}
    for part in chain(kind, adapter):
        for key, declared in ((document(part).get("family") or {}).get("weights") or {}).items():
            if key == "unused":
                merged[key] = merged.get(key, []) + list(declared)
                continue
            declared = {declared: True} if isinstance(declared, str) else declared  # e.g. `path: directory`
            merged[key] = {**merged.get(key, {}), **declared}
    return merged


def declared(adapter, kind="models"):
    """{key: declaration} of the keys of ``adapter``'s entries that name weights."""
    return {key: d for key, d in _family_weights(adapter, kind).items() if key != "unused"}


def unused(adapter, kind="models"):
    """The fnmatch patterns of the checkpoint entries ``adapter``'s model never reads (a tuple)."""
    return tuple(_family_weights(adapter, kind).get("unused", ()))
