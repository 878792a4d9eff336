"""The grounded workflow's jobs (Ross, Katz & Barbu 2021): embeddings of a test's (caption, image)
pairs on one vision-language model, and the experiments on them (see docs/grounded.md)."""

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.cache import digest, digester, fingerprint
from vlbias.io.fetch import sha256_file
from vlbias.io.hdf5 import atomic_hdf5, open_hdf5
from vlbias.logs import Progress
from vlbias.stats.row import GROUNDED, GROUNDED_PROVENANCE, MLEAT, SETS, SIZES
from vlbias.suites.grounded.stimulus import ROLES

log = logging.getLogger(__name__)

# the stimulus level each embedding reads: W the single-word captions, S and C the sentences
LEVEL_SOURCE = {"W": "word", "S": "sentence", "C": "sentence"}
NO_MASK = "none"  # the HDF5 group of unmasked embeddings
MISSING_COLUMNS = ["test", "level", "mask", "role", "caption", "image", "reason"]


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


class _Visuals:
    """Regions of the last ``size`` images read from a store, as the encoders take them, with a digest
    of each (the embedding cache's key covers the regions a pair was embedded with); pairs of one
    image follow each other, so a small cache reads each image about once.

    The regions mask I hides (``Visual.is_person``): the store's person flags, or with ``labels``
    the regions whose detector label, read with ``label_offset`` (row 13), is one of them (protocol
    switch ``image_mask``, row 5 of docs/grounded.md: vlbias.visual.regions_with_labels).
    """

    def __init__(self, store, size=256, pixels=None, label_offset=0):
        self.store, self.size, self.cache = store, size, {}
        self.pixels = pixels  # {image id: path} for a model that reads the image itself (needs_pixels)
        self.label_offset = label_offset
        self.reads = 0  # (image, labels) read from the store (and its pixels decoded)

    def __call__(self, image_id, labels=None):
        """(Visual, digest) of ``image_id``, masking the regions labelled ``labels`` (None: persons)."""
        from vlbias.visual import visual_from_store  # image decoding (cv2): only the model jobs need it

        key = (image_id, labels)
        if key not in self.cache:
            if len(self.cache) >= self.size:
                self.cache.pop(next(iter(self.cache)))
            v = visual_from_store(self.store, image_id, labels, self.pixels and self.pixels[image_id],
                                  self.label_offset)
            self.reads += 1
            self.cache[key] = v, digest(v.features, v.boxes_norm, v.is_person, list(v.image_size), v.image,
                                        v.class_ids)
        return self.cache[key]


def _in_authors_batches(encoder, listed, rows, visual, images):
    """(regions entries, batch keys) of ``rows`` (planned (caption, image, span), a subsequence of the
    role's ``listed`` (caption, image) pairs): the encoder's ``in_authors_batches`` over every listed
    pair in its order (the authors' loader had them all; an image the store lacks holds its place with
    no regions), for a feed that depends on the batch; else (None: each row reads its own Visual, read
    when embedded) and no keys."""
    if not encoder.batch_dependent:
        return None, [None] * len(rows)
    entries, keys = encoder.in_authors_batches([c for c, _ in listed],
                                               [visual(i) if i in images else None for _, i in listed])
    out, at = [], 0
    for caption, image, _ in rows:
        while listed[at] != (caption, image):
            at += 1
        out.append((entries[at], keys[at]))
        at += 1
    return [e for e, _ in out], [k for _, k in out]


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


def cache_fingerprint(encoder):
    """The embedding cache's folder name for ``encoder``: its provenance without the options a pair's
    key covers itself (token_mask, ws_vector, feed), so protocols share every vector they have in common."""
    return fingerprint({k: v for k, v in encoder.info.items() if k not in ("token_mask", "ws_vector", "feed")})


def vision_passes(stimuli, levels, masks, batch_size, supports_image_masking=True, images=None):
    """How often a job's image-only work runs (a model that computes it per image: BLIP's vision model,
    FLAVA's image encoder, LXMERT's vision layers, VL-BERT's RoI head end to end), planned as
    ``embed_tests`` plans the pairs, no model needed: {"pairs", "images" (distinct (image, mask I or
    not)), "before" (once per distinct image of each batch of ``batch_size`` pairs of one (test, level,
    mask, role) in the stimulus' order: an image read again in every batch that holds it), "after" (once per (image, mask I or not) of
    the job: ``embed_tests``)}. ``images``: the image ids the region store holds (default: every
    image the stimuli name)."""
    combos, _ = embedding_combos(levels, masks, supports_image_masking)
    images = set(images) if images is not None else {i for s in stimuli for i in s.image_ids()}
    pairs, before, distinct = 0, 0, set()
    for stimulus in stimuli:
        for level, mask in combos:
            if LEVEL_SOURCE[level] not in stimulus.levels:
                continue
            for rows in plan_pairs(stimulus, level, mask, images, lambda i: "absent")[0].values():
                keys = [(image, mask == "I") for _, image, _ in rows]
                pairs += len(keys)
                before += sum(len(set(keys[i:i + batch_size])) for i in range(0, len(keys), batch_size))
                distinct.update(keys)
    return {"pairs": pairs, "images": len(distinct), "before": before, "after": len(distinct)}


def store_attrs(job, column, switches, info, record, detector, region_store, region_weights):
    """The root attributes of one embedding job's store: what ``run_experiments`` and ``run_mleat`` copy
    into each row (the job, the model's column and provenance, the detector) and what reproduces it.

    ``job``: (protocol, dataset, model); ``info``: the encoder's; ``record``: its weights record
    (vlbias.weights.provenance keeps what is not local to this machine); ``detector``: the region
    store's entry, ``region_store`` its file, ``region_weights`` the detector's weights it records.
    """
    from vlbias.weights import provenance

    protocol, dataset, model = job
    return {"protocol": protocol, "switches": json.dumps(switches, sort_keys=True), "dataset": dataset, "model": model,
            "column": column, **{k: info[k] or "" for k in ("model_id", "revision", "commit")},
            "weights": info["weights"], "weights_sha256": info["weights_sha256"] or "", "detector": detector,
            "region_store": str(region_store), "region_store_sha256": sha256_file(region_store),
            "region_weights": str(region_weights), "weights_record": json.dumps(provenance(record), sort_keys=True)}


def embed_tests(stimuli, encoder, store, out_path, levels, masks, attrs=None, manifest_rows=(), cache=None,
                image_mask="persons", mask_labels=None, label_offset=0):
    """Embed every (caption, image) pair of each test of ``stimuli`` at each configured level and mask,
    into one HDF5 file (one per (dataset, model): one model load for all tests).

    Layout::

        /<test>/<level>/<mask>/<role>/embeddings   float32 (n, dim)   level W, S, C; mask none, T, I
        /<test>/<level>/<mask>/<role>/caption      utf-8 (n,)          role X, Y, A_x, A_y, B_x, B_y
        /<test>/<level>/<mask>/<role>/image        utf-8 (n,)          the stimulus' image id
        /<test>/<level>/<mask>/<role>/word         utf-8 (n,)          level C: the word in context
        role group attrs  n (pairs embedded), n_listed (pairs the stimulus lists), n_dropped
        test group attrs  test, name, stimulus, stimulus_sha256, levels, masks, not_applicable (JSON:
                          masked pairs the model lacks)
        root attrs  ``attrs`` (dataset, model, detector, region store ... provenance), the encoder's info (JSON)

    Each (image, labels) is read from the store once (``read_order``), and the pairs the cache lacks are
    embedded in full calls across the groups (``Batches``): each image's work once per (image, mask)
    per job (vlbias.models.vl ``_once``; ``vision_passes`` counts it ahead).

    ``cache`` (a vlbias.io.cache.RecordCache in the folder ``cache_fingerprint(encoder)``) keeps each
    pair's vector under a digest of what was embedded (level, mask and mask terms, caption, word, the
    image's regions and the regions masked, and the encoder options that act there: token_mask for T,
    ws_vector for W and S, the family's feed options (``encoder.feed``, protocol rows 8-12) for every
    vector; with a feed that depends on the authors' batch, VL-BERT's attended box padding, what it
    reads of the pair's batch: ``encoder.in_authors_batches`` over the role's listed pairs, in order):
    a rerun after an edit embeds only pairs it has not seen. A pair the encoder's feed cannot
    read (``encoder.refusal``: ViLBERT's ``in_place`` on fewer than 36 regions) is left out with that reason.

    A model that computes region features from the image itself (``needs_pixels``: VL-BERT end to
    end) gets each image's pixels, read from the ``path`` of its row in ``manifest_rows``.

    ``image_mask`` (protocol switch, docs/grounded.md row 5): the regions mask I hides, "persons" (the
    store's person flags) or "labels" (regions whose detector label is one of the test's sentence-level
    ``mask.region_labels``, or of ``mask_labels`` when given: the model's own list, ViLBERT's), each
    region's label read with ``label_offset`` (switch label_offset, row 13: protocol.label_offset), for
    the I runs, or for every run with an encoder that ``masks_every_run``.

    Returns the rows (``test`` + MISSING_COLUMNS) of the pairs left out and why: images the region
    store lacks (failed downloads, undecodable files: ``manifest_rows``, the acquisition manifest,
    says why), captions without a contextual word (C) or mask term (T), levels a stimulus lacks.
    """
    import h5py

    if image_mask not in ("persons", "labels"):
        raise InputError(f"image_mask '{image_mask}'", "must be 'persons' or 'labels'")
    combos, not_applicable = embedding_combos(levels, masks, encoder.supports_image_masking)
    images = set(store.ids)
    reasons = missing_image_reasons({i for s in stimuli for i in s.image_ids()}, store, manifest_rows)
    pixels = None
    if getattr(encoder, "needs_pixels", False):  # VL-BERT end to end: region features from the pixels
        pixels = {f"{r['test']}/{r['role']}/{r['file']}": r["path"] for r in manifest_rows if r.get("status") == "ok"}
    visual = _Visuals(store, pixels=pixels, label_offset=label_offset)
    dropped, planned = [], []
    for stimulus in stimuli:
        for level, mask in combos:
            if LEVEL_SOURCE[level] not in stimulus.levels:
                dropped.append({"test": stimulus.id, "level": level, "mask": mask or NO_MASK, "role": "",
                                "caption": "", "image": "",
                                "reason": f"the stimulus has no {LEVEL_SOURCE[level]}-level captions"})
                continue
            pairs, left_out = plan_pairs(stimulus, level, mask, images, reasons.get)
            dropped += [{"test": stimulus.id, **d} for d in left_out]
            planned.append((stimulus, level, mask, pairs))
    progress = Progress(sum(len(p) for *_, pairs in planned for p in pairs.values()), "pairs", log)
    text = h5py.string_dtype("utf-8")
    with atomic_hdf5(out_path) as f:
        f.attrs.update({**(attrs or {}), "info": json.dumps(encoder.info, sort_keys=True, default=str)})
        for stimulus in stimuli:
            t = f.create_group(stimulus.id)
            t.attrs.update({"test": stimulus.id, "name": stimulus.name, "stimulus": stimulus.path,
                            "stimulus_sha256": sha256_file(stimulus.path), "levels": json.dumps(levels),
                            "masks": json.dumps(masks),
                            "not_applicable": json.dumps([f"{lv}/{m}" for lv, m in not_applicable])})
        groups = []  # per (test, level, mask, role): what it embeds, and where its file group goes
        for stimulus, level, mask, pairs in planned:
            terms = stimulus.levels[LEVEL_SOURCE[level]]["mask"]["tokens"] if mask == "T" else None
            labels = None
            if (mask == "I" or encoder.masks_every_run) and image_mask == "labels":
                labels = tuple(mask_labels or stimulus.levels["sentence"]["mask"]["region_labels"])
            option = (encoder.token_mask if mask == "T" else None, encoder.ws_vector if level != "C" else None,
                      sorted(encoder.feed.items()))
            group = f.create_group(f"{stimulus.id}/{level}/{mask or NO_MASK}")
            group.attrs.update({"level": level, "mask": mask or NO_MASK, "stimulus_level": LEVEL_SOURCE[level]})
            for role in ROLES:
                groups.append(_Group(stimulus, level, mask, terms, labels, option, role, group, pairs[role], None,
                                     [None] * len(pairs[role])))
        if encoder.batch_dependent:
            _authors_feeds(encoder, groups, visual, images, dropped)
        vectors = _embed_groups(encoder, groups, visual, cache, progress, dropped)
        for g in groups:
            out = np.stack([vectors[k] for k in g.keys]) if g.keys else np.zeros((0, encoder.output_dim(g.level)))
            h = g.parent.create_group(g.role)
            h.create_dataset("embeddings", data=out.reshape(len(g.rows), encoder.output_dim(g.level)).astype(np.float32))
            h.create_dataset("caption", data=[c for c, *_ in g.rows], dtype=text)
            h.create_dataset("image", data=[i for _, i, _ in g.rows], dtype=text)
            if g.level == "C":
                h.create_dataset("word", data=[c[a:b] for c, _, (a, b) in g.rows], dtype=text)
            n_listed = len(g.stimulus.pairs(LEVEL_SOURCE[g.level], g.role))
            h.attrs.update({"n": len(g.rows), "n_listed": n_listed, "n_dropped": n_listed - len(g.rows)})
    progress.done(f"{cache.hits} from the cache" if cache is not None else "")
    return dropped


@dataclass
class _Group:
    """The pairs of one (test, level, mask, role) of a job: rows (caption, image id, word span), their
    regions entries (None: each row's image's Visual, read when embedded) and cache keys (None: not
    embedded, the feed refused the pair)."""
    stimulus: object
    level: str
    mask: str | None
    terms: list | None
    labels: tuple | None
    option: tuple  # the encoder options a pair's vector depends on (see embed_tests)
    role: str
    parent: object  # the HDF5 group of (test, level, mask)
    rows: list
    entries: list | None
    keys: list
    digests: dict = field(default_factory=dict)  # parts after the group's own -> their ``digester``

    def key(self, row, visual_digest, batch=None):
        """The cache key of the pair ``row`` (caption, image, span) on an image of ``visual_digest``:
        digest(level, mask, terms, caption, span, visual_digest, *option[, batch])."""
        caption, _, span = row
        rest = (caption, span, visual_digest, *self.option, *([] if batch is None else [batch]))
        if len(rest) not in self.digests:
            self.digests[len(rest)] = digester((self.level, self.mask, self.terms), len(rest))
        return self.digests[len(rest)](*rest)


def _authors_feed(encoder, g, visual, images, dropped):
    """The rows, entries and keys of ``g`` under a feed that depends on the authors' batch (``_in_authors_batches``:
    it reads every listed pair of the role's, in its order), the pairs the feed refuses dropped."""
    rows = []
    for caption, image, span in g.rows:
        why = encoder.refusal(visual(image, g.labels)[0])
        if why is None:
            rows.append((caption, image, span))
        else:
            dropped.append({"test": g.stimulus.id, "level": g.level, "mask": g.mask or NO_MASK, "role": g.role,
                            "caption": caption, "image": image, "reason": why})
    g.entries, batch = _in_authors_batches(encoder, g.stimulus.pairs(LEVEL_SOURCE[g.level], g.role), rows,
                                           lambda i: visual(i, g.labels)[0], images)
    g.rows, g.keys = rows, [g.key(r, visual(r[1], g.labels)[1], b) for r, b in zip(rows, batch)]


def _authors_feeds(encoder, groups, visual, images, dropped):
    """``_authors_feed`` of every group, the reader (``visual``) keeping every image it reads meanwhile, so each
    (image, labels) is read once: the groups' entries hold those regions until they are embedded anyway."""
    size = visual.size
    visual.size = len({(i, g.labels) for g in groups for _, i in g.stimulus.pairs(LEVEL_SOURCE[g.level], g.role)})
    try:
        for g in groups:
            _authors_feed(encoder, g, visual, images, dropped)
    finally:
        visual.size = size
        for key in list(visual.cache)[:-size]:
            del visual.cache[key]


def read_order(groups, only=None):
    """[((image id, labels), [(group index, row index)])]: the rows of ``groups`` (objects with ``rows``
    (caption, image id, span), ``labels`` and ``mask``; those of ``only`` where given) by the regions they
    read, in the order each is first met, mask I's after the others (the image work ``embed`` keeps per
    (image, mask I or not) is had together)."""
    order = {}
    for gi, g in enumerate(groups):
        for ri, (_, image, _) in enumerate(g.rows):
            if only is None or (gi, ri) in only:
                order.setdefault((image, g.labels), []).append((gi, ri))
    return [(k, sorted(rows, key=lambda r: groups[r[0]].mask == "I")) for k, rows in order.items()]


class Batches:
    """A job's calls to ``embed``, full across its groups: a pair waits in the queue of its call (what
    ``embed`` takes once per call: level C or not, mask, mask terms) and shape key (``shape_keys``: the
    encoder batches only pairs of one key) until the queue holds ``size`` pairs, whatever (test, level,
    mask, role) they come from. The pairs of one image (``image``: its image-only work's key) are added
    together; a queue runs before it is full only to keep at most ``images`` images with pairs waiting,
    the queue of the longest-waiting pair first, so an encoder keeping that many images' work
    (``memo_images()``, which the job hands on after each call) does each once. ``done``: the images whose
    last pair has been handed out (their work can go: ``forget``), since the caller last cleared it."""

    def __init__(self, size, images):
        self.size, self.images = size, images
        self.queues = {}   # (call, shape) -> [(sequence number, image, item)]
        self.waiting = {}  # image -> its pairs in a queue
        self.current, self.added, self.done = None, 0, []

    def add(self, call, shape, image, item):
        """The calls to run now, [(call, [item])], after adding ``item``."""
        ready = []
        if image != self.current:
            self._release(self.current)
            self.current = image
            while len(self.waiting) >= self.images:
                ready.append(self._run(min(self.queues, key=lambda k: self.queues[k][0][0])))
        queue = self.queues.setdefault((call, shape), [])
        queue.append((self.added, image, item))
        self.added += 1
        self.waiting[image] = self.waiting.get(image, 0) + 1
        if len(queue) == self.size:
            ready.append(self._run((call, shape)))
        return ready

    def close(self):
        """The calls left, [(call, [item])], the longest-waiting first."""
        ready = [self._run(k) for k in sorted(self.queues, key=lambda k: self.queues[k][0][0])]
        self._release(self.current)
        self.current = None
        return ready

    def _run(self, key):
        queue = self.queues.pop(key)
        for _, image, _ in queue:
            self.waiting[image] -= 1
            if not self.waiting[image] and image != self.current:
                self._release(image)
        return key[0], [item for *_, item in queue]

    def _release(self, image):
        if image is not None and image in self.waiting and not self.waiting[image]:
            del self.waiting[image]
            self.done.append(image)


def _embed_groups(encoder, groups, visual, cache, progress, dropped):
    """{key: vector} of every pair of ``groups``, each group's rows and keys left to the pairs embedded
    (a pair the encoder's feed refuses, ``encoder.refusal``, goes to ``dropped``): each (image, labels)
    read once (``read_order``), its pairs' keys from its regions, the vector from ``cache`` where it has
    one, the others embedded in full calls across the groups (``Batches``) and cached. A vector never
    depends on what it is batched with (vlbias.models.vl), so neither the cache's content nor the order
    of jobs changes one."""
    vectors, cached, refused, held = {}, [], [], {}
    batches = Batches(encoder.batch_size, encoder.memo_images())

    def run(calls):
        for (level_c, mask, terms), part in calls:
            # W and S differ only in their captions (vlbias.models.vl): one call embeds both
            out = encoder.embed([c for c, *_ in part], [e for _, _, e, _ in part], "C" if level_c else "S",
                                mask=mask, mask_terms=terms and list(terms),
                                words=[s for _, s, *_ in part] if level_c else None)
            keys = [key for *_, key in part]
            vectors.update(zip(keys, out))
            if cache is not None:
                cache.put_many(keys, {"vector": out[:, None]})
            progress.advance(len(part))
        batches.images = encoder.memo_images()  # fewer once the first images' work shows what one holds
        encoder.forget([held.pop(image) for image in batches.done])
        batches.done.clear()

    def feed(order, use_cache):
        for (image, labels), members in order:
            read = None
            for gi, ri in members:
                g = groups[gi]
                caption, _, span = g.rows[ri]
                if g.entries is None:
                    if read is None:
                        read = visual(image, labels)
                    why = encoder.refusal(read[0])
                    if why is not None:
                        refused.append((gi, ri, why))
                        continue
                    g.keys[ri] = g.key(g.rows[ri], read[1])
                entry, key = read[0] if g.entries is None else g.entries[ri], g.keys[ri]
                if key in waiting:  # another row's: embedded once
                    progress.advance(1)
                    continue
                waiting.add(key)
                if use_cache and cache.lists(key):
                    cached.append((gi, ri))
                    continue
                work = (id(entry), g.mask == "I")
                held[work] = (entry, g.mask)
                run(batches.add((g.level == "C", g.mask, g.terms and tuple(g.terms)),
                                encoder.shape_keys([caption], [entry])[0], work, (caption, span, entry, key)))
        run(batches.close())

    waiting = set()
    feed(read_order(groups), cache is not None)
    if cached:
        found = cache.get_many([groups[gi].keys[ri] for gi, ri in cached])
        vectors |= {k: r["vector"][0] for k, r in found.items()}
        progress.advance(len(found))
        # records the cache lost meanwhile (damaged, merged away): embedded after all
        lost = [(gi, ri) for gi, ri in cached if groups[gi].keys[ri] not in vectors]
        waiting -= {groups[gi].keys[ri] for gi, ri in lost}
        feed(read_order(groups, set(lost)), False)
    for gi, ri, why in refused:
        g, (caption, image, _) = groups[gi], groups[gi].rows[ri]
        dropped.append({"test": g.stimulus.id, "level": g.level, "mask": g.mask or NO_MASK, "role": g.role,
                        "caption": caption, "image": image, "reason": why})
    for g in groups:
        kept = [i for i, k in enumerate(g.keys) if k is not None]
        g.rows, g.keys = [g.rows[i] for i in kept], [g.keys[i] for i in kept]
    return vectors


def read_embeddings(path):
    """({test: {(level, mask): {role: float32 (n, dim)}}}, root attributes, {test: test attributes})
    of an ``embed_tests`` file."""
    with open_hdf5(path) as f:
        sets = {test: {(level, mask): {r: f[test][level][mask][r]["embeddings"][()] for r in ROLES}
                       for level in f[test] for mask in f[test][level]} for test in f}
        return sets, dict(f.attrs), {test: dict(f[test].attrs) for test in f}


def run_experiments(path, n_samples, seed, exact, masked_statistic="2"):
    """Rows (vlbias.stats.row.GROUNDED) of the grounded experiments on every test of one ``embed_tests`` file:
    experiments 1, 2 and 3 (variant 1) on each unmasked level, experiment 3 variant 2 ("3-masked") on each
    masked one, with experiment ``masked_statistic``'s test ("2" the paper, "1" the authors' code;
    protocol switch, docs/grounded.md). A set left empty (every pair dropped) gives a row whose
    status says so, and so does a target set (X, Y) of fewer than 2 pairs ("too-few"). The null each
    permutation samples: see vlbias.stats.grounded and docs/grounded.md.
    """
    from vlbias.stats.grounded import grounded_test

    tests, attrs, test_attrs = read_embeddings(path)
    base = {k: attrs.get(k, "") for k in ("protocol", "dataset", "model", "column", *GROUNDED_PROVENANCE)}
    order = lambda kv: ("WSC".index(kv[0][0]), kv[0][1] != NO_MASK, kv[0][1])  # noqa: E731
    jobs = [(test, key, emb) for test, sets in tests.items() for key, emb in sorted(sets.items(), key=order)]
    progress = Progress(sum(3 if key[1] == NO_MASK else 1 for _, key, _ in jobs), "experiments", log)
    rows = []
    for test, (level, mask), emb in jobs:
        counts = {n: len(emb[r]) for n, r in zip(GROUNDED.sizes, ROLES)}
        for experiment in (("1", "2", "3") if mask == NO_MASK else ("3-masked",)):
            progress.advance()
            row = GROUNDED.build(base, counts, test=test, name=test_attrs[test].get("name", ""), experiment=experiment,
                                 level=level, mask=mask, n_samples=n_samples, seed=seed, exact=exact)
            options = {}
            if experiment == "3-masked":
                row["masked_statistic"] = options["statistic"] = masked_statistic
            empty = [r for r in ROLES if not len(emb[r])]
            if empty:
                rows.append(GROUNDED.build(row, status=f"skipped: no pairs left in {', '.join(empty)}"))
                continue
            # as vlbias.associate.run_test: a target set of one has no spread of its own (with one on each
            # side d is ±√2 whatever the vectors, and experiment 3's d_x likewise): no d, no p
            few = [f"{r} has {len(emb[r])}" for r in ("X", "Y") if len(emb[r]) < 2]
            if few:
                rows.append(GROUNDED.build(row, status=f"too-few: {' and '.join(few)} pair; d and p need at least 2 "
                                                       "in each target set"))
                continue
            try:
                r = grounded_test(experiment, *(emb[role] for role in ROLES), n_samples=n_samples, seed=seed,
                                  exact=exact, **options)
            except ValueError as e:  # e.g. a zero embedding: cosine undefined
                rows.append(GROUNDED.build(row, status=f"skipped: {e}"))
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
            rows.append(GROUNDED.build(row))
    progress.done()
    return rows


def run_mleat(path, tests=None, levels=None, *, n_samples, seed, exact, alpha, null, saturation):
    """[(row, MLEATResult or None)]: the ML-EAT (vlbias.stats.mleat) of each test of one ``embed_tests``
    file (those of ``tests``; all where None) at each unmasked level (of ``levels``), with experiment
    1's sets: X, Y and the attributes pooled over both image categories, A = A_x∪A_y, B = B_x∪B_y, so
    Level 1 is experiment 1's d and p. Each row: the file's protocol, dataset, model, column and
    provenance, the test, its level, and MLEATResult.row(); ``model`` is the model's column and
    ``test`` "<dataset>/<test>/<level>", so a table's (test, model) cells stay apart. A set left empty gives a
    row that says so and no result; vectors no cosine is defined for, a "skipped" row likewise.
    """
    return [(row, r) for _, row, r in _mleats(path, tests, levels, n_samples=n_samples, seed=seed, exact=exact,
                                              alpha=alpha, null=null, saturation=saturation)]


def _mleats(path, tests, levels, **settings):
    """(test, row, MLEATResult or None) of ``run_mleat``, in its order."""
    from vlbias.stats.mleat import mleat

    found_tests, attrs, test_attrs = read_embeddings(path)
    base = {k: attrs.get(k, "") for k in ("protocol", "dataset", "column", *GROUNDED_PROVENANCE)}
    for test in sorted(found_tests) if tests is None else [t for t in tests if t in found_tests]:
        for level in [lv for lv in "WSC" if (lv, NO_MASK) in found_tests[test] and (levels is None or lv in levels)]:
            emb = found_tests[test][(level, NO_MASK)]
            sets = {"X": emb["X"], "Y": emb["Y"], "A": np.concatenate([emb["A_x"], emb["A_y"]]),
                    "B": np.concatenate([emb["B_x"], emb["B_y"]])}
            row = MLEAT.build(base, {n: len(sets[s]) for n, s in zip(SIZES, SETS)},
                              test=f"{base['dataset']}/{test}/{level}",
                              name=f"{test_attrs[test].get('name') or test} ({base['dataset']}, {level})",
                              model=attrs.get("column") or attrs.get("model", ""), level=level)
            empty = [r for r in ROLES if not len(emb[r])]
            if empty:
                yield test, MLEAT.build(row, status=f"skipped: no pairs left in {', '.join(empty)}"), None
                continue
            try:
                r = mleat(sets["X"], sets["Y"], sets["A"], sets["B"], **settings)
            except ValueError as e:  # e.g. a zero embedding: cosine undefined
                yield test, MLEAT.build(row, status=f"skipped: {e}"), None
                continue
            yield test, MLEAT.build(row, r.row()), r


def write_mleat_results(path, out_path, tests, levels, **settings):
    """The ML-EAT job of one embedding file (``run_mleat``'s, of ``tests`` at ``levels``): every result
    as JSON at ``out_path``, [{test, row, result}], ``result`` MLEATResult.asdict() or null. Each
    grounded table's ML-EAT files are assembled from these (``read_mleat_results``), so a (test, level)
    that several tables show is computed once."""
    found = [{"test": test, "row": row, "result": None if r is None else r.asdict()}
             for test, row, r in _mleats(path, tests, levels, **settings)]
    with atomic_path(out_path) as tmp:
        # numpy scalars (an HDF5 attribute's, a kernel's bool) as the Python values they hold
        Path(tmp).write_text(json.dumps(found, default=lambda v: v.item()), encoding="utf-8")


def read_mleat_results(path, tests):
    """[(row, MLEATResult or None)] of ``tests`` (a table's, in its order) in a ``write_mleat_results``
    file: what ``run_mleat`` of the embedding file and ``tests`` gives (the same levels, the same values)."""
    from vlbias.stats.mleat import MLEATResult

    found = json.loads(Path(path).read_text(encoding="utf-8"))
    by_test = {}
    for item in found:
        r = item["result"]
        by_test.setdefault(item["test"], []).append((item["row"], None if r is None else MLEATResult.from_dict(r)))
    return [item for test in tests for item in by_test.get(test, [])]
