"""Decode stimulus images robustly: the content decides the format, never the file name.

Stimuli collected from the web include dead links saved as HTML, truncated downloads,
CMYK and palette images, 16-bit scans and animations; each either becomes an RGB image or
fails with an error that names the file and says why.
"""

import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from vlbias.errors import InputError

# Formats a stimulus may have (JPEG includes camera MPO files). Pillow's other plugins are not
# needed, and some (EPS) run external programs on load.
FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
CROPS = ("center", "top-left", "none")  # none: the whole image, resized to a square (its aspect not kept)
# how a file becomes pixels: cv2.imread as the iEAT authors' code (load_rgb_opencv), or Pillow (load_rgb)
DECODERS = ("opencv", "pil")


class ImageDecodeError(InputError):
    """A file is not a decodable image; ``reason`` says why without the file name."""

    def __init__(self, source, reason):
        self.reason = reason
        super().__init__(source, reason)


def _sniff(head):
    """Why bytes that no image decoder recognises are not an image."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or b"<html" in text:
        return "not an image (looks like HTML, e.g. an error page saved in place of the image)"
    if text.startswith(b"version https://git-lfs"):
        return "not an image (a Git LFS pointer file, not the image it points to)"
    try:
        head.decode("utf-8")
        return "not an image (looks like text)"
    except UnicodeDecodeError:
        return f"not an image (unknown format; supported: {', '.join(FORMATS)}; starts with {head[:8].hex()})"


def _to_rgb(im):
    """Any Pillow mode → RGB; transparent pixels become white."""
    if im.mode.startswith("I;16") or im.mode == "I":
        # 16-bit samples (Pillow delivers 16-bit PNGs as I;16, older versions as I): scale to 8 bits
        a = np.clip(np.asarray(im, dtype=np.float64), 0, 65535) / 257
        return Image.fromarray(np.rint(a).astype(np.uint8)).convert("RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    # L, 1, P, CMYK, YCbCr, F (Pillow's convention: 0..255, clipped), ...; RGB as is (convert would copy it)
    return im if im.mode == "RGB" else im.convert("RGB")


def _decode(path, decode):
    """``decode(im)`` of the opened image at ``path`` (its first frame); every failure an ImageDecodeError
    naming the file: only the formats of FORMATS, within Pillow's pixel limit."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        # another library switched this on; truncated stimuli would be padded with grey silently
        raise RuntimeError("PIL.ImageFile.LOAD_TRUNCATED_IMAGES is True; vlbias needs it False to reject "
                           "truncated images")
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise ImageDecodeError(path, f"cannot read file ({e.strerror})") from None
    if not head:
        raise ImageDecodeError(path, "empty file")
    try:
        with Image.open(path, formats=FORMATS) as im:
            # Image.open already refuses more than 2x MAX_IMAGE_PIXELS; refuse more than 1x too
            # (Pillow only warns there) so the limit holds whatever the warning filters are
            if Image.MAX_IMAGE_PIXELS and im.width * im.height > Image.MAX_IMAGE_PIXELS:
                raise Image.DecompressionBombError(f"{im.width}x{im.height} pixels")
            im.seek(0)
            return decode(im)
    except ImageDecodeError:
        raise
    except UnidentifiedImageError:
        raise ImageDecodeError(path, _sniff(head)) from None
    except Image.DecompressionBombError as e:
        raise ImageDecodeError(path, f"image too large ({e})") from None
    except Exception as e:  # malformed files make Pillow raise errors of many kinds
        reason = "truncated image data" if "truncated" in str(e).lower() else "damaged image data"
        raise ImageDecodeError(path, f"{reason} ({e})") from None


def load_rgb(path):
    """Fully decode the image at ``path`` (first frame, EXIF orientation applied) as RGB."""
    def decode(im):
        im.load()  # decodes everything now; truncated data fails here
        ImageOps.exif_transpose(im, in_place=True)  # in place: a copy of every image, turned or not, costs ms
        return _to_rgb(im)
    return _decode(path, decode)


def _ends_before_its_end(path):
    """Whether a JPEG file stops inside its last scan: no end-of-image marker after the last start of
    scan (entropy-coded data cannot hold either marker: a 0xFF byte there is followed by 0x00 or a restart)."""
    data = Path(path).read_bytes()
    return data.find(b"\xff\xd9", data.rfind(b"\xff\xda")) < 0


def load_rgb_opencv(path):
    """The image at ``path`` as the iEAT authors' code read it, a uint8 (H, W, 3) RGB array.

    ``cv2.imread(path)`` then BGR → RGB (ryansteed/ieat ``ieat/utils.py`` ``resize``): EXIF orientation
    applied, alpha dropped with the stored colours of transparent pixels kept, CMYK JPEGs through
    libjpeg, 16-bit samples shifted to 8 bits. Pillow reads the header first, so that OpenCV only
    sees the formats of FORMATS within the pixel limit and a non-image gets ``load_rgb``'s reason;
    a JPEG cut short is refused (libjpeg would pad it with grey) like a truncated PNG or WebP, which
    OpenCV does not decode.
    """
    def decode(im):
        if im.format == "JPEG" and _ends_before_its_end(path):
            raise ImageDecodeError(path, "truncated image data (no end-of-image marker after the last scan)")
        import cv2  # here, not at the top: a job that decodes nothing (or with Pillow) starts 0.1 s sooner

        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ImageDecodeError(path, f"OpenCV cannot decode this {im.format} image (damaged, or a format "
                                         "this OpenCV build lacks; decoder: pil may read it)")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return _decode(path, decode)


def square_crop(img, mode="center"):
    """The largest square of ``img``: its centre (``"center"``) or top-left corner (``"top-left"``);
    ``"none"``: ``img`` whole (resizing then squashes it to the square: the resize-only preprocessing).

    The iEAT paper (Appendix B) centres the object; the iEAT authors' code took ``img[:D, :D]``.
    """
    if mode not in CROPS:
        raise ValueError(f"unknown crop mode '{mode}' (known: {', '.join(CROPS)})")
    if mode == "none":
        return img
    w, h = img.size
    if w == h:
        return img  # a crop would copy it
    side = min(w, h)
    left, top = ((w - side) // 2, (h - side) // 2) if mode == "center" else (0, 0)
    return img.crop((left, top, left + side, top + side))


def _area_weights(src, dst):
    """(dst, src) float32 weights of OpenCV's INTER_AREA downscaling along one axis.

    Output pixel i averages the source interval [i * s, (i + 1) * s), s = src / dst, each source
    pixel weighted by its overlap (OpenCV's computeResizeAreaTab, weights rounded to float32).
    """
    scale = src / dst
    w = np.zeros((dst, src), dtype=np.float32)
    for i in range(dst):
        f1 = i * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s2 = min(math.floor(f2), src - 1)
        s1 = min(math.ceil(f1), s2)
        if s1 - f1 > 1e-3:
            w[i, s1 - 1] = (s1 - f1) / cell
        w[i, s1:s2] = 1.0 / cell
        if f2 - s2 > 1e-3:
            w[i, s2] = min(f2 - s2, 1.0, cell) / cell
    return w


def square_images(pixels, min_size=0):
    """``pixels`` as a uint8 (n, S, S, 3) array of square RGB images, S >= ``min_size`` (a model's input
    size, which it shrinks larger images to); anything else is an InputError."""
    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8 or pixels.ndim != 4 or pixels.shape[3] != 3 or pixels.shape[1] != pixels.shape[2]:
        raise InputError("pixels", f"expected uint8 (n, H, W, 3) square RGB images, got {pixels.dtype} {pixels.shape}")
    if pixels.shape[1] < min_size:
        raise InputError("pixels", f"{pixels.shape[1]}x{pixels.shape[2]} images are smaller than the model's "
                                   f"{min_size}x{min_size} input")
    return pixels


def area_resize(pixels, size):
    """uint8 (..., H, W, 3) images shrunk to (..., size, size, 3) exactly as OpenCV's ``cv2.INTER_AREA``.

    The iEAT authors resized every stimulus so (``ieat/utils.py``: ``cv2.resize(img, (n, n),
    interpolation=cv2.INTER_AREA)``). Whole-number factors average blocks; other factors weight
    source pixels by their overlap, accumulated in float32 in OpenCV's order (rows, then columns)
    so that the rounded result is OpenCV's.
    """
    pixels = np.asarray(pixels)
    h, w = pixels.shape[-3:-1]
    if h < size or w < size:
        raise ValueError(f"area resizing only shrinks: {h}x{w} is smaller than {size}x{size}")
    if h % size == 0 and w % size == 0:
        # OpenCV's fast path: block sums times 1/area in float32, rounded half to even
        fy, fx = h // size, w // size
        blocks = pixels.reshape(*pixels.shape[:-3], size, fy, size, fx, 3).astype(np.int64).sum(axis=(-4, -2))
        if fy == fx == 2:  # OpenCV's vectorised 2x2 case rounds halves up
            return ((blocks + 2) >> 2).astype(np.uint8)
        out = blocks.astype(np.float32) * np.float32(1.0 / (fy * fx))
    else:
        wy, wx = _area_weights(h, size), _area_weights(w, size)
        x = pixels.astype(np.float32)
        # horizontal pass: each source row's weighted column sums, one source column at a time
        rows = np.zeros((*x.shape[:-2], size, 3), dtype=np.float32)
        for j in range(w):
            for i in np.flatnonzero(wx[:, j]):
                rows[..., i, :] += x[..., j, :] * wx[i, j]
        # vertical pass: each output row sums its source rows' contributions
        out = np.zeros((*x.shape[:-3], size, size, 3), dtype=np.float32)
        for j in range(h):
            for i in np.flatnonzero(wy[:, j]):
                out[..., i, :, :] += wy[i, j] * rows[..., j, :, :]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


# Pillow's filters (antialiased when shrinking), and OpenCV's INTER_AREA ("area")
PIL_FILTERS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
RESAMPLING = (*PIL_FILTERS, "area")


def prepare(path, size, crop="center", resample="bicubic", decoder="pil"):
    """The image at ``path`` as a uint8 (size, size, 3) array: RGB, square-cropped, resized.

    ``decoder``: ``opencv`` (``load_rgb_opencv``, the iEAT authors' ``cv2.imread``) or ``pil``
    (``load_rgb``: transparent pixels become white). ``resample``: ``bicubic`` or ``bilinear`` (Pillow's,
    antialiased) or ``area`` (``cv2.resize`` with ``INTER_AREA``, which the iEAT authors fed iGPT and
    SimCLR, enlarging an image smaller than ``size`` as well as shrinking a larger one). With
    ``decoder="opencv", crop="top-left", resample="area"`` this is the authors' ``resize`` exactly.
    """
    if crop not in CROPS:
        raise ValueError(f"unknown crop mode '{crop}' (known: {', '.join(CROPS)})")
    if resample not in RESAMPLING:
        raise ValueError(f"unknown resampling '{resample}' (known: {', '.join(RESAMPLING)})")
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder '{decoder}' (known: {', '.join(DECODERS)})")
    if int(size) != size or size < 1:
        raise ValueError(f"image size must be a positive integer, got {size!r}")
    img = square_crop(load_rgb(path) if decoder == "pil" else Image.fromarray(load_rgb_opencv(path)), crop)
    if resample == "area":
        import cv2

        return cv2.resize(np.asarray(img, dtype=np.uint8), (size, size), interpolation=cv2.INTER_AREA)
    return np.asarray(img.resize((size, size), PIL_FILTERS[resample]), dtype=np.uint8)
