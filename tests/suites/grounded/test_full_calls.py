"""The embedding job's calls, full across its groups: pairs of one call and shape key from any
(test, level, mask, role) fill one ``embed`` call (``Batches``), each (image, labels) is read from the
region store once, and every family's vectors are bit for bit those of one call per group (the
per-group path, tests/helpers/grounded.py). Tiny random models of the real config classes."""

import functools
import types

import numpy as np
import pytest
from helpers.grounded import image_ids, per_group_vectors, stimulus_doc, write_stimulus
from helpers.tiny import TINY_BLIP, TINY_BRIDGETOWER, TINY_FLAVA, TINY_VILT, TINY_VL, random_visual, tiny_bpe_tokenizer

from vlbias.models import build
from vlbias.suites.grounded import jobs
from vlbias.suites.grounded.jobs import Batches, embed_tests, read_embeddings, vision_passes
from vlbias.suites.grounded.stimulus import load_grounded_stimulus

FAMILIES = {**TINY_VL, "blip": TINY_BLIP, "flava": TINY_FLAVA, "vilt": TINY_VILT, "bridgetower": TINY_BRIDGETOWER}
# the families that keep an image's work (vlbias.models.vl ``_once``): once per (image, mask I or not)
ONCE = {"lxmert", "vlbert", "blip", "flava", "bridgetower", "vilt"}
LEVELS, MASKS = ["W", "S", "C"], {"T": ["S"], "I": ["S"]}


def test_a_call_fills_across_groups_and_waits_for_its_pairs():
    # by hand: a's two k1 pairs fill a call; b's k1 pair waits, b's and c's k2 pairs fill one; the rest at the end
    batches = Batches(2, images=3)
    calls = [c for image, key in ["a1", "a1", "b1", "b2", "c2", "c2"] for c in batches.add(key, 0, image, image + key)]
    assert calls == [("1", ["a1", "a1"]), ("2", ["b2", "c2"])] and batches.done == ["a"]
    assert batches.close() == [("1", ["b1"]), ("2", ["c2"])] and batches.done == ["a", "b", "c"]


def test_a_call_runs_early_only_to_keep_its_images_to_the_cap():
    # two images may wait: c's arrival runs the queue of the longest-waiting pair (a's), not b's
    batches = Batches(4, images=2)
    calls = [c for image, key in ["a1", "b2", "c1"] for c in batches.add(key, 0, image, image)]
    assert calls == [("1", ["a"])] and batches.done == ["a"]
    assert batches.close() == [("2", ["b"]), ("1", ["c"])] and batches.done == ["a", "b", "c"]
    # shape keys apart: one call key, two shapes, two calls
    batches = Batches(2, images=9)
    assert [c for s in (8, 16, 8) for c in batches.add("k", s, s, s)] == [("k", [8, 8])]


def plan(tmp_path):
    """Two tests, their images in both (so a read serves groups of each), captions of two buckets."""
    stimuli, ids = [], set()
    for test in ("toy-a", "toy-b"):
        doc = stimulus_doc(test)
        for level in doc["levels"].values():
            level["dataset_dir"] = "shared"
            level["captions"]["A"][1] = "A building of many offices, as this career-long office worker saw it."
            if test == "toy-b":
                level["captions"]["Y"][1] = "Lisa" if len(level["captions"]["Y"][0].split()) == 1 else "Lisa is home."
        stimuli.append(load_grounded_stimulus(write_stimulus(tmp_path / f"google/{test}.yaml", doc)))
        ids |= set(image_ids(doc))
    return stimuli, sorted(ids)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_image_read_once_and_vectors_those_of_the_per_group_path(family, tmp_path, monkeypatch):
    spec = {**FAMILIES[family], "batch_size": 4}
    if family == "bridgetower":
        spec["tokenizer"] = str(tiny_bpe_tokenizer(tmp_path / "bpe"))
    stimuli, ids = plan(tmp_path)
    visuals = {i: random_visual(12, n, persons=[0, 3], size=(40, 56), image=True)[0] for n, i in enumerate(ids)}
    reads = []
    monkeypatch.setattr("vlbias.visual.visual_from_store",
                        lambda store, image, labels, path, offset: reads.append((image, labels)) or visuals[image])
    store = types.SimpleNamespace(ids=ids, skipped={})
    # a reader that keeps one image: the job's own order, not the reader's cache, reads each image once
    monkeypatch.setattr(jobs._Visuals, "__init__", functools.partialmethod(jobs._Visuals.__init__, size=1))
    rows = [{"test": i.split("/")[0], "role": i.split("/")[1], "file": i.split("/")[2], "path": "-", "status": "ok"}
            for i in ids]
    encoder = build(spec)
    encoder.image_memo = 3  # a cap the plan's 16 images exceed: calls run early, images' work is let go
    calls = []
    embed = encoder.embed
    encoder.embed = lambda captions, regions, *a, **k: (calls.append((len(captions), len(set(
        encoder.shape_keys(captions, regions))))) or embed(captions, regions, *a, **k))
    embed_tests(stimuli, encoder, store, tmp_path / "out.h5", LEVELS, MASKS, manifest_rows=rows)
    assert sorted(reads) == sorted(set(reads)) and len(reads) == len(ids)
    if family in ONCE:
        assert encoder.image_passes == vision_passes(stimuli, LEVELS, MASKS, 4, encoder.supports_image_masking)["after"]
        assert not encoder._memo  # each image's work let go after its last pair
    combos, _ = jobs.embedding_combos(LEVELS, MASKS, encoder.supports_image_masking)
    distinct = {(lv, m, c, i) for s in stimuli for lv, m in combos
                for rows in jobs.plan_pairs(s, lv, m, set(ids), str)[0].values() for c, i, _ in rows}
    assert sum(n for n, _ in calls) == len(distinct)  # toy-b repeats most of toy-a's pairs: each embedded once
    assert {keys for _, keys in calls} == {1}  # a call holds pairs of one shape key: one batch of the model
    got, _, _ = read_embeddings(tmp_path / "out.h5")
    reference = per_group_vectors(build(spec), stimuli, LEVELS, MASKS, visuals.get)
    assert reference and all(np.array_equal(got[t][(lv, m)][r], v) for (t, lv, m, r), v in reference.items())
    assert len(calls) < sum(len(v) > 0 for v in reference.values())  # fewer calls than groups: calls across them


def test_read_order_gives_each_images_rows_together_mask_i_last():
    assert jobs.read_order([types.SimpleNamespace(rows=[("c", "a", None), ("d", "b", None)], labels=None, mask="I"),
                            types.SimpleNamespace(rows=[("e", "b", None)], labels=None, mask=None)]) == \
        [(("a", None), [(0, 0)]), (("b", None), [(1, 0), (0, 1)])]


def test_a_feed_of_the_authors_batches_reads_each_image_once(tmp_path, monkeypatch):
    # VL-BERT's attended padding reads each role's listed pairs ahead of the calls (_authors_feeds); with a reader
    # that keeps one image, the groups of one role and masking must still come together and read each once
    stimuli, ids = plan(tmp_path)
    visuals = {i: random_visual(12, n, persons=[0, 3], size=(40, 56))[0] for n, i in enumerate(ids)}
    reads = []
    monkeypatch.setattr("vlbias.visual.visual_from_store",
                        lambda store, image, labels, path, offset: reads.append((image, labels)) or visuals[image])
    monkeypatch.setattr(jobs._Visuals, "__init__", functools.partialmethod(jobs._Visuals.__init__, size=1))
    encoder = build({**TINY_VL["vlbert"], "vlbert_box_padding": "attended", "authors_batch_size": 4, "batch_size": 4})
    assert encoder.batch_dependent
    embed_tests(stimuli, encoder, types.SimpleNamespace(ids=ids, skipped={}), tmp_path / "out.h5", LEVELS, MASKS)
    assert len(reads) == len(set(reads)) == len({(i, labels) for i in ids for labels in {r[1] for r in reads}})
