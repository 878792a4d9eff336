"""Hostile inputs, property-based: the readers of vectors files (CSV, NPY + ids, HDF5),
stimulus files (association, grounded, MLM), TSV manifests and the config, given valid files mutated
(bytes flipped, truncated, hostile snippets inserted: NaN, inf, 1e309, quotes, NUL, newlines, odd
unicode, ``..`` paths, huge header claims) and valid documents with a value or a key replaced. Each
input gives a correct result (a valid file round-trips; whatever is accepted keeps the readers'
promises) or a named InputError, never another exception.

The budget: ``VLBIAS_HYPOTHESIS_EXAMPLES`` examples per test (default 40, the CI's; derandomized, no
example database, so every run tries the same inputs), e.g.

    VLBIAS_HYPOTHESIS_EXAMPLES=800 pytest tests/io/test_hostile_inputs.py --hypothesis-show-statistics
"""

import copy
import csv
import io
import os
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from helpers import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlbias.config import ConfigError, check_config
from vlbias.errors import InputError
from vlbias.io.fetch import Source, read_manifest
from vlbias.io.stimuli import load_stimulus
from vlbias.io.vectors import read_vectors
from vlbias.suites.mlm.stimuli import load_mlm_stimulus
from vlbias.suites.grounded.stimulus import load_grounded_stimulus
from vlbias.suites.ieat import image_entries

settings.register_profile("vlbias-hostile", max_examples=int(os.environ.get("VLBIAS_HYPOTHESIS_EXAMPLES", "40")),
                          derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HOSTILE = settings.get_profile("vlbias-hostile")

SNIPPETS = [b"nan", b"inf", b"-inf", b"1e309", b"1e308", b"1e-320", b'"', b"'", b",", b"\t", b"\n", b"\r", b"\x00",
            b"\xff", b"\xef\xbb\xbf", "\u2028".encode(), "\x85".encode(), "é".encode(), "\U0001f642".encode(), b"../",
            b"/etc/passwd", b"..", b"#", b" ", b"-", b"0", b"", b"{", b"[", b": ", b"- ", b"&a", b"*a",
            b"!!python/object"]
TEXTS = st.sampled_from(["", " ", "..", "../x", "../../tmp/x.jpg", "/etc/passwd", "a/../../b", "x\n", "a\nb", "\x00",
                         "a\x00b", "\t", "\u2028", "\x85", "é", "\U0001f642", "a" * 300, "nan", "1e308", "-1", "null",
                         "{agent}", "{entity}", "{", "ok", "weat1", "toy/flower", "female", "male"]) \
    | st.text(max_size=12)
VALUES = st.one_of(TEXTS, st.integers(-2**70, 2**70), st.floats(), st.booleans(), st.none(),
                   st.lists(TEXTS, max_size=3), st.dictionaries(TEXTS, TEXTS, max_size=2))


@st.composite
def mutated(draw, data):
    """``data`` (bytes) with one to three mutations: a byte flipped, a cut, a snippet inserted."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "cut", "insert", "truncate"]))
        if kind == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 16))]
        elif kind == "truncate":
            del data[at:]
        else:
            data[at:at] = draw(st.sampled_from(SNIPPETS))
    return bytes(data)


def nodes(doc, path=()):
    """Every (path of keys, node) of a YAML document, the document itself first."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        yield from nodes(value, (*path, key))


@st.composite
def edited(draw, doc):
    """A deep copy of ``doc`` with one to three nodes replaced by a hostile value, or renamed (mapping keys)."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        path, _ = draw(st.sampled_from(list(nodes(doc))[1:]))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and draw(st.booleans()):
            new = draw(TEXTS)
            parent[new] = parent.pop(path[-1])
        else:
            parent[path[-1]] = draw(VALUES)
    return doc


def either_result_or_input_error(read, check=lambda result: None):
    """``read()``'s result, which must pass ``check``, or None when it raised an InputError."""
    try:
        result = read()
    except InputError as e:
        assert str(e).startswith(f"{e.source}: ") and len(str(e)) < 2000, str(e)  # named, and short
        return None
    check(result)
    return result


# --- vectors files ---------------------------------------------------------------------------------

IDS = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"), min_size=1,
                       max_size=8), min_size=1, max_size=6, unique=True)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def vector_files(draw):
    ids = draw(IDS)
    dim = draw(st.integers(1, 4))
    vectors = np.array(draw(st.lists(st.lists(FLOATS, min_size=dim, max_size=dim), min_size=len(ids),
                                     max_size=len(ids))), dtype=np.float64)
    return ids, vectors


def write(folder, format, ids, vectors):
    """The files of ``ids``/``vectors`` in ``format``: (path, ids file or None)."""
    if format == "csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["id", *(f"d{i}" for i in range(vectors.shape[1]))])
        writer.writerows([i, *map(repr, v)] for i, v in zip(ids, vectors.tolist()))
        (folder / "v.csv").write_text(text.getvalue(), encoding="utf-8")
        return folder / "v.csv", None
    if format == "npy":
        np.save(folder / "v.npy", vectors)
        (folder / "v.ids").write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
        return folder / "v.npy", folder / "v.ids"
    with h5py.File(folder / "v.h5", "w") as f:
        f.create_dataset("ids", data=ids, dtype=h5py.string_dtype("utf-8"))
        f["vectors"] = vectors
    return folder / "v.h5", None


def keeps_its_promises(vectors):
    """What every reader promises of the vectors it accepts (vlbias.io.vectors)."""
    assert vectors.vectors.dtype == np.float64 and vectors.vectors.shape == (len(vectors.ids), vectors.dim)
    assert np.isfinite(vectors.vectors).all() and vectors.vectors.any(axis=1).all()
    assert len(set(vectors.ids)) == len(vectors.ids) and all(vectors.ids)


@pytest.mark.parametrize("format", ["csv", "npy", "hdf5"])
@HOSTILE
@given(file=vector_files())
def test_a_valid_vectors_file_round_trips(format, file):
    ids, vectors = file
    with tempfile.TemporaryDirectory() as folder:
        path, ids_path = write(Path(folder), format, ids, vectors)
        read = lambda: read_vectors(path, ids=ids_path)  # noqa: E731
        if not vectors.any(axis=1).all():  # a zero vector: its cosine is undefined
            with pytest.raises(InputError, match="a zero vector"):
                read()
            return
        got = read()
    assert got.ids == ids
    np.testing.assert_array_equal(got.vectors, vectors)  # exactly, 1e308 and 5e-324 included


@pytest.mark.parametrize("format", ["csv", "npy", "hdf5"])
@HOSTILE
@given(file=vector_files(), data=st.data())
def test_a_mutated_vectors_file_is_read_or_named(format, file, data):
    ids, vectors = file
    with tempfile.TemporaryDirectory() as folder:
        path, ids_path = write(Path(folder), format, ids, vectors)
        victim = ids_path if ids_path is not None and data.draw(st.booleans()) else path
        victim.write_bytes(data.draw(mutated(victim.read_bytes())))
        either_result_or_input_error(lambda: read_vectors(path, ids=ids_path), keeps_its_promises)


@HOSTILE
@given(rows=st.integers(1, 10**9), columns=st.integers(1, 10**9), dtype=st.sampled_from(["<f8", "<f4", ">i8", "|u1"]))
def test_an_npy_header_claiming_more_than_the_file_holds_allocates_nothing(rows, columns, dtype):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "v.npy"
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": False, "shape": (rows, columns)})
            f.write(bytes(64))
        (Path(folder) / "v.ids").write_text("a\n" * min(rows, 8))
        either_result_or_input_error(lambda: read_vectors(path, ids=Path(folder) / "v.ids"), keeps_its_promises)


# --- stimulus files --------------------------------------------------------------------------------

def stimulus_doc(relative):
    return yaml.safe_load((REPO / relative).read_text(encoding="utf-8"))


SEAT = "resources/stimuli/seat/weat1.yaml"
IEAT = "resources/stimuli/ieat/insect-flower-text-attributes.yaml"
GROUNDED = "resources/stimuli/grounded/concap/weat8.yaml"
MLM = "resources/stimuli/mlm/entities.yaml"
LOADERS = {SEAT: load_stimulus, IEAT: load_stimulus, GROUNDED: load_grounded_stimulus, MLM: load_mlm_stimulus}


@pytest.mark.parametrize("relative", list(LOADERS))
@HOSTILE
@given(data=st.data())
def test_an_edited_stimulus_file_is_loaded_or_named(relative, data):
    text = (yaml.safe_dump(data.draw(edited(stimulus_doc(relative))), allow_unicode=True).encode() if data.draw(
        st.booleans()) else data.draw(mutated((REPO / relative).read_bytes())))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(relative).name
        path.write_bytes(text)
        either_result_or_input_error(lambda: LOADERS[relative](path))


# --- manifests -------------------------------------------------------------------------------------

SOURCE = Source(repo="owner/repo", commit="c0ffee", mirror_name="repo", url_template="http://127.0.0.1:9/{path}")
MANIFEST = b"# images\ncategory\tfile\tsha256\ntoy/flower\ta.png\t\ntoy/insect\tb.png\t\n"


@HOSTILE
@given(data=st.data())
def test_a_mutated_image_manifest_reads_and_writes_only_inside_its_folders(data):
    # the mirror's and the cache's files, nothing else, whatever the manifest's rows say
    text = data.draw(mutated(MANIFEST) | st.builds(
        lambda category, file: MANIFEST + f"{category}\t{file}\t\n".encode("utf-8", "surrogatepass"), TEXTS, TEXTS))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for rel in ("toy/flower/a.png", "toy/insect/b.png"):
            (root / "mirror/repo/data/experiments" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "mirror/repo/data/experiments" / rel).write_bytes(b"png")
        (root / "x.jpg").write_bytes(b"outside")
        (root / "manifest.tsv").write_bytes(text)
        before = {p for p in root.rglob("*") if p.is_file()}

        def inside(entries):
            cache = (root / "cache").resolve()
            assert all(e["path"] is None or Path(e["path"]).resolve().is_relative_to(cache) for e in entries)

        either_result_or_input_error(lambda: image_entries(root / "manifest.tsv", SOURCE, str(root / "mirror"),
                                                           root / "cache"), inside)
        after = {p for p in root.rglob("*") if p.is_file()}
        assert all(p.resolve().is_relative_to((root / "cache").resolve()) for p in after - before)


@HOSTILE
@given(text=mutated(MANIFEST))
def test_a_mutated_manifest_is_rows_of_its_header_or_named(text):
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "m.tsv").write_bytes(text)
        either_result_or_input_error(lambda: read_manifest(Path(folder) / "m.tsv"), lambda rows: all(
            list(r) == list(rows[0]) for r in rows))


# --- the config ------------------------------------------------------------------------------------

CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())
NAMED = [("ieat", "models"), ("seat", "models"), ("grounded", "models"), ("mlm", "models"), ("regions", "detectors")]


@HOSTILE
@given(config=edited(CONFIG))
def test_an_edited_config_is_accepted_with_safe_names_or_named(config):
    def safe_names(config):
        import re

        for section, key in NAMED:
            for name in (config.get(section) or {}).get(key) or {}:
                assert re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", name), name  # row 9: a name is a file name

    try:
        check_config(config, REPO / "workflow/schemas/config.schema.yaml", root=REPO)
    except ConfigError as e:
        assert str(e).startswith("config/config.yaml: invalid configuration:\n  "), str(e)
        return
    safe_names(config)
