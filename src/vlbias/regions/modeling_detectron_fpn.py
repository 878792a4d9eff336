"""Detectron's COCO Mask R-CNN (ResNet-101 FPN) box branch, the network of VisualBERT's region
features (``e2e_mask_rcnn_R-101-FPN_2x``, model 35861858), ported on torchvision components
(FrozenBatchNorm2d, FeaturePyramidNetwork with LastLevelMaxPool, RPNHead, TwoMLPHead) with Detectron's
parameters: ``detectron_state_dict`` maps its Caffe2 blobs (model_final.pkl) onto the modules, every
blob used or known to be unused. Detectron's test-time arithmetic (anchors, proposals, RoI levels)
and the extraction's box rule are the detector adapter's (vlbias.regions.detectron_fpn).

The MSRA ResNet-101 (stride in the 1x1 convolutions, frozen affine batch norm, max pool 3/2 with
padding 1) feeds the FPN (256 channels, lateral 1x1 + nearest 2x top-down, 3x3 outputs, P6 = P5
subsampled); the RPN head has 3 anchors per position; fc6 and fc7 (1024, ReLU) give a RoI's feature,
``cls_score`` its 81 class logits (background first).
"""

import re

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torchvision.models.detection.faster_rcnn import TwoMLPHead
from torchvision.models.detection.rpn import RPNHead
from torchvision.ops import FeaturePyramidNetwork, FrozenBatchNorm2d
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool

from vlbias.errors import InputError
from vlbias.io.checkpoints import some
from vlbias.regions.resnet import ConvNorm, stage
from vlbias.regions.resnet import random_init_ as random_init_resnet

FPN_DIM = 256
RPN_LEVELS = (2, 3, 4, 5, 6)
ASPECT_RATIOS = (0.5, 1.0, 2.0)
POOLER_RESOLUTION = 7
MLP_DIM = 1024
# ResNet-101 stages: (name, blocks, bottleneck width, output width, stride of the first block)
STAGES = (("res2", 3, 64, 256, 1), ("res3", 4, 128, 512, 2), ("res4", 23, 256, 1024, 2), ("res5", 3, 512, 2048, 2))
# blobs of model_final.pkl this detector does not use: optimiser state, box regression (the
# extraction keeps the proposals), the mask head
UNUSED_BLOBS = re.compile(r".*_momentum|bbox_pred_[wb]|_\[mask\]_fcn\d+_[wb]|conv5_mask_[wb]|mask_fcn_logits_[wb]")


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ConvNorm(3, 64, 7, stride=2, padding=3)

    def forward(self, x):
        return F.max_pool2d(F.relu_(self.conv1(x)), kernel_size=3, stride=2, padding=1)


class ResNet101(nn.Module):
    """MSRA ResNet-101 body: (N, 3, H, W) -> {res2: stride 4, ..., res5: stride 32}."""

    def __init__(self):
        super().__init__()
        self.stem = Stem()
        width = 64
        for name, blocks, bottleneck, out, stride in STAGES:
            self.add_module(name, stage(blocks, width, bottleneck, out, stride))
            width = out

    def forward(self, x):
        x = self.stem(x)
        out = {}
        for name, *_ in STAGES:
            x = out[name] = getattr(self, name)(x)
        return out


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = ResNet101()
        self.fpn = FeaturePyramidNetwork([w for *_, w, _ in STAGES], FPN_DIM, extra_blocks=LastLevelMaxPool())

    def forward(self, x):
        """{2: P2, ..., 6: P6}."""
        return dict(zip(RPN_LEVELS, self.fpn(self.body(x)).values()))


class RoIHeads(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.box_head = TwoMLPHead(FPN_DIM * POOLER_RESOLUTION**2, MLP_DIM)  # fc6, fc7, each with ReLU
        self.cls_score = nn.Linear(MLP_DIM, num_classes + 1)


class DetectronFPN(nn.Module):
    def __init__(self, num_classes=80):
        super().__init__()
        self.backbone = Backbone()
        self.rpn = nn.Module()
        self.rpn.head = RPNHead(FPN_DIM, len(ASPECT_RATIOS))
        self.roi_heads = RoIHeads(num_classes)
        for m in self.modules():
            if isinstance(m, FrozenBatchNorm2d):
                m.eps = 0.0  # Caffe2's AffineChannel: y = x * scale + bias exactly


def _c2_name(name):
    """The Detectron (Caffe2) blob of one of our parameters, or None for a BatchNorm statistic
    (AffineChannel has none: mean 0, variance 1)."""
    if name.endswith(("running_mean", "running_var")):
        return None
    suffix = {"weight": "w", "bias": "b"}[name.rsplit(".", 1)[1]]
    norm = {"w": "s", "b": "b"}[suffix]
    if m := re.fullmatch(r"backbone\.body\.stem\.conv1\.(norm\.)?\w+", name):
        return f"res_conv1_bn_{norm}" if m.group(1) else f"conv1_{suffix}"
    if m := re.fullmatch(r"backbone\.body\.(res\d)\.(\d+)\.(conv\d|shortcut)\.(norm\.)?\w+", name):
        branch = "branch1" if m.group(3) == "shortcut" else "branch2" + "abc"[int(m.group(3)[-1]) - 1]
        return f"{m.group(1)}_{m.group(2)}_{branch}" + (f"_bn_{norm}" if m.group(4) else f"_{suffix}")
    blobs = [f"res{k}_{blocks - 1}_sum" for k, (_, blocks, *_) in zip(range(2, 6), STAGES)]
    if m := re.fullmatch(r"backbone\.fpn\.(inner|layer)_blocks\.(\d)\.0\.\w+", name):
        j = int(m.group(2))
        if m.group(1) == "layer":
            return f"fpn_{blobs[j]}_{suffix}"
        return f"fpn_inner_{blobs[j]}_{suffix}" if j == 3 else f"fpn_inner_{blobs[j]}_lateral_{suffix}"
    rpn = {"conv.0.0": "conv_rpn_fpn2", "cls_logits": "rpn_cls_logits_fpn2", "bbox_pred": "rpn_bbox_pred_fpn2"}
    if m := re.fullmatch(r"rpn\.head\.(conv\.0\.0|cls_logits|bbox_pred)\.\w+", name):
        return f"{rpn[m.group(1)]}_{suffix}"
    if m := re.fullmatch(r"roi_heads\.(?:box_head\.)?(fc6|fc7|cls_score)\.\w+", name):
        return f"{m.group(1)}_{suffix}"
    raise KeyError(name)


def detectron_state_dict(blobs, model, source):
    """Our state_dict from Detectron's blobs ({name: numpy array}); every parameter must be filled
    with the right shape, and every blob used or known to be unused (UNUSED_BLOBS)."""
    state, used, wrong, missing = {}, set(), [], []
    for name, value in model.state_dict().items():
        blob = _c2_name(name)
        if blob is None:
            state[name] = torch.zeros_like(value) if name.endswith("running_mean") else torch.ones_like(value)
        elif blob not in blobs:
            missing.append(blob)
        elif tuple(np.shape(blobs[blob])) != tuple(value.shape):
            wrong.append(f"{blob} {tuple(np.shape(blobs[blob]))} (expected {tuple(value.shape)})")
        else:
            state[name] = torch.as_tensor(np.asarray(blobs[blob], dtype=np.float32))
            used.add(blob)
    unexpected = sorted(b for b in set(blobs) - used if not UNUSED_BLOBS.fullmatch(b))
    if missing or wrong or unexpected:
        raise InputError(source, f"not Detectron's R-101-FPN weights: missing {some(sorted(missing))}, "
                                 f"wrong shapes {some(wrong)}, unexpected {some(unexpected)}")
    return state


def random_init_(model, seed):
    """Seeded random weights with finite activations and spread scores, for tests
    (vlbias.regions.resnet.random_init_: He-normal layers, biases 0.1 normal, residual branches ending
    in a norm of weight 0.2); objectness and class logits a few units apart (saturated sigmoids would
    tie, and ties have no defined order)."""
    random_init_resnet(model, torch.Generator().manual_seed(seed), bias_std=0.1)
    with torch.no_grad():
        model.backbone.body.stem.conv1.weight.div_(64.0)  # pixels are in [-123, 153], not unit scale
        model.rpn.head.bbox_pred.weight.mul_(0.05)
        model.rpn.head.cls_logits.weight.mul_(0.05)
        model.roi_heads.cls_score.weight.mul_(0.15)
