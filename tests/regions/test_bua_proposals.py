"""The bua detector's caffe proposal layer (vlbias.regions.modeling_bua ``caffe_proposals``), the one the
released bottom-up-attention features were extracted with: each difference from the demo's RPN on a
hand-checked case, and the differential test against the authors' layer.

The reference: lib/rpn/proposal_layer.py of a bottom-up-attention checkout (VLBIAS_BOTTOM_UP_REFERENCE),
its ProposalLayer driven as caffe would (a stand-in ``caffe.Layer``; the param_str of
models/vg/ResNet-101/faster_rcnn_end2end_final/test.prototxt; lib/fast_rcnn/config.py's cfg with
experiments/cfgs/faster_rcnn_end2end_resnet.yml over it, phase TEST), with its own generate_anchors,
bbox_transform_inv and clip_boxes. Its NMS wrapper dispatches to cpu_nms.pyx (USE_GPU_NMS: False),
a Cython module built for numpy < 1.24; the stand-in is their lib/nms/py_cpu_nms.py, which keeps
``ovr <= float32(0.7)`` where cpu_nms suppresses ``ovr >= 0.7`` in double: no float32 overlap lies
between the two, so at the RPN's 0.7 they keep the same boxes in the same order.
"""

import sys
import types

import numpy as np
import pytest
import torch
from torch import nn

from helpers import plain_module
from helpers.bottom_up import checkout, config, module

from vlbias.regions.modeling_bua import (CAFFE_CHANNELS, RPN, SCALE_CLAMP, AnchorGenerator, caffe_cell_anchors,
                                         caffe_decode, caffe_nms, caffe_proposals, proposal_overlaps)

A = 12  # anchors per position


# ---------------------------------------------------------------------------------------------
# Each difference from the demo's RPN, hand-checked
# ---------------------------------------------------------------------------------------------

def test_anchors_are_generate_anchors():
    anchors = caffe_cell_anchors()
    # generate_anchors.py's header lists them for its default scales (8, 16, 32), per ratio (0.5, 1, 2), as
    # MATLAB's 1-based implementation gave them: one more than numpy's
    listed = np.array([[-83, -39, 100, 56], [-175, -87, 192, 104], [-359, -183, 376, 200],
              [-55, -55, 72, 72], [-119, -119, 136, 136], [-247, -247, 264, 264],
              [-35, -79, 52, 96], [-79, -167, 96, 184], [-167, -343, 184, 360]])
    np.testing.assert_array_equal(anchors[[1, 2, 3, 5, 6, 7, 9, 10, 11]], listed - 1)
    # scale 4, by hand: ratio 0.5 is 23 x 12 (round(sqrt(512)), round(11.5) half to even) times 4 = 92 x 48,
    # ratio 1 is 64 x 64, ratio 2 is 11 x 22 times 4 = 44 x 88; each centred at 7.5, +- (side - 1) / 2
    np.testing.assert_array_equal(anchors[[0, 4, 8]], [[-38, -16, 53, 31], [-24, -24, 39, 39], [-14, -36, 29, 51]])


def test_each_channel_keeps_its_size_and_ratio():
    # our channel c (the checkpoint's: per size 64-512, per ratio) is caffe's anchor CAFFE_CHANNELS.index(c)
    ours = AnchorGenerator().cell_anchors[0].double().numpy()
    theirs = caffe_cell_anchors()[[CAFFE_CHANNELS.index(c) for c in range(A)]]
    w, h = ours[:, 2] - ours[:, 0], ours[:, 3] - ours[:, 1]
    tw, th = theirs[:, 2] - theirs[:, 0] + 1, theirs[:, 3] - theirs[:, 1] + 1
    np.testing.assert_allclose(tw, w, rtol=0.07)  # the widths caffe rounds: 92 x 48 for 90.5 x 45.3
    np.testing.assert_allclose(th, h, rtol=0.07)
    # and the centres: the cell's centre (8, 8) in the box transform, the demo's its corner (0, 0)
    np.testing.assert_array_equal(theirs[:, 0] + 0.5 * tw, 8)
    np.testing.assert_array_equal((ours[:, 0] + ours[:, 2]) / 2, 0)


def test_box_transform_counts_the_last_pixel_and_does_not_clamp():
    anchor = np.array([[0, 0, 15, 15]] * 3, np.float64)  # 16 pixels wide with the last one, centre 8
    deltas = np.array([[0, 0, 0, 0], [0.5, -0.25, 0, 0], [0, 0, 6, -6]], np.float32)
    boxes = caffe_decode(anchor, deltas)
    assert boxes.dtype == np.float32
    np.testing.assert_array_equal(boxes[0], [0, 0, 16, 16])  # x2 = cx + w / 2, no -1 back
    np.testing.assert_array_equal(boxes[1], [8, -4, 24, 12])  # centre (16, 4)
    # dw = 6 grows the width by e^6 (detectron2 would stop at e^4.135, 1000 / 16)
    assert 6 > SCALE_CLAMP
    np.testing.assert_allclose(boxes[2, 2] - boxes[2, 0], 16 * np.exp(6), rtol=1e-6)
    np.testing.assert_allclose(boxes[2, 3] - boxes[2, 1], 16 * np.exp(-6), rtol=1e-5)


def maps(height, width, cells):
    """Probabilities (A, H, W) at 0 and deltas at 0 but for ``cells``: {(channel, y, x): (p, deltas)},
    channels ours (per size, per ratio)."""
    probs, deltas = torch.zeros((A, height, width)), torch.zeros((A, 4, height, width))
    for (c, y, x), (p, d) in cells.items():
        probs[c, y, x] = p
        deltas[c, :, y, x] = torch.tensor(d)
    return probs, deltas.reshape(4 * A, height, width)


# our channel 3: size 128, ratio 0.5; caffe's anchor 1, [-84, -40, 99, 55] (184 x 96) at cell (0, 0)
WIDE = 3


def test_proposals_are_clipped_to_the_last_pixel():
    # the one scored anchor at cell (1, 2), shifted by (32, 16): [-52, -24, 131, 71], decoded [-52, -24, 132, 72]
    # (x2 = cx + w / 2), clipped to the 100 x 60 image
    probs, deltas = maps(4, 7, {(WIDE, 1, 2): (0.9, [0, 0, 0, 0])})
    got = caffe_proposals(probs, deltas, (60, 100, 1.0))
    np.testing.assert_array_equal(got[0].numpy(), [0, 0, 99, 59])


def test_small_boxes_go_before_the_best_are_cut():
    # at im_scale 2, a box needs 32 pixels a side (its last pixel counted); the best anchor shrinks to
    # 184 e^-2.5 x 96 e^-2.5 (15 x 8) and is dropped before the one best (pre_nms_topk 1) is taken
    big = [0, 0, 0, 0]
    probs, deltas = maps(8, 8, {(WIDE, 4, 4): (0.9, [0, 0, -2.5, -2.5]), (WIDE, 2, 2): (0.8, big)})
    got = caffe_proposals(probs, deltas, (128, 128, 2.0), pre_nms_topk=1)
    # cell (2, 2): the anchor [-52, -8, 131, 87], decoded [-52, -8, 132, 88], clipped to the 128 x 128 image
    np.testing.assert_array_equal(got.numpy(), [[0, 0, 127, 88]])
    # the size rule counts the last pixel and keeps a side of exactly 16 x im_scale: 64 x 64 at cell (4, 4) is
    # [40, 40, 104, 104] once decoded (x2 = cx + w / 2), 65 pixels with the last; at im_scale 65/16 it stays
    probs, deltas = maps(8, 8, {(1, 4, 4): (0.9, big)})  # our channel 1 (size 64, ratio 1): caffe's anchor 4
    assert CAFFE_CHANNELS[4] == 1  # [-24, -24, 39, 39], at cell (4, 4) [40, 40, 103, 103]
    kept = caffe_proposals(probs, deltas, (128, 128, 65 / 16))
    np.testing.assert_array_equal(kept[0].numpy(), [40, 40, 104, 104])
    just_over = float(np.nextafter(np.float32(65 / 16), np.float32(5)))
    assert not any((box == torch.tensor([40.0, 40, 104, 104])).all() for box in caffe_proposals(
        probs, deltas, (128, 128, just_over)))


def test_nms_counts_the_last_pixel_and_suppresses_at_the_threshold():
    # 4 x 4 and 3 x 4 pixels sharing 3 x 4: IoU 12 / 16 = 0.75 with the last pixel (without it, 6 / 9 = 0.67)
    boxes = torch.tensor([[0, 0, 3, 3], [1, 0, 3, 3]], dtype=torch.float32)
    assert proposal_overlaps(boxes)[0, 1] == 0.75
    kept, _ = caffe_nms(boxes, torch.tensor([[0.9], [0.8]]), 0.7)
    assert kept[0].tolist() == [True, False]
    kept, _ = caffe_nms(boxes, torch.tensor([[0.9], [0.8]]), 0.75)  # ovr >= thresh suppresses (cpu_nms)
    assert kept[0].tolist() == [True, False]


def test_scores_are_probabilities_sorted_by_numpy_twice():
    """Logits 30, 25 and 20 are all probability 1.0 in float32: caffe's sort ties them (numpy's
    argsort, reversed), and cpu_nms sorts its input once more; the demo's RPN orders them by logit."""

    class Head(nn.Module):
        def __init__(self, logits, deltas):
            super().__init__()
            self.out = (logits, deltas)

        def forward(self, x):
            return self.out

    rpn = RPN(10, "caffe")
    logits = torch.full((1, A, 4, 4), -30.0)
    # our channel 1 (size 64, ratio 1; caffe's anchor 4, [-24, -24, 39, 39]) at cells 0 (0, 0), 3 (0, 3), 12 (3, 0)
    logits[0, 1, 0, 0], logits[0, 1, 3, 0], logits[0, 1, 0, 3] = 30, 25, 20
    rpn.rpn_head = Head(logits, torch.zeros((1, 4 * A, 4, 4)))
    got = rpn(torch.zeros((1, 1024, 4, 4)), [(64, 64)], [1.0])[0]
    assert (torch.sigmoid(logits[0, 1]) == 1).sum() == 3
    # flat positions (h, w, caffe's anchor): cell * 12 + 4; decoded (x2 = cx + 32) and clipped to the 64 x 64 image
    boxes = {0: [0, 0, 40, 40], 3: [24, 0, 63, 40], 12: [0, 24, 40, 63]}
    probs = np.full(16 * A, torch.sigmoid(torch.tensor(-30.0)).item(), np.float32)
    probs[[4, 40, 148]] = 1
    first = np.argsort(probs)[::-1][:6000]
    second = first[np.argsort(probs[first])[::-1]] // A
    first //= A
    np.testing.assert_array_equal(got[:3].numpy(), [boxes[c] for c in second[:3]])
    # here numpy's order is neither the logits' (cells 0, 12, 3) nor the first sort's alone nor the cells'
    assert second[:3].tolist() not in ([0, 12, 3], first[:3].tolist(), [0, 3, 12]), (first[:3], second[:3])


def test_the_rpn_takes_one_image_and_its_scale():
    rpn = RPN(10, "caffe")
    with pytest.raises(ValueError, match="one image and its im_scale"):
        rpn(torch.zeros((1, 1024, 2, 2)), [(32, 32)])
    with pytest.raises(ValueError, match="proposals must be one of"):
        RPN(10, "detectron")


# ---------------------------------------------------------------------------------------------
# Differential test against bottom-up-attention's ProposalLayer
# ---------------------------------------------------------------------------------------------

PROTOTXT = "models/vg/ResNet-101/faster_rcnn_end2end_final/test.prototxt"


class Blob:
    def __init__(self, data=None):
        self.data = data

    def reshape(self, *shape):
        self.data = np.zeros(shape, np.float32)


@pytest.fixture(scope="module")
def proposal_layer():
    files = ("lib/rpn/proposal_layer.py", "lib/rpn/generate_anchors.py", "lib/fast_rcnn/bbox_transform.py",
             "lib/nms/py_cpu_nms.py", "lib/fast_rcnn/config.py", "experiments/cfgs/faster_rcnn_end2end_resnet.yml",
             PROTOTXT)
    where = checkout(*files)
    import re

    import yaml

    their = config(where)
    ran = yaml.safe_load((where / "experiments/cfgs/faster_rcnn_end2end_resnet.yml").read_text())
    for key, value in ran.get("TEST", {}).items():
        their.cfg.TEST[key] = value
    their.cfg.USE_GPU_NMS = ran.get("USE_GPU_NMS", their.cfg.USE_GPU_NMS)
    py_cpu_nms = plain_module("bottom_up_py_cpu_nms", where / "lib/nms/py_cpu_nms.py").py_cpu_nms
    nms_wrapper = types.ModuleType("fast_rcnn.nms_wrapper")
    nms_wrapper.nms = lambda dets, thresh: py_cpu_nms(dets, thresh) if len(dets) else []
    caffe = types.ModuleType("caffe")
    caffe.Layer = type("Layer", (), {})
    stand_ins = {"caffe": caffe, "fast_rcnn": types.ModuleType("fast_rcnn"), "fast_rcnn.config": their,
                 "fast_rcnn.nms_wrapper": nms_wrapper,
                 "fast_rcnn.bbox_transform": plain_module("bottom_up_bbox_transform",
                                                          where / "lib/fast_rcnn/bbox_transform.py"),
                 "generate_anchors": module("generate_anchors", where / "lib/rpn/generate_anchors.py", xrange=range)}
    saved = {name: sys.modules.get(name) for name in stand_ins}
    sys.modules.update(stand_ins)
    try:
        layer_module = module("bottom_up_proposal_layer", where / "lib/rpn/proposal_layer.py")
    finally:
        for name, was in saved.items():
            if was is None:
                sys.modules.pop(name)
            else:
                sys.modules[name] = was
    # PyYAML 6 wants a Loader; their param_str has a !!python/tuple
    layer_module.yaml = types.SimpleNamespace(load=lambda text: yaml.load(text, Loader=yaml.FullLoader))
    prototxt = (where / PROTOTXT).read_text()
    param_str = re.search(r"module: 'rpn\.proposal_layer'.*?param_str: \"(.*?)\"", prototxt, flags=re.S).group(1)
    layer = layer_module.ProposalLayer()
    layer.param_str, layer.phase = param_str.replace("\\n", "\n"), 1  # caffe.TEST
    layer.setup([], [Blob()])
    return layer, their.cfg


# theirs per ratio (0.5, 1, 2), per scale (4, 8, 16, 32); ours per size (64, 128, 256, 512), per ratio
OURS_OF_THEIRS = [size * 3 + ratio for ratio in range(3) for size in range(4)]


def run_theirs(layer, probs, deltas, im_info):
    """Their layer on our channels: the scores blob (1, 2A, H, W), background probabilities first."""
    p = probs.numpy()[OURS_OF_THEIRS]
    d = deltas.numpy().reshape(A, 4, *p.shape[1:])[OURS_OF_THEIRS].reshape(4 * A, *p.shape[1:])
    bottom = [Blob(np.concatenate([1 - p, p])[None]), Blob(d[None].copy()), Blob(np.array([im_info], np.float32))]
    top = [Blob()]
    layer.forward(bottom, top)
    assert (top[0].data[:, 0] == 0).all()
    return top[0].data[:, 1:]


def rpn_outputs(seed, height, width):
    """Seeded RPN outputs where every rule matters: probabilities on a coarse grid (ties) with some
    saturated at 1.0; deltas with dw, dh past detectron2's clamp (boxes clipped to the whole image,
    identical, or, centred left of the image, ending inside it where the clamp would end them before
    it), very negative ones (boxes the size rule drops), and shifts off the image (clipped)."""
    rng = np.random.default_rng(seed)
    probs = np.round(rng.uniform(0, 1, (A, height, width)), 2)
    probs[rng.random(probs.shape) < 0.05] = 1.0
    deltas = rng.normal(0, 0.3, (A, 4, height, width))
    xy, wh = deltas[:, :2], deltas[:, 2:]  # views
    big, small, far = rng.random(wh.shape) < 0.05, rng.random(wh.shape) < 0.15, rng.random(xy.shape) < 0.05
    wh[big] = rng.uniform(4.5, 6, big.sum())  # past the clamp (4.135): many become the whole image, alike
    wh[small] -= 3
    xy[far] *= 20
    # half of the widest boxes centred left of the image, their right end inside it: cut short by the clamp
    straddle = big[:, 0] & (rng.random(big[:, 0].shape) < 0.5)
    xy[:, 0][straddle] = -0.5 * np.exp(wh[:, 0][straddle]) + rng.uniform(0.05, 0.5, straddle.sum())
    return (torch.from_numpy(probs.astype(np.float32)),
            torch.from_numpy(deltas.astype(np.float32).reshape(4 * A, height, width)))


# (seed, feature map, im_info: the blob's height, width (at most 16 per cell) and im_scale)
CASES = [(0, (24, 40), (379, 631, 1.6)), (1, (38, 50), (600, 800, 0.9375)), (2, (9, 13), (140, 200, 2.5)),
         (3, (63, 38), (1000, 600, 1.2))]


@pytest.mark.parametrize("post_nms_topk", [300, 0])
def test_proposals_are_the_caffe_layers(proposal_layer, post_nms_topk, capsys):
    """Their layer and ours on the same RPN outputs: the same proposals in the same order, exactly;
    at the authors' 300 after NMS, and at every NMS survivor (post_nms_topk 0: no cut in theirs)."""
    layer, cfg = proposal_layer
    assert (cfg.TEST.RPN_PRE_NMS_TOP_N, cfg.TEST.RPN_POST_NMS_TOP_N, cfg.TEST.RPN_NMS_THRESH,
            cfg.TEST.RPN_MIN_SIZE, cfg.USE_GPU_NMS) == (6000, 300, 0.7, 16, False)
    assert layer._feat_stride == 16
    np.testing.assert_array_equal(layer._anchors, caffe_cell_anchors())
    cfg.TEST.RPN_POST_NMS_TOP_N = post_nms_topk
    try:
        for seed, (height, width), im_info in CASES:
            probs, deltas = rpn_outputs(seed, height, width)
            theirs = run_theirs(layer, probs, deltas, im_info)
            ours = caffe_proposals(probs, deltas, im_info, post_nms_topk or 10**9).numpy()
            with capsys.disabled():
                print(f"\nseed {seed}, {height}x{width}x{A} anchors, im_info {im_info}, post_nms_topk {post_nms_topk}: "
                      f"{len(theirs)} / {len(ours)} proposals, max abs difference "
                      f"{np.abs(ours - theirs).max() if ours.shape == theirs.shape else 'n/a'}")
            np.testing.assert_array_equal(ours, theirs)
    finally:
        cfg.TEST.RPN_POST_NMS_TOP_N = 300
