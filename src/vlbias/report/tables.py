"""Results tables: rows of :mod:`vlbias.associate` in a paper's layout, as CSV and Markdown;
any table as CSV, Markdown and LaTeX (vlbias.report.formats) and an HTML page."""

import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.report.formats import (FAMILY, RESULTS_P_DIGITS, format_p, latex_table, markdown_table, missing,
                                   significance_note, stars)
from vlbias.report.html import results_table_html, table_html, write_page
from vlbias.stats.adjust import add_adjusted
from vlbias.stats.row import ASSOCIATION

# A results table: the rows' columns with the adjusted p-values after p.
_ROW = ASSOCIATION.columns
TABLE_COLUMNS = [*_ROW[: _ROW.index("p") + 1], "p_holm", "p_bh", *_ROW[_ROW.index("p") + 1 :]]


def published_as(published, paper):
    """The published rows for every model of ``paper`` ({model: the published model whose printed numbers
    its rows show}, e.g. {"igpt-l/layer20": "igpt"}): a recomputed column beside the published one."""
    parts = [published[published["model"] == source].assign(model=model) for model, source in paper.items()]
    return pd.concat(parts, ignore_index=True) if parts else published.iloc[:0]


def assemble(rows, tests, models, published=None, table=None):
    """Order result rows by the table's tests, then models; add the Holm and Benjamini–Hochberg
    adjusted p (the family: one model's tests of one stimulus family in this table, skipped tests
    left out: one's own tests never shift a paper's, vlbias.io.stimuli.OWN) and the paper's d and p
    beside ours."""
    df = ASSOCIATION.frame(rows)
    order = {(t, m): i for i, (t, m) in enumerate((t, m) for t in tests for m in models)}
    df = df.assign(_o=[order[(t, m)] for t, m in zip(df["test"], df["model"])]).sort_values("_o")
    df = add_adjusted(df.drop(columns="_o").reset_index(drop=True), family=("model", "family"))[TABLE_COLUMNS]
    if published is not None:
        pub = published if table is None else published[published["table"] == table]
        pub = pub[["test", "model", "d", "p"]].rename(columns={"d": "d_paper", "p": "p_paper"})
        df = df.merge(pub, on=["test", "model"], how="left")
        df[["d_paper", "p_paper"]] = df[["d_paper", "p_paper"]].fillna("")
    return df


def _fmt_p(p, se=None, exact=True):
    if missing(p):
        return ""
    shown = format_p(p, RESULTS_P_DIGITS)
    return shown if exact else f"{shown} ± {format_p(se, RESULTS_P_DIGITS)}"


_METHOD = {"bca": "BCa", "percentile": "percentile"}


def _ci_level(df):
    """How the table's intervals are headed ("95 % CI"; "CI" when their levels differ: see column
    ci_level), or None when it has none."""
    if "d_low" not in df or pd.to_numeric(df["d_low"], errors="coerce").isna().all():
        return None
    levels = set(pd.to_numeric(df["ci_level"], errors="coerce").dropna())
    return f"{100 * levels.pop():g} % CI" if len(levels) == 1 else "CI"


def to_markdown(df, caption):
    """A readable Markdown table: effect sizes to 2 decimals (the papers' precision) starred by their
    Holm-adjusted p (vlbias.report.formats.stars) with their confidence interval when computed, p with
    its Monte-Carlo error when sampled, the Holm and Benjamini–Hochberg adjusted p; skipped tests say why."""
    ci = _ci_level(df)
    head = ["Test", "Model", "X", "Y", "A", "B", "n_x", "n_a", "d" if ci is None else f"d [{ci}]", "p", "p Holm",
            "p BH"]
    has_paper = "d_paper" in df.columns
    if has_paper:
        head += ["d (paper)", "p (paper)"]
    lines = [f"**{caption}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.itertuples(index=False):
        ok = r.status == "ok"
        d = f"{r.d:.2f}{stars(r.p_holm)}" if ok else "–"
        if ok and ci is not None and not missing(r.d_low):
            d += f" [{r.d_low:.2f}, {r.d_high:.2f}]"
        cells = [r.name, r.model, r.X, r.Y, r.A, r.B, _int(r.n_x), _int(r.n_a), d,
                 _fmt_p(r.p, r.p_se, r.exact) if ok else r.status, _fmt_p(r.p_holm), _fmt_p(r.p_bh)]
        if has_paper:
            cells += [r.d_paper, r.p_paper]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    methods = set(df["ci_method"].dropna())
    method = _METHOD.get(methods.pop(), "") if len(methods) == 1 else ""
    note = "d: effect size (sample std, ddof=1)" + (
        "." if ci is None else
        f"; in brackets its {ci.removesuffix('CI')}{method + ' ' if method else ''}bootstrap confidence interval "
        "(stimuli resampled within each set).")
    note += (" p: one-sided permutation p; exact over all partitions, or sampled with its Monte-Carlo standard "
             f"error. p Holm, p BH: p adjusted over {FAMILY} (Holm: family-wise error; Benjamini–Hochberg: false "
             f"discovery rate). {significance_note(FAMILY)}.")
    return "\n".join([*lines, "", note]) + "\n"


def effects_grid(df):
    """Tests (rows, by name, in order) x models (columns, in order): "d" with the stars of its
    Holm-adjusted p, "skipped" where the test was skipped, empty where there is no row."""
    cells = {(r.test, r.model): f"{r.d:.2f}{stars(r.p_holm)}" if r.status == "ok" else "skipped"
             for r in df.itertuples(index=False)}
    names = dict(zip(df["test"], df["name"]))
    models = list(dict.fromkeys(df["model"]))
    return pd.DataFrame([[name, *(cells.get((t, m), "") for m in models)] for t, name in names.items()],
                        columns=["test", *models])


def _int(x):
    return "" if missing(x) else int(x)


def write_table(df, csv_path, md_path, caption, html_path=None):
    """A results table (``assemble``) as CSV, Markdown and, with ``html_path``, a page of its HTML
    table in the papers' layout (vlbias.report.html.results_table_html)."""
    with atomic_path(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(to_markdown(df, caption), encoding="utf-8")
    if html_path:
        write_page(html_path, caption, [results_table_html(df, caption)], heading=False)


def missing_inputs(stimuli, image_status, models):
    """Images a table's tests should have used but could not, per image-computed model.

    ``image_status`` are the rows of the image store's manifest (category, file, status,
    reason); every row whose status is not "ok" and whose category a test uses is listed.
    """
    bad = [r for r in image_status if r["status"] != "ok"]
    return [
        {"model": m, "test": st.id, "set": s, "category": r["category"], "file": r["file"],
         "status": r["status"], "reason": r["reason"]}
        for m in models for st in stimuli for s, ss in st.sets.items()
        for r in bad if r["category"] == ss.category
    ]


def write_tables(df, caption, *, csv=None, md=None, tex=None, html=None, label=None, note=""):
    """Write ``df`` atomically as CSV, Markdown, LaTeX and/or a page of its HTML table (whichever
    paths are given)."""
    if csv:
        with atomic_path(csv) as tmp:
            df.to_csv(tmp, index=False)
    if md:
        with atomic_path(md) as tmp:
            tmp.write_text(markdown_table(df, caption, note), encoding="utf-8")
    if tex:
        with atomic_path(tex) as tmp:
            tmp.write_text(latex_table(df, caption, label, note), encoding="utf-8")
    if html:
        write_page(html, caption, [table_html(df, caption, note)], heading=False)
