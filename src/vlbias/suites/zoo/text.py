"""Ghate et al.'s text tests (kshitishghate/CLIP_bias data/tests_seat and data/tests_nrc): WEAT/SEAT
files in May et al.'s layout (one JSON document: targ1, targ2, attr1, attr2, each a category and its
examples), run on each zoo model's text tower (order "text-text"). Listed, with each file's sha256, in
zoo/text_manifest (name ``<seat|nrc>:<stem>``: both folders hold files of the same stems); read from the
mirror or the pinned commit (vlbias.io.fetch) and staged under results/zoo/upstream/clip_bias/.

    staged_path("seat:weat1")          # results/zoo/upstream/clip_bias/seat/weat1.jsonl
    load_test(staged_path("seat:weat1"))   # its Stimulus, id "seat:weat1"
"""

import shutil
from pathlib import Path

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.stimuli import load_stimulus, stimulus_from
from vlbias.suites.grounded.convert import get_key, read_jsonl

STAGED = "results/zoo/upstream/clip_bias"  # the text tests, fetched and checked (rule zoo_text_tests)
KEYS = {"X": "targ1", "Y": "targ2", "A": "attr1", "B": "attr2"}
FAMILY = "ghate2025"


def manifest_tests(manifest):
    """{name: manifest row (path, sha256)} of zoo/text_manifest, in its order."""
    from vlbias.io.fetch import read_manifest

    return {r["name"]: r for r in read_manifest(manifest, paths=("path",), required=("name", "sha256"))}


def text_tests(zoo):
    """The text tests zoo/text_tests names: every one of zoo/text_manifest (all), or those listed (an
    unknown name is an error naming the manifest)."""
    known = manifest_tests(zoo["text_manifest"])
    wanted = zoo["text_tests"]
    if wanted == "all":
        return list(known)
    unknown = [t for t in wanted if t not in known]
    if unknown:
        raise InputError(zoo["text_manifest"], f"lists no text test {', '.join(map(repr, unknown))} (key "
                                               "'zoo/text_tests'; names are <seat|nrc>:<stem>)")
    return list(wanted)


def staged_path(name):
    folder, stem = name.split(":", 1)
    return f"{STAGED}/{folder}/{stem}.jsonl"


def fetch_tests(manifest, names, source, mirror, cache, outs):
    """Copy each text test ``names`` gives, from the mirror or the pinned commit and checked against the
    manifest's sha256, to its path of ``outs``."""
    from vlbias.suites.ieat import obtain

    rows = manifest_tests(manifest)
    for name, out in zip(names, outs):
        local = obtain(source, rows[name]["path"], rows[name]["sha256"], mirror, cache)
        with atomic_path(out) as tmp:
            shutil.copyfile(local, tmp)


def read_text_test(path):
    """The Stimulus of a staged text test (its id ``<folder>:<stem>`` from the path); errors name the file
    and the key."""
    path = Path(path)
    doc = read_jsonl(path)
    test = f"{path.parent.name}:{path.stem}"
    sets = {s: {"label": get_key(doc, path, [key, "category"], str),
                "items": get_key(doc, path, [key, "examples"], list)} for s, key in KEYS.items()}
    for s, key in KEYS.items():
        if not sets[s]["items"] or not all(isinstance(i, str) for i in sets[s]["items"]):
            raise InputError(path, f"key '{key}/examples': expected a non-empty list of strings")
    name = " × ".join(f"{sets[a]['label']}/{sets[b]['label']}" for a, b in ("XY", "AB"))
    return stimulus_from({"id": test, "name": name, "suite": "zoo", "family": FAMILY,
                          "level": "sentence" if path.stem.startswith("sent-") else "word",
                          "source": f"Ghate et al. (2025), CLIP_bias data/tests_{path.parent.name}/{path.name}",
                          **sets}, path)


def load_test(path):
    """A battery test's Stimulus: a staged text test (.jsonl) or an iEAT stimulus file."""
    return read_text_test(path) if Path(path).suffix == ".jsonl" else load_stimulus(path)
