"""What the workflow plans from a model entry without importing its adapter (which imports torch):
what the adapter embeds, and the outputs it gives per image (one store each)."""

# what each adapter embeds as association-test stimuli: ``encode_images`` (square RGB pixels),
# ``encode_texts`` (strings); both: one joint space (cross-modal tests). The vision-language
# adapters embed (caption, regions) pairs (vlbias.models.vl), neither alone.
MODALITIES = {
    "open_clip": ("images", "texts"),
    "igpt": ("images",),
    "simclr": ("images",),
    "sentence": ("texts",),
}


def outputs(spec):
    """The names of the vectors an entry's encoder gives per image, read from the entry alone (no
    adapter is imported: the workflow plans one store per output). Several for iGPT with several
    layers or ``output: [hidden, logits]`` (``encode_outputs`` returns them all from one pass): its
    ``layer<l>`` for each layer, then ``logits``; one name for any other iGPT entry; none (``[]``)
    for adapters with a single output (``encode_images``)."""
    if spec.get("adapter") != "igpt":
        return []
    kinds = spec.get("output", "hidden")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    layers = spec.get("layer", 20)
    layers = layers if isinstance(layers, list) else [layers]
    names = [f"layer{l}" for l in sorted(set(layers))] if "hidden" in kinds else []
    return names + (["logits"] if "logits" in kinds else [])
