"""Ghate et al.'s cross-modal valence tests in four orders (vlbias.suites.zoo.cross_modal): the sets of each
order, the OASIS orders recorded as skips, a planted image-text association recovered through write_eats,
and the committed table against the iEAT stimuli and the text tests."""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import REPO

from vlbias.errors import InputError
from vlbias.io.store import write_embeddings
from vlbias.report.zoo import write_eats
from vlbias.suites.zoo.analysis import order_of
from vlbias.suites.zoo.cross_modal import OASIS, battery, cross_modal_tests, read_cross_modal
from vlbias.suites.zoo.metadata import COLUMNS as META
from vlbias.suites.zoo.suite import cross_modal_problems
from vlbias.suites.zoo.text import manifest_tests

WORDS = {"targ1": ["rose", "tulip", "daisy", "lily"], "targ2": ["ant", "wasp", "moth", "flea"],
         "attr1": ["joy", "love", "peace", "calm"], "attr2": ["hate", "war", "pain", "grief"]}


def project(tmp_path):
    text = tmp_path / "nrc/weat1.jsonl"
    text.parent.mkdir()
    text.write_text(json.dumps({k: {"category": k.title(), "examples": v} for k, v in WORDS.items()}))
    table = tmp_path / "cross_modal.tsv"
    table.write_text("# a comment\ntest\timage_x\timage_y\ttext_test\nFlower/Valence\tf/flower\tf/insect\tnrc:weat1\n")
    return text, table


def test_each_order_takes_its_sets_from_images_or_the_text_test(tmp_path):
    text, table = project(tmp_path)
    tests = battery([text], table)
    assert [(s.id, skip) for s, skip in tests] == [
        ("nrc:weat1", None), ("Flower/Valence:image-text", None), ("Flower/Valence:text-image", OASIS),
        ("Flower/Valence:image-image", OASIS), ("Flower/Valence:text-text", None)]
    by_order = {s.id.rsplit(":", 1)[1]: s for s, _ in tests[1:]}
    for order, s in by_order.items():
        assert order_of(s) == order and s.family == "ghate2025"
    image_text, text_image = by_order["image-text"], by_order["text-image"]
    assert (image_text.X.key, image_text.Y.key) == ("f/flower", "f/insect") and image_text.X.label == "Targ1"
    assert (image_text.X.category, image_text.Y.category) == ("f/flower", "f/insect")
    assert image_text.A.items == tuple(WORDS["attr1"]) and image_text.B.key == "nrc:weat1/B"
    assert text_image.X.items == tuple(WORDS["targ1"]) and text_image.A.key == "oasis/pleasant"
    assert by_order["text-text"].sets == tests[0][0].sets
    assert battery([text], None) == tests[:1]


def test_a_cross_modal_test_without_its_text_test_is_refused(tmp_path):
    _, table = project(tmp_path)
    with pytest.raises(InputError, match="its text test is not among zoo/text_tests"):
        cross_modal_tests(read_cross_modal(table), {})


def test_a_planted_image_text_association_is_recovered_and_the_oasis_orders_are_skips(tmp_path):
    text, table = project(tmp_path)
    tests = battery([text], table)
    rng = np.random.default_rng(0)
    pole = rng.normal(size=16)

    def vectors(sign, n=4):
        return (sign * pole + 0.3 * rng.normal(size=(n, 16))).astype(np.float32)

    ids = lambda n: [f"i{k}" for k in range(n)]
    sets = {"f/flower": (vectors(1), ids(4)), "f/insect": (vectors(-1), ids(4)),
            "nrc:weat1/A": (vectors(1), WORDS["attr1"]), "nrc:weat1/B": (vectors(-1), WORDS["attr2"]),
            "nrc:weat1/X": (rng.normal(size=(4, 16)).astype(np.float32), WORDS["targ1"]),
            "nrc:weat1/Y": (rng.normal(size=(4, 16)).astype(np.float32), WORDS["targ2"])}
    write_embeddings(tmp_path / "m.h5", sets, {"model_id": "m"})
    models = tmp_path / "models.csv"
    pd.DataFrame([{"model": "m"}]).reindex(columns=["model", *META]).to_csv(models, index=False)
    out = SimpleNamespace(csv=tmp_path / "eats.csv", md=tmp_path / "eats.md")
    write_eats(tests, {"m": tmp_path / "m.h5"}, models, out, n_samples=200, seed=0, exact="auto", threads=1, ci=None)
    eats = pd.read_csv(out.csv).set_index("test")
    planted = eats.loc["Flower/Valence:image-text"]
    assert planted["status"] == "ok" and planted["d"] > 1.5 and planted["p"] < 0.05 and planted["order"] == "image-text"
    assert abs(eats.loc["Flower/Valence:text-text", "d"]) < 1.5
    for order in ("text-image", "image-image"):
        row = eats.loc[f"Flower/Valence:{order}"]
        assert row["status"] == f"skipped: {OASIS}" and np.isnan(row["d"]) and row["order"] == order


def test_the_committed_cross_modal_tests_name_real_categories_and_text_tests(tmp_path):
    table = REPO / "resources/zoo/cross_modal.tsv"
    texts = list(manifest_tests(REPO / "resources/manifests/zoo_text_tests.tsv"))
    stimuli = REPO / "resources/stimuli/ieat"
    assert [r["test"] for r in read_cross_modal(table)] == ["Insect-Flower/Valence", "Race/Valence", "Gender/Valence",
                                                             "Age/Valence"]
    assert cross_modal_problems(table, texts, stimuli) == []
    assert len(cross_modal_problems(table, ["nrc:weat1"], stimuli)) == 3
    _, own = project(tmp_path)
    assert cross_modal_problems(own, ["nrc:weat1"], stimuli) == [
        f"{own}: test 'Flower/Valence': no iEAT stimulus file names the image category {c!r}"
        for c in ("f/flower", "f/insect")]
