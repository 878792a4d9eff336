"""Grounded WEAT/SEAT stimuli (Ross, Katz & Barbu 2021): the authors' test definitions converted
once into this project's stimulus files (the runtime loader is vlbias.suites.grounded.stimulus).

Upstream (candacelax/bias-in-vision-and-language, ``tests/grounded-tests/<dataset>/<test>.jsonl``)
a test names its four sets ``targ1`` (X), ``targ2`` (Y), ``attr1`` (A), ``attr2`` (B), each with
``captions`` ({"0": text, ...}) and images mapped to the indices of the captions they are paired
with: ``targ1.images`` are X's own images; ``attr1.<category of X>_Images`` are the images of A
that depict X's category (A_x), ``attr1.<category of Y>_Images`` those that depict Y's (A_y);
likewise B_x, B_y. A word-level file and a ``sent-``/``_one_sentence`` file define the two levels
of one test; both go into one stimulus file ``resources/stimuli/grounded/<dataset>/<id>.yaml``.

Google images are identified as in the acquisition manifest, ``<dataset_dir>/<role>/<file>``;
the role (folder) of each image is the one whose ``get.sh`` lists it. COCO and Conceptual
Captions images (``dataset_dir: null``) are identified as ``<test id>/<image set>/<file>``, the
acquisition id of vlbias.suites.grounded.sources' manifests.

Masking (experiment 3, variant 2), as the authors do it: tokens = the test's contextual words
and their lower-case forms; regions = detections labelled with one of those or a person word.

    python -m vlbias.suites.grounded.convert <mirror> resources/stimuli/grounded
"""

import argparse
import json
import sys
from pathlib import Path

import yaml

from vlbias.errors import InputError
from vlbias.images.acquire import parse_get_sh_tree
from vlbias.io.atomic import atomic_path
from vlbias.io.stimuli import schema, validate
from vlbias.suites.grounded.stimulus import ROLES, SCHEMA

TESTS_DIR = Path("grounded/tests/grounded-tests")  # below the mirror, as upstream
IMAGES_DIR = Path("grounded/data/google-images")
UPSTREAM = "candacelax/bias-in-vision-and-language@162298016af6d728453a8c3d47554a6e87e18be2"
PERSON_WORDS = ("people", "person", "woman", "women", "man", "men")  # the authors' list

# id -> (name in the paper's Table 1, word-level file, sentence-level file or None), per dataset
_C = {
    "weat3": ("C3: EA/AA, (Un)Pleasant", "weat3", "sent-weat3"),
    "weat6": ("C6: M/W, Career/Family", "weat6", "sent-weat6"),
    "weat8": ("C8: Science/Arts, M/W", "weat8", "sent-weat8"),
    "weat11": ("C11: M/W, (Un)Pleasant", "weat11", "sent-weat11"),
    "weat12": ("+C12: EA/AA, Career/Family", "weat12", "sent-weat12"),
    "weat13": ("+C13: EA/AA, Science/Arts", "weat13", "sent-weat13"),
    "occ_gender": ("M/W, Occupation", "occ_gender", "sent-occ_gender"),
    "occ_race": ("EA/AA, Occupation", "occ_race", "sent-occ_race"),
    "angry_black_woman_stereotype": ("Angry Black Woman (ABW)", "angry_black_woman_stereotype",
                                     "sent-angry_black_woman_stereotype"),
}
_DB = {
    f"heilman_{who}_double_bind_{what}": (
        f"{'DB: M/W' if who == 'gender' else '+DB: EA/AA'}, {what.replace('likable', 'Likeable').title()}",
        f"heilman_{who}_double_bind_{what}_one_word", f"heilman_{who}_double_bind_{what}_one_sentence")
    for who in ("gender", "race") for what in ("competent", "likable")
}
TESTS = {
    "google": {**_C, **_DB},
    "coco": {k: _C[k] for k in ("weat6", "weat8", "occ_gender")},
    "concap": {"weat6": _C["weat6"], "weat8": (*_C["weat8"][:2], None), "occ_gender": _C["occ_gender"]},
}

# Corrections of upstream definitions: (dataset, upstream file stem) -> (dataset_dir, reason).
DATASET_DIR_FIXES = {
    ("google", "weat6"): ("weat6", "upstream dataset_dir 'weat13' lists none of this test's images; "
                                   "data/google-images/weat6/*/get.sh lists all of them"),
}


def read_jsonl(path):
    # upstream ".jsonl" files hold one JSON document each
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise InputError(path, "upstream test file not found") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InputError(path, "expected a JSON object with keys targ1, targ2, attr1, attr2")
    return doc


def get_key(doc, path, keys, kind):
    """doc[k1][k2]... with an error naming the file and the key path when absent or mistyped."""
    value = doc
    for i, k in enumerate(keys):
        if not isinstance(value, dict) or k not in value:
            raise InputError(path, f"key '{'/'.join(keys[: i + 1])}' is missing")
        value = value[k]
    if not isinstance(value, kind):
        raise InputError(path, f"key '{'/'.join(keys)}': expected {kind.__name__}, got {type(value).__name__}")
    return value


def _captions(doc, path, key):
    caps = get_key(doc, path, [key, "captions"], dict)
    if sorted(caps, key=lambda k: int(k) if k.isdigit() else -1) != [str(i) for i in range(len(caps))]:
        raise InputError(path, f"key '{key}/captions': keys must be 0..{len(caps) - 1}, got {sorted(caps)[:5]}...")
    out = []
    for i in range(len(caps)):
        if not isinstance(caps[str(i)], str) or not caps[str(i)].strip():
            raise InputError(path, f"key '{key}/captions/{i}': expected a non-empty string")
        out.append(caps[str(i)])
    return out


def _pairs(doc, path, keys, n_captions, notes):
    images = get_key(doc, path, keys, dict)
    if not images:
        raise InputError(path, f"key '{'/'.join(keys)}': no images")
    out, as_text = {}, 0
    for file, idx in images.items():
        where = "/".join([*keys, file])
        if "/" in file or "\\" in file or file in ("", ".", ".."):
            raise InputError(path, f"key '{where}': not a plain file name")
        if isinstance(idx, str) and idx.isdigit():
            # kept as upstream wrote it: the loader reads it as one number or digit by digit
            # (protocol switch caption_indices, vlbias.suites.grounded.stimulus)
            if int(idx) >= n_captions and any(int(c) >= n_captions for c in idx):
                raise InputError(path, f"key '{where}': caption index '{idx}' out of range either way "
                                       f"({n_captions} captions)")
            out[file], as_text = idx, as_text + 1
            continue
        if not isinstance(idx, list) or not idx or not all(type(i) is int and 0 <= i < n_captions for i in idx):
            raise InputError(path, f"key '{where}': expected a non-empty list of caption indices < {n_captions}")
        out[file] = list(idx)
    if as_text:
        # e.g. coco/sent-weat6: {"<image>": "12"}; the authors' loaders iterate over the string
        notes.append(f"upstream gives {as_text} caption indices of '{'/'.join(keys)}' as text (\"12\"), kept as "
                     "written: caption_indices 'number' reads one index (12), 'digits' one per digit (captions 1 "
                     "and 2, as the authors' loaders did)")
    return out


def _lower_too(words):
    """Words followed by their lower-case forms, each once, in order (the authors add the latter)."""
    return list(dict.fromkeys([*words, *(w.lower() for w in words)]))


def convert_level(path, dataset, roles_by_file):
    """One stimulus level from one upstream test file. ``roles_by_file``: {(test dir, file): role}
    of the google get.sh lists (ignored for coco, concap)."""
    path = Path(path)
    doc = read_jsonl(path)
    cat = {k: get_key(doc, path, [k, "category"], str) for k in ("targ1", "targ2", "attr1", "attr2")}
    captions = {s: _captions(doc, path, k) for s, k in zip("XYAB", ("targ1", "targ2", "attr1", "attr2"))}
    notes = []
    images = {
        "X": _pairs(doc, path, ["targ1", "images"], len(captions["X"]), notes),
        "Y": _pairs(doc, path, ["targ2", "images"], len(captions["Y"]), notes),
    }
    for s, k in (("A", "attr1"), ("B", "attr2")):
        for t, target in (("x", "targ1"), ("y", "targ2")):
            images[f"{s}_{t}"] = _pairs(doc, path, [k, f"{cat[target]}_Images"], len(captions[s]), notes)
    words = [w for w in doc.get("contextual_words", []) if isinstance(w, str) and w]
    level = {
        "upstream": f"{UPSTREAM}:tests/grounded-tests/{dataset}/{path.name}",
        "embeddings": list(get_key(doc, path, ["test_types"], list)),
        "dataset_dir": None,
        "contextual_words": words,
        "mask": {"tokens": _lower_too(words), "region_labels": list(dict.fromkeys([*_lower_too(words), *PERSON_WORDS]))},
        "captions": captions,
        "images": {r: {"pairs": images[r]} for r in ROLES},
    }
    if dataset == "google":
        _locate(level, doc, path, dataset, roles_by_file, notes)
    if notes:
        level["notes"] = notes
    return level, cat


def _locate(level, doc, path, dataset, roles_by_file, notes):
    """Set dataset_dir and each image set's role from the get.sh lists; list images none names."""
    test_dir = get_key(doc, path, ["dataset_dir"], str)
    if (dataset, path.stem) in DATASET_DIR_FIXES:
        fixed, why = DATASET_DIR_FIXES[(dataset, path.stem)]
        notes.append(f"dataset_dir {fixed}: {why}")
        test_dir = fixed
    unlisted = []
    for r in ROLES:
        files = level["images"][r]["pairs"]
        roles = {roles_by_file[(test_dir, f)] for f in files if (test_dir, f) in roles_by_file}
        if len(roles) != 1:
            raise InputError(path, f"images of {r}: expected all in one folder of data/google-images/{test_dir}, "
                                   f"found {sorted(roles) or 'none listed'}")
        role = roles.pop()
        unlisted += [f"{test_dir}/{role}/{f}" for f in files if (test_dir, f) not in roles_by_file]
        level["images"][r] = {"role": role, "pairs": files}
    level["dataset_dir"] = test_dir
    if unlisted:
        level["unlisted"] = unlisted


def convert_test(mirror, dataset, test_id, roles_by_file=None):
    """The stimulus document of one test (both levels), from the mirror."""
    if test_id not in TESTS.get(dataset, {}):
        raise InputError(f"{dataset}/{test_id}", "not a grounded test this project converts")
    name, word_file, sent_file = TESTS[dataset][test_id]
    if dataset == "google" and roles_by_file is None:
        roles_by_file = google_roles(mirror)
    levels, cats = {}, {}
    for level, stem in (("word", word_file), ("sentence", sent_file)):
        if stem is None:
            continue
        path = Path(mirror) / TESTS_DIR / dataset / f"{stem}.jsonl"
        levels[level], cats[level] = convert_level(path, dataset, roles_by_file)
    c = cats["word"]
    for key, label in cats.get("sentence", {}).items():
        # the target categories name the attribute image sets (A_x, ...): they must agree
        if label != c[key] and key.startswith("targ"):
            raise InputError(levels["sentence"]["upstream"], f"key '{key}/category': '{label}' differs from "
                                                             f"the word-level file's '{c[key]}'")
        if label != c[key]:
            levels["sentence"].setdefault("notes", []).append(
                f"upstream names {dict(attr1='A', attr2='B')[key]} '{label}' at this level, "
                f"'{c[key]}' at the word level; the word level's label is used")
    files = " and ".join(f"{s}.jsonl" for s in (word_file, sent_file) if s)
    return {
        "id": test_id,
        "name": name,
        "suite": "grounded",
        "dataset": dataset,
        "source": f"Ross, Katz & Barbu (2021); converted from {UPSTREAM} tests/grounded-tests/{dataset}/{files}",
        "X": {"label": c["targ1"]},
        "Y": {"label": c["targ2"]},
        "A": {"label": c["attr1"]},
        "B": {"label": c["attr2"]},
        "levels": levels,
    }


def google_roles(mirror):
    """{(test dir, file): role} of every data/google-images/<test>/<role>/get.sh in the mirror."""
    rows, _, problems, _ = parse_get_sh_tree(Path(mirror) / IMAGES_DIR)
    if problems:
        raise InputError(Path(mirror) / IMAGES_DIR, f"get.sh not understood: {problems[0]}")
    return {(r["test"], r["file"]): r["role"] for r in rows}


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):
    pass


# caption-index lists in flow style ("male_0.jpg: [0]"), everything else in block style
_Dumper.add_representer(
    list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v,
                                            flow_style=all(isinstance(i, int) for i in v) and bool(v)))


def dump(doc):
    """YAML text of a stimulus document (what `convert` writes)."""
    head = (f"# Grounded test {doc['id']} ({doc['dataset']}): {doc['name']}. Generated by "
            "`python -m vlbias.suites.grounded.convert`; do not edit by hand.\n")
    return head + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def convert(mirror, outdir):
    """Write every test of TESTS to ``<outdir>/<dataset>/<id>.yaml``; returns the paths."""
    roles = google_roles(mirror)
    written = []
    for dataset, tests in TESTS.items():
        for test_id in tests:
            doc = convert_test(mirror, dataset, test_id, roles)
            validate(doc, f"{dataset}/{test_id}", schema(SCHEMA))
            dest = Path(outdir) / dataset / f"{test_id}.yaml"
            with atomic_path(dest) as tmp:
                tmp.write_text(dump(doc), encoding="utf-8")
            written.append(dest)
    return written


def _main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m vlbias.suites.grounded.convert", description=__doc__.split("\n\n")[0])
    ap.add_argument("mirror", help="data mirror with grounded/tests/grounded-tests and grounded/data/google-images")
    ap.add_argument("outdir", help="e.g. resources/stimuli/grounded")
    args = ap.parse_args(argv)
    try:
        for p in convert(args.mirror, args.outdir):
            print(p)
    except InputError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    _main()
