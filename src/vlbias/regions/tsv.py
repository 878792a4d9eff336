"""Region stores read from bottom-up-attention TSV files: the region features that 2019-2021
vision-language projects released (LXMERT's COCO ``val2014_obj36.tsv``, ...) instead of a detector run.

    source = TsvSource({"objects_vocab": ..., "attributes_vocab": ..., "fields": "lxmert"})
    summary = read_tsv_regions("val2014_obj36.tsv", entries, source, "results/regions/coco/lxmert-obj36.h5")

The format (peteanderson80/bottom-up-attention tools/generate_tsv.py; LXMERT's extract_coco_image.py
adds the labels): one image per line, tab-separated, no header, the columns in a fixed order that
the reader must be told (``fields``: LXMERT_FIELDS, or BOTTOM_UP_FIELDS, or a list). Integers are
written as text; arrays as base64 of their raw bytes: ``boxes`` float32 (num_boxes, 4) x1, y1, x2,
y2 in pixels, ``features`` float32 (num_boxes, feature_dim), ``objects_id`` int64 and
``objects_conf`` float32 (num_boxes,), ``attrs_id`` int64 and ``attrs_conf`` float32 (optional).
A line holds ~400 KB (36 x 2048 floats), beyond the csv module's default field size limit, which
the upstream readers raise (csv.field_size_limit(sys.maxsize)); no field is ever quoted, so lines
are split on tabs directly, with no limit, twice as fast as the csv module.

Labels: LXMERT's extraction stores ``argmax(cls_prob[:, 1:])`` and ``argmax(attr_prob[:, 1:])``,
ids counting from the first object (attribute) name, which is the store's convention
(vlbias.visual.Regions: no background), so they are kept as they are: the true labels. (Ross et al.'s code
read them one class early: protocol switch ``label_offset``, docs/grounded.md row 13.) Boxes are
kept in the file's order (the model reads them in that order), not re-sorted by score.

Every line is checked, wanted or not; a malformed one is an InputError naming the file, the line
and the field. The store holds the images of the acquisition manifest; those the TSV lacks are
recorded as skipped ("not in <file>").
"""

import base64
import binascii
import hashlib
import logging
import re
import time
from pathlib import Path

import numpy as np

from vlbias.errors import InputError
from vlbias.regions.genome import PERSON_CLASSES, read_vocab
from vlbias.regions.store import write_region_store
from vlbias.visual import Regions

log = logging.getLogger(__name__)

# the column orders of the released files: LXMERT's (extract_coco_image.py FIELDNAMES, its loader's
# FIELDNAMES) and generate_tsv.py's followed by the label columns
LXMERT_FIELDS = ("img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes",
                 "boxes", "features")
BOTTOM_UP_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features", "objects_id", "objects_conf",
                    "attrs_id", "attrs_conf")
FIELD_ORDERS = {"lxmert": LXMERT_FIELDS, "bottom-up": BOTTOM_UP_FIELDS}
ALIASES = {"img_id": "image_id", "img_h": "image_h", "img_w": "image_w"}  # LXMERT's names of the same columns
REQUIRED = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features", "objects_id", "objects_conf")
# base64 arrays: dtype, values per box (None: feature_dim)
ARRAYS = {"boxes": (np.float32, 4), "features": (np.float32, None), "objects_id": (np.int64, 1),
          "objects_conf": (np.float32, 1), "attrs_id": (np.int64, 1), "attrs_conf": (np.float32, 1)}
# COCO's file names and the TSVs' ids: "COCO_val2014_000000462928(.jpg)" or the bare number
COCO_ID = re.compile(r"^(?:COCO_[a-z]+\d{4}_)?0*(\d+)$")
WRITE_BATCH = 32  # wanted images held before they are written: ~10 MiB of 36 x 2048 features
# a line longer is refused before it is read whole: 1,000 boxes of 2,048 features are 11 MiB of base64 (the
# released lines hold 10 to 100 boxes, 0.1 to 1.1 MiB); a line of 200 MB took 16 s and 690 MiB to refuse
MAX_LINE_BYTES = 16 * 2**20


def column_names(fields):
    """The canonical column names of ``fields`` (a FIELD_ORDERS name or a list), checked."""
    names = FIELD_ORDERS.get(fields, fields) if isinstance(fields, str) else fields
    if not isinstance(names, (list, tuple)) or isinstance(fields, str) and fields not in FIELD_ORDERS:
        raise InputError(f"fields '{fields}'", f"must be one of {', '.join(FIELD_ORDERS)} or a list of column names")
    names = [ALIASES.get(n, n) for n in names]
    unknown = [n for n in names if n not in ("image_id", "image_w", "image_h", "num_boxes", *ARRAYS)]
    missing = [n for n in REQUIRED if n not in names]
    if unknown or missing or len(set(names)) != len(names) or ("attrs_id" in names) != ("attrs_conf" in names):
        raise InputError(f"fields {list(names)}", f"unknown {unknown}, missing {missing}, each once, attrs_id "
                                                  "with attrs_conf")
    return names


def image_key(name, image_ids, file):
    """The key that matches a TSV image id and a manifest file name, or None if ``name`` has none.

    ``coco``: COCO's image number, from "COCO_val2014_000000462928", that with ".jpg", or "462928"
    (releases write either; numbers are unique across COCO's splits). ``stem``: a manifest ``file``
    name without its extension (from its last dot), a TSV id as it is: the id "img.v1" is the image
    of the file "img.v1.jpg".
    """
    if image_ids == "stem":
        return (name.rsplit(".", 1)[0] if file else name) or None
    for candidate in (name, name.rsplit(".", 1)[0]):
        if match := COCO_ID.match(candidate):
            return int(match.group(1))
    return None


class TsvSource:
    """What a region store records of its origin (the detector interface of write_region_store),
    for a TSV source entry of the config (regions/tsv/<name>)."""

    def __init__(self, spec):
        # the same vocabularies and person classes as the bua detector (vlbias.regions.genome)
        self.fields = column_names(spec.get("fields", "lxmert"))
        self.image_ids = spec.get("image_ids", "coco")
        if self.image_ids not in ("coco", "stem"):
            raise InputError(f"image_ids '{self.image_ids}'", "must be coco or stem")
        self.feature_dim = int(spec.get("feature_dim", 2048))
        self.class_names, objects_sha = read_vocab(spec, "objects_vocab", int(spec.get("num_classes", 1600)), False,
                                               "object")
        self.attribute_names, attributes_sha = None, None
        if "attrs_id" in self.fields:
            self.attribute_names, attributes_sha = read_vocab(spec, "attributes_vocab",
                                                          int(spec.get("num_attributes", 400)), False, "attribute")
        self.person_classes = frozenset(PERSON_CLASSES & set(self.class_names))
        self.name, self.weights = "tsv", "released"
        self.settings = {
            "adapter": "tsv", "fields": self.fields, "image_ids": self.image_ids, "feature_dim": self.feature_dim,
            "objects_vocab": spec.get("objects_vocab"), "objects_vocab_sha256": objects_sha,
            "attributes_vocab": spec.get("attributes_vocab"), "attributes_vocab_sha256": attributes_sha,
            # what the extraction used, as its authors state it (the file does not say)
            "min_boxes": int(spec.get("min_boxes", 0)), "max_boxes": int(spec.get("max_boxes", 0)),
            "conf": float(spec.get("conf", "nan")),
            "labels": "objects_id as stored: argmax of cls_prob[:, 1:] (no background)",
        }

    def parse(self, row, where):
        """(image id, Regions) of one TSV line ``row`` (its fields as bytes); ``where`` "<file>:<line>"."""
        if len(row) != len(self.fields):
            raise InputError(where, f"has {len(row)} tab-separated fields, expected {len(self.fields)} "
                                    f"({', '.join(self.fields)})")
        item = dict(zip(self.fields, row))
        try:
            image_id = item["image_id"].decode("ascii")
        except UnicodeDecodeError:
            raise InputError(where, "field 'image_id': not ASCII text") from None
        if not image_id:
            raise InputError(where, "field 'image_id': empty")
        sizes = {}
        for key in ("image_w", "image_h", "num_boxes"):
            try:
                sizes[key] = int(item[key])
            except ValueError:
                raise InputError(where, f"field '{key}': not an integer: {item[key][:40].decode(errors='replace')!r}") \
                    from None
            if sizes[key] < (0 if key == "num_boxes" else 1):
                raise InputError(where, f"field '{key}': {sizes[key]} out of range")
        n = sizes["num_boxes"]
        arrays = {}
        for key in (k for k in ARRAYS if k in item):
            dtype, per_box = ARRAYS[key]
            per_box = per_box or self.feature_dim
            try:
                raw = base64.b64decode(item[key], validate=True)
            except (binascii.Error, ValueError) as e:
                raise InputError(where, f"field '{key}': not base64 ({e})") from None
            itemsize = np.dtype(dtype).itemsize
            if len(raw) != n * per_box * itemsize:
                raise InputError(where, f"field '{key}': {len(raw)} bytes, but num_boxes {n} needs {n} x {per_box} "
                                        f"{np.dtype(dtype).name} = {n * per_box * itemsize}")
            arrays[key] = np.frombuffer(raw, dtype=dtype).reshape((n, per_box) if per_box > 1 else (n,))
        for key in ("boxes", "features", "objects_conf", "attrs_conf"):
            if key in arrays and not np.isfinite(arrays[key]).all():
                raise InputError(where, f"field '{key}': not all finite (NaN or infinite values)")
        for key in ("objects_conf", "attrs_conf"):
            if key in arrays and not ((0 <= arrays[key]) & (arrays[key] <= 1)).all():
                raise InputError(where, f"field '{key}': scores outside [0, 1] "
                                        f"({arrays[key].min():g}..{arrays[key].max():g})")
        boxes, w, h = arrays["boxes"], sizes["image_w"], sizes["image_h"]
        if n and not ((0 <= boxes[:, :2]) & (boxes[:, :2] <= boxes[:, 2:]) & (boxes[:, 2:] <= [w, h])).all():
            raise InputError(where, f"field 'boxes': not all 0 <= x1 <= x2 <= image_w ({w}), 0 <= y1 <= y2 <= "
                                    f"image_h ({h})")
        for key, names in (("objects_id", self.class_names), ("attrs_id", self.attribute_names)):
            ids = arrays.get(key)
            if ids is not None and ids.size and not (0 <= ids.min() and ids.max() < len(names)):
                raise InputError(where, f"field '{key}': ids {ids.min()}..{ids.max()} do not index the "
                                        f"{len(names)} names")
        return image_id, Regions(
            boxes=arrays["boxes"], features=arrays["features"], class_ids=arrays["objects_id"],
            class_scores=arrays["objects_conf"], image_size=(sizes["image_h"], sizes["image_w"]),
            attr_ids=arrays.get("attrs_id"), attr_scores=arrays.get("attrs_conf"))


def read_tsv_regions(tsv, entries, source, out_path, provenance=None):
    """Write the store ``out_path`` of ``entries`` ((image id "<test>/<role>/<file>", path) pairs, the
    acquisition manifest's) from the TSV file ``tsv``; images it lacks are recorded as skipped.

    The manifest's file name and the TSV's image id meet by ``image_key``. The file is read once,
    each wanted image written as it is parsed (WRITE_BATCH at a time), so memory stays flat in the
    file's size (a released val2014 file holds ~40.5k images of 0.3 MiB); its sha256 is taken in
    the same pass. The store appears only when every line has been checked (vlbias.io.hdf5).
    Returns {"n_images", "n_regions", "n_skipped", "n_lines", "tsv_sha256", "seconds"}.
    """
    started = time.perf_counter()
    wanted = {}
    for image_id, _ in entries:
        key = image_key(image_id.rsplit("/", 1)[-1], source.image_ids, file=True)
        if key is None:
            raise InputError(image_id, f"its file name has no image id of the kind image_ids: {source.image_ids}")
        wanted.setdefault(key, []).append(image_id)
    lines = {}  # key -> the line it was read from
    if not Path(tsv).is_file():
        raise InputError(tsv, "TSV file not found (the released features are yours to download: docs/regions.md)")
    sha256 = hashlib.sha256()
    with write_region_store(out_path, source, {"tsv": str(tsv), **(provenance or {})}) as store, \
            open(tsv, "rb") as f:
        batch = []
        for line_num, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            where = f"{tsv}:{line_num}"
            if len(line) > MAX_LINE_BYTES:
                raise InputError(where, f"longer than {MAX_LINE_BYTES:,} bytes: not a line of region features")
            sha256.update(line)
            tsv_id, regions = source.parse(line.rstrip(b"\r\n").split(b"\t"), where)
            key = image_key(tsv_id, source.image_ids, file=False)
            if key is None:
                raise InputError(where, f"field 'image_id': {tsv_id[:60]!r} is no image id of the kind "
                                        f"image_ids: {source.image_ids}")
            if key in lines:
                raise InputError(where, f"field 'image_id': {tsv_id!r} is image {key}, already on line {lines[key]}")
            lines[key] = line_num
            batch.extend((image_id, regions) for image_id in wanted.get(key, ()))
            if len(batch) >= WRITE_BATCH:
                store.add(batch)
                batch = []
        store.add(batch)
        for image_id, _ in sorted(entries):
            if image_key(image_id.rsplit("/", 1)[-1], source.image_ids, file=True) not in lines:
                store.skip(image_id, f"not in {Path(tsv).name}")
        sha = store.provenance["tsv_sha256"] = sha256.hexdigest()
        summary = {"n_images": store.n_images, "n_regions": store.n_regions, "n_skipped": store.n_skipped}
    return summary | {"n_lines": len(lines), "tsv_sha256": sha, "seconds": time.perf_counter() - started}
