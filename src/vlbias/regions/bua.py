"""Bottom-up-attention Faster R-CNN (ResNet-101 C4, Visual Genome) on torchvision ops: LXMERT's detector.

The detector of Anderson et al. (1600 Visual Genome objects, 400 attributes) whose 2048-d region
features LXMERT, ViLBERT and VL-BERT were trained on, in the PyTorch conversion that LXMERT's
Hugging Face demo runs (hub ``unc-nlp/frcnn-vg-finetuned``, code in transformers'
examples/research_projects/lxmert/{modeling_frcnn,processing_image}.py, "the reference" below). Its
network is vlbias.regions.modeling_bua (parameter names equal the checkpoint's, so its
``pytorch_model.bin`` loads with ``strict=True``; its BatchNorm2d ``num_batches_tracked`` entries are
dropped by FrozenBatchNorm2d, which in eval equals BatchNorm2d up to float rounding); this module
prepares the images, runs the network and keeps the regions. From torchvision: FrozenBatchNorm2d,
roi_pool, nms, clip_boxes_to_image and the detection BoxCoder (detectron2's box transform, same
arithmetic).

Config entry keys:
    weights, exactly one of:
      model_id + revision   the Hugging Face hub repo (unc-nlp/frcnn-vg-finetuned) and the revision
                            of its pytorch_model.bin (fetched and verified by vlbias.weights)
      checkpoint: <file>    a local state_dict: .safetensors, or a torch file read with weights_only=True
      weights: random       seeded random weights (``seed``), for tests and timing
    objects_vocab, attributes_vocab   the class / attribute names, one per line (1600 / 400 lines, as
                  py-bottom-up-attention's demo/data/genome/1600-400-20/*_vocab.txt, vlbias.regions.genome):
                  a local file or an http(s) URL pinned to a commit, fetched by vlbias.weights into
                  ``<cache>/bua/``; a line's first comma-separated synonym is the name. Optional with
                  random weights (generated names).
    num_classes, num_attributes   classes / attributes without background (default 1600 / 400)
    min_size, max_size   the resize: shorter side to min_size unless the longer would exceed max_size
                  (default 800, 1333: the demo's config.yaml)
    post_nms_topk  proposals kept by the RPN (default 300: caffe's cfg.TEST.RPN_POST_NMS_TOP_N and the
                  demo's; fewer only to make tests fast)
    selection     which regions are kept (below): ``generate_tsv`` (default; the features every 2019-2021
                  model was trained and published with) or ``demo`` (transformers' LXMERT demo)
    proposals     the RPN's proposal layer (vlbias.regions.modeling_bua lists every difference):
                  ``caffe`` (default with generate_tsv) bottom-up-attention's lib/rpn/proposal_layer.py in
                  the authors' test config, the proposals of the released features; ``demo`` (default with
                  demo) detectron2's RPN as the demo's conversion runs it. generate_tsv with ``demo``
                  proposals gives the generate_tsv selection on the conversion's proposals (what this
                  adapter gave before caffe's layer was ported); ``caffe`` with demo is refused (caffe's
                  layer needs caffe's blob: one image, one im_scale)
    min_boxes, max_boxes, conf   the box rule: generate_tsv's MIN_BOXES, MAX_BOXES, conf_thresh;
                  with ``demo``, vlbias.visual.keep_boxes
    device, threads, batch_size  see vlbias.runtime

Test-time behaviour, as the reference with the demo config: the image (BGR, minus the caffe pixel
mean, bilinear resize) runs through the network (vlbias.regions.modeling_bua: its proposals, their
2048-d pooled features, class and attribute logits); the selection keeps some of its proposals.

``selection: generate_tsv`` keeps the regions as bottom-up-attention's tools/generate_tsv.py
(``get_detections_from_im``: jiasenlu's fork, lines 310-335, the extraction Ross et al. ran for
ViLBERT and VL-BERT; peteanderson80's, lines 69-95; LXMERT's extract_coco_image.py, which adds the
labels) kept them from the caffe network's raw outputs: the image resized as caffe's blob (one
factor, vlbias.images.blob), alone in its forward pass; its proposals by default caffe's proposal
layer (``proposals: caffe``: anchors from generate_anchors, the +1 box transform without clamp,
clipped at W-1 / H-1, boxes under 16 original pixels dropped before the top-6000 cut, +1-area NMS in
numpy's order); the boxes are the UNREGRESSED proposals
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
keep them. With ``proposals: demo`` (the demo's conversion), the RPN differs from caffe's as
vlbias.regions.modeling_bua lists (it drops no proposal below caffe's RPN_MIN_SIZE, clips proposals
to the resized image's edge, caffe's one pixel inside it, and more).

The demo's config (resize 800/1333) is the default; LXMERT's own features came from the caffe
original at 600/1000, which ``min_size: 600, max_size: 1000`` gives.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch.nn import functional as F
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import clip_boxes_to_image, nms

from vlbias.errors import InputError
from vlbias.images.blob import PIXEL_MEANS_BGR, image_blob
from vlbias.io.checkpoints import read_state_dict
from vlbias.io.fetch import sha256_file
from vlbias.regions import register
from vlbias.regions.genome import PERSON_CLASSES, read_vocab
from vlbias.regions.modeling_bua import (CAFFE_ANCHOR_SCALES, FEATURE_DIM, FEATURE_STRIDE, POOLER_RESOLUTION,
                                         PROPOSALS, ROI_BOX_WEIGHTS, RPN_MIN_SIZE, RPN_NMS, RPN_PRE_NMS_TOPK,
                                         SCALE_CLAMP, BottomUpRCNN, caffe_nms, load, random_init_)
from vlbias.registry import one_weights_source
from vlbias.runtime import runtime
from vlbias.visual import Regions, box_rule, keep_boxes
from vlbias.weights import as_written, fetched

log = logging.getLogger(__name__)

NMS_THRESHOLDS = (0.5, 0.6, 0.7)  # the demo's class-agnostic NMS, until min_boxes survive
# the region selections (module docstring): bottom-up-attention's tools/generate_tsv.py, the demo's
SELECTIONS = ("generate_tsv", "demo")
TSV_NMS = 0.3  # generate_tsv's per-class NMS: cfg.TEST.NMS (lib/fast_rcnn/config.py:155; its yml keeps it)
_ROI_BOX_CODER = BoxCoder(ROI_BOX_WEIGHTS, bbox_xform_clip=SCALE_CLAMP)


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
        self.device, _ = runtime(spec, precisions=("fp32",))  # boxes by thresholds: fp32 only
        self.min_boxes, self.max_boxes, self.conf = box_rule(spec)
        self.selection = spec["selection"]
        if self.selection not in SELECTIONS:
            raise InputError(f"selection '{self.selection}'", f"must be one of {', '.join(SELECTIONS)}")
        # the proposal layer: by default caffe's for generate_tsv (the released features), the demo's for demo
        self.proposals = spec.get("proposals") or ("caffe" if self.selection == "generate_tsv" else "demo")
        if self.proposals not in PROPOSALS:
            raise InputError(f"proposals '{self.proposals}'", f"must be one of {', '.join(PROPOSALS)}")
        if self.proposals == "caffe" and self.selection != "generate_tsv":
            raise InputError("proposals 'caffe'", "needs selection generate_tsv: caffe's proposal layer runs on "
                                                  "caffe's image blob (one image, one im_scale)")
        self.min_size, self.max_size = int(spec["min_size"]), int(spec["max_size"])
        num_classes, num_attributes = int(spec["num_classes"]), int(spec["num_attributes"])
        post_nms_topk = int(spec["post_nms_topk"])
        generated = weights == "random"  # random weights may go with generated names
        self.class_names, objects_sha = read_vocab(spec, "objects_vocab", num_classes, generated, "object")
        self.attribute_names, attributes_sha = read_vocab(spec, "attributes_vocab", num_attributes, generated,
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
        model = BottomUpRCNN(num_classes, num_attributes, post_nms_topk, self.proposals)
        if state is None:
            seed = int(spec["seed"])
            random_init_(model, seed)
            self.weights = "random"
        else:
            load(model, state, path)
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
            "proposals": self.proposals, "rpn": {"pre_nms_topk": RPN_PRE_NMS_TOPK, "post_nms_topk": post_nms_topk,
                                                 "nms": RPN_NMS, **RPN_SETTINGS[self.proposals]},
            "pooler": f"RoIPool {POOLER_RESOLUTION}x{POOLER_RESOLUTION}",
            "min_boxes": self.min_boxes, "max_boxes": self.max_boxes, "conf": self.conf,
            "selection": self.selection, **SELECTION_SETTINGS[self.selection],
            "device": str(self.device), "torch": torch.__version__, "torchvision": torchvision.__version__,
        }
        log.info("bua: %s weights, %d classes, %d attributes, on %s", self.weights, num_classes, num_attributes,
                 self.device)

    def prepare(self, rgb):
        """PIL RGB image -> Prepared: generate_tsv, caffe's blob (BGR - mean, resized by one factor as
        cv2.resize; vlbias.images.blob); demo, the reference's Preprocess (float bilinear resize to the
        rounded sizes, BGR - mean)."""
        scale = None
        if self.selection == "generate_tsv":
            image, scale = image_blob(rgb, PIXEL_MEANS_BGR, self.min_size, self.max_size)
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
            image -= torch.tensor(PIXEL_MEANS_BGR).view(3, 1, 1)
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
        rois = m.proposal_generator(features, [tuple(x.image.shape[-2:])], [x.scale])[0]
        pool5 = m.roi_heads(features, [rois])
        logits, _, attr_logits = m.roi_heads.box_predictor(pool5)  # the regressed boxes are not used
        return rois, logits.softmax(-1)[:, :-1], attr_logits.softmax(-1)[:, :-1], pool5

    def _generate_tsv(self, x):
        """One image's Regions as generate_tsv.py keeps them, the boxes clipped to the image (caffe's
        proposals stop a pixel inside the resized image, so this changes none; the demo's reach its
        edge: divided by the scale, they can pass the image's edge by up to half a resized pixel)."""
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

RPN_SETTINGS = {
    "caffe": {"layer": "bottom-up-attention lib/rpn/proposal_layer.py", "min_size": RPN_MIN_SIZE,
              "anchors": f"generate_anchors, base 16, scales {list(CAFFE_ANCHOR_SCALES)}",
              "nms_areas": "+1", "box_transform": "bbox_transform_inv (+1 widths, no clamp)", "clip": "W-1, H-1"},
    "demo": {"layer": "detectron2's RPN (the demo's)", "anchors": "detectron2, sizes 64-512, offset 0",
             "nms_areas": "torchvision", "box_transform": "BoxCoder (dw, dh clamped)", "clip": "W, H"},
}

SELECTION_SETTINGS = {
    "generate_tsv": {"resize": "caffe's blob: one factor, cv2.resize (vlbias.images.blob); one image a pass",
                     "nms": TSV_NMS, "selection_rule": "unregressed proposals; max_conf = best class score "
                     "among the classes whose NMS (cfg.TEST.NMS) the proposal survives; max_conf >= conf, "
                     "else the best min_boxes, at most the best max_boxes (generate_tsv's order); labels the "
                     "argmax of the class (attribute) probabilities (LXMERT's extract_coco_image.py)"},
    "demo": {"resize": "the demo's Preprocess", "nms_thresholds": list(NMS_THRESHOLDS),
             "selection_rule": "best non-background class per proposal, class-agnostic NMS (0.5/0.6/0.7 until "
                               "min_boxes survive), keep_boxes; features of the proposals"},
}


def max_conf(boxes, scores, threshold=TSV_NMS):
    """float64 (R,): generate_tsv's ``max_conf`` of each proposal, the highest of its class scores
    among the classes whose NMS it survives, 0 if none.

    ``boxes`` float32 (R, 4) in the image's pixels, ``scores`` float32 (R, C) class probabilities
    without background. Per class, cpu_nms.pyx (the NMS of the config they ran, USE_GPU_NMS: False) as
    vlbias.regions.modeling_bua.caffe_nms runs it: greedy in the order of numpy's ``argsort()[::-1]``
    of its scores (ties as theirs), a box suppressing every later one it overlaps by ``ovr >=
    threshold`` compared in double.
    """
    if not len(scores):
        return np.zeros(0)
    kept, _ = caffe_nms(boxes, scores, threshold)
    return torch.where(kept.T, scores, 0).amax(dim=1).double().cpu().numpy()


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
