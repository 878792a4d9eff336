"""The bottom-up-attention detector (vlbias.regions.bua) on random weights, and against its references.

Two region selections, two references. ``selection: demo``: transformers'
examples/research_projects/lxmert/{modeling_frcnn,processing_image,utils}.py and the hub's
config.yaml of unc-nlp/frcnn-vg-finetuned, in the directory named by VLBIAS_FRCNN_REFERENCE.
``selection: generate_tsv``: bottom-up-attention's own selection code, ``get_detections_from_im`` of
tools/generate_tsv.py, run on our network's raw outputs (caffe, ``im_detect`` and the network's
blobs replaced by stand-ins returning them; the NMS their lib/nms/py_cpu_nms.py, at their
cfg.TEST.NMS): a checkout of jiasenlu/bottom-up-attention (the fork Ross et al. ran) or
peteanderson80/bottom-up-attention in VLBIAS_BOTTOM_UP_REFERENCE, and for the labels LXMERT's
extraction (airsplay/lxmert data/mscoco_imgfeat/extract_coco_image.py) in VLBIAS_LXMERT_REFERENCE.
"""

import base64
import hashlib
import importlib
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from PIL import Image, ImageDraw

from helpers.bottom_up import checkout as bottom_up_checkout
from helpers.bottom_up import config as their_config
from helpers import checkout, plain_module
from helpers.tiny import noise_images
from helpers.tiny import BUA_SMALL as SMALL
from helpers.tiny import write_vocab

from vlbias.errors import InputError
from vlbias.images.blob import PIXEL_MEANS_BGR, image_scale
from vlbias.regions import build
from vlbias.regions.bua import generate_tsv_regions, max_conf, resized_size, tsv_keep
from vlbias.regions.extract import detector_fingerprint
from vlbias.regions.modeling_bua import proposal_overlaps
from vlbias.weights import prepare

DEMO = {**SMALL, "selection": "demo"}


@pytest.fixture(scope="module")
def detector():
    return build(SMALL)


@pytest.fixture(scope="module")
def images():
    return noise_images(0, [(64, 80), (90, 60)])


@pytest.fixture(scope="module")
def demo():
    return build(DEMO)


@pytest.fixture(scope="module", params=["generate_tsv", "demo"])
def regions(request, detector, demo, images):
    d = detector if request.param == "generate_tsv" else demo
    return request.param, d.detect([d.prepare(im) for im in images])


def test_the_class_constructed_directly_reads_its_schema_defaults(detector):
    """BottomUpAttention(entry), not through build, raised KeyError: 'batch_size'
    (vlbias.runtime reads the schema's defaults, which only build filled in); the registered class fills
    them in itself, as build does."""
    from vlbias.regions.bua import BottomUpAttention

    direct = BottomUpAttention({k: v for k, v in SMALL.items() if k != "adapter"})
    assert direct.settings == detector.settings and direct.proposals == "caffe"  # the schema's selection's


def test_prepare_resizes_and_normalises_like_the_reference(detector, demo):
    assert resized_size(480, 640, 600, 1000) == (600, 800)
    assert resized_size(300, 1200, 600, 1000) == (250, 1000)  # the longer side is capped
    assert resized_size(90, 60, 64, 100) == (96, 64)
    # BGR order, minus caffe's BGR mean, no scaling of the values
    expected = torch.tensor([50.0, 100.0, 200.0]) - torch.tensor(PIXEL_MEANS_BGR)
    for d in (detector, demo):
        x = d.prepare(Image.new("RGB", (80, 64), (200, 100, 50)))
        assert x.image.shape == (3, 64, 80) and x.image.dtype == torch.float32 and x.size == (64, 80)
        assert torch.allclose(x.image[:, 10, 10], expected, atol=1e-4)
        with pytest.raises(InputError, match="image of 300x2 pixels: too elongated"):
            d.prepare(Image.new("RGB", (300, 2)))
    # generate_tsv: caffe's blob, one factor for both sides (sizes rounded), kept to unscale the boxes;
    # the demo rounds each side on its own
    x = detector.prepare(Image.new("RGB", (61, 90)))
    assert x.scale == image_scale(90, 61, 64, 100) == 64 / 61 and x.image.shape[-2:] == (round(90 * 64 / 61), 64)
    assert demo.prepare(Image.new("RGB", (61, 90))).scale is None


def test_regions_have_the_shared_layout(detector, images, regions):
    selection, regions = regions
    assert len(regions) == 2
    for r, im in zip(regions, images):
        n = len(r.boxes)
        assert SMALL["min_boxes"] <= n <= SMALL["max_boxes"]
        assert r.boxes.shape == (n, 4) and r.boxes.dtype == np.float32
        assert r.features.shape == (n, 2048) and r.features.dtype == np.float32
        assert np.isfinite(r.features).all() and np.abs(r.features).max() > 0
        assert r.class_ids.dtype == np.int64 and ((0 <= r.class_ids) & (r.class_ids < 1600)).all()
        assert r.attr_ids.dtype == np.int64 and ((0 <= r.attr_ids) & (r.attr_ids < 400)).all()
        assert ((0 < r.attr_scores) & (r.attr_scores <= 1)).all()
        if selection == "demo":
            assert (np.diff(r.class_scores) <= 0).all(), "best box first"
        assert r.image_size == (im.height, im.width)
        x1, y1, x2, y2 = r.boxes.T
        assert (0 <= x1).all() and (x1 <= x2).all() and (x2 <= im.width).all()
        assert (0 <= y1).all() and (y1 <= y2).all() and (y2 <= im.height).all()
    assert detector.feature_dim == 2048 and len(detector.class_names) == 1600
    assert len(detector.attribute_names) == 400 and detector.weights == "random"


def test_demo_box_rule_is_keep_boxes_on_the_nms_survivors(demo, images, monkeypatch):
    x = [demo.prepare(images[0])]

    def run(min_boxes, max_boxes, conf):
        monkeypatch.setattr(demo, "min_boxes", min_boxes)
        monkeypatch.setattr(demo, "max_boxes", max_boxes)
        monkeypatch.setattr(demo, "conf", conf)
        return demo.detect(x)[0]

    everything = run(0, 100, 0.0)  # every NMS survivor, best first
    scores = everything.class_scores
    assert len(scores) >= 4
    fixed = run(3, 3, 0.99)  # fixed K: min = max = K, whatever the scores
    assert len(fixed.boxes) == 3
    np.testing.assert_array_equal(fixed.boxes, everything.boxes[:3])
    np.testing.assert_array_equal(fixed.features, everything.features[:3])
    conf = float(np.median(scores))
    adaptive = run(1, 100, conf)
    assert len(adaptive.boxes) == max(1, int((scores >= conf).sum()))


def test_state_dict_has_the_checkpoint_layout(detector):
    state = detector.model.state_dict()
    shapes = {
        "backbone.stem.conv1.weight": (64, 3, 7, 7),
        "backbone.stem.conv1.norm.running_var": (64,),
        "backbone.res2.0.shortcut.weight": (256, 64, 1, 1),
        "backbone.res3.0.conv1.weight": (128, 256, 1, 1),
        "backbone.res4.22.conv3.norm.weight": (1024,),
        "proposal_generator.anchor_generator.cell_anchors.0": (12, 4),
        "proposal_generator.rpn_head.conv.weight": (512, 1024, 3, 3),
        "proposal_generator.rpn_head.objectness_logits.weight": (12, 512, 1, 1),
        "proposal_generator.rpn_head.anchor_deltas.bias": (48,),
        "roi_heads.res5.0.shortcut.weight": (2048, 1024, 1, 1),
        "roi_heads.res5.2.conv2.weight": (512, 512, 3, 3),
        "roi_heads.box_predictor.cls_score.weight": (1601, 2048),
        "roi_heads.box_predictor.bbox_pred.weight": (6400, 2048),
        "roi_heads.box_predictor.cls_embedding.weight": (1601, 256),
        "roi_heads.box_predictor.fc_attr.weight": (512, 2304),
        "roi_heads.box_predictor.attr_score.weight": (401, 512),
    }
    for name, shape in shapes.items():
        assert tuple(state[name].shape) == shape, name
    assert len(state) == 536 and not [k for k in state if "num_batches_tracked" in k]
    # caffe ResNet: the stride sits in the first 1x1 convolution; res5 keeps stride 1 with dilation 2
    res3 = detector.model.backbone.res3[0]
    assert res3.conv1.stride == (2, 2) and res3.conv2.stride == (1, 1)
    res5 = detector.model.roi_heads.res5
    assert res5[0].conv1.stride == (1, 1) and all(b.conv2.dilation == (2, 2) for b in res5)


def hf_style(state):
    """The state_dict as the hub checkpoint has it: with BatchNorm2d's num_batches_tracked."""
    out = dict(state)
    for name in state:
        if name.endswith("norm.running_var"):
            out[name.replace("running_var", "num_batches_tracked")] = torch.tensor(0)
    return out


@pytest.mark.parametrize("suffix", [".safetensors", ".bin"])
def test_checkpoint_round_trip(detector, tmp_path, suffix):
    path = tmp_path / f"weights{suffix}"
    state = {k: v.contiguous() for k, v in detector.model.state_dict().items()}
    if suffix == ".safetensors":
        safetensors.torch.save_file(state, path)
    else:
        torch.save(hf_style(state), path)  # read back with weights_only=True
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    loaded = build({**spec, "checkpoint": str(path), "objects_vocab": write_vocab(tmp_path, "o", 1600),
                    "attributes_vocab": write_vocab(tmp_path, "a", 400)})
    assert loaded.weights == hashlib.sha256(path.read_bytes()).hexdigest()
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, state[name]), name





class Payload:
    pass


def test_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"roi_heads.box_predictor.cls_score.weight": torch.zeros(1), "hook": Payload()}, path)
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    with pytest.raises(InputError, match="refused: not a weights-only"):
        build({**spec, "checkpoint": str(path), "objects_vocab": write_vocab(tmp_path, "o", 1600),
               "attributes_vocab": write_vocab(tmp_path, "a", 400)})


def test_checkpoint_with_wrong_names_or_shapes_is_refused(detector, tmp_path):
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    vocab = {"objects_vocab": write_vocab(tmp_path, "o", 1600), "attributes_vocab": write_vocab(tmp_path, "a", 400)}
    state = {k: v.contiguous() for k, v in detector.model.state_dict().items()}
    bad = dict(state, **{"roi_heads.box_predictor.cls_score.weight": torch.zeros(81, 2048)})
    safetensors.torch.save_file(bad, tmp_path / "shape.safetensors")
    with pytest.raises(InputError, match="shapes do not fit.*cls_score"):
        build({**spec, **vocab, "checkpoint": str(tmp_path / "shape.safetensors")})
    extra = dict(state, **{"roi_heads.extra.weight": torch.zeros(1)})
    safetensors.torch.save_file(extra, tmp_path / "extra.safetensors")
    with pytest.raises(InputError, match="unexpected roi_heads.extra.weight"):
        build({**spec, **vocab, "checkpoint": str(tmp_path / "extra.safetensors")})


def test_vocabularies_are_required_and_checked(tmp_path):
    spec = {k: v for k, v in SMALL.items() if k not in ("weights", "seed")}
    with pytest.raises(InputError, match="^objects_vocab: the detector needs its 1600 object names"):
        build({**spec, "checkpoint": str(tmp_path / "absent.safetensors")})
    short = write_vocab(tmp_path, "o", 1599)
    with pytest.raises(InputError, match="objects_vocab: expected 1600 non-empty lines"):
        build({**spec, "checkpoint": "x", "objects_vocab": short})
    with pytest.raises(InputError, match="attributes_vocab: file not found"):
        build({**spec, "checkpoint": "x", "objects_vocab": write_vocab(tmp_path, "o", 1600),
               "attributes_vocab": str(tmp_path / "nope.txt")})
    with pytest.raises(InputError, match="bua entry: `model_id: unc-nlp/frcnn-vg-finetuned` names remote weights"):
        build({**spec, "model_id": "unc-nlp/frcnn-vg-finetuned", "objects_vocab": write_vocab(tmp_path, "o", 1600),
               "attributes_vocab": write_vocab(tmp_path, "a", 400)})


def test_vocabulary_from_a_url_and_person_classes(tmp_path, http_server):
    objects = ["yolk", "man,men", "woman", "stop sign,stopsign", "surfer"] + [f"o{i}" for i in range(1595)]
    http_server.routes["objects_vocab.txt"] = "\n".join(objects).encode()
    url = http_server.url("85ec9b7/objects_vocab.txt")
    spec = {**SMALL, "objects_vocab": url, "attributes_vocab": write_vocab(tmp_path, "a", 400)}
    d = build(prepare("regions/bua", spec, cache=tmp_path / "cache"))
    assert d.class_names[:5] == ["yolk", "man", "woman", "stop sign", "surfer"]
    assert d.person_classes == {"man", "woman", "surfer"}
    assert d.settings["objects_vocab"] == url and len(d.settings["objects_vocab_sha256"]) == 64
    assert len(list((tmp_path / "cache" / "bua").iterdir())) == 1
    # a second detector reads the cached copy
    assert build(prepare("regions/bua", spec, cache=tmp_path / "cache")).class_names == d.class_names
    assert http_server.requests["objects_vocab.txt"] == 1


# ---------------------------------------------------------------------------------------------
# Differential test against the reference implementation
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    where = checkout("VLBIAS_FRCNN_REFERENCE", "a directory with huggingface/transformers' "
                     "examples/research_projects/lxmert (modeling_frcnn.py, processing_image.py, utils.py) and the "
                     "hub's config.yaml of unc-nlp/frcnn-vg-finetuned", "modeling_frcnn.py", "config.yaml")
    # utils.py imports cv2 and wget for its file and URL loaders, which the test does not use
    for name in ("cv2", "wget"):
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules.setdefault(name, types.ModuleType(name))
    sys.path.insert(0, str(where))
    try:
        import yaml

        modules = [importlib.import_module(m) for m in ("modeling_frcnn", "processing_image", "utils")]
    finally:
        sys.path.remove(str(where))
    return where, yaml.safe_load((where / "config.yaml").read_text()), *modules


def test_same_boxes_and_features_as_the_reference(reference):
    """LXMERT's fixed 36 boxes (which is keep_boxes with min_boxes = max_boxes = 36)."""
    where, config, modeling, processing, utils = reference
    min_boxes = max_boxes = 36
    min_size, max_size = 80, 130
    cfg = utils.Config(config)
    cfg.input.min_size_test, cfg.input.max_size_test = min_size, max_size
    cfg.min_detections, cfg.max_detections = min_boxes, max_boxes
    ours = build({**DEMO, "min_size": min_size, "max_size": max_size, "post_nms_topk": 300,
                  "min_boxes": min_boxes, "max_boxes": max_boxes, "conf": 0.0})
    ref = modeling.GeneralizedRCNN(cfg).eval()
    # identical random weights: ours, seeded, into the reference; then the reference's own
    # state_dict (the hub checkpoint's layout, num_batches_tracked included) back, strictly
    missing, unexpected = ref.load_state_dict(ours.model.state_dict(), strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)
    ours.model.load_state_dict(ref.state_dict(), strict=True)

    images = noise_images(1, [(100, 150), (140, 100)])
    # each side's own preprocessing; the reference gets BGR pixels, as img_tensorize gives for a URL
    tensors = [torch.from_numpy(np.asarray(im)[:, :, ::-1].copy()).float() for im in images]
    batch, sizes, scales = processing.Preprocess(cfg)(tensors)
    expected = ref(batch, sizes, scales_yx=scales, padding="max_detections", max_detections=max_boxes,
                   return_tensors="pt")
    got = ours.detect([ours.prepare(im) for im in images])

    for i, r in enumerate(got):
        n = int(expected["preds_per_image"][i])
        assert len(r.boxes) == n >= min_boxes
        diffs = {
            "boxes": np.abs(r.boxes - expected["boxes"][i, :n].numpy()).max(),
            "features": np.abs(r.features - expected["roi_features"][i, :n].numpy()).max(),
            "scores": np.abs(r.class_scores - expected["obj_probs"][i, :n].numpy()).max(),
            "attr_scores": np.abs(r.attr_scores - expected["attr_probs"][i, :n].numpy()).max(),
        }
        print(f"image {i}: {n} boxes, max abs differences {diffs}")
        np.testing.assert_array_equal(r.class_ids, expected["obj_ids"][i, :n].numpy())
        np.testing.assert_array_equal(r.attr_ids, expected["attr_ids"][i, :n].numpy())
        np.testing.assert_allclose(r.boxes, expected["boxes"][i, :n].numpy(), atol=1e-3)
        np.testing.assert_allclose(r.features, expected["roi_features"][i, :n].numpy(), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(r.class_scores, expected["obj_probs"][i, :n].numpy(), atol=1e-5)
        np.testing.assert_allclose(r.attr_scores, expected["attr_probs"][i, :n].numpy(), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# generate_tsv's selection on hand-built raw outputs (what vlbias.regions.bua documents)
# ---------------------------------------------------------------------------------------------

# three 10 x 10 pixel boxes ("+1" areas 100): 0 and 1 share columns 5..9, 2 lies apart
BOXES = torch.tensor([[0, 0, 9, 9], [5, 0, 14, 9], [20, 20, 29, 29]], dtype=torch.float32)
# class 0: box 1 (0.45) suppresses box 0; class 1: box 2 first, then box 0 (0.2) suppresses box 1
SCORES = torch.tensor([[0.3, 0.2], [0.45, 0.1], [0.05, 0.7]])
ATTRS = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.1, 0.1], [0.2, 0.2, 0.3]])
POOL5 = torch.arange(12, dtype=torch.float32).view(3, 4)


def test_overlaps_count_the_last_pixel():
    ovr = proposal_overlaps(BOXES)
    assert ovr[0, 1] == ovr[1, 0] == np.float32(50) / np.float32(150)  # 5 x 10 shared, over 100 + 100 - 50
    assert ovr[0, 2] == 0 and ovr[1, 1] == 1


def test_max_conf_is_the_best_score_among_the_classes_whose_nms_a_box_survives():
    # box 0 is suppressed in its best class (0) but survives class 1: 0.2, not 0.3
    np.testing.assert_array_equal(max_conf(BOXES, SCORES), np.float32([0.2, 0.45, 0.7]).astype(np.float64))
    # an overlap of exactly float32(0.3) ("+1" areas 10 and 3, one inside the other): cpu_nms suppresses at
    # ovr >= 0.3, in double, which float32(0.3) = 0.30000001 passes (py_cpu_nms would keep the box)
    inside = torch.tensor([[0, 0, 0, 9], [0, 0, 0, 2]], dtype=torch.float32)
    assert proposal_overlaps(inside)[0, 1] == np.float32(0.3)
    np.testing.assert_array_equal(max_conf(inside, torch.tensor([[0.9], [0.5]])), [np.float32(0.9), 0])
    # a tie within a class: the box first in numpy's argsort reversed is kept, the other suppressed
    first = int(np.argsort(np.float32([0.5, 0.5]))[::-1][0])
    tied = max_conf(torch.tensor([[0, 0, 9, 9], [0, 0, 9, 8]], dtype=torch.float32), torch.tensor([[0.5], [0.5]]))
    assert tied[first] == 0.5 and tied[1 - first] == 0
    assert max_conf(torch.zeros((0, 4)), torch.zeros((0, 2))).shape == (0,)


def test_tsv_keep_keeps_proposal_order_in_range_else_the_best():
    conf = np.array([0.1, 0.5, 0.3, 0.05, 0.7])  # three of five at 0.2
    assert tsv_keep(conf, 2, 4, 0.2).tolist() == [1, 2, 4]  # within [min, max]: proposal order, not sorted
    assert tsv_keep(conf, 3, 3, 0.2).tolist() == [1, 2, 4]  # exactly min = max
    assert tsv_keep(conf, 4, 4, 0.2).tolist() == [4, 1, 2, 0]  # too few: the best min_boxes, best first
    assert tsv_keep(conf, 1, 2, 0.2).tolist() == [4, 1]  # too many: the best max_boxes
    assert tsv_keep(conf, 0, 5, 0.5).tolist() == [1, 4]  # max_conf >= conf
    ties = np.array([0.3, 0.3, 0.3, 0.1, 0.3])
    assert tsv_keep(ties, 2, 2, 0.2).tolist() == np.argsort(ties)[::-1][:2].tolist()  # numpy's order of ties
    # ... pinned by hand, in both branches: numpy's default argsort of a few proposals leaves ties in
    # proposal order (as generate_tsv's numpy did) and [::-1] puts them last first; a stable sort of
    # -max_conf gives [0, 1] and [3, 0, 1] (ties at max_conf 0 are common)
    assert tsv_keep(ties, 2, 2, 0.2).tolist() == [4, 2]
    assert tsv_keep(np.array([0, 0, 0, 0.5]), 3, 10, 0.2).tolist() == [3, 2, 1]


def test_generate_tsv_regions_are_unregressed_proposals_labelled_by_their_argmax():
    rois = BOXES * 2  # found on the image resized by 2
    regions, conf = generate_tsv_regions(rois, SCORES, ATTRS, POOL5, 2.0, (30, 40), 0, 3, 0.25)
    np.testing.assert_array_equal(conf, np.float32([0.2, 0.45, 0.7]).astype(np.float64))
    # boxes 1 and 2 pass 0.25, in proposal order; each labelled with its best class (not max_conf's)
    np.testing.assert_array_equal(regions.boxes, BOXES[[1, 2]].numpy())
    np.testing.assert_array_equal(regions.features, POOL5[[1, 2]].numpy())
    assert regions.class_ids.tolist() == [0, 1] and regions.attr_ids.tolist() == [0, 2]
    np.testing.assert_array_equal(regions.class_scores, np.float32([0.45, 0.7]))
    np.testing.assert_array_equal(regions.attr_scores, np.float32([0.5, 0.3]))
    assert regions.image_size == (30, 40)
    fixed, _ = generate_tsv_regions(rois, SCORES, ATTRS, POOL5, 2.0, (30, 40), 3, 3, 0.9)  # min = max = 3
    np.testing.assert_array_equal(fixed.boxes, BOXES[[2, 1, 0]].numpy())  # the best first by max_conf
    np.testing.assert_array_equal(fixed.class_scores, np.float32([0.7, 0.45, 0.3]))  # box 0's class 0: 0.3
    # the division by the scale in float32 (numpy 1's float32 array / float64 scalar), not in float64
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 900, (500, 2)).astype(np.float32)
    many = torch.from_numpy(np.concatenate([xy, xy + 5], axis=1))
    uniform = torch.full((500, 1), 0.5)
    got, _ = generate_tsv_regions(many, uniform, uniform, torch.zeros((500, 1)), 1.7, (600, 600), 500, 500, 0.0)
    assert np.array_equal(np.sort(got.boxes, axis=0), np.sort(many.numpy() / np.float32(1.7), axis=0))
    assert not np.array_equal(np.sort(got.boxes, axis=0), np.sort((many.double() / 1.7).float().numpy(), axis=0))


def test_the_detector_keeps_generate_tsv_regions_and_records_the_selection(detector, demo, images, tmp_path,
                                                                          monkeypatch):
    x = detector.prepare(images[1])
    got = detector.detect([x])[0]
    expected, _ = generate_tsv_regions(*detector.raw_outputs(x), x.scale, x.size, 2, 5, 0.2)
    np.testing.assert_array_equal(got.features, expected.features)
    np.testing.assert_array_equal(got.boxes, expected.boxes)
    # 61 x 92 pixels resize by 64/61 to 64 x 97 (96.52 rounded up): caffe's proposals end at the resized
    # image's last pixel (96), 91.5 once divided by the scale; the demo's reach its edge (97), past the
    # image once divided by the scale: the detector clips its boxes to the image
    image = noise_images(0, [(92, 61)])[0]
    demo_proposals = build({**SMALL, "proposals": "demo"})
    for proposals, every in (("caffe", detector), ("demo", demo_proposals)):
        with monkeypatch.context() as m:  # every proposal kept (12 of 12)
            m.setattr(every, "min_boxes", 12)
            m.setattr(every, "max_boxes", 12)
            x = every.prepare(image)
            expected, _ = generate_tsv_regions(*every.raw_outputs(x), x.scale, x.size, 12, 12, 0.2)
            if proposals == "caffe":
                assert expected.boxes[:, 3].max() == np.float32(96) / np.float32(x.scale) < 92
            else:
                assert expected.boxes[:, 3].max() > 92
            np.testing.assert_array_equal(every.detect([x])[0].boxes, np.minimum(expected.boxes, [61, 92, 61, 92]))
    assert detector.settings["selection"] == "generate_tsv" and detector.settings["nms"] == 0.3
    assert detector.settings["proposals"] == "caffe" and demo.settings["proposals"] == "demo"
    assert detector.settings["rpn"]["min_size"] == 16 and "min_size" not in demo.settings["rpn"]
    assert detector_fingerprint(detector) != detector_fingerprint(demo_proposals)
    with pytest.raises(InputError, match="proposals 'caffe': needs selection generate_tsv"):
        build({**DEMO, "proposals": "caffe"})
    assert demo.settings["selection"] == "demo" and "nms" not in demo.settings
    assert detector_fingerprint(detector) != detector_fingerprint(demo)  # the regions' cache key
    with pytest.raises(InputError, match="selection 'nms': must be one of generate_tsv, demo"):
        build({**SMALL, "selection": "nms"})
    # each image alone through the network, as caffe ran it: a batch gives what each gives alone
    both = detector.detect([detector.prepare(im) for im in images])
    np.testing.assert_array_equal(both[1].features, got.features)
    # the store records the switch (its settings, which also key the regions' cache)
    import json

    from vlbias.regions.extract import extract_regions
    from vlbias.regions.store import RegionStore

    path = tmp_path / "scene.png"
    images[0].save(path)
    extract_regions([("t/X/scene.png", str(path))], detector, tmp_path / "store.h5", batch_size=1)
    with RegionStore(tmp_path / "store.h5") as store:
        assert json.loads(store.attrs["settings"])["selection"] == "generate_tsv"


# ---------------------------------------------------------------------------------------------
# Differential test of generate_tsv's selection against bottom-up-attention's own code
# ---------------------------------------------------------------------------------------------

def scenes(seed, shapes):
    """Generated scenes (no data mirror): rectangles and ellipses of random colours on a noisy gradient."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in shapes:
        base = np.linspace(0, 255, w)[None, :, None] * rng.uniform(0.2, 1, 3) + rng.normal(0, 12, (h, w, 3))
        image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(image)
        for _ in range(8):
            x0, y0 = rng.uniform(0, w * 0.8), rng.uniform(0, h * 0.8)
            box = [x0, y0, x0 + rng.uniform(8, w / 2), y0 + rng.uniform(8, h / 2)]
            fill = tuple(int(c) for c in rng.integers(0, 256, 3))
            (draw.rectangle if rng.random() < 0.5 else draw.ellipse)(box, fill=fill)
        out.append(image)
    return out


def their_function(path):
    """The source of ``get_detections_from_im`` in ``path``: bottom-up-attention's script is Python 2
    (print statements) but the function alone is valid Python 3."""
    match = re.search(r"^def get_detections_from_im\(.*?(?=^def )", Path(path).read_text(), flags=re.S | re.M)
    return compile(match.group(0), str(path), "exec")


@pytest.fixture(scope="module")
def bottom_up():
    where = bottom_up_checkout("tools/generate_tsv.py", "lib/nms/py_cpu_nms.py", "lib/fast_rcnn/config.py",
                               "experiments/cfgs/faster_rcnn_end2end_resnet.yml")
    import yaml

    config = their_config(where)
    # the config the extraction ran with (the README's --cfg) leaves TEST.NMS at its default
    ran = yaml.safe_load((where / "experiments/cfgs/faster_rcnn_end2end_resnet.yml").read_text())
    nms = ran.get("TEST", {}).get("NMS", config.cfg.TEST.NMS)
    script = (where / "tools/generate_tsv.py").read_text()
    constants = {k: int(re.search(rf"^{k} = (\d+)", script, flags=re.M).group(1)) for k in ("MIN_BOXES", "MAX_BOXES")}
    py_cpu_nms = plain_module("bottom_up_py_cpu_nms", where / "lib/nms/py_cpu_nms.py").py_cpu_nms
    return {"code": their_function(where / "tools/generate_tsv.py"), "nms": nms, "constants": constants,
            "py_cpu_nms": py_cpu_nms, "cfg": types.SimpleNamespace(TEST=types.SimpleNamespace(NMS=nms))}


def run_theirs(ref, code, raw, scale, image, min_boxes, max_boxes, conf):
    """Their get_detections_from_im on our network's raw outputs: (its dict, its local max_conf).

    Stand-ins: ``im_detect`` and the net's blobs give our proposals (rois with their batch column),
    class and attribute probabilities (background column first, never read by the selection) and pooled
    features; ``_get_blobs`` the scale, as float32 (numpy 1's value-based casting, with which the released
    files were made, divided the float32 rois by the float64 scale in float32); ``nms`` their wrapper's
    dispatch to py_cpu_nms; cv2.imread the image (LXMERT's version reads a file).
    """
    rois, scores, attrs, pool5 = (a.float().numpy() for a in raw)
    cls_prob = np.concatenate([np.zeros((len(scores), 1), np.float32), scores], axis=1)
    attr_prob = np.concatenate([np.zeros((len(attrs), 1), np.float32), attrs], axis=1)
    blobs = {"rois": np.concatenate([np.zeros((len(rois), 1), np.float32), rois], axis=1), "cls_prob": cls_prob,
             "attr_prob": attr_prob, "pool5_flat": pool5}
    net = types.SimpleNamespace(blobs={k: types.SimpleNamespace(data=v) for k, v in blobs.items()})
    namespace = {"np": np, "base64": base64, "cfg": ref["cfg"], "MIN_BOXES": min_boxes, "MAX_BOXES": max_boxes,
                 "im_detect": lambda net, im: (cls_prob, None, attr_prob, None),
                 "_get_blobs": lambda im, rois: (None, np.array([scale], np.float32)),
                 "nms": lambda dets, thresh: ref["py_cpu_nms"](dets, thresh) if len(dets) else [],
                 "cv2": types.SimpleNamespace(imread=lambda path: image)}
    exec(code, namespace)
    fn, seen = namespace["get_detections_from_im"], {}

    def local(frame, event, arg):
        if event == "return":
            seen.update(frame.f_locals)
        return local

    def tracer(frame, event, arg):  # their max_conf, read from the function's locals as it returns
        return local if frame.f_code is fn.__code__ else None

    sys.settrace(tracer)
    try:
        out = fn(net, image, "scene", conf_thresh=conf)
    finally:
        sys.settrace(None)
    return out, seen["max_conf"]


def decoded(out, key, dtype, per_box):
    return np.frombuffer(base64.b64decode(out[key]), dtype=dtype).reshape(int(out["num_boxes"]), per_box)


DIFFERENTIAL = {**SMALL, "min_size": 128, "max_size": 200, "post_nms_topk": 300}


@pytest.fixture(scope="module")
def raw_scenes():
    d = build(DIFFERENTIAL)
    prepared = [d.prepare(im) for im in scenes(3, [(120, 160), (150, 110), (128, 128)])]
    return [(x, d.raw_outputs(x)) for x in prepared]


def test_generate_tsv_selection_is_bottom_up_attentions(bottom_up, raw_scenes, capsys):
    """Their function and ours on the same raw outputs: the same boxes, features, max_conf, in the same
    order; at their MIN_BOXES = MAX_BOXES (36) and in the other two branches of their box rule."""
    assert bottom_up["nms"] == 0.3 and bottom_up["constants"] in ({"MIN_BOXES": 36, "MAX_BOXES": 36},
                                                                  {"MIN_BOXES": 10, "MAX_BOXES": 100})
    cases = [(bottom_up["constants"]["MIN_BOXES"], bottom_up["constants"]["MAX_BOXES"], 0.2), (10, 300, 0.2),
             (60, 100, 0.9), (10, 20, 0.2)]
    branches = set()
    for n, (x, raw) in enumerate(raw_scenes):
        image = np.zeros((*x.size, 3), np.uint8)  # their code reads its size only
        for min_boxes, max_boxes, conf in cases:
            theirs, their_conf = run_theirs(bottom_up, bottom_up["code"], raw, x.scale, image, min_boxes, max_boxes,
                                            conf)
            ours, our_conf = generate_tsv_regions(*raw, x.scale, x.size, min_boxes, max_boxes, conf)
            passing = int((our_conf >= conf).sum())
            branches.add("min" if passing < min_boxes else "max" if passing > max_boxes else "in range")
            diffs = {"boxes": np.abs(ours.boxes - decoded(theirs, "boxes", np.float32, 4)).max(),
                     "features": np.abs(ours.features - decoded(theirs, "features", np.float32, 2048)).max(),
                     "max_conf": np.abs(our_conf - their_conf).max()}
            with capsys.disabled():
                print(f"\nscene {n}, MIN {min_boxes} MAX {max_boxes} conf {conf}: {len(raw[0])} proposals, {passing} "
                      f"pass, {len(ours.boxes)} kept; max abs difference {diffs}")
            assert int(theirs["num_boxes"]) == len(ours.boxes)
            assert (theirs["image_h"], theirs["image_w"]) == x.size
            np.testing.assert_array_equal(our_conf, their_conf)
            np.testing.assert_array_equal(ours.boxes, decoded(theirs, "boxes", np.float32, 4))  # and their order
            np.testing.assert_array_equal(ours.features, decoded(theirs, "features", np.float32, 2048))
            if "cls_prob" in theirs:  # jiasenlu's fork writes the kept boxes' class probabilities
                probs = decoded(theirs, "cls_prob", np.float32, raw[1].shape[1] + 1)[:, 1:]
                np.testing.assert_array_equal(ours.class_ids, probs.argmax(axis=1))
    assert branches == {"min", "max", "in range"}, branches


EXTRACTION = "data/mscoco_imgfeat/extract_coco_image.py"


@pytest.fixture(scope="module")
def lxmert_extraction(bottom_up):
    path = checkout("VLBIAS_LXMERT_REFERENCE", "a checkout of airsplay/lxmert (0db1182b; "
                    "data/mscoco_imgfeat/extract_coco_image.py: generate_tsv with the labels)",
                    EXTRACTION) / EXTRACTION
    constants = {k: int(re.search(rf"^{k} = (\d+)", path.read_text(), flags=re.M).group(1))
                 for k in ("MIN_BOXES", "MAX_BOXES")}
    return their_function(path), constants


def test_generate_tsv_labels_are_lxmert_extractions(bottom_up, lxmert_extraction, raw_scenes):
    """LXMERT's extraction (generate_tsv plus objects_id, objects_conf, attrs_id, attrs_conf, the
    columns of val2014_obj36.tsv) and ours on the same raw outputs, at its 36 boxes."""
    code, constants = lxmert_extraction
    assert constants == {"MIN_BOXES": 36, "MAX_BOXES": 36}
    for x, raw in raw_scenes:
        theirs, their_conf = run_theirs(bottom_up, code, raw, x.scale, np.zeros((*x.size, 3), np.uint8), 36, 36, 0.2)
        ours, our_conf = generate_tsv_regions(*raw, x.scale, x.size, 36, 36, 0.2)
        assert (theirs["img_h"], theirs["img_w"]) == x.size and len(ours.boxes) == 36
        np.testing.assert_array_equal(our_conf, their_conf)
        np.testing.assert_array_equal(ours.boxes, decoded(theirs, "boxes", np.float32, 4))
        np.testing.assert_array_equal(ours.features, decoded(theirs, "features", np.float32, 2048))
        for got, key, dtype in ((ours.class_ids, "objects_id", np.int64), (ours.class_scores, "objects_conf", np.float32),
                                (ours.attr_ids, "attrs_id", np.int64), (ours.attr_scores, "attrs_conf", np.float32)):
            np.testing.assert_array_equal(got, decoded(theirs, key, dtype, 1)[:, 0])
