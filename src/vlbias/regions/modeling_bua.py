"""The bottom-up-attention Faster R-CNN network (ResNet-101 C4, Visual Genome), ported on torchvision
ops in the PyTorch conversion that LXMERT's Hugging Face demo runs (hub ``unc-nlp/frcnn-vg-finetuned``,
transformers' examples/research_projects/lxmert/modeling_frcnn.py): module and parameter names as the
checkpoint's (detectron2's), so its ``pytorch_model.bin`` loads with ``strict=True`` (``load``). What
it is fed and which of its boxes are kept is the detector adapter's (vlbias.regions.bua).

The caffe ResNet-101 (stride in the 1x1 convs, frozen batch norm, ceil-mode max pool) to res4; the
RPN's head (12 anchors per position: sizes 64-512, ratios 0.5-2) and one of two proposal layers
(``proposals``, below) giving ``post_nms_topk`` proposals; each proposal is RoI-pooled (max pooling,
14x14, scale 1/16) and run through res5 (stride 1, dilation 2) and a mean pool: its 2048-d feature.
The box predictor gives 1601 class logits (background last), a regressed box per class (weights 10,
10, 5, 5) and, from the feature and the embedding of the argmax class, 401 attribute logits
(background last). Written here because torchvision's differ: the caffe ResNet (torchvision strides
in the 3x3 conv), the anchors (torchvision rounds them) and the proposal selection (torchvision
filters per level).

Proposal layers (``RPN(proposals=...)``):

``demo``, the conversion's (detectron2's RPN, as the demo runs it): anchors centred on the cell's
corner (offset 0), unrounded; the 6000 best by objectness LOGIT (torch's sort); decoded with
torchvision's BoxCoder (widths x2 - x1, dw and dh clamped at log(1000/16)); clipped to [0, W] x
[0, H]; boxes with an empty side dropped AFTER the cut; torchvision's NMS at 0.7 (areas without +1).

``caffe``, the layer the released features were extracted with: bottom-up-attention's Python layer
lib/rpn/proposal_layer.py (peteanderson80/bottom-up-attention; jiasenlu's fork has the same) in the
test configuration the authors ran (models/vg/ResNet-101/faster_rcnn_end2end_final/test.prototxt's
param_str ``feat_stride 16, scales (4, 8, 16, 32)``; lib/fast_rcnn/config.py's TEST values, which
experiments/cfgs/faster_rcnn_end2end_resnet.yml leaves alone: RPN_PRE_NMS_TOP_N 6000,
RPN_POST_NMS_TOP_N 300, RPN_NMS_THRESH 0.7, RPN_MIN_SIZE 16; USE_GPU_NMS False), in numpy float32
as theirs (``caffe_proposals``). It differs from ``demo`` in:

- anchors: generate_anchors (base 16, ratios 0.5, 1, 2 with the widths ROUNDED, times the scales),
  centred at (7.5, 7.5) in the +1 convention, i.e. at the cell's centre (8, 8) for the box transform:
  the demo's sit half a cell (8 resized pixels) up and left, and are not rounded (90.5 x 45.3 where
  caffe has 92 x 48). Each channel keeps its (size, ratio): the checkpoint's channels follow the
  demo's anchor order (per size, per ratio), caffe's was per ratio, per scale;
- the score: the foreground probability (caffe's two-way softmax = sigmoid of the converted logit),
  in float32, where near-certain anchors tie at 1.0; sorted by numpy's ``argsort()[::-1]`` (ties in
  its order), and again inside the NMS (cpu_nms sorts its input once more);
- the box transform (bbox_transform_inv): widths x2 - x1 + 1, centre x1 + 0.5 w, decoded x1 = cx -
  0.5 w', x2 = cx + 0.5 w' (no -1 back), and NO clamp of dw, dh;
- clipping to [0, W - 1] x [0, H - 1] (the demo's: [0, W] x [0, H]);
- _filter_boxes: boxes with a side (x2 - x1 + 1) below RPN_MIN_SIZE x im_scale (16 pixels of the
  original image) dropped BEFORE the top-6000 cut (the demo drops only empty boxes, after it);
- NMS (lib/nms/cpu_nms.pyx): "+1" areas, float32 overlaps, a box suppressing the later ones with
  ovr >= 0.7 (``caffe_nms``, which generate_tsv's per-class NMS shares).

One image at a time (im_info: the blob's height, width and im_scale), as caffe ran it. Equal in both:
the RoI max pooling (torchvision's roi_pool is caffe's ROIPooling: ends rounded, bins floor/ceil),
the pixel means, BGR input; the resize is the adapter's (vlbias.regions.bua).
"""

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import clip_boxes_to_image, nms, roi_pool

from vlbias.errors import InputError
from vlbias.io.checkpoints import some
from vlbias.regions.resnet import ConvNorm, stage
from vlbias.regions.resnet import random_init_ as random_init_resnet

# The demo's config.yaml (unc-nlp/frcnn-vg-finetuned), test-time values
ANCHOR_SIZES, ANCHOR_RATIOS, ANCHOR_OFFSET = (64, 128, 256, 512), (0.5, 1.0, 2.0), 0.0
FEATURE_STRIDE = 16  # res4
RPN_HIDDEN = 512
RPN_PRE_NMS_TOPK, RPN_NMS = 6000, 0.7
POOLER_RESOLUTION = 14
ROI_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
FEATURE_DIM = 2048
# detectron2's clamp of dw, dh: no box grows more than from 16 to 1000 pixels
SCALE_CLAMP = math.log(1000.0 / 16)
# the proposal layers (module docstring)
PROPOSALS = ("caffe", "demo")
# caffe's: generate_anchors' base window and its scales (test.prototxt's param_str), cfg.TEST.RPN_MIN_SIZE
CAFFE_ANCHOR_BASE, CAFFE_ANCHOR_SCALES, RPN_MIN_SIZE = 16, (4, 8, 16, 32), 16
RPN_POST_NMS_TOPK = 300  # cfg.TEST.RPN_POST_NMS_TOP_N, also the demo's


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ConvNorm(3, 64, 7, stride=2, padding=3)

    def forward(self, x):
        # caffe's max pool: no padding, ceil mode (the config's MAX_POOL: true)
        return F.max_pool2d(F.relu_(self.conv1(x)), kernel_size=3, stride=2, padding=0, ceil_mode=True)


class ResNet101C4(nn.Module):
    """Stem and res2-res4 of ResNet-101: (N, 3, H, W) -> res4 (N, 1024, ~H/16, ~W/16)."""

    def __init__(self):
        super().__init__()
        self.stem = Stem()
        self.res2 = stage(3, 64, 64, 256, 1)
        self.res3 = stage(4, 256, 128, 512, 2)
        self.res4 = stage(23, 512, 256, 1024, 2)

    def forward(self, x):
        return self.res4(self.res3(self.res2(self.stem(x))))


class AnchorGenerator(nn.Module):
    """detectron2's anchors: per size, per ratio, centred at 0, unrounded (torchvision rounds them)."""

    def __init__(self):
        super().__init__()
        cell = []
        for size in ANCHOR_SIZES:
            for ratio in ANCHOR_RATIOS:
                w = math.sqrt(size**2.0 / ratio)
                h = ratio * w
                cell.append([-w / 2.0, -h / 2.0, w / 2.0, h / 2.0])
        # a parameter as in the checkpoint ("cell_anchors.0"), never trained
        self.cell_anchors = nn.ParameterList([nn.Parameter(torch.tensor(cell), requires_grad=False)])

    def forward(self, height, width):
        """Anchors of a (height, width) feature map, (height * width * A, 4), position-major."""
        cell = self.cell_anchors[0]
        offset = ANCHOR_OFFSET * FEATURE_STRIDE
        xs = torch.arange(width, dtype=torch.float32, device=cell.device) * FEATURE_STRIDE + offset
        ys = torch.arange(height, dtype=torch.float32, device=cell.device) * FEATURE_STRIDE + offset
        y, x = torch.meshgrid(ys, xs, indexing="ij")
        shifts = torch.stack((x.reshape(-1), y.reshape(-1), x.reshape(-1), y.reshape(-1)), dim=1)
        return (shifts[:, None, :] + cell[None, :, :]).reshape(-1, 4)


class RPNHead(nn.Module):
    def __init__(self, num_anchors):
        super().__init__()
        self.conv = nn.Conv2d(1024, RPN_HIDDEN, 3, padding=1)
        self.objectness_logits = nn.Conv2d(RPN_HIDDEN, num_anchors, 1)
        self.anchor_deltas = nn.Conv2d(RPN_HIDDEN, num_anchors * 4, 1)

    def forward(self, x):
        t = F.relu(self.conv(x))
        return self.objectness_logits(t), self.anchor_deltas(t)


class RPN(nn.Module):
    def __init__(self, post_nms_topk, proposals="demo"):
        super().__init__()
        if proposals not in PROPOSALS:
            raise ValueError(f"proposals must be one of {PROPOSALS}, not {proposals!r}")
        self.post_nms_topk, self.proposals = post_nms_topk, proposals
        self.anchor_generator = AnchorGenerator()
        self.rpn_head = RPNHead(len(ANCHOR_SIZES) * len(ANCHOR_RATIOS))
        self.box_coder = BoxCoder((1.0, 1.0, 1.0, 1.0), bbox_xform_clip=SCALE_CLAMP)

    def forward(self, features, image_sizes, scales=None):
        """res4 features of a padded batch -> per image its proposals (<= post_nms_topk, 4), best first.

        ``proposals="caffe"`` takes one image (its features unpadded, as caffe's blob) and its
        ``scales`` (caffe's im_scale, for the minimum size)."""
        n, _, height, width = features.shape
        logits, deltas = self.rpn_head(features)
        if self.proposals == "caffe":
            if n != 1 or scales is None:
                raise ValueError("caffe's proposal layer takes one image and its im_scale")
            (h, w), scale = image_sizes[0], scales[0]
            return [caffe_proposals(torch.sigmoid(logits[0]), deltas[0], (h, w, scale), self.post_nms_topk)]
        anchors = self.anchor_generator(height, width)
        a = logits.shape[1]
        logits = logits.permute(0, 2, 3, 1).reshape(n, -1)  # (N, H*W*A), as the anchors
        deltas = deltas.view(n, a, 4, height, width).permute(0, 3, 4, 1, 2).reshape(n, -1, 4)
        # sort rather than topk: the reference's op, so that tied logits (padding) order alike
        logits, order = logits.sort(descending=True, dim=1)
        k = min(RPN_PRE_NMS_TOPK, logits.shape[1])
        proposals = []
        for i, size in enumerate(image_sizes):
            top = order[i, :k]
            boxes = clip_boxes_to_image(self.box_coder.decode_single(deltas[i, top], anchors[top]), size)
            scores = logits[i, :k]
            w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
            nonempty = (w > 0) & (h > 0)  # the config's MIN_SIZE 0: strictly positive sides
            boxes, scores = boxes[nonempty], scores[nonempty]
            proposals.append(boxes[nms(boxes, scores, RPN_NMS)[: self.post_nms_topk]])
        return proposals


def caffe_cell_anchors():
    """float64 (12, 4): generate_anchors(base_size=16, ratios=[0.5, 1, 2], scales=(4, 8, 16, 32)) of
    bottom-up-attention's lib/rpn/generate_anchors.py, in its order (per ratio, per scale). The base
    window (0, 0, 15, 15): w = h = 16, centre 7.5; per ratio w = round(sqrt(256 / ratio)), h = round(w *
    ratio) (numpy's round: half to even, as Python's); per scale both times the scale; the box centre
    +- (side - 1) / 2."""
    size, centre = CAFFE_ANCHOR_BASE**2, (CAFFE_ANCHOR_BASE - 1) / 2
    cell = []
    for ratio in ANCHOR_RATIOS:
        w = round(math.sqrt(size / ratio))
        h = round(w * ratio)
        for scale in CAFFE_ANCHOR_SCALES:
            half_w, half_h = (w * scale - 1) / 2, (h * scale - 1) / 2
            cell.append([centre - half_w, centre - half_h, centre + half_w, centre + half_h])
    return np.array(cell)


# our RPN head's channel of each caffe anchor: ours go per size, per ratio (the checkpoint's, detectron2's
# order), caffe's per ratio, per scale; the scales 4-32 times 16 are the sizes 64-512
CAFFE_CHANNELS = [s * len(ANCHOR_RATIOS) + r for r in range(len(ANCHOR_RATIOS)) for s in range(len(ANCHOR_SIZES))]


def caffe_decode(anchors, deltas):
    """bbox_transform_inv of py-faster-rcnn (lib/fast_rcnn/bbox_transform.py), float32 numpy as theirs:
    widths x2 - x1 + 1, centres x1 + 0.5 w, no clamp of dw, dh; x2 = cx + 0.5 w' (no -1)."""
    anchors = anchors.astype(deltas.dtype, copy=False)
    widths = anchors[:, 2] - anchors[:, 0] + 1.0
    heights = anchors[:, 3] - anchors[:, 1] + 1.0
    ctr_x = anchors[:, 0] + 0.5 * widths
    ctr_y = anchors[:, 1] + 0.5 * heights
    pred_ctr_x = deltas[:, 0] * widths + ctr_x
    pred_ctr_y = deltas[:, 1] * heights + ctr_y
    pred_w = np.exp(deltas[:, 2]) * widths
    pred_h = np.exp(deltas[:, 3]) * heights
    return np.stack([pred_ctr_x - 0.5 * pred_w, pred_ctr_y - 0.5 * pred_h, pred_ctr_x + 0.5 * pred_w,
                     pred_ctr_y + 0.5 * pred_h], axis=1)


def caffe_proposals(probs, deltas, im_info, post_nms_topk=RPN_POST_NMS_TOPK, pre_nms_topk=RPN_PRE_NMS_TOPK,
                    nms_thresh=RPN_NMS, min_size=RPN_MIN_SIZE):
    """bottom-up-attention's ProposalLayer.forward (lib/rpn/proposal_layer.py, TEST) on one image.

    ``probs`` (A, H, W) foreground probabilities and ``deltas`` (4 A, H, W) of our RPN head (channels
    per size, per ratio), taken to caffe's channel order (``CAFFE_CHANNELS``: the order of the flat
    arrays caffe sorts, hence of its ties); ``im_info`` (height, width, im_scale) of the blob. Returns the float32
    (R, 4) proposals, R <= post_nms_topk, on the inputs' device, in the NMS's order: anchors shifted by
    16 per cell, position-major; decoded (``caffe_decode``); clipped to [0, W-1] x [0, H-1]; boxes with
    a side (+1) below ``min_size`` x im_scale dropped; the ``pre_nms_topk`` best by numpy's argsort of
    the float32 probabilities, reversed; ``caffe_nms`` at ``nms_thresh``; the first ``post_nms_topk``.
    """
    device = deltas.device
    a, height, width = probs.shape
    probs = probs.detach().float().cpu().numpy()[CAFFE_CHANNELS].transpose(1, 2, 0).reshape(-1)  # (H*W*A,)
    deltas = deltas.detach().float().cpu().numpy().reshape(a, 4, height, width)[CAFFE_CHANNELS]
    deltas = deltas.transpose(2, 3, 0, 1).reshape(-1, 4)  # rows (h, w, a), as the anchors
    info = np.asarray(im_info, dtype=np.float32)  # caffe's im_info blob
    shift_x, shift_y = np.meshgrid(np.arange(width) * FEATURE_STRIDE, np.arange(height) * FEATURE_STRIDE)
    shifts = np.stack([shift_x.ravel(), shift_y.ravel(), shift_x.ravel(), shift_y.ravel()], axis=1)
    anchors = (caffe_cell_anchors()[None] + shifts[:, None]).reshape(-1, 4)
    boxes = caffe_decode(anchors, deltas)
    boxes[:, 0::2] = np.maximum(np.minimum(boxes[:, 0::2], info[1] - 1), 0)
    boxes[:, 1::2] = np.maximum(np.minimum(boxes[:, 1::2], info[0] - 1), 0)
    # _filter_boxes, before the cut: sides counted with their last pixel, at least min_size original pixels
    ws, hs = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    keep = np.where((ws >= min_size * info[2]) & (hs >= min_size * info[2]))[0]
    boxes, probs = boxes[keep], probs[keep]
    order = probs.argsort()[::-1][:pre_nms_topk]
    boxes, probs = torch.from_numpy(boxes[order]), torch.from_numpy(probs[order].copy())
    kept, nms_order = caffe_nms(boxes, probs[:, None], nms_thresh, limit=post_nms_topk)
    survivors = nms_order[0][kept[0][nms_order[0]]][:post_nms_topk]
    return boxes[survivors].to(device)


def proposal_overlaps(boxes, others=None):
    """(R, S) float32 IoU of ``boxes`` (R, 4) float32 with ``others`` (S, 4; default ``boxes``) with
    py-faster-rcnn's "+1" pixel areas, in the arithmetic of its NMS (lib/nms/cpu_nms.pyx, py_cpu_nms.py:
    float32 throughout, inter / (area_i + area_j - inter)); symmetric, as float addition commutes."""
    others = boxes if others is None else others
    x1, y1, x2, y2 = boxes.unbind(1)
    u1, v1, u2, v2 = others.unbind(1)
    areas, other_areas = (x2 - x1 + 1) * (y2 - y1 + 1), (u2 - u1 + 1) * (v2 - v1 + 1)
    w = (torch.minimum(x2[:, None], u2[None]) - torch.maximum(x1[:, None], u1[None]) + 1).clamp(min=0)
    h = (torch.minimum(y2[:, None], v2[None]) - torch.maximum(y1[:, None], v1[None]) + 1).clamp(min=0)
    inter = w * h
    return inter / (areas[:, None] + other_areas[None] - inter)


def caffe_nms(boxes, scores, threshold, limit=None, chunk=256):
    """py-faster-rcnn's cpu_nms (lib/nms/cpu_nms.pyx) on each column of ``scores``: (kept (C, R) bool,
    order (C, R) long), the boxes each column's NMS keeps and the order it visits them in.

    ``boxes`` float32 (R, 4), ``scores`` float32 (R, C). Per column, greedy NMS in the order of numpy's
    ``argsort()[::-1]`` of its scores (ties as theirs), a box suppressing every later one it overlaps by
    ``ovr >= threshold``, ovr in float32 (``proposal_overlaps``) compared in double. All columns at once:
    each step takes every column's next box in its order; the overlaps of the boxes ``chunk`` steps
    visit are computed as they come. With ``limit``, it stops once every column has kept so many
    (the first ``limit`` kept are then final: greedy NMS never revisits a kept box).
    """
    num, columns = scores.shape
    order = np.stack([np.argsort(column)[::-1] for column in scores.cpu().numpy().T])  # (C, R)
    kept, gone = np.zeros((columns, num), bool), np.zeros((columns, num), bool)
    counts, index, row = np.zeros(columns, np.int64), np.arange(columns), np.zeros(num, np.int64)
    for start in range(0, num, chunk):
        ranks = order[:, start:start + chunk]
        needed = np.unique(ranks)
        row[needed] = np.arange(len(needed))
        suppresses = (proposal_overlaps(boxes[torch.from_numpy(needed).to(boxes.device)], boxes).double()
                      >= threshold).cpu().numpy()
        for box in ranks.T:  # numpy, step by step: torch's per-op overhead dominates at this size
            alive = ~gone[index, box]
            kept[index, box] = alive
            gone |= suppresses[row[box]] & alive[:, None]
            counts += alive
        if limit is not None and counts.min() >= limit:
            break
    return torch.from_numpy(kept).to(scores.device), torch.from_numpy(order.copy()).to(scores.device)


class BoxPredictor(nn.Module):
    """Class logits (background last), class-specific box deltas and the attribute head."""

    def __init__(self, num_classes, num_attributes):
        super().__init__()
        self.cls_score = nn.Linear(FEATURE_DIM, num_classes + 1)
        self.bbox_pred = nn.Linear(FEATURE_DIM, num_classes * 4)
        self.cls_embedding = nn.Embedding(num_classes + 1, FEATURE_DIM // 8)
        self.fc_attr = nn.Linear(FEATURE_DIM + FEATURE_DIM // 8, FEATURE_DIM // 4)
        self.attr_score = nn.Linear(FEATURE_DIM // 4, num_attributes + 1)

    def forward(self, features):
        logits = self.cls_score(features)
        deltas = self.bbox_pred(features)
        # the attribute head sees the argmax class, background included
        hidden = torch.cat([features, self.cls_embedding(logits.argmax(-1))], -1)
        attr_logits = self.attr_score(F.relu(self.fc_attr(hidden)))
        return logits, deltas, attr_logits


class Res5Head(nn.Module):
    """RoI max pooling on res4, res5 (stride 1, dilation 2: the VG model's), mean pool -> 2048-d."""

    def __init__(self, num_classes, num_attributes):
        super().__init__()
        self.res5 = stage(3, 1024, 512, 2048, 1, dilation=2)
        self.box_predictor = BoxPredictor(num_classes, num_attributes)

    def forward(self, features, proposals):
        pooled = roi_pool(features, proposals, POOLER_RESOLUTION, 1.0 / FEATURE_STRIDE)
        return self.res5(pooled).mean(dim=(2, 3))


class BottomUpRCNN(nn.Module):
    def __init__(self, num_classes, num_attributes, post_nms_topk, proposals="demo"):
        super().__init__()
        self.backbone = ResNet101C4()
        self.proposal_generator = RPN(post_nms_topk, proposals)
        self.roi_heads = Res5Head(num_classes, num_attributes)


def random_init_(model, seed):
    """Seeded random weights that keep activations finite and class scores spread, for tests
    (vlbias.regions.resnet.random_init_: He-normal layers, zero biases, residual branches ending in a
    norm of weight 0.2); class logits spread over a few units (no ties among 1601 near-equal scores);
    small box deltas."""
    random_init_resnet(model, torch.Generator().manual_seed(seed), bias_std=0)
    with torch.no_grad():
        model.backbone.stem.conv1.weight.div_(64.0)  # pixels are in [-128, 152], not unit scale
        model.roi_heads.box_predictor.bbox_pred.weight.mul_(0.05)
        model.proposal_generator.rpn_head.anchor_deltas.weight.mul_(0.05)


def load(model, state, path):
    """Load the checkpoint's state_dict with strict names and shapes.

    The checkpoint (saved from torch BatchNorm2d) has ``num_batches_tracked`` entries, which
    FrozenBatchNorm2d drops when loading; any other missing or unexpected name is an error.
    """
    expected = model.state_dict()
    wrong = [f"{k} {tuple(v.shape)} (expected {tuple(expected[k].shape)})" for k, v in state.items()
             if k in expected and v.shape != expected[k].shape]
    if wrong:
        raise InputError(path, f"shapes do not fit the bua model: {some(wrong)}")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        missing = sorted(set(expected) - set(state))
        unexpected = sorted(k for k in set(state) - set(expected) if not k.endswith("num_batches_tracked"))
        raise InputError(path, f"does not fit the bua model: missing {some(missing)}, unexpected "
                               f"{some(unexpected)}") from e
    anchors = AnchorGenerator().cell_anchors[0]
    if not torch.allclose(model.proposal_generator.anchor_generator.cell_anchors[0], anchors, atol=1e-3):
        raise InputError(path, "its anchors (proposal_generator.anchor_generator.cell_anchors.0) are not "
                               "the config's sizes 64-512, ratios 0.5-2")
