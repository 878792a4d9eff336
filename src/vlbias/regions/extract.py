"""Region extraction: decode and prepare images in threads while the detector runs, stream to the store.

    entries = manifest_entries("results/images/grounded/<dataset>/manifest.tsv")
    summary = extract_regions(entries, build(spec), "results/regions/<dataset>/<detector>.h5", batch_size=4)

Decoding (vlbias.images.decode.load_rgb) and ``detector.prepare`` (resize, normalise) run in a
pool of ``workers`` threads, up to ``prefetch`` batches ahead of the batch the detector is working
on; so the CPU-side work overlaps inference, and memory holds a bounded number of images whatever
the size of the dataset. Images are processed in sorted id order, so a store is deterministic.
"""

import logging
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor

from vlbias.errors import InputError
from vlbias.images.decode import load_rgb
from vlbias.io.fetch import read_manifest
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


def _load(detector, path):
    """(prepared input, None) or (None, why the image is unusable)."""
    try:
        return detector.prepare(load_rgb(path)), None
    except InputError as e:  # ImageDecodeError carries the reason without the file name
        return None, getattr(e, "reason", str(e))


def extract_regions(entries, detector, out_path, batch_size, workers=2, prefetch=2, provenance=None):
    """Detect regions in every image of ``entries`` ((image id, path) pairs) into the store ``out_path``.

    An image that cannot be decoded is skipped and recorded in the store (/skipped) with the reason.
    Returns {"n_images", "n_regions", "n_skipped", "seconds", "detect_seconds"} (the time in
    ``detector.detect``; the rest went to waiting for decoding and to writing).
    """
    if batch_size < 1 or workers < 1 or prefetch < 0:
        raise ValueError(f"need batch_size >= 1, workers >= 1, prefetch >= 0; got {batch_size}, {workers}, "
                         f"{prefetch}")
    entries = sorted(entries)
    repeated = sorted(i for i, n in Counter(i for i, _ in entries).items() if n > 1)
    if repeated:
        raise InputError(out_path, f"image ids listed twice: {repeated}")
    window = batch_size * (prefetch + 1)  # images decoded or queued at any time
    started, in_detect = time.perf_counter(), 0.0
    with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool, \
            write_region_store(out_path, detector, provenance) as store:
        todo, pending, batch = iter(entries), deque(), []

        def refill():
            for image_id, path in todo:
                pending.append((image_id, pool.submit(_load, detector, path)))
                if len(pending) >= window:
                    return

        def run():
            nonlocal in_detect
            t = time.perf_counter()
            regions = detector.detect([x for _, x in batch])
            in_detect += time.perf_counter() - t
            if len(regions) != len(batch):
                raise RuntimeError(f"detector {detector.name} returned {len(regions)} results for {len(batch)} "
                                   "images")
            store.add([(image_id, r) for (image_id, _), r in zip(batch, regions)])
            batch.clear()
            done = store.n_images + store.n_skipped
            log.info("%d/%d images, %.2f images/s", done, len(entries), done / (time.perf_counter() - started))

        try:
            refill()
            while pending:
                image_id, future = pending.popleft()
                refill()
                x, reason = future.result()
                if x is None:
                    log.warning("%s: skipped: %s", image_id, reason)
                    store.skip(image_id, reason)
                    continue
                batch.append((image_id, x))
                if len(batch) == batch_size:
                    run()
            if batch:
                run()
        except BaseException:
            for _, future in pending:
                future.cancel()
            raise
        summary = {"n_images": store.n_images, "n_regions": store.n_regions, "n_skipped": store.n_skipped}
    return summary | {"seconds": time.perf_counter() - started, "detect_seconds": in_detect}
