"""The grounded workflow's jobs (Ross, Katz & Barbu 2021): embeddings of a test's (caption, image)
pairs on one vision-language model, and the experiments on them (see docs/grounded.md)."""

import json
import re

import numpy as np

from vlbias.io.atomic import atomic_path
from vlbias.suites.grounded.stimulus import ROLES

# the stimulus level each embedding reads: W the single-word captions, S and C the sentences
LEVEL_SOURCE = {"W": "word", "S": "sentence", "C": "sentence"}
NO_MASK = "none"  # the HDF5 group of unmasked embeddings
MISSING_COLUMNS = ["level", "mask", "role", "caption", "image", "reason"]
ROLE_COUNTS = [f"n_{r}" for r in ROLES]
RESULT_COLUMNS = ["dataset", "test", "name", "model", "column", "experiment", "level", "mask", "status",
                  "statistic", "d", "p", "p_se", "exact", "n_samples", "seed", "d_x", "d_y", "p_x", "p_y",
                  "masked_statistic",
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
                out = np.empty((len(pairs), encoder.output_dim(level)), dtype=np.float32)
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


def run_experiments(path, n_samples, seed, exact, masked_statistic="2"):
    """Rows (RESULT_COLUMNS) of the grounded experiments on one ``embed_test`` file: experiments
    1, 2 and 3 (variant 1) on each unmasked level, experiment 3 variant 2 ("3-masked") on each
    masked one, with experiment ``masked_statistic``'s test ("2" the paper, "1" the authors' code;
    protocol switch, docs/grounded.md). A set left empty (every pair dropped) gives a row whose
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
            options = {}
            if experiment == "3-masked":
                row["masked_statistic"] = options["statistic"] = masked_statistic
            empty = [r for r in ROLES if not len(emb[r])]
            if empty:
                rows.append({**row, "status": f"skipped: no pairs left in {', '.join(empty)}"})
                continue
            try:
                r = grounded_test(experiment, *(emb[role] for role in ROLES), n_samples=n_samples, seed=seed,
                                  exact=exact, **options)
            except ValueError as e:  # e.g. a zero embedding: cosine undefined
                rows.append({**row, "status": f"skipped: {e}"})
                continue
            row |= {"status": "ok", "statistic": r.statistic, "d": r.effect_size, "p": r.p}
            if r.permutation is not None:
                row |= {"p_se": r.permutation.p_se, "exact": r.permutation.exact,
                        "n_samples": r.permutation.n_samples}
            else:  # experiment 3: the paired (sign-flip) test of the statistic, and each half's
                joint = r.parts["joint"]
                row |= {"p_se": joint["p_se"], "exact": joint["exact"], "n_samples": joint["n_samples"],
                        "d_x": r.parts["X"]["effect_size"], "d_y": r.parts["Y"]["effect_size"],
                        "p_x": r.parts["X"]["p"], "p_y": r.parts["Y"]["p"]}
            rows.append(row)
    return rows
