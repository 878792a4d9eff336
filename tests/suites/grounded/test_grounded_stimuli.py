"""Grounded stimulus files: the committed conversion of the authors' test definitions."""

import json
from functools import cache

import pytest
import yaml
from helpers import REPO

from vlbias.errors import InputError
from vlbias.suites.grounded.convert import TESTS, TESTS_DIR, _main, convert_level, dump
from vlbias.suites.grounded.stimulus import ROLES, load_grounded_stimulus

STIMULI = REPO / "resources" / "stimuli" / "grounded"
COMMITTED = sorted(STIMULI.glob("*/*.yaml"))


@cache
def committed(dataset, test_id):
    """A committed stimulus file, loaded once per session (they are large)."""
    return load_grounded_stimulus(STIMULI / dataset / f"{test_id}.yaml")


@pytest.fixture(scope="module")
def grounded_mirror(mirror):
    if not (mirror / TESTS_DIR).is_dir():
        pytest.skip(f"the mirror {mirror} has no {TESTS_DIR}")
    return mirror


def test_caption_indices_written_as_text_read_either_way():
    """Protocol switch caption_indices (docs/grounded.md row 7): the file keeps upstream's "12";
    ``number`` reads caption 12, ``digits`` captions 1 and 2 (the authors' loaders)."""
    raw = yaml.safe_load((STIMULI / "coco" / "weat6.yaml").read_text(encoding="utf-8"))
    pairs = raw["levels"]["sentence"]["images"]["X"]["pairs"]
    assert pairs["COCO_val2014_000000400265.jpg"] == "12" and pairs["COCO_val2014_000000410554.jpg"] == "0"
    number = load_grounded_stimulus(STIMULI / "coco" / "weat6.yaml")
    digits = load_grounded_stimulus(STIMULI / "coco" / "weat6.yaml", caption_indices="digits")
    assert number.caption_indices == "number" and digits.caption_indices == "digits"
    image = "weat6/X/COCO_val2014_000000400265.jpg"
    captions = number.levels["sentence"]["captions"]["X"]
    assert [c for c, i in number.pairs("sentence", "X") if i == image] == [captions[12]]
    assert [c for c, i in digits.pairs("sentence", "X") if i == image] == [captions[1], captions[2]]
    # 10 single-digit indices read alike; 54 two-digit ones give two captions each
    assert len(digits.pairs("sentence", "X")) == 10 + 2 * 54 and len(number.pairs("sentence", "X")) == 64
    # nothing else changes: the word level and the attribute sets are lists upstream
    assert digits.pairs("word", "X") == number.pairs("word", "X")
    assert digits.pairs("sentence", "A_x") == number.pairs("sentence", "A_x")
    with pytest.raises(InputError, match="caption_indices 'letters': must be one of number, digits"):
        load_grounded_stimulus(STIMULI / "coco" / "weat6.yaml", caption_indices="letters")


def test_every_listed_test_is_committed_and_loads():
    expected = {f"{d}/{t}" for d, tests in TESTS.items() for t in tests}
    assert {f"{p.parent.name}/{p.stem}" for p in COMMITTED} == expected
    # the brief's coverage: Google C3..+C13, 4 double binds, 2 occupations, ABW; COCO/CC C6, C8, occupation
    assert len(TESTS["google"]) == 13 and set(TESTS["coco"]) == set(TESTS["concap"]) == {"weat6", "weat8", "occ_gender"}
    for p in COMMITTED:
        s = committed(p.parent.name, p.stem)
        assert s.dataset == p.parent.name
        assert "word" in s.levels
        for level in s.levels:
            for r in ROLES:
                assert s.pairs(level, r)


def test_committed_files_equal_a_fresh_conversion(grounded_mirror, tmp_path, capsys):
    _main([str(grounded_mirror), str(tmp_path)])
    fresh = sorted(tmp_path.glob("*/*.yaml"))
    assert [p.relative_to(tmp_path) for p in fresh] == [p.relative_to(STIMULI) for p in COMMITTED]
    for new, old in zip(fresh, COMMITTED):
        assert new.read_text(encoding="utf-8") == old.read_text(encoding="utf-8"), f"{old} is stale: re-run convert"
    assert len(capsys.readouterr().out.splitlines()) == len(COMMITTED)


def test_pairs_and_image_sets_of_google_c6():
    s = committed("google", "weat6")
    assert s.name == "C6: M/W, Career/Family"
    assert s.labels == {"X": "MaleNames", "Y": "FemaleNames", "A": "Career", "B": "Family"}
    word = s.levels["word"]
    assert word["dataset_dir"] == "weat6" and word["notes"]  # upstream says weat13: corrected, noted
    assert s.pairs("word", "X")[0] == ("John", "weat6/targ1/male_0.jpg")
    assert s.pairs("word", "A_x")[0] == ("executive", "weat6/attr1/male_executive_0.jpg")
    assert s.pairs("word", "A_y")[0] == ("executive", "weat6/attr2/female_executive_0.jpg")
    # A_x and A_y share the captions of A and depict the two target categories
    assert all("/male_" in i for _, i in s.pairs("word", "A_x") + s.pairs("word", "B_x"))
    assert all("/female_" in i for _, i in s.pairs("word", "A_y") + s.pairs("word", "B_y"))
    sent = s.pairs("sentence", "X")
    assert len(sent) == 640 and sent[0][0].endswith("John.")  # 80 images x 8 sentences each
    assert "John" in word["mask"]["tokens"] and "john" in word["mask"]["tokens"]
    assert {"person", "man", "woman"} <= set(word["mask"]["region_labels"])


def test_coco_and_concap_images_are_file_names():
    s = committed("coco", "weat6")
    assert s.levels["word"]["dataset_dir"] is None
    # ids as in the acquisition manifest of vlbias.suites.grounded.sources: <test>/<image set>/<file>
    assert s.pairs("word", "X")[0] == ("John", "weat6/X/COCO_val2014_000000410554.jpg")
    # upstream "12"-style indices: one caption per image, noted
    assert [len(s.levels["sentence"]["images"][r]["pairs"]) for r in ("X", "Y")] == [64, 64]
    assert len(s.pairs("sentence", "X")) == 64
    c = committed("concap", "weat8")
    assert set(c.levels) == {"word"}  # upstream has no sentence-level C8 for Conceptual Captions


# Table 1 of the paper: images per Google test. The largest level of each test uses exactly these
# (C8 is left out: upstream lists 480 images for it, 458 of them used, the paper counts 718).
TABLE1 = {"weat3": 1648, "weat6": 780, "weat11": 1680, "weat12": 748, "weat13": 522,
          "heilman_gender_double_bind_competent": 560, "heilman_gender_double_bind_likable": 480,
          "heilman_race_double_bind_competent": 440, "heilman_race_double_bind_likable": 360,
          "occ_gender": 960, "occ_race": 928, "angry_black_woman_stereotype": 760}


@pytest.mark.parametrize("test_id", sorted(TABLE1))
def test_google_image_counts_match_table1(test_id):
    s = committed("google", test_id)
    assert max(len(s.image_ids(level)) for level in s.levels) == TABLE1[test_id]


def test_google_image_ids_are_in_the_acquisition_manifest():
    manifest = REPO / "resources" / "manifests" / "grounded_google_images.tsv"
    if not manifest.exists():
        pytest.skip(f"{manifest} is absent")
    listed = set()
    for line in manifest.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#") and not line.startswith("test\t"):
            test, role, file = line.split("\t")[:3]
            listed.add(f"{test}/{role}/{file}")
    for p in sorted((STIMULI / "google").glob("*.yaml")):
        s = committed("google", p.stem)
        unlisted = {i for lv in s.levels.values() for i in lv.get("unlisted", [])}
        assert set(s.image_ids()) - listed == unlisted, p.name


# --- malformed inputs ---------------------------------------------------------------------------

def _upstream(**changes):
    doc = {
        "test_types": ["word"], "dataset": "google", "dataset_dir": "t", "test_name": "t",
        "targ1": {"category": "M", "captions": {"0": "John"}, "images": {"m0.jpg": [0]}},
        "targ2": {"category": "F", "captions": {"0": "Amy"}, "images": {"f0.jpg": [0]}},
        "attr1": {"category": "C", "captions": {"0": "office"}, "M_Images": {"m1.jpg": [0]}, "F_Images": {"f1.jpg": [0]}},
        "attr2": {"category": "H", "captions": {"0": "home"}, "M_Images": {"m2.jpg": [0]}, "F_Images": {"f2.jpg": [0]}},
        "contextual_words": ["John", "Amy"],
    }
    for dotted, value in changes.items():
        *keys, last = dotted.split(".")
        d = doc
        for k in keys:
            d = d[k]
        if value is None:
            del d[last]
        else:
            d[last] = value
    return doc


ROLES_BY_FILE = {("t", f): r for r, files in {"targ1": ["m0.jpg"], "targ2": ["f0.jpg"],
                                              "attr1": ["m1.jpg", "m2.jpg"], "attr2": ["f1.jpg", "f2.jpg"]}.items()
                 for f in files}


def _write(tmp_path, doc, name="weat0.jsonl"):
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_convert_level_of_a_small_test(tmp_path):
    level, cats = convert_level(_write(tmp_path, _upstream()), "google", ROLES_BY_FILE)
    assert cats == {"targ1": "M", "targ2": "F", "attr1": "C", "attr2": "H"}
    assert level["images"]["A_y"] == {"role": "attr2", "pairs": {"f1.jpg": [0]}}
    assert level["mask"]["tokens"] == ["John", "Amy", "john", "amy"]
    assert "unlisted" not in level


@pytest.mark.parametrize("change, message", [
    ({"targ1": None}, "key 'targ1' is missing"),
    ({"attr1.F_Images": None}, "key 'attr1/F_Images' is missing"),
    ({"attr2.M_Images": {"m2.jpg": [3]}}, "key 'attr2/M_Images/m2.jpg': expected a non-empty list of caption indices < 1"),
    ({"targ2.captions": {"1": "Amy"}}, "key 'targ2/captions': keys must be 0..0"),
    ({"targ1.images": {"../x.jpg": [0]}}, "key 'targ1/images/../x.jpg': not a plain file name"),
    ({"attr1.M_Images": {"nowhere.jpg": [0]}}, "images of A_x: expected all in one folder"),
    ({"targ1.category": 3}, "key 'targ1/category': expected str, got int"),
    ({"targ1.images": {"m0.jpg": "12"}}, "key 'targ1/images/m0.jpg': caption index '12' out of range either way"),
])
def test_malformed_upstream_names_file_and_key(tmp_path, change, message):
    path = _write(tmp_path, _upstream(**change))
    with pytest.raises(InputError, match=rf"^{path}: .*"):
        try:
            convert_level(path, "google", ROLES_BY_FILE)
        except InputError as e:
            assert message in str(e)
            raise


def test_caption_indices_as_text_are_kept_as_written(tmp_path):
    doc = _upstream(**{"targ1.captions": {"0": "John", "1": "Paul"}, "targ1.images": {"m0.jpg": "10"}})
    level, _ = convert_level(_write(tmp_path, doc), "google", ROLES_BY_FILE)
    assert level["images"]["X"]["pairs"] == {"m0.jpg": "10"}  # "10": caption 10 is out of range, 1 and 0 are not
    assert any("as text" in n for n in level["notes"])


def test_unlisted_image_keeps_its_set_folder(tmp_path):
    doc = _upstream(**{"attr1.M_Images": {"m1.jpg": [0], "gone.jpg": [0]}})
    level, _ = convert_level(_write(tmp_path, doc), "google", ROLES_BY_FILE)
    assert level["unlisted"] == ["t/attr1/gone.jpg"]


def test_not_json_names_the_file(tmp_path):
    path = _write(tmp_path, "{not json")
    with pytest.raises(InputError, match=rf"^{path}: not valid JSON"):
        convert_level(path, "google", ROLES_BY_FILE)


def _stimulus(tmp_path, edit, name="weat6"):
    doc = yaml.safe_load((STIMULI / "google" / "weat6.yaml").read_text(encoding="utf-8"))
    edit(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("levels"), "key '(top level)': 'levels' is a required property"),
    (lambda d: d["levels"]["word"]["captions"].pop("B"), "key 'levels/word/captions': 'B' is a required property"),
    (lambda d: d["levels"]["word"]["images"]["A_x"]["pairs"].update({"x.jpg": []}),
     "key 'levels/word/images/A_x/pairs/x.jpg'"),
    (lambda d: d["levels"]["word"]["images"]["B_y"]["pairs"].update({"x.jpg": [8]}),
     "key 'levels/word/images/B_y/pairs/x.jpg': caption index 8 out of range"),
    (lambda d: d["levels"]["word"]["images"]["Y"].pop("role"), "key 'levels/word/images/Y/role'"),
    (lambda d: d["levels"]["word"]["images"]["X"]["pairs"].update({"x.jpg": "1a"}),
     "key 'levels/word/images/X/pairs/x.jpg'"),
    (lambda d: d["levels"]["word"]["images"]["B_y"]["pairs"].update({"x.jpg": "18"}),
     "key 'levels/word/images/B_y/pairs/x.jpg': caption index 18 out of range"),
    (lambda d: d.update(suite="seat"), "key 'suite'"),
])
def test_malformed_stimulus_names_file_and_key(tmp_path, edit, message):
    path = _stimulus(tmp_path, edit)
    with pytest.raises(InputError) as e:
        load_grounded_stimulus(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_stimulus_id_must_match_file_name(tmp_path):
    path = _stimulus(tmp_path, lambda d: None, name="other")
    with pytest.raises(InputError, match="key 'id': 'weat6' does not match the file name 'other'"):
        load_grounded_stimulus(path)
