"""The bottom-up-attention detector (vlbias.regions.bua) on random weights, and against its reference.

The differential test needs the reference implementation (transformers'
examples/research_projects/lxmert/{modeling_frcnn,processing_image,utils}.py and the hub's
config.yaml of unc-nlp/frcnn-vg-finetuned) in the directory named by VLBIAS_FRCNN_REFERENCE.
"""

import hashlib
import importlib
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from PIL import Image

from vlbias.errors import InputError
from vlbias.regions import build
from vlbias.regions.bua import PIXEL_MEAN_BGR, resized_size
from vlbias.weights import prepare

# small images and few proposals keep the random-weight ResNet-101 fast on two cores
SMALL = {"adapter": "bua", "weights": "random", "seed": 0, "device": "cpu", "min_size": 64, "max_size": 100,
         "post_nms_topk": 12, "min_boxes": 2, "max_boxes": 5, "conf": 0.2}


def noise_images(seed, shapes):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in shapes]


@pytest.fixture(scope="module")
def detector():
    return build(SMALL)


@pytest.fixture(scope="module")
def images():
    return noise_images(0, [(64, 80), (90, 60)])


@pytest.fixture(scope="module")
def regions(detector, images):
    return detector.detect([detector.prepare(im) for im in images])


def test_prepare_resizes_and_normalises_like_the_reference(detector):
    assert resized_size(480, 640, 600, 1000) == (600, 800)
    assert resized_size(300, 1200, 600, 1000) == (250, 1000)  # the longer side is capped
    assert resized_size(90, 60, 64, 100) == (96, 64)
    x = detector.prepare(Image.new("RGB", (80, 64), (200, 100, 50)))
    assert x.image.shape == (3, 64, 80) and x.image.dtype == torch.float32 and x.size == (64, 80)
    # BGR order, minus caffe's BGR mean, no scaling
    expected = torch.tensor([50.0, 100.0, 200.0]) - torch.tensor(PIXEL_MEAN_BGR)
    assert torch.allclose(x.image[:, 10, 10], expected, atol=1e-4)
    with pytest.raises(InputError, match="image of 300x2 pixels: too elongated"):
        detector.prepare(Image.new("RGB", (300, 2)))


def test_regions_have_the_shared_layout(detector, images, regions):
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
        assert (np.diff(r.class_scores) <= 0).all(), "best box first"
        assert r.image_size == (im.height, im.width)
        x1, y1, x2, y2 = r.boxes.T
        assert (0 <= x1).all() and (x1 <= x2).all() and (x2 <= im.width).all()
        assert (0 <= y1).all() and (y1 <= y2).all() and (y2 <= im.height).all()
    assert detector.feature_dim == 2048 and len(detector.class_names) == 1600
    assert len(detector.attribute_names) == 400 and detector.weights == "random"


def test_box_rule_is_keep_boxes_on_the_nms_survivors(detector, images, monkeypatch):
    x = [detector.prepare(images[0])]

    def run(min_boxes, max_boxes, conf):
        monkeypatch.setattr(detector, "min_boxes", min_boxes)
        monkeypatch.setattr(detector, "max_boxes", max_boxes)
        monkeypatch.setattr(detector, "conf", conf)
        return detector.detect(x)[0]

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


def write_vocab(tmp_path, prefix, n, extra=()):
    names = list(extra) + [f"{prefix}{i}" for i in range(n - len(extra))]
    path = tmp_path / f"{prefix}_vocab.txt"
    path.write_text("\n".join(names))  # the upstream files end without a newline
    return str(path)


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
    where = os.environ.get("VLBIAS_FRCNN_REFERENCE")
    if not where:
        pytest.skip("set VLBIAS_FRCNN_REFERENCE to a directory with transformers' lxmert example "
                    "(modeling_frcnn.py, processing_image.py, utils.py) and the hub's config.yaml")
    where = Path(where)
    if not (where / "modeling_frcnn.py").is_file() or not (where / "config.yaml").is_file():
        pytest.skip(f"{where} lacks modeling_frcnn.py or config.yaml")
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
    ours = build({**SMALL, "min_size": min_size, "max_size": max_size, "post_nms_topk": 300,
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
