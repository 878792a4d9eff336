"""Grounded WEAT/SEAT stimuli (Ross, Katz & Barbu 2021): the authors' test definitions converted
into this project's stimulus files, and the loader the grounded workflow uses.

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
acquisition id of vlbias.images.sources' manifests.

Masking (experiment 3, variant 2), as the authors do it: tokens = the test's contextual words
and their lower-case forms; regions = detections labelled with one of those or a person word.

    python -m vlbias.suites.grounded convert <mirror> resources/stimuli/grounded
"""

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from vlbias.errors import InputError
from vlbias.images.acquire import parse_get_sh_tree
from vlbias.io.atomic import atomic_path
from vlbias.io.stimuli import read_stimulus_file, schema, validate

SCHEMA = "grounded_stimulus.schema.yaml"
TESTS_DIR = Path("grounded/tests/grounded-tests")  # below the mirror, as upstream
IMAGES_DIR = Path("grounded/data/google-images")
UPSTREAM = "candacelax/bias-in-vision-and-language@162298016af6d728453a8c3d47554a6e87e18be2"
ROLES = ("X", "Y", "A_x", "A_y", "B_x", "B_y")
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


def _read_jsonl(path):
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


def _get(doc, path, keys, kind):
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
    caps = _get(doc, path, [key, "captions"], dict)
    if sorted(caps, key=lambda k: int(k) if k.isdigit() else -1) != [str(i) for i in range(len(caps))]:
        raise InputError(path, f"key '{key}/captions': keys must be 0..{len(caps) - 1}, got {sorted(caps)[:5]}...")
    out = []
    for i in range(len(caps)):
        if not isinstance(caps[str(i)], str) or not caps[str(i)].strip():
            raise InputError(path, f"key '{key}/captions/{i}': expected a non-empty string")
        out.append(caps[str(i)])
    return out


def _pairs(doc, path, keys, n_captions, notes):
    images = _get(doc, path, keys, dict)
    if not images:
        raise InputError(path, f"key '{'/'.join(keys)}': no images")
    out, as_text = {}, 0
    for file, idx in images.items():
        where = "/".join([*keys, file])
        if "/" in file or "\\" in file or file in ("", ".", ".."):
            raise InputError(path, f"key '{where}': not a plain file name")
        if isinstance(idx, str) and idx.isdigit():
            idx, as_text = [int(idx)], as_text + 1
        if not isinstance(idx, list) or not idx or not all(type(i) is int and 0 <= i < n_captions for i in idx):
            raise InputError(path, f"key '{where}': expected a non-empty list of caption indices < {n_captions}")
        out[file] = list(idx)
    if as_text:
        # e.g. coco/sent-weat6: {"<image>": "12"}; the authors' loaders iterate over the string,
        # pairing that image with captions 1 and 2; one caption per image is meant
        notes.append(f"upstream gives {as_text} caption indices of '{'/'.join(keys)}' as text (\"12\"); read as "
                     f"one index (12), where the authors' loaders paired each digit (captions 1 and 2)")
    return out


def _lower_too(words):
    """Words followed by their lower-case forms, each once, in order (the authors add the latter)."""
    return list(dict.fromkeys([*words, *(w.lower() for w in words)]))


def convert_level(path, dataset, roles_by_file):
    """One stimulus level from one upstream test file. ``roles_by_file``: {(test dir, file): role}
    of the google get.sh lists (ignored for coco, concap)."""
    path = Path(path)
    doc = _read_jsonl(path)
    cat = {k: _get(doc, path, [k, "category"], str) for k in ("targ1", "targ2", "attr1", "attr2")}
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
        "embeddings": list(_get(doc, path, ["test_types"], list)),
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
    test_dir = _get(doc, path, ["dataset_dir"], str)
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
            "`python -m vlbias.suites.grounded convert`; do not edit by hand.\n")
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
                tmp.chmod(0o644)  # a committed file, not a private temporary one
            written.append(dest)
    return written


@dataclass(frozen=True)
class GroundedStimulus:
    id: str
    name: str
    dataset: str
    labels: dict  # X, Y, A, B -> the upstream category names
    levels: dict  # "word" / "sentence" -> the level mapping of the file
    path: str

    def image_id(self, level, role, file):
        """The image's id in the acquisition manifest: ``<dataset_dir>/<get.sh folder>/<file>``
        (google) or ``<test id>/<image set>/<file>`` (coco, concap; see vlbias.images.sources)."""
        lv = self.levels[level]
        if lv["dataset_dir"]:
            return f"{lv['dataset_dir']}/{lv['images'][role]['role']}/{file}"
        return f"{self.id}/{role}/{file}"

    def pairs(self, level, role):
        """The (caption, image id) pairs of one image set (X, Y, A_x, A_y, B_x, B_y), in file order:
        each image with each caption it is paired with."""
        lv = self.levels[level]
        captions = lv["captions"][role[0]]
        return [(captions[i], self.image_id(level, role, f))
                for f, idx in lv["images"][role]["pairs"].items() for i in idx]

    def image_ids(self, level=None):
        """Every image id the test uses (at one level, or at all), sorted, each once."""
        return sorted({self.image_id(lv, r, f) for lv in ([level] if level else self.levels)
                       for r in ROLES for f in self.levels[lv]["images"][r]["pairs"]})


def load_grounded_stimulus(path):
    """Load and validate one grounded stimulus file; errors name the file and the key."""
    path = Path(path)
    doc = read_stimulus_file(path, SCHEMA, "id, name, suite, dataset, X, Y, A, B, levels")
    for name, lv in doc["levels"].items():
        google = doc["dataset"] == "google"
        if google != (lv["dataset_dir"] is not None):
            raise InputError(path, f"key 'levels/{name}/dataset_dir': required for google images, null otherwise")
        for r in ROLES:
            img = lv["images"][r]
            if google != ("role" in img):
                raise InputError(path, f"key 'levels/{name}/images/{r}/role': required for google images only")
            n = len(lv["captions"][r[0]])
            for file, idx in img["pairs"].items():
                if max(idx) >= n:
                    raise InputError(path, f"key 'levels/{name}/images/{r}/pairs/{file}': caption index "
                                           f"{max(idx)} out of range (set {r[0]} has {n} captions)")
    return GroundedStimulus(id=doc["id"], name=doc["name"], dataset=doc["dataset"],
                            labels={s: doc[s]["label"] for s in "XYAB"}, levels=doc["levels"], path=str(path))


# --- the workflow's jobs: embeddings of one test on one model, and its experiments --------------

# the stimulus level each embedding reads: W the single-word captions, S and C the sentences
LEVEL_SOURCE = {"W": "word", "S": "sentence", "C": "sentence"}
NO_MASK = "none"  # the HDF5 group of unmasked embeddings
MISSING_COLUMNS = ["level", "mask", "role", "caption", "image", "reason"]
ROLE_COUNTS = [f"n_{r}" for r in ROLES]
RESULT_COLUMNS = ["dataset", "test", "name", "model", "column", "experiment", "level", "mask", "status",
                  "statistic", "d", "p", "p_se", "exact", "n_samples", "seed", "d_x", "d_y", "p_x", "p_y",
                  *ROLE_COUNTS, "model_id", "revision", "commit", "weights_sha256", "detector"]


def _words_pattern(words):
    """One regex finding any of ``words`` as a whole word (as vlbias.models.vl matches words and mask
    terms), the longest first where several start at the same place."""
    alternatives = "|".join(re.escape(w.strip()) for w in sorted(set(words), key=len, reverse=True))
    return re.compile(r"(?<!\w)(?:" + alternatives + r")(?!\w)", flags=re.IGNORECASE)


def contextual_span(caption, pattern):
    """(start, end) of the first contextual word in ``caption`` (``pattern`` from the test's
    contextual words), or None. The first occurrence, as Ross et al.'s code took the first [MASK]."""
    match = pattern.search(caption)
    return match.span() if match else None


def embedding_combos(levels, masks, supports_image_masking):
    """The (level, mask) pairs to embed, and the masked pairs that do not apply to the model.

    ``levels`` e.g. ["W", "S", "C"]; ``masks`` {"T": ["S"], "I": ["S"]}: each mask at the levels
    listed (the paper masks at the sentence level only), among ``levels``. Image masking does not
    apply to a model never pre-trained with masked regions (VisualBERT): its tables show "–".
    """
    combos = [(lv, None) for lv in levels]
    not_applicable = []
    for mask, at in masks.items():
        for lv in (lv for lv in levels if lv in at):
            (not_applicable if mask == "I" and not supports_image_masking else combos).append((lv, mask))
    return combos, not_applicable


def plan_pairs(stimulus, level, mask, images, image_reason):
    """The (caption, image id, word span) pairs of each role that can be embedded at (``level``,
    ``mask``), and the rows (MISSING_COLUMNS) of those that cannot, with the reason.

    ``images``: the image ids the region store holds (the stimulus' ids are the acquisition
    manifest's, which the store keeps); ``image_reason(image id)``: why the store lacks one.
    Level C needs a contextual word in the caption, mask T one of the test's mask terms: a caption
    with none is dropped, not embedded unmasked.
    """
    lv = stimulus.levels[LEVEL_SOURCE[level]]
    words = _words_pattern(lv["contextual_words"]) if lv["contextual_words"] else None
    terms = _words_pattern(lv["mask"]["tokens"]) if lv["mask"]["tokens"] else None
    planned, dropped = {}, []
    for role in ROLES:
        planned[role] = []
        for caption, image in stimulus.pairs(LEVEL_SOURCE[level], role):
            span, reason = None, None
            if image not in images:
                reason = image_reason(image)
            elif level == "C" and (words is None or (span := contextual_span(caption, words)) is None):
                reason = "the caption contains none of the test's contextual words"
            elif mask == "T" and (terms is None or not terms.search(caption)):
                reason = "the caption contains none of the test's mask terms"
            if reason:
                dropped.append({"level": level, "mask": mask or NO_MASK, "role": role, "caption": caption,
                                "image": image, "reason": reason})
            else:
                planned[role].append((caption, image, span))
    return planned, dropped


class _VisualCache:
    """Regions of the last ``size`` images read from a store, as the encoders take them (pairs of
    one image follow each other, so a small cache reads each image about once)."""

    def __init__(self, store, size=256):
        from vlbias.models.vl import Visual

        self.store, self.size, self.visual, self.cache = store, size, Visual, {}

    def __call__(self, image_id):
        if image_id not in self.cache:
            if len(self.cache) >= self.size:
                self.cache.pop(next(iter(self.cache)))
            regions, is_person = self.store.get(image_id)
            self.cache[image_id] = self.visual(regions.features, self.store.boxes_norm(image_id), is_person)
        return self.cache[image_id]


def missing_image_reasons(image_ids, store, manifest_rows=()):
    """{image id: why the region store lacks it} for those of ``image_ids`` it lacks: the store's
    reason for skipping it (undecodable), else the acquisition manifest's (test, role, file,
    status, reason) for an image not obtained, else that no manifest lists it."""
    why = {}
    for r in manifest_rows:
        image = f"{r['test']}/{r['role']}/{r['file']}"
        why[image] = ("obtained, but not in the region store (rebuild it)" if r.get("status") == "ok" else
                      f"not obtained: {r.get('reason') or r.get('status') or 'no status'}")
    why |= {i: f"not usable: {reason}" for i, reason in store.skipped.items()}
    return {i: why.get(i, "not listed in the image manifest") for i in set(image_ids) - set(store.ids)}


def embed_test(stimulus, encoder, store, out_path, levels, masks, attrs=None, manifest_rows=(), chunk=None):
    """Embed every (caption, image) pair of one test at each configured level and mask into HDF5.

    Layout (one file per (dataset, model, test), so the store is per model × dataset × level × mask)::

        /<level>/<mask>/<role>/embeddings   float32 (n, dim)   level W, S, C; mask none, T, I
        /<level>/<mask>/<role>/caption      utf-8 (n,)          role X, Y, A_x, A_y, B_x, B_y
        /<level>/<mask>/<role>/image        utf-8 (n,)          the stimulus' image id
        /<level>/<mask>/<role>/word         utf-8 (n,)          level C: the word in context
        group attrs n (pairs embedded), n_listed (pairs the stimulus lists), n_dropped
        root attrs  ``attrs`` (model, detector, region store ... provenance), the encoder's info
                    (JSON), levels, masks, not_applicable (JSON: masked pairs the model lacks)

    Returns the rows (MISSING_COLUMNS) of the pairs left out and why: images the region store
    lacks (failed downloads, undecodable files: ``manifest_rows``, the acquisition manifest, says
    why), captions without a contextual word (C) or mask term (T), levels the stimulus lacks.
    """
    import h5py

    combos, not_applicable = embedding_combos(levels, masks, encoder.supports_image_masking)
    images = set(store.ids)
    reasons = missing_image_reasons(stimulus.image_ids(), store, manifest_rows)
    visual = _VisualCache(store)
    chunk = chunk or encoder.batch_size * 8
    dropped = []
    text = h5py.string_dtype("utf-8")
    with atomic_path(out_path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update({**(attrs or {}), "info": json.dumps(encoder.info, sort_keys=True, default=str),
                        "levels": json.dumps(levels), "masks": json.dumps(masks),
                        "not_applicable": json.dumps([f"{lv}/{m}" for lv, m in not_applicable])})
        for level, mask in combos:
            if LEVEL_SOURCE[level] not in stimulus.levels:
                dropped.append({"level": level, "mask": mask or NO_MASK, "role": "", "caption": "", "image": "",
                                "reason": f"the stimulus has no {LEVEL_SOURCE[level]}-level captions"})
                continue
            lv = stimulus.levels[LEVEL_SOURCE[level]]
            planned, left_out = plan_pairs(stimulus, level, mask, images, reasons.get)
            dropped += left_out
            group = f.create_group(f"{level}/{mask or NO_MASK}")
            group.attrs.update({"level": level, "mask": mask or NO_MASK, "stimulus_level": LEVEL_SOURCE[level]})
            for role in ROLES:
                pairs = planned[role]
                out = np.empty((len(pairs), encoder.dim), dtype=np.float32)
                for start in range(0, len(pairs), chunk):
                    part = pairs[start:start + chunk]
                    out[start:start + len(part)] = encoder.embed(
                        [c for c, *_ in part], [visual(i) for _, i, _ in part], level, mask=mask,
                        mask_terms=lv["mask"]["tokens"] if mask == "T" else None,
                        words=[span for *_, span in part] if level == "C" else None)
                g = group.create_group(role)
                g.create_dataset("embeddings", data=out)
                g.create_dataset("caption", data=[c for c, *_ in pairs], dtype=text)
                g.create_dataset("image", data=[i for _, i, _ in pairs], dtype=text)
                if level == "C":
                    g.create_dataset("word", data=[c[a:b] for c, _, (a, b) in pairs], dtype=text)
                n_listed = len(stimulus.pairs(LEVEL_SOURCE[level], role))
                g.attrs.update({"n": len(pairs), "n_listed": n_listed, "n_dropped": n_listed - len(pairs)})
    return dropped


def read_embeddings(path):
    """{(level, mask): {role: float32 (n, dim)}} and the root attributes of an ``embed_test`` file."""
    import h5py

    with h5py.File(path, "r") as f:
        sets = {(level, mask): {r: f[level][mask][r]["embeddings"][()] for r in ROLES}
                for level in f for mask in f[level]}
        return sets, dict(f.attrs)


def run_experiments(path, n_samples, seed, exact):
    """Rows (RESULT_COLUMNS) of the grounded experiments on one ``embed_test`` file: experiments
    1, 2 and 3 (variant 1) on each unmasked level, experiment 3 variant 2 ("3-masked": experiment
    2's statistic) on each masked one. A set left empty (every pair dropped) gives a row whose
    status says so. The null each permutation samples: see vlbias.stats.grounded and docs/grounded.md.
    """
    from vlbias.stats.grounded import grounded_test

    sets, attrs = read_embeddings(path)
    base = {k: attrs.get(k, "") for k in ("dataset", "test", "name", "model", "column", "model_id", "revision",
                                          "commit", "weights_sha256", "detector")}
    rows = []
    for (level, mask), emb in sorted(sets.items(), key=lambda kv: ("WSC".index(kv[0][0]), kv[0][1] != NO_MASK,
                                                                   kv[0][1])):
        counts = {f"n_{r}": len(emb[r]) for r in ROLES}
        for experiment in (("1", "2", "3") if mask == NO_MASK else ("3-masked",)):
            row = {**base, "experiment": experiment, "level": level, "mask": mask, **counts,
                   "n_samples": n_samples, "seed": seed, "exact": exact}
            empty = [r for r in ROLES if not len(emb[r])]
            if empty:
                rows.append({**row, "status": f"skipped: no pairs left in {', '.join(empty)}"})
                continue
            try:
                r = grounded_test(experiment, *(emb[role] for role in ROLES), n_samples=n_samples, seed=seed,
                                  exact=exact)
            except ValueError as e:  # e.g. a zero embedding: cosine undefined
                rows.append({**row, "status": f"skipped: {e}"})
                continue
            row |= {"status": "ok", "statistic": r.statistic, "d": r.effect_size, "p": r.p}
            if r.permutation is not None:
                row |= {"p_se": r.permutation.p_se, "exact": r.permutation.exact,
                        "n_samples": r.permutation.n_samples}
            else:  # experiment 3: a two-sided p per half, combined (see experiment3)
                row |= {"exact": r.parts["X"]["exact"] and r.parts["Y"]["exact"],
                        "n_samples": r.parts["X"]["n_samples"],
                        "d_x": r.parts["X"]["effect_size"], "d_y": r.parts["Y"]["effect_size"],
                        "p_x": r.parts["X"]["p"], "p_y": r.parts["Y"]["p"]}
            rows.append(row)
    return rows


def _main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m vlbias.suites.grounded", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="convert the upstream grounded test definitions into stimulus files")
    c.add_argument("mirror", help="data mirror with grounded/tests/grounded-tests and grounded/data/google-images")
    c.add_argument("outdir", help="e.g. resources/stimuli/grounded")
    args = ap.parse_args(argv)
    try:
        for p in convert(args.mirror, args.outdir):
            print(p)
    except InputError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    _main()
