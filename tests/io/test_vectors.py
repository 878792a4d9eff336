"""A user's own vectors (vlbias.io.vectors): the three formats, every check, and a store tests run on."""

import hashlib

import h5py
import numpy as np
import pytest

from vlbias.associate import run_test
from vlbias.errors import InputError
from vlbias.io.stimuli import load_stimulus
from vlbias.io.store import read_provenance, read_set
from vlbias.io.vectors import read_vectors, stimulus_sets, vectors_store
from vlbias.stats import effect_size

IDS = ["toy/flower/a.jpg", "toy/flower/b.jpg", "rose", "This is a wasp."]
VECTORS = np.array([[1.0, 0.5, -2.0], [0.25, 1e-3, 3.0], [-1.5, 2.0, 0.125], [0.1, 0.2, 0.3]])


def write_csv(path, ids=IDS, vectors=VECTORS, header="id,d0,d1,d2"):
    lines = [header] + [",".join([f'"{i}"' if "," in i else i, *map(repr, map(float, v))]) for i, v in zip(ids, vectors)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_npy(tmp_path, ids=IDS, vectors=VECTORS):
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "v.ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    return tmp_path / "v.npy", tmp_path / "v.ids.txt"


def write_h5(path, ids=IDS, vectors=VECTORS):
    with h5py.File(path, "w") as f:
        f["ids"] = np.array(ids, dtype=object).astype(h5py.string_dtype())
        f["vectors"] = vectors
    return path


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_three_formats_read_the_same(tmp_path):
    csv = read_vectors(write_csv(tmp_path / "v.csv"))
    npy, ids = write_npy(tmp_path)
    arr = read_vectors(npy, ids=ids)
    h5 = read_vectors(write_h5(tmp_path / "v.h5"))
    for v in (csv, arr, h5):
        assert v.ids == IDS and v.dim == 3 and len(v) == 4
        np.testing.assert_array_equal(v.vectors, VECTORS)  # the numbers exactly as written
    assert csv.provenance == {"vectors_file": str(tmp_path / "v.csv"), "vectors_sha256": sha(tmp_path / "v.csv"),
                              "format": "csv", "n": 4, "dim": 3}
    assert arr.provenance["ids_sha256"] == sha(ids) and arr.provenance["vectors_sha256"] == sha(npy)
    assert h5.provenance["format"] == "hdf5"
    # the format by name, whatever the suffix
    (tmp_path / "v.txt").write_bytes((tmp_path / "v.csv").read_bytes())
    assert read_vectors(tmp_path / "v.txt", format="csv").ids == IDS


def test_lookup_in_the_order_asked_and_a_missing_id_is_named(tmp_path):
    v = read_vectors(write_csv(tmp_path / "v.csv"))
    np.testing.assert_array_equal(v.lookup(["rose", "toy/flower/a.jpg"], "set X"), VECTORS[[2, 0]])
    assert v.lookup([], "set X").shape == (0, 3)
    with pytest.raises(InputError, match=r"v\.csv: no vector for 2 stimulus id\(s\) of set 'toy/flower': "
                                         r"'toy/flower/c\.jpg', 'tulip'"):
        v.lookup(["toy/flower/c.jpg", "rose", "tulip"], "set 'toy/flower'")


@pytest.mark.parametrize("edit,message", [
    (lambda ids, v: (ids[:3] + ["rose"], v), r"id 'rose' is given twice \(line 4 and line 5\)"),
    (lambda ids, v: (ids, np.where(np.arange(3) == 1, np.nan, v)), r"id 'toy/flower/a\.jpg' \(line 2\): NaN or inf "
                                                                   r"in its vector \(and 3 more ids\)"),
    (lambda ids, v: (ids, v * [[1], [1], [0], [1]]), r"id 'rose' \(line 4\): a zero vector"),
    (lambda ids, v: (["", *ids[1:]], v), r"line 2: empty id"),
])
def test_bad_rows_are_named_by_id_and_line(tmp_path, edit, message):
    ids, vectors = edit(list(IDS), VECTORS.copy())
    with pytest.raises(InputError, match=message):
        read_vectors(write_csv(tmp_path / "v.csv", ids, vectors))


def test_bad_csv_files_are_named(tmp_path):
    path = write_csv(tmp_path / "v.csv")
    path.write_text(path.read_text().replace("0.125\n", "0.125,7\n"))
    with pytest.raises(InputError, match=r"v\.csv: line 4 \(id 'rose'\): 4 values, expected 3 \(the header's\)"):
        read_vectors(path)
    path.write_text(path.read_text().replace("0.125,7\n", "zero\n"))
    with pytest.raises(InputError, match=r"line 4 \(id 'rose'\): 'zero' is not a number"):
        read_vectors(path)
    with pytest.raises(InputError, match=r"line 1: expected a header `id,<component>"):
        read_vectors(write_csv(path, header="name,d0,d1,d2"))
    path.write_bytes("id,d0\nr\xf6se,1\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_vectors(path)
    path.write_text("id,d0,d1,d2\n")
    with pytest.raises(InputError, match="v.csv: no vectors"):
        read_vectors(path)


def test_a_wrong_dimension_is_named(tmp_path):
    with pytest.raises(InputError, match=r"v\.csv: vectors of dimension 3, but the entry's `dim` is 512"):
        read_vectors(write_csv(tmp_path / "v.csv"), dim=512)
    assert read_vectors(tmp_path / "v.csv", dim=3).dim == 3


def test_bad_npy_and_hdf5_files_are_named(tmp_path):
    npy, ids = write_npy(tmp_path)
    with pytest.raises(InputError, match=r"v\.npy: an \.npy array needs its ids file"):
        read_vectors(npy)
    with pytest.raises(InputError, match=r"`ids` is for \.npy arrays only"):
        read_vectors(write_csv(tmp_path / "v.csv"), ids=ids)
    ids.write_text("a\nb\n")
    with pytest.raises(InputError, match=r"v\.ids\.txt: 2 ids for the 4 rows of"):
        read_vectors(npy, ids=ids)
    ids.write_text("a\nb\na\nc\n")
    with pytest.raises(InputError, match=r"id 'a' is given twice \(row 1 and row 3\)"):
        read_vectors(npy, ids=ids)
    np.save(npy, np.array([{"a": 1}], dtype=object))  # pickled objects are never loaded
    with pytest.raises(InputError, match="not a readable .npy array without pickled objects"):
        read_vectors(npy, ids=ids)
    np.save(npy, VECTORS[0])
    with pytest.raises(InputError, match=r"the array: expected a numeric array \(n, dim\), got float64 \(3,\)"):
        read_vectors(npy, ids=ids)
    with h5py.File(tmp_path / "bad.h5", "w") as f:
        f["vectors"] = VECTORS
    with pytest.raises(InputError, match="bad.h5: no dataset ids at the root"):
        read_vectors(tmp_path / "bad.h5")
    write_h5(tmp_path / "v.h5", IDS[:3])
    with pytest.raises(InputError, match=r"v\.h5: 3 ids for 4 vectors"):
        read_vectors(tmp_path / "v.h5")
    (tmp_path / "v.parquet").write_text("x")
    with pytest.raises(InputError, match="unknown vectors format"):
        read_vectors(tmp_path / "v.parquet")
    with pytest.raises(InputError, match="gone.csv: vectors file not found"):
        read_vectors(tmp_path / "gone.csv")
    (tmp_path / "junk.h5").write_text("not hdf5")
    with pytest.raises(InputError, match="junk.h5: not a readable HDF5 file"):
        read_vectors(tmp_path / "junk.h5")


def write_stimulus(path, sets):
    path.write_text("id: mixed\nname: Mixed\nsuite: ieat\nlevel: cross-modal\n" + "".join(
        f"{s}:\n  label: {s}\n" + (f"  category: {v}\n" if isinstance(v, str) else
                                   "  items: [" + ", ".join(v) + "]\n") for s, v in sets.items()))
    return load_stimulus(path)


def test_a_store_of_image_and_text_sets_that_tests_run_on(tmp_path):
    rng = np.random.default_rng(0)
    images = {"toy/flower": ["b.jpg", "a.jpg"], "toy/insect": ["c.jpg", "d.jpg"]}
    words = {"A": ["joy", "love"], "B": ["pain", "hate"]}
    ids = [f"{c}/{f}" for c, files in images.items() for f in files] + [w for ws in words.values() for w in ws]
    vectors = rng.normal(size=(len(ids), 5))
    user = read_vectors(write_csv(tmp_path / "v.csv", ids[::-1], vectors[::-1], "id," + ",".join("01234")))
    stimulus = write_stimulus(tmp_path / "mixed.yaml", {"X": "toy/flower", "Y": "toy/insect", **words})
    sets = stimulus_sets([stimulus], images)
    assert sets["toy/flower"] == (["toy/flower/b.jpg", "toy/flower/a.jpg"], ["b.jpg", "a.jpg"])
    assert sets["mixed/A"] == (["joy", "love"], ["joy", "love"])
    vectors_store(user, sets, tmp_path / "store.h5", {"model_id": "mine"})
    x, x_ids = read_set(tmp_path / "store.h5", "toy/flower")
    assert x_ids == ["b.jpg", "a.jpg"]
    np.testing.assert_array_equal(x, vectors[[0, 1]])
    prov = read_provenance(tmp_path / "store.h5")
    assert prov["weights"] == "user vectors" and prov["vectors_sha256"] == sha(tmp_path / "v.csv")
    assert prov["model_id"] == "mine" and prov["n"] == {"toy/flower": 2, "toy/insect": 2, "mixed/A": 2, "mixed/B": 2}
    row = run_test(stimulus, tmp_path / "store.h5", "mine", n_samples=100, seed=0)
    assert row["status"] == "ok" and row["weights"] == "user vectors"
    assert row["d"] == pytest.approx(effect_size(vectors[:2], vectors[2:4], vectors[4:6], vectors[6:8]))
    # a stimulus the file lacks: the store is not written, the error names the file, the set and the id
    images["toy/insect"].append("e.jpg")
    with pytest.raises(InputError, match=r"v\.csv: no vector for 1 stimulus id\(s\) of set 'toy/insect': "
                                         r"'toy/insect/e\.jpg'"):
        vectors_store(user, stimulus_sets([stimulus], images), tmp_path / "other.h5", {})
    assert not (tmp_path / "other.h5").exists()
    with pytest.raises(InputError, match="image category 'toy/insect' is listed in no image manifest"):
        stimulus_sets([stimulus], {"toy/flower": ["a.jpg"]})


def test_row_8_a_quote_left_open_a_huge_npy_claim_and_ids_not_utf8_are_named(tmp_path):
    # row 8: a 7 KB error naming line 45 instead of 4, a MemoryError, a UnicodeDecodeError
    path = tmp_path / "q.csv"
    path.write_text("id,a,b\nw0,1,2\nw1,2,1\n\"w2,1,1\n" + "".join(f"w{i},{i},1\n" for i in range(3, 60)))
    with pytest.raises(InputError, match=r"^\S+q\.csv: line 4: a quoted field runs on to line 61 \(a quote left open"
                                         r"\?\)$"):
        read_vectors(path)
    path.write_text("id,a,b\nw0,1,2\n\"w1,2,1\n" + "x" * 200_000 + "\n")  # past the csv module's field limit
    with pytest.raises(InputError, match=r"q\.csv: line 3: not readable as CSV \(field larger than field limit"):
        read_vectors(path)
    npy, ids = tmp_path / "v.npy", tmp_path / "v.ids"
    with open(npy, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**4)})
        f.write(bytes(16))
    ids.write_text("a\nb\n")
    with pytest.raises(InputError, match=r"v\.npy: the header says float64 \(1000000, 10000\) \(80000000000 bytes of "
                                         r"data\), the file holds 16"):
        read_vectors(npy, ids=ids)
    with h5py.File(tmp_path / "v.h5", "w") as f:
        f.create_dataset("ids", data=[b"ok", b"caf\xe9"], dtype=h5py.string_dtype())
        f["vectors"] = np.ones((2, 3))
    with pytest.raises(InputError, match=r"v\.h5: dataset `ids`: not UTF-8 text \(byte 0xe9 in row 2\)"):
        read_vectors(tmp_path / "v.h5")


def _store_of(tmp_path, sizes, seed=0):
    """An image-level stimulus of categories x, y, a, b with ``sizes`` vectors each, and its store."""
    from vlbias.io.store import write_embeddings

    rng = np.random.default_rng(seed)
    sets = {f"t/{c}": (rng.normal(size=(n, 4)), [f"{i}.jpg" for i in range(n)]) for c, n in zip("xyab", sizes)}
    write_embeddings(tmp_path / "store.h5", sets, {"model_id": "toy"})
    path = tmp_path / "image.yaml"
    path.write_text("id: image\nname: Image\nsuite: ieat\nlevel: image\n" + "".join(
        f"{s}:\n  label: {s}\n  category: t/{c}\n" for s, c in zip("XYAB", "xyab")))
    return load_stimulus(path), tmp_path / "store.h5"


def test_a_target_set_of_one_gives_no_d_and_says_why(tmp_path):
    """A set of size 1 gave d = ±√2 (by construction, whatever the vectors) with a
    zero-width interval, marked ok. The row is kept, with its sizes and status too-few."""
    for sizes, short in [((1, 1, 3, 3), "X has 1 and Y has 1"), ((1, 5, 3, 3), "X has 1"), ((4, 1, 1, 1), "Y has 1")]:
        stimulus, store = _store_of(tmp_path, sizes)
        row = run_test(stimulus, store, "toy", n_samples=100, seed=0,
                       ci={"level": 0.95, "n_boot": 100, "seed": 0, "method": "bca"})
        assert row["status"] == f"too-few: {short} stimulus; d and p need at least 2 in each target set"
        assert (row["n_x"], row["n_y"]) == sizes[:2] and "d" not in row and "p" not in row
    stimulus, store = _store_of(tmp_path, (2, 2, 1, 1))  # one attribute each: s(w, A, B) is defined
    assert run_test(stimulus, store, "toy", n_samples=100, seed=0)["status"] == "ok"


def test_sets_of_thousands_give_their_row(tmp_path):
    """|X| + |Y| >= 14,292 gave a ValueError from str() of the partition count (Python writes
    ints of at most 4,300 digits)."""
    stimulus, store = _store_of(tmp_path, (7146, 7146, 2, 2))
    row = run_test(stimulus, store, "toy", n_samples=100, seed=0)
    assert row["status"] == "ok" and not row["exact"] and row["n_samples"] == 100
    assert row["n_partitions"] == "≈1.396638e+4300"  # C(14292, 7146), 4,301 digits
    stimulus, store = _store_of(tmp_path, (5, 5, 2, 2))
    assert run_test(stimulus, store, "toy", n_samples=100, seed=0)["n_partitions"] == "252"
