"""The report's pieces: results tables as HTML, the heatmap per suite, published vs reproduced,
and a page as a headless browser shows it."""

from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from helpers import REPO
from PIL import Image

from vlbias.report.figures import plot_published_vs_reproduced, plot_suite_heatmap, suite_rows
from vlbias.report.formats import stars
from vlbias.report.grounded import figure_rows, paper_table
from vlbias.report.html import figure_html, layout_html, page_html, results_table_html, write_page
from vlbias.report.tables import assemble, effects_grid, published_as, to_markdown, write_tables


class Cells(HTMLParser):
    """The text of every <th>/<td>, row by row."""

    def __init__(self, html):
        super().__init__()
        self.rows, self._cell = [], None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def result(test, model, d, p, n_x=8, status="ok", low=None, high=None):
    return {"test": test, "name": {"t1": "Test <One>", "t2": "Test Two"}[test], "model": model,
            "X": "Flowers & co", "Y": "Insects", "A": "Pleasant", "B": "Unpleasant", "n_x": n_x, "n_y": n_x,
            "n_a": 10, "n_b": 10, "d": d, "p": p, "status": status, "d_low": low, "d_high": high,
            "ci_level": 0.95 if low is not None else None}


PUBLISHED = pd.DataFrame({"table": "tab", "test": ["t1", "t1", "t2"], "model": ["m1", "m2", "m1"],
                          "d": ["0.60", "-0.20", "1.10"], "p": ["<1e-2", "0.70", "<1e-3"]})
ROWS = [result("t1", "m1", 0.6234, 0.01, low=0.1, high=1.05), result("t1", "m2", -0.21, 0.7, n_x=7, low=-1.2, high=0.7),
        result("t2", "m1", 1.21, 0.0004, low=0.5, high=1.6),
        {**result("t2", "m2", None, None), "status": "skipped: no stimuli left in X (x)"}]


def table():
    return assemble(ROWS, ["t1", "t2"], ["m1", "m2"], PUBLISHED, table="tab")


def test_results_table_in_the_papers_layout():
    html = results_table_html(table(), "Table 1 <ours>")
    rows = Cells(html).rows
    assert rows[0] == ["Test", "X", "Y", "A", "B", "n_x", "n_a", "m1", "m2"]
    assert rows[1] == ["d", "p", "d paper", "p paper"] * 2
    # t1: sizes differ between the models; d bold and starred by its Holm-adjusted p with its interval
    # below, p with the Holm-adjusted p (family m1: 0.01, 0.0004 → 2·0.0004, max(0.0008, 0.01)) below
    assert rows[2] == ["Test <One>", "Flowers & co", "Insects", "Pleasant", "Unpleasant", "8/7", "10",
                       "0.62*[0.10, 1.05]", "0.0100Holm 0.0100", "0.60", "<1e-2",
                       "-0.21[-1.20, 0.70]", "0.7000Holm 0.7000", "-0.20", "0.70"]
    assert rows[3] == ["Test Two", "Flowers & co", "Insects", "Pleasant", "Unpleasant", "8", "10",
                       "1.21***[0.50, 1.60]", "0.0004Holm 0.0008", "1.10", "<1e-3", "skipped", "", "", ""]
    assert "<strong>0.62</strong>*" in html and "<strong>-0.21</strong>" not in html
    assert 'title="skipped: no stimuli left in X (x)"' in html
    # every text escaped: no tag from a name or caption reaches the page
    assert "<One>" not in html and "Test &lt;One&gt;" in html and "<caption>Table 1 &lt;ours&gt;</caption>" in html
    assert "95 % bootstrap interval" in html


def test_own_tests_never_shift_a_published_tests_adjusted_p():
    """One's own tests form their own family (vlbias.io.stimuli.OWN). The paper's two tests
    (p 0.01, 0.04) keep their Holm p (0.02, 0.04) beside three of one's own with smaller p; among
    five tests they would have been 0.04 and 0.08."""
    paper = [{**result("t1", "m1", 0.5, p), "test": t, "family": "may2019"} for t, p in (("a", 0.01), ("b", 0.04))]
    own = [{**result("t1", "m1", 0.5, p), "test": t, "family": "own"} for t, p in (("c", 0.001), ("d", 0.002),
                                                                                  ("e", 0.003))]
    df = assemble(paper + own, ["a", "b", "c", "d", "e"], ["m1"]).set_index("test")
    assert df.loc[["a", "b"], "p_holm"].tolist() == pytest.approx([0.02, 0.04])
    assert df.loc[["c", "d", "e"], "p_holm"].tolist() == pytest.approx([0.003, 0.004, 0.004])
    alone = assemble(paper, ["a", "b"], ["m1"]).set_index("test")
    assert df.loc[["a", "b"], ["p_holm", "p_bh"]].equals(alone[["p_holm", "p_bh"]])


def test_results_table_without_interval_or_paper():
    df = assemble([{k: v for k, v in r.items() if k not in ("d_low", "d_high", "ci_level")} for r in ROWS],
                  ["t1", "t2"], ["m1", "m2"])
    html = results_table_html(df, "plain")
    rows = Cells(html).rows
    assert rows[1] == ["d", "p"] * 2
    assert rows[2][7:] == ["0.62*", "0.0100Holm 0.0100", "-0.21", "0.7000Holm 0.7000"]
    assert "bootstrap" not in html and "paper" not in html


def test_a_recomputed_column_shows_the_numbers_of_the_published_one_it_reproduces():
    published = published_as(PUBLISHED, {"m1": "m1", "m1-pixels": "m1", "mine": "mine"})
    rows = ROWS[:1] + [{**ROWS[0], "model": "m1-pixels", "d": 0.5}, {**ROWS[0], "model": "mine", "d": 0.1}]
    df = assemble(rows, ["t1"], ["m1", "m1-pixels", "mine"], published, table="tab")
    assert df[["model", "d", "d_paper", "p_paper"]].values.tolist() == [
        ["m1", 0.6234, "0.60", "<1e-2"], ["m1-pixels", 0.5, "0.60", "<1e-2"], ["mine", 0.1, "", ""]]
    assert published_as(PUBLISHED, {}).empty


def test_effects_grid_is_tests_by_models_with_stars():
    grid = effects_grid(table())
    assert grid.columns.tolist() == ["test", "m1", "m2"]
    assert grid.values.tolist() == [["Test <One>", "0.62*", "-0.21"], ["Test Two", "1.21***", "skipped"]]
    assert effects_grid(table()[table()["model"] == "m1"].iloc[:1]).values.tolist() == [["Test <One>", "0.62*"]]


def test_stars_follow_the_holm_adjusted_p_in_every_rendering(tmp_path):
    """One significance convention. Two tests of one model at p 0.03 and 0.04 are each below
    .05, but not after Holm's adjustment (0.06, 0.06): no star in the Markdown, the HTML page, the grid
    of the sweep or the heatmap; the third test (p 0.0001) keeps its stars."""
    rows = [{**result(t, "m1", d, p), "test": t} for t, d, p in (("t1", 0.5, 0.03), ("t2", 0.7, 0.04))]
    df = assemble(rows + [{**result("t2", "m1", 1.0, 0.0001), "test": "t3", "name": "Test Three"}],
                  ["t1", "t2", "t3"], ["m1"])
    assert df["p_holm"].round(4).tolist() == [0.06, 0.06, 0.0003]
    assert effects_grid(df)["m1"].tolist() == ["0.50", "0.70", "1.00***"]
    md = to_markdown(df, "c")
    assert "| 0.50 |" in md and "| 0.70 |" in md and "| 1.00*** |" in md
    assert "*, **, ***: p < .05, .01, .001, Holm-adjusted over one model's tests of one stimulus family" in md
    html = results_table_html(df, "c")
    assert "<strong>0.50</strong>" not in html and "<strong>1.00</strong>***" in html
    fig = plot_suite_heatmap(df, tmp_path / "h.png", "suite")
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0.50", "0.70", "1.00***"]
    assert "Holm-adjusted" in fig.axes[0].get_xlabel()


def test_grounded_layout_as_html():
    # a grounded Table 6: experiment blocks above the model columns, d starred by its Holm-adjusted p
    rows = [{"dataset": "google", "test": "g1", "name": "Test g1", "model": "vb", "experiment": e, "level": lv,
             "mask": m, "status": "ok", "d": 0.5, "p": 0.01 if e == "1" else 0.2}
            for e, lv, m in (("1", "W", "none"), ("2", "W", "none"), ("3-masked", "S", "T"))]
    spec = {"table": "table6", "columns": [{"label": "VisualBERT", "model": "vb", "dataset": "google"}],
            "groups": {"Gender": ["g1"]}, "levels": ["W"], "masks": ["T"], "level": "S",
            "experiments": ["1", "2", "3-masked"], "alpha": 0.05}
    html = layout_html(paper_table(spec, rows))
    cells = Cells(html).rows
    assert cells[0] == ["", "Experiment 1", "Experiment 2", "Experiment 3 (masking)"]
    assert cells[1] == ["group", "test", "level", "mask", "VisualBERT", "VisualBERT", "VisualBERT"]
    assert cells[2] == ["Gender", "Test g1", "W", "T", "0.50* (0.010)", "0.50 (0.200)", "0.50 (0.200)"]
    assert '<th colspan="4"></th>' in html and "<strong>" not in html  # bold: the paper's highlight only


def test_page_has_its_parts_in_order(tmp_path):
    parts = [results_table_html(table(), "first"), figure_html("fig.png", "a figure <1>")]
    write_page(tmp_path / "page.html", "Results & more", parts)
    html = (tmp_path / "page.html").read_text()
    assert html == page_html("Results & more", parts)
    assert html.index("<caption>first") < html.index('<img src="fig.png" alt="a figure &lt;1&gt;">')
    assert "<title>Results &amp; more</title>" in html and "<figcaption>a figure &lt;1&gt;</figcaption>" in html


# --- figures -----------------------------------------------------------------------------------

def test_stars():
    assert [stars(p) for p in (0.0005, 0.001, 0.005, 0.03, 0.05, 0.5, float("nan"))] == \
        ["***", "**", "**", "*", "", "", ""]


def test_heatmap(tmp_path):
    df = table()
    df = pd.concat([df, df.iloc[[2]].assign(test="t3", name="Test Three", model="m1", d=-1.5, p=0.3, p_holm=0.6)])
    fig = plot_suite_heatmap(df, tmp_path / "h.png", "suite")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["Test <One>", "Test Two", "Test Three"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["m1", "m2"]
    # one text per cell with a row: d and its stars, or "skipped"; (t3, m2) has none
    assert sorted(t.get_text() for t in ax.texts) == sorted(["0.62*", "-0.21", "1.21***", "skipped", "-1.50"])
    image = ax.images[0]
    data = image.get_array()
    assert data.shape == (3, 2) and data.mask[2, 1] and data.mask[1, 1] and data[0, 0] == pytest.approx(0.6234)
    # diverging and centred on 0: symmetric limits at max |d| (1.5)
    assert image.get_cmap().name == "RdBu_r" and image.norm.vmin == -1.5 and image.norm.vmax == 1.5
    with Image.open(tmp_path / "h.png") as png:
        small = png.size
    plot_suite_heatmap(pd.concat([df.assign(test=df["test"] + f"-{i}") for i in range(4)]), tmp_path / "big.png", "s")
    with Image.open(tmp_path / "big.png") as png:
        assert png.size[1] > 2 * small[1] and abs(png.size[0] - small[0]) < 0.15 * small[0]  # taller, as wide


def test_heatmap_of_one_model_and_long_test_names_keeps_its_cells(tmp_path):
    df = table()
    df = df[df["model"] == "m1"].assign(name=["Insect-Flower (text attributes)", "Gender-Science (text targets)"])
    fig = plot_suite_heatmap(df, tmp_path / "h.png", "one model")
    fig.canvas.draw()
    cells, labels = fig.axes[0].get_window_extent(), fig.axes[0].get_tightbbox()
    assert cells.width > 0.6 * fig.dpi  # the cells' column is not squeezed out by the names
    assert labels.x0 >= 0  # and the names fit on the figure


def test_heatmap_refuses_two_rows_for_a_cell(tmp_path):
    df = table()
    with pytest.raises(ValueError, match=r"two rows for \(test, model\).*'t1', 'm1'"):
        plot_suite_heatmap(pd.concat([df, df.iloc[[0]]]), tmp_path / "h.png", "suite")


def test_published_vs_reproduced(tmp_path):
    # "other" has no published d
    df = pd.concat([table().assign(table="tab"), table().assign(table="other", d_paper="")], ignore_index=True)
    df.loc[1, "d_paper"] = "0.20"  # t1/m2 now 0.41 off the identity: labelled
    fig = plot_published_vs_reproduced(df, tmp_path / "p.png", "published", label_above=0.2)
    assert (tmp_path / "p.png").stat().st_size > 10_000
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["tab (n = 3)"]  # skipped and unpublished rows left out
    ax = axes[0]
    identity = ax.lines[0].get_xydata()
    assert (identity[:, 0] == identity[:, 1]).all()
    points = np.concatenate([c.get_offsets() for c in ax.collections if hasattr(c, "get_sizes") and len(c.get_sizes())])
    assert sorted(map(tuple, np.round(points, 4))) == [(0.2, -0.21), (0.6, 0.6234), (1.1, 1.21)]
    assert [t.get_text() for t in ax.texts] == ["Test <One>"]  # t2/m1 is 0.11 off: not labelled
    assert ax.get_xlim() == ax.get_ylim()


# --- in a browser ---------------------------------------------------------------------------------

# a stand-in for Chromium that hangs in its first profile and, in any other, prints the probe's answer
HANGS_ONCE = """#!/bin/sh
case "$*" in *--user-data-dir=*-1*) exec sleep 60 ;; esac
echo '<script type="application/json" id="vlbias-probe">{"text": "shown", "images": [], "frames": [], \
"error": null, "width": 10, "viewport": 10}</script>'
"""


def test_a_browser_run_that_hangs_is_tried_once_more(tmp_path):
    from browser import Browser

    fake = tmp_path / "chromium"
    fake.write_text(HANGS_ONCE)
    fake.chmod(0o755)
    (tmp_path / "page.html").write_text("<html><head></head><body>shown</body></html>")
    assert Browser(str(fake)).render(tmp_path / "page.html", timeout=1).text == "shown"


def test_page_in_a_headless_browser(browser, tmp_path):
    plot_suite_heatmap(table(), tmp_path / "heatmap.png", "suite")
    write_page(tmp_path / "page.html", "Results", [results_table_html(table(), "Table 1"),
                                                   figure_html("heatmap.png", "Effect sizes")])
    seen = browser.render(tmp_path / "page.html", screenshot=tmp_path / "page.png", size=(1000, 900))
    assert "Test <One>" in seen.text and "0.62*" in seen.text and "Holm 0.0008" in seen.text
    [figure] = seen.images
    assert figure["src"] == "heatmap.png" and figure["loaded"] and figure["visible"] and figure["width"] > 200
    with Image.open(seen.screenshot) as png:
        assert png.size == (1000, 900)
        # the page is not blank: the figure's colours are in the screenshot
        assert len(png.convert("RGB").getcolors(1 << 20)) > 50


def test_the_seat_page_of_every_shipped_test_fits_the_window(browser, tmp_path):
    """The SEAT page's result columns ran past a 1400 px window (1450 px wide). Every shipped
    SEAT test with its name and set labels (IncompetentNotAchievementOriented ...): the page fits 1400
    and 1024 px windows, the labels wrapping between their words."""
    from vlbias.io.stimuli import load_stimulus
    from vlbias.suites.seat.plan import natural_key

    stimuli = sorted((load_stimulus(f) for f in (REPO / "resources/stimuli/seat").glob("*.yaml")),
                     key=lambda s: natural_key(s.id))
    rows = [{"test": s.id, "name": s.name, "model": "minilm", **{k: st.label for k, st in s.sets.items()},
             "n_x": 8, "n_y": 8, "n_a": 10, "n_b": 10, "d": 1.2345, "d_low": -1.2, "d_high": 1.3, "ci_level": 0.95,
             "p": 0.0123, "status": "ok"} for s in stimuli]
    # and one's own test, its labels without spaces or capitals: they break anywhere rather than overflow
    rows.append({**rows[0], "test": "mine", "name": "mine", "X": "my_own_target_words_" * 6, "Y": "y_" * 40})
    df = assemble(rows, [s.id for s in stimuli] + ["mine"], ["minilm"])
    write_page(tmp_path / "seat.html", "SEAT", [results_table_html(df, "WEAT/SEAT on minilm")], heading=False)
    assert "Incompetent<wbr>Not<wbr>Achievement<wbr>Oriented" in (tmp_path / "seat.html").read_text()
    for size in ((1400, 900), (1024, 768)):
        seen = browser.render(tmp_path / "seat.html", size=size)
        assert seen.viewport == size[0] and seen.width <= seen.viewport, (size, seen.width)
        assert "WEAT 10: young/old people's names × pleasant/unpleasant" in seen.text and "1.23" in seen.text


# the words of the table's cells that the browser laid out on more than one line (a cell of one word)
BROKEN_WORDS = """
const broken = [...document.querySelectorAll("td")].filter(td => /^\\S+$/.test(td.textContent.trim())).filter(td => {
  const range = document.createRange();
  range.selectNodeContents(td);
  return new Set([...range.getClientRects()].map(box => Math.round(box.top))).size > 1;
});
document.body.append("broken: " + JSON.stringify([...new Set(broken.map(td => td.textContent.trim()))]));
"""


def test_a_cell_breaks_between_words_not_inside_them(browser, tmp_path):
    """A table too wide for its window broke its labels inside words ("Plea|sant"); it now
    wraps them between words and the page scrolls sideways rather."""
    rows = [{**r, "name": "Test 1: flowers/insects × pleasant/unpleasant", "X": "Flowers", "A": "Pleasant",
             "B": "Unpleasant", "model": m} for r in ROWS[:1] for m in ("igpt", "simclr", "igpt-logits")]
    write_page(tmp_path / "t.html", "iEAT", [results_table_html(assemble(rows, ["t1"], ["igpt", "simclr",
                                                                                         "igpt-logits"]), "T")])
    seen = browser.render(tmp_path / "t.html", size=(600, 600), script=BROKEN_WORDS)
    assert seen.text.endswith('broken: []'), seen.text[-200:]


# --- Markdown and any table as HTML ----------------------------------------------------------------

def test_markdown_shows_the_interval_and_the_adjusted_p():
    df = table().assign(ci_method="bca")
    md = to_markdown(df, "Table <1>").splitlines()
    assert md[2] == ("| Test | Model | X | Y | A | B | n_x | n_a | d [95 % CI] | p | p Holm | p BH | d (paper) "
                     "| p (paper) |")
    # family m1: p = 0.01, 0.0004 → Holm 2·0.0004 and max(0.0008, 0.01); BH 2·0.0004/1, 2·0.01/2
    assert md[4] == ("| Test <One> | m1 | Flowers & co | Insects | Pleasant | Unpleasant | 8 | 10 | 0.62* [0.10, 1.05] "
                     "| 0.0100 | 0.0100 | 0.0100 | 0.60 | <1e-2 |")
    assert md[6] == ("| Test Two | m1 | Flowers & co | Insects | Pleasant | Unpleasant | 8 | 10 | 1.21*** [0.50, 1.60] "
                     "| 0.0004 | 0.0008 | 0.0008 | 1.10 | <1e-3 |")
    assert md[7].endswith("| – | skipped: no stimuli left in X (x) |  |  |  |  |")
    assert "its 95 % BCa bootstrap confidence interval" in md[-1] and "Benjamini–Hochberg" in md[-1]
    plain = to_markdown(assemble([{k: v for k, v in r.items() if not k.startswith(("d_", "ci_"))} for r in ROWS],
                                 ["t1", "t2"], ["m1", "m2"]), "plain").splitlines()
    assert plain[2] == "| Test | Model | X | Y | A | B | n_x | n_a | d | p | p Holm | p BH |"
    assert "| 0.62* | 0.0100 |" in plain[4] and "interval" not in plain[-1]


def test_any_table_as_a_page(tmp_path):
    df = pd.DataFrame({"entity": ["purse", "tie <x>"], "S": ["0.123", "n/a"], "n": [3, 1], "note": ["a", "1b"]})
    write_tables(df, "Scores & more", html=tmp_path / "t.html", note="n/a: no images")
    page = (tmp_path / "t.html").read_text()
    assert Cells(page).rows == [["entity", "S", "n", "note"], ["purse", "0.123", "3", "a"], ["tie <x>", "n/a", "1", "1b"]]
    # numbers right-aligned, numbers as text (rounded) too; text left; everything escaped
    assert '<td>purse</td><td class="num">0.123</td><td class="num">3</td><td>a</td>' in page
    assert "<td>tie &lt;x&gt;</td>" in page and '<td class="num">n/a</td>' in page
    assert "<caption>Scores &amp; more</caption>" in page and "<h1>" not in page  # the caption is the heading
    assert '<p class="vlbias-note">n/a: no images</p>' in page


def test_suite_rows_keep_a_test_twice_on_one_model_apart():
    first = pd.DataFrame({"test": ["t1", "t2"], "model": ["m", "m"], "d": [0.1, 0.2]})
    second = pd.DataFrame({"test": ["t1", "t3"], "model": ["m", "n"], "d": [0.3, 0.4]})
    rows = suite_rows({"a": first, "b": second})
    assert list(zip(rows["table"], rows["test"], rows["model"])) == [
        ("a", "t1", "m (a)"), ("a", "t2", "m"), ("b", "t1", "m (b)"), ("b", "t3", "n")]


def test_grounded_figure_rows():
    def result(test, model, experiment, level, mask, d, dataset="google"):
        return {"dataset": dataset, "test": test, "name": test.upper(), "model": model.lower(), "column": model,
                "experiment": experiment, "level": level, "mask": mask, "status": "ok", "d": d, "p": 0.2}

    rows = [result("t1", "VisualBERT", "1", "S", "none", 0.3), result("t1", "LXMERT", "1", "W", "none", 0.4),
            result("t1", "LXMERT", "2", "W", "none", 0.5), result("t1", "LXMERT", "3-masked", "S", "I", 0.6),
            result("t2", "LXMERT", "3-masked", "S", "T", 0.7)]
    cells = [("table3", "t1", "1", "W", "", "d", "0.41"),
             ("table3", "t1", "1", "W", "", "d", "0.41"),  # printed twice (ABW in both halves)
             ("table4", "t1", "2", "W", "", "d", "-0"),
             ("table5", "t1", "3-masked", "S", "I", "d", "0.55"),
             ("table5", "t2", "3-masked", "S", "T", "d", "–"),  # a dash: no number
             ("table7", "", "1", "S", "", "count", "1")]  # a count, not an effect size
    printed = [{"table": t, "test": test, "experiment": e, "level": lv, "mask": m, "model": "LXMERT",
                "dataset": "google", "quantity": q, "value": v} for t, test, e, lv, m, q, v in cells]
    heatmap, published = figure_rows(rows, printed)
    assert list(zip(heatmap["name"], heatmap["model"], heatmap["d"])) == [("T1 S", "VisualBERT", 0.3),
                                                                         ("T1 W", "LXMERT", 0.4)]
    assert sorted(zip(published["table"], published["d"], published["d_paper"])) == [
        ("table3", 0.4, 0.41), ("table4", 0.5, 0.0), ("table5", 0.6, 0.55)]
    assert list(published["table"]) == ["table3", "table4", "table5"]
    assert set(published["model"]) == {"LXMERT"} and set(published["name"]) == {"T1 W", "T1 S I"}
    # Table 3's layout: a row per test and level, in the levels' order; columns in the tables' order
    more = [result("t1", "LXMERT", "1", "S", "none", 0.2), result("t2", "LXMERT", "1", "W", "none", 0.1)]
    heatmap, _ = figure_rows(rows + more, columns=["LXMERT", "VisualBERT"], levels=["W", "S"])
    assert list(zip(heatmap["test"], heatmap["model"])) == [("t1 W", "LXMERT"), ("t1 S", "LXMERT"), ("t2 W", "LXMERT"),
                                                            ("t1 S", "VisualBERT")]
    # two datasets: the heatmap's columns name theirs
    heatmap, _ = figure_rows(rows + [result("t1", "LXMERT", "1", "W", "none", 0.1, dataset="coco")])
    assert list(heatmap["model"]) == ["VisualBERT (google)", "LXMERT (google)", "LXMERT (coco)"]


def test_a_results_table_prints_each_p_alike_in_markdown_and_html():
    rows = [result("t1", "m1", 0.5, 0.01234), result("t1", "m2", 0.5, 0.00056), result("t2", "m1", 0.5, 0.000012),
            result("t2", "m2", 0.5, 0.5)]
    df = assemble(rows, ["t1", "t2"], ["m1", "m2"])
    md = [line.split(" | ") for line in to_markdown(df, "T").splitlines()[4:8]]
    from_md = {(cells[0].removeprefix("| "), cells[1]): cells[9].rstrip("*") for cells in md}
    html = Cells(results_table_html(df, "T")).rows[2:]
    from_html = {(row[0], model): row[8 + 2 * i].split("Holm")[0] for row in html for i, model in enumerate(["m1", "m2"])}
    assert from_md == from_html == {("Test <One>", "m1"): "0.0123", ("Test <One>", "m2"): "0.0006",
                                    ("Test Two", "m1"): "1.2e-05", ("Test Two", "m2"): "0.5000"}


def test_a_sampled_p_prints_its_error_as_precisely_as_itself():
    from vlbias.report.tables import _fmt_p

    assert _fmt_p(0.5) == "0.5000" and _fmt_p(0.01) == "0.0100"
    assert _fmt_p(0.0123, 0.00035, exact=False) == "0.0123 ± 0.0003"
    # the smallest p of 100,000 samples, 1/(n+1): its error is not "0.0000"
    assert _fmt_p(1 / 100_001, 1e-5, exact=False) == "1.0e-05 ± 1.0e-05"


def test_one_p_formatter_at_each_tables_precision():
    from vlbias.report.formats import LAYOUT_P_DIGITS, RESULTS_P_DIGITS, format_p, missing, text

    assert [format_p(p, RESULTS_P_DIGITS) for p in (0.5, 1e-4, 9.9e-5)] == ["0.5000", "0.0001", "9.9e-05"]
    # the grounded paper-layout cells "d (p)": 3 decimals, below 1e-3 one significant digit
    assert [format_p(p, LAYOUT_P_DIGITS) for p in (0.0123, 1e-3, 4.4e-4)] == ["0.012", "0.001", "4e-04"]
    assert [missing(v) for v in (None, float("nan"), pd.NA, 0.0, "", "nan")] == [True] * 3 + [False] * 3
    assert [text(v) for v in (None, pd.NA, 3, "a")] == ["", "", "3", "a"]
