"""Detectron's COCO Mask R-CNN (ResNet-101 FPN) box head as a region-feature detector: VisualBERT's.

VisualBERT's image features (Li et al. 2019; the NLVR2/COCO configs, 1024-d, and Ross et al.'s
VisualBERT features) are the fc7 activations of Detectron's ``e2e_mask_rcnn_R-101-FPN_2x`` (model
35861858, trained on coco_2014_train + valminusminival; config
configs/12_2017_baselines/e2e_mask_rcnn_R-101-FPN_2x.yaml of facebookresearch/Detectron), computed by
uclanlp/visualbert's ``visualbert/utils/get_image_features/extract_image_features_nlvr.py`` ("the
extraction" below) on Detectron's test-time box branch (the mask branch is never run). Its network is
vlbias.regions.modeling_detectron_fpn (torchvision components with Detectron's parameters); this
module runs it with Detectron's arithmetic where torchvision's differs (roi_align, nms): its anchors
(Detectron's generate_anchors), its box coding and areas (the "+1" pixel convention), its FPN level
of a RoI, its proposal rule (per level, then all levels), and the extraction's box rule.

Config entry keys:
    weights, exactly one of:
      url (+ sha256)   Detectron's model_final.pkl (DETECTRON_URL is 35861858's), fetched by
                       vlbias.weights into ``<cache>/detectron/`` (named by the pinned sha256, else by the
                       URL's digest: another URL's model_final.pkl is never reused); ``sha256`` pins it
                       (recommended: the file is not pinned upstream), else the weights lock pins it
      checkpoint       a local model_final.pkl (Detectron's Caffe2 blobs, read by a restricted
                       unpickler that builds numpy arrays only: vlbias.io.checkpoints.read_numpy_pickle),
                       or a .safetensors of this module's own state_dict
      weights: random  seeded random weights (``seed``), for tests and timing
    min_size, max_size   the test scale (Detectron's TEST.SCALE 800, TEST.MAX_SIZE 1333)
    post_nms_topk  RPN proposals kept per level and in all (TEST.RPN_POST_NMS_TOP_N 1000; fewer only
                   to make tests fast)
    min_boxes, max_boxes, conf   the box rule (vlbias.visual.keep_boxes): VisualBERT's extraction
                   keeps 10-100 boxes at 0.2 (its --min_bboxes, --max_bboxes, --conf_thresh defaults)
    device, threads, batch_size  see vlbias.runtime

Test-time behaviour, as Detectron's with that config (detectron/core/test.py im_detect_bbox,
utils/blob.py, modeling/FPN.py, ops/generate_proposals.py, ops/collect_and_distribute_fpn_rpn_
proposals.py) and the extraction: the image (BGR, as cv2.imread gives it) minus the pixel means
(102.9801, 115.9465, 122.7717) is resized by one factor, the shorter side to min_size unless the
longer would then exceed max_size, bilinearly (cv2.resize's INTER_LINEAR with that factor), and
zero-padded to a multiple of 32. The MSRA ResNet-101 (stride in the 1x1 convolutions, frozen affine
batch norm, max pool 3/2 with padding 1) feeds the FPN (256 channels, lateral 1x1 + nearest 2x
top-down, 3x3 outputs, P6 = P5 subsampled). On each level P2-P6 the RPN (3 anchors, sizes 32-512,
ratios 0.5, 1, 2) keeps the 1000 most likely anchors, decodes them, clips them to the PADDED image
(Detectron's im_info is the blob's size), drops boxes narrower than one original pixel, and keeps
1000 after NMS at 0.7; the 1000 most likely of all levels are the RoIs. Each RoI is RoIAligned (7x7,
sampling ratio 2, no half-pixel offset) on the level floor(4 + log2(sqrt(area) / 224)) in 2-5 and
goes through fc6, fc7 (1024, ReLU): its feature. The class scores (softmax over 81) give each RoI its
confidence: the highest score of a class for which the RoI survives that class's NMS at 0.5
(computed on the RoIs in original-image pixels); ``keep_boxes`` then picks the RoIs. Boxes are the
RoIs themselves, not regressed (the extraction keeps ``rois / im_scale``), clipped to the image for
the store; the class is the one that gave the confidence (else the best non-background class).

Each image runs alone: Detectron's test batch is one image, and padding another image's canvas
around it would change the features near its border (the frozen batch norm's bias makes the padding
non-zero after the first layer). VisualBERT reads at most 144 regions per image (its dataloader's
``image_feature_cap``, vlbias.models.visualbert), which never binds at max_boxes 100.

Differences from Detectron, on purpose or unavoidable: images are decoded by PIL, not cv2 (libjpeg
versions may differ by a grey level); NMS suppresses at IoU > t where Detectron's does at >= t (equal
only for exact ties); the resize is torch's bilinear kernel (in float64) with cv2's size and scale.
"""

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch.nn import functional as F
from torchvision.models.detection import FasterRCNN_ResNet50_FPN_Weights
from torchvision.ops import batched_nms, nms, roi_align

from vlbias.errors import InputError
from vlbias.images.blob import PIXEL_MEANS_BGR, image_blob
from vlbias.io.checkpoints import read_numpy_pickle, read_state_dict
from vlbias.io.fetch import sha256_file
from vlbias.regions import register
from vlbias.regions.modeling_detectron_fpn import (ASPECT_RATIOS, FPN_DIM, MLP_DIM, POOLER_RESOLUTION, RPN_LEVELS,
                                                   DetectronFPN, detectron_state_dict, random_init_)
from vlbias.registry import one_weights_source
from vlbias.runtime import runtime
from vlbias.visual import Regions, box_rule, keep_boxes
from vlbias.weights import as_written, fetched

log = logging.getLogger(__name__)

DETECTRON_URL = ("https://dl.fbaipublicfiles.com/detectron/35861858/12_2017_baselines/"
                 "e2e_mask_rcnn_R-101-FPN_2x.yaml.02_32_51.SgT4y1cO/output/train/"
                 "coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl")
# Detectron's config defaults and e2e_mask_rcnn_R-101-FPN_2x.yaml, test time
COARSEST_STRIDE = 32
ANCHOR_START_SIZE = 32
RPN_PRE_NMS_TOP_N, RPN_NMS = 1000, 0.7
ROI_LEVELS = (2, 5)
CANONICAL_SCALE, CANONICAL_LEVEL = 224, 4
SAMPLING_RATIO = 2
CLASS_NMS = 0.5  # TEST.NMS, the extraction's per-class NMS
BBOX_XFORM_CLIP = math.log(1000.0 / 16)
# COCO's 80 classes in Detectron's order (detectron/datasets/dummy_datasets.py), as torchvision lists them
COCO_CLASSES = [c for c in FasterRCNN_ResNet50_FPN_Weights.COCO_V1.meta["categories"] if c != "N/A"][1:]


# ---------------------------------------------------------------------------------------------
# Detectron's box arithmetic
# ---------------------------------------------------------------------------------------------

def cell_anchors(stride, size, ratios=ASPECT_RATIOS):
    """Detectron's generate_anchors: (len(ratios), 4) anchors of one level around (0, 0, stride-1,
    stride-1): per ratio the rounded width and height of a stride² box, scaled to ``size``."""
    w = h = float(stride)
    x_ctr = y_ctr = 0.5 * (stride - 1)
    out = []
    for ratio in ratios:
        ws = round(math.sqrt(w * h / ratio))  # numpy's round: half to even, as Python's
        hs = round(ws * ratio)
        ws, hs = ws * size / stride, hs * size / stride
        out.append([x_ctr - 0.5 * (ws - 1), y_ctr - 0.5 * (hs - 1), x_ctr + 0.5 * (ws - 1), y_ctr + 0.5 * (hs - 1)])
    return torch.tensor(out, dtype=torch.float32)


def decode(deltas, boxes):
    """Detectron's bbox_transform with weights (1, 1, 1, 1): widths are x2 - x1 + 1."""
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    ctr_x, ctr_y = boxes[:, 0] + 0.5 * widths, boxes[:, 1] + 0.5 * heights
    dx, dy = deltas[:, 0], deltas[:, 1]
    dw, dh = deltas[:, 2].clamp(max=BBOX_XFORM_CLIP), deltas[:, 3].clamp(max=BBOX_XFORM_CLIP)
    pred_ctr_x, pred_ctr_y = dx * widths + ctr_x, dy * heights + ctr_y
    pred_w, pred_h = torch.exp(dw) * widths, torch.exp(dh) * heights
    return torch.stack([pred_ctr_x - 0.5 * pred_w, pred_ctr_y - 0.5 * pred_h,
                        pred_ctr_x + 0.5 * pred_w - 1, pred_ctr_y + 0.5 * pred_h - 1], dim=1)


def clip(boxes, height, width):
    """Detectron's clip_tiled_boxes: into [0, width - 1] x [0, height - 1]."""
    x = boxes[:, 0::2].clamp(0, width - 1)
    y = boxes[:, 1::2].clamp(0, height - 1)
    return torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], dim=1)


def _plus_one(boxes):
    # torchvision's IoU on (x1, y1, x2 + 1, y2 + 1) is Detectron's IoU with its "+1" areas
    return boxes + boxes.new_tensor([0.0, 0.0, 1.0, 1.0])


def roi_levels(boxes):
    """FPN level of each RoI: floor(4 + log2(sqrt(area) / 224 + 1e-6)) in 2..5, areas with the +1."""
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    level = torch.floor(CANONICAL_LEVEL + torch.log2(torch.sqrt(area) / CANONICAL_SCALE + 1e-6))
    return level.clamp(*ROI_LEVELS).to(torch.int64)


# ---------------------------------------------------------------------------------------------
# Detector
# ---------------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """One image as the network takes it: BGR minus the pixel means, resized; its scale and size."""

    image: torch.Tensor   # float32 (3, h, w), not padded
    scale: float          # im_scale: resized / original
    size: tuple           # (height, width) of the original image


@register("detectron_fpn")
class DetectronFPNDetector:
    def __init__(self, spec):
        one_weights_source(spec, "detectron_fpn detector", "url", "with `sha256`")
        url, checkpoint, weights = spec.get("url"), spec.get("checkpoint"), spec.get("weights")
        self.device, _ = runtime(spec, precisions=("fp32",))  # boxes by thresholds: fp32 only
        self.min_boxes, self.max_boxes, self.conf = box_rule(spec)
        self.min_size, self.max_size = int(spec["min_size"]), int(spec["max_size"])
        self.post_nms_topk = int(spec["post_nms_topk"])

        model, seed = DetectronFPN(len(COCO_CLASSES)), None
        if weights == "random":
            seed = int(spec["seed"])
            random_init_(model, seed)
            self.weights = "random"
        else:
            if url and not fetched(spec, "url"):
                raise InputError(url, "a checkpoint URL loads only fetched and verified: build the spec that "
                                      "vlbias.weights.prepare returns")
            # fetched (vlbias.weights): `url` names the cached file now
            path, url = (Path(url), as_written(spec, "url")) if url else (Path(checkpoint), None)
            if not path.is_file():
                raise InputError(checkpoint, "checkpoint file not found")
            if path.suffix == ".pkl":
                doc = read_numpy_pickle(path)
                blobs = doc.get("blobs", doc) if isinstance(doc, dict) else None
                if not isinstance(blobs, dict) or not all(isinstance(v, np.ndarray) for v in blobs.values()):
                    raise InputError(path, "expected Detectron's weights: a dict of numpy arrays under 'blobs'")
                state = detectron_state_dict(blobs, model, path)
            else:
                state = read_state_dict(path)
            try:
                model.load_state_dict(state, strict=True)
            except RuntimeError as e:
                raise InputError(path, f"does not fit the detectron_fpn model ({str(e).splitlines()[0]})") from e
            self.weights = sha256_file(path)
        self.model = model.eval().requires_grad_(False).to(self.device)
        anchors = [cell_anchors(2**lvl, ANCHOR_START_SIZE * 2 ** (lvl - RPN_LEVELS[0])) for lvl in RPN_LEVELS]
        self.anchors = [a.to(self.device) for a in anchors]

        self.name = "detectron_fpn"
        self.class_names = list(COCO_CLASSES)
        self.attribute_names = None
        self.person_classes = frozenset({"person"})
        self.feature_dim = MLP_DIM
        self.settings = {
            "adapter": "detectron_fpn", "model": "Detectron e2e_mask_rcnn_R-101-FPN_2x (35861858), fc7",
            "url": url, "checkpoint": checkpoint, "weights": self.weights, "seed": seed,
            "min_size": self.min_size, "max_size": self.max_size, "input": "BGR minus Detectron's pixel means",
            "rpn": {"pre_nms_topk": RPN_PRE_NMS_TOP_N, "post_nms_topk": self.post_nms_topk, "nms": RPN_NMS},
            "pooler": f"RoIAlign {POOLER_RESOLUTION}x{POOLER_RESOLUTION}, sampling {SAMPLING_RATIO}",
            "class_nms": CLASS_NMS, "min_boxes": self.min_boxes, "max_boxes": self.max_boxes, "conf": self.conf,
            "selection": "RPN proposals; confidence = best class score surviving that class's NMS; keep_boxes; "
                         "boxes and features of the proposals (VisualBERT's extraction)",
            "device": str(self.device), "torch": torch.__version__, "torchvision": torchvision.__version__,
        }
        log.info("detectron_fpn: %s weights, on %s", self.weights, self.device)

    def prepare(self, rgb):
        """PIL RGB image -> Prepared: BGR minus the means, resized as cv2.resize(fx=fy=scale, INTER_LINEAR)."""
        image, scale = image_blob(rgb, PIXEL_MEANS_BGR, self.min_size, self.max_size)
        return Prepared(image, scale, (rgb.height, rgb.width))

    @torch.inference_mode()
    def detect(self, inputs):
        """list[Prepared] -> list[Regions], boxes in original-image pixels, best first."""
        return [self._detect_one(x) for x in inputs]

    def _detect_one(self, x):
        rois, fc7, scores = self.forward(x)
        boxes = rois / x.scale  # the extraction's cls_boxes: the RoIs in original-image pixels
        confidence, label = self._confidence(boxes, scores)
        keep = torch.from_numpy(keep_boxes(confidence.cpu().numpy(), self.min_boxes, self.max_boxes, self.conf))
        keep = keep.to(boxes.device)
        height, width = x.size
        kept = torchvision.ops.clip_boxes_to_image(boxes[keep], (height, width))
        return Regions(boxes=kept.float().cpu().numpy(), features=fc7[keep].float().cpu().numpy(),
                       class_ids=(label[keep] - 1).cpu().numpy().astype(np.int64),
                       class_scores=confidence[keep].float().cpu().numpy(), image_size=(height, width))

    def forward(self, x):
        """One Prepared image -> (RoIs (R, 4) in network pixels, fc7 (R, 1024), class scores (R, 81))."""
        h, w = x.image.shape[-2:]
        pad_h, pad_w = (math.ceil(s / COARSEST_STRIDE) * COARSEST_STRIDE for s in (h, w))
        image = F.pad(x.image.to(self.device), (0, pad_w - w, 0, pad_h - h))[None]
        m = self.model
        features = m.backbone(image)
        rois = self._proposals(features, pad_h, pad_w, x.scale)
        fc7 = m.roi_heads.box_head(self._pool(features, rois))
        return rois, fc7, F.softmax(m.roi_heads.cls_score(fc7), dim=-1)

    def _proposals(self, features, height, width, scale):
        """Detectron's GenerateProposals per level (im_info = the padded size) and collection."""
        logits, deltas = self.model.rpn.head(list(features.values()))
        boxes, probs = [], []
        for lvl, anchors, logit, delta in zip(RPN_LEVELS, self.anchors, logits, deltas):
            a, fh, fw = logit.shape[1:]
            stride = 2**lvl
            ys, xs = torch.meshgrid(torch.arange(fh, device=logit.device) * stride,
                                    torch.arange(fw, device=logit.device) * stride, indexing="ij")
            shifts = torch.stack([xs, ys, xs, ys], dim=-1).reshape(-1, 1, 4).to(anchors.dtype)
            level_anchors = (shifts + anchors[None]).reshape(-1, 4)  # (H, W, A) order
            prob = torch.sigmoid(logit[0]).permute(1, 2, 0).reshape(-1)
            delta = delta[0].permute(1, 2, 0).reshape(-1, 4)  # (4A, H, W) -> (H, W, A) x 4
            prob, order = prob.topk(min(RPN_PRE_NMS_TOP_N, prob.numel()))
            box = clip(decode(delta[order], level_anchors[order]), height, width)
            # at least one pixel wide and high in the original image (Detectron's _filter_boxes)
            ok = ((box[:, 2] - box[:, 0]) / scale + 1 >= 1) & ((box[:, 3] - box[:, 1]) / scale + 1 >= 1)
            box, prob = box[ok], prob[ok]
            survivors = nms(_plus_one(box), prob, RPN_NMS)[: self.post_nms_topk]
            boxes.append(box[survivors])
            probs.append(prob[survivors])
        prob, order = torch.cat(probs).topk(min(self.post_nms_topk, sum(len(p) for p in probs)))
        return torch.cat(boxes)[order]

    def _pool(self, features, rois):
        """(R, 256, 7, 7) RoIAlign features, each RoI on its FPN level, in RoI order."""
        levels = roi_levels(rois)
        out = rois.new_zeros((len(rois), FPN_DIM, POOLER_RESOLUTION, POOLER_RESOLUTION))
        for lvl in range(ROI_LEVELS[0], ROI_LEVELS[1] + 1):
            idx = torch.nonzero(levels == lvl).flatten()
            if len(idx):
                out[idx] = roi_align(features[lvl], [rois[idx]], POOLER_RESOLUTION, 1.0 / 2**lvl,
                                     SAMPLING_RATIO, aligned=False)
        return out

    @staticmethod
    def _confidence(boxes, scores):
        """The extraction's max_conf per RoI, and the class giving it: the first class (1..80) with
        that score among those whose NMS the RoI survives; the best class if it survives none."""
        num = scores.shape[1] - 1
        cls = torch.arange(1, num + 1, device=boxes.device).repeat_interleave(len(boxes))
        flat = scores[:, 1:].T.reshape(-1)  # class-major, as cls
        kept = batched_nms(_plus_one(boxes).repeat(num, 1), flat, cls, CLASS_NMS)
        roi, value = kept % len(boxes), flat[kept]
        best = torch.zeros(len(boxes), dtype=scores.dtype, device=boxes.device)
        best.scatter_reduce_(0, roi, value, reduce="amax")
        label = scores[:, 1:].argmax(dim=1) + 1
        top = value == best[roi]
        first = torch.full_like(label, num + 1).scatter_reduce_(0, roi[top], cls[kept][top], reduce="amin")
        return best, torch.where(first <= num, first, label)
