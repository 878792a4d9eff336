"""Stores the workflow reads back (vlbias.io.hdf5): a file whose bytes changed after it was written is
a named error, never numbers (the embedding, region and image stores)."""

import logging
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from PIL import Image

from vlbias.errors import InputError
from vlbias.images.store import build_image_store
from vlbias.io import hdf5
from vlbias.io.hdf5 import MAGIC, open_hdf5
from vlbias.io.store import read_provenance, read_set, write_embeddings
from vlbias.visual import Regions
from vlbias.regions.store import RegionStore, write_region_store


def damage(path, content, at=3):
    """Change one byte of ``content`` (bytes the file holds once) in the file, as a disk fault would."""
    data = bytearray(path.read_bytes())
    start = data.find(content)
    assert start >= 0 and data.find(content, start + 1) < 0
    data[start + at] ^= 0xFF
    path.write_bytes(bytes(data))


def embeddings(tmp_path):
    vectors = np.random.default_rng(0).normal(size=(5, 8)).astype(np.float32)
    path = tmp_path / "minilm.h5"
    write_embeddings(path, {"t/X": (vectors, [f"sentence {w}" for w in ("one", "two", "three", "four", "five")])},
                     {"model": "minilm"})
    return path, vectors


def test_an_intact_store_reads_back(tmp_path):
    path, vectors = embeddings(tmp_path)
    assert path.read_bytes().startswith(MAGIC)  # the digest, in HDF5's user block
    np.testing.assert_array_equal(read_set(path, "t/X")[0], vectors)
    assert read_provenance(path) == {"model": "minilm"}


@pytest.mark.parametrize("where", ["vectors", "ids", "checksum", "magic"])
def test_a_damaged_embedding_store_is_a_named_error(tmp_path, where):
    path, vectors = embeddings(tmp_path)
    read_set(path, "t/X")  # checked once in this process; a changed file is checked again
    content = {"vectors": vectors[2].tobytes(), "ids": b"sentence three", "checksum": MAGIC, "magic": MAGIC}[where]
    damage(path, content, at=len(MAGIC) + 5 if where == "checksum" else 1)
    with pytest.raises(InputError, match=f"^{path}: damaged: .*checksum mismatch.*delete it and rerun"):
        read_set(path, "t/X")
    with pytest.raises(InputError, match="damaged"):
        read_provenance(path)


def test_a_store_without_a_checksum_is_read_with_a_warning(tmp_path, caplog):
    (tmp_path / "not.h5").write_text("not HDF5 at all")  # left to h5py's own error, without a warning
    with pytest.raises(OSError), caplog.at_level(logging.WARNING):
        open_hdf5(tmp_path / "not.h5")
    assert "checksum" not in caplog.text
    path = tmp_path / "old.h5"
    with h5py.File(path, "w") as f:  # as written before stores carried a checksum
        f["t/X/vectors"] = np.ones((2, 3), np.float32)
        f["t/X/ids"] = ["a", "b"]
    with caplog.at_level(logging.WARNING):
        np.testing.assert_array_equal(read_set(path, "t/X")[0], np.ones((2, 3)))
    assert f"{path}: carries no checksum" in caplog.text


def test_a_damaged_region_store_is_a_named_error(tmp_path):
    detector = SimpleNamespace(name="fake", feature_dim=4, weights="random", class_names=["person", "dog"],
                               attribute_names=None, person_classes={"person"},
                               settings={"adapter": "fake", "min_boxes": 1, "max_boxes": 3, "conf": 0.0})
    features = np.arange(12, dtype=np.float32).reshape(3, 4) + 0.5
    regions = Regions(boxes=np.array([[0, 0, 4, 4], [1, 1, 3, 3], [0, 0, 2, 2]], np.float32), features=features,
                      class_ids=np.array([0, 1, 1]), class_scores=np.array([0.9, 0.8, 0.7], np.float32),
                      image_size=(8, 8))
    path = tmp_path / "regions.h5"
    with write_region_store(path, detector) as writer:
        writer.add([("t/x/a.png", regions)])
    with RegionStore(path) as store:
        np.testing.assert_array_equal(store.get("t/x/a.png")[0].features, features)
    damage(path, features.tobytes(), at=17)
    with pytest.raises(InputError, match=f"^{path}: damaged"):
        RegionStore(path)


def test_a_damaged_image_store_is_a_named_error(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    path = tmp_path / "images.h5"
    build_image_store([{"category": "toy/x", "file": "a.png", "path": tmp_path / "a.png"}], path, 8)
    with open_hdf5(path) as f:
        stored = f["toy/x/pixels"][0]
    damage(path, stored.tobytes(), at=40)
    hdf5._checked.clear()  # as a new process (a later rule) would
    with pytest.raises(InputError, match=f"^{path}: damaged"):
        open_hdf5(path)
