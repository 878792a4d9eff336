"""Image-only work once per (image, mask), and vectors that do not depend on their batch.

Each grounded family that does work on the image alone (BLIP's vision model and its cross-attention
keys and values, FLAVA's image encoder, LXMERT's vision layers, VL-BERT's RoI head end to end,
BridgeTower's ViT and its cross-modal image projections) does
it once per (image, mask I or not) however many captions read it, and gives the vectors of the
per-caption path bit for bit (torch.equal: the per-caption path here is the model's own forward, on
each caption's image, in the same batches). A vector is the same in any batch, beside any pairs
(pairs are batched by shape, nothing padded), so a shared cache filled by jobs in any order gives
the same files. Tiny random models of the real config classes (conftest).
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.tiny import TINY_BLIP, TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, TINY_VL, random_visual, tiny_bpe_tokenizer

from vlbias.models import build
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, _nbytes
from vlbias.suites.grounded.jobs import vision_passes
from vlbias.visual import visual_field

REPO = Path(__file__).resolve().parents[2]
GOOGLE = REPO / "resources/stimuli/grounded/google"
E2E = {**TINY_VL["vlbert"], "config": {**TINY_VL["vlbert"]["config"], "image_feat_precomputed": False},
       "scales": [32, 48]}
# FLAVA's 32-pixel images in 17 tokens: a matmul of fewer rows than vlbias.models.vl.MIN_ROWS sums
# otherwise (MKL), so an image's tokens alone would not be the bits of two images' tokens together
FLAVA = {**TINY_FLAVA, "config": {**TINY_FLAVA["config"],
                                  "image_config": {**TINY_FLAVA["config"]["image_config"], "patch_size": 8}}}
# three images, each read by captions of several lengths; one caption twice; at least MIN_ROWS regions each
IMAGES = [random_visual(12, 0, persons=[0, 2], image=True)[0],
          random_visual(13, 1, persons=[1], size=(60, 40), image=True)[0], random_visual(14, 2, image=True)[0]]
PAIRS = [("A woman is a nurse.", 0), ("woman", 0), ("The man rides a horse across the field.", 1), ("man", 1),
         ("A woman is a nurse.", 2), ("A man reads.", 0), ("A woman is a doctor.", 1), ("woman", 2),
         ("A man reads.", 2)]
CAPTIONS = [c for c, _ in PAIRS]
REGIONS = [IMAGES[i] for _, i in PAIRS]
# VL-BERT end to end runs its ResNet's res5 head on each box, per caption on the per-caption path: two
# images of five regions (six boxes with the whole image's: two pairs give MIN_ROWS object tokens), each
# read by three captions of two lengths
E2E_IMAGES = [random_visual(5, 0, persons=[0, 2], image=True)[0],
              random_visual(5, 1, persons=[1], size=(60, 40), image=True)[0]]
E2E_PAIRS = [0, 1, 2, 3, 5, 6]


def tensors(a):
    return torch.from_numpy(np.asarray(a))


# --- the per-caption path: each family's model run on every caption's own image, in the encoder's batches ---

def blip_states(encoder, captions, regions, index, mask):
    text = encode_text(encoder.tokenizer, captions, encoder.max_length, None, None, encoder.token_mask, LENGTH_BUCKET)
    text.input_ids[:, 0] = encoder.first_id
    pixels = encoder.processor(images=[encoder._pixels(r, i, mask) for i, r in zip(index, regions)],
                               return_tensors="pt")["pixel_values"]
    return encoder.model(input_ids=text.input_ids, attention_mask=text.attention_mask, pixel_values=pixels,
                         use_itm_head=True).question_embeds


def flava_states(encoder, captions, regions, index, mask):
    """FlavaModel.forward's fusion with the image encoder run on each caption's image: what image-once must equal."""
    text = encode_text(encoder.tokenizer, captions, encoder.max_length, None, None, encoder.token_mask, LENGTH_BUCKET)
    pixels = encoder.processor(images=[encoder._image(r, i, mask) for i, r in zip(index, regions)],
                               return_tensors="pt")["pixel_values"]
    flava = encoder.model.flava
    image = flava.image_model(pixel_values=pixels, output_hidden_states=True).hidden_states[-1]
    words = flava.text_model(input_ids=text.input_ids, attention_mask=text.attention_mask,
                             output_hidden_states=True).hidden_states[-1]
    joint = torch.cat([flava.image_to_mm_projection(image), flava.text_to_mm_projection(words)], dim=1)
    seen = torch.ones((len(joint), image.shape[1] + 1), dtype=text.attention_mask.dtype)
    return flava.multimodal_model(joint, attention_mask=torch.cat([seen, text.attention_mask], dim=1)).last_hidden_state


def lxmert_states(encoder, captions, regions, index, mask):
    text = encode_text(encoder.tokenizer, captions, encoder.max_length, None, None, encoder.token_mask, LENGTH_BUCKET)
    feats, boxes = zip(*(encoder._visual(r, i, mask) for i, r in zip(index, regions)))
    feats, boxes = tensors(np.stack(feats)), tensors(np.stack(boxes))  # one region count: nothing padded
    return encoder.model.lxmert(input_ids=text.input_ids, attention_mask=text.attention_mask, visual_feats=feats,
                                visual_pos=boxes, visual_attention_mask=torch.ones(feats.shape[:2])).language_output


def bridgetower_states(encoder, captions, regions, index, mask):
    """BridgeTowerModel.forward as the adapter ran it up to 3b07937: the ViT on each caption's image."""
    text = encode_text(encoder.tokenizer, encoder._captions(captions), encoder.max_length, None, None,
                       encoder.token_mask, LENGTH_BUCKET)
    pixels = encoder.processor(images=[encoder._image(r, i, mask) for i, r in zip(index, regions)], return_tensors="pt")
    return encoder.model.bridgetower(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                     pixel_values=pixels["pixel_values"], pixel_mask=pixels["pixel_mask"]).text_features


def vlbert_states(encoder, captions, regions, index, mask):
    """VL-BERT end to end with no work shared between captions (what image-once must equal): the res5 RoI
    head on each caption's kept boxes, the backbone once per image of the batch (region_features on the
    same tensor)."""
    text = encode_text(encoder.tokenizer, captions, encoder.max_length, None, None, encoder.token_mask, LENGTH_BUCKET)
    lengths = text.attention_mask.sum(1).tolist()
    keep = [encoder._object_tokens(n, r) for n, r in zip(lengths, regions)]
    boxes = torch.zeros((len(captions), max(keep), 6))
    box_mask = torch.zeros((len(captions), max(keep)), dtype=torch.bool)
    masked = torch.zeros_like(box_mask)
    feats = torch.zeros((len(captions), max(keep), 2048))
    images = {}
    for j, (n, i, r) in enumerate(zip(keep, index, regions)):
        b, m, _ = images.setdefault(id(r), encoder._image(r, i, mask))
        boxes[j, :n], box_mask[j, :n], masked[j, :n] = tensors(b[:n]), True, tensors(m[:n])
    feats[box_mask] = encoder.model.image_feature_extractor.region_features(
        [images[id(r)][2] for r in regions], [tensors(images[id(r)][0][:n, :4]) for n, r in zip(keep, regions)])
    text_mask = text.attention_mask.bool() & (text.input_ids > 0)
    joint = max(encoder._joint_length(n, k) for n, k in zip(lengths, keep))
    return encoder.model.encode(text.input_ids, text_mask, boxes, box_mask, masked, feats, joint)[0]


FAMILIES = {"blip": (TINY_BLIP, blip_states), "flava": (FLAVA, flava_states),
            "lxmert": (TINY_VL["lxmert"], lxmert_states), "vlbert-e2e": (E2E, vlbert_states),
            "bridgetower": (TINY_BRIDGETOWER, bridgetower_states)}


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    return tiny_bpe_tokenizer(tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, bpe):
    """(encoder, its per-caption path, captions, regions): one model build for the tests of a family."""
    spec, reference = FAMILIES[request.param]
    captions, regions = CAPTIONS, REGIONS
    if request.param == "vlbert-e2e":
        captions, regions = [CAPTIONS[i] for i in E2E_PAIRS], [E2E_IMAGES[PAIRS[i][1]] for i in E2E_PAIRS]
    return build({**spec, "tokenizer": bpe} if request.param == "bridgetower" else spec), reference, captions, regions


@pytest.mark.parametrize("mask", [None, "I"])
def test_image_work_once_per_image_and_vectors_bit_identical_to_the_per_caption_path(family, mask):
    encoder, reference, captions, regions = family
    encoder._memo.clear()
    passes = encoder.image_passes
    encoder.batch_size = 2  # several batches of one shape: an image's work is reused across batches too
    try:
        s = encoder.embed(captions, regions, "S", mask=mask)
        assert encoder.image_passes - passes == len({id(r) for r in regions})  # once per image, for every caption
        with torch.inference_mode():
            for batch in encoder._batches(captions, regions):
                states = reference(encoder, [captions[i] for i in batch], [regions[i] for i in batch], batch, mask)
                assert torch.equal(torch.from_numpy(s[batch]), states[:, 0]), batch
    finally:
        encoder.batch_size = 32


def test_mask_i_and_the_unmasked_run_keep_apart(family):
    encoder, _, captions, regions = family
    encoder._memo.clear()
    plain = encoder.embed(captions[:1], regions[:1], "S")
    masked = encoder.embed(captions[:1], regions[:1], "S", mask="I")
    assert np.abs(plain - masked).max() > 1e-4  # image 0 has persons: mask I reads other image work
    encoder.embed(captions[:1], regions[:1], "S", mask="T", mask_terms=["woman"])
    assert len(encoder._memo) == 2  # mask T reads the unmasked image's work


def test_the_work_kept_is_bounded_by_bytes(family):
    encoder, _, captions, regions = family
    encoder._memo.clear()
    encoder.embed(captions[:1], regions[:1], "S")
    one = _nbytes(next(iter(encoder._memo.values()))[1])
    assert one > 0 and encoder.memo_images() == min(encoder.image_memo, encoder.memo_bytes // one)
    encoder.memo_bytes = one + one // 2  # room for one image's work
    try:
        encoder.embed(captions, regions, "S")
        assert encoder.memo_images() == 1 and len(encoder._memo) == 1 < len({id(r) for r in regions})
    finally:
        encoder.memo_bytes = type(encoder).memo_bytes


# --- vectors independent of their batch ----------------------------------------------------------

ALL = {"visualbert": TINY_VL["visualbert"], "vilbert": TINY_VL["vilbert"], "vlbert": TINY_VL["vlbert"],
       "vlbert-attended": {**TINY_VL["vlbert"], "vlbert_box_padding": "attended", "authors_batch_size": 4},
       "lxmert": TINY_VL["lxmert"], "blip": TINY_BLIP, "flava": FLAVA, "vilt": TINY_VILT,
       "bridgetower": TINY_BRIDGETOWER}


@pytest.mark.parametrize("name", list(ALL))
def test_a_vector_does_not_depend_on_its_batch(name, bpe):
    spec = ALL[name]
    if name == "bridgetower":
        spec = {**spec, "tokenizer": bpe}
    encoder = build(spec)
    regions = REGIONS
    if encoder.batch_dependent:  # the authors' batches of the whole list, recorded in each entry
        regions = encoder.in_authors_batches(CAPTIONS, REGIONS)[0]
    everything = encoder.embed(CAPTIONS, regions, "S")
    encoder._memo.clear()
    for subset in ([4, 1], [8, 0, 3, 2], [5]):  # other company, other order, alone
        np.testing.assert_array_equal(encoder.embed([CAPTIONS[i] for i in subset], [regions[i] for i in subset],
                                                    "S"), everything[subset], err_msg=f"{name} {subset}")
    encoder.batch_size = 1
    np.testing.assert_array_equal(encoder.embed(CAPTIONS, regions, "S"), everything)


def test_batches_hold_one_bucket_in_the_callers_order():
    encoder = build(TINY_VL["visualbert"])
    encoder.batch_size = 2
    lengths = [len(ids) for ids in encoder.tokenizer(CAPTIONS)["input_ids"]]
    batches = encoder._batches(CAPTIONS, REGIONS)
    assert sorted({i for b in batches for i in b}) == list(range(len(CAPTIONS)))
    for b in batches:
        assert sorted(set(b)) == list(dict.fromkeys(b))  # in order, then copies of the first
        assert len({(-(-lengths[i] // LENGTH_BUCKET), len(visual_field(REGIONS[i], "features"))) for i in b}) == 1
    assert lengths[0] != lengths[1] and [0, 1] in batches  # two token counts of one bucket: one batch, full
    assert [4, 6] not in batches  # one bucket, but 14 and 13 regions
    # alone, a pair of 16 tokens and 10 regions gives a 10-row matmul, of 12 regions none under 12 rows;
    # an 8-token caption's attention alone sums otherwise too: each filled up with a copy of itself
    ten, long = random_visual(10, 3)[0], CAPTIONS[2]
    assert encoder._batches([long, long, "woman"], [ten, REGIONS[0], REGIONS[0]]) == [[0, 0], [1], [2, 2]]


def test_a_caption_is_padded_to_its_bucket_whatever_its_company():
    encoder = build(TINY_BLIP)
    alone = encode_text(encoder.tokenizer, ["woman"], encoder.max_length, multiple=LENGTH_BUCKET)
    assert alone.input_ids.shape == (1, LENGTH_BUCKET) and alone.attention_mask.sum() == 3
    together = encode_text(encoder.tokenizer, ["woman", "A woman is a nurse."], encoder.max_length,
                           multiple=LENGTH_BUCKET)
    assert torch.equal(together.input_ids[:1], alone.input_ids)
    assert encode_text(encoder.tokenizer, ["woman"], 5, multiple=LENGTH_BUCKET).input_ids.shape == (1, 5)  # at most max_length


# --- the job's plan --------------------------------------------------------------------------------

def test_vision_passes_counts_the_plan():
    from vlbias.suites.grounded.stimulus import load_grounded_stimulus

    stimulus = load_grounded_stimulus(GOOGLE / "weat8.yaml")
    counts = vision_passes([stimulus], ["W"], {}, batch_size=4)
    # by hand: each role's word-level pairs in its order, four at a time, the distinct images of each batch
    pairs = [stimulus.pairs("word", role) for role in ("X", "Y", "A_x", "A_y", "B_x", "B_y")]
    assert counts["pairs"] == sum(map(len, pairs))
    assert counts["before"] == sum(len({i for _, i in p[j:j + 4]}) for p in pairs for j in range(0, len(p), 4))
    assert counts["after"] == counts["images"] == len({i for p in pairs for _, i in p})
    # mask I is other image work; an image the store lacks is none
    masked = vision_passes([stimulus], ["W"], {"I": ["W"]}, 4)
    assert masked["images"] == 2 * counts["images"] and masked["before"] == 2 * counts["before"]
    assert vision_passes([stimulus], ["W"], {"I": ["W"]}, 4, supports_image_masking=False) == counts
    held = stimulus.image_ids("word")[1:]
    assert vision_passes([stimulus], ["W"], {}, 4, images=held)["images"] == counts["images"] - 1


def test_the_google_jobs_vision_passes():
    """The figure docs/performance.md gives: the Google-images job of the paper tables (config.yaml's levels and masks)."""
    import yaml

    from vlbias.suites.grounded.plan import GroundedPlan
    from vlbias.suites.grounded.stimulus import load_grounded_stimulus

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    g = config["grounded"]
    stimuli = [load_grounded_stimulus(REPO / p) for p in GroundedPlan(config).embed_stimuli("authors", "google", "blip")]
    assert vision_passes(stimuli, g["levels"], g["masks"], 32) == {"pairs": 225496, "images": 22477,
                                                                   "before": 55010, "after": 22477}
