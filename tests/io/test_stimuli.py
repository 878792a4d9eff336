"""Stimulus files (vlbias.io.stimuli): what a malformed one says, and how text sets are keyed."""

import csv
import logging
import re

import pytest
import yaml

from helpers import REPO
from vlbias.errors import InputError
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import Progress

DOC = {"id": "toy", "name": "Toy", "suite": "seat", "level": "word",
       "X": {"label": "Flowers", "items": ["rose", "tulip"]}, "Y": {"label": "Insects", "items": ["ant", "wasp"]},
       "A": {"label": "Pleasant", "items": ["joy", "love"]}, "B": {"label": "Unpleasant", "items": ["pain", "hate"]}}


def write(tmp_path, text):
    path = tmp_path / "toy.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_text_sets_are_keyed_by_test_and_set(tmp_path):
    s = load_stimulus(write(tmp_path, yaml.safe_dump(DOC)))
    assert [st.key for st in s.sets.values()] == ["toy/X", "toy/Y", "toy/A", "toy/B"]


def test_a_key_given_twice_names_both_lines(tmp_path):
    text = yaml.safe_dump(DOC, sort_keys=False) + "X:\n  label: Again\n  items: [daisy]\n"
    with pytest.raises(InputError) as e:
        load_stimulus(write(tmp_path, text))
    line = 1 + next(i for i, s in enumerate(text.splitlines()) if s.startswith("X:"))
    assert str(e.value).startswith(f"{tmp_path / 'toy.yaml'}: not valid YAML")
    assert f"key 'X' is given twice (first on line {line})" in str(e.value)


@pytest.mark.parametrize("change,message", [
    # a typo: the config check's one line with its suggestion, and the missing key not said twice
    (lambda d: d.update(Aa=d.pop("A")), "key 'Aa': unknown key (did you mean 'A'?)"),
    (lambda d: d["B"].update(itmes=d["B"].pop("items")), "key 'B/itmes': unknown key (did you mean 'items'?)"),
    (lambda d: d.update(level="words"), "key 'level': 'words' is not one of ['word', 'sentence', 'image', "
                                        "'cross-modal'] (did you mean 'word'?)"),
    (lambda d: d.pop("name"), "key '(top level)': 'name' is a required property"),
])
def test_a_mistake_in_a_stimulus_file_is_one_line_with_a_suggestion(tmp_path, change, message):
    doc = yaml.safe_load(yaml.safe_dump(DOC))
    change(doc)
    with pytest.raises(InputError) as e:
        load_stimulus(write(tmp_path, yaml.safe_dump(doc)))
    assert str(e.value) == f"{tmp_path / 'toy.yaml'}: {message}"


def test_a_file_that_is_not_utf8_is_named_with_the_line(tmp_path):
    text = yaml.safe_dump(DOC, sort_keys=False).replace("joy", "jo\xff")
    with pytest.raises(InputError, match=r"toy.yaml: not UTF-8 text: byte 0xff on line \d+"):
        load_stimulus(write(tmp_path, text.encode("latin-1")))


def test_the_same_stimulus_in_two_sets_is_refused(tmp_path):
    doc = {**DOC, "B": {"label": "Unpleasant", "items": ["pain", "tulip"]}}
    with pytest.raises(InputError, match="key 'B': 'tulip' is also in set X"):
        load_stimulus(write(tmp_path, yaml.safe_dump(doc)))
    doc = {**DOC, "suite": "ieat", "X": {"label": "a", "category": "c/x"}, "Y": {"label": "b", "category": "c/x"},
           "A": {"label": "c", "category": "c/a"}, "B": {"label": "d", "category": "c/b"}}
    with pytest.raises(InputError, match="key 'Y': 'c/x' is also in set X"):
        load_stimulus(write(tmp_path, yaml.safe_dump(doc)))


@pytest.mark.parametrize("x,b", [("Tulip", "tulip"), ("tulip ", "tulip"), ("tu\u200blip", "tulip"),
                                 ("ｄａｉｓｙ", "daisy"), ("a  daisy", "A daisy")])
def test_texts_that_differ_only_by_case_spacing_or_invisible_characters_are_one_stimulus(tmp_path, x, b):
    """Target or attribute sets that differ only so gave d≈0 and status ok for an uncased model
    (the same stimulus on both sides). Refused naming both items, across sets and within one."""
    doc = {**DOC, "X": {"label": "Flowers", "items": [x, "rose"]}, "B": {"label": "Unpleasant", "items": ["pain", b]}}
    with pytest.raises(InputError, match=rf"^\S+toy.yaml: key 'B/items': {re.escape(repr(b))} and "
                                         rf"{re.escape(repr(x))} \(set X\) differ only by case, spaces or invisible "
                                         "characters: one stimulus to an uncased model$"):
        load_stimulus(write(tmp_path, yaml.safe_dump(doc)))
    doc = {**DOC, "X": {"label": "Flowers", "items": ["rose", x, b]}}
    with pytest.raises(InputError, match=rf"key 'X/items': {re.escape(repr(b))} and {re.escape(repr(x))} \(set X\)"):
        load_stimulus(write(tmp_path, yaml.safe_dump(doc)))


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    """A stimulus file of 1.4 kB whose aliases nest eight deep took 35 s and 3.2 GB before
    its error (every error of the expanded tree rendered). Refused in one line, from the file's own
    size; aliases that expand a file moderately (what yaml.dump writes for a list used twice) load."""
    import time

    # X's items: nine lists of nine ... eight deep: 9^9 strings (an error message quotes each list it refuses)
    nested = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    nested += [f"&{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi")]
    doc = {k: v for k, v in DOC.items() if k != "X"}
    text = yaml.safe_dump(doc, sort_keys=False) + "X:\n  label: Flowers\n  items: [" + ", ".join(nested) + "]\n"
    assert len(text.encode()) < 1500  # (the probe's: 1.4 kB)
    start = time.monotonic()
    with pytest.raises(InputError) as e:
        load_stimulus(write(tmp_path, text))
    assert time.monotonic() - start < 0.5
    assert re.fullmatch(r"\S+toy.yaml: not valid YAML: while reading its aliases \(\*name\) expand it to more than "
                        r"1,000,000 items: write them out, or fewer in \S+, line \d+, column \d+", str(e.value)), str(e.value)
    shared = ["joy", "love"]
    doc = {**DOC, "A": {"label": "Pleasant", "items": shared}, "extra_note": shared}
    text = yaml.dump(doc)
    assert "&id001" in text and "*id001" in text
    with pytest.raises(InputError, match="extra_note"):  # read (aliases and all), then validated
        load_stimulus(write(tmp_path, text))
    text = yaml.dump({**DOC, "A": {"label": "Pleasant", "items": shared}, "B": {"label": "Unpleasant",
                                                                                "items": shared}})
    with pytest.raises(InputError, match="key 'B': 'joy' is also in set A"):
        load_stimulus(write(tmp_path, text))


def test_a_cross_modal_test_mixes_image_and_text_sets(tmp_path):
    doc = {**DOC, "suite": "ieat", "level": "cross-modal", "X": {"label": "Flowers", "category": "toy/flower"},
           "Y": {"label": "Insects", "category": "toy/insect"}}
    s = load_stimulus(write(tmp_path, yaml.safe_dump(doc)))
    assert [st.key for st in s.sets.values()] == ["toy/flower", "toy/insect", "toy/A", "toy/B"]
    assert s.A.items == ("joy", "love") and s.X.category == "toy/flower"


@pytest.mark.parametrize("change,message", [
    ({"X": {"label": "Flowers", "category": "toy/flower"}},
     "key 'X': a SEAT set lists its text `items` (image categories are iEAT's)"),
    ({"suite": "ieat", "level": "image", "X": {"label": "Flowers", "category": "toy/flower"}},
     "key 'Y': level 'image' takes image categories only"),
    ({"suite": "ieat", "level": "cross-modal"}, "level 'cross-modal': expected image categories and text items"),
])
def test_sets_of_the_wrong_modality_are_refused(tmp_path, change, message):
    with pytest.raises(InputError, match=re.escape(message)):
        load_stimulus(write(tmp_path, yaml.safe_dump({**DOC, **change})))


@pytest.mark.mirror
def test_the_shipped_cross_modal_words_are_the_ieat_authors(mirror):
    """Each text set of a shipped cross-modal test lists the words the authors searched its image
    category by (data/stimuli.csv); the valence words are among their Bellezza-Greenwald-Banaji norms."""
    with open(mirror / "ieat/data/stimuli.csv", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    with open(mirror / "ieat/data/bgb_pleasant-words.csv", encoding="utf-8") as f:
        norms = {r["word"]: float(r["pleasantness"]) for r in csv.DictReader(f)}
    categories = {"valence/pleasant": ("Valence", "Pleasant"), "valence/unpleasant": ("Valence", "Unpleasant"),
                  "gender/career": ("Gender-Career", "Career"), "gender/family": ("Gender-Career", "Family"),
                  "gender/science": ("Gender-Science", "Science"),
                  "gender/liberal-arts": ("Gender-Science", "Liberal Arts"),
                  "gender/male": ("Gender-Career", "Male"), "gender/female": ("Gender-Career", "Female"),
                  "insect-flower/insect": ("Insect-Flower", "Insect"), "insect-flower/flower": ("Insect-Flower", "Flower"),
                  "religion/judaism": ("Religion", "Judaism"), "religion/christianity": ("Religion", "Christianity"),
                  "sexuality/gay": ("Sexuality", "Gay"), "sexuality/straight": ("Sexuality", "Straight")}
    files = sorted((REPO / "resources/stimuli/ieat").glob("*-text-*.yaml"))
    assert len(files) == 16
    for path in files:
        stimulus = load_stimulus(path)
        base = load_stimulus(path.with_name(path.name.split("-text-")[0] + ".yaml"))
        for s, st in stimulus.sets.items():
            if st.items is None:
                assert st.category == base.sets[s].category
                continue
            iat, category = categories[base.sets[s].category]
            listed = [r["Word"].lower() for r in rows if iat in r["IAT"] and r["Category"] == category]
            assert list(st.items) == listed, (path.name, s)
            if iat == "Valence":
                pleasant = category == "Pleasant"
                assert all(norms[w] > 3.5 if pleasant else norms[w] < 2.0 for w in st.items), (path.name, s)


def test_progress_reports_while_a_loop_runs(caplog):
    log = logging.getLogger("test-progress")
    progress = Progress(4, "images", log, every=0.0, every_tty=0.0)
    with caplog.at_level(logging.INFO, logger="test-progress"):
        for _ in range(4):
            progress.advance()
        progress.done("2 from the cache")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("images: 1/4 (25%),") and "left" in lines[0]
    assert lines[-1].startswith("images: 4/4 done in ") and lines[-1].endswith("; 2 from the cache")
    assert len(lines) == 4  # three while running (the last step is the final line's), one final
