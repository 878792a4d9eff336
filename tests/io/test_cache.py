"""Content-keyed record caches (vlbias.io.cache): keys, shards, merging, and a job killed half-way."""

import h5py
import numpy as np
import pytest

from vlbias.io import cache as cache_module
from vlbias.io.cache import RecordCache, cached_vectors, digest, digester, fingerprint


def test_digest_tells_apart_what_differs_and_only_that():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert digest("x", a) == digest("x", a.copy())
    assert digest("x", a) != digest("x", a.reshape(3, 2))          # same bytes, other shape
    assert digest("x", a) != digest("x", a.astype(np.float64))     # same values, other dtype
    assert digest("ab", "c") != digest("a", "bc")                  # no ambiguity between parts
    assert digest(None) != digest("") and digest(0) != digest(0.0) != digest("0")
    assert digest({"b": 1, "a": 2}) == digest({"a": 2, "b": 1})
    with pytest.raises(TypeError):
        digest(object())


def test_a_digester_gives_the_digest_of_its_head_and_parts():
    of = digester(("S", None, ["man", "woman"]), 3)
    a = np.arange(3, dtype=np.float32)
    first = of("A man.", (2, 5), a)
    assert first == digest("S", None, ["man", "woman"], "A man.", (2, 5), a) != of("A man.", (2, 5), a + 1)
    assert of("A man.", (2, 5), a) == first  # each call from the head alone, not from the calls before
    assert digester(("a",), 1)("b") == digester((), 2)("a", "b") == digest("a", "b")


def test_a_block_of_records_is_kept_row_by_row(tmp_path):
    block = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    with RecordCache(tmp_path) as c:
        c.put_many(["a", "b", "c"], {"vector": block})
        with pytest.raises(ValueError, match="a row per key"):
            c.put_many(["d"], {"vector": block})
    c = RecordCache(tmp_path)
    assert [c.get(k)["vector"].tolist() for k in "abc"] == [[[0, 1]], [[2, 3]], [[4, 5]]] and len(c) == 3
    c.close()


def test_fingerprint_ignores_where_files_lie_but_not_what_they_hold():
    info = {"model_id": "m", "weights_sha256": "abc", "weights_file": "/a/model.safetensors", "pooling": "mean"}
    assert fingerprint(info) == fingerprint({**info, "weights_file": "/elsewhere/model.safetensors"})
    assert fingerprint(info) != fingerprint({**info, "weights_sha256": "abd"})
    assert fingerprint(info) != fingerprint({**info, "pooling": "cls"})


def test_records_round_trip_through_shards(tmp_path):
    regions = {"boxes": np.ones((3, 4), np.float32), "class_ids": np.array([1, 2, 3])}
    with RecordCache(tmp_path) as c:
        c.put("k1", regions)
        c.put("k2", {"boxes": np.zeros((0, 4), np.float32), "class_ids": np.zeros(0, np.int64)})  # ragged
        assert c.get("k1")["boxes"].shape == (3, 4)  # pending records are found too
    assert len(list(tmp_path.glob("*.h5"))) == 1
    c = RecordCache(tmp_path)
    assert len(c) == 2 and c.get("missing") is None
    np.testing.assert_array_equal(c.get("k1")["class_ids"], [1, 2, 3])
    assert c.get("k2")["boxes"].shape == (0, 4)
    assert (c.hits, c.misses) == (2, 1)
    c.close()


def test_scalars_are_refused_and_records_of_other_shapes_get_shards_of_their_own(tmp_path):
    c = RecordCache(tmp_path)
    with pytest.raises(ValueError, match="at least one dimension"):
        c.put("k", {"v": np.float32(1)})
    c.put("a", {"vector": np.ones((1, 64), np.float32)})   # a two-stream model's W/S vector
    c.put("b", {"vector": np.ones((1, 32), np.float32)})   # and its C vector
    c.put("c", {"w": np.ones(2)})
    c.close()
    assert len(list(tmp_path.glob("*.h5"))) == 3
    c = RecordCache(tmp_path)
    assert [c.get(k)[f].shape for k, f in (("a", "vector"), ("b", "vector"), ("c", "w"))] == [(1, 64), (1, 32), (2,)]
    c.close()


def test_a_failing_job_keeps_what_it_computed(tmp_path):
    with pytest.raises(RuntimeError):
        with RecordCache(tmp_path) as c:
            c.put("done", {"v": np.ones(3)})
            raise RuntimeError("the job fails half-way")
    assert RecordCache(tmp_path).get("done") is not None


def test_long_jobs_flush_on_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "FLUSH_SECONDS", 0.0)
    c = RecordCache(tmp_path)
    c.put("a", {"v": np.ones(3)})
    assert list(tmp_path.glob("*.h5"))  # written without flush(): a kill -9 now loses nothing
    c._close_shards()


def test_two_jobs_share_a_directory_and_small_shards_are_merged(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "MERGE_SHARDS", 3)
    first, second = RecordCache(tmp_path), RecordCache(tmp_path)  # e.g. one model on two datasets at once
    for i in range(5):
        first.put(f"a{i}", {"v": np.full(2, i)})
        first.flush()
        second.put(f"b{i}", {"v": np.full(2, 10 + i)})
        second.flush()
    first.close()
    second.close()
    c = RecordCache(tmp_path)
    assert len(c) == 10 and len(list(tmp_path.glob("*.h5"))) < 10
    assert [int(c.get(k)["v"][0]) for k in ("a0", "a4", "b0", "b4")] == [0, 4, 10, 14]
    c.close()


def test_cached_vectors_computes_only_the_misses(tmp_path):
    calls = []

    def compute(todo):
        calls.append(list(todo))
        return np.array([[float(i), 1.0] for i in todo], dtype=np.float32)

    with RecordCache(tmp_path) as c:
        v1 = cached_vectors(c, ["k0", "k1", "k2"], compute, chunk=2)
    assert calls == [[0, 1], [2]]
    with RecordCache(tmp_path) as c:
        v2 = cached_vectors(c, ["k1", "k3", "k0"], compute)
    assert calls[-1] == [1]  # only k3 (index 1 of the second call) is new
    np.testing.assert_array_equal(v2[[0, 2]], v1[[1, 0]])
    assert cached_vectors(None, ["x"], compute).shape == (1, 2)


def test_get_many_reads_what_get_reads(tmp_path):
    with RecordCache(tmp_path) as c:
        for i in range(6):
            c.put(f"k{i}", {"v": np.full((i % 3 + 1, 2), i, np.float32)})
            if i == 2:
                c.flush()  # two shards
        c.put("pending", {"v": np.zeros((1, 2), np.float32)})
        many = c.get_many(["k0", "k4", "pending", "absent", "k2"])
        assert set(many) == {"k0", "k4", "pending", "k2"}
        for key, record in many.items():
            np.testing.assert_array_equal(record["v"], c.get(key)["v"])


# -- damaged shards: every record checked against its digest when read ------------

DIM = 384  # a MiniLM vector


def vectors_of(todo):
    """A stand-in encoder: the vector of item i, the same in every call."""
    return np.stack([np.random.default_rng(i).normal(size=DIM).astype(np.float32) for i in todo])


def build_shard(path, n):
    keys = [f"item{i}" for i in range(n)]
    with RecordCache(path) as c:
        clean = cached_vectors(c, keys, vectors_of)
    [shard] = path.glob("*.h5")
    return keys, clean, shard


def overwrite(shard, dataset, start, garbage):
    """Overwrite bytes of ``dataset`` in the file from byte ``start`` of its data, as a disk fault would."""
    with h5py.File(shard, "r") as f:
        offset = f[dataset].id.get_offset()
    with open(shard, "r+b") as f:
        f.seek(offset + start)
        f.write(garbage)


def read_back(path, keys):
    calls = []

    def compute(todo):
        calls.extend(todo)
        return vectors_of(todo)

    with RecordCache(path) as c:
        return cached_vectors(c, keys, compute), calls


def test_damaged_vectors_are_named_and_recomputed(tmp_path, caplog):
    keys, clean, shard = build_shard(tmp_path, 200)
    overwrite(shard, "data/vector", 50 * DIM * 4 + 7, np.random.default_rng(0).bytes(30 * DIM * 4))
    vectors, calls = read_back(tmp_path, keys)
    np.testing.assert_array_equal(vectors, clean)
    assert calls == list(range(50, 81))  # the records the bytes touched, and no other
    assert f"{shard}: 31 cache record(s) damaged" in caplog.text and "item50, item51, item52 ..." in caplog.text
    caplog.clear()
    vectors, calls = read_back(tmp_path, keys)  # now from the recomputed records, without a warning
    np.testing.assert_array_equal(vectors, clean)
    assert calls == [] and "damaged" not in caplog.text


@pytest.mark.parametrize("garbage", [np.full(3, 10**9, np.int64), np.array([-5, 3, 2], np.int64),
                                     np.array([9, 9, 9], np.int64), np.array([6, 7, 8], np.int64)],
                         ids=["past-the-end", "reversed", "empty", "shifted-onto-other-records"])
def test_damaged_offsets_are_named_and_recomputed(tmp_path, caplog, garbage):
    keys, clean, shard = build_shard(tmp_path, 20)
    overwrite(shard, "offsets/vector", 5 * 8, garbage.tobytes())  # offsets[5:8]: records 4 to 7
    vectors, calls = read_back(tmp_path, keys)  # no IndexError, no other record's rows
    np.testing.assert_array_equal(vectors, clean)
    assert calls == [4, 5, 6, 7] and f"{shard}: 4 cache record(s) damaged" in caplog.text


def test_get_checks_a_record_too(tmp_path, caplog):
    keys, clean, shard = build_shard(tmp_path, 3)
    overwrite(shard, "data/vector", DIM * 4, b"\0" * 4)  # one component of item1
    with RecordCache(tmp_path) as c:
        np.testing.assert_array_equal(c.get("item0")["vector"][0], clean[0])
        assert c.get("item1") is None and (c.hits, c.misses) == (1, 1)
    assert f"{shard}: 1 cache record(s) damaged (not the bytes written), recomputed: item1\n" in caplog.text


def test_a_record_stored_under_another_key_is_not_returned(tmp_path):
    keys, clean, shard = build_shard(tmp_path, 3)
    overwrite(shard, "keys", 0, b"item2".ljust(64, b"\0") + b"item0".ljust(64, b"\0"))  # keys swapped
    vectors, calls = read_back(tmp_path, keys)
    np.testing.assert_array_equal(vectors, clean)
    assert sorted(calls) == [0, 1]


def test_a_shard_without_digests_is_recomputed(tmp_path, caplog):
    keys, clean, shard = build_shard(tmp_path, 5)
    with h5py.File(shard, "a") as f:  # as written before records carried digests
        del f["digests"]
        f["data/vector"][0] = 0.0
    with RecordCache(tmp_path) as c:  # removed when found, not read (a rewrite might take its name later)
        assert not shard.exists() and len(c) == 0
    vectors, calls = read_back(tmp_path, keys)
    np.testing.assert_array_equal(vectors, clean)
    assert calls == list(range(5)) and "unverifiable: removed" in caplog.text
    [rewritten] = tmp_path.glob("*.h5")
    with h5py.File(rewritten, "r") as f:
        assert "digests" in f
