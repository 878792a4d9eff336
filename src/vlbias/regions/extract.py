"""Region extraction: decode and prepare images in threads while the detector runs, stream to the store.

    entries = manifest_entries("results/images/grounded/<dataset>/manifest.tsv")
    summary = extract_regions(entries, build(spec), "results/regions/<dataset>/<detector>.h5", batch_size=4)

Decoding (vlbias.images.decode.load_rgb) and ``detector.prepare`` (resize, normalise) run in a
pool of ``workers`` threads, up to ``prefetch`` batches ahead of the batch the detector is working
on; so the CPU-side work overlaps inference, and memory holds a bounded number of images whatever
the size of the dataset. Images are processed in sorted id order, so a store is deterministic.

With a ``cache`` (vlbias.io.cache.RecordCache of the detector: ``detector_fingerprint``) an image
whose content the detector has seen is not decoded nor detected again: a rerun after ten images
arrived among ten thousand runs the detector on ten.
"""

import logging
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from vlbias.errors import InputError
from vlbias.images.decode import load_rgb
from vlbias.io.cache import digest
from vlbias.io.fetch import read_manifest, sha256_file
from vlbias.logs import FILE_ONLY, Progress
from vlbias.visual import Regions
from vlbias.regions.store import write_region_store

log = logging.getLogger(__name__)
MANIFEST_COLUMNS = ("test", "role", "file", "status", "path")


def manifest_entries(manifest):
    """Sorted (image id, path) of the images an acquisition manifest lists as obtained (status ok).

    The id is "<test>/<role>/<file>"; images whose acquisition failed are left out.
    """
    rows = read_manifest(manifest)
    missing = [c for c in MANIFEST_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise InputError(manifest, f"image manifest lacks column(s) {', '.join(missing)}")
    entries = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        image_id = f"{row['test']}/{row['role']}/{row['file']}"
        if not row["path"]:
            raise InputError(manifest, f"image {image_id} has status ok but no path")
        if image_id in entries:
            raise InputError(manifest, f"image {image_id} is listed twice")
        entries[image_id] = row["path"]
    return sorted(entries.items())


def detector_fingerprint(detector):
    """What determines a detector's output: its settings, weights, feature size and class names."""
    return digest(detector.settings, detector.weights, detector.feature_dim, list(detector.class_names))


def _to_record(r):
    record = {"boxes": r.boxes, "features": r.features, "class_ids": r.class_ids, "class_scores": r.class_scores,
              "image_size": np.asarray(r.image_size, dtype=np.int64)}
    if r.attr_ids is not None:
        record |= {"attr_ids": r.attr_ids, "attr_scores": r.attr_scores}
    return record


def _from_record(record):
    return Regions(boxes=record["boxes"], features=record["features"], class_ids=record["class_ids"],
                   class_scores=record["class_scores"], image_size=tuple(int(v) for v in record["image_size"]),
                   attr_ids=record.get("attr_ids"), attr_scores=record.get("attr_scores"))


def _load(detector, path, cache):
    """(key, cached Regions or None, prepared input or None, why the image is unusable or None)."""
    try:
        key = digest(sha256_file(path)) if cache is not None else None
    except OSError as e:
        return None, None, None, f"cannot read {path} ({e.strerror})"
    record = cache.get(key) if cache is not None else None
    if record is not None:
        return key, _from_record(record), None, None
    try:
        return key, None, detector.prepare(load_rgb(path)), None
    except InputError as e:  # ImageDecodeError carries the reason without the file name
        return key, None, None, getattr(e, "reason", str(e))


def extract_regions(entries, detector, out_path, batch_size, workers=2, prefetch=2, provenance=None, cache=None):
    """Detect regions in every image of ``entries`` ((image id, path) pairs) into the store ``out_path``.

    An image that cannot be decoded is skipped and recorded in the store (/skipped) with the reason.
    Returns {"n_images", "n_regions", "n_skipped", "n_cached", "seconds", "detect_seconds"} (the time
    in ``detector.detect``; the rest went to waiting for decoding and to writing).
    """
    if batch_size < 1 or workers < 1 or prefetch < 0:
        raise ValueError(f"need batch_size >= 1, workers >= 1, prefetch >= 0; got {batch_size}, {workers}, "
                         f"{prefetch}")
    entries = sorted(entries)
    repeated = sorted(i for i, n in Counter(i for i, _ in entries).items() if n > 1)
    if repeated:
        raise InputError(out_path, f"image ids listed twice: {repeated}")
    window = batch_size * (prefetch + 1)  # images decoded or queued at any time
    started, in_detect, n_cached = time.perf_counter(), 0.0, 0
    progress = Progress(len(entries), "images", log)
    with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool, \
            write_region_store(out_path, detector, provenance) as store:
        todo, pending, batch = iter(entries), deque(), []

        def refill():
            for image_id, path in todo:
                pending.append((image_id, pool.submit(_load, detector, path, cache)))
                if len(pending) >= window:
                    return

        def run():
            """Detect the batch's images not in the cache, then store the batch in id order."""
            nonlocal in_detect
            fresh = [(i, x) for i, (_, _, cached, x) in enumerate(batch) if cached is None]
            if fresh:
                t = time.perf_counter()
                regions = detector.detect([x for _, x in fresh])
                in_detect += time.perf_counter() - t
                if len(regions) != len(fresh):
                    raise RuntimeError(f"detector {detector.name} returned {len(regions)} results for {len(fresh)} "
                                       "images")
                for (i, _), r in zip(fresh, regions):
                    image_id, key, _, _ = batch[i]
                    batch[i] = (image_id, key, r, None)
                    if cache is not None:
                        cache.put(key, _to_record(r))
            store.add([(image_id, r) for image_id, _, r, _ in batch])
            progress.advance(len(batch))
            batch.clear()

        try:
            refill()
            while pending:
                image_id, future = pending.popleft()
                refill()
                key, cached, x, reason = future.result()
                if reason is not None:
                    log.warning("%s: skipped: %s", image_id, reason, extra=FILE_ONLY)
                    store.skip(image_id, reason)
                    progress.advance()
                    continue
                n_cached += cached is not None
                batch.append((image_id, key, cached, x))
                if sum(c is None for _, _, c, _ in batch) == batch_size:
                    run()
            if batch:
                run()
        except BaseException:
            for _, future in pending:
                future.cancel()
            raise
        summary = {"n_images": store.n_images, "n_regions": store.n_regions, "n_skipped": store.n_skipped,
                   "n_cached": n_cached}
    progress.done(f"{n_cached} from the cache" if cache is not None else "")
    return summary | {"seconds": time.perf_counter() - started, "detect_seconds": in_detect}
