"""Ross, Katz & Barbu (2021), Tables 3–7, in the paper's layout, from the grounded experiment rows.

    results = index_results(rows)              # rows of vlbias.suites.grounded.jobs.run_experiments
    layout = experiment_table(results, tests, columns, "1", ["W", "S", "C"])      # Table 3
    write_layout(layout, csv=..., md=..., tex=...)

Tables 3 and 4 (experiments 1 and 2): a row per test and level (W, S, C), a column per model;
Table 5 (experiment 3, masking): a row per test and mask (T, I) at one level (the paper: S);
Table 6 (COCO / Conceptual Captions): experiments side by side, each column a model on a dataset;
Table 7: per group of tests (gender, race), how many are significant, per experiment and level/mask.
The paper puts its gender and race tests side by side; here the groups are stacked, named in the
first column. Each cell is the effect size d with its p, d starred by its Holm-adjusted p within its
family (vlbias.report.layout: one column's tests of one group at one level or mask); the CSV has
that ``p Holm`` and, ``True`` where the raw p < ``alpha``, the ``p<alpha`` column that Table 7
counts as the paper did. A column no model fills (ViLBERT, VL-BERT until they
land, a model switched off) stays empty; "–" marks a cell that does not apply (image masking on
VisualBERT, a level the test does not define) or that the paper prints as "–" (our value, if any,
stays in the rows file and the comparison view); "skipped" a test that could not run (its row in
the experiment results says why). The extended tables (results/grounded/extended) add columns of
models the paper did not test (a column's ``extended``): no printed number beside them, a note
saying what their mask I is; a model that gives no grounded vector (a dual encoder) shows its
``not_applicable`` text in every cell.

With the paper's transcription (resources/published/grounded_tables.tsv, ``read_printed``) every
cell also shows the printed number, in brackets, bold where the paper highlights it
(its p < 0.05), and the CSV has ``<column> paper`` and ``<column> paper significant``;
``printed_groups`` gives each table's tests by half as printed (ABW in both halves of Tables 3
and 4). ``comparison`` lines up, per printed cell, the published number and the results of
several protocols (vlbias.suites.grounded.protocol), ``experiment3_summary`` the effect size
Section 5 quotes for experiment 3's first variant.
"""

from dataclasses import replace

import numpy as np
import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.report.formats import NA, latex_escape, markdown_table, read_published
from vlbias.report.layout import Column, Layout, cell_text, display_rows, families, layout_note, value
from vlbias.stats.adjust import add_adjusted
from vlbias.stats.row import GROUNDED, renamed
from vlbias.suites.grounded.jobs import MISSING_COLUMNS
from vlbias.suites.grounded.plan import CAPTIONS, embedding_job

DASHES = ("–", "-")  # what the paper prints where it has no number
EXPERIMENT_NAMES = {"1": "Experiment 1", "2": "Experiment 2", "3": "Experiment 3 (congruent vs. incongruent)",
                    "3-masked": "Experiment 3 (masking)"}


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
    if column.not_applicable:
        return column.not_applicable
    if column.model is None:
        return ""
    return results.get((column.dataset, column.model, test, experiment, level, mask), NA)


def _add_row(layout, index, cells, printed, keys):
    """Append a row; with the paper's cells (``printed``: {key: (value, significant)}) record the
    printed cell of each column (``keys``: its key or None) and show "–" where the paper prints one."""
    if printed is not None:
        shown = [printed.get(k) if k and c.published else None for k, c in zip(keys, layout.columns)]
        cells = [NA if p and p[0] in DASHES and c != "" else c for c, p in zip(cells, shown)]
        layout.printed = (layout.printed or []) + [shown]
    layout.rows.append((index, cells))


def experiment_table(results, tests, columns, experiment, levels, names=None, alpha=0.05, caption="", label="",
                     printed=None):
    """Tables 3 and 4: ``tests`` [(group, test id)], a row per test × level, a column per model.
    ``printed``: the paper's cells of the table (``printed_cells``), shown beside ours."""
    names = names or {}
    layout = Layout(caption, label, ["group", "test", "level"], list(columns), alpha=alpha)
    for group, test in tests:
        for level in levels:
            _add_row(layout, [group, names.get(test, test), level],
                     [_cell(results, c, test, experiment, level, "none") for c in columns], printed,
                     [(test, experiment, level, "", c.label, c.dataset) for c in columns])
    return layout


def masked_table(results, tests, columns, masks, level="S", names=None, alpha=0.05, caption="", label="",
                 printed=None):
    """Table 5: experiment 3 with masking, a row per test × mask (T, I) at ``level``."""
    names = names or {}
    layout = Layout(caption, label, ["group", "test", "mask"], list(columns), alpha=alpha)
    for group, test in tests:
        for mask in masks:
            _add_row(layout, [group, names.get(test, test), mask],
                     [_cell(results, c, test, "3-masked", level, mask) for c in columns], printed,
                     [(test, "3-masked", level, mask, c.label, c.dataset) for c in columns])
    return layout


def _block_columns(columns, experiments):
    return [replace(c, block=EXPERIMENT_NAMES[e], experiment=e) for e in experiments for c in columns]


def _level_mask_rows(levels, masks):
    """The paper's Tables 6 and 7 put the mask rows (T, I) beside the level rows (W, S, C)."""
    n = max(len(levels), len(masks))
    return [(levels[i] if i < len(levels) else "", masks[i] if i < len(masks) else "") for i in range(n)]


def datasets_table(results, tests, columns, experiments, levels, masks, mask_level="S", names=None, alpha=0.05,
                   caption="", label="", printed=None):
    """Table 6: experiments side by side (blocks), each column a model on its dataset; a row per
    test and level, the masking block's rows by mask (at ``mask_level``)."""
    names = names or {}
    cols = _block_columns(columns, experiments)
    layout = Layout(caption, label, ["group", "test", "level", "mask"], cols, alpha=alpha)
    for group, test in tests:
        for level, mask in _level_mask_rows(levels, masks):
            cells, keys = [], []
            for c in cols:
                masked = c.experiment == "3-masked"
                at, m = (mask_level, mask) if masked else (level, "none")
                on = mask if masked else level
                cells.append(_cell(results, c, test, c.experiment, at, m) if on else "")
                keys.append((test, c.experiment, at, m if masked else "", c.label, c.dataset) if on else None)
            _add_row(layout, [group, names.get(test, test), level, mask], cells, printed, keys)
    return layout


def _count(results, column, tests, experiment, level, mask, alpha):
    """(tests with p < alpha, tests with a result) of one count cell, NA when none has a result."""
    found = [_cell(results, column, t, experiment, level, mask) for t in tests]
    ok = [r for r in found if isinstance(r, dict) and r["status"] == "ok"]
    return (sum(float(r["p"]) < alpha for r in ok), len(ok)) if ok else NA


def counts_table(results, groups, columns, experiments, levels, masks, mask_level="S", alpha=0.05, caption="",
                 label="", printed=None):
    """Table 7: per group of tests ({group: [test ids]}), the number of tests with p < ``alpha``
    out of the tests with a result, per experiment block, level (or mask) and model column."""
    cols = _block_columns(columns, experiments)
    layout = Layout(caption, label, ["group", "tests", "level", "mask"], cols, counts=True, alpha=alpha)
    for group, tests in groups.items():
        for level, mask in _level_mask_rows(levels, masks):
            cells, keys = [], []
            for c in cols:
                masked = c.experiment == "3-masked"
                at, m = (mask_level, mask) if masked else (level, "none")
                if not (mask if masked else level):
                    cells.append("")
                    keys.append(None)
                    continue
                cells.append(c.not_applicable or ("" if c.model is None else
                                                  _count(results, c, tests, c.experiment, at, m, alpha)))
                keys.append((group, c.experiment, at, m if masked else "", c.label, c.dataset))
            _add_row(layout, [group, len(tests), level, mask], cells, printed, keys)
    return layout


# -- rendering -----------------------------------------------------------------------------------

def _heading(c):
    return f"{c.block} {c.label}".strip()


def to_frame(layout):
    """The CSV form: index columns, then per column ``<heading> d``, ``p``, ``p Holm`` (adjusted within
    its family, vlbias.report.layout.families: what the stars mark) and ``p<alpha`` (raw p, what Table
    7 counts) (results) or ``<heading> significant``, ``tests`` (counts); text cells ("–", "skipped") in
    the first."""
    records = []
    sig = f"p<{layout.alpha:g}"
    adjusted = {} if layout.counts else families(layout)
    for i, (index, cells) in enumerate(layout.rows):
        rec = dict(zip(layout.index, index))
        for j, (c, cell) in enumerate(zip(layout.columns, cells)):
            h = _heading(c)
            if layout.counts:
                k, n = cell if isinstance(cell, tuple) else (cell, "")
                rec |= {f"{h} significant": k, f"{h} tests": n}
            else:
                v = value(cell)
                rec |= ({f"{h} d": round(v[0], 4), f"{h} p": v[1], f"{h} p Holm": adjusted[(i, j)],
                         f"{h} {sig}": v[1] < layout.alpha} if v else
                        {f"{h} d": cell_text(cell), f"{h} p": "", f"{h} p Holm": "", f"{h} {sig}": ""})
            if layout.printed is not None and c.published:
                shown, significant = layout.printed[i][j] or ("", "")
                rec |= {f"{h} paper": shown, f"{h} paper significant": significant}
        records.append(rec)
    return pd.DataFrame(records)


def to_markdown(layout):
    headings = [*layout.index, *(_heading(c) for c in layout.columns)]
    df = pd.DataFrame(display_rows(layout, lambda s: f"**{s}**"), columns=headings)
    return markdown_table(df, layout.caption, " ".join(filter(None, [layout_note(layout), layout.note])))


def to_latex(layout):
    """A booktabs table with a row of experiment blocks (\\multicolumn) above the column labels."""
    n_index = len(layout.index)
    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{latex_escape(layout.caption)}}}"]
    if layout.label:
        lines.append(rf"\label{{{latex_escape(layout.label)}}}")
    lines += [rf"\begin{{tabular}}{{{'l' * n_index}{'r' * len(layout.columns)}}}", r"\toprule"]
    blocks = layout.blocks()
    if any(b for b, _ in blocks):
        cells, rules, start = ["" for _ in range(n_index)], [], n_index + 1
        for block, span in blocks:
            cells.append(rf"\multicolumn{{{span}}}{{c}}{{{latex_escape(block)}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + span - 1}}}")
            start += span
        lines += [" & ".join(cells) + r" \\", "".join(rules)]
    lines += [" & ".join(latex_escape(h) for h in [*layout.index, *(c.label for c in layout.columns)]) + r" \\",
              r"\midrule"]
    for row in display_rows(layout, lambda s: f"\x02{s}\x03"):
        # the highlight is marked with control characters, made LaTeX after escaping the text
        lines.append(" & ".join(latex_escape(v).replace("\x02", r"\textbf{").replace("\x03", "}") for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\par\smallskip{{\footnotesize {latex_escape(' '.join(filter(None, [layout_note(layout), layout.note])))}}}",
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



def paper_table(spec, rows, printed=None):
    """The Layout of table ``spec["table"]`` (table3 ... table7) from experiment result rows.

    ``spec``: columns [{label, model, dataset}], groups {group: [test ids]}, levels, masks (those
    computed at ``level``), level (of the masking tables), experiments (tables 6, 7), alpha, caption.
    ``printed``: the paper's transcription (``read_printed``), shown beside our numbers.
    """
    table = spec["table"]
    results, names = index_results(rows), test_names(rows)
    columns = [Column(c["label"], c["model"], c["dataset"], not_applicable=c.get("not_applicable"),
                      published=not c.get("extended")) for c in spec["columns"]]
    tests = [(g, t) for g, ts in spec["groups"].items() for t in ts]
    caption = spec.get("caption") or CAPTIONS[table]
    added = [c.label for c in columns if not c.published]
    if added:
        caption += f"; extended with {', '.join(added)}"
    common = {"alpha": spec["alpha"], "caption": caption,
              "label": f"tab:grounded-{table}" + ("-extended" if added else ""),
              "printed": None if printed is None else printed_cells(printed, table)}
    layout = _paper_layout(table, spec, results, names, tests, columns, common)
    if added:
        layout.note = EXTENDED_NOTE.format(columns=", ".join(added)) + "".join(
            f" {c.not_applicable}: {c.label} embeds images and texts apart; it gives no caption-and-image vector."
            for c in columns if c.not_applicable)
    return layout


def protocol_caption(spec):
    """A table's caption (its config's, or the paper's) and the protocol it was computed under, with
    its switches."""
    switches = ", ".join(f"{k} {v}" for k, v in spec["switches"].items())
    return f"{spec['caption'] or CAPTIONS[spec['table']]}. Protocol '{spec['protocol']}': {switches}"


def _read(path, **kwargs):
    return pd.read_csv(path, dtype=str, keep_default_na=False, **kwargs)


def read_rows(paths, tests):
    """The experiment rows (vlbias.stats.row.GROUNDED, as text) of ``tests`` in the experiment CSVs
    ``paths``: an experiment job covers every table's tests of its dataset. Columns of older names are
    read as today's (vlbias.stats.row.renamed)."""
    rows = pd.concat([renamed(_read(p)) for p in paths] or [pd.DataFrame(columns=GROUNDED.columns)],
                     ignore_index=True)
    return rows[rows["test"].isin(tests)]


def read_left_out(paths, tests):
    """The pairs of ``tests`` the embedding jobs left out (their missing.tsv, ``paths``), each named by
    its job's dataset and model."""
    parts = [_read(p, sep="\t", comment="#").assign(dataset=embedding_job(p)[1], model=embedding_job(p)[2])
             for p in paths]
    left_out = pd.concat(parts or [pd.DataFrame(columns=MISSING_COLUMNS)], ignore_index=True)
    return left_out[left_out["test"].isin(tests)].reindex(columns=["dataset", "model", *MISSING_COLUMNS])


EXTENDED_NOTE = ("{columns}: models the paper did not test (this project's extension; no printed numbers). A model "
                 "that reads pixels, not regions, has mask I as the pixel fill: the boxes of the regions masked "
                 "painted with its processor's mean colour, not the paper's region masking (docs/grounded.md).")


def _paper_layout(table, spec, results, names, tests, columns, common):
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


# -- the paper's printed numbers ------------------------------------------------------------------

def read_printed(path):
    """The transcription of the paper's Tables 3-7 (resources/published/grounded_tables.tsv) as rows."""
    return read_published(path).to_dict("records")


def _printed_key(r):
    return (r["half"] if r["table"] == "table7" else r["test"], r["experiment"], r["level"], r["mask"], r["model"],
            r["dataset"])


def printed_cells(printed, table):
    """{(test, or the half in Table 7; experiment; level; mask or ""; model column; dataset): (value as
    printed, significant yes/no/"")} of one table. ABW, printed in both halves, is one cell."""
    return {_printed_key(r): (r["value"], r["significant"]) for r in printed if r["table"] == table}


def printed_groups(printed, table):
    """{half: [test ids]} of one table in the paper's order (ABW in both halves of Tables 3 and 4)."""
    groups = {}
    for r in printed:
        if r["table"] == table and r["test"] and r["test"] not in groups.setdefault(r["half"], []):
            groups[r["half"]].append(r["test"])
    return groups


def experiment3_summary(rows, alpha=0.05, dataset="google"):
    """What Section 5 quotes for experiment 3's first variant ("s=0.42 for ViLBERT and s=0.467 for
    VisualBERT with 12% of tests being statistically significant"): per model column the mean of
    the effect size ½(|d_x| + |d_y|) over the tests and levels of ``dataset``, and over all of them
    the share with p < ``alpha``. The paper does not say how it averaged; this is the plain mean.
    Returns {column: (mean d, tests)} and the share (NaN without results)."""
    ok = [r for r in rows if r["experiment"] == "3" and r["status"] == "ok" and r["dataset"] == dataset]
    by = {}
    for r in ok:
        by.setdefault(r["column"], []).append(float(r["d"]))
    share = float(np.mean([float(r["p"]) < alpha for r in ok])) if ok else float("nan")
    return {c: (float(np.mean(ds)), len(ds)) for c, ds in by.items()}, share


def comparison(printed, protocols, alpha=0.05, groups=None):
    """Per printed cell: the published number and each protocol's, side by side (a DataFrame).

    ``protocols``: {name: experiment result rows (with their ``column``, the model's table column)},
    e.g. {"authors": ..., "paper": ...}. Effect-size cells get ``<name> d`` and ``<name> p``; Table 7's
    count cells ``<name>`` (tests with p < alpha, of the half's tests in ``groups``, default the
    halves of Table 5, which has Table 7's 6 gender and 7 race tests); Section 5's numbers the
    protocol's ``experiment3_summary``.
    """
    groups = groups or printed_groups(printed, "table5")
    indexed = {}
    for name, rows in protocols.items():
        indexed[name] = {(r["dataset"], r["column"], r["test"], r["experiment"], r["level"],
                          r["mask"] if r["experiment"] == "3-masked" else ""): r for r in rows}
    summaries = {name: experiment3_summary(rows, alpha) for name, rows in protocols.items()}
    records = []
    for p in printed:
        rec = {k: p[k] for k in ("table", "half", "test", "label", "experiment", "level", "mask", "model", "dataset",
                                 "quantity")} | {"printed": p["value"], "printed significant": p["significant"]}
        for name, results in indexed.items():
            if p["table"] == "text":
                means, share = summaries[name]
                rec[f"{name} d"] = share if p["quantity"] == "share" else means.get(p["model"], (float("nan"),))[0]
                continue
            if p["quantity"] == "count":
                found = [results.get((p["dataset"], p["model"], t, p["experiment"], p["level"], p["mask"]))
                         for t in groups.get(p["half"], [])]
                ok = [r for r in found if r and r["status"] == "ok"]
                rec[name] = sum(float(r["p"]) < alpha for r in ok) if ok else ""
                continue
            r = results.get((p["dataset"], p["model"], p["test"], p["experiment"], p["level"], p["mask"]))
            ok = r is not None and r["status"] == "ok"
            rec |= {f"{name} d": float(r["d"]) if ok else "", f"{name} p": float(r["p"]) if ok else ""}
        records.append(rec)
    return pd.DataFrame(records)


# -- the suite's figures (vlbias.report.figures) -------------------------------------------------

def figure_rows(rows, printed=None, columns=(), levels=(), groups=None):
    """Experiment result rows (vlbias.stats.row.GROUNDED) as the rows of the suite
    figures. ``heatmap``: the unmasked experiment-1 results in Table 3's layout, a row (``test``,
    ``name``) per test and level ("Toy toy-a W"), a column (``model``) per table column (with the
    dataset when there are several); tests in their order of appearance, levels in the order of
    ``levels`` and columns of ``columns`` (the tables'; others after them); ``p_holm`` adjusted as Table
    3 adjusts it, within one column's tests of one group (``groups``: {group: [test ids]}, Table 3's; a
    test in two groups counts in its first) at one level, so the heatmap stars what Table 3 does. ``published``: every
    result the paper prints an effect size for (``read_printed``), ``d_paper`` the printed number and
    ``table`` the paper's table it is in (its dashes left out), sorted by table. Returns (heatmap,
    published) DataFrames."""
    df = pd.DataFrame(rows, columns=None if rows else ["dataset", "test", "name", "column", "experiment", "level",
                                                        "mask", "status", "d", "p"])
    df = df.astype({"mask": str, "experiment": str}).assign(mask=lambda x: x["mask"].replace({"none": ""}))
    rank = {"column": {c: i for i, c in enumerate(columns)}, "level": {lv: i for i, lv in enumerate(levels)},
            "test": {t: i for i, t in enumerate(dict.fromkeys(df["test"]))}}
    df = df.sort_values(["column", "test", "level"], kind="stable",
                        key=lambda s: s.map(rank[s.name]).fillna(len(rank[s.name])))
    several = df["dataset"].nunique() > 1
    unmasked = df[(df["experiment"] == "1") & (df["mask"] == "")]
    group = {t: g for g, tests in reversed(list((groups or {}).items())) for t in tests}
    unmasked = add_adjusted(unmasked.assign(group=[group.get(t, "") for t in unmasked["test"]]),
                            family=("dataset", "column", "group", "level")).drop(columns=["group", "p_bh"])
    heatmap = unmasked.assign(test=unmasked["test"] + " " + unmasked["level"],
                              name=unmasked["name"] + " " + unmasked["level"],
                              model=unmasked["column"] + ((" (" + unmasked["dataset"] + ")") if several else ""))
    if printed is None:
        return heatmap, df.iloc[:0].assign(table="", d_paper=np.nan)
    paper = pd.DataFrame(printed)
    paper = paper[(paper["quantity"] == "d") & ~paper["value"].isin(DASHES)]
    paper = paper.assign(d_paper=pd.to_numeric(paper["value"]), mask=paper["mask"].fillna(""), column=paper["model"])
    paper = paper.drop_duplicates(["table", "test", "experiment", "level", "mask", "column", "dataset"])
    keys = ["test", "experiment", "level", "mask", "column", "dataset"]
    published = df.merge(paper[[*keys, "table", "d_paper"]], on=keys).sort_values("table", kind="stable")
    name = published["name"] + " " + published["level"] + " " + published["mask"]
    published = published.assign(model=published["column"], name=name.str.strip())
    return heatmap, published
