"""Mask I for models that see pixels, not regions (BLIP, FLAVA, ViLT, BridgeTower): this project's extension.

The grounded suite's image mask (Ross et al. 2021, experiment 3) replaces the features of the
regions that show people with what the model was pre-trained to read as a masked region. A model
that reads the image's pixels itself (a ViT patch encoder) has no region inputs and was never
pre-trained with masked regions; here, instead, the pixels of the same regions (the region
store's boxes, the same ``is_person`` selection, protocol switch image_mask) are painted over with
the processor's mean colour (its ``image_mean`` x 255, rounded), which its normalisation maps to
zero: the image the model then sees carries no information inside those boxes. This is not the
paper's method and its numbers are not comparable to the paper models' masked columns.
"""

import numpy as np

from vlbias.errors import InputError

SNAP = 256  # pixel coordinates are rounded to 1/SNAP pixel before their floor (fill_regions)


def mean_colour(image_mean):
    """uint8 (3,) RGB of a processor's ``image_mean`` (per channel, in [0, 1]): x 255, rounded."""
    mean = np.asarray(image_mean, dtype=np.float64)
    if mean.shape != (3,) or not ((mean >= 0) & (mean <= 1)).all():
        raise InputError(f"image_mean {image_mean!r}", "expected three channel means in [0, 1]")
    return np.round(mean * 255).astype(np.uint8)


def fill_regions(image, boxes_norm, selected, colour):
    """A copy of ``image`` (uint8 (H, W, 3) RGB) with the boxes ``selected`` picks filled with ``colour``.

    ``boxes_norm`` float (k, 4): x1/W, y1/H, x2/W, y2/H, the region store's; ``selected`` bool (k,)
    (e.g. ``Visual.is_person``). A box covers the pixel columns floor(x1·W)..floor(x2·W) and rows
    floor(y1·H)..floor(y2·H), both ends included, clipped to the image: the pixels VL-BERT's
    masked-region pre-training blanks for the box in pixels (x1, y1, x2, y2). Each x·W is first
    rounded to 1/256 pixel: the store's float32 x/W times W lands up to W·2^-24 off the pixel
    coordinate, often just below an integer one, which the floor would lose (box (10, 5, 30, 20) on
    56 x 40 pixels covers columns 10..30 and rows 5..20). The caller's image is never written to.
    """
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise InputError("image", f"expected uint8 RGB (H, W, 3), got {image.dtype} {image.shape}")
    boxes, selected = np.asarray(boxes_norm, dtype=np.float64), np.asarray(selected)
    k = len(selected)
    if boxes.shape != (k, 4) or selected.dtype != bool:
        raise InputError("boxes_norm", f"expected (k, 4) boxes and k bool flags, got {boxes.shape} and "
                                       f"{selected.dtype} {selected.shape}")
    if not (np.isfinite(boxes).all() and boxes.min(initial=0) >= -1e-3 and boxes.max(initial=0) <= 1 + 1e-3):
        raise InputError("boxes_norm", "must be boxes divided by the image size, in [0, 1]")
    h, w = image.shape[:2]
    out = image.copy()
    pixels = np.floor(np.round(boxes[selected] * [w, h, w, h] * SNAP) / SNAP).astype(np.int64)
    for x1, y1, x2, y2 in pixels:
        out[max(y1, 0):y2 + 1, max(x1, 0):x2 + 1] = colour
    return out
