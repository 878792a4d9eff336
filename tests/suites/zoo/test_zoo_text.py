"""Ghate et al.'s text tests in the zoo's battery (vlbias.suites.zoo.text): a hand-written file read into
its test, bad files named, the selection against the manifest, the manifest against the mirrored
CLIP_bias files (skipped where ../shared is absent)."""

import json
from pathlib import Path

import pytest
from helpers import REPO

from vlbias.errors import InputError
from vlbias.io.fetch import Source
from vlbias.suites.zoo.analysis import order_of
from vlbias.suites.zoo.suite import check
from vlbias.suites.zoo.text import fetch_tests, load_test, manifest_tests, read_text_test, staged_path, text_tests

MANIFEST = REPO / "resources/manifests/zoo_text_tests.tsv"
MIRROR = REPO.parent / "shared/data"
SOURCE = Source(repo="kshitishghate/CLIP_bias", commit="8dffa18c055b60aad28ca8a99c72f0b11cb3ad2f",
                mirror_name="clip_bias")
DOC = {"targ1": {"category": "Flowers", "examples": ["rose", "tulip"]},
       "targ2": {"category": "Insects", "examples": ["ant", "wasp"]},
       "attr1": {"category": "Pleasant", "examples": ["joy", "love", "peace"]},
       "attr2": {"category": "Unpleasant", "examples": ["hate", "war", "pain"]}}


def write(tmp_path, doc, folder="seat", stem="sent-weat1"):
    path = tmp_path / folder / f"{stem}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_text_test_reads_into_its_four_text_sets(tmp_path):
    s = load_test(write(tmp_path, DOC))
    assert (s.id, s.level, s.family) == ("seat:sent-weat1", "sentence", "ghate2025")
    assert s.X.items == ("rose", "tulip") and s.B.items == ("hate", "war", "pain") and s.A.label == "Pleasant"
    assert s.name == "Flowers/Insects × Pleasant/Unpleasant"
    assert s.X.key == "seat:sent-weat1/X"  # the test's own texts in a model's store
    assert order_of(s) == "text-text"
    assert read_text_test(write(tmp_path, DOC, "nrc", "weat1")).level == "word"


@pytest.mark.parametrize("doc, message", [
    ("{", "not valid JSON"),
    ({k: v for k, v in DOC.items() if k != "attr2"}, "key 'attr2' is missing"),
    ({**DOC, "targ1": {"examples": ["rose"]}}, "key 'targ1/category' is missing"),
    ({**DOC, "attr1": {"category": "P", "examples": "joy"}}, "key 'attr1/examples': expected list"),
    ({**DOC, "attr1": {"category": "P", "examples": ["joy", 3]}}, "key 'attr1/examples': expected a non-empty list"),
    ({**DOC, "attr1": {"category": "P", "examples": []}}, "key 'attr1/examples': expected a non-empty list"),
    ({**DOC, "attr1": {"category": "P", "examples": ["rose"]}}, "'rose' is also in set X"),
])
def test_a_bad_text_test_is_one_line_naming_the_file_and_key(tmp_path, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(InputError, match=message) as e:
        read_text_test(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_the_selection_of_text_tests_against_the_manifest():
    zoo = {"text_manifest": str(MANIFEST)}
    every = text_tests({**zoo, "text_tests": "all"})
    assert len(every) == 98 and every[:2] == ["seat:angry_black_woman_stereotype", "seat:sent-angry_black_woman_stereotype"]
    assert sum(t.startswith("nrc:") for t in every) == 50
    assert text_tests({**zoo, "text_tests": ["nrc:weat1", "seat:weat2"]}) == ["nrc:weat1", "seat:weat2"]
    assert text_tests({**zoo, "text_tests": []}) == []
    with pytest.raises(InputError, match="lists no text test 'seat:weat99'"):
        text_tests({**zoo, "text_tests": ["seat:weat1", "seat:weat99"]})
    assert staged_path("nrc:weat1") == "results/zoo/upstream/clip_bias/nrc/weat1.jsonl"


def test_text_tests_need_their_source(tmp_path):
    config = {"ieat": {"stimuli": "s"}, "sources": {}, "zoo": {
        "tests": ["x"], "accuracy": "a.csv", "text_tests": "all", "text_manifest": str(MANIFEST), "cross_modal": None,
        "oasis": None,
        "select": {"pairs": [], "archs": ["*"], "datasets": [], "params": {}, "limit": None}, "models": [],
        "datasets": str(REPO / "resources/zoo/datasets.tsv"), "architectures": str(REPO / "resources/zoo/architectures.tsv")}}
    (tmp_path / "s").mkdir()
    (tmp_path / "s/x.yaml").touch()
    assert any("text tests need sources/clip_bias" in p for p in check(config, tmp_path))
    config["zoo"]["text_tests"] = []
    assert not any("clip_bias" in p for p in check(config, tmp_path))
    config["zoo"]["text_tests"] = ["seat:nope"]
    assert any("lists no text test 'seat:nope'" in p for p in check(config, tmp_path))
    # the OASIS images serve the cross-modal tests alone
    config["zoo"]["oasis"] = {"folder": "OASIS", "manifest": "oasis.tsv"}
    assert "key 'zoo/oasis': the OASIS images serve the cross-modal tests alone: set zoo/cross_modal" in check(
        config, tmp_path)


@pytest.mark.skipif(not (MIRROR / "clip_bias").is_dir(), reason="the CLIP_bias mirror (../shared/data/clip_bias) is absent")
def test_every_listed_text_test_is_fetched_checked_and_read(tmp_path):
    names = list(manifest_tests(MANIFEST))
    outs = [tmp_path / staged_path(n) for n in names]
    fetch_tests(MANIFEST, names, SOURCE, str(MIRROR), tmp_path / "cache", outs)
    tests = [load_test(p) for p in outs]
    assert [t.id for t in tests] == names and {order_of(t) for t in tests} == {"text-text"}
    # the two folders' files of one stem differ where their stimuli do
    by_id = {t.id: t for t in tests}
    assert by_id["seat:weat1"].X.items == by_id["nrc:weat1"].X.items
    assert by_id["seat:sent-weat1"].sets != by_id["nrc:sent-weat1"].sets


def test_a_file_unlike_its_manifest_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    write(mirror / "clip_bias/data", DOC, "tests_seat", "weat1")
    manifest = tmp_path / "m.tsv"
    manifest.write_text("name\tpath\tsha256\nseat:weat1\tdata/tests_seat/weat1.jsonl\t" + "0" * 64 + "\n")
    with pytest.raises(Exception, match="sha256|checksum"):
        fetch_tests(manifest, ["seat:weat1"], SOURCE, str(mirror), tmp_path / "cache", [tmp_path / "out.jsonl"])
    assert not Path(tmp_path / "out.jsonl").exists()
