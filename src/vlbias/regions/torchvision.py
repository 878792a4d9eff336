"""torchvision's COCO Faster R-CNN (ResNet-50 FPN) as a region-feature detector: the light default.

Config entry keys:
    arch          fasterrcnn_resnet50_fpn (default) | fasterrcnn_resnet50_fpn_v2
    weights, exactly one of:
      weights: COCO_V1      torchvision's COCO weights (fetched and verified by vlbias.weights into
                            ``<cache>/torchvision``; loaded here weights-only, strictly, into the model
                            torchvision builds for them)
      checkpoint: <file>    a local state_dict: .safetensors, or a torch file read with weights_only=True
      weights: random       seeded random weights (``seed``, default 0), for tests and speed runs
    num_classes   with a checkpoint or random weights: classes including background (default 91, COCO)
    class_names   with num_classes other than 91: the names of classes 1.. (default: COCO's)
    min_size, max_size   the model's resize (default 800, 1333: the shorter side to min_size unless
                  the longer would exceed max_size)
    nms_thresh    IoU of the class-agnostic NMS between candidate boxes (default 0.5, torchvision's)
    min_boxes, max_boxes, conf   the box rule (vlbias.visual.keep_boxes)
    device, threads, batch_size  see vlbias.runtime

Box selection, one box per region with its best class (as airsplay's py-bottom-up-attention, which
LXMERT's features came from): every RPN proposal takes its best non-background class and that
class's regressed box; empty boxes are dropped; class-agnostic NMS removes overlapping boxes;
``keep_boxes`` picks among the survivors by that best score. torchvision's own postprocess would
instead keep several (box, class) pairs per proposal and drop boxes below 0.05. The features of the
kept boxes are pooled again from the final boxes (box_roi_pool + box_head: the 1024-d TwoMLPHead
output, or the v2 conv head's), so each feature describes exactly the stored box.

``prepare`` does the model's normalisation and resize on the CPU (in decode threads); ``detect``
then runs backbone, RPN and box head, and maps boxes back to original-image pixels.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torchvision
from torch import nn
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.transform import resize_boxes
from torchvision.ops import FrozenBatchNorm2d
from torchvision.ops import boxes as box_ops
from torchvision.transforms.v2 import functional as TF

from vlbias.errors import InputError
from vlbias.io.checkpoints import read_state_dict, some
from vlbias.io.fetch import sha256_file
from vlbias.regions import register
from vlbias.weights import as_written, fetched, torchvision_arch
from vlbias.runtime import runtime
from vlbias.visual import Regions, box_rule, keep_boxes

log = logging.getLogger(__name__)

# Where torchvision's factory builds another model for its trained weights than for none: the v1
# model freezes its ResNet's batch norms, and runs them with eps 0 for COCO_V1 (its overwrite_eps).
# {arch: {weights: eps of the frozen batch norms}}
FROZEN_BATCH_NORMS = {"fasterrcnn_resnet50_fpn": {"COCO_V1": 0.0}}


@dataclass
class Prepared:
    """One image as the model takes it: normalised and resized, with the original size."""

    image: torch.Tensor   # float32 (3, h, w) resized
    size: tuple           # (height, width) of the original image


@register("torchvision")
class TorchvisionFasterRCNN:
    def __init__(self, spec):
        arch = spec["arch"]
        factory, weights_enum = torchvision_arch(arch)
        weights, checkpoint, got = as_written(spec, "weights"), spec.get("checkpoint"), fetched(spec, "weights")
        if (weights is not None) == (checkpoint is not None):
            raise InputError(f"arch '{arch}'", "set exactly one of `weights: COCO_V1`, `weights: random` "
                                               "or `checkpoint: <file>`")
        self.device, _ = runtime(spec, precisions=("fp32",))  # boxes by thresholds: fp32 only
        self.min_boxes, self.max_boxes, self.conf = box_rule(spec)
        min_size, max_size = int(spec["min_size"]), int(spec["max_size"])
        nms_thresh = float(spec["nms_thresh"])
        coco = weights_enum.COCO_V1.meta["categories"]  # in the enum's metadata: no download needed
        build = dict(weights_backbone=None, min_size=min_size, max_size=max_size, box_nms_thresh=nms_thresh)

        seed = None
        if weights is not None and weights != "random":
            if weights not in weights_enum.__members__:
                raise InputError(f"weights '{weights}'", f"not a weight set of {arch} (known: "
                                 f"{', '.join(w.name for w in weights_enum)}, or random)")
            if not got:
                raise InputError(f"weights '{weights}'", "torchvision's weights load only fetched and verified: "
                                                         "build the spec that vlbias.weights.prepare returns")
            path, num_classes, names = Path(spec["weights"]), len(coco), coco[1:]
            state = read_state_dict(path)  # weights only (torchvision's own loader would unpickle anything)
            model = factory(weights=None, num_classes=num_classes, **build)
            if weights in FROZEN_BATCH_NORMS.get(arch, {}):
                _freeze_batch_norms(model.backbone.body, FROZEN_BATCH_NORMS[arch][weights])
            _load(model, state, path, f"{arch} {weights}")
            self.weights = sha256_file(path)
        else:
            num_classes = int(spec["num_classes"])
            names = spec.get("class_names") or (coco[1:] if num_classes == len(coco) else None)
            if names is None or len(names) != num_classes - 1:
                raise InputError("class_names", f"need {num_classes - 1} names (classes 1..{num_classes - 1}; "
                                                f"0 is background), got {None if names is None else len(names)}")
            if checkpoint is not None:
                path = Path(checkpoint)
                if not path.is_file():
                    raise InputError(checkpoint, "checkpoint file not found")
                state = read_state_dict(path)  # before building the model: a refused file fails fast
                model = factory(weights=None, num_classes=num_classes, **build)
                _load(model, state, path, f"{arch} with {num_classes} classes")
                self.weights = sha256_file(path)
            else:
                seed = int(spec["seed"])
                # a private RNG stream: the weights depend on the seed alone
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    model = factory(weights=None, num_classes=num_classes, **build)
                self.weights = "random"

        self.model = model.eval().requires_grad_(False).to(self.device)
        self.name = arch
        self.class_names = list(names)
        self.attribute_names = None
        self.person_classes = frozenset({"person"} & set(self.class_names))
        self.feature_dim = int(self.model.roi_heads.box_predictor.cls_score.in_features)
        self.settings = {
            "adapter": "torchvision", "arch": arch, "weights": weights, "checkpoint": checkpoint, "seed": seed,
            "num_classes": num_classes, "min_size": min_size, "max_size": max_size, "nms_thresh": nms_thresh,
            "min_boxes": self.min_boxes, "max_boxes": self.max_boxes, "conf": self.conf,
            "selection": "best class per proposal, class-agnostic NMS, keep_boxes; features re-pooled from kept boxes",
            "device": str(self.device), "torch": torch.__version__, "torchvision": torchvision.__version__,
        }
        log.info("%s: %s weights, %d classes, features %d-d, on %s", arch, self.weights, num_classes - 1,
                 self.feature_dim, self.device)

    def prepare(self, rgb):
        """PIL RGB image -> Prepared: normalised, resized as the model's own transform does (CPU)."""
        x = TF.to_dtype(TF.pil_to_tensor(rgb), torch.float32, scale=True)
        t = self.model.transform
        # the transform's own steps, in its order; it picks no random size in eval mode
        image, _ = t.resize(t.normalize(x))
        return Prepared(image, (rgb.height, rgb.width))

    @torch.inference_mode()
    def detect(self, inputs):
        """list[Prepared] -> list[Regions], boxes in original-image pixels."""
        if not inputs:
            return []
        m, heads = self.model, self.model.roi_heads
        sizes = [tuple(x.image.shape[-2:]) for x in inputs]
        tensors = m.transform.batch_images([x.image.to(self.device) for x in inputs], m.transform.size_divisible)
        images = ImageList(tensors, sizes)
        features = m.backbone(images.tensors)
        proposals, _ = m.rpn(images, features)
        logits, deltas = heads.box_predictor(heads.box_head(heads.box_roi_pool(features, proposals, sizes)))
        candidates = heads.box_coder.decode(deltas, proposals)  # (sum of proposals, classes, 4)
        scores = torch.softmax(logits, -1)
        counts = [len(p) for p in proposals]

        kept = []
        for boxes, probs, size in zip(candidates.split(counts), scores.split(counts), sizes):
            best, label = probs[:, 1:].max(1)  # best non-background class
            boxes = box_ops.clip_boxes_to_image(boxes[torch.arange(len(boxes)), label + 1], size)
            ok = box_ops.remove_small_boxes(boxes, min_size=1e-2)
            ok = ok[box_ops.nms(boxes[ok], best[ok], heads.nms_thresh)]
            pick = ok[torch.from_numpy(keep_boxes(best[ok].cpu().numpy(), self.min_boxes, self.max_boxes,
                                                  self.conf)).to(ok.device)]
            kept.append((boxes[pick], best[pick], label[pick]))
        pooled = heads.box_head(heads.box_roi_pool(features, [b for b, _, _ in kept], sizes))

        out = []
        for (boxes, best, label), feats, x, size in zip(kept, pooled.split([len(b) for b, _, _ in kept]), inputs,
                                                        sizes):
            # back to original pixels; clamped, as float rounding of the ratio may overshoot the edge
            boxes = resize_boxes(boxes, size, x.size)
            boxes = box_ops.clip_boxes_to_image(boxes, x.size)
            out.append(Regions(
                boxes=boxes.float().cpu().numpy(),
                features=feats.float().cpu().numpy(),
                class_ids=label.cpu().numpy().astype(np.int64),
                class_scores=best.float().cpu().numpy(),
                image_size=tuple(x.size),
            ))
        return out


def _freeze_batch_norms(module, eps):
    """Replace ``module``'s BatchNorm2d layers by FrozenBatchNorm2d of ``eps``, as torchvision builds a
    trained model's ResNet (the state_dict's names are the same; num_batches_tracked is not kept)."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, FrozenBatchNorm2d(child.num_features, eps=eps))
        else:
            _freeze_batch_norms(child, eps)


def _load(model, state, path, what):
    """Load ``state`` into ``model``: every parameter and buffer, of its shape (else InputError listing them)."""
    expected = model.state_dict()
    shapes = [f"{k} {tuple(v.shape)} vs {tuple(expected[k].shape)}" for k, v in state.items()
              if k in expected and v.shape != expected[k].shape]
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    # FrozenBatchNorm2d drops the num_batches_tracked a BatchNorm2d checkpoint has
    unexpected = [k for k in unexpected if not (k.endswith("num_batches_tracked") and k.rsplit(".", 1)[0] + ".weight"
                                                in expected)]
    if shapes or missing or unexpected:
        raise InputError(path, f"does not fit {what}: missing {some(missing)}; unexpected {some(unexpected)}; of "
                               f"another shape {some(shapes)}")
    model.load_state_dict(state, strict=False)
