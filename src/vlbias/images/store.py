"""The image store of a dataset: decoded, square-cropped, resized stimuli in one HDF5 file.

Layout::

    /<category>/pixels   uint8 (n, size, size, 3)   RGB, rows in the order of ids
    /<category>/ids      utf-8 strings (n,)         image file names, sorted
    attrs                size, crop, resample, decoder, n_images (stored), n_skipped (missing or corrupt)

Every category listed gets a group, also when none of its images could be used (n = 0), so
the stage that embeds it can name the empty category.
"""

import logging
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np

from vlbias.errors import InputError
from vlbias.images.decode import CROPS, DECODERS, RESAMPLING, ImageDecodeError, prepare
from vlbias.io.fetch import sha256_file
from vlbias.io.hdf5 import atomic_hdf5
from vlbias.logs import FILE_ONLY

log = logging.getLogger(__name__)
_STR = h5py.string_dtype("utf-8")


def store_name(size, crop, resample, decoder):
    """The name of an image store by what it holds: "32px-top-left-area-opencv", "224px-center-bicubic-pil"."""
    return f"{size}px-{crop}-{resample}-{decoder}"


def _process(entry, size, crop, resample, decoder):
    """(status row, pixels or None) for one entry."""
    row = {"category": entry["category"], "file": entry["file"], "status": "ok", "reason": "", "sha256": "",
           "decoder": decoder}
    if not entry.get("path"):
        return {**row, "status": "missing", "reason": entry.get("reason") or "not obtained"}, None
    try:
        row["sha256"] = sha256_file(entry["path"])
    except OSError as e:
        return {**row, "status": "missing", "reason": f"cannot read {entry['path']} ({e.strerror})"}, None
    try:
        return row, prepare(entry["path"], size, crop, resample, decoder)
    except ImageDecodeError as e:
        return {**row, "status": "corrupt", "reason": e.reason}, None


def build_image_store(entries, out_path, size, crop="center", workers=2, resample="bicubic", decoder="pil"):
    """Decode ``entries`` into the HDF5 store ``out_path``; one status row per entry, in order.

    ``resample``: ``bicubic`` or ``bilinear`` (Pillow's), or ``area`` (OpenCV's INTER_AREA, the iEAT authors' resizing);
    ``decoder``: ``opencv`` (the iEAT authors' cv2.imread) or ``pil`` (see vlbias.images.decode.prepare).

    ``entries``: dicts with ``category``, ``file``, ``path`` (None when the file could not be
    obtained) and optionally ``reason`` (why not). Status is "ok", "missing" or "corrupt", with
    the reason, the sha256 of the file used and the decoder. An image whose content repeats an earlier one
    (by file name) of its category is kept, with reason "duplicate of <file>".
    """
    if crop not in CROPS:
        raise ValueError(f"unknown crop mode '{crop}' (known: {', '.join(CROPS)})")
    if resample not in RESAMPLING:
        raise ValueError(f"unknown resampling '{resample}' (known: {', '.join(RESAMPLING)})")
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder '{decoder}' (known: {', '.join(DECODERS)})")
    entries = list(entries)
    by_category = defaultdict(list)
    for i, e in enumerate(entries):
        by_category[e["category"]].append(i)
    status = [None] * len(entries)
    with atomic_hdf5(out_path) as f, ThreadPoolExecutor(max(1, workers)) as pool:
        for category in sorted(by_category):
            order = sorted(by_category[category], key=lambda i: entries[i]["file"])
            files = [entries[i]["file"] for i in order]
            repeated = sorted(x for x, n in Counter(files).items() if n > 1)
            if repeated:
                raise InputError(category, f"image file(s) listed twice: {', '.join(repeated)}")
            ids, pixels, first = [], [], {}
            rows = pool.map(lambda i: _process(entries[i], size, crop, resample, decoder), order)
            for i, (row, array) in zip(order, rows):
                if array is not None:
                    if row["sha256"] in first:
                        row["reason"] = f"duplicate of {first[row['sha256']]}"
                    first.setdefault(row["sha256"], row["file"])
                    ids.append(row["file"])
                    pixels.append(array)
                else:
                    log.warning("%s/%s: %s: %s", category, row["file"], row["status"], row["reason"], extra=FILE_ONLY)
                status[i] = row
            g = f.create_group(category)
            g.create_dataset("pixels", data=np.stack(pixels) if pixels else np.zeros((0, size, size, 3), np.uint8))
            g.create_dataset("ids", data=np.array(ids, dtype=object), dtype=_STR)
            log.info("%s: %d of %d images", category, len(ids), len(order), extra=FILE_ONLY)
        n_ok = sum(r["status"] == "ok" for r in status)
        f.attrs.update({"size": size, "crop": crop, "resample": resample, "decoder": decoder, "n_images": n_ok,
                        "n_skipped": len(status) - n_ok})
    return status
