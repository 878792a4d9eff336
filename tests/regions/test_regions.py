"""Region features: the box rule, torchvision's Faster R-CNN adapter on random weights, the HDF5
store, the masking list and the threaded extraction pipeline (on a fake detector whose output is
known)."""

import threading

import h5py
import numpy as np
import pytest
import torch
from PIL import Image

from vlbias.errors import InputError
from vlbias.io.fetch import read_manifest
from vlbias.regions import build, register
from vlbias.regions.extract import extract_regions, manifest_entries
from vlbias.regions.store import RegionStore, write_person_list
from vlbias.visual import Regions, keep_boxes, regions_with_labels

TINY = {"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 3, "max_boxes": 8, "conf": 0.2,
        "min_size": 64, "max_size": 128, "device": "cpu"}


# --- the box rule -------------------------------------------------------------------------------

@pytest.mark.parametrize("scores,lo,hi,conf,expected", [
    ([0.1, 0.9, 0.5, 0.3], 1, 10, 0.4, [1, 2]),          # above conf, best first
    ([0.1, 0.9, 0.5, 0.3], 3, 10, 0.4, [1, 2, 3]),       # topped up to min_boxes
    ([0.1, 0.9, 0.5, 0.3], 1, 1, 0.0, [1]),              # capped at max_boxes
    ([0.1, 0.9, 0.5, 0.3], 2, 2, 0.99, [1, 2]),          # fixed K whatever conf
    ([0.1, 0.9], 5, 5, 0.0, [1, 0]),                     # fewer candidates than min_boxes: all
    ([0.5, 0.5, 0.5], 0, 10, 0.5, [0, 1, 2]),            # ties: score >= conf, stable order
    ([], 2, 4, 0.2, []),
])
def test_keep_boxes(scores, lo, hi, conf, expected):
    assert keep_boxes(np.array(scores, dtype=np.float32), lo, hi, conf).tolist() == expected


def test_regions_with_labels_is_the_labels_image_mask():
    """Switch image_mask: labels (docs/grounded.md row 5): a region is masked when its class name is
    one of the test's region labels; offset -1 is the authors' off-by-one reading of LXMERT's ids."""
    names = ["yolk", "man", "shirt", "woman", "office"]  # as the store keeps them: no background
    ids = np.array([1, 2, 4, 0, 3, 1])
    labels = ["man", "woman", "Office", "people"]  # the test's words and person words, case-sensitive
    np.testing.assert_array_equal(regions_with_labels(ids, names, labels), [1, 0, 0, 0, 1, 1])
    # offset -1: each region reads the name of the class before it (class 0 reads "background")
    np.testing.assert_array_equal(regions_with_labels(ids, names, labels, offset=-1), [0, 1, 1, 0, 0, 0])
    assert regions_with_labels(np.zeros(0, np.int64), names, labels).shape == (0,)
    with pytest.raises(ValueError, match="class ids must index the 5 class names"):
        regions_with_labels([5], names, labels)


def test_keep_boxes_rejects_bad_bounds():
    with pytest.raises(ValueError, match="min_boxes"):
        keep_boxes([0.5], 3, 2, 0.1)


# --- torchvision Faster R-CNN ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def frcnn():
    return build(TINY)


def rgb(h, w, seed):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


def test_torchvision_detector_interface(frcnn):
    assert frcnn.feature_dim == 1024 and frcnn.weights == "random" and frcnn.attribute_names is None
    assert len(frcnn.class_names) == 90 and frcnn.class_names[0] == "person"
    assert frcnn.person_classes == {"person"}
    images = [rgb(48, 80, 0), rgb(100, 60, 1)]
    out = frcnn.detect([frcnn.prepare(im) for im in images])
    assert len(out) == 2
    for r, im in zip(out, images):
        n = len(r.boxes)
        assert 3 <= n <= 8 and r.image_size == (im.height, im.width)
        assert r.boxes.dtype == np.float32 and r.features.shape == (n, 1024) and r.features.dtype == np.float32
        assert r.class_ids.dtype == np.int64 and r.class_scores.shape == (n,) and r.attr_ids is None
        assert np.all(np.diff(r.class_scores) <= 0) and np.isfinite(r.features).all()
        assert np.all(r.boxes[:, 2] >= r.boxes[:, 0]) and np.all(r.boxes[:, 3] >= r.boxes[:, 1])
        assert np.all(r.boxes >= 0) and np.all(r.boxes[:, [0, 2]] <= im.width)
        assert np.all(r.boxes[:, [1, 3]] <= im.height)


def test_torchvision_top_box_matches_torchvisions_own_forward(frcnn):
    # the best box over all proposals and classes is torchvision's own top detection (NMS never
    # removes it); equal boxes also show that prepare resizes as the model does and that boxes
    # are mapped back to original pixels (the image is resized by 4/3 here)
    im = rgb(48, 80, 2)
    ours = frcnn.detect([frcnn.prepare(im)])[0]
    frcnn.model.roi_heads.score_thresh = 0.0
    with torch.inference_mode():
        theirs = frcnn.model([torch.from_numpy(np.array(im)).permute(2, 0, 1).float() / 255])[0]
    frcnn.model.roi_heads.score_thresh = 0.05
    np.testing.assert_allclose(ours.boxes[0], theirs["boxes"][0].numpy(), atol=1e-3)
    assert ours.class_ids[0] + 1 == theirs["labels"][0].item()
    assert ours.class_scores[0] == pytest.approx(theirs["scores"][0].item(), abs=1e-5)


def test_torchvision_checkpoint_and_config_errors(frcnn, tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in frcnn.model.state_dict().items()}, path)
    loaded = build({**{k: v for k, v in TINY.items() if k not in ("weights", "seed")}, "checkpoint": str(path)})
    assert len(loaded.weights) == 64
    x = [frcnn.prepare(rgb(64, 64, 3))]
    np.testing.assert_array_equal(loaded.detect(x)[0].features, frcnn.detect(x)[0].features)
    with pytest.raises(InputError, match="exactly one"):
        build({**TINY, "checkpoint": str(path)})
    with pytest.raises(InputError, match="weights 'COCO_V9'"):
        build({**TINY, "weights": "COCO_V9"})
    with pytest.raises(InputError, match="arch 'maskrcnn'"):
        build({**TINY, "arch": "maskrcnn"})
    with pytest.raises(InputError, match="class_names"):
        build({**TINY, "num_classes": 5})


# --- a detector whose output is known -------------------------------------------------------------

NAMES = ["person", "dog", "man", "cat", "tree"]


@register("fake-test")
class FakeDetector:
    """Boxes, classes and features follow from the image size; counts prepared-but-undetected images."""

    def __init__(self, spec):
        self.name, self.feature_dim, self.weights = "fake", 6, "random"
        self.class_names, self.attribute_names = NAMES, ["red", "round"]
        self.person_classes = frozenset({"person", "man"})
        self.settings = {"adapter": "fake-test", "min_boxes": 1, "max_boxes": 5, "conf": 0.0}
        self.fail_on = spec.get("fail_on")
        self.lock, self.in_flight, self.max_in_flight = threading.Lock(), 0, 0

    def prepare(self, im):
        if im.width == 13:
            raise InputError("image", "too narrow for this detector")
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return im.size

    def detect(self, inputs):
        with self.lock:
            self.in_flight -= len(inputs)
        if any(w == self.fail_on for w, _ in inputs):
            raise RuntimeError("detector failed")
        return [expected_regions(w, h) for w, h in inputs]


def expected_regions(w, h):
    n = 1 + (w + h) % 5
    i = np.arange(n)
    return Regions(
        boxes=np.stack([i, i, w - i, h - i], 1).astype(np.float32),
        features=(w * 100 + h + i[:, None] * np.ones(6)).astype(np.float32),
        class_ids=((w + i) % len(NAMES)).astype(np.int64),
        class_scores=np.linspace(0.9, 0.5, n).astype(np.float32),
        image_size=(h, w),
        attr_ids=(i % 2).astype(np.int64),
        attr_scores=np.full(n, 0.5, np.float32),
    )


SIZES = {"t/x/a.png": (20, 30), "t/x/b.png": (31, 17), "t/y/c.jpg": (25, 25), "t/y/d.png": (40, 22),
         "u/x/e.png": (18, 33), "u/y/f.png": (27, 19), "u/y/g.png": (22, 29)}


@pytest.fixture
def images(tmp_path):
    """(image id, path) of tiny images of known sizes, one HTML page, one missing, one too narrow."""
    entries = []
    for image_id, (w, h) in SIZES.items():
        path = tmp_path / "img" / image_id.replace("/", "_")
        path.parent.mkdir(exist_ok=True)
        rgb(h, w, len(entries)).save(path, format="JPEG" if path.suffix == ".jpg" else "PNG")
        entries.append((image_id, str(path)))
    (tmp_path / "img/page.jpg").write_text("<!DOCTYPE html><html>Not found</html>")
    rgb(10, 13, 0).save(tmp_path / "img/narrow.png")
    entries += [("t/x/page.jpg", str(tmp_path / "img/page.jpg")), ("u/x/gone.png", str(tmp_path / "img/gone.png")),
                ("u/x/narrow.png", str(tmp_path / "img/narrow.png"))]
    return entries[::-1]  # the pipeline sorts


def test_store_schema(images, tmp_path):
    out = tmp_path / "regions/toy/fake.h5"
    summary = extract_regions(images, build({"adapter": "fake-test"}), out, batch_size=3, workers=2,
                              provenance={"detector": "fake-1", "manifest_sha256": "ab" * 32})
    n_regions = sum(1 + (w + h) % 5 for w, h in SIZES.values())
    assert summary["n_images"] == len(SIZES) and summary["n_skipped"] == 3 and summary["n_regions"] == n_regions
    with h5py.File(out) as f:
        ids = [s.decode() for s in f["images/id"][()]]
        assert ids == sorted(SIZES)
        expect = {"images/height": (np.int32, (7,)), "images/width": (np.int32, (7,)),
                  "images/start": (np.int64, (7,)), "images/count": (np.int32, (7,)),
                  "regions/boxes": (np.float32, (n_regions, 4)), "regions/boxes_norm": (np.float32, (n_regions, 4)),
                  "regions/features": (np.float32, (n_regions, 6)), "regions/class_id": (np.int64, (n_regions,)),
                  "regions/class_score": (np.float32, (n_regions,)), "regions/attr_id": (np.int64, (n_regions,)),
                  "regions/attr_score": (np.float32, (n_regions,)), "regions/is_person": (np.bool_, (n_regions,))}
        for name, (dtype, shape) in expect.items():
            assert f[name].dtype == dtype and f[name].shape == shape, name
        assert [s.decode() for s in f["classes"][()]] == NAMES
        assert [s.decode() for s in f["attributes"][()]] == ["red", "round"]
        start, count = f["images/start"][()], f["images/count"][()]
        assert start[0] == 0 and np.array_equal(start[1:], np.cumsum(count)[:-1]) and count.sum() == n_regions
        size = np.repeat(np.stack([f["images/width"][()], f["images/height"][()]] * 2, 1), count, axis=0)
        size = size.astype(np.float32)  # divided in float32, as stored
        np.testing.assert_array_equal(f["regions/boxes_norm"][()], f["regions/boxes"][()] / size)
        assert dict(zip([s.decode() for s in f["skipped/id"][()]], [s.decode() for s in f["skipped/reason"][()]])) \
            .keys() == {"t/x/page.jpg", "u/x/gone.png", "u/x/narrow.png"}
        attrs = dict(f.attrs)
    assert attrs["n_images"] == 7 and attrs["n_regions"] == n_regions and attrs["n_skipped"] == 3
    assert attrs["detector"] == "fake-1" and attrs["adapter"] == "fake-test" and attrs["model"] == "fake"
    assert attrs["weights"] == "random" and attrs["feature_dim"] == 6 and attrs["manifest_sha256"] == "ab" * 32
    assert (attrs["min_boxes"], attrs["max_boxes"], attrs["conf"]) == (1, 5, 0.0) and '"adapter"' in attrs["settings"]


def test_reader_person_flags_and_masking_list(images, tmp_path):
    out = tmp_path / "fake.h5"
    extract_regions(images, build({"adapter": "fake-test"}), out, batch_size=2)
    rows = write_person_list(out, tmp_path / "fake.persons.tsv")
    listed = {r["id"]: r for r in read_manifest(tmp_path / "fake.persons.tsv")}
    assert [r["id"] for r in rows] == sorted(SIZES) == sorted(listed)
    with RegionStore(out) as store:
        assert store.ids == sorted(SIZES) and store.class_names == NAMES
        for image_id, (w, h) in SIZES.items():
            r, is_person = store.get(image_id)
            e = expected_regions(w, h)
            for field in ("boxes", "features", "class_ids", "class_scores", "attr_ids", "attr_scores"):
                np.testing.assert_array_equal(getattr(r, field), getattr(e, field), err_msg=field)
            assert r.image_size == (h, w)
            np.testing.assert_allclose(store.boxes_norm(image_id), e.boxes / [w, h, w, h], rtol=1e-6)
            flagged = [NAMES[c] in ("person", "man") for c in e.class_ids]
            assert is_person.tolist() == flagged
            row = listed[image_id]
            person = [i for i, p in enumerate(flagged) if p]
            assert row["person"] == ",".join(map(str, person))
            assert (int(row["n_regions"]), int(row["n_person"])) == (len(e.boxes), len(person))
        with pytest.raises(InputError, match="t/x/page.jpg: .*skipped: not an image"):
            store.get("t/x/page.jpg")
        assert "too narrow" in store.skipped["u/x/narrow.png"] and "cannot read" in store.skipped["u/x/gone.png"]


def test_extraction_is_deterministic_and_bounded(images, tmp_path):
    stores = []
    for batch_size, workers in [(1, 1), (4, 3)]:
        detector = build({"adapter": "fake-test"})
        out = tmp_path / f"b{batch_size}.h5"
        extract_regions(images, detector, out, batch_size=batch_size, workers=workers, prefetch=1)
        # prepared but not yet detected: the batch being filled, plus at most prefetch + 1 batches queued
        assert detector.max_in_flight <= 3 * batch_size
        with h5py.File(out) as f:
            stores.append({k: f[k][()] for k in ("images/id", "images/start", "regions/boxes", "regions/features")})
    for k in stores[0]:
        np.testing.assert_array_equal(stores[0][k], stores[1][k])


def test_failure_leaves_no_store(images, tmp_path):
    out = tmp_path / "regions/fake.h5"
    with pytest.raises(RuntimeError, match="detector failed"):
        extract_regions(images, build({"adapter": "fake-test", "fail_on": 27}), out, batch_size=2)
    assert not out.exists() and not list(out.parent.glob("*.part"))


def test_manifest_entries(tmp_path):
    cols = "test\trole\tfile\turl\tstatus\treason\tsha256\tbytes\twidth\theight\tpath\n"
    ok = "t\tX\ta.jpg\thttp://x/a.jpg\tok\t\t00\t10\t4\t4\timg/a.jpg\n"
    failed = "t\tA\tb.jpg\thttp://x/b.jpg\tfailed\tHTTP 404\t\t\t\t\t\n"
    m = tmp_path / "manifest.tsv"
    m.write_text(cols + failed + ok)
    assert manifest_entries(m) == [("t/X/a.jpg", "img/a.jpg")]
    m.write_text(cols + ok + ok)
    with pytest.raises(InputError, match="t/X/a.jpg is listed twice"):
        manifest_entries(m)
    m.write_text(cols.replace("\tpath", "\tlocal") + ok)
    with pytest.raises(InputError, match="manifest.tsv: image manifest lacks column"):
        manifest_entries(m)


def test_no_images_gives_an_empty_store(tmp_path):
    # e.g. every image of a dataset failed acquisition: the store and the masking list still exist
    out = tmp_path / "empty.h5"
    assert extract_regions([], build({"adapter": "fake-test"}), out, batch_size=2)["n_images"] == 0
    assert write_person_list(out, tmp_path / "empty.persons.tsv") == []
    with RegionStore(out) as store:
        assert store.ids == [] and store.attrs["n_regions"] == 0
    with h5py.File(out) as f:
        assert f["regions/features"].shape == (0, 6) and f["images/start"].shape == (0,)


def test_a_rerun_detects_only_images_the_cache_has_not_seen(images, tmp_path):
    from vlbias.io.cache import RecordCache
    from vlbias.regions.extract import detector_fingerprint

    detector = build({"adapter": "fake-test"})
    calls = []
    detect = detector.detect
    detector.detect = lambda inputs: calls.append(len(inputs)) or detect(inputs)
    folder = tmp_path / "cache" / detector_fingerprint(detector)
    first = [e for e in images if e[0] != "t/x/a.png"]
    with RecordCache(folder) as cache:
        s1 = extract_regions(first, detector, tmp_path / "first.h5", batch_size=2, cache=cache)
    assert s1["n_cached"] == 0 and sum(calls) == len(SIZES) - 1
    calls.clear()
    with RecordCache(folder) as cache:  # the manifest gained one image: only it meets the detector
        s2 = extract_regions(images, detector, tmp_path / "second.h5", batch_size=2, cache=cache)
    assert calls == [1] and s2["n_cached"] == len(SIZES) - 1 and s2["n_skipped"] == 3
    uncached = tmp_path / "uncached.h5"
    extract_regions(images, build({"adapter": "fake-test"}), uncached, batch_size=3)
    with h5py.File(tmp_path / "second.h5") as a, h5py.File(uncached) as b:
        for name in ("images/id", "images/start", "images/count", "regions/boxes", "regions/features",
                     "regions/class_id", "regions/attr_id", "regions/is_person", "skipped/id"):
            np.testing.assert_array_equal(a[name][()], b[name][()], err_msg=name)


@pytest.mark.parametrize("adapter,remote", [("torchvision", None), ("bua", "model_id"), ("detectron_fpn", "url")])
def test_every_detector_checks_its_box_rule_and_weights_source(adapter, remote):
    entry = {"adapter": adapter, "weights": "random", "min_boxes": 9, "max_boxes": 3, "conf": 0.2}
    with pytest.raises(InputError, match=r"min_boxes/max_boxes: need 0 <= min_boxes <= max_boxes, got 9, 3"):
        build(entry)
    if remote:  # two sources of weights at once
        with pytest.raises(InputError, match=rf"{adapter} detector: set exactly one of `{remote}`"):
            # (as localized: the registry refuses remote weights that did not come through vlbias.weights)
            build({**entry, "min_boxes": 1, remote: "x", "checkpoint": "w.safetensors", "fetched": {}})
        with pytest.raises(InputError, match=rf"weights 'COCO': the only value is `random`; use {remote}"):
            build({**entry, "min_boxes": 1, "weights": "COCO"})
