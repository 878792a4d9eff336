"""Detectron's R-101-FPN box head (vlbias.regions.detectron_fpn), VisualBERT's detector: Detectron's
arithmetic by hand, the Caffe2 weights file, random-weight runs, and a differential test.

The differential test needs, in the directory named by VLBIAS_DETECTRON_REFERENCE:
  maskrcnn_benchmark/   facebookresearch/maskrcnn-benchmark (the PyTorch port of Detectron, which
                        loads Detectron's Caffe2 weights), built for CPU (``setup.py build_ext
                        --inplace``) after the patches listed in the module's report
  configs/caffe2/e2e_mask_rcnn_R_101_FPN_1x_caffe2.yaml   its config of this architecture
  visualbert_extract.py Detectron's prep_im_for_blob/im_list_to_blob (cv2), the post-processing of
                        uclanlp/visualbert's extract_image_features_nlvr.py (get_detections, with
                        maskrcnn-benchmark's "+1" NMS for Detectron's cython one) and
                        ``build_reference(pkl, post_nms_topk)``, ``reference_forward(model, blob)``:
                        the reference's box branch with Detectron's im_info (the padded blob size)
  site/                 yacs and opencv-python-headless (pip install --target), an apex stub
"""

import hashlib
import importlib
import math
import os
import pickle
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from PIL import Image

from helpers import checkout
from helpers.tiny import noise_images
from vlbias.errors import InputError
from vlbias.io.checkpoints import read_numpy_pickle
from vlbias.images.blob import image_scale
from vlbias.regions import build
from vlbias.regions.detectron_fpn import (
    COCO_CLASSES,
    DetectronFPNDetector,
    cell_anchors,
    decode,
    roi_levels,
)
from vlbias.regions.modeling_detectron_fpn import _c2_name

SMALL = {"adapter": "detectron_fpn", "weights": "random", "seed": 0, "device": "cpu", "min_size": 96,
         "max_size": 160, "post_nms_topk": 60, "min_boxes": 10, "max_boxes": 100, "conf": 0.2}


@pytest.fixture(scope="module")
def detector():
    return build(SMALL)


@pytest.fixture(scope="module")
def blobs(detector):
    """The detector's random weights as Detectron's model_final.pkl holds them (plus blobs it ignores)."""
    out = {}
    for name, value in detector.model.state_dict().items():
        if _c2_name(name):
            out[_c2_name(name)] = value.numpy().copy()
    rng = np.random.default_rng(1)
    out["bbox_pred_w"] = rng.normal(size=(324, 1024)).astype(np.float32) * 0.01
    out["bbox_pred_b"] = np.zeros(324, np.float32)
    out["fc6_w_momentum"] = np.zeros_like(out["fc6_w"])
    out["_[mask]_fcn1_w"] = np.zeros((256, 256, 3, 3), np.float32)
    out["mask_fcn_logits_b"] = np.zeros(81, np.float32)
    return out


class Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote Detectron's files: an array's raw bytes a str (BINSTRING), read back
    as latin-1 text (Python 3 writes bytes as _codecs.encode calls on text, several times slower)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj):
        n = len(obj)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n))
        self.write(obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes


def write_pkl(path, blobs, pickler=Python2Pickler):
    with open(path, "wb") as f:
        pickler(f, protocol=2).dump({"blobs": blobs, "cfg": "MODEL:\n  TYPE: generalized_rcnn\n"})
    return str(path)


# --- Detectron's arithmetic, by hand ------------------------------------------------------------

def test_anchors_are_detectrons():
    # generate_anchors(stride=4, sizes=(32,), aspect_ratios=(0.5, 1, 2)): FPN's P2 anchors
    np.testing.assert_array_equal(cell_anchors(4, 32).numpy(), [[-22, -10, 25, 13], [-14, -14, 17, 17],
                                                                [-10, -22, 13, 25]])
    # P6: stride 64, size 512: ratio 1 is a 512 square around (31.5, 31.5)
    np.testing.assert_array_equal(cell_anchors(64, 512)[1].numpy(), [-224, -224, 287, 287])


def test_box_decoding_and_levels_use_plus_one_widths():
    box = torch.tensor([[10.0, 20.0, 29.0, 59.0]])  # 20 x 40 pixels (+1 convention)
    np.testing.assert_allclose(decode(torch.zeros(1, 4), box).numpy(), box.numpy())
    shifted = decode(torch.tensor([[0.5, -0.25, math.log(2), 0.0]]), box)  # dx of half a width, w doubled
    np.testing.assert_allclose(shifted.numpy(), [[10 + 10 - 10, 20 - 10, 10 + 10 + 30 - 1, 59 - 10]], atol=1e-5)
    # level floor(4 + log2(sqrt(w*h)/224)): 224 -> 4, 112 -> 3, 447 -> 4, 448 -> 5, tiny -> 2, huge -> 5
    sides = [224, 112, 447, 448, 8, 2000]
    boxes = torch.tensor([[0.0, 0.0, s - 1.0, s - 1.0] for s in sides])
    assert roi_levels(boxes).tolist() == [4, 3, 4, 5, 2, 5]


def test_image_scale_is_prep_im_for_blob():
    assert image_scale(480, 640, 800, 1333) == pytest.approx(800 / 480)
    assert image_scale(300, 1200, 800, 1333) == pytest.approx(1333 / 1200)  # the longer side is capped
    # the cap compares the ROUNDED longer side: 1333.33 rounds to 1333, not above it
    assert image_scale(600, 1000, 800, 1333) == pytest.approx(800 / 600)


def test_prepare_is_bgr_minus_means_resized_by_one_factor(detector):
    x = detector.prepare(Image.new("RGB", (150, 100), (200, 100, 50)))
    assert x.size == (100, 150) and x.scale == pytest.approx(0.96)
    assert tuple(x.image.shape) == (3, 96, 144)  # round(100 * 0.96), round(150 * 0.96)
    np.testing.assert_allclose(x.image[:, 5, 5].numpy(), [50 - 102.9801, 100 - 115.9465, 200 - 122.7717], atol=1e-4)


def test_confidence_is_the_best_class_surviving_its_nms():
    # RoIs 0 and 1 overlap (IoU 0.9 with +1 areas), 2 stands alone; three classes + background
    boxes = torch.tensor([[0.0, 0.0, 9.0, 9.0], [1.0, 0.0, 9.0, 9.0], [50.0, 50.0, 59.0, 59.0]])
    scores = torch.tensor([[0.1, 0.6, 0.2, 0.1],
                           [0.1, 0.5, 0.3, 0.1],   # class 1: suppressed by RoI 0; class 2: survives
                           [0.7, 0.1, 0.1, 0.1]])  # ties in classes 1-3: the first one
    best, label = DetectronFPNDetector._confidence(boxes, scores)
    np.testing.assert_allclose(best.numpy(), [0.6, 0.3, 0.1])
    assert label.tolist() == [1, 2, 1]


# --- weights --------------------------------------------------------------------------------------

def test_caffe2_names():
    expected = {
        "backbone.body.stem.conv1.weight": "conv1_w",
        "backbone.body.stem.conv1.norm.weight": "res_conv1_bn_s",
        "backbone.body.res2.0.shortcut.norm.bias": "res2_0_branch1_bn_b",
        "backbone.body.res4.22.conv3.weight": "res4_22_branch2c_w",
        "backbone.body.res5.0.conv2.norm.weight": "res5_0_branch2b_bn_s",
        "backbone.fpn.inner_blocks.3.0.weight": "fpn_inner_res5_2_sum_w",
        "backbone.fpn.inner_blocks.2.0.bias": "fpn_inner_res4_22_sum_lateral_b",
        "backbone.fpn.layer_blocks.0.0.weight": "fpn_res2_2_sum_w",
        "rpn.head.conv.0.0.bias": "conv_rpn_fpn2_b",
        "rpn.head.bbox_pred.weight": "rpn_bbox_pred_fpn2_w",
        "roi_heads.box_head.fc7.weight": "fc7_w",
        "roi_heads.cls_score.bias": "cls_score_b",
    }
    assert {k: _c2_name(k) for k in expected} == expected
    assert _c2_name("backbone.body.res3.1.conv1.norm.running_var") is None


def test_detectron_pickle_loads_strictly(detector, blobs, tmp_path):
    path = write_pkl(tmp_path / "model_final.pkl", blobs)
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    loaded = build({**spec, "checkpoint": path})
    state = loaded.model.state_dict()
    for name, value in detector.model.state_dict().items():
        assert torch.equal(state[name], value), name
    assert loaded.weights == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    # the same blobs pickled by Python 3 (protocol 2: bytes as _codecs.encode calls) read the same
    py3 = read_numpy_pickle(write_pkl(tmp_path / "py3.pkl", {"fc6_b": blobs["fc6_b"]}, pickle.Pickler))
    np.testing.assert_array_equal(py3["blobs"]["fc6_b"], blobs["fc6_b"])
    # this module's own names in a safetensors file load too
    safetensors.torch.save_file({k: v.contiguous() for k, v in detector.model.state_dict().items()},
                                tmp_path / "own.safetensors")
    build({**spec, "checkpoint": str(tmp_path / "own.safetensors")})
    bad = dict(blobs, res2_0_branch2a_w=blobs["res2_0_branch2a_w"][:32])
    with pytest.raises(InputError, match="wrong shapes res2_0_branch2a_w"):
        build({**spec, "checkpoint": write_pkl(tmp_path / "shape.pkl", bad)})
    renamed = {**{k: v for k, v in blobs.items() if k != "fc7_w"}, "extra_w": 0 * blobs["fc6_b"]}
    with pytest.raises(InputError, match="missing fc7_w, .*unexpected extra_w"):
        build({**spec, "checkpoint": write_pkl(tmp_path / "names.pkl", renamed)})


def test_another_url_of_the_same_file_name_is_downloaded(tmp_path, http_server):
    """A second `url:` ending in model_final.pkl got the first one's cached file."""
    from vlbias.weights import fetch

    http_server.routes |= {"one/model_final.pkl": b"first", "two/model_final.pkl": b"second"}

    def downloaded(url, sha256=None):
        spec = {"adapter": "detectron_fpn", "url": http_server.url(url), **({"sha256": sha256} if sha256 else {})}
        files = fetch("regions/detectron", spec, cache=tmp_path, lock_path=None)["sources"]["url"]["files"]
        return Path(files["model_final.pkl"]["path"])

    first, second = downloaded("one/model_final.pkl"), downloaded("two/model_final.pkl")
    assert (first.read_bytes(), second.read_bytes()) == (b"first", b"second")
    assert http_server.requests["two/model_final.pkl"] == 1 and first.parent == tmp_path / "detectron"
    with pytest.raises(InputError, match="not the pinned 0+; give a local copy instead"):
        downloaded("two/model_final.pkl", "0" * 64)


class Payload:
    def __reduce__(self):
        return (os.system, ("echo unpickled",))


def test_a_pickle_with_code_is_refused(tmp_path):
    path = tmp_path / "model_final.pkl"
    with open(path, "wb") as f:
        pickle.dump({"blobs": {"conv1_w": Payload()}}, f, protocol=2)
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    with pytest.raises(InputError, match="refused: not a pickle of numpy arrays only .*system is not a numpy"):
        build({**spec, "checkpoint": str(path)})
    with pytest.raises(InputError, match="set exactly one of `url`"):
        build({**spec, "checkpoint": str(path), "weights": "random"})


# --- random-weight runs ---------------------------------------------------------------------------

def test_regions_have_the_shared_layout_and_box_rule(detector):
    images = noise_images(0, [(100, 150), (140, 90)])
    regions = detector.detect([detector.prepare(im) for im in images])
    assert detector.feature_dim == 1024 and len(detector.class_names) == 80 == len(COCO_CLASSES)
    assert detector.class_names[0] == "person" and detector.person_classes == {"person"}
    for r, im in zip(regions, images):
        n = len(r.boxes)
        assert 10 <= n <= 60  # at least min_boxes; at most the proposals
        assert r.features.shape == (n, 1024) and r.features.dtype == np.float32 and (r.features >= 0).all()
        assert (np.diff(r.class_scores) <= 0).all(), "best box first"
        assert ((0 <= r.class_ids) & (r.class_ids < 80)).all() and r.attr_ids is None
        x1, y1, x2, y2 = r.boxes.T
        assert (0 <= x1).all() and (x1 <= x2).all() and (x2 <= im.width).all() and (y2 <= im.height).all()
        assert r.image_size == (im.height, im.width)
        # every box at conf 0.2 or above is kept (fewer than max_boxes here), topped up to min_boxes
        assert (r.class_scores >= 0.2).sum() == n or n == 10


# --- differential test against the reference ------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    where = checkout("VLBIAS_DETECTRON_REFERENCE", "a directory with maskrcnn-benchmark built for CPU and "
                     "visualbert_extract.py (see this module's docstring)", "visualbert_extract.py", "maskrcnn_benchmark/")
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module("visualbert_extract")
    finally:
        sys.path.remove(str(where))


def test_preprocessing_matches_detectrons_cv2(reference, detector):
    for im in noise_images(2, [(100, 150), (141, 93), (64, 300)]):
        ref, scale = reference.prep_im_for_blob(np.asarray(im)[:, :, ::-1].copy(), reference.PIXEL_MEANS, 96, 160)
        ours = detector.prepare(im)
        assert ours.scale == pytest.approx(scale, rel=1e-12)
        diff = np.abs(ours.image.numpy().transpose(1, 2, 0) - ref).max()
        print(f"\npreprocessing {im.width}x{im.height}: scale {scale:.6f}, max abs difference {diff:.2e}")
        assert ours.image.shape[1:] == ref.shape[:2] and diff < 1e-3


def test_same_rois_features_and_kept_boxes_as_the_reference(reference, detector, blobs, tmp_path):
    """Identical random weights (our seeded ones, written as Detectron's pkl, read by the reference's
    Caffe2 loader), identical input blobs (the reference's cv2 preprocessing)."""
    pkl = write_pkl(tmp_path / "model_final.pkl", blobs)
    ref = reference.build_reference(pkl, post_nms_topk=SMALL["post_nms_topk"])
    ours = build({**{k: v for k, v in SMALL.items() if k not in ("weights", "seed")}, "checkpoint": pkl})
    for im in noise_images(3, [(100, 150), (140, 90), (120, 120)]):
        bgr = np.asarray(im)[:, :, ::-1].copy()
        resized, scale = reference.prep_im_for_blob(bgr, reference.PIXEL_MEANS, 96, 160)
        blob = reference.im_list_to_blob(resized)
        r_rois, r_fc7, r_scores = reference.reference_forward(ref, blob)
        x = type(ours.prepare(im))(torch.from_numpy(resized.transpose(2, 0, 1).copy()), scale, bgr.shape[:2])
        with torch.inference_mode():
            rois, fc7, scores = ours.forward(x)
        feats, conf, boxes, keep = reference.get_detections(r_scores, r_rois, scale, r_fc7, 10, 100, 0.2)
        got = ours.detect([x])[0]
        diffs = {"rois": np.abs(rois.numpy() - r_rois[:, 1:]).max(), "fc7": np.abs(fc7.numpy() - r_fc7).max(),
                 "scores": np.abs(scores.numpy() - r_scores).max()}
        order = np.argsort(-conf, kind="stable")
        kept = {"boxes": np.abs(got.boxes - np.clip(boxes[order], 0, [im.width, im.height] * 2)).max(),
                "features": np.abs(got.features - feats[order]).max(),
                "confidence": np.abs(got.class_scores - conf[order]).max()}
        print(f"\nimage {im.width}x{im.height}: {len(rois)} RoIs, {len(keep)} kept; max abs differences "
              f"{ {k: f'{v:.2e}' for k, v in {**diffs, **kept}.items()} }")
        assert rois.shape == (len(r_rois), 4)
        np.testing.assert_allclose(rois.numpy(), r_rois[:, 1:], atol=1e-3)
        np.testing.assert_allclose(fc7.numpy(), r_fc7, atol=1e-3, rtol=1e-4)
        np.testing.assert_allclose(scores.numpy(), r_scores, atol=1e-5)
        assert len(got.boxes) == len(keep)
        np.testing.assert_allclose(got.class_scores, conf[order], atol=1e-5)
        np.testing.assert_allclose(got.features, feats[order], atol=1e-3, rtol=1e-4)
        np.testing.assert_allclose(got.boxes, np.clip(boxes[order], 0, [im.width, im.height] * 2), atol=1e-3)


def test_schema_declares_the_keys_the_adapter_reads():
    import jsonschema

    from vlbias.schemas import adapter_schema

    props = adapter_schema("detectors", "detectron_fpn")["properties"]
    schema = {"type": "object", "properties": props, "additionalProperties": False}
    jsonschema.Draft202012Validator.check_schema(schema)
    spec = {k: v for k, v in SMALL.items() if k != "adapter"}
    jsonschema.validate(spec, schema)
    jsonschema.validate({"url": "https://example.org/model_final.pkl", "sha256": "0" * 64,
                         "min_boxes": 10, "max_boxes": 100, "conf": 0.2}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**spec, "post_nms_top_k": 5}, schema)
