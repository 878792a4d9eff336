"""What the tests of the tiny region-reading vision-language encoders share (helpers.tiny.TINY_VL's
VisualBERT and LXMERT in tests/models/test_vl_models.py, ViLBERT in test_vilbert.py, VL-BERT in
test_vlbert.py): the regions VL_CAPTIONS are read with, a recorder of what a module of the model is
handed, an entry loading a checkpoint, and the checks every family passes alike."""

import hashlib

import numpy as np

from helpers.tiny import VL_CAPTIONS, VL_WORDS, random_visual
from vlbias.models import build

# regions per caption of VL_CAPTIONS: 3 (persons 0 and 2), 5 (person 1), 1 (no person)
_COUNTS, _PERSONS = (3, 5, 1), ([0, 2], [1], [])


def vl_regions(image=False, sizes=((48, 64),) * 3, seeds=(0, 1, 2)):
    """The Visuals read with VL_CAPTIONS (random_visual; with ``image`` their random pixels, of ``sizes``)."""
    return [random_visual(k, seed, persons, size, image=image)[0]
            for k, seed, persons, size in zip(_COUNTS, seeds, _PERSONS, sizes)]


def other_regions(image=False):
    """Other images of as many regions, none a person (another image must change every vector)."""
    return [random_visual(k, 9, image=image)[0] for k in _COUNTS]


def recorded(module, fn, pre=True):
    """Run ``fn``; per call of ``module``, what it was handed (``pre``: its positional arguments) or returned."""
    seen = []
    if pre:
        hook = module.register_forward_pre_hook(lambda m, args: seen.append(args))
    else:
        hook = module.register_forward_hook(lambda m, args, out: seen.append(out))
    try:
        fn()
    finally:
        hook.remove()
    return seen


def checkpoint_entry(spec, path, **more):
    """``spec`` loading the checkpoint at ``path`` instead of drawing random weights."""
    return {k: v for k, v in spec.items() if k not in ("weights", "seed")} | {"checkpoint": str(path), **more}


def assert_loads_as_saved(spec, path, regions, expected):
    """The entry of ``spec`` with the checkpoint ``path`` gives ``expected`` (the saved model's C vectors
    of VL_CAPTIONS with ``regions``) bit for bit, and records the file's sha256; returns the encoder."""
    loaded = build(checkpoint_entry(spec, path))
    np.testing.assert_array_equal(loaded.embed(VL_CAPTIONS, regions, "C", words=VL_WORDS), expected)
    assert loaded.info["weights"] == "checkpoint"
    assert loaded.info["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    return loaded


def assert_text_masking_and_the_image_change_the_vector(encoder, regions, others):
    """Mask T of the captions' words, and other images (``others``), change every caption's S vector."""
    s = encoder.embed(VL_CAPTIONS, regions, "S")
    t = encoder.embed(VL_CAPTIONS, regions, "S", mask="T", mask_terms=VL_WORDS)
    assert np.abs(s - t).max(axis=1).min() > 1e-4
    other = encoder.embed(VL_CAPTIONS, others, "S")
    assert np.abs(s - other).max(axis=1).min() > 1e-4  # the image reaches the language output


def assert_mask_logprobs_are_distributions(encoder, region):
    """mask_logprobs of one [MASK] read with ``region`` and two with no image: float32 rows of the whole
    vocabulary, one per [MASK], each a distribution. Returns them."""
    vocab = len(encoder.tokenizer)
    full = encoder.mask_logprobs(["[MASK] is a nurse.", "The [MASK] met the [MASK]."], [region, None])
    assert [f.shape for f in full] == [(1, vocab), (2, vocab)] and full[0].dtype == np.float32
    np.testing.assert_allclose(np.exp(full[1]).sum(axis=1), 1, atol=1e-4)
    return full


def mixed_pairs(n, visual=random_visual, sizes=((48, 64),)):
    """``n`` pairs for a batch test: VL_CAPTIONS in turn, each with 1 to 7 regions (the first a person, the
    image of ``sizes`` in turn) or every fifth with none; and their words for level C."""
    captions = [VL_CAPTIONS[i % 3] for i in range(n)]
    regions = [visual(1 + i % 7, i, persons=[0], size=sizes[i % len(sizes)])[0] if i % 5 else None
               for i in range(n)]
    return captions, regions, [VL_WORDS[i % 3] for i in range(n)]
