"""What a detector gives and a model reads: the region types below both (docs/architecture.md).

    regions = detector.detect([...])       # list[Regions]: one image's kept boxes (vlbias.regions)
    visual = visual_from_store(store, image_id)   # Visual: one image's regions as a model reads them
    encoder.embed(captions, [visual, ...], "S")   # vlbias.models.vl

``Regions`` is what every detector returns for one image and what a region store keeps
(vlbias.regions.store); ``keep_boxes`` is the one rule by which every detector keeps its boxes
(bottom-up-attention's): all boxes whose best class score is at least ``conf``, but at least
``min_boxes`` and at most ``max_boxes`` (fixed K, LXMERT's 36: ``min_boxes = max_boxes = K``).
Class ids index the detector's class names, class 0 the first named class, never the background.

``Visual`` is one entry of a vision-language model's ``regions`` (vlbias.models.vl): ``features``
float32 (k, D), ``boxes_norm`` float32 (k, 4) as x1/width, y1/height, x2/width, y2/height,
``is_person`` bool (k,) (the regions mask I hides); ``image_size`` (height, width) for families that
need pixel coordinates (VL-BERT); ``image``, uint8 RGB (H, W, 3), for families that compute region
features themselves (``needs_pixels``). A model reads any mapping or object with those fields as
well (``visual_field``).
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vlbias.errors import InputError
from vlbias.images.decode import load_rgb


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


@dataclass
class Visual:
    """One image's regions as a model reads them."""

    features: np.ndarray            # float32 (k, D) pooled region features
    boxes_norm: np.ndarray = None   # float32 (k, 4) x1, y1, x2, y2 divided by the image's width/height
    is_person: np.ndarray = None    # bool (k,) regions that show people (for image masking)
    image_size: tuple = None        # (height, width) of the image in pixels (Regions.image_size)
    image: np.ndarray = None        # uint8 (H, W, 3) RGB pixels, for models that need them (needs_pixels)
    class_ids: np.ndarray = None    # int (k,) the detector's class ids (the region store's: no background),
                                    # for a feed that orders regions by them (VL-BERT's vlbert_image_box: none)
    batch_boxes: int = None         # a feed that depends on the authors' batch (``in_authors_batches``): the
                                    # box count of the longest box list of this pair's batch (VL-BERT's attended padding)


def visual_from_store(store, image_id, labels=None, path=None, label_offset=0):
    """The Visual of ``image_id`` in an open vlbias.regions.store.RegionStore: its regions' features,
    normalised boxes and image size; as ``is_person`` the regions mask I hides, the store's person
    flags or, with ``labels``, the regions whose detector label, read with ``label_offset`` (protocol
    switch label_offset), is one of them (protocol switch image_mask); with ``path``, the image's
    pixels (for a family that ``needs_pixels``)."""
    regions, is_person = store.get(image_id)
    if labels is not None:
        is_person = regions_with_labels(regions.class_ids, store.class_names, labels, offset=label_offset)
    image = None
    if path is not None:
        image = np.asarray(load_rgb(path), dtype=np.uint8)
        if image.shape[:2] != tuple(regions.image_size):
            raise InputError(path, f"is {image.shape[:2]} pixels, its regions were found on "
                                   f"{tuple(regions.image_size)}: rebuild the region store")
    return Visual(regions.features, store.boxes_norm(image_id), is_person, regions.image_size, image,
                  regions.class_ids)


def visual_field(entry, name):
    """The array ``name`` of a regions entry (a Visual, a mapping or any object with that attribute), or None."""
    value = entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)
    return None if value is None else np.asarray(value)
