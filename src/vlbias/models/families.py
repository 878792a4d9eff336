"""What the workflow plans from a model entry without importing its adapter (which imports torch),
read from what each family declares once, in its schema file (``vlbias/schemas/models/<adapter>.yaml``):

    family:
      embeds: [images, texts]   # encode_images (square RGB pixels), encode_texts (strings); both: one joint space
      outputs: {hidden: "layer{layer}", logits: logits}   # the vectors per image, one store each (iGPT)
      ws_vectors: [language, language+visual]   # the W/S vectors a vision-language family can give
      feeds: {<protocol switch>: [its own value, the other]}   # how a vision-language family is fed
      axes: {pooling: pooling}  # the robustness axes an entry key varies (vlbias.robustness): axis -> key
      text_axes: [layer]        # those of them that change the text vectors alone (a joint space's text tower)
      mlm_head: false           # a vision-language family without a masked-language head (the MLM study refuses it)
      renamed: {<old key>: <what to write now>}
      weights: {<key>: what it names}   # the weights an entry loads: read by vlbias.weights.declarations

The vision-language adapters embed (caption, regions) pairs (vlbias.models.vl): no ``embeds``.
"""

from vlbias.schemas import document, with_defaults


def family(adapter):
    """The ``family`` declaration of model ``adapter`` ({} for none: an unknown adapter)."""
    return document(f"models/{adapter}").get("family") or {}


def embeds(adapter):
    """What ``adapter`` embeds as association-test stimuli: ("images",), ("texts",), both, or ()."""
    return tuple(family(adapter).get("embeds", ()))


def ws_vectors(adapter):
    """The W/S vectors (``ws_vector``) vision-language ``adapter`` can give; the language [CLS] by default."""
    return tuple(family(adapter).get("ws_vectors", ("language",)))


def feeds(adapter):
    """{option: its values, the family's own first}: how ``adapter``'s inputs can be fed."""
    return {name: tuple(values) for name, values in (family(adapter).get("feeds") or {}).items()}


def _listed(value):
    return value if isinstance(value, list) else [value]


def outputs(spec):
    """The names of the vectors an entry's encoder gives per image, read from the entry alone (no
    adapter is imported: the workflow plans one store per output). Several for iGPT with several
    layers or ``output: [hidden, logits]`` (``encode_outputs`` returns them all from one pass): its
    ``layer<l>`` for each layer, then ``logits``; one name for any other iGPT entry; none (``[]``)
    for adapters with a single output (``encode_images``). Unset keys take their schema defaults."""
    names = family(spec.get("adapter")).get("outputs")
    if not names:
        return []
    spec = with_defaults(spec, "models")
    kinds, layers = _listed(spec["output"]), sorted(set(_listed(spec["layer"])))
    return [name.format(layer=layer) for kind, name in names.items() if kind in kinds
            for layer in (layers if "{layer}" in name else [None])]


def axes(adapter):
    """{robustness axis: the entry key that varies it} of ``adapter`` (``family: axes:``; vlbias.robustness):
    what a specification curve may vary beyond the text and the image store."""
    return dict(family(adapter).get("axes") or {})


def text_axes(adapter):
    """The robustness axes of ``adapter`` that change its text vectors alone (``family: text_axes:``, a text
    tower's layer): its image vectors are the default's under them."""
    return tuple(family(adapter).get("text_axes") or ())
