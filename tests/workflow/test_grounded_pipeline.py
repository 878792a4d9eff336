"""The grounded pipeline: embedding jobs (tiny random VisualBERT and LXMERT on the real WordPiece
vocabulary, a tiny region store), the experiments on their output, the paper-layout Tables 3-7 on
hand-made rows, and the full table set built by the real Snakefile on a tiny project."""

import json
import re
from types import SimpleNamespace

import h5py
import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from helpers.grounded import TINY_GROUNDED as TINY
from helpers.grounded import image_ids, stimulus_doc, tiny_project, write_stimulus

from vlbias.models import build
from vlbias.regions.store import RegionStore, write_region_store
from vlbias.report.grounded import NA, paper_table, to_frame, to_latex, to_markdown
from vlbias.errors import InputError
from vlbias.io.cache import RecordCache
from vlbias.report.mleat import map_path
from vlbias.stats.row import MLEAT as MLEAT_ROW
from vlbias.stats.mleat import mleat
from vlbias.suites.grounded.jobs import NO_MASK, embed_tests, embedding_combos, read_embeddings, run_experiments
from vlbias.suites.grounded.stimulus import ROLES, load_grounded_stimulus
from vlbias.visual import Regions, Visual

def write_store(path, ids, dim=16, seed=0):
    """A region store as the regions rule writes it, from a stand-in detector: 3 boxes per image,
    class 0 ("person") on the first box of every other image."""
    rng = np.random.default_rng(seed)
    detector = SimpleNamespace(name="toy", feature_dim=dim, class_names=["person", "thing"], attribute_names=None,
                               person_classes=frozenset({"person"}), weights="random",
                               settings={"adapter": "toy", "min_boxes": 3, "max_boxes": 3, "conf": 0.0})
    with write_region_store(path, detector, {"detector": "toy"}) as w:
        for n, image_id in enumerate(ids):
            cls = np.array([0 if n % 2 == 0 else 1, 1, 1])
            w.add([(image_id, Regions(boxes=np.array([[0, 0, 10, 10], [2, 2, 8, 9], [1, 0, 5, 5]], np.float32),
                                      features=rng.standard_normal((3, dim)).astype(np.float32),
                                      class_ids=cls, class_scores=np.ones(3, np.float32), image_size=(10, 10)))])
    return path


@pytest.fixture(scope="module")
def encoders():
    return {name: build(spec) for name, spec in TINY.items()}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, encoders):
    """Both models' embedding files of one test whose store lacks one image (a failed download)."""
    root = tmp_path_factory.mktemp("embed")
    doc = stimulus_doc("toy-a")
    stimulus = load_grounded_stimulus(write_stimulus(root / "google/toy-a.yaml", doc))
    gone = "toy-a/attr2/b_y1.jpg"
    store = write_store(root / "store.h5", [i for i in image_ids(doc) if i != gone])
    manifest = [{"test": "toy-a", "role": "attr2", "file": "b_y1.jpg", "status": "failed", "reason": "HTTP 404"}]
    out = {}
    for name, encoder in encoders.items():
        with RegionStore(store) as s:
            dropped = embed_tests([stimulus], encoder, s, root / f"{name}.h5", ["W", "S", "C"],
                                  {"T": ["S"], "I": ["S"]}, attrs={"dataset": "google", "model": name, "column": name,
                                                                   "detector": "toy"},
                                  manifest_rows=manifest)
        out[name] = (root / f"{name}.h5", dropped)
    return stimulus, store, out


def test_combos_follow_the_config_and_image_masking_support():
    combos, na = embedding_combos(["W", "S"], {"T": ["S", "C"], "I": ["S"]}, supports_image_masking=False)
    assert combos == [("W", None), ("S", None), ("S", "T")] and na == [("S", "I")]
    assert embedding_combos(["S"], {"I": ["S"]}, True) == ([("S", None), ("S", "I")], [])


def test_embedding_file_layout_counts_and_dropped_pairs(embedded):
    stimulus, _, out = embedded
    path, dropped = out["lxmert"]
    with h5py.File(path) as root:
        assert list(root) == ["toy-a"] and root["toy-a"].attrs["stimulus_sha256"]
        f = root["toy-a"]
        assert sorted((lv, m) for lv in f for m in f[lv]) == [("C", "none"), ("S", "I"), ("S", "T"), ("S", "none"),
                                                              ("W", "none")]
        assert f["S/none/X/embeddings"].shape == (2, 32) and f["S/none/X/embeddings"].dtype == np.float32
        # the failed image drops its pair everywhere; the caption without a test word at C and T only
        assert {(lv, m, f[f"{lv}/{m}/B_y"].attrs["n"]) for lv in f for m in f[lv]} == {
            ("W", "none", 1), ("S", "none", 1), ("S", "T", 1), ("S", "I", 1), ("C", "none", 1)}
        assert f["S/none/A_x"].attrs["n"] == 2 and f["S/T/A_x"].attrs["n"] == 1 and f["C/none/A_x"].attrs["n"] == 1
        assert f["S/T/A_x"].attrs["n_listed"] == 2 and f["S/T/A_x"].attrs["n_dropped"] == 1
        assert [w.decode() for w in f["C/none/X/word"][()]] == ["John", "Paul"]
        assert root.attrs["detector"] == "toy" and json.loads(root.attrs["info"])["weights"] == "random-init"
    assert {d["test"] for d in dropped} == {"toy-a"}
    reasons = {(d["level"], d["mask"], d["role"], d["caption"]): d["reason"] for d in dropped}
    assert reasons[("S", "none", "B_y", "This is home.")] == "not obtained: HTTP 404"
    assert reasons[("C", "none", "A_x", "A building.")] == "the caption contains none of the test's contextual words"
    assert reasons[("S", "T", "A_y", "A building.")] == "the caption contains none of the test's mask terms"
    assert len(dropped) == 5 + 2 + 2  # the failed image at 5 (level, mask) pairs; the caption at C, T (A_x, A_y)


def test_embeddings_are_the_encoders_own(embedded, encoders):
    """Each stored vector is what the encoder gives for its caption and its image's regions; C at the
    first contextual word, T with the test's mask terms, I with person regions masked."""
    stimulus, store, out = embedded
    enc = encoders["lxmert"]
    with RegionStore(store) as s, h5py.File(out["lxmert"][0]) as root:
        f = root["toy-a"]

        def visual(i):
            regions, person = s.get(i)
            return Visual(regions.features, s.boxes_norm(i), person)
        for lv, mask, role in [("C", "none", "X"), ("S", "T", "A_x"), ("S", "I", "Y"), ("W", "none", "B_x")]:
            g = f[f"{lv}/{mask}/{role}"]
            caps = [c.decode() for c in g["caption"][()]]
            vis = [visual(i.decode()) for i in g["image"][()]]
            kw = {"words": [w.decode() for w in g["word"][()]]} if lv == "C" else {}
            if mask == "T":
                kw |= {"mask": "T", "mask_terms": stimulus.levels["sentence"]["mask"]["tokens"]}
            if mask == "I":
                kw |= {"mask": "I"}
            np.testing.assert_allclose(g["embeddings"][()], enc.embed(caps, vis, lv, **kw), atol=1e-5)
        # image masking changed the images with a person region and nothing else
        s_none, s_i = f["S/none/Y/embeddings"][()], f["S/I/Y/embeddings"][()]
        person = [visual(i.decode()).is_person.any() for i in f["S/I/Y/image"][()]]
        assert [not np.allclose(a, b) for a, b in zip(s_none, s_i)] == person and any(person)


def test_visualbert_has_no_image_masked_embeddings(embedded):
    path, dropped = embedded[2]["visualbert"]
    with h5py.File(path) as f:
        assert "I" not in f["toy-a/S"] and json.loads(f["toy-a"].attrs["not_applicable"]) == ["S/I"]


def test_a_coco_test_reads_its_acquisition_ids_and_a_missing_level_is_listed(tmp_path, encoders):
    doc = stimulus_doc("toy-c", "coco", levels=("sentence",))
    stimulus = load_grounded_stimulus(write_stimulus(tmp_path / "coco/toy-c.yaml", doc))
    assert stimulus.image_ids()[0] == "toy-c/A_x/a_x0.jpg"  # <test>/<image set>/<file>, as its manifest
    with RegionStore(write_store(tmp_path / "store.h5", image_ids(doc))) as store:
        dropped = embed_tests([stimulus], encoders["visualbert"], store, tmp_path / "e.h5", ["W", "S"], {})
    with h5py.File(tmp_path / "e.h5") as f:
        assert list(f["toy-c"]) == ["S"] and [f[f"toy-c/S/none/{r}"].attrs["n"] for r in ROLES] == [2] * 6
    assert dropped == [{"test": "toy-c", "level": "W", "mask": "none", "role": "", "caption": "", "image": "",
                        "reason": "the stimulus has no word-level captions"}]


def test_experiments_on_an_embedding_file(embedded):
    path = embedded[2]["lxmert"][0]
    rows = run_experiments(path, n_samples=50, seed=3, exact="auto")
    got = [(r["experiment"], r["level"], r["mask"]) for r in rows]
    assert got == [("1", "W", "none"), ("2", "W", "none"), ("3", "W", "none"), ("1", "S", "none"),
                   ("2", "S", "none"), ("3", "S", "none"), ("3-masked", "S", "I"), ("3-masked", "S", "T"),
                   ("1", "C", "none"), ("2", "C", "none"), ("3", "C", "none")]
    assert all(r["status"] == "ok" and 0 < r["p"] <= 1 for r in rows)
    s = next(r for r in rows if r["experiment"] == "2" and r["level"] == "S")
    assert (s["n_x"], s["n_b_y"], s["exact"], s["seed"], s["model"], s["detector"]) == (2, 1, True, 3, "lxmert", "toy")
    assert (s["dataset"], s["column"], s["protocol"]) == ("google", "lxmert", "")  # no protocol attribute written
    assert (s["test"], s["name"]) == ("toy-a", "Toy toy-a")
    sets, _, _ = read_embeddings(path)
    from vlbias.stats.grounded import experiment2, experiment3
    ref = experiment2(*(sets["toy-a"][("S", "none")][r] for r in ROLES), n_samples=50, seed=3)
    assert (s["d"], s["p"]) == (ref.effect_size, ref.p)
    e3 = next(r for r in rows if r["experiment"] == "3" and r["level"] == "S")
    ref3 = experiment3(*(sets["toy-a"][("S", "none")][r] for r in ROLES), n_samples=50, seed=3)
    halves = ref3.parts["X"], ref3.parts["Y"]
    assert halves[0]["effect_size"] != halves[1]["effect_size"]  # so a swap of the halves shows
    assert (e3["d"], e3["p"], e3["d_x"], e3["d_y"], e3["p_x"], e3["p_y"]) == (
        ref3.effect_size, ref3.p, *(h["effect_size"] for h in halves), *(h["p"] for h in halves))


def test_masked_statistic_switch_changes_only_the_masked_rows(embedded):
    """Switch masked_statistic (docs/grounded.md row 4): "1" runs experiment 1's test on the masked
    embeddings, as the authors' code; every other row stays the same."""
    from vlbias.stats.grounded import experiment1

    path = embedded[2]["lxmert"][0]
    paper = run_experiments(path, n_samples=50, seed=3, exact="auto")
    authors = run_experiments(path, n_samples=50, seed=3, exact="auto", masked_statistic="1")
    sets, _, _ = read_embeddings(path)
    for a, b in zip(paper, authors):
        if a["experiment"] != "3-masked":
            assert a == b
            continue
        assert (a["masked_statistic"], b["masked_statistic"]) == ("2", "1")
        ref = experiment1(*(sets[b["test"]][("S", b["mask"])][r] for r in ROLES), n_samples=50, seed=3)
        assert (b["d"], b["p"]) == (ref.effect_size, ref.p) and b["d"] != a["d"]


# --- the paper's tables on hand-made rows ---------------------------------------------------------

def row(test, model, experiment, level, mask="none", d=0.5, p=0.01, status="ok", dataset="google"):
    return {"dataset": dataset, "test": test, "name": f"Test {test}", "model": model, "experiment": experiment,
            "level": level, "mask": mask, "status": status, "d": d, "p": p}


COLUMNS = [{"label": "VisualBERT", "model": "vb", "dataset": "google"},
           {"label": "ViLBERT", "model": None, "dataset": "google"},
           {"label": "LXMERT", "model": "lx", "dataset": "google"},
           {"label": "VL-BERT", "model": None, "dataset": "google"}]
SPEC = {"columns": COLUMNS, "groups": {"Gender": ["g1", "g2"], "Race": ["r1"]}, "levels": ["W", "S"],
        "masks": ["T", "I"], "level": "S", "experiments": ["1", "2", "3-masked"], "alpha": 0.05}
ROWS = ([row(t, m, e, lv, d=0.1 * i, p=0.01 if i % 2 else 0.2)
         for i, (t, m, e, lv) in enumerate((t, m, e, lv) for t in ("g1", "g2", "r1") for m in ("vb", "lx")
                                           for e in ("1", "2") for lv in ("W", "S"))]
        + [row(t, "vb", "3-masked", "S", "T", d=-0.3, p=0.04) for t in ("g1", "g2", "r1")]
        + [row(t, "lx", "3-masked", "S", m, d=0.7, p=0.5) for t in ("g1", "g2", "r1") for m in ("T", "I")]
        + [row("r1", "vb", "1", "C", status="skipped: no pairs left in A_x")])


def test_table3_layout_marks_and_empty_columns():
    layout = paper_table({**SPEC, "table": "table3"}, ROWS)
    df = to_frame(layout)
    assert list(df.columns[:3]) == ["group", "test", "level"]
    assert [tuple(r) for r in df[["group", "test", "level"]].values] == [
        ("Gender", "Test g1", "W"), ("Gender", "Test g1", "S"), ("Gender", "Test g2", "W"), ("Gender", "Test g2", "S"),
        ("Race", "Test r1", "W"), ("Race", "Test r1", "S")]
    # experiment 1 rows only: g1/vb/W is i=0 (d 0, p 0.2), g1/vb/S is i=1 (d 0.1, p 0.01)
    assert df.loc[0, "VisualBERT d"] == 0 and not df.loc[0, "VisualBERT p<0.05"]
    assert df.loc[1, "VisualBERT d"] == 0.1 and df.loc[1, "VisualBERT p<0.05"]
    assert (df["ViLBERT d"] == "").all() and (df["VL-BERT p"] == "").all()
    # the stars: Holm within the column's Gender tests at S (g1 0.01, g2 0.01 → 0.02 each; not r1, a Race test)
    assert df.loc[1, "VisualBERT p Holm"] == pytest.approx(0.02) and df.loc[0, "VisualBERT p Holm"] == 0.4
    md = to_markdown(layout)
    assert "| Gender | Test g1 | S | 0.10* (0.010) |  | " in md
    assert "| Gender | Test g1 | W | 0.00 (0.200) |  | " in md
    assert "*, **, ***: p < .05, .01, .001, Holm-adjusted over one column's tests of one group at one level" in md
    tex = to_latex(layout)
    assert r"0.10* (0.010)" in tex and r"\textbf" not in tex and r"\begin{tabular}{lllrrrr}" in tex


def test_table5_shows_a_dash_where_image_masking_does_not_apply():
    df = to_frame(paper_table({**SPEC, "table": "table5"}, ROWS))
    i_rows = df[df["mask"] == "I"]
    assert (i_rows["VisualBERT d"] == NA).all() and (i_rows["LXMERT d"] == 0.7).all()
    t_rows = df[df["mask"] == "T"]
    assert (t_rows["VisualBERT d"] == -0.3).all() and t_rows["VisualBERT p<0.05"].all()
    assert not t_rows["LXMERT p<0.05"].any() and (df["ViLBERT d"] == "").all()


def test_table6_blocks_and_a_skipped_test():
    spec = {**SPEC, "table": "table6", "levels": ["W", "S", "C"], "groups": {"Gender": ["r1"]}}
    layout = paper_table(spec, ROWS)
    df = to_frame(layout)
    assert list(df["level"]) == ["W", "S", "C"] and list(df["mask"]) == ["T", "I", ""]
    assert df.loc[2, "Experiment 1 VisualBERT d"] == "skipped"
    assert df.loc[2, "Experiment 2 VisualBERT d"] == NA  # no C row for experiment 2: does not apply
    assert df.loc[0, "Experiment 3 (masking) VisualBERT d"] == -0.3
    assert df.loc[1, "Experiment 3 (masking) VisualBERT d"] == NA
    assert df.loc[2, "Experiment 3 (masking) LXMERT d"] == ""  # no third mask row
    assert r"\multicolumn{4}{c}{Experiment 1}" in to_latex(layout)


def test_table7_counts_significant_tests_per_group():
    df = to_frame(paper_table({**SPEC, "table": "table7"}, ROWS))
    by = df.set_index(["group", "level", "mask"])
    # experiment 1, W: i even for every test and model -> p 0.2 -> none significant; S: all significant
    assert by.loc[("Gender", "W", "T"), "Experiment 1 VisualBERT significant"] == 0
    assert by.loc[("Gender", "S", "I"), "Experiment 1 VisualBERT significant"] == 2
    assert by.loc[("Gender", "S", "I"), "Experiment 1 VisualBERT tests"] == 2
    assert by.loc[("Race", "W", "T"), "Experiment 3 (masking) VisualBERT significant"] == 1
    assert by.loc[("Race", "S", "I"), "Experiment 3 (masking) VisualBERT significant"] == NA
    assert by.loc[("Race", "S", "I"), "Experiment 3 (masking) LXMERT significant"] == 0
    assert (df["Experiment 2 ViLBERT significant"] == "").all()
    assert "| Race | 1 | W | T | 0 |" in to_markdown(paper_table({**SPEC, "table": "table7"}, ROWS))


def test_extended_columns_show_no_printed_numbers_and_a_dual_encoder_says_n_a():
    columns = COLUMNS + [{"label": "BLIP", "model": "bl", "dataset": "google", "extended": True},
                         {"label": "CLIP", "model": "clip", "dataset": "google", "extended": True,
                          "not_applicable": "n/a: dual encoder"}]
    rows = ROWS + [row("g1", "bl", "1", lv, d=0.9, p=0.5) for lv in ("W", "S")]
    # the paper prints a number for a column labelled BLIP: an extended column never shows it
    printed = [{"table": "table3", "half": "Gender", "test": "g1", "experiment": "1", "level": "W", "mask": "",
                "model": m, "dataset": "google", "value": v, "significant": ""}
               for m, v in (("VisualBERT", "0.57"), ("BLIP", "0.11"))]
    layout = paper_table({**SPEC, "table": "table3", "columns": columns}, rows, printed)
    df = to_frame(layout)
    assert df.loc[0, "VisualBERT paper"] == "0.57" and "BLIP paper" not in df and "CLIP paper" not in df
    assert df.loc[0, "BLIP d"] == 0.9 and (df["CLIP d"] == "n/a: dual encoder").all()
    md = to_markdown(layout)
    assert "| 0.90 (0.500) | n/a: dual encoder |" in md and "[0.11]" not in md and "[0.57]" in md
    assert "extended with BLIP, CLIP" in layout.caption and "BLIP, CLIP: models the paper did not test" in md
    assert "n/a: dual encoder: CLIP embeds images and texts apart" in md
    counts = to_frame(paper_table({**SPEC, "table": "table7", "columns": columns}, rows))
    assert (counts["Experiment 1 CLIP significant"] == "n/a: dual encoder").all()
    assert counts.loc[counts["group"] == "Gender", "Experiment 1 BLIP tests"].tolist() == [1, 1]  # g1 at W, S


# --- the real Snakefile on a tiny project ------------------------------------------------------

TABLES = ([f"results/grounded/table1.{ext}" for ext in ("csv", "md", "tex", "html")]
          + [f"results/grounded/{protocol}table{n}.{ext}" for protocol in ("", "paper/") for n in (3, 4, 5, 6, 7)
             for ext in ("csv", "md", "tex", "html")]
          + ["results/grounded/comparison.csv", "results/grounded/comparison.md"])
FIGURES = ["results/grounded/heatmap.png", "results/grounded/published.png"]
# the ML-EAT of Table 3 (the paper's models) and of the extended Table 3 (BLIP, FLAVA beside them)
MLEAT = [f"results/grounded/mleat/{target}.{ext}" for target in ("table3", "extended/table3")
         for ext in ("csv", "html", "png")]
# the extended tables (BLIP, FLAVA and a dual encoder beside the paper's models), built in the same run (Table 4,
# Table 3's layout on experiment 2, left out to save a job)
EXTENDED = [f"results/grounded/extended/table{n}.{ext}" for n in (3, 5, 6, 7) for ext in ("csv", "md", "html")]
@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from helpers.project import snakemake

    root = tmp_path_factory.mktemp("grounded_tables")
    tiny_project(root)
    snakemake(root, *TABLES, *EXTENDED, *FIGURES, *MLEAT)
    return root


@pytest.mark.workflow
def test_the_full_table_set_is_built(project):
    for target in TABLES:
        assert (project / target).stat().st_size > 0, target
    for figure in FIGURES:
        with Image.open(project / figure) as png:
            assert png.format == "PNG" and png.size[0] > 300, figure
    assert "2 beside a printed d" in (project / "results/logs/grounded_figures.log").read_text()
    t3 = pd.read_csv(project / "results/grounded/table3.csv", dtype=str, keep_default_na=False)
    assert list(t3["test"]) == ["Toy toy-a"] * 3 + ["Toy toy-b"] * 3 and list(t3["level"]) == ["W", "S", "C"] * 2
    for column in ("VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"):  # all four of the paper's models
        assert all(v not in ("", NA) for v in t3[f"{column} d"]), column
    page = (project / "results/grounded/table3.html").read_text()  # the report's page: the paper's layout
    assert "<caption>Experiment 1 on Google Images" in page and '<th colspan="4">' not in page
    assert page.count("<tr>") == 1 + 6 and "<td>Toy toy-a</td>" in page
    t5 = pd.read_csv(project / "results/grounded/table5.csv", dtype=str, keep_default_na=False)
    assert list(t5.loc[t5["mask"] == "I", "VisualBERT d"]) == [NA, NA]
    for column in ("ViLBERT", "LXMERT", "VL-BERT"):  # pre-trained with masked regions: T and I
        assert all(v not in ("", NA) for v in t5[f"{column} d"]), column
    t6 = pd.read_csv(project / "results/grounded/table6.csv", dtype=str, keep_default_na=False)
    assert t6.loc[0, "Experiment 1 VisualBERT d"] not in ("", NA) and t6.loc[0, "Experiment 1 ViLBERT d"] == ""
    assert t6.loc[0, "Experiment 1 VL-BERT d"] not in ("", NA)
    rows = pd.read_csv(project / "results/grounded/table3.rows.csv")
    assert {"model_id", "revision", "detector", "n_x", "n_b_y", "n_samples", "exact", "seed", "p_se"} <= set(rows)
    assert rows.loc[(rows["test"] == "toy-b") & (rows["level"] == "S"), "n_b_y"].unique().tolist() == [1]
    missing = pd.read_csv(project / "results/grounded/table3.missing.tsv", sep="\t", dtype=str)
    gone = missing[missing["image"] == "toy-b/attr2/b_y1.jpg"]
    assert set(gone["model"]) == {"visualbert-authors", "vilbert", "lxmert", "vlbert"}
    assert gone["reason"].str.startswith("not obtained").all()
    with h5py.File(project / "results/embeddings/grounded/authors/google/lxmert.h5") as f:
        assert f.attrs["detector"] == "frcnn-tiny" and len(f.attrs["region_store_sha256"]) == 64
        assert sorted(f) == ["toy-a", "toy-b"] and f.attrs["protocol"] == "authors"
        assert json.loads(f.attrs["switches"])["token_mask"] == "word"


@pytest.mark.workflow
@pytest.mark.parametrize("target, columns", [("table3", ["VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"]),
                                             ("extended/table3", ["BLIP", "FLAVA"])])
def test_a_tables_mleat_is_experiment_1s_sets_at_each_level(project, target, columns):
    """results/grounded/mleat/<target>.*: per (test, level, model) mleat() of X, Y and the attributes
    pooled over both image categories of the embedding file, so Level 1 is experiment 1's d and p."""
    out = pd.read_csv(project / f"results/grounded/mleat/{target}.csv", keep_default_na=False, na_values=[""])
    assert {"protocol", "dataset", "test", "model", "level", *MLEAT_ROW.computed, "model_id", "detector"} <= set(out)
    assert set(out["model"]) >= set(columns) and set(out["level"]) == {"W", "S", "C"}
    experiments = pd.concat([pd.read_csv(p, dtype={"experiment": str})
                             for p in (project / "results/grounded/experiments/authors/google").glob("*.csv")])
    one = experiments[experiments["experiment"] == "1"].set_index(["column", "test", "level"])
    names = {"VisualBERT": "visualbert-authors", "ViLBERT": "vilbert", "LXMERT": "lxmert", "VL-BERT": "vlbert",
             "BLIP": "blip", "FLAVA": "flava"}
    checked = 0
    for r in out[out["model"].isin(columns)].itertuples():
        dataset, test, level = r.test.split("/")
        sets, _, _ = read_embeddings(project / f"results/embeddings/grounded/authors/{dataset}/{names[r.model]}.h5")
        emb = sets[test][(level, NO_MASK)]
        X, Y, A, B = emb["X"], emb["Y"], np.concatenate([emb["A_x"], emb["A_y"]]), np.concatenate([emb["B_x"], emb["B_y"]])
        expected = mleat(X, Y, A, B, n_samples=200, seed=0, alpha=0.05, null="normal", saturation=0.9).row()
        for column in ("pattern", "n_x", "n_a", "n_b", "l1_d", "l1_p", "l2x_d", "l2x_p", "l2y_d", "l2y_p",
                       "l3_xa_mean", "l3_yb_std", "cosine_uninformative"):
            want = expected[column]
            assert (getattr(r, column) == pytest.approx(want, rel=1e-12, nan_ok=True) if isinstance(want, float)
                    else str(getattr(r, column)) == str(want)), (r.test, r.model, column)
        if r.model in one.index.get_level_values(0):  # Level 1 is experiment 1 of the table's rows: the same p;
            # d to rounding (experiment 1 takes X's and Y's s-values in two products, the ML-EAT in one)
            printed = one.loc[(r.model, test, level)]
            assert r.l1_p == printed["p"] and r.l1_d == pytest.approx(printed["d"], rel=1e-6)
        with Image.open(map_path(project / f"results/grounded/mleat/{target}", r.test, r.model)) as png:
            assert png.format == "PNG"
        checked += 1
    assert checked == len(columns) * 2 * 3  # two tests, three levels
    # the paper's table keeps its own columns: none of the ML-EAT's
    assert not set(MLEAT_ROW.computed) & set(read_table(project, "table3.csv"))


@pytest.mark.workflow
def test_the_extended_tables_put_blip_beside_the_paper_models(project):
    paper, extended = read_table(project, "table3.csv"), read_table(project, "extended/table3.csv")
    assert not any(c.startswith(("BLIP", "FLAVA", "CLIP")) for c in paper)  # never mixed into the paper's tables
    for column in ("VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"):  # the same results, the printed numbers beside
        assert extended[f"{column} d"].tolist() == paper[f"{column} d"].tolist()
        assert extended[f"{column} paper"].tolist() == paper[f"{column} paper"].tolist()
    assert all(v not in ("", NA) for v in extended["BLIP d"]) and "BLIP paper" not in extended
    assert (extended["CLIP d"] == "n/a: dual encoder").all()
    t5 = read_table(project, "extended/table5.csv")
    assert all(v not in ("", NA) for v in t5["BLIP d"])  # T, and I as the pixel fill
    t6, t7 = read_table(project, "extended/table6.csv"), read_table(project, "extended/table7.csv")
    assert t6.loc[0, "Experiment 3 (masking) BLIP d"] not in ("", NA) and t7["Experiment 1 BLIP tests"].ne("").all()
    page = (project / "results/grounded/extended/table3.html").read_text()
    assert "extended with BLIP, FLAVA, ViLT, BridgeTower, CLIP" in page and "n/a: dual encoder" in page
    # mask I painted the boxes of the regions labelled person (the authors' image_mask: labels): exactly the
    # pairs whose image has one changed (the random toy detector may label none: tests/models/test_blip.py shows the fill)
    from vlbias.visual import visual_from_store

    with h5py.File(project / "results/embeddings/grounded/authors/google/blip.h5") as f, \
            RegionStore(project / "results/regions/google/frcnn-tiny.h5") as store:
        assert json.loads(f.attrs["info"])["image_masking"].startswith("pixel fill")
        changed, person = [], []
        for test in ("toy-a", "toy-b"):
            for role in ROLES:
                none, masked = f[f"{test}/S/none/{role}/embeddings"][()], f[f"{test}/S/I/{role}/embeddings"][()]
                changed += [not np.allclose(a, b, atol=1e-6) for a, b in zip(none, masked)]
                person += [visual_from_store(store, i.decode(), ("person",)).is_person.any()
                           for i in f[f"{test}/S/I/{role}/image"][()]]
        assert changed == person


@pytest.mark.workflow
def test_the_extended_tables_have_a_flava_column(project):
    for name in ("table3", "table5"):  # table5: T, and I as the pixel fill
        table = read_table(project, f"extended/{name}.csv")
        assert all(v not in ("", NA) for v in table["FLAVA d"]) and "FLAVA paper" not in table, name
    t6, t7 = read_table(project, "extended/table6.csv"), read_table(project, "extended/table7.csv")
    assert t6.loc[0, "Experiment 3 (masking) FLAVA d"] not in ("", NA) and t7["Experiment 1 FLAVA tests"].ne("").all()
    missing = pd.read_csv(project / "results/grounded/extended/table3.missing.tsv", sep="\t", dtype=str)
    assert "not obtained" in set(missing.loc[missing["model"] == "flava", "reason"].str[:12])
    with h5py.File(project / "results/embeddings/grounded/authors/google/flava.h5") as f:
        info = json.loads(f.attrs["info"])
        assert info["output"].startswith("multimodal encoder states; W/S: the multimodal [CLS] (index 0)")
        assert "mean colour" in info["image_masking"] and info["token_mask"] == "word"  # the authors' protocol


@pytest.mark.workflow
@pytest.mark.parametrize("model,column,architecture", [("vilt", "ViLT", "ViltForMaskedLM"),
                                                       ("bridgetower", "BridgeTower", "BridgeTowerForMaskedLM")])
def test_the_extended_tables_have_pixel_mlm_columns(project, model, column, architecture):
    for name in ("table3", "table5"):  # table5: T (the authors' one [MASK] per word), and I as the pixel fill
        table = read_table(project, f"extended/{name}.csv")
        assert all(v not in ("", NA) for v in table[f"{column} d"]), name
    assert read_table(project, "extended/table7.csv")[f"Experiment 1 {column} tests"].ne("").all()
    with h5py.File(project / f"results/embeddings/grounded/authors/google/{model}.h5") as f:
        info = json.loads(f.attrs["info"])
        assert info["architecture"] == architecture and "W/S" in info["output"]
        assert "mean colour" in info["image_masking"] and info["token_mask"] == "word"  # the authors' protocol


def read_table(project, name):
    return pd.read_csv(project / f"results/grounded/{name}", dtype=str, keep_default_na=False)


@pytest.mark.workflow
def test_each_protocol_builds_its_tables_the_way_its_switches_say(project):
    """`authors` (results/grounded/table*) and `paper` (results/grounded/paper/table*) from one run:
    each switch acts where it should (docs/grounded.md)."""
    authors, paper = read_table(project, "table5.rows.csv"), read_table(project, "paper/table5.rows.csv")
    # row 1: the VisualBERT column is the authors' entry (its own detector) under authors only
    assert set(authors["model"]) == {"visualbert-authors", "vilbert", "lxmert", "vlbert"}
    assert set(paper["model"]) == {"visualbert", "vilbert", "lxmert", "vlbert"}
    assert set(authors.loc[authors["model"] == "visualbert-authors", "detector"]) == {"frcnn-tiny-36"}
    assert set(paper.loc[paper["model"] == "visualbert", "detector"]) == {"frcnn-tiny"}
    # row 4: experiment 3 with masking runs experiment 1's test under authors, 2's under paper
    masked = lambda rows: set(rows.loc[rows["experiment"] == "3-masked", "masked_statistic"])  # noqa: E731
    assert masked(authors) == {"1"} and masked(paper) == {"2"}
    # rows 3 and 6 (encoder options) and 5 (the regions mask I hides) act in the embeddings: C, which none
    # of them touches, is the same vector under both protocols; S with T and W differ for LXMERT
    with h5py.File(project / "results/embeddings/grounded/authors/google/lxmert.h5") as a, \
            h5py.File(project / "results/embeddings/grounded/paper/google/lxmert.h5") as b:
        np.testing.assert_allclose(a["toy-a/C/none/X/embeddings"][()], b["toy-a/C/none/X/embeddings"][()], atol=1e-5)
        assert a["toy-a/W/none/X/embeddings"].shape[1] == 2 * b["toy-a/W/none/X/embeddings"].shape[1]  # ws_vector
        dim = b["toy-a/S/T/A_x/embeddings"].shape[1]  # the language [CLS] part of the authors' vectors
        assert not np.allclose(a["toy-a/S/T/A_x/embeddings"][:, :dim], b["toy-a/S/T/A_x/embeddings"][()])  # token_mask
    # rows 8-12: what ViLBERT and VL-BERT are fed (an end-to-end VL-BERT: VL-BERT's own feed under both)
    feed = lambda protocol, model: json.loads(h5py.File(  # noqa: E731
        project / f"results/embeddings/grounded/{protocol}/google/{model}.h5").attrs["info"])["feed"]
    assert feed("authors", "vilbert") == {"vilbert_padding": "attended", "vilbert_image_mask": "in_place"}
    assert feed("paper", "vilbert") == {"vilbert_padding": "masked", "vilbert_image_mask": "regions"}
    assert feed("authors", "vlbert") == feed("paper", "vlbert") == {
        "vlbert_image_box": "whole", "vlbert_box_padding": "masked", "vlbert_image_mask": "learned"}
    # the printed numbers beside ours, "–" where the paper prints one
    t3 = read_table(project, "table3.csv")
    assert t3.loc[(t3["test"] == "Toy toy-a") & (t3["level"] == "W"), "VisualBERT paper"].tolist() == ["0.57"]
    comparison = read_table(project, "comparison.csv")
    assert {"printed", "authors d", "authors p", "paper d", "paper p"} <= set(comparison.columns)
    cell = comparison[(comparison["table"] == "table5") & (comparison["model"] == "LXMERT")].iloc[0]
    assert cell["printed"] == "-0.12" and cell["authors d"] != "" and cell["paper d"] != cell["authors d"]


@pytest.mark.workflow
def test_second_run_does_nothing_and_a_stimulus_edit_reruns_its_jobs_only(project):
    from helpers.project import planned_jobs, snakemake

    assert planned_jobs(project, *TABLES) == {}
    path = project / "resources/stimuli/grounded/google/toy-b.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["levels"]["sentence"]["captions"]["X"][1] = "Here is Paul."
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    planned = planned_jobs(project, *TABLES)
    # one embedding and one experiment job per (protocol, model) of the dataset; every table reading them
    assert planned == {"grounded_embed": 8, "grounded_experiment": 8, "grounded_table": 10, "grounded_comparison": 1}
    # the ML-EAT: one job per embedding file the two tables read (the paper's four models, BLIP, FLAVA, ViLT,
    # BridgeTower), each table's files assembled from them
    assert planned_jobs(project, *MLEAT) == {"grounded_embed": 8, "grounded_mleat_job": 8, "grounded_mleat": 2}
    # the embedding cache: only the edited caption's pairs (X, at S and C, unmasked and T and I) are new (the
    # two jobs whose logs are read run; the tables after them are the first build's jobs again)
    snakemake(project, *(f"results/embeddings/grounded/paper/google/{model}.h5" for model in ("visualbert", "lxmert")))
    for model in ("visualbert", "lxmert"):
        log = (project / f"results/logs/grounded_embed/paper/google/{model}.log").read_text()
        done = re.search(r"pairs: (\d+)/(\d+) done .*; (\d+) from the cache", log)
        assert done and int(done[2]) - int(done[3]) == {"visualbert": 3, "lxmert": 4}[model], done


def test_the_embedding_cache_gives_the_vectors_computed_without_it(tmp_path, encoders, embedded):
    stimulus, store, out = embedded
    encoder = encoders["lxmert"]
    with RegionStore(store) as s:
        with RecordCache(tmp_path / "cache") as cache:
            embed_tests([stimulus], encoder, s, tmp_path / "first.h5", ["W", "S", "C"], {"T": ["S"], "I": ["S"]},
                        cache=cache)
            assert cache.hits == 0 and len(cache) > 0
        with RecordCache(tmp_path / "cache") as cache:
            embed_tests([stimulus], encoder, s, tmp_path / "second.h5", ["W", "S", "C"], {"T": ["S"], "I": ["S"]},
                        cache=cache)
            assert cache.misses == 0 and cache.hits == len(cache)
    first, _, _ = read_embeddings(tmp_path / "first.h5")
    second, _, _ = read_embeddings(tmp_path / "second.h5")
    uncached, _, _ = read_embeddings(out["lxmert"][0])
    for key, roles in uncached["toy-a"].items():
        for role, vectors in roles.items():
            np.testing.assert_array_equal(second["toy-a"][key][role], first["toy-a"][key][role])
            np.testing.assert_allclose(first["toy-a"][key][role], vectors, atol=1e-5)  # other batches: float noise


def test_image_mask_switch_changes_only_the_image_masked_embeddings(tmp_path, encoders, embedded):
    """Switch image_mask (docs/grounded.md row 5): with `labels` mask I hides the regions labelled one of
    the test's mask.region_labels (or the model's own list); nothing but the I embeddings changes."""
    stimulus, store, out = embedded
    encoder = encoders["lxmert"]
    with RegionStore(store) as s:
        # the toy store labels regions "person" or "thing"; the toy test's region_labels are ["person"]
        embed_tests([stimulus], encoder, s, tmp_path / "labels.h5", ["W", "S", "C"], {"T": ["S"], "I": ["S"]},
                    image_mask="labels")
        embed_tests([stimulus], encoder, s, tmp_path / "things.h5", ["W", "S", "C"], {"T": ["S"], "I": ["S"]},
                    image_mask="labels", mask_labels=["thing"])
        with pytest.raises(InputError, match="image_mask 'people'"):
            embed_tests([stimulus], encoder, s, tmp_path / "x.h5", ["S"], {"I": ["S"]}, image_mask="people")
    persons, _, _ = read_embeddings(out["lxmert"][0])
    labels, _, _ = read_embeddings(tmp_path / "labels.h5")
    things, _, _ = read_embeddings(tmp_path / "things.h5")
    for key in persons["toy-a"]:
        for role in ROLES:
            same = np.allclose(persons["toy-a"][key][role], labels["toy-a"][key][role], atol=1e-5)
            assert same  # "person" is the person class here: the same regions masked
            changed = not np.allclose(persons["toy-a"][key][role], things["toy-a"][key][role], atol=1e-5)
            assert changed == (key[1] == "I"), (key, role)
