"""The bottom-up TSV reader streams (vlbias.regions.tsv): each wanted image written as it is parsed,
the store as it was (images sorted by id, each image's regions as its line holds them), and no torch
on its import path (the regions_tsv job's floor was torch's 820 MiB, for a vocabulary)."""

import base64
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO

from vlbias.errors import InputError
from vlbias.regions import store as region_store
from vlbias.regions.store import RegionStore, write_person_list
from vlbias.regions.tsv import LXMERT_FIELDS, WRITE_BATCH, TsvSource, read_tsv_regions

DIM, N_CLASSES, N_ATTRS = 8, 6, 4


@pytest.fixture
def source(tmp_path):
    (tmp_path / "objects.txt").write_text("\n".join(["tree", "man", "woman", "sky", "shirt", "dog"]))
    (tmp_path / "attrs.txt").write_text("\n".join(f"a{i}" for i in range(N_ATTRS)))
    return TsvSource({"objects_vocab": str(tmp_path / "objects.txt"), "attributes_vocab": str(tmp_path / "attrs.txt"),
                      "num_classes": N_CLASSES, "num_attributes": N_ATTRS, "feature_dim": DIM, "fields": "lxmert"})


def line(image, seed, n=3):
    """(a TSV line of COCO image ``image``, its arrays)."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 100, (n, 2)).astype(np.float32)
    arrays = {"objects_id": rng.integers(0, N_CLASSES, n), "objects_conf": rng.random(n, np.float32),
              "attrs_id": rng.integers(0, N_ATTRS, n), "attrs_conf": rng.random(n, np.float32),
              "boxes": np.concatenate([xy, xy + 20], axis=1), "features": rng.standard_normal((n, DIM), np.float32)}
    item = {"img_id": f"COCO_val2014_{image:012d}", "img_h": str(150 + image), "img_w": "160", "num_boxes": str(n),
            **{k: base64.b64encode(v.tobytes()).decode() for k, v in arrays.items()}}
    return "\t".join(item[f] for f in LXMERT_FIELDS) + "\n", arrays


def entry(role, image):
    return f"weat6/{role}/COCO_val2014_{image:012d}.jpg", f"/nowhere/{image}.jpg"


def test_the_store_is_as_before_whatever_the_file_order(source, tmp_path):
    # the file's order is not the ids' (released files are not sorted); image 12 is wanted by two roles,
    # 99 by none, 5 is not in the file
    images = [31, 12, 7, 99, 20]
    lines = {image: line(image, seed) for seed, image in enumerate(images)}
    (tmp_path / "f.tsv").write_text("".join(lines[i][0] for i in images))
    entries = [entry("B", 12), entry("A", 31), entry("A", 12), entry("A", 7), entry("B", 20), entry("A", 5)]
    summary = read_tsv_regions(tmp_path / "f.tsv", entries, source, tmp_path / "s.h5", provenance={"dataset": "d"})
    assert summary["n_images"] == 5 and summary["n_skipped"] == 1 and summary["n_lines"] == 5
    with RegionStore(tmp_path / "s.h5") as store:
        assert store.ids == sorted(e[0] for e in entries if "05" not in e[0][-8:])  # sorted, as every store
        assert store.skipped == {entry("A", 5)[0]: "not in f.tsv"}
        assert store.attrs["tsv_sha256"] == summary["tsv_sha256"] and store.attrs["dataset"] == "d"
        assert store.attrs["n_images"] == 5 and store.attrs["n_regions"] == 15
        for image_id, _ in entries[:-1]:
            regions, is_person = store.get(image_id)
            arrays = lines[int(image_id[-16:-4])][1]
            np.testing.assert_array_equal(regions.features, arrays["features"])
            np.testing.assert_array_equal(regions.boxes, arrays["boxes"])
            np.testing.assert_array_equal(regions.class_ids, arrays["objects_id"])
            np.testing.assert_array_equal(regions.attr_scores, arrays["attrs_conf"])
            assert regions.image_size == (150 + int(image_id[-16:-4]), 160)
            np.testing.assert_array_equal(is_person, np.isin(arrays["objects_id"], [1, 2]))
    rows = write_person_list(tmp_path / "s.h5", tmp_path / "persons.tsv")
    assert [r["id"] for r in rows] == sorted(e[0] for e in entries[:-1])


def test_images_are_written_while_the_file_is_read(source, tmp_path, monkeypatch):
    # the last line is malformed: a reader that held every image until the end would have written none
    n = 2 * WRITE_BATCH + 3
    text = "".join(line(i, i, n=1)[0] for i in range(1, n + 1)) + "COCO_val2014_000000009999\tbroken\n"
    (tmp_path / "f.tsv").write_text(text)
    batches = []
    add = region_store.RegionWriter.add
    monkeypatch.setattr(region_store.RegionWriter, "add", lambda self, batch: (batches.append(len(batch)),
                                                                              add(self, batch)))
    with pytest.raises(InputError, match=f"f.tsv:{n + 1}"):
        read_tsv_regions(tmp_path / "f.tsv", [entry("A", i) for i in range(1, n + 1)], source, tmp_path / "s.h5")
    assert batches == [WRITE_BATCH, WRITE_BATCH]  # written as parsed, a bounded batch at a time
    assert not (tmp_path / "s.h5").exists() and not list(tmp_path.glob("*.h5*"))  # nothing half-written left


def test_the_reader_imports_no_torch(source, tmp_path):
    (tmp_path / "f.tsv").write_text(line(1, 0)[0])
    # the regions_tsv job's imports (workflow/scripts/regions_tsv.py), then a read with vocabularies
    script = f"""
import sys
from vlbias.io.fetch import sha256_file
from vlbias.logs import setup_logging
from vlbias.regions.extract import manifest_entries
from vlbias.regions.store import write_person_list
from vlbias.regions.tsv import TsvSource, read_tsv_regions
source = TsvSource({{"objects_vocab": {str(tmp_path / 'objects.txt')!r}, "attributes_vocab": {str(tmp_path / 'attrs.txt')!r},
                    "num_classes": {N_CLASSES}, "num_attributes": {N_ATTRS}, "feature_dim": {DIM}}})
read_tsv_regions({str(tmp_path / 'f.tsv')!r}, [("A/B/COCO_val2014_000000000001.jpg", "x")], source,
                 {str(tmp_path / 's.h5')!r})
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout
