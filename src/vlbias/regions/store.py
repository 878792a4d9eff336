"""The region store of a dataset: every kept box of every image, from one detector, in one HDF5 file.

Layout (ragged: image i owns rows start[i] : start[i] + count[i] of every /regions dataset)::

    /images/id            utf-8 (n_images,)   "<test>/<role>/<file>", sorted
    /images/height        int32 (n_images,)   original image size in pixels
    /images/width         int32 (n_images,)
    /images/start         int64 (n_images,)   first row of the image in /regions
    /images/count         int32 (n_images,)   its number of boxes
    /regions/boxes        float32 (N, 4)      x1, y1, x2, y2 in original-image pixels
    /regions/boxes_norm   float32 (N, 4)      the same divided by width, height, width, height
    /regions/features     float32 (N, D)      pooled region features
    /regions/class_id     int64 (N,)          index into /classes
    /regions/class_score  float32 (N,)
    /regions/attr_id      int64 (N,)          index into /attributes (detectors with attributes only)
    /regions/attr_score   float32 (N,)        (detectors with attributes only)
    /regions/is_person    bool (N,)           class name in the detector's person_classes
    /classes              utf-8               class names (no background)
    /attributes           utf-8               attribute names (detectors with attributes only)
    /skipped/id, /skipped/reason   utf-8      images listed as obtained that could not be decoded
    attrs   detector (config name), adapter, model, settings (JSON), weights (sha256 or "random"),
            min_boxes, max_boxes, conf, feature_dim, n_images, n_regions, n_skipped, manifest_sha256

Rows are appended per batch to resizable datasets, so writing takes memory for one batch only. The
/regions rows of an image are where it was added (a TSV's order, vlbias.regions.tsv); /images is
sorted by id when the store is closed.
"""

import json
from contextlib import contextmanager

import h5py
import numpy as np

from vlbias.errors import InputError
from vlbias.io.fetch import write_manifest
from vlbias.io.hdf5 import atomic_hdf5, open_hdf5
from vlbias.visual import Regions

_STR = h5py.string_dtype("utf-8")
PERSON_COLUMNS = ["id", "n_regions", "n_person", "person"]


class RegionWriter:
    """Appends (image id, Regions) rows to an open HDF5 file; see ``write_region_store``."""

    def __init__(self, f, detector):
        self.f, self.detector = f, detector
        self.attrs = detector.attribute_names is not None
        self.person = np.array([n in detector.person_classes for n in detector.class_names], dtype=bool)
        d = detector.feature_dim
        images = {"id": ((), _STR), "height": ((), np.int32), "width": ((), np.int32),
                  "start": ((), np.int64), "count": ((), np.int32)}
        regions = {"boxes": ((4,), np.float32), "boxes_norm": ((4,), np.float32), "features": ((d,), np.float32),
                   "class_id": ((), np.int64), "class_score": ((), np.float32), "is_person": ((), bool)}
        if self.attrs:
            regions |= {"attr_id": ((), np.int64), "attr_score": ((), np.float32)}
        for group, fields in (("images", images), ("regions", regions), ("skipped", {"id": ((), _STR),
                                                                                    "reason": ((), _STR)})):
            for name, (shape, dtype) in fields.items():
                rows = max(1, (1 << 20) // (4 * int(np.prod(shape)))) if shape else 4096  # ~1 MiB chunks
                f.create_dataset(f"{group}/{name}", shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                 chunks=(rows, *shape))
        f.create_dataset("classes", data=list(detector.class_names), dtype=_STR)
        if self.attrs:
            f.create_dataset("attributes", data=list(detector.attribute_names), dtype=_STR)
        self.n_images = self.n_regions = self.n_skipped = 0
        # attributes known only once every image is written (a TSV file's sha256, read in the same pass)
        self.provenance = {}

    def _append(self, name, values):
        ds = self.f[name]
        n = len(ds)
        ds.resize(n + len(values), axis=0)
        ds[n:] = values

    def add(self, batch):
        """Append ``batch``, a list of (image id, Regions)."""
        if not batch:
            return
        ids, counts, heights, widths = [], [], [], []
        for image_id, r in batch:
            n = len(r.boxes)
            if r.boxes.shape != (n, 4) or r.features.shape != (n, self.detector.feature_dim) or \
                    r.class_ids.shape != (n,) or r.class_scores.shape != (n,):
                raise ValueError(f"{image_id}: inconsistent Regions: boxes {r.boxes.shape}, features "
                                 f"{r.features.shape}, class_ids {r.class_ids.shape}, class_scores "
                                 f"{r.class_scores.shape} (feature_dim {self.detector.feature_dim})")
            ids.append(image_id)
            counts.append(n)
            heights.append(r.image_size[0])
            widths.append(r.image_size[1])
        starts = self.n_regions + np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._append("images/id", ids)
        self._append("images/height", heights)
        self._append("images/width", widths)
        self._append("images/start", starts)
        self._append("images/count", counts)
        boxes = np.concatenate([r.boxes for _, r in batch]).astype(np.float32).reshape(-1, 4)
        scale = np.repeat(np.array([[w, h, w, h] for h, w in zip(heights, widths)], np.float32), counts, axis=0)
        class_ids = np.concatenate([r.class_ids for _, r in batch]).astype(np.int64)
        self._append("regions/boxes", boxes)
        self._append("regions/boxes_norm", boxes / scale)
        self._append("regions/features", np.concatenate([r.features for _, r in batch]).astype(np.float32))
        self._append("regions/class_id", class_ids)
        self._append("regions/class_score", np.concatenate([r.class_scores for _, r in batch]).astype(np.float32))
        self._append("regions/is_person", self.person[class_ids])
        if self.attrs:
            self._append("regions/attr_id", np.concatenate([r.attr_ids for _, r in batch]).astype(np.int64))
            self._append("regions/attr_score", np.concatenate([r.attr_scores for _, r in batch]).astype(np.float32))
        self.n_images += len(batch)
        self.n_regions += int(sum(counts))

    def sort_images(self):
        """Order /images by id, the store's layout, whatever order the images were added in (their
        /regions rows stay where they are: ``start`` and ``count`` find them)."""
        g = self.f["images"]
        ids = g["id"][()]  # UTF-8 bytes, whose order is the ids' code point order, as sorted() of str
        order = np.argsort(ids, kind="stable")
        if (order != np.arange(len(order))).any():
            for name in g:
                g[name][...] = g[name][()][order]

    def skip(self, image_id, reason):
        self._append("skipped/id", [image_id])
        self._append("skipped/reason", [reason])
        self.n_skipped += 1


@contextmanager
def write_region_store(path, detector, provenance=None):
    """Yield a RegionWriter on a new store at ``path``; the file appears only if the block succeeds.

    ``provenance`` (e.g. ``detector``: the config name, ``manifest_sha256``) is stored as attributes
    beside the detector's own (adapter, model, settings, weights, box rule, sizes, counts).
    """
    settings = detector.settings
    missing = [k for k in ("adapter", "min_boxes", "max_boxes", "conf") if k not in settings]
    if missing:  # checked before any image is processed
        raise ValueError(f"detector {detector.name}: its settings lack {', '.join(missing)}")
    attrs = {k: settings[k] for k in ("adapter", "min_boxes", "max_boxes", "conf")} | {
        "model": detector.name, "settings": json.dumps(settings, sort_keys=True, default=str),
        "weights": detector.weights, "feature_dim": detector.feature_dim, **(provenance or {})}
    with atomic_hdf5(path) as f:
        writer = RegionWriter(f, detector)
        yield writer
        writer.sort_images()
        f.attrs.update(attrs | writer.provenance | {"n_images": writer.n_images, "n_regions": writer.n_regions,
                                "n_skipped": writer.n_skipped})


def _strings(ds):
    return [s.decode() if isinstance(s, bytes) else s for s in ds[()]]


class RegionStore:
    """Read a region store: ``ids``, ``get(image_id) -> (Regions, is_person)``, ``boxes_norm(image_id)``.

    Use as a context manager (or call ``close``); the file stays open for fast random access.
    """

    def __init__(self, path):
        self.path = path
        try:
            self.f = open_hdf5(path)
        except OSError as e:
            raise InputError(path, f"cannot open region store ({e})") from None
        self.ids = _strings(self.f["images/id"])
        self._row = {i: n for n, i in enumerate(self.ids)}
        self._start = self.f["images/start"][()]
        self._count = self.f["images/count"][()]
        self._size = np.stack([self.f["images/height"][()], self.f["images/width"][()]], axis=1)
        self.class_names = _strings(self.f["classes"])
        self.attribute_names = _strings(self.f["attributes"]) if "attributes" in self.f else None
        self.attrs = dict(self.f.attrs)
        self.skipped = dict(zip(_strings(self.f["skipped/id"]), _strings(self.f["skipped/reason"])))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.f.close()

    def _rows(self, image_id):
        if image_id not in self._row:
            why = f"skipped: {self.skipped[image_id]}" if image_id in self.skipped else "not in the store"
            raise InputError(image_id, f"no regions in {self.path} ({why})")
        n = self._row[image_id]
        return n, slice(int(self._start[n]), int(self._start[n] + self._count[n]))

    def get(self, image_id):
        """(Regions, is_person bool (n,)) of one image, its boxes in the detector's order."""
        n, rows = self._rows(image_id)
        g = self.f["regions"]
        attrs = "attr_id" in g
        return Regions(
            boxes=g["boxes"][rows], features=g["features"][rows], class_ids=g["class_id"][rows],
            class_scores=g["class_score"][rows], image_size=tuple(int(v) for v in self._size[n]),
            attr_ids=g["attr_id"][rows] if attrs else None, attr_scores=g["attr_score"][rows] if attrs else None,
        ), g["is_person"][rows]

    def boxes_norm(self, image_id):
        """float32 (n, 4) boxes divided by the image's width and height (VisualBERT/LXMERT's positions)."""
        return self.f["regions/boxes_norm"][self._rows(image_id)[1]]


def write_person_list(store_path, out_path):
    """The masking list: per image its number of regions and the indices (within the image) of
    the regions that show people, comma-separated; written atomically as TSV."""
    with open_hdf5(store_path) as f:
        ids, starts, counts = _strings(f["images/id"]), f["images/start"][()], f["images/count"][()]
        is_person = f["regions/is_person"][()]
    rows = []
    for image_id, start, count in zip(ids, starts, counts):
        person = np.flatnonzero(is_person[start:start + count])
        rows.append({"id": image_id, "n_regions": int(count), "n_person": len(person),
                     "person": ",".join(map(str, person))})
    write_manifest(out_path, rows, PERSON_COLUMNS)
    return rows
