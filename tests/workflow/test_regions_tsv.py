"""Region stores read from bottom-up-attention TSV files (vlbias.regions.tsv): a file written here in
the released format (LXMERT's column order, base64 of the raw arrays, as extract_coco_image.py
writes it) read into the store; every kind of malformed line is an error naming file, line, field."""

import base64
import csv
import sys
import types
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import checkout, plain_module

from vlbias.errors import InputError
from vlbias.io.fetch import sha256_file
from vlbias.regions.store import RegionStore
from vlbias.regions.tsv import LXMERT_FIELDS, TsvSource, image_key, read_tsv_regions

N_CLASSES, N_ATTRS, DIM = 12, 5, 8


@pytest.fixture
def spec(tmp_path):
    objects, attrs = tmp_path / "objects.txt", tmp_path / "attributes.txt"
    # names of the small vocabulary: index 3 is "man", index 4 "shirt" (as in Visual Genome's order)
    objects.write_text("\n".join(["tree", "sky", "person,people", "man", "shirt", *[f"o{i}" for i in range(7)]]))
    attrs.write_text("\n".join(f"a{i}" for i in range(N_ATTRS)))
    return {"objects_vocab": str(objects), "attributes_vocab": str(attrs), "num_classes": N_CLASSES,
            "num_attributes": N_ATTRS, "feature_dim": DIM, "fields": "lxmert", "image_ids": "coco"}


def detections(n, seed, size=200):
    """What extract_coco_image.py computes for one image: n boxes in a (size + 50)-pixel square, their
    pooled features, labels."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, size, (n, 2)).astype(np.float32)
    return {"boxes": np.concatenate([xy, xy + rng.uniform(1, 50 * size / 200, (n, 2))], axis=1).astype(np.float32),
            "features": rng.standard_normal((n, DIM)).astype(np.float32),
            "objects_id": rng.integers(0, N_CLASSES, n).astype(np.int64),
            "objects_conf": rng.uniform(0, 1, n).astype(np.float32),
            "attrs_id": rng.integers(0, N_ATTRS, n).astype(np.int64),
            "attrs_conf": rng.uniform(0, 1, n).astype(np.float32)}


def row(img_id, d, h=250, w=250):
    """One line's fields as the extraction writes them: integers as text, arrays as base64."""
    b64 = {k: base64.b64encode(v.tobytes()).decode() for k, v in d.items()}
    item = {"img_id": img_id, "img_h": str(h), "img_w": str(w), "num_boxes": str(len(d["boxes"])), **b64}
    return [item[f] for f in LXMERT_FIELDS]


def write_tsv(path, rows):
    with open(path, "w", newline="") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)
    return path


def entries_of(*files):
    return [(f"weat6/{role}/{file}", f"/nowhere/{file}") for role, file in files]


def test_a_released_tsv_reads_into_the_store(spec, tmp_path):
    dets = {42: detections(5, 0), 7: detections(3, 1), 99: detections(4, 2)}
    tsv = write_tsv(tmp_path / "val2014_obj36.tsv", [row(f"COCO_val2014_{i:012d}", d, h=250 + i, w=260 + i)
                                                     for i, d in dets.items()])
    # image 42 twice (two roles), 7 once, 1234 not in the TSV; 99 in the TSV only
    entries = entries_of(("X", "COCO_val2014_000000000042.jpg"), ("A", "COCO_val2014_000000000042.jpg"),
                         ("Y", "COCO_val2014_000000000007.jpg"), ("B", "COCO_val2014_000000001234.jpg"))
    out = tmp_path / "store.h5"
    summary = read_tsv_regions(tsv, entries, TsvSource(spec), out)
    assert summary["n_images"] == 3 and summary["n_skipped"] == 1 and summary["n_lines"] == 3
    with RegionStore(out) as store:
        assert store.ids == sorted(i for i, _ in entries if "1234" not in i)
        assert store.skipped == {"weat6/B/COCO_val2014_000000001234.jpg": "not in val2014_obj36.tsv"}
        assert store.class_names[3] == "man" and store.attribute_names == [f"a{i}" for i in range(N_ATTRS)]
        for image_id in store.ids:
            number = int(image_id[-10:-4])
            d = dets[number]
            r, is_person = store.get(image_id)
            np.testing.assert_array_equal(r.boxes, d["boxes"])       # the file's order, not re-sorted
            np.testing.assert_array_equal(r.features, d["features"])
            np.testing.assert_array_equal(r.class_ids, d["objects_id"])  # the true labels: ids as stored
            np.testing.assert_array_equal(r.class_scores, d["objects_conf"])
            np.testing.assert_array_equal(r.attr_ids, d["attrs_id"])
            np.testing.assert_array_equal(r.attr_scores, d["attrs_conf"])
            assert r.image_size == (250 + number, 260 + number)
            size = np.float32([260 + number, 250 + number] * 2)
            np.testing.assert_allclose(store.boxes_norm(image_id), d["boxes"] / size)
            np.testing.assert_array_equal(is_person, np.isin(d["objects_id"], [2, 3]))  # person, man
        assert store.attrs["adapter"] == "tsv" and store.attrs["tsv_sha256"] == sha256_file(tsv)


def test_image_keys_meet_coco_file_names():
    assert image_key("COCO_val2014_000000462928", "coco", file=False) \
        == image_key("COCO_val2014_000000462928.jpg", "coco", file=True) \
        == image_key("COCO_val2014_000000462928.jpg", "coco", file=False) == image_key("462928", "coco", file=False) \
        == 462928
    assert image_key("COCO_val2014_000000462928.jpg", "stem", file=True) == "COCO_val2014_000000462928"
    assert image_key("occupation.png", "coco", file=True) is None
    # a file loses its extension, from the last dot; a TSV id is the stem as it is, dots included
    assert image_key("img.v1.jpg", "stem", file=True) == image_key("img.v1", "stem", file=False) == "img.v1"


def test_stems_with_dots_meet_their_files(spec, tmp_path):
    """Bottom-up TSV ids are file stems, which may hold dots: "img.v1" is the image of img.v1.jpg, not of img.jpg."""
    dets = {"img.v1": detections(2, 0), "plain": detections(3, 1)}
    tsv = write_tsv(tmp_path / "f.tsv", [row(i, d) for i, d in dets.items()])
    entries = entries_of(("X", "img.v1.jpg"), ("Y", "plain.png"), ("A", "img.jpg"))
    read_tsv_regions(tsv, entries, TsvSource(spec | {"image_ids": "stem"}), tmp_path / "s.h5")
    with RegionStore(tmp_path / "s.h5") as store:
        assert store.ids == ["weat6/X/img.v1.jpg", "weat6/Y/plain.png"]
        np.testing.assert_array_equal(store.get("weat6/X/img.v1.jpg")[0].features, dets["img.v1"]["features"])
        assert store.skipped == {"weat6/A/img.jpg": "not in f.tsv"}


# the released files' column orders, spelled out here (not read from the module): LXMERT's
# extract_coco_image.py FIELDNAMES, and generate_tsv.py's followed by the label columns
RELEASED_ORDERS = {
    "lxmert": ["img_id", "img_h", "img_w", "objects_id", "objects_conf", "attrs_id", "attrs_conf", "num_boxes",
               "boxes", "features"],
    "bottom-up": ["image_id", "image_w", "image_h", "num_boxes", "boxes", "features", "objects_id", "objects_conf",
                  "attrs_id", "attrs_conf"],
}


@pytest.mark.parametrize("fields", list(RELEASED_ORDERS))
def test_each_released_column_order_reads_width_and_height_from_their_columns(spec, tmp_path, fields):
    """An image 300 wide and 200 high, a box reaching x = 290 (beyond its height) and y = 190, lines
    ending in CRLF: the sizes from their own columns, boxes normalised by width and height."""
    d = detections(3, 4) | {"boxes": np.float32([[10, 20, 290, 190], [0, 0, 300, 200], [5, 5, 6, 6]])}
    values = {"img_id": "COCO_val2014_000000000009", "img_h": "200", "img_w": "300", "num_boxes": "3",
              **{k: base64.b64encode(v.tobytes()).decode() for k, v in d.items()}}
    values |= {"image_" + k[4:]: values[k] for k in ("img_id", "img_h", "img_w")}
    tsv = tmp_path / "f.tsv"
    tsv.write_bytes(("\t".join(values[f] for f in RELEASED_ORDERS[fields]) + "\r\n").encode())
    read_tsv_regions(tsv, entries_of(("X", "COCO_val2014_000000000009.jpg")), TsvSource(spec | {"fields": fields}),
                     tmp_path / "s.h5")
    with RegionStore(tmp_path / "s.h5") as store:
        r, _ = store.get(store.ids[0])
        assert r.image_size == (200, 300)
        np.testing.assert_array_equal(r.boxes, d["boxes"])
        np.testing.assert_array_equal(r.features, d["features"])  # the last column: its CR not read into it
        np.testing.assert_allclose(store.boxes_norm(store.ids[0]), d["boxes"] / np.float32([300, 200, 300, 200]))


def test_empty_and_one_pixel_images_are_read(spec, tmp_path):
    """num_boxes 0 (an image the extraction found nothing in) and an image of 1 x 1 pixels are valid."""
    tsv = write_tsv(tmp_path / "f.tsv", [row("COCO_val2014_000000000001", detections(0, 0)),
                                          row("COCO_val2014_000000000002", detections(1, 1) | {
                                              "boxes": np.float32([[0, 0, 1, 1]])}, h=1, w=1)])
    entries = entries_of(("X", "COCO_val2014_000000000001.jpg"), ("Y", "COCO_val2014_000000000002.jpg"))
    read_tsv_regions(tsv, entries, TsvSource(spec), tmp_path / "s.h5")
    with RegionStore(tmp_path / "s.h5") as store:
        assert len(store.get("weat6/X/COCO_val2014_000000000001.jpg")[0].boxes) == 0
        assert store.get("weat6/Y/COCO_val2014_000000000002.jpg")[0].image_size == (1, 1)


def malformed(spec, tmp_path, fields):
    good = row("COCO_val2014_000000000001", detections(3, 0))
    bad = list(row("COCO_val2014_000000000002", detections(3, 1)))
    for name, value in fields.items():
        bad[LXMERT_FIELDS.index(name)] = value
    tsv = write_tsv(tmp_path / "f.tsv", [good, bad] if fields else [good, good])
    with pytest.raises(InputError) as e:
        read_tsv_regions(tsv, entries_of(("X", "COCO_val2014_000000000001.jpg")), TsvSource(spec), tmp_path / "o.h5")
    assert not (tmp_path / "o.h5").exists()
    return str(e.value)


def b64(array):
    return base64.b64encode(np.asarray(array).tobytes()).decode()


FEATURES = b64(detections(3, 1)["features"])  # the bad line's own


@pytest.mark.parametrize("fields,field,says", [
    ({"features": FEATURES[:8] + "*" + FEATURES[8:]}, "features", "not base64"),  # decodes if "*" is dropped
    ({"boxes": b64(np.zeros((2, 4), np.float32))}, "boxes", "32 bytes, but num_boxes 3 needs 3 x 4 float32 = 48"),
    ({"features": b64(np.zeros((3, DIM + 1), np.float32))}, "features", "num_boxes 3 needs 3 x 8"),
    ({"objects_id": b64(np.zeros(3, np.int32))}, "objects_id", "12 bytes"),
    ({"objects_id": b64(np.array([0, 1, N_CLASSES]))}, "objects_id", "do not index the 12 names"),
    ({"attrs_conf": b64(np.zeros(4, np.float32))}, "attrs_conf", "16 bytes"),
    ({"num_boxes": "3.0"}, "num_boxes", "not an integer"),
    ({"num_boxes": "4"}, "boxes", "num_boxes 4"),
    ({"img_h": "-5"}, "image_h", "out of range"),
    ({"img_w": "0"}, "image_w", "0 out of range"),
    ({"num_boxes": "-1"}, "num_boxes", "-1 out of range"),
    ({"objects_id": b64(np.array([0, -1, 2]))}, "objects_id", "ids -1..2 do not index the 12 names"),
    ({"attrs_id": b64(np.array([-3, 0, 1]))}, "attrs_id", "ids -3..1 do not index the 5 names"),
    ({"img_w": "100"}, "boxes", "x2 <= image_w (100)"),  # the boxes reach x = 250
    *(({"boxes": b64(np.float32([box, [0, 0, 1, 1], [0, 0, 1, 1]]))}, "boxes", "not all 0 <= x1 <= x2")
      for box in ([50, 20, 10, 190], [10, 190, 50, 20], [-1, 20, 10, 190])),  # x1 > x2, y1 > y2, x1 < 0
    ({"img_id": "COCO_val2014_000000000001"}, "image_id", "already on line 1"),
    ({"img_id": "000001"}, "image_id", "already on line 1"),   # the same COCO image, other spelling
    ({"img_id": "google_image_1"}, "image_id", "no image id of the kind"),
    # scores outside [0, 1] and non-finite arrays were read into the store
    ({"objects_conf": b64(np.float32([0.5, 1.5, 0.2]))}, "objects_conf", "scores outside [0, 1] (0.2..1.5)"),
    ({"attrs_conf": b64(np.float32([0.5, -0.1, 0.2]))}, "attrs_conf", "scores outside [0, 1] (-0.1..0.5)"),
    ({"objects_conf": b64(np.float32([0.5, np.nan, 0.2]))}, "objects_conf", "not all finite"),
    ({"features": b64(np.where(np.eye(3, DIM), np.inf, 0).astype(np.float32))}, "features", "not all finite"),
    ({"features": b64(np.full((3, DIM), np.nan, np.float32))}, "features", "not all finite"),
    ({"boxes": b64(np.float32([[0, 0, 9, 9], [0, 0, np.nan, 9], [1, 1, 2, 2]]))}, "boxes", "not all finite"),
])
def test_a_malformed_line_names_file_line_and_field(spec, tmp_path, fields, field, says):
    message = malformed(spec, tmp_path, fields)
    assert message.startswith(f"{tmp_path / 'f.tsv'}:2: field '{field}'") and says in message


def test_lines_of_released_size_are_read(spec, tmp_path):
    """36 boxes of 2048 floats: a 393,216-character field, beyond the csv module's default limit
    (which the upstream readers raise)."""
    d = detections(36, 0) | {"features": np.random.default_rng(0).standard_normal((36, 2048), np.float32)}
    tsv = write_tsv(tmp_path / "f.tsv", [row("COCO_val2014_000000000001", d)])
    csv.field_size_limit(131072)  # as a fresh process has it: our reader does not depend on it
    read_tsv_regions(tsv, entries_of(("X", "COCO_val2014_000000000001.jpg")), TsvSource(spec | {"feature_dim": 2048}),
                     tmp_path / "o.h5")
    with RegionStore(tmp_path / "o.h5") as store:
        np.testing.assert_array_equal(store.get(store.ids[0])[0].features, d["features"])


def test_a_line_beyond_the_cap_is_refused_before_it_is_read_whole(spec, tmp_path, monkeypatch):
    """A 200 MB line took 16 s and 690 MiB before its error; refused at the per-line cap
    (here made small), the lines within it read."""
    import vlbias.regions.tsv as tsv_module

    lines = [row(f"COCO_val2014_00000000000{i}", detections(3, i)) for i in (1, 2)]
    tsv = write_tsv(tmp_path / "f.tsv", lines)
    monkeypatch.setattr(tsv_module, "MAX_LINE_BYTES", len("\t".join(lines[0])) + 1)  # a line and its newline
    entries = entries_of(("X", "COCO_val2014_000000000001.jpg"))
    assert read_tsv_regions(tsv, entries, TsvSource(spec), tmp_path / "o.h5")["n_lines"] == 2
    tsv.write_text("\t".join(lines[0]) + "\n" + "\t".join(lines[1]) + "A" * 64 + "\n")
    with pytest.raises(InputError, match=rf"^{tsv}:2: longer than [\d,]+ bytes: not a line of region features$"):
        read_tsv_regions(tsv, entries, TsvSource(spec), tmp_path / "o2.h5")
    assert not (tmp_path / "o2.h5").exists()


def test_a_line_with_missing_fields_names_file_and_line(spec, tmp_path):
    tsv = write_tsv(tmp_path / "f.tsv", [row("COCO_val2014_000000000001", detections(2, 0))[:-1]])
    with pytest.raises(InputError, match=r"f\.tsv:1: has 9 tab-separated fields, expected 10"):
        read_tsv_regions(tsv, [], TsvSource(spec), tmp_path / "o.h5")


def test_config_errors(spec, tmp_path):
    with pytest.raises(InputError, match="fields 'lxmert2'"):
        TsvSource(spec | {"fields": "lxmert2"})
    with pytest.raises(InputError, match="missing \\['objects_conf'\\]"):
        TsvSource(spec | {"fields": ["image_id", "image_w", "image_h", "num_boxes", "boxes", "features", "objects_id"]})
    with pytest.raises(InputError, match="TSV file not found"):
        read_tsv_regions(tmp_path / "absent.tsv", [], TsvSource(spec), tmp_path / "o.h5")
    with pytest.raises(InputError, match="weat6/X/photo.png: its file name has no image id"):
        read_tsv_regions(tmp_path / "absent.tsv", entries_of(("X", "photo.png")), TsvSource(spec), tmp_path / "o.h5")


# --- rows 13 and 14 of the grounded protocol (docs/grounded.md) ----------------------------------

def test_label_offset_masks_the_regions_the_authors_masked(spec, tmp_path):
    """Row 13 on a store whose labels are known: the authors read objects_id in ['background'] +
    vocabulary, one class early, so mask I for "man"/"person" hid the shirt and the man, not the person."""
    from vlbias.suites.grounded.protocol import label_offset, resolve
    from vlbias.visual import visual_from_store

    d = detections(4, 0) | {"objects_id": np.array([3, 4, 2, 0])}   # man, shirt, person, tree
    tsv = write_tsv(tmp_path / "f.tsv", [row("COCO_val2014_000000000005", d)])
    read_tsv_regions(tsv, entries_of(("X", "COCO_val2014_000000000005.jpg")), TsvSource(spec), tmp_path / "s.h5")
    masked = {}
    with RegionStore(tmp_path / "s.h5") as store:
        for preset in ("paper", "authors"):
            offset = label_offset(resolve(preset), "lxmert", store.attrs)
            v = visual_from_store(store, "weat6/X/COCO_val2014_000000000005.jpg", ("man", "person"), None, offset)
            masked[preset] = v.is_person.tolist()
        # the reading belongs to LXMERT's loader on the released objects_id: no other family or store
        assert label_offset(resolve("authors"), "vilbert", store.attrs) == 0
    for adapter in ("bua", "torchvision", "detectron_fpn"):  # a detector's own labels: read as stored
        assert label_offset(resolve("authors"), "lxmert", {"adapter": adapter}) == 0
    assert masked == {"paper": [True, False, True, False], "authors": [True, True, False, False]}


def test_region_source_picks_the_released_store_where_the_entry_names_one():
    """Row 14: LXMERT reads its released COCO features under `released`, its detector's store elsewhere."""
    from vlbias.suites.grounded.protocol import region_store, resolve

    lxmert = {"detector": "bua-36", "released_regions": {"coco": "lxmert-obj36"}}
    assert region_store(resolve("authors"), lxmert, "coco") == "lxmert-obj36"
    assert region_store(resolve("authors"), lxmert, "google") == "bua-36"
    assert region_store(resolve("paper"), lxmert, "coco") == "bua-36"
    assert region_store(resolve({"preset": "paper", "region_source": "released"}), lxmert, "coco") == "lxmert-obj36"
    assert region_store(resolve("authors"), {"detector": "bua-10-100"}, "coco") == "bua-10-100"


def test_vilbert_reads_the_authors_36_generate_tsv_boxes_under_authors():
    """The shipped config: under `authors` ViLBERT reads, on Google Images and Conceptual Captions, the
    store LXMERT reads on Google Images, generate_tsv's regions at exactly 36 boxes (the features the
    authors extracted with jiasenlu's fork: every image has 36, none is left out); under `paper`, 10 to 36."""
    from helpers import REPO

    from vlbias.suites.grounded.protocol import region_store, resolve

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    models, detectors = config["grounded"]["models"], config["regions"]["detectors"]
    for dataset in ("google", "concap"):
        store = region_store(resolve("authors"), models["vilbert"], dataset)
        assert detectors[store] | {"min_boxes": 36, "max_boxes": 36, "selection": "generate_tsv"} == detectors[store]
        assert store == region_store(resolve("authors"), models["lxmert"], "google")
        paper = detectors[region_store(resolve("paper"), models["vilbert"], dataset)]
        assert (paper["min_boxes"], paper["max_boxes"], paper["conf"], paper["selection"]) == (10, 36, 0.2,
                                                                                              "generate_tsv")


@pytest.mark.workflow
def test_the_workflow_reads_a_tsv_source_into_the_grounded_job_under_released(tmp_path):
    """The real Snakefile on the grounded tiny project: a regions/tsv source for its dataset, named by
    LXMERT's released_regions, is the store LXMERT reads under `authors` (region_source released,
    label_offset -1); its detector is never run."""
    from helpers.grounded import image_ids, project_doc, tiny_project
    from helpers.project import snakemake, write_yaml

    tiny_project(tmp_path)
    config = yaml.safe_load((tmp_path / "config/config.yaml").read_text())
    (tmp_path / "objects.txt").write_text("tree\nperson\nman\n")
    # every image of the toy tests but b_y0 (two of the manifest's ids); every box labelled "man", which
    # the authors read as "person", the toy tests' region label: only under `authors` mask I hides any
    stems = sorted({i.rsplit("/", 1)[1][:-4] for t in ("toy-a", "toy-b") for i in image_ids(project_doc(t))} - {"b_y0"})
    dets = {}
    for n, stem in enumerate(stems):
        dets[stem] = detections(3, n, size=32) | {"features": np.random.default_rng(n).standard_normal((3, 1024), np.float32),
                                         "objects_id": np.full(3, 2)}
    write_tsv(tmp_path / "toy.tsv", [row(stem, d, h=40, w=48) for stem, d in dets.items()])
    config["regions"]["tsv"] = {"toy-tsv": {"files": {"google": "toy.tsv"}, "image_ids": "stem", "feature_dim": 1024,
                                            "num_classes": 3, "num_attributes": N_ATTRS,
                                            "objects_vocab": "objects.txt", "attributes_vocab": "attributes.txt"}}
    (tmp_path / "attributes.txt").write_text("\n".join(f"a{i}" for i in range(N_ATTRS)))
    config["grounded"]["models"]["lxmert"]["released_regions"] = {"google": "toy-tsv"}
    write_yaml(tmp_path / "config/config.yaml", config)
    out = "results/embeddings/grounded/authors/google/lxmert"
    snakemake(tmp_path, f"{out}.h5", f"{out}.missing.tsv")
    assert not (tmp_path / "results/regions/google/frcnn-tiny.h5").exists()  # LXMERT's detector: not run

    with RegionStore(tmp_path / "results/regions/google/toy-tsv.h5") as store:
        r, _ = store.get("toy-a/attr1/a_x0.jpg")
        np.testing.assert_array_equal(r.features, dets["a_x0"]["features"])
        assert set(store.skipped) == {"toy-a/attr2/b_y0.jpg", "toy-b/attr2/b_y0.jpg"}
    with h5py.File(tmp_path / f"{out}.h5") as a:
        assert a.attrs["detector"] == "toy-tsv" and a.attrs["region_store"] == "results/regions/google/toy-tsv.h5"
        # label_offset -1 reached the job: every region read as "person" and masked; read as "man", none
        assert not np.allclose(a["toy-a/S/I/X/embeddings"][()], a["toy-a/S/none/X/embeddings"][()], atol=1e-4)
    missing = pd.read_csv(tmp_path / f"{out}.missing.tsv", sep="\t", dtype=str)
    assert set(missing.loc[missing["image"] == "toy-a/attr2/b_y0.jpg", "reason"]) == {"not usable: not in toy.tsv"}


def test_the_config_check_names_a_wrong_tsv_source_by_its_key():
    import copy

    from helpers import REPO

    from vlbias.config import ConfigError, check_config

    shipped = yaml.safe_load((REPO / "config/config.yaml").read_text())
    assert shipped["grounded"]["models"]["lxmert"]["released_regions"] == {"coco": "lxmert-obj36"}
    config = copy.deepcopy(shipped)
    config["grounded"]["models"]["lxmert"]["released_regions"] = {"coco": "lxmert-obj63", "google": "lxmert-obj36"}
    config["regions"]["build"] = [{"dataset": "google", "detector": "lxmert-obj36"}]
    config["regions"]["tsv"]["bua-36"] = copy.deepcopy(config["regions"]["tsv"]["lxmert-obj36"])
    schema = REPO / "workflow/schemas/config.schema.yaml"
    with pytest.raises(ConfigError) as e:
        check_config(config, schema, root=REPO)
    said = "\n".join(e.value.problems)
    assert "key 'regions/tsv/bua-36': 'bua-36' is also a detector" in said
    assert "key 'regions/build/0': 'regions/tsv/lxmert-obj36/files' names no TSV file for dataset 'google'" in said
    assert ("key 'grounded/models/lxmert/released_regions/coco': 'lxmert-obj63' is not a source under 'regions/tsv' "
            "nor a detector (did you mean 'lxmert-obj36'?)") in said
    assert "key 'grounded/models/lxmert/released_regions/google': 'regions/tsv/lxmert-obj36/files'" in said
    # a detector's store is one too (ViLBERT's: the authors' 36 generate_tsv boxes; the shipped config passes)
    assert shipped["grounded"]["models"]["vilbert"]["released_regions"] == {"google": "bua-36", "concap": "bua-36"}
    check_config(copy.deepcopy(shipped), schema, root=REPO)
    config = copy.deepcopy(shipped)
    config["regions"]["tsv"]["lxmert-obj36"]["fields"] = "lxmert-order"
    with pytest.raises(ConfigError, match="key 'regions/tsv/lxmert-obj36/fields'"):
        check_config(config, schema, root=REPO)


# --- differential check against the authors' reader and mask ------------------------------------

@pytest.fixture
def authors(monkeypatch):
    """The authors' LXMERT TSV reader (scripts/dataloaders/lxmert/utils.py) and feature wrapper
    (dataset_wrappers.py) of candacelax/bias-in-vision-and-language at 162298016af6d728453a8c3d47554a6e87e18be2,
    imported from the directory in $VLBIAS_GROUNDED_REFERENCE."""
    files = {"utils": "scripts/dataloaders/lxmert/utils.py", "wrappers": "scripts/dataloaders/dataset_wrappers.py"}
    root = checkout("VLBIAS_GROUNDED_REFERENCE", "a checkout of candacelax/bias-in-vision-and-language (commit "
                    "162298016af6d728453a8c3d47554a6e87e18be2) to compare with the authors' TSV reader and region mask",
                    *files.values())
    pytest.importorskip("torch")
    # imported at the top of their modules, used for LMDB files and configs only
    monkeypatch.setitem(sys.modules, "lmdb", types.ModuleType("lmdb"))
    monkeypatch.setitem(sys.modules, "attrdict", types.SimpleNamespace(AttrDict=dict))
    return {name: plain_module(f"grounded_reference_{name}", root / path) for name, path in files.items()}


def test_the_store_and_mask_agree_with_the_authors_reader(authors, spec, tmp_path):
    import torch

    from vlbias.suites.grounded.protocol import label_offset, resolve
    from vlbias.visual import visual_from_store

    dets = {n: detections(36, n) for n in (3, 17, 250)}
    tsv = tmp_path / "mscoco_imgfeat/val2014_obj36.tsv"  # their reader picks LXMERT's columns for "coco" paths
    tsv.parent.mkdir()
    write_tsv(tsv, [row(f"COCO_val2014_{n:012d}", d, h=250 + n, w=260) for n, d in dets.items()])
    entries = entries_of(*(("X", f"COCO_val2014_{n:012d}.jpg") for n in dets))
    read_tsv_regions(tsv, entries, TsvSource(spec), tmp_path / "s.h5")
    theirs = {item["img_id"]: item for item in authors["utils"].load_obj_tsv(str(tsv))}
    # their mask I: the vocabulary's lines after 'background' (dataset_wrappers.py:80-82), labels not on
    # a line with synonyms (docs/grounded.md row 5)
    labels = ["man", "tree", "o3"]
    wrapper = types.SimpleNamespace(obj_list=["background", *(Path(spec["objects_vocab"]).read_text().splitlines())],
                                    contextual_words_with_people=labels)
    with RegionStore(tmp_path / "s.h5") as store:
        offset = label_offset(resolve("authors"), "lxmert", store.attrs)
        for image_id, _ in entries:
            item = theirs[image_id.rsplit("/", 1)[1][:-4]]
            r, _ = store.get(image_id)
            assert r.image_size == (item["img_h"], item["img_w"])
            for ours, key in ((r.boxes, "boxes"), (r.features, "features"), (r.class_ids, "objects_id"),
                              (r.class_scores, "objects_conf"), (r.attr_ids, "attrs_id"), (r.attr_scores, "attrs_conf")):
                np.testing.assert_array_equal(ours, item[key])
            batch = {"visual_feats": torch.tensor(item["features"][None].copy())}
            masked = authors["wrappers"].LXMERTDatasetWrapper.mask_image_regions(
                wrapper, batch, torch.tensor(item["objects_id"][None].copy()))["visual_feats"][0]
            theirs_masked = (masked == 0).all(dim=1).numpy()
            assert theirs_masked.any()
            np.testing.assert_array_equal(visual_from_store(store, image_id, tuple(labels), None, offset).is_person,
                                          theirs_masked)
            assert not np.array_equal(visual_from_store(store, image_id, tuple(labels)).is_person, theirs_masked)
