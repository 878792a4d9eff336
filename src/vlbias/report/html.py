"""Results tables and figures as HTML, for the report.

    results_table_html(rows, caption)        # rows of report.tables.assemble, in the papers' layout
    layout_html(layout)                      # a grounded paper-layout table (report.layout.Layout)
    table_html(df, caption)                  # any table, a row per row of the DataFrame
    figure_html("heatmap.png", caption)      # an inline figure
    figure_page("heatmap.png", "heatmap.html", caption)   # a page of a figure (the report's view of it)
    write_page("report/ieat.html", "iEAT", [table, figure, ...])    # one standalone page

Every text from a table (test names, set labels, a skipped test's reason) is escaped.
"""

import base64
import html
import math
import re
from pathlib import Path

import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.report.formats import (FAMILY, NA, NOT_COMPUTED, RESULTS_P_DIGITS, format_p, significance_note, stars,
                                   text)
from vlbias.report.layout import display_rows, layout_note

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table.vlbias { border-collapse: collapse; margin: 1em 0 0.3em; font-size: 13px; }
table.vlbias caption { caption-side: top; text-align: left; font-weight: 600; padding-bottom: 0.4em; }
table.vlbias th, table.vlbias td { padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; vertical-align: top; }
table.vlbias td { overflow-wrap: break-word; }
table.vlbias thead th { border-bottom: 1px solid #666; text-align: center; }
table.vlbias td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; overflow-wrap: normal; }
table.vlbias .sub { display: block; font-size: 85%; color: #555; }
table.vlbias .skipped { color: #888; font-style: italic; }
table.vlbias .paper { color: #555; }
p.vlbias-note { font-size: 85%; color: #444; max-width: 70em; margin-top: 0; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; }
figcaption { font-size: 90%; color: #333; max-width: 70em; }
"""


def _e(value):
    return html.escape(text(value))


def _breakable(value):
    """Escaped text with a line-break opportunity inside CamelCase words ("Incompetent<wbr>Not...") and
    after "_" or "/", so a label such as IncompetentNotAchievementOriented or my_own_words wraps between
    its words; never inside a word ("Plea|sant": the cells' CSS breaks only a word wider than the page)."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[_/])(?=\w)", "<wbr>", _e(value))


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _same(values):
    """One value where all agree, else all of them, "/"-separated in order (e.g. sizes per model)."""
    values = [str(int(v)) if isinstance(v, float) and v.is_integer() else str(v) for v in values if str(v) != ""]
    return "/".join(dict.fromkeys(values)) if len(set(values)) > 1 else (values[0] if values else "")


def results_table_html(rows, caption, note=None, family=FAMILY):
    """A results table (DataFrame of report.tables.assemble) in the papers' layout: a row per test
    with its sets and sizes, then per model its d (bold and starred by its Holm-adjusted p over
    ``family``) and p, and the paper's d and p where the table has them. Sizes that differ between
    models are shown "/"-separated in model order."""
    tests = list(dict.fromkeys(rows["test"]))
    models = list(dict.fromkeys(rows["model"]))
    by = {(r["test"], r["model"]): r for r in rows.to_dict("records")}
    has_ci = "d_low" in rows and pd.to_numeric(rows["d_low"], errors="coerce").notna().any()
    has_holm = "p_holm" in rows and pd.to_numeric(rows["p_holm"], errors="coerce").notna().any()
    has_paper = "d_paper" in rows and (rows["d_paper"].astype(str) != "").any()
    per_model = ["d", "p", *(["d paper", "p paper"] if has_paper else [])]
    index = ["Test", "X", "Y", "A", "B", "n_x", "n_a"]

    out = ['<table class="vlbias">', f"<caption>{_e(caption)}</caption>", "<thead>", "<tr>"]
    out += [f'<th rowspan="2">{h}</th>' for h in index]
    out += [f'<th colspan="{len(per_model)}">{_e(m)}</th>' for m in models]
    out += ["</tr>", "<tr>", *(f"<th>{h}</th>" for _ in models for h in per_model), "</tr>", "</thead>", "<tbody>"]
    for test in tests:
        found = [by[(test, m)] for m in models if (test, m) in by]
        first = found[0]
        cells = [_breakable(first.get("name", test)), *(_breakable(first.get(s, "")) for s in "XYAB"),
                 *(_e(_same([r.get(n, "") for r in found])) for n in ("n_x", "n_a"))]
        out.append("<tr>" + "".join(f"<td>{c}</td>" if i < 5 else f'<td class="num">{c}</td>'
                                    for i, c in enumerate(cells)))
        for model in models:
            r = by.get((test, model))
            if r is None:
                out.append("<td></td>" * len(per_model))
                continue
            if r["status"] != "ok":
                out.append(f'<td class="num skipped" title="{_e(r["status"])}">skipped</td><td></td>')
            else:
                d, p, mark = _float(r["d"]), _float(r["p"]), stars(_float(r.get("p_holm")))
                d_text = f"<strong>{d:.2f}</strong>{mark}" if mark else f"{d:.2f}"
                if has_ci and not math.isnan(_float(r.get("d_low"))):
                    d_text += f'<span class="sub">[{_float(r["d_low"]):.2f}, {_float(r["d_high"]):.2f}]</span>'
                p_text = format_p(p, RESULTS_P_DIGITS)
                if has_holm and not math.isnan(_float(r.get("p_holm"))):
                    p_text += f'<span class="sub">Holm {format_p(_float(r["p_holm"]), RESULTS_P_DIGITS)}</span>'
                out.append(f'<td class="num">{d_text}</td><td class="num">{p_text}</td>')
            if has_paper:
                out.append(f'<td class="num paper">{_e(r.get("d_paper"))}</td>'
                           f'<td class="num paper">{_e(r.get("p_paper"))}</td>')
        out.append("</tr>")
    out += ["</tbody>", "</table>"]
    if note is None:
        levels = {_float(v) for v in rows.get("ci_level", []) if not math.isnan(_float(v))}
        level = f"{100 * levels.pop():g} %" if len(levels) == 1 else "confidence"
        note = " ".join([
            "d: effect size (sample std, ddof=1), bold and starred where significant"
            + (f"; below it, its {level} bootstrap interval." if has_ci else "."),
            "p: one-sided permutation p"
            + (f"; below it, the Holm-adjusted p over {family}." if has_holm else "."),
            f"{significance_note(family)}.",
            *(["paper: the published values as printed."] if has_paper else []),
            "skipped: the test could not run (hover for the reason).",
        ])
    return "\n".join(out) + f'\n<p class="vlbias-note">{_e(note)}</p>\n'


def layout_html(layout):
    """A grounded paper-layout table (report.layout.Layout) as HTML: a row of experiment blocks
    above the column labels where the columns have blocks; d starred by its Holm-adjusted p, the
    paper's printed number bold where the paper highlights it."""
    n_index = len(layout.index)
    out = ['<table class="vlbias">', f"<caption>{_e(layout.caption)}</caption>", "<thead>"]
    blocks = layout.blocks()
    if any(b for b, _ in blocks):
        out.append("<tr>" + f'<th colspan="{n_index}"></th>' +
                   "".join(f'<th colspan="{span}">{_e(block)}</th>' for block, span in blocks) + "</tr>")
    out.append("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in layout.index) +
               "".join(f"<th>{_e(c.label)}</th>" for c in layout.columns) + "</tr>")
    out += ["</thead>", "<tbody>"]
    # bold is marked with control characters, replaced by tags after escaping the text
    for row in display_rows(layout, lambda s: f"\x02{s}\x03"):
        cells = [_e(v).replace("\x02", "<strong>").replace("\x03", "</strong>") for v in row]
        out.append("<tr>" + "".join(f"<td>{c}</td>" if i < n_index else f'<td class="num">{c}</td>'
                                    for i, c in enumerate(cells)) + "</tr>")
    out += ["</tbody>", "</table>"]
    note = " ".join(filter(None, [layout_note(layout), layout.note]))
    return "\n".join(out) + f'\n<p class="vlbias-note">{_e(note)}</p>\n'


def _numbers(column):
    """Whether a column holds numbers, as numbers or as text (rounded for display; "n/a", "–" and
    empty cells aside)."""
    if pd.api.types.is_numeric_dtype(column):
        return True
    shown = column.astype(str).str.strip()
    shown = shown[~shown.isin(["", NOT_COMPUTED, NA, "nan", "<NA>"])]
    return len(shown) > 0 and pd.to_numeric(shown, errors="coerce").notna().all()


def table_html(df, caption, note=""):
    """Any table (a DataFrame) as HTML: a header row of its columns, a row per row; numbers
    right-aligned, missing values empty."""
    numeric = [_numbers(df[c]) for c in df.columns]
    out = ['<table class="vlbias">', f"<caption>{_e(caption)}</caption>", "<thead>",
           "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in df.columns) + "</tr>", "</thead>", "<tbody>"]
    for row in df.itertuples(index=False):
        out.append("<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if num else f"<td>{_e(v)}</td>"
                                    for v, num in zip(row, numeric)) + "</tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out) + "\n" + (f'<p class="vlbias-note">{_e(note)}</p>\n' if note else "")


def figure_html(src, caption, alt=None):
    """An inline figure: the image at ``src`` (a path relative to the page) with its caption."""
    return (f'<figure><img src="{_e(src)}" alt="{_e(alt or caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>\n")


def figure_page(png, path, caption):
    """Write ``path``, a page of the PNG ``png`` (inlined) under ``caption``: how the report shows a tall
    figure from its top (it centres a bare image in its window, cutting off the top of one taller)."""
    write_page(path, caption, [figure_html(png_data_uri(png), caption)], heading=False)


def png_data_uri(path):
    """The PNG at ``path`` as a data URI: a figure a page carries inside itself (it shows wherever the
    page is opened, in the Snakemake report too)."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def page_html(title, parts, heading=True):
    """A standalone HTML page: ``title`` (as heading too, unless ``heading`` is false: a page of one
    captioned table), then the HTML ``parts`` in order."""
    h1 = f"<h1>{_e(title)}</h1>\n" if heading else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{_e(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n{h1}" + "".join(parts) + "</body>\n</html>\n")


def write_page(path, title, parts, heading=True):
    """Write ``page_html(title, parts, heading)`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(page_html(title, parts, heading), encoding="utf-8")
