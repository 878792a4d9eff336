"""Stimulus files (vlbias.io.stimuli): what a malformed one says, and how text sets are keyed."""

import logging

import pytest
import yaml

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
