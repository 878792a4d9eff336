"""Ross, Katz & Barbu (2021), Tables 3–7, in the paper's layout, from the grounded experiment rows.

    results = index_results(rows)              # rows of vlbias.suites.grounded.jobs.run_experiments
    layout = experiment_table(results, tests, columns, "1", ["W", "S", "C"])      # Table 3
    write_layout(layout, csv=..., md=..., tex=...)

Tables 3 and 4 (experiments 1 and 2): a row per test and level (W, S, C), a column per model;
Table 5 (experiment 3, masking): a row per test and mask (T, I) at one level (the paper: S);
Table 6 (COCO / Conceptual Captions): experiments side by side, each column a model on a dataset;
Table 7: per group of tests (gender, race), how many are significant, per experiment and level/mask.
The paper puts its gender and race tests side by side; here the groups are stacked, named in the
first column. Each cell is the effect size d with its p; p < ``alpha`` is bold (Markdown, LaTeX)
and ``True`` in the CSV's ``p<alpha`` column. A column no model fills (ViLBERT, VL-BERT until they
land, a model switched off) stays empty; "–" marks a cell that does not apply (image masking on
VisualBERT, a level the test does not define); "skipped" a test that could not run (its row in
the experiment results says why).
"""

from dataclasses import dataclass, field

import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.report.tables import latex_escape, markdown_table

NA = "–"
EXPERIMENT_NAMES = {"1": "Experiment 1", "2": "Experiment 2", "3": "Experiment 3 (congruent vs. incongruent)",
                    "3-masked": "Experiment 3 (masking)"}


@dataclass(frozen=True)
class Column:
    """One column of a table: ``label`` as printed; the model (config name) and dataset whose
    results fill it (model None: the column stays empty); ``block`` an experiment heading or ""."""

    label: str
    model: str | None
    dataset: str | None
    block: str = ""
    experiment: str | None = None


@dataclass
class Layout:
    caption: str
    label: str
    index: list            # names of the index columns, e.g. ["group", "test", "level"]
    columns: list          # Column per value column
    rows: list = field(default_factory=list)  # (index values, cells) with one cell per column
    counts: bool = False   # cells are (significant, tests) counts, not (d, p)
    alpha: float = 0.05
    note: str = ""


def index_results(rows):
    """{(dataset, model, test, experiment, level, mask): row} of experiment result rows."""
    out = {}
    for r in rows:
        key = tuple(str(r[k]) for k in ("dataset", "model", "test", "experiment", "level", "mask"))
        if key in out:
            raise ValueError(f"two result rows for {key}")
        out[key] = r
    return out


def test_names(rows):
    return {str(r["test"]): str(r["name"]) for r in rows}


def _cell(results, column, test, experiment, level, mask):
    """The result row of one cell; "" when the column has no model; NA when there is no such result."""
    if column.model is None:
        return ""
    return results.get((column.dataset, column.model, test, experiment, level, mask), NA)


def experiment_table(results, tests, columns, experiment, levels, names=None, alpha=0.05, caption="", label=""):
    """Tables 3 and 4: ``tests`` [(group, test id)], a row per test × level, a column per model."""
    names = names or {}
    layout = Layout(caption, label, ["group", "test", "level"], list(columns), alpha=alpha)
    for group, test in tests:
        for level in levels:
            layout.rows.append(([group, names.get(test, test), level],
                                [_cell(results, c, test, experiment, level, "none") for c in columns]))
    return layout


def masked_table(results, tests, columns, masks, level="S", names=None, alpha=0.05, caption="", label=""):
    """Table 5: experiment 3 with masking, a row per test × mask (T, I) at ``level``."""
    names = names or {}
    layout = Layout(caption, label, ["group", "test", "mask"], list(columns), alpha=alpha)
    for group, test in tests:
        for mask in masks:
            layout.rows.append(([group, names.get(test, test), mask],
                                [_cell(results, c, test, "3-masked", level, mask) for c in columns]))
    return layout


def _block_columns(columns, experiments):
    return [Column(c.label, c.model, c.dataset, EXPERIMENT_NAMES[e], e) for e in experiments for c in columns]


def _level_mask_rows(levels, masks):
    """The paper's Tables 6 and 7 put the mask rows (T, I) beside the level rows (W, S, C)."""
    n = max(len(levels), len(masks))
    return [(levels[i] if i < len(levels) else "", masks[i] if i < len(masks) else "") for i in range(n)]


def datasets_table(results, tests, columns, experiments, levels, masks, mask_level="S", names=None, alpha=0.05,
                   caption="", label=""):
    """Table 6: experiments side by side (blocks), each column a model on its dataset; a row per
    test and level, the masking block's rows by mask (at ``mask_level``)."""
    names = names or {}
    cols = _block_columns(columns, experiments)
    layout = Layout(caption, label, ["group", "test", "level", "mask"], cols, alpha=alpha)
    for group, test in tests:
        for level, mask in _level_mask_rows(levels, masks):
            cells = []
            for c in cols:
                masked = c.experiment == "3-masked"
                at, m = (mask_level, mask) if masked else (level, "none")
                cells.append(_cell(results, c, test, c.experiment, at, m) if (mask if masked else level) else "")
            layout.rows.append(([group, names.get(test, test), level, mask], cells))
    return layout


def counts_table(results, groups, columns, experiments, levels, masks, mask_level="S", alpha=0.05, caption="",
                 label=""):
    """Table 7: per group of tests ({group: [test ids]}), the number of tests with p < ``alpha``
    out of the tests with a result, per experiment block, level (or mask) and model column."""
    cols = _block_columns(columns, experiments)
    layout = Layout(caption, label, ["group", "tests", "level", "mask"], cols, counts=True, alpha=alpha)
    for group, tests in groups.items():
        for level, mask in _level_mask_rows(levels, masks):
            cells = []
            for c in cols:
                masked = c.experiment == "3-masked"
                at, m = (mask_level, mask) if masked else (level, "none")
                if c.model is None or not (mask if masked else level):
                    cells.append("")
                    continue
                found = [_cell(results, c, t, c.experiment, at, m) for t in tests]
                ok = [r for r in found if isinstance(r, dict) and r["status"] == "ok"]
                cells.append((sum(float(r["p"]) < alpha for r in ok), len(ok)) if ok else NA)
            layout.rows.append(([group, len(tests), level, mask], cells))
    return layout


# -- rendering -----------------------------------------------------------------------------------

def _heading(c):
    return f"{c.block} {c.label}".strip()


def _value(cell, alpha):
    """(d, p, significant) of a result cell, or None when it is text (empty, NA, skipped)."""
    if not isinstance(cell, dict) or cell["status"] != "ok":
        return None
    d, p = float(cell["d"]), float(cell["p"])
    return d, p, p < alpha


def _text(cell):
    if isinstance(cell, dict):
        return "skipped"  # a result row whose status is not ok
    return cell


def to_frame(layout):
    """The CSV form: index columns, then per column ``<heading> d``, ``p``, ``p<alpha`` (results)
    or ``<heading> significant``, ``tests`` (counts); text cells ("–", "skipped") in the first."""
    records = []
    sig = f"p<{layout.alpha:g}"
    for index, cells in layout.rows:
        rec = dict(zip(layout.index, index))
        for c, cell in zip(layout.columns, cells):
            h = _heading(c)
            if layout.counts:
                k, n = cell if isinstance(cell, tuple) else (cell, "")
                rec |= {f"{h} significant": k, f"{h} tests": n}
                continue
            v = _value(cell, layout.alpha)
            rec |= ({f"{h} d": round(v[0], 4), f"{h} p": v[1], f"{h} {sig}": v[2]} if v else
                    {f"{h} d": _text(cell), f"{h} p": "", f"{h} {sig}": ""})
        records.append(rec)
    return pd.DataFrame(records)


def _p(p):
    return f"{p:.3f}" if p >= 1e-3 else f"{p:.0e}"


def _display(layout, bold):
    """Rows of display strings: d (p) per result cell, bold when p < alpha; counts as "k" or "k of n"."""
    rows = []
    for index, cells in layout.rows:
        out = [str(v) for v in index]
        for cell in cells:
            if layout.counts:
                out.append(cell if not isinstance(cell, tuple) else
                           str(cell[0]) if int(index[1]) == cell[1] else f"{cell[0]} of {cell[1]}")
                continue
            v = _value(cell, layout.alpha)
            out.append(_text(cell) if v is None else f"{bold(f'{v[0]:.2f}') if v[2] else f'{v[0]:.2f}'} ({_p(v[1])})")
        rows.append(out)
    return rows


def _note(layout):
    if layout.counts:
        return (f"Number of tests with p < {layout.alpha:g}; \"k of n\" where only n of the group's tests have a "
                "result. Empty: no model fills the column. –: does not apply.")
    return (f"Effect size d (p-value of the permutation test); bold: p < {layout.alpha:g}. Empty: no model "
            "fills the column. –: does not apply (e.g. image masking on a model never pre-trained with masked "
            "regions). skipped: the test could not run (see the rows file).")


def to_markdown(layout):
    headings = [*layout.index, *(_heading(c) for c in layout.columns)]
    df = pd.DataFrame(_display(layout, lambda s: f"**{s}**"), columns=headings)
    return markdown_table(df, layout.caption, " ".join(filter(None, [_note(layout), layout.note])))


def to_latex(layout):
    """A booktabs table with a row of experiment blocks (\\multicolumn) above the column labels."""
    n_index = len(layout.index)
    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{latex_escape(layout.caption)}}}"]
    if layout.label:
        lines.append(rf"\label{{{latex_escape(layout.label)}}}")
    lines += [rf"\begin{{tabular}}{{{'l' * n_index}{'r' * len(layout.columns)}}}", r"\toprule"]
    blocks = []
    for c in layout.columns:
        if blocks and blocks[-1][0] == c.block:
            blocks[-1][1] += 1
        else:
            blocks.append([c.block, 1])
    if any(b for b, _ in blocks):
        cells, rules, start = ["" for _ in range(n_index)], [], n_index + 1
        for block, span in blocks:
            cells.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(block)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" & ".join(cells) + r" \\", "".join(rules)]
    lines += [" & ".join(latex_escape(h) for h in [*layout.index, *(c.label for c in layout.columns)]) + r" \\",
              r"\midrule"]
    for row in _display(layout, lambda s: rf"\textbf{{{s}}}"):
        # bold markers are LaTeX already; everything else is escaped
        lines.append(" & ".join(v if v.startswith(r"\textbf{") else latex_escape(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\par\smallskip{{\footnotesize {latex_escape(' '.join(filter(None, [_note(layout), layout.note])))}}}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_layout(layout, *, csv=None, md=None, tex=None):
    """Write a paper-layout table atomically as CSV, Markdown and/or LaTeX."""
    for path, render in ((csv, None), (md, to_markdown), (tex, to_latex)):
        if not path:
            continue
        with atomic_path(path) as tmp:
            if render is None:
                to_frame(layout).to_csv(tmp, index=False)
            else:
                tmp.write_text(render(layout), encoding="utf-8")


# -- the paper's tables from a table's config ---------------------------------------------------

CAPTIONS = {
    "table3": "Experiment 1 on Google Images: do joint embeddings encode social biases? (Ross et al. 2021, Table 3)",
    "table4": "Experiment 2 on Google Images: can grounded evidence that counters a stereotype alleviate biases? "
              "(Ross et al. 2021, Table 4)",
    "table5": "Experiment 3 with masked tokens (T) and masked image regions (I), sentence-level encodings, "
              "Google Images (Ross et al. 2021, Table 5)",
    "table6": "Experiments 1, 2 and 3 (masking) on COCO and Conceptual Captions (Ross et al. 2021, Table 6)",
    "table7": "Number of significant tests per group of tests, Google Images (Ross et al. 2021, Table 7)",
}


def paper_table(spec, rows):
    """The Layout of table ``spec["table"]`` (table3 ... table7) from experiment result rows.

    ``spec``: columns [{label, model, dataset}], groups {group: [test ids]}, levels, masks (those
    computed at ``level``), level (of the masking tables), experiments (tables 6, 7), alpha, caption.
    """
    table = spec["table"]
    results, names = index_results(rows), test_names(rows)
    columns = [Column(c["label"], c["model"], c["dataset"]) for c in spec["columns"]]
    tests = [(g, t) for g, ts in spec["groups"].items() for t in ts]
    common = {"alpha": spec["alpha"], "caption": spec.get("caption") or CAPTIONS[table],
              "label": f"tab:grounded-{table}"}
    if table in ("table3", "table4"):
        return experiment_table(results, tests, columns, {"table3": "1", "table4": "2"}[table], spec["levels"],
                                names, **common)
    if table == "table5":
        return masked_table(results, tests, columns, spec["masks"], spec["level"], names, **common)
    if table == "table6":
        return datasets_table(results, tests, columns, spec["experiments"], spec["levels"], spec["masks"],
                              spec["level"], names, **common)
    if table == "table7":
        return counts_table(results, spec["groups"], columns, spec["experiments"], spec["levels"], spec["masks"],
                            spec["level"], **common)
    raise ValueError(f"unknown grounded table {table!r}; expected one of {sorted(CAPTIONS)}")
