"""Ghate et al.'s cross-modal valence tests in four orders (vlbias.suites.zoo.cross_modal): the sets of each
order, the OASIS orders recorded as skips without the OASIS images and run with them (through the image
stores and the model), a planted image-text association recovered through write_eats, and the committed
table against the iEAT stimuli and the text tests."""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import REPO
from helpers.zoo import MODELS, write_oasis
from PIL import Image

from vlbias.errors import InputError
from vlbias.images.store import build_image_store
from vlbias.io.store import read_set, write_embeddings
from vlbias.models import build
from vlbias.report.zoo import write_eats
from vlbias.suites.ieat import embed_image_store
from vlbias.suites.zoo.analysis import order_of
from vlbias.suites.zoo.cross_modal import battery, cross_modal_tests, read_cross_modal
from vlbias.suites.zoo.metadata import COLUMNS as META
from vlbias.suites.zoo.oasis import ABSENT, build_oasis_store
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
    tests = battery([text], table, oasis=False)
    assert [(s.id, skip) for s, skip in tests] == [
        ("nrc:weat1", None), ("Flower/Valence:image-text", None), ("Flower/Valence:text-image", ABSENT),
        ("Flower/Valence:image-image", ABSENT), ("Flower/Valence:text-text", None)]
    assert [skip for _, skip in battery([text], table, oasis=True)] == [None] * 5
    by_order = {s.id.rsplit(":", 1)[1]: s for s, _ in tests[1:]}
    for order, s in by_order.items():
        assert order_of(s) == order and s.family == "ghate2025"
    image_text, text_image = by_order["image-text"], by_order["text-image"]
    assert (image_text.X.key, image_text.Y.key) == ("f/flower", "f/insect") and image_text.X.label == "Targ1"
    assert (image_text.X.category, image_text.Y.category) == ("f/flower", "f/insect")
    assert image_text.A.items == tuple(WORDS["attr1"]) and image_text.B.key == "nrc:weat1/B"
    assert text_image.X.items == tuple(WORDS["targ1"]) and text_image.A.key == "oasis/pleasant"
    assert by_order["text-text"].sets == tests[0][0].sets
    assert battery([text], None, oasis=True) == tests[:1]


def test_a_cross_modal_test_without_its_text_test_is_refused(tmp_path):
    _, table = project(tmp_path)
    with pytest.raises(InputError, match="its text test is not among zoo/text_tests"):
        cross_modal_tests(read_cross_modal(table), {}, oasis=False)


def test_a_planted_image_text_association_is_recovered_and_the_oasis_orders_are_skips(tmp_path):
    text, table = project(tmp_path)
    tests = battery([text], table, oasis=False)
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
        assert row["status"] == f"skipped: {ABSENT}" and np.isnan(row["d"]) and row["order"] == order


def test_with_the_oasis_images_every_order_runs_through_the_image_stores_and_the_model(tmp_path):
    text, table = project(tmp_path)
    tests = battery([text], table, oasis=True)
    rng = np.random.default_rng(1)
    entries = []
    for category in ("f/flower", "f/insect"):
        (tmp_path / category).mkdir(parents=True)
        for i in range(3):
            path = tmp_path / category / f"img{i}.png"
            Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(path)
            entries.append({"category": category, "file": path.name, "path": path})
    settings = {"size": 16, "crop": "center", "resample": "bicubic", "decoder": "pil"}
    build_image_store(entries, tmp_path / "ieat.h5", **settings)
    manifest = write_oasis(tmp_path / "OASIS", [(f"Theme {i}", v) for i, v in enumerate([5.0, 1.0, 6.0, 2.0, 4.0])])
    build_oasis_store(tmp_path / "OASIS", manifest, tmp_path / "oasis.h5", tmp_path / "status.tsv", settings,
                      per_set=2)
    store, encoder = tmp_path / "m.h5", build({k: v for k, v in MODELS[0].items() if k not in ("name", "tag")})
    embed_image_store([tmp_path / "ieat.h5", tmp_path / "oasis.h5"], encoder, store, {"model_id": "m"},
                      stimuli=[s for s, _ in tests])
    assert read_set(store, "oasis/pleasant")[1] == ["Theme 0.jpg", "Theme 2.jpg"]  # by file name
    models = tmp_path / "models.csv"
    pd.DataFrame([{"model": "m"}]).reindex(columns=["model", *META]).to_csv(models, index=False)
    out = SimpleNamespace(csv=tmp_path / "eats.csv", md=tmp_path / "eats.md")
    write_eats(tests, {"m": store}, models, out, n_samples=50, seed=0, exact="auto", threads=1, ci=None)
    eats = pd.read_csv(out.csv).set_index("test")
    assert (eats["status"] == "ok").all() and eats["d"].notna().all()
    for order, n in {"image-text": (3, 4), "text-image": (4, 2), "image-image": (3, 2), "text-text": (4, 4)}.items():
        assert tuple(eats.loc[f"Flower/Valence:{order}", ["n_x", "n_a"]]) == n
    # the two stores may not both hold a category
    with pytest.raises(InputError, match="oasis.h5: holds the categories oasis/pleasant, oasis/unpleasant of another"):
        embed_image_store([tmp_path / "oasis.h5", tmp_path / "oasis.h5"], encoder, tmp_path / "x.h5", {})


def test_the_committed_cross_modal_tests_name_real_categories_and_text_tests(tmp_path):
    table = REPO / "resources/zoo/cross_modal.tsv"
    texts = list(manifest_tests(REPO / "resources/manifests/zoo_text_tests.tsv"))
    stimuli = REPO / "resources/stimuli/ieat"
    assert [r["test"] for r in read_cross_modal(table)] == ["Insect-Flower/Valence", "Race/Valence", "Gender/Valence",
                                                             "Age/Valence"]
    assert cross_modal_problems(table, texts, stimuli) == []
    assert len(cross_modal_problems(table, ["nrc:sent-weat1"], stimuli)) == 3
    _, own = project(tmp_path)
    assert cross_modal_problems(own, ["nrc:weat1"], stimuli) == [
        f"{own}: test 'Flower/Valence': no iEAT stimulus file names the image category {c!r}"
        for c in ("f/flower", "f/insect")]


@pytest.mark.mirror
def test_the_committed_cross_modal_tests_take_their_valence_words_from_nrc_vad(mirror):
    # Ghate et al.'s NRC-VAD words (their experiments/nrc_vad_combinations.json) are the attributes of the
    # text test of each cross-modal test, as in their NRC-OASIS results
    words = json.loads((mirror / "clip_bias/experiments/nrc_vad_combinations.json").read_text())
    manifest = manifest_tests(REPO / "resources/manifests/zoo_text_tests.tsv")
    for row in read_cross_modal(REPO / "resources/zoo/cross_modal.tsv"):
        test = json.loads((mirror / "clip_bias" / manifest[row["text_test"]]["path"]).read_text())
        assert test["attr1"]["examples"] == words["pleasant_combinations"], row["test"]
        assert test["attr2"]["examples"] == words["unpleasant_combinations"], row["test"]
