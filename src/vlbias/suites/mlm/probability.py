"""ln P([MASK] = E | caption, visual input) from a model's masked-language-model head.

    queries = [Query("The woman is carrying a {entity}.", "purse", None),            # no image
               Query("The person is carrying a {entity}.", "purse", "purse/male/1.jpg")]
    entity_logprobs(model, queries, visuals)   # float64 (2,)

``model`` is any object with the interface of vlbias.models.vl.VLEncoder: ``tokenizer`` (a
bert-base-uncased WordPiece tokenizer) and ``mask_logprobs(captions, regions, fill=...)``; the
VisualBERT and LXMERT adapters and the text-only ``bert_mlm`` adapter all have it.

Multi-piece entities. An entity that WordPiece splits into n pieces (``handbag`` -> ``hand ##bag``)
is written as n [MASK]s, and its probability is the joint probability of its pieces by the chain
rule, revealing them left to right:

    ln P(E) = sum_k ln P(piece_k at mask k | pieces 1..k-1 written in, masks k..n still masked)

one forward pass per piece. Why: it is a probability of the whole word (a distribution over all
piece sequences of that length), so a two-piece entity is comparable with a one-piece one, and it
keeps the dependence between pieces ("##bag" after "hand"), which the product of the
marginals of all-masked positions (one pass) ignores: that product scores each piece as if the
others were unknown, and typically underestimates a word whose later pieces follow from the
first. The n [MASK]s tell the model the entity's length; every score compares the same entity
under the same template, so this cue is the same in numerator and denominator.

"No visual input" (``image`` None) is what each adapter defines as ``no_image``: VisualBERT the
caption alone (zero regions), LXMERT one region with zero features and the whole-image box (its
masked-object input; LXMERT cannot run without regions), ViLBERT likewise (a zero region on the
whole image after its then zero global token), VL-BERT the input of its text-only pre-training (no
box, every token's visual feature its learned text-corpus embedding), ViLT and BridgeTower a blank
image the caption's tokens do not attend to (their ``no_image: masked``), text-only BERT has no visual
input at all.
"""

import logging
from dataclasses import dataclass

import numpy as np

from vlbias.errors import InputError
from vlbias.io.cache import digest
from vlbias.logs import Progress

log = logging.getLogger(__name__)

MASK = "[MASK]"
CHUNK = 256  # captions per call: bounds the (captions x vocabulary) log-probabilities held at once


@dataclass(frozen=True)
class Query:
    caption: str         # the caption with "{entity}" where the masked entity goes
    entity: str          # the entity whose probability is read
    image: str | None    # an image id of ``visuals``, or None for no visual input


def entity_pieces(tokenizer, entity):
    """The vocabulary ids of ``entity``'s word pieces; an entity with an unknown piece is an error."""
    # the entity after a space, as in its templates: a byte-level BPE (BridgeTower's RoBERTa) spells it
    # so ("Ġpurse"); a WordPiece tokenizer ignores the space
    pieces = tokenizer.tokenize(" " + entity)
    ids = tokenizer.convert_tokens_to_ids(pieces)
    if not ids or tokenizer.unk_token_id in ids:
        raise InputError(f"entity '{entity}'", f"is not spelled by the model's vocabulary (pieces {pieces})")
    return ids


def masked_caption(caption, n):
    """``caption`` with its one "{entity}" replaced by ``n`` [MASK]s."""
    if caption.count("{entity}") != 1 or MASK in caption:
        raise InputError(f"caption '{caption}'", "needs exactly one {entity} and no [MASK] of its own")
    return caption.replace("{entity}", " ".join([MASK] * n))


def entity_logprobs(model, queries, visuals=None, cache=None):
    """float64 (len(queries),): ln P(entity | caption, image) of each query (chain rule over pieces).

    ``cache`` (a vlbias.io.cache.RecordCache of ``model``) keeps each query's value under a digest of
    its caption, entity and the image's regions: a rerun after an edit queries only what is new.
    """
    visuals = visuals or {}
    pieces, seen = {}, {}
    captions, regions, fill, want, owner = [], [], [], [], []
    out = np.zeros(len(queries), dtype=np.float64)
    keys = [None] * len(queries)
    for q, query in enumerate(queries):
        if query.image is not None and query.image not in visuals:
            raise InputError(f"image '{query.image}'", "has no regions")
        if cache is not None:
            v = visuals.get(query.image)
            image = None if v is None else seen.setdefault(query.image, digest(v.features, v.boxes_norm, v.is_person,
                                                                                     list(v.image_size or ()), v.image))
            keys[q] = digest(query.caption, query.entity, image)
    found = cache.get_many(keys) if cache is not None else {}
    for q, query in enumerate(queries):
        if keys[q] in found:
            out[q] = found[keys[q]]["logprob"][0]
            continue
        ids = pieces.setdefault(query.entity, entity_pieces(model.tokenizer, query.entity))
        caption = masked_caption(query.caption, len(ids))
        for k in range(len(ids)):
            captions.append(caption)
            regions.append(None if query.image is None else visuals[query.image])
            fill.append(ids[:k])
            want.append(ids[k])
            owner.append(q)
    progress = Progress(len(captions), "forward passes (one per word piece)", log)
    for start in range(0, len(captions), CHUNK):
        stop = start + CHUNK
        logps = model.mask_logprobs(captions[start:stop], regions[start:stop], fill=fill[start:stop])
        for i, (logp, token) in enumerate(zip(logps, want[start:stop]), start):
            n_left = len(pieces[queries[owner[i]].entity]) - len(fill[i])
            if logp.shape[0] != n_left:  # the caption itself must not add [MASK]s
                raise InputError(f"caption '{captions[i]}'", f"has {logp.shape[0]} [MASK]s left, expected {n_left}")
            out[owner[i]] += float(logp[0, token])  # the first [MASK] left is the next piece
        progress.advance(len(logps))
    progress.done(f"{len(queries) - len(set(owner))} of {len(queries)} queries from the cache" if cache is not None
                  else "")
    if cache is not None:
        for q in sorted(set(owner)):
            cache.put(keys[q], {"logprob": out[q:q + 1]})
    return out


IMAGE_STATUS_COLUMNS = ["id", "entity", "gender", "status", "reason"]


def case_study_images(rows, store_path, needs_pixels=False):
    """(a status row per manifest row, {image id: Visual}, the rows used) of the case study's image
    manifest ``rows`` (vlbias.suites.mlm.stimuli.ImageRow) on the region store at ``store_path``
    (opened only when some row has an image). A row is "used" where the store has its regions, else
    keeps the manifest's status, or gets "no regions" and why the store has none. ``needs_pixels``: a
    model that computes region features itself (VL-BERT end to end) reads the pixels too."""
    from vlbias.regions.store import RegionStore  # HDF5: only where a store is read

    usable = [r.id for r in rows if r.status == "ok"]
    visuals, missing = {}, {}
    if usable:
        paths = {r.id: r.path for r in rows if r.status == "ok"} if needs_pixels else None
        with RegionStore(store_path) as store:
            visuals, missing = load_visuals(store, usable, paths)
    status = [{"id": r.id, "entity": r.entity, "gender": r.gender,
               "status": "used" if r.id in visuals else r.status if r.status != "ok" else "no regions",
               "reason": "" if r.id in visuals else missing.get(r.id, r.reason)} for r in rows]
    return status, visuals, [r for r in rows if r.id in visuals]


def load_visuals(store, image_ids, paths=None):
    """({image id: Visual}, {image id: why it has none}) from an open vlbias.regions.store.RegionStore;
    with ``paths`` ({image id: file}) each Visual carries the image's pixels (models that need_pixels)."""
    from vlbias.visual import visual_from_store  # image decoding (cv2): only the model jobs need it

    visuals, missing = {}, {}
    for image_id in image_ids:
        try:
            visuals[image_id] = visual_from_store(store, image_id, path=paths and paths[image_id])
        except InputError as e:  # skipped by the detector, or never extracted
            missing[image_id] = str(e)
    return visuals, missing
