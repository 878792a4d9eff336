"""py-faster-rcnn's test-time image blob (lib/fast_rcnn/test.py ``_get_image_blob``), which both
bottom-up-attention's caffe extraction (generate_tsv.py) and Detectron (``prep_im_for_blob``) use:
BGR minus the pixel means, resized by ONE factor ``im_scale`` with cv2.resize(fx=fy=im_scale,
INTER_LINEAR); the boxes found on it are divided by ``im_scale`` to come back to the image's pixels.
The detectors (vlbias.regions.bua, detectron_fpn) and VL-BERT's own image transform
(vlbias.models.vlbert) subtract the same means.
"""

import numpy as np
import torch

from vlbias.errors import InputError

# py-faster-rcnn's cfg.PIXEL_MEANS, caffe's ImageNet mean in BGR order (the pixel std is 1): the
# demo's config.yaml (bua), Detectron's config defaults and VL-BERT's all have it
PIXEL_MEANS_BGR = (102.9801, 115.9465, 122.7717)


def image_scale(height, width, min_size, max_size):
    """The factor taking the shorter side to ``min_size``, unless the longer side would then ROUND
    above ``max_size`` (np.round(im_scale * im_size_max) > MAX_SIZE); then the longer side's."""
    scale = min_size / min(height, width)
    if round(scale * max(height, width)) > max_size:
        scale = max_size / max(height, width)
    return scale


def image_blob(rgb, pixel_means_bgr, min_size, max_size):
    """PIL RGB image -> (float32 (3, h, w) BGR minus ``pixel_means_bgr``, resized; im_scale).

    cv2's output size for fx = fy = scale (each side times the scale, rounded half to even) and its
    bilinear mapping (source = (destination + 0.5) / scale - 0.5, the given scale, not the ratio of
    the sizes), computed in float64 as cv2 computes the source positions (float32 positions near 1000
    are off by 1e-4). The means are subtracted in float32.
    """
    pixels = np.asarray(rgb.convert("RGB"), dtype=np.float32)[:, :, ::-1] - np.float32(pixel_means_bgr)
    height, width = pixels.shape[:2]
    scale = image_scale(height, width, min_size, max_size)
    size = [round(height * scale), round(width * scale)]
    if min(size) < 1:
        raise InputError(f"image of {width}x{height} pixels", "too elongated for the detector")
    image = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))[None].double()
    return torch.ops.aten.upsample_bilinear2d(image, size, False, scale, scale)[0].float(), scale
