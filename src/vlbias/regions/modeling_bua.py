"""The bottom-up-attention Faster R-CNN network (ResNet-101 C4, Visual Genome), ported on torchvision
ops in the PyTorch conversion that LXMERT's Hugging Face demo runs (hub ``unc-nlp/frcnn-vg-finetuned``,
transformers' examples/research_projects/lxmert/modeling_frcnn.py): module and parameter names as the
checkpoint's (detectron2's), so its ``pytorch_model.bin`` loads with ``strict=True`` (``load``). What
it is fed and which of its boxes are kept is the detector adapter's (vlbias.regions.bua).

The caffe ResNet-101 (stride in the 1x1 convs, frozen batch norm, ceil-mode max pool) to res4; the
RPN (12 anchors per position, sizes 64-512, offset 0) keeps the 6000 best anchors, clips them, drops
empty boxes, and keeps ``post_nms_topk`` after NMS at 0.7; each proposal is RoI-pooled (max pooling,
14x14, scale 1/16) and run through res5 (stride 1, dilation 2) and a mean pool: its 2048-d feature.
The box predictor gives 1601 class logits (background last), a regressed box per class (weights 10,
10, 5, 5) and, from the feature and the embedding of the argmax class, 401 attribute logits
(background last). Written here because torchvision's differ: the caffe ResNet (torchvision strides
in the 3x3 conv), the anchors (torchvision rounds them) and the proposal selection (torchvision
filters per level).
"""

import math

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
    def __init__(self, post_nms_topk):
        super().__init__()
        self.post_nms_topk = post_nms_topk
        self.anchor_generator = AnchorGenerator()
        self.rpn_head = RPNHead(len(ANCHOR_SIZES) * len(ANCHOR_RATIOS))
        self.box_coder = BoxCoder((1.0, 1.0, 1.0, 1.0), bbox_xform_clip=SCALE_CLAMP)

    def forward(self, features, image_sizes):
        """res4 features of a padded batch -> per image its proposals (<= post_nms_topk, 4), best first."""
        n, _, height, width = features.shape
        logits, deltas = self.rpn_head(features)
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
    def __init__(self, num_classes, num_attributes, post_nms_topk):
        super().__init__()
        self.backbone = ResNet101C4()
        self.proposal_generator = RPN(post_nms_topk)
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
