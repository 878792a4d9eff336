"""Bottom-up-attention Faster R-CNN (ResNet-101 C4, Visual Genome) on torchvision ops: LXMERT's detector.

The detector of Anderson et al. (1600 Visual Genome objects, 400 attributes) whose 2048-d region
features LXMERT, ViLBERT and VL-BERT were trained on, in the PyTorch conversion that LXMERT's
Hugging Face demo runs (hub ``unc-nlp/frcnn-vg-finetuned``, code in transformers'
examples/research_projects/lxmert/{modeling_frcnn,processing_image}.py, "the reference" below).
Parameter names equal the checkpoint's, so its ``pytorch_model.bin`` loads with ``strict=True``
(its BatchNorm2d ``num_batches_tracked`` entries are dropped by FrozenBatchNorm2d, which in eval
equals BatchNorm2d up to float rounding). From torchvision: FrozenBatchNorm2d, roi_pool, nms,
clip_boxes_to_image and the detection BoxCoder (detectron2's box transform, same arithmetic).
Written here because torchvision's differ: the caffe ResNet (torchvision strides in the 3x3 conv),
the anchors (torchvision rounds them) and the proposal selection (torchvision filters per level).

Config entry keys:
    weights, exactly one of:
      model_id + revision   the Hugging Face hub repo (unc-nlp/frcnn-vg-finetuned) and the revision
                            of its pytorch_model.bin (fetched and verified by vlbias.weights)
      checkpoint: <file>    a local state_dict: .safetensors, or a torch file read with weights_only=True
      weights: random       seeded random weights (``seed``, default 0), for tests and timing
    objects_vocab, attributes_vocab   the class / attribute names, one per line (1600 / 400 lines, as
                  py-bottom-up-attention's demo/data/genome/1600-400-20/*_vocab.txt): a local file or an
                  http(s) URL pinned to a commit, fetched by vlbias.weights into ``<cache>/bua/``; a line's first
                  comma-separated synonym is the name. Optional with random weights (generated names).
    num_classes, num_attributes   classes / attributes without background (default 1600 / 400)
    min_size, max_size   the resize: shorter side to min_size unless the longer would exceed max_size
                  (default 800, 1333: the demo's config.yaml)
    post_nms_topk  proposals kept by the RPN (default 300, the demo's; fewer only to make tests fast)
    selection     which regions are kept (below): ``generate_tsv`` (default; the features every 2019-2021
                  model was trained and published with) or ``demo`` (transformers' LXMERT demo)
    min_boxes, max_boxes, conf   the box rule: generate_tsv's MIN_BOXES, MAX_BOXES, conf_thresh;
                  with ``demo``, vlbias.regions.keep_boxes
    device, threads, batch_size  see vlbias.models.runtime

Test-time behaviour, as the reference with the demo config: the image (BGR, minus the caffe pixel
mean, bilinear resize) runs through the caffe ResNet-101 (stride in the 1x1 convs, frozen batch
norm, ceil-mode max pool) to res4; the RPN (12 anchors per position, sizes 64-512, offset 0) keeps
the 6000 best anchors, clips them, drops empty boxes, and keeps 300 after NMS at 0.7; each proposal
is RoI-pooled (max pooling, 14x14, scale 1/16) and run through res5 (stride 1, dilation 2) and a mean
pool: its 2048-d feature. The box predictor gives 1601 class logits (background last), a regressed
box per class (weights 10, 10, 5, 5) and, from the feature and the embedding of the argmax class,
401 attribute logits (background last).

``selection: generate_tsv`` keeps the regions as bottom-up-attention's tools/generate_tsv.py
(``get_detections_from_im``: jiasenlu's fork, lines 310-335, the extraction Ross et al. ran for
ViLBERT and VL-BERT; peteanderson80's, lines 69-95; LXMERT's extract_coco_image.py, which adds the
labels) kept them from the caffe network's raw outputs: the image resized as caffe's blob (one
factor, vlbias.regions.blob), alone in its forward pass; the boxes are the UNREGRESSED proposals
("don't worry about the regression bbox outputs") divided by that factor; each proposal's
``max_conf`` is its best class score among the classes whose own NMS (IoU with "+1" areas, at
cfg.TEST.NMS = 0.3) it survives; the proposals with max_conf >= conf are kept in proposal order,
unless fewer than min_boxes or more than max_boxes, then the best so many by max_conf, best first
(numpy's argsort reversed, ties included); a box's class and attribute are the argmax of its
probabilities (background out), their scores those maxima (``generate_tsv_regions``). The store
keeps that order, which the models read. LXMERT's COCO features and the Google features LXMERT and
ViLBERT read in Ross et al. used min_boxes = max_boxes = 36 (generate_tsv.py:54-55).

``selection: demo`` (transformers' LXMERT demo): every proposal takes its best non-background class
and that class's regressed box (clipped); one class-agnostic NMS runs at IoU 0.5, then 0.6, then 0.7 until at least
``min_boxes`` boxes survive (the reference's MIN_DETECTIONS loop; it has no box fewer than that
and fails, we keep what survives); ``keep_boxes`` then picks the survivors by that best score. For
LXMERT's fixed 36 (min_boxes = max_boxes = 36) this is exactly the reference's choice (its
``keep[:36]`` of the score-sorted NMS output). With the adaptive rule (10-100 boxes at conf 0.2)
the reference, which has no score threshold, would keep up to 100; ``keep_boxes`` also drops
boxes below ``conf`` (but keeps ``min_boxes``). Attributes: the best of the 400 non-background
attribute probabilities. Features stay those of the proposals, as in bottom-up-attention. Boxes are
scaled back to original-image pixels and clipped to the image.

Differences from the reference (the demo), on purpose: images are fed in BGR order whatever their
source (the reference's ``img_tensorize`` does so for URLs but passes local files as RGB,
transformers issue #19601); the reference fails when fewer than MIN_DETECTIONS boxes survive NMS, we
keep them. Differences from the caffe network that generate_tsv ran, in the network itself (the
demo's conversion): its RPN drops no proposal below caffe's RPN_MIN_SIZE (16 pixels at the resized
scale) and clips proposals to the resized image's edge, caffe's one pixel inside it.

The demo's config (resize 800/1333) is the default; LXMERT's own features came from the caffe
original at 600/1000, which ``min_size: 600, max_size: 1000`` gives.
"""

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import FrozenBatchNorm2d, clip_boxes_to_image, nms, roi_pool

from vlbias.errors import InputError
from vlbias.io.fetch import sha256_file
from vlbias.io.checkpoints import read_state_dict, some
from vlbias.models import runtime
from vlbias.regions import Regions, box_rule, keep_boxes, register
from vlbias.regions.blob import image_blob
from vlbias.registry import one_weights_source
from vlbias.weights import as_written, fetched

log = logging.getLogger(__name__)

# The demo's config.yaml (unc-nlp/frcnn-vg-finetuned), test-time values
PIXEL_MEAN_BGR = (102.9801, 115.9465, 122.7717)  # caffe's; PIXEL_STD is 1
MIN_SIZE, MAX_SIZE = 800, 1333
ANCHOR_SIZES, ANCHOR_RATIOS, ANCHOR_OFFSET = (64, 128, 256, 512), (0.5, 1.0, 2.0), 0.0
FEATURE_STRIDE = 16  # res4
RPN_HIDDEN = 512
RPN_PRE_NMS_TOPK, RPN_POST_NMS_TOPK, RPN_NMS = 6000, 300, 0.7
POOLER_RESOLUTION = 14
ROI_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)
NMS_THRESHOLDS = (0.5, 0.6, 0.7)
# the region selections (module docstring): bottom-up-attention's tools/generate_tsv.py, the demo's
SELECTIONS = ("generate_tsv", "demo")
TSV_NMS = 0.3  # generate_tsv's per-class NMS: cfg.TEST.NMS (lib/fast_rcnn/config.py:155; its yml keeps it)
FEATURE_DIM = 2048
# detectron2's clamp of dw, dh: no box grows more than from 16 to 1000 pixels
SCALE_CLAMP = math.log(1000.0 / 16)
_ROI_BOX_CODER = BoxCoder(ROI_BOX_WEIGHTS, bbox_xform_clip=SCALE_CLAMP)

VOCAB_BASE = ("https://raw.githubusercontent.com/airsplay/py-bottom-up-attention/"
              "85ec9b77bb57c125d6d604305bb525d9f50692be/demo/data/genome/1600-400-20/")

# The Visual Genome object names (first synonyms of objects_vocab.txt; every one is in it) whose
# boxes show people: by sex, age or number, by role (sports, riding, driving, police, cooking,
# crowds). Left out: ambiguous names ("pitcher" is mostly a jug, "fan" a ceiling fan), body parts,
# clothing, and pictures of people (statue, poster).
PERSON_CLASSES = frozenset({
    "person", "people", "man", "men", "young man", "woman", "women", "lady", "ladies", "guy", "adult",
    "boy", "boys", "girl", "girls", "little girl", "child", "children", "kid", "kids", "baby", "toddler",
    "mother", "bride", "groom", "couple", "family", "crowd", "audience", "spectator", "spectators", "fans",
    "passenger", "passengers", "pedestrian", "player", "players", "baseball player", "baseball players",
    "tennis player", "soccer player", "batter", "catcher", "umpire", "referee", "skier", "skiers", "skiier",
    "surfer", "surfers", "skateboarder", "snowboarder", "rider", "biker", "cyclist", "motorcyclist",
    "jockey", "driver", "pilot", "officer", "police officer", "policeman", "police", "chef", "worker",
})


# ---------------------------------------------------------------------------------------------
# Model: module and parameter names as the checkpoint's (detectron2's)
# ---------------------------------------------------------------------------------------------

class ConvNorm(nn.Conv2d):
    """Bias-free convolution followed by frozen batch norm (``<name>.weight``, ``<name>.norm.*``)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, bias=False)
        self.norm = FrozenBatchNorm2d(out_channels)

    def forward(self, x):
        return self.norm(super().forward(x))


class Bottleneck(nn.Module):
    """Caffe (MSRA) bottleneck: the stride is in the first 1x1 convolution."""

    def __init__(self, in_channels, bottleneck_channels, out_channels, stride=1, dilation=1):
        super().__init__()
        self.shortcut = ConvNorm(in_channels, out_channels, 1, stride) if in_channels != out_channels else None
        self.conv1 = ConvNorm(in_channels, bottleneck_channels, 1, stride)
        self.conv2 = ConvNorm(bottleneck_channels, bottleneck_channels, 3, 1, dilation, dilation)
        self.conv3 = ConvNorm(bottleneck_channels, out_channels, 1)

    def forward(self, x):
        out = F.relu_(self.conv1(x))
        out = F.relu_(self.conv2(out))
        out = self.conv3(out)
        out += x if self.shortcut is None else self.shortcut(x)
        return F.relu_(out)


def stage(blocks, in_channels, bottleneck_channels, out_channels, stride, dilation=1):
    return nn.Sequential(*(Bottleneck(in_channels if i == 0 else out_channels, bottleneck_channels, out_channels,
                                      stride if i == 0 else 1, dilation) for i in range(blocks)))


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
    def __init__(self, post_nms_topk=RPN_POST_NMS_TOPK):
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
    def __init__(self, num_classes=1600, num_attributes=400, post_nms_topk=RPN_POST_NMS_TOPK):
        super().__init__()
        self.backbone = ResNet101C4()
        self.proposal_generator = RPN(post_nms_topk)
        self.roi_heads = Res5Head(num_classes, num_attributes)


def random_init_(model, seed):
    """Seeded random weights that keep activations finite and class scores spread, for tests.

    He-normal layers; each residual branch ends in a norm of weight 0.2 so 33 blocks do not blow
    up; class logits spread over a few units (no ties among 1601 near-equal scores); small box deltas.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, FrozenBatchNorm2d):
                module.weight.fill_(0.2 if name.endswith("conv3.norm") else 1.0)
                module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
                module.running_mean.zero_()
                module.running_var.fill_(1.0)
        model.backbone.stem.conv1.weight.div_(64.0)  # pixels are in [-128, 152], not unit scale
        model.roi_heads.box_predictor.bbox_pred.weight.mul_(0.05)
        model.proposal_generator.rpn_head.anchor_deltas.weight.mul_(0.05)


# ---------------------------------------------------------------------------------------------
# Detector
# ---------------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """One image as the model takes it: BGR, mean-subtracted, resized; with its original size."""

    image: torch.Tensor   # float32 (3, h, w)
    size: tuple           # (height, width) of the original image
    scale: float = None   # generate_tsv: caffe's im_scale (resized / original); the demo maps each side back


def resized_size(height, width, min_size, max_size):
    """The reference's ResizeShortestEdge: shorter side to min_size, longer at most max_size, rounded."""
    scale = min_size / min(height, width)
    new_h, new_w = (min_size, scale * width) if height < width else (scale * height, min_size)
    if max(new_h, new_w) > max_size:
        scale = max_size / max(new_h, new_w)
        new_h, new_w = new_h * scale, new_w * scale
    return int(new_h + 0.5), int(new_w + 0.5)


@register("bua")
class BottomUpAttention:
    def __init__(self, spec):
        one_weights_source(spec, "bua detector", "model_id", "with `revision`")
        model_id, checkpoint, weights = spec.get("model_id"), spec.get("checkpoint"), spec.get("weights")
        self.device, _ = runtime(spec)
        self.min_boxes, self.max_boxes, self.conf = box_rule(spec)
        self.selection = spec.get("selection", "generate_tsv")
        if self.selection not in SELECTIONS:
            raise InputError(f"selection '{self.selection}'", f"must be one of {', '.join(SELECTIONS)}")
        self.min_size, self.max_size = int(spec.get("min_size", MIN_SIZE)), int(spec.get("max_size", MAX_SIZE))
        num_classes, num_attributes = int(spec.get("num_classes", 1600)), int(spec.get("num_attributes", 400))
        post_nms_topk = int(spec.get("post_nms_topk", RPN_POST_NMS_TOPK))
        generated = weights == "random"  # random weights may go with generated names
        self.class_names, objects_sha = _vocab(spec, "objects_vocab", num_classes, generated, "object")
        self.attribute_names, attributes_sha = _vocab(spec, "attributes_vocab", num_attributes, generated,
                                                      "attribute")

        state, revision, commit, seed = None, spec.get("revision"), None, None
        if got := fetched(spec, "model_id"):  # fetched ahead (vlbias.weights): model_id is its snapshot now
            path, model_id, commit = Path(model_id) / "pytorch_model.bin", got["request"], got["commit"]
            state = read_state_dict(path)
        elif model_id is not None:
            raise InputError(model_id, "hub weights load only fetched and verified: build the spec that "
                                       "vlbias.weights.prepare returns")
        elif checkpoint is not None:
            path = Path(checkpoint)
            if not path.is_file():
                raise InputError(checkpoint, "checkpoint file not found")
            state = read_state_dict(path)  # before building the model: a refused file fails fast
        model = BottomUpRCNN(num_classes, num_attributes, post_nms_topk)
        if state is None:
            seed = int(spec.get("seed", 0))
            random_init_(model, seed)
            self.weights = "random"
        else:
            _load(model, state, path)
            self.weights = sha256_file(path)
        self.model = model.eval().requires_grad_(False).to(self.device)

        self.name = "bua"
        self.feature_dim = FEATURE_DIM
        self.person_classes = frozenset(PERSON_CLASSES & set(self.class_names))
        self.settings = {
            "adapter": "bua", "model_id": model_id, "revision": revision, "commit": commit, "checkpoint": checkpoint,
            "weights": self.weights, "seed": seed, "num_classes": num_classes, "num_attributes": num_attributes,
            "objects_vocab": as_written(spec, "objects_vocab"), "objects_vocab_sha256": objects_sha,
            "attributes_vocab": as_written(spec, "attributes_vocab"), "attributes_vocab_sha256": attributes_sha,
            "min_size": self.min_size, "max_size": self.max_size,
            "rpn": {"pre_nms_topk": RPN_PRE_NMS_TOPK, "post_nms_topk": post_nms_topk, "nms": RPN_NMS},
            "pooler": f"RoIPool {POOLER_RESOLUTION}x{POOLER_RESOLUTION}",
            "min_boxes": self.min_boxes, "max_boxes": self.max_boxes, "conf": self.conf,
            "selection": self.selection, **SELECTION_SETTINGS[self.selection],
            "device": str(self.device), "torch": torch.__version__, "torchvision": torchvision.__version__,
        }
        log.info("bua: %s weights, %d classes, %d attributes, on %s", self.weights, num_classes, num_attributes,
                 self.device)

    def prepare(self, rgb):
        """PIL RGB image -> Prepared: generate_tsv, caffe's blob (BGR - mean, resized by one factor as
        cv2.resize; vlbias.regions.blob); demo, the reference's Preprocess (float bilinear resize to the
        rounded sizes, BGR - mean)."""
        scale = None
        if self.selection == "generate_tsv":
            image, scale = image_blob(rgb, PIXEL_MEAN_BGR, self.min_size, self.max_size)
            size = tuple(image.shape[-2:])
        else:
            size = resized_size(rgb.height, rgb.width, self.min_size, self.max_size)
        if min(size) < FEATURE_STRIDE:  # less than one res4 cell: the network cannot run on it
            raise InputError(f"image of {rgb.width}x{rgb.height} pixels", f"too elongated for the detector "
                                                                          f"(resized to {size[1]}x{size[0]})")
        if scale is None:
            pixels = np.asarray(rgb.convert("RGB"))[:, :, ::-1]  # BGR, as the caffe model was trained
            image = torch.from_numpy(pixels.copy()).permute(2, 0, 1).float()
            image = F.interpolate(image[None], size, mode="bilinear", align_corners=False)[0]
            image -= torch.tensor(PIXEL_MEAN_BGR).view(3, 1, 1)
        return Prepared(image, (rgb.height, rgb.width), scale)

    @torch.inference_mode()
    def detect(self, inputs):
        """list[Prepared] -> list[Regions], boxes in original-image pixels: generate_tsv's selection,
        in its order (each image alone through the network, as caffe ran it), or the demo's, best first."""
        if self.selection == "generate_tsv":
            return [self._generate_tsv(x) for x in inputs]
        if not inputs:
            return []
        sizes = [tuple(x.image.shape[-2:]) for x in inputs]
        # zero padding to the largest image, bottom and right (the reference's Preprocess.pad)
        batch = torch.zeros((len(inputs), 3, max(h for h, _ in sizes), max(w for _, w in sizes)),
                            device=self.device)
        for i, x in enumerate(inputs):
            batch[i, :, : sizes[i][0], : sizes[i][1]] = x.image.to(self.device)
        m = self.model
        features = m.backbone(batch)
        proposals = m.proposal_generator(features, sizes)
        pooled = m.roi_heads(features, proposals)
        logits, deltas, attr_logits = m.roi_heads.box_predictor(pooled)
        assert pooled.shape == (sum(map(len, proposals)), FEATURE_DIM), pooled.shape

        out = []
        counts = [len(p) for p in proposals]
        per_image = zip(proposals, pooled.split(counts), logits.split(counts), deltas.split(counts),
                        attr_logits.split(counts), sizes, inputs)
        for props, feats, logit, delta, attr_logit, size, x in per_image:
            survivors, boxes, best, label = self._candidates(props, logit, delta, size)
            keep = torch.from_numpy(keep_boxes(best.cpu().numpy(), self.min_boxes, self.max_boxes, self.conf))
            keep = keep.to(best.device)
            picked = survivors[keep]
            # the best of the non-background attributes (background is the last logit)
            attr_prob, attr = attr_logit[picked, :-1].softmax(-1).max(-1)
            # back to original pixels as the reference (x * w0 / w, y * h0 / h), clipped against rounding
            ratio = torch.tensor(x.size, dtype=torch.float32) / torch.tensor(size, dtype=torch.float32)
            boxes = boxes[keep] * ratio.flip(0).repeat(2).to(boxes.device)
            boxes = clip_boxes_to_image(boxes, x.size)
            out.append(Regions(
                boxes=boxes.float().cpu().numpy(),
                features=feats[picked].float().cpu().numpy(),
                class_ids=label[keep].cpu().numpy().astype(np.int64),
                class_scores=best[keep].float().cpu().numpy(),
                image_size=tuple(x.size),
                attr_ids=attr.cpu().numpy().astype(np.int64),
                attr_scores=attr_prob.float().cpu().numpy(),
            ))
        return out

    def raw_outputs(self, x):
        """One Prepared image alone through the network: (proposals (R, 4) in its resized pixels, class
        probabilities (R, C), attribute probabilities (R, A), pooled features (R, 2048)), the
        probabilities a softmax over all classes (attributes) with the background column left out
        (caffe's first, our network's last: the class and attribute ids count without it)."""
        m = self.model
        features = m.backbone(x.image[None].to(self.device))
        rois = m.proposal_generator(features, [tuple(x.image.shape[-2:])])[0]
        pool5 = m.roi_heads(features, [rois])
        logits, _, attr_logits = m.roi_heads.box_predictor(pool5)  # the regressed boxes are not used
        return rois, logits.softmax(-1)[:, :-1], attr_logits.softmax(-1)[:, :-1], pool5

    def _generate_tsv(self, x):
        """One image's Regions as generate_tsv.py keeps them, the boxes clipped to the image (our
        proposals reach the resized image's edge, caffe's stop a pixel inside: divided by the scale,
        ours can pass the image's edge by up to half a resized pixel)."""
        regions, _ = generate_tsv_regions(*self.raw_outputs(x), x.scale, x.size, self.min_boxes, self.max_boxes,
                                          self.conf)
        regions.boxes = clip_boxes_to_image(torch.from_numpy(regions.boxes), x.size).numpy()
        return regions

    def _candidates(self, proposals, logits, deltas, size):
        """NMS survivors among one image's proposals, best first: (proposal index, box, score, class).

        Each proposal takes its best non-background class and that class's regressed, clipped box;
        class-agnostic NMS at 0.5, 0.6, 0.7 until ``min_boxes`` survive (the reference's loop).
        """
        num_classes = logits.shape[1] - 1
        probs = logits.softmax(-1)[:, :-1]
        boxes = _ROI_BOX_CODER.decode_single(deltas, proposals)  # (R, num_classes * 4)
        boxes = clip_boxes_to_image(boxes.view(-1, num_classes, 4), size)
        best, label = probs.max(1)
        boxes = boxes[torch.arange(len(boxes), device=boxes.device), label]
        for threshold in NMS_THRESHOLDS:
            survivors = nms(boxes, best, threshold)
            if len(survivors) >= self.min_boxes:
                break
        return survivors, boxes[survivors], best[survivors], label[survivors]


# ---------------------------------------------------------------------------------------------
# generate_tsv's selection (bottom-up-attention tools/generate_tsv.py get_detections_from_im)
# ---------------------------------------------------------------------------------------------

SELECTION_SETTINGS = {
    "generate_tsv": {"resize": "caffe's blob: one factor, cv2.resize (vlbias.regions.blob); one image a pass",
                     "nms": TSV_NMS, "selection_rule": "unregressed proposals; max_conf = best class score "
                     "among the classes whose NMS (cfg.TEST.NMS) the proposal survives; max_conf >= conf, "
                     "else the best min_boxes, at most the best max_boxes (generate_tsv's order); labels the "
                     "argmax of the class (attribute) probabilities (LXMERT's extract_coco_image.py)"},
    "demo": {"resize": "the demo's Preprocess", "nms_thresholds": list(NMS_THRESHOLDS),
             "selection_rule": "best non-background class per proposal, class-agnostic NMS (0.5/0.6/0.7 until "
                               "min_boxes survive), keep_boxes; features of the proposals"},
}


def proposal_overlaps(boxes):
    """(R, R) float32 IoU of ``boxes`` (R, 4) float32 with py-faster-rcnn's "+1" pixel areas, in the
    arithmetic of its NMS (lib/nms/cpu_nms.pyx, py_cpu_nms.py: float32 throughout,
    inter / (area_i + area_j - inter)); symmetric, as float addition commutes."""
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    w = (torch.minimum(x2[:, None], x2[None]) - torch.maximum(x1[:, None], x1[None]) + 1).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2[None]) - torch.maximum(y1[:, None], y1[None]) + 1).clamp(min=0)
    inter = w * h
    return inter / (areas[:, None] + areas[None] - inter)


def max_conf(boxes, scores, threshold=TSV_NMS):
    """float64 (R,): generate_tsv's ``max_conf`` of each proposal, the highest of its class scores
    among the classes whose NMS it survives, 0 if none.

    ``boxes`` float32 (R, 4) in the image's pixels, ``scores`` float32 (R, C) class probabilities
    without background. Per class, greedy NMS in the order of numpy's ``argsort()[::-1]`` of its
    scores (ties as theirs), a box suppressing every later one it overlaps by ``ovr >= threshold``
    compared in double (cpu_nms.pyx, the NMS of the config they ran, USE_GPU_NMS: False). All classes
    at once: each step takes every class's next box in its order.
    """
    num, classes = scores.shape
    device = scores.device
    suppresses = proposal_overlaps(boxes).double() >= threshold
    probs = scores.cpu().numpy()
    order = torch.from_numpy(np.stack([np.argsort(probs[:, c])[::-1] for c in range(classes)])).to(device)
    kept = torch.zeros((classes, num), dtype=torch.bool, device=device)
    gone = torch.zeros((classes, num), dtype=torch.bool, device=device)
    rows = torch.arange(classes, device=device)
    for rank in range(num):
        box = order[:, rank]
        alive = ~gone[rows, box]
        kept[rows, box] |= alive
        gone |= suppresses[box] & alive[:, None]
    return torch.where(kept.T, scores, 0).amax(dim=1).double().cpu().numpy() if num else np.zeros(0)


def tsv_keep(conf_scores, min_boxes, max_boxes, conf):
    """generate_tsv's ``keep_boxes``: the proposals with max_conf >= ``conf`` in proposal order; if
    fewer than ``min_boxes`` or more than ``max_boxes``, the best so many by numpy's
    ``argsort()[::-1]`` of max_conf (its order, ties included)."""
    keep = np.where(conf_scores >= conf)[0]
    if len(keep) < min_boxes:
        return np.argsort(conf_scores)[::-1][:min_boxes]
    if len(keep) > max_boxes:
        return np.argsort(conf_scores)[::-1][:max_boxes]
    return keep


def generate_tsv_regions(rois, scores, attr_scores, pool5, scale, image_size, min_boxes, max_boxes, conf,
                         threshold=TSV_NMS):
    """(Regions, max_conf (R,)) of one image from a network's raw outputs, as generate_tsv.py keeps them.

    ``rois`` float32 (R, 4) proposals in the resized image's pixels; ``scores`` (R, C) and
    ``attr_scores`` (R, A) the class and attribute probabilities (softmax over all classes, background
    included) without the background column; ``pool5`` (R, D) the proposals' pooled features; ``scale``
    caffe's im_scale. The boxes are the unregressed proposals divided by the scale, in float32 (numpy 1's
    float32 array / float64 scalar, as the released files were made); kept by ``tsv_keep`` on
    ``max_conf``; labelled with the argmax of their class and attribute probabilities and those
    maxima (LXMERT's extract_coco_image.py: objects_id, objects_conf, attrs_id, attrs_conf).
    ``image_size`` (height, width) is recorded, the boxes are not clipped (generate_tsv's are not).
    """
    boxes = rois.float() / torch.tensor(scale, dtype=torch.float32, device=rois.device)
    conf_scores = max_conf(boxes, scores.float(), threshold)
    keep = torch.from_numpy(tsv_keep(conf_scores, min_boxes, max_boxes, conf).copy()).to(rois.device)
    class_scores, class_ids = scores[keep].max(dim=1)
    attr_prob, attr_ids = attr_scores[keep].max(dim=1)
    return Regions(
        boxes=boxes[keep].cpu().numpy(),
        features=pool5[keep].float().cpu().numpy(),
        class_ids=class_ids.cpu().numpy().astype(np.int64),
        class_scores=class_scores.float().cpu().numpy(),
        image_size=tuple(image_size),
        attr_ids=attr_ids.cpu().numpy().astype(np.int64),
        attr_scores=attr_prob.float().cpu().numpy(),
    ), conf_scores


def _vocab(spec, key, n, optional, kind):
    """(names, sha256 of the file) from the entry's vocabulary ``key``; generated names if optional."""
    value = spec.get(key)
    if value is None:
        if optional:
            return [f"{kind}{i}" for i in range(n)], None
        raise InputError(key, f"the detector needs its {n} {kind} names, one per line: a local file or a "
                              f"pinned URL, e.g. {VOCAB_BASE}{key}.txt")
    path = Path(value)  # a URL reaches here fetched by vlbias.weights: its cached file
    if not path.is_file():
        raise InputError(value, f"{key}: file not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(value, f"{key}: cannot read ({e})") from None
    names = [line.split(",")[0].strip() for line in lines]
    if len(names) != n or not all(names):
        raise InputError(value, f"{key}: expected {n} non-empty lines (one {kind} name each), got "
                                f"{len(names)} lines, {names.count('')} empty")
    return names, sha256_file(path)


def _load(model, state, path):
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
