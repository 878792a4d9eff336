"""Region features: a Faster R-CNN detector per family, built from a workflow config entry.

    detector = build({"adapter": "bua", "model_id": "unc-nlp/frcnn-vg-finetuned", ...})
    x = detector.prepare(rgb)                  # PIL RGB image -> CPU input (run in decode threads)
    regions = detector.detect([x, ...])        # -> list[Regions], one per image, in the detector's order

Every detector has ``name``, ``feature_dim``, ``class_names`` (index = ``Regions.class_ids``: class
0 is the first named class, never the background),
``attribute_names`` (None when the detector predicts no attributes), ``person_classes`` (the
class names whose boxes show people, for the image-masking experiment), ``weights`` (sha256 of
the weight file, or "random") and ``settings`` (a JSON-able dict of everything that shaped the
output). Boxes are kept by one rule for every detector (bottom-up-attention's): all boxes whose
best class score is at least ``conf``, but at least ``min_boxes`` and at most ``max_boxes``;
fixed K (LXMERT's 36) is ``min_boxes = max_boxes = K``.

Adapter modules are imported only when an entry names them (see vlbias.registry).
"""

from dataclasses import dataclass

import numpy as np

from vlbias.errors import InputError
from vlbias.registry import Registry

_ADAPTERS = Registry("detector", "vlbias.regions")  # adapter <name>: module vlbias.regions.<name>
register, build = _ADAPTERS.register, _ADAPTERS.build


@dataclass
class Regions:
    """The kept boxes of one image in the detector's order: best first (``keep_boxes``), or, bua's
    ``selection: generate_tsv``, generate_tsv's (vlbias.regions.bua), which the models read."""

    boxes: np.ndarray          # float32 (n, 4) x1, y1, x2, y2 in pixels of the original image
    features: np.ndarray       # float32 (n, feature_dim) pooled region features
    class_ids: np.ndarray      # int64 (n,) index into the detector's class_names (no background)
    class_scores: np.ndarray   # float32 (n,)
    image_size: tuple          # (height, width) of the original image
    attr_ids: np.ndarray = None     # int64 (n,) or None when the detector has no attribute head
    attr_scores: np.ndarray = None  # float32 (n,) or None


def box_rule(spec):
    """(min_boxes, max_boxes, conf) of a detector entry: ``keep_boxes``'s settings, checked."""
    min_boxes, max_boxes, conf = int(spec["min_boxes"]), int(spec["max_boxes"]), float(spec["conf"])
    if not 0 <= min_boxes <= max_boxes:
        raise InputError("min_boxes/max_boxes", f"need 0 <= min_boxes <= max_boxes, got {min_boxes}, {max_boxes}")
    return min_boxes, max_boxes, conf


def keep_boxes(scores, min_boxes, max_boxes, conf):
    """Indices of the boxes to keep, best first: score >= ``conf``, clamped to [min_boxes, max_boxes].

    ``scores`` is each candidate box's best class score after NMS. This is the rule of
    bottom-up-attention's feature extraction (10-100 boxes at conf 0.2 for ViLBERT and VL-BERT);
    ``min_boxes == max_boxes == 36`` gives LXMERT's fixed 36.
    """
    if not 0 <= min_boxes <= max_boxes:
        raise ValueError(f"need 0 <= min_boxes <= max_boxes, got {min_boxes}, {max_boxes}")
    scores = np.asarray(scores)
    order = np.argsort(-scores, kind="stable")
    n = int(np.clip((scores >= conf).sum(), min_boxes, max_boxes))
    return order[:n]


def regions_with_labels(class_ids, class_names, labels, offset=0):
    """bool (n,): the regions whose class name is one of ``labels`` (exact, case-sensitive match).

    The image mask I of the ``labels`` protocol (docs/grounded.md row 5): Ross et al.'s code masks
    a region when its detector label is a contextual word of the test (or its lower-case form) or
    a person word, ``mask.region_labels`` of the stimulus files (LXMERT, VL-BERT), or one of man,
    woman, person (ViLBERT). ``class_ids`` index ``class_names`` as the region store keeps them (no
    background, vlbias.regions.store).

    ``offset`` reads the name of class ``class_id + offset`` instead, "background" below 0. The
    authors looked names up in ``['background'] + objects_vocab`` with LXMERT's ``objects_id``,
    which counts from the first object class (its extraction takes the argmax of cls_prob[:, 1:]),
    so on LXMERT's COCO features they read each region's name one class early: ``offset=-1``
    reproduces that (it masks shirts and players, not men): protocol switch ``label_offset``.
    """
    class_ids = np.asarray(class_ids, dtype=np.int64)
    if class_ids.size and not (0 <= class_ids.min() and class_ids.max() < len(class_names)):
        raise ValueError(f"class ids must index the {len(class_names)} class names, got "
                         f"{class_ids.min()}..{class_ids.max()}")
    names = np.array(["background", *class_names], dtype=object)
    shifted = np.clip(class_ids + offset + 1, 0, len(class_names))
    return np.isin(names[shifted], list(labels))
