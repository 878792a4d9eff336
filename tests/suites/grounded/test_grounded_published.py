"""The paper's printed Tables 3-7 (resources/published/grounded_tables.tsv): every printed cell is
transcribed, shown beside ours in the paper-layout tables, and lined up per protocol."""

import math
import re

import pytest
from helpers import REPO

from vlbias.report.grounded import (
    NA,
    comparison,
    experiment3_summary,
    paper_table,
    printed_cells,
    printed_groups,
    protocol_caption,
    read_left_out,
    read_printed,
    read_rows,
    to_frame,
    to_markdown,
)
from vlbias.suites.grounded.plan import CAPTIONS, embedding_job, embedding_path

PUBLISHED = REPO / "resources" / "published" / "grounded_tables.tsv"
MODELS = ["VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"]
GENDER = ["weat6", "weat8", "weat11", "heilman_gender_double_bind_competent", "heilman_gender_double_bind_likable",
          "occ_gender"]
RACE = ["weat3", "weat12", "weat13", "heilman_race_double_bind_competent", "heilman_race_double_bind_likable",
        "occ_race", "angry_black_woman_stereotype"]
ABW = "angry_black_woman_stereotype"


@pytest.fixture(scope="module")
def printed():
    return read_printed(PUBLISHED)


def cells_of(printed, table):
    return [r for r in printed if r["table"] == table]


def test_every_printed_cell_is_transcribed(printed):
    """The printed layout, counted: Tables 3 and 4 print 7 gender rows (ABW included) and 7 race rows
    of 3 levels x 4 models; Table 5 6 gender and 7 race tests x T, I x 4 models; Table 6 two tests
    x 3 levels x 8 (experiments 1, 2) + 2 masks x 4 (experiment 3); Table 7 per half 3 levels x 8
    + 2 masks x 4; and Section 5's three numbers for experiment 3's first variant."""
    counts = {t: len(cells_of(printed, t)) for t in ("table3", "table4", "table5", "table6", "table7", "text")}
    assert counts == {"table3": 14 * 3 * 4, "table4": 14 * 3 * 4, "table5": 13 * 2 * 4,
                      "table6": 2 * 3 * 8 + 2 * 2 * 4, "table7": 2 * (3 * 8 + 2 * 4), "text": 3}
    for table in ("table3", "table4"):
        for half, tests in (("Gender", [*GENDER, ABW]), ("Race", RACE)):
            got = {(r["test"], r["level"], r["model"]) for r in cells_of(printed, table) if r["half"] == half}
            assert got == {(t, lv, m) for t in tests for lv in "WSC" for m in MODELS}, (table, half)
    got = {(r["half"], r["test"], r["mask"], r["model"]) for r in cells_of(printed, "table5")}
    assert got == {(h, t, mk, m) for h, ts in (("Gender", GENDER), ("Race", RACE)) for t in ts for mk in "TI"
                   for m in MODELS}
    assert {(r["test"], r["dataset"]) for r in cells_of(printed, "table6")} == {
        (t, d) for t in ("weat6", "occ_gender") for d in ("coco", "concap")}
    for r in printed:
        assert re.fullmatch(r"-?\d+(\.\d+)?|[–-]", r["value"]), r
        assert r["significant"] in ("yes", "no", "")
        assert r["significant"] == "" or r["table"] in ("table5", "table6")  # the text marks only those
        assert r["significant"] == "" or r["value"] not in ("–", "-")
    # the paper's dashes: LXMERT's C8 sentence cell (Tables 3, 4), VisualBERT's masked images
    dashes = {(r["table"], r["test"], r["level"], r["mask"], r["model"]) for r in printed if r["value"] in "–-"}
    assert ("table3", "weat8", "S", "", "LXMERT") in dashes and ("table4", "weat8", "S", "", "LXMERT") in dashes
    assert all(m == "VisualBERT" for t, *_, m in dashes if t != "table3" and t != "table4")
    # spot checks against the paper
    pick = {(r["table"], r["half"], r["test"], r["experiment"], r["level"], r["mask"], r["model"]): r for r in printed}
    assert pick[("table3", "Race", "weat12", "1", "S", "", "VL-BERT")]["value"] == "-0.96"
    assert pick[("table6", "Gender", "occ_gender", "2", "C", "", "ViLBERT")]["value"] == "1.96"
    assert pick[("table6", "Gender", "occ_gender", "2", "C", "", "ViLBERT")]["significant"] == "yes"
    assert pick[("table7", "Race", "", "1", "C", "", "ViLBERT")]["value"] == "7"
    assert pick[("table5", "Race", "heilman_race_double_bind_competent", "3-masked", "S", "I", "VL-BERT")][
        "significant"] == "yes"


def test_abw_in_both_halves_of_tables_3_and_4(printed):
    assert printed_groups(printed, "table3") == {"Gender": [*GENDER, ABW], "Race": RACE}
    assert printed_groups(printed, "table4")["Gender"][-1] == ABW
    assert printed_groups(printed, "table5") == {"Gender": GENDER, "Race": RACE}
    cells = printed_cells(printed, "table3")
    assert cells[(ABW, "1", "C", "", "LXMERT", "google")] == ("1.27", "")


# --- our tables beside the printed ones ----------------------------------------------------------

def row(test, column, experiment, level, mask="none", d=0.5, p=0.01, dataset="google", status="ok"):
    model = {"VisualBERT": "vb", "LXMERT": "lx"}[column]
    return {"dataset": dataset, "test": test, "name": f"Test {test}", "model": model, "column": column,
            "experiment": experiment, "level": level, "mask": mask, "status": status, "d": d, "p": p}


COLUMNS = [{"label": "VisualBERT", "model": "vb", "dataset": "google"},
           {"label": "ViLBERT", "model": None, "dataset": "google"},
           {"label": "LXMERT", "model": "lx", "dataset": "google"},
           {"label": "VL-BERT", "model": None, "dataset": "google"}]
SPEC = {"columns": COLUMNS, "groups": {"Gender": ["weat8", ABW], "Race": [ABW]}, "levels": ["W", "S"],
        "masks": ["T", "I"], "level": "S", "experiments": ["1", "2", "3-masked"], "alpha": 0.05}


def test_tables_show_the_printed_number_and_the_papers_dashes(printed):
    rows = [row(t, c, "1", lv, d=0.25) for t in ("weat8", ABW) for c in ("VisualBERT", "LXMERT") for lv in "WS"]
    layout = paper_table({**SPEC, "table": "table3"}, rows, printed)
    df = to_frame(layout).set_index(["group", "test", "level"])
    # C8 S, LXMERT: printed "–", so ours is shown as "–" too; the paper's value is beside every cell
    assert df.loc[("Gender", "Test weat8", "S"), "LXMERT d"] == NA
    assert df.loc[("Gender", "Test weat8", "S"), "LXMERT paper"] == "–"
    assert df.loc[("Gender", "Test weat8", "S"), "VisualBERT d"] == 0.25
    assert df.loc[("Gender", "Test weat8", "W"), "VisualBERT paper"] == "0.77"
    # ABW in both halves, the same printed numbers; the empty ViLBERT column still shows the paper's
    assert df.loc[("Gender", f"Test {ABW}", "W"), "LXMERT paper"] == df.loc[("Race", f"Test {ABW}", "W"),
                                                                              "LXMERT paper"] == "-1.31"
    assert df.loc[("Race", f"Test {ABW}", "W"), "ViLBERT d"] == "" and df.loc[("Race", f"Test {ABW}", "W"),
                                                                               "ViLBERT paper"] == "0.41"
    md = to_markdown(layout)
    # d starred by its Holm-adjusted p (the column's Gender tests at W: 0.01, 0.01 → 0.02, 0.02)
    assert "| Gender | Test weat8 | W | 0.25* (0.010) [0.77] | [0.59] | 0.25* (0.010) [0.43] | [-0.29] |" in md
    assert "[x]: the number the paper prints" in md
    # Table 5's highlighted printed numbers are bold, as the paper highlights them; a star is ours only
    masked = [row(t, c, "3-masked", "S", m, d=0.1, p=0.5) for t in ("weat8", ABW) for c in ("VisualBERT", "LXMERT")
              for m in "TI" if (c, m) != ("VisualBERT", "I")]
    md5 = to_markdown(paper_table({**SPEC, "table": "table5", "groups": {"Gender": ["weat8"]}}, masked, printed))
    assert "| Gender | Test weat8 | T | 0.10 (0.500) [**0.46**] | [**0.41**] | 0.10 (0.500) [**0.11**] | [**0.27**] |" in md5
    assert "| Gender | Test weat8 | I | – [–] | [**0.39**] |" in md5


def test_table7_counts_beside_the_printed_ones(printed):
    rows = [row(t, "LXMERT", "1", "W", p=0.01) for t in GENDER[:4]] + [row(t, "VisualBERT", "3-masked", "S", "T")
                                                                       for t in GENDER]
    spec = {**SPEC, "table": "table7", "groups": {"Gender": GENDER}, "levels": ["W", "S", "C"]}
    df = to_frame(paper_table(spec, rows, printed)).set_index(["group", "level", "mask"])
    assert df.loc[("Gender", "W", "T"), "Experiment 1 LXMERT significant"] == 4
    assert df.loc[("Gender", "W", "T"), "Experiment 1 LXMERT paper"] == "3"
    # the paper prints "-" for VisualBERT's masks: ours shows "–" although it has counts
    assert df.loc[("Gender", "W", "T"), "Experiment 3 (masking) VisualBERT significant"] == NA
    assert df.loc[("Gender", "W", "T"), "Experiment 3 (masking) VisualBERT paper"] == "-"


def test_comparison_lines_up_protocols_per_printed_cell(printed):
    authors = [row("weat6", "LXMERT", "1", "W", d=0.6, p=0.01), row("weat6", "LXMERT", "3-masked", "S", "I", d=1.1),
               row("weat6", "LXMERT", "3", "W", d=0.3, p=0.2), row("weat6", "LXMERT", "3", "S", d=0.5, p=0.01),
               row("weat6", "VisualBERT", "3", "W", d=0.2, p=0.5)]
    paper = [{**authors[0], "d": -0.1, "p": 0.7}]
    df = comparison(printed, {"authors": authors, "paper": paper})
    assert len(df) == len(printed)
    c6 = df[(df["table"] == "table3") & (df["test"] == "weat6") & (df["level"] == "W") & (df["model"] == "LXMERT")]
    assert c6[["printed", "authors d", "authors p", "paper d"]].values.tolist() == [["0.55", 0.6, 0.01, -0.1]]
    i = df[(df["table"] == "table5") & (df["test"] == "weat6") & (df["mask"] == "I") & (df["model"] == "LXMERT")]
    assert i["authors d"].tolist() == [1.1] and i["paper d"].tolist() == [""] and i["printed"].tolist() == ["0.69"]
    counts = df[(df["table"] == "table7") & (df["half"] == "Gender") & (df["experiment"] == "1") &
                (df["level"] == "W") & (df["model"] == "LXMERT")]
    assert counts[["printed", "authors", "paper"]].values.tolist() == [["3", 1, 0]]
    text = df[df["table"] == "text"].set_index("quantity")
    assert text.loc["share", "authors d"] == pytest.approx(1 / 3)
    lx = df[(df["table"] == "text") & (df["model"] == "VisualBERT")]
    assert lx["authors d"].tolist() == [0.2] and lx["printed"].tolist() == ["0.467"]


def test_experiment3_summary_is_the_mean_effect_size_and_the_share_significant():
    rows = [row("a", "LXMERT", "3", "W", d=0.2, p=0.01), row("b", "LXMERT", "3", "S", d=0.6, p=0.3),
            row("a", "VisualBERT", "3", "W", d=0.5, p=0.5), row("a", "VisualBERT", "3", "C", status="skipped: x"),
            row("a", "VisualBERT", "3", "S", d=9.0, dataset="coco"), row("a", "LXMERT", "1", "W", d=5.0)]
    means, share = experiment3_summary(rows)
    assert means == {"LXMERT": (pytest.approx(0.4), 2), "VisualBERT": (0.5, 1)}
    assert share == pytest.approx(1 / 3)
    assert math.isnan(experiment3_summary([])[1])


def test_a_table_reads_its_tests_rows_under_todays_names_and_names_each_left_out_pair_by_its_job(tmp_path):
    results = tmp_path / "old.csv"  # an experiment file of an older version: n_X ... n_B_y
    results.write_text("protocol,dataset,test,model,n_X,n_B_y,status\npaper,google,t1,vb,2,1,ok\n"
                       "paper,google,other,vb,2,1,ok\n")
    rows = read_rows([results], {"t1"})
    assert rows[["test", "n_x", "n_b_y"]].values.tolist() == [["t1", "2", "1"]]
    missing = tmp_path / embedding_path("paper", "google", "vb.base", "missing.tsv")  # a dotted entry name
    missing.parent.mkdir(parents=True)
    missing.write_text("# comment\ntest\tlevel\tmask\trole\tcaption\timage\treason\n"
                       "t1\tS\tnone\tX\ta man\t7\tno regions\nother\tS\tnone\tX\ta man\t8\tno regions\n")
    left_out = read_left_out([missing], {"t1"})
    assert left_out[["dataset", "model", "test", "image"]].values.tolist() == [["google", "vb.base", "t1", "7"]]
    assert embedding_job(embedding_path("paper", "cc", "vb.base")) == ("paper", "cc", "vb.base.h5")
    assert embedding_job(embedding_path("paper", "cc", "vb.base"), "h5") == ("paper", "cc", "vb.base")


def test_a_tables_caption_names_its_protocol_and_switches():
    spec = {"caption": "", "table": "table3", "protocol": "code", "switches": {"image_mask": "regions", "seed": 1}}
    assert protocol_caption(spec) == f"{CAPTIONS['table3']}. Protocol 'code': image_mask regions, seed 1"
