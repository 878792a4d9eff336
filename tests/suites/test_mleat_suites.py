"""The ML-EAT wired into the suites (docs/mleat.md): a test on a model's store (vlbias.associate), the
grounded tests of an embedding file, a table's ML-EAT files (vlbias.report.mleat.write_mleat) and its
settings. The workflow runs them in tests/workflow/test_workflow.py (iEAT, SEAT) and tests/workflow/test_grounded_pipeline.py."""


from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from helpers.grounded import write_grounded

from vlbias.associate import run_mleat, run_mleats, run_test, run_tests, table_level1, write_rows
from vlbias.io.store import write_embeddings
from vlbias.io.stimuli import Stimulus, StimulusSet
from vlbias.report.mleat import adjusted, map_path, mleat_frame, write_mleat
from vlbias.stats.mleat import mleat
from vlbias.stats.row import MLEAT
from vlbias.suites.grounded.jobs import read_mleat_results, write_mleat_results
from vlbias.suites.grounded.jobs import run_mleat as grounded_mleat
from vlbias.suites.plan import mleat_params

SETTINGS = {"n_samples": 500, "seed": 0, "exact": "auto", "alpha": 0.05, "null": "normal", "saturation": 0.9}
RNG = np.random.default_rng(3)
# a cross-modal test: image targets, text attributes (the sweep's kind), each set its own store key
VECTORS = {"img/flower": RNG.normal(size=(6, 8)) + 1, "img/insect": RNG.normal(size=(5, 8)) - 1,
           "txt/A": RNG.normal(size=(4, 8)) + 1, "txt/B": RNG.normal(size=(4, 8)) - 1}


def stimulus(y_key="img/insect", test="flower-insect"):
    sets = {"X": StimulusSet("img/flower", "Flower", category="flower"),
            "Y": StimulusSet(y_key, "Insect", category="insect"),
            "A": StimulusSet("txt/A", "Pleasant", items=("joy", "love")),
            "B": StimulusSet("txt/B", "Unpleasant", items=("pain", "hate"))}
    return Stimulus(test, test.title(), "ieat", "cross-modal", None, **sets, path=f"{test}.yaml")


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store.h5"
    sets = {k: (v, [f"{k}{i}" for i in range(len(v))]) for k, v in VECTORS.items()}
    sets["img/none"] = (np.zeros((0, 8)), [])
    write_embeddings(path, sets, {"model_id": "toy/clip", "revision": "r1"})
    return path


def test_a_test_on_a_store_is_mleat_of_its_sets_and_level1_is_the_tables_row(store):
    row, result = run_mleat(stimulus(), store, "clip", **SETTINGS)
    expected = mleat(*(VECTORS[k] for k in ("img/flower", "img/insect", "txt/A", "txt/B")), **SETTINGS)
    assert result == expected
    assert {k: row[k] for k in MLEAT.computed} == pytest.approx(expected.row(), nan_ok=True)
    assert (row["test"], row["model"], row["X"], row["A"]) == ("flower-insect", "clip", "Flower", "Pleasant")
    assert (row["n_x"], row["n_y"], row["n_a"], row["n_b"]) == (6, 5, 4, 4)
    assert (row["model_id"], row["revision"]) == ("toy/clip", "r1")
    table = run_test(stimulus(), store, "clip", n_samples=500, seed=0)
    assert (row["l1_d"], row["l1_p"], row["l1_p_se"]) == (table["d"], table["p"], table["p_se"])


def test_a_set_with_no_stimuli_is_a_skipped_row_without_a_result(store):
    row, result = run_mleat(stimulus("img/none", "gone"), store, "clip", **SETTINGS)
    assert result is None and row["status"] == "skipped: no stimuli left in Y (img/none)" and row["n_y"] == 0
    found = run_mleats([stimulus(), stimulus("img/none", "gone")], {"clip": store, "again": store}, **SETTINGS)
    assert [(r["test"], r["model"]) for r, _ in found] == [("flower-insect", "clip"), ("flower-insect", "again"),
                                                            ("gone", "clip"), ("gone", "again")]


def test_the_tables_rows_are_the_mleats_level1_bit_for_bit_and_it_is_not_computed_again(store, tmp_path, monkeypatch):
    """The table job's rows file (write_rows: d, p, interval at full precision) gives the ML-EAT job of the
    same tests, models and settings its Level 1: the rows and results are mleat()'s exactly, and the job
    runs neither Level 1's permutation test nor its bootstrap. Rows of other settings give none."""
    import vlbias.stats.mleat as stats_mleat

    ci = {"level": 0.95, "n_boot": 200, "seed": 1, "method": "bca"}
    stats = {"n_samples": 300, "seed": 2, "exact": False}  # sampled: Level 1 has a seed and a p_se
    settings = {**SETTINGS, **stats, "ci": ci}
    forward = stimulus()
    reverse = replace(forward, id="insect-flower", X=forward.Y, Y=forward.X)  # d < 0: p_normal is 1 - p_parametric
    tests = [forward, reverse, stimulus("img/none", "gone")]
    write_rows(run_tests(tests, {"clip": store}, ci=ci, **stats), tmp_path / "t.rows.json", ci=ci, **stats)
    fresh = [mleat(*(VECTORS[s.sets[k].key] for k in ("X", "Y", "A", "B")), **settings) for s in tests[:2]]
    calls = []
    for name in ("permutation_test_sw", "effect_size_ci_cos"):
        monkeypatch.setattr(stats_mleat, name, lambda *a, name=name, **k: calls.append(name))
    computed = table_level1(tmp_path / "t.rows.json", ci=ci, **stats)
    assert list(computed) == [("flower-insect", "clip"), ("insect-flower", "clip")]  # not the skipped test
    found = run_mleats(tests, {"clip": store}, computed, **settings)
    assert calls == []
    for (row, result), want in zip(found, fresh):
        np.testing.assert_equal({k: row[k] for k in MLEAT.computed}, want.row())
        np.testing.assert_equal(result.asdict(), want.asdict())
    assert found[2][1] is None
    for other in ({**stats, "seed": 3}, {**stats, "exact": "auto"}, {"ci": {**ci, "n_boot": 100}}):
        assert table_level1(tmp_path / "t.rows.json", **{"ci": ci, **stats, **other}) == {}


def test_a_tables_files(store, tmp_path):
    found = run_mleats([stimulus(), stimulus("img/none", "gone")], {"clip": store}, **SETTINGS)
    out = tmp_path / "mleat"
    df = write_mleat(found, csv=out / "t.csv", page=out / "t.html", summary=out / "t.png", maps=out / "t",
                     title="ML-EAT of iEAT t", caption="Toy <table> & co")
    written = pd.read_csv(out / "t.csv")
    assert list(written.columns) == ["test", "name", "family", "model", "X", "Y", "A", "B", *MLEAT.computed,
                                     "model_id", "revision", "weights", "l1_p_holm", "l2x_p_holm", "l2y_p_holm"]
    assert written.loc[0, "l1_p_holm"] == written.loc[0, "l1_p"]  # one test on the model: its own p
    assert list(written["test"]) == ["flower-insect", "gone"] and list(df["test"]) == list(written["test"])
    assert written.loc[0, "l2x_d"] == found[0][1].level2["X"].d and pd.isna(written.loc[1, "pattern"])
    # a map per result, none for the skipped test
    assert sorted(p.relative_to(out / "t").as_posix() for p in (out / "t").rglob("*.png")) == ["flower-insect/clip.png"]
    with Image.open(out / "t.png") as png:
        assert png.format == "PNG"
    page = (out / "t.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 1  # the summary, inside the page
    assert '<a href="t/flower-insect/clip.png">Flower-Insect on clip</a>' in page  # the map, beside it
    assert "Toy &lt;table&gt; &amp; co" in page and "<table>" not in page.split("<body>")[1].split('<table class')[0]
    assert f"clip</a>: {found[0][1].pattern}</li>" in page


def test_each_map_is_starred_by_its_rows_adjusted_p(store, tmp_path, monkeypatch):
    """A table's EAT-Maps star the Holm-adjusted p of their own row in the table (two tests
    on one model: each Level 1 p doubled, at most 1), not the raw p."""
    import vlbias.report.mleat as report

    drawn = []
    monkeypatch.setattr(report, "draw_maps", lambda maps, workers: drawn.extend(maps))
    found = run_mleats([stimulus(), stimulus(test="again")], {"clip": store}, **SETTINGS)
    out = tmp_path / "mleat"
    df = write_mleat(found, csv=out / "t.csv", page=out / "t.html", summary=out / "t.png", maps=out / "t",
                     title="t", caption="c")
    assert [m[4]["l1_p_holm"] for m in drawn] == list(df["l1_p_holm"]) == [min(1, 2 * df["l1_p"][0])] * 2


def test_map_paths_are_one_folder_per_test_whatever_the_names():
    assert map_path("m", "google/toy-a/W", "VL-BERT").as_posix() == "m/google_toy-a_W/VL-BERT.png"
    assert map_path("m", "../up", "a b").as_posix() == "m/_up/a_b.png"


def test_grounded_mleat_pools_the_attributes_over_both_image_categories(tmp_path):
    rng = np.random.default_rng(0)
    sets = {r: rng.normal(size=(n, 6)) + shift for r, n, shift in
            [("X", 4, 1), ("Y", 4, -1), ("A_x", 3, 1), ("A_y", 2, 0.5), ("B_x", 2, -0.5), ("B_y", 3, -1)]}
    path = write_grounded(tmp_path / "e.h5", sets)
    [(row, result)] = grounded_mleat(path, ["toy"], ["W", "S", "C"], **SETTINGS)
    A, B = np.concatenate([sets["A_x"], sets["A_y"]]), np.concatenate([sets["B_x"], sets["B_y"]])
    assert result == mleat(sets["X"], sets["Y"], A, B, **SETTINGS)
    assert (row["test"], row["model"], row["level"], row["dataset"]) == ("google/toy/S", "LXMERT", "S", "google")
    assert (row["n_a"], row["n_b"], row["detector"]) == (5, 5, "frcnn")
    assert grounded_mleat(path, ["toy"], ["W"], **SETTINGS) == []  # only the levels asked for
    assert grounded_mleat(path, ["other"], None, **SETTINGS) == []  # only the table's tests


def test_grounded_mleat_of_an_emptied_set_says_so(tmp_path):
    sets = {r: np.ones((2, 3)) * (i + 1) + np.eye(2, 3) for i, r in enumerate(("X", "Y", "A_x", "A_y", "B_x"))}
    sets["B_y"] = np.zeros((0, 3))
    [(row, result)] = grounded_mleat(write_grounded(tmp_path / "e.h5", sets), None, None, **SETTINGS)
    assert result is None and row["status"] == "skipped: no pairs left in B_y"


def test_a_tables_mleat_assembled_from_the_job_results_is_its_own_computation(tmp_path):
    # one job computes every test any table reads from the file; each table takes its own, in its order,
    # and its CSV is the one a job of its own computed (values, order, Holm-adjusted p), its maps' results too
    rng = np.random.default_rng(5)
    roles = [("X", 4, 1), ("Y", 4, -1), ("A_x", 3, 1), ("A_y", 2, 0.5), ("B_x", 2, -0.5), ("B_y", 3, -1)]
    draw = lambda: {r: rng.normal(size=(n, 6)) + shift for r, n, shift in roles}  # noqa: E731
    emptied = {**draw(), "B_y": np.zeros((0, 6))}
    path = write_grounded(tmp_path / "e.h5", None, tests={"toy": {"S": draw(), "W": draw()}, "toy-b": {"S": draw()},
                                                           "toy-c": {"C": emptied, "S": draw()}})
    write_mleat_results(path, tmp_path / "job.json", ["toy", "toy-b", "toy-c"], ["W", "S", "C"], **SETTINGS)
    for tests in (["toy-c", "toy"], ["toy-b"], ["toy", "toy-b", "toy-c"]):
        own = grounded_mleat(path, tests, ["W", "S", "C"], **SETTINGS)
        assembled = read_mleat_results(tmp_path / "job.json", tests)
        csv = [adjusted(mleat_frame(row for row, _ in found)).to_csv(index=False) for found in (own, assembled)]
        assert csv[0] == csv[1] and csv[0].count("\n") == len(own) + 1
        np.testing.assert_equal([None if r is None else r.asdict() for _, r in assembled],
                                [None if r is None else r.asdict() for _, r in own])
        assert all(r is None or isinstance(r.level2["X"].s_a, tuple) for _, r in assembled)
    assert [row["test"] for row, _ in own] == ["google/toy/W", "google/toy/S", "google/toy-b/S", "google/toy-c/S",
                                               "google/toy-c/C"]


def test_the_settings_reach_mleat_under_its_own_names():
    config = {"stats": {"mleat": {"build": True, "alpha": 0.01, "level2_null": "count", "saturation": 0.8}}}
    assert mleat_params(config) == {"alpha": 0.01, "null": "count", "saturation": 0.8}
