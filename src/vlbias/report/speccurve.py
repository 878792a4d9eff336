"""The specification curve of one test on one model (Simonsohn, Simmons & Nelson 2020, Fig. 2): d of
every specification sorted, with its interval, on top; beneath, the specification matrix, a mark for
each axis value a specification takes. Rows of vlbias.robustness.run's curve.

    plot_curve(curve[(curve.test == "weat6") & (curve.model == "minilm")], "weat6.png", "WEAT 6 on minilm")
"""

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vlbias.report.figures import save_png

AXES = ("template", "casing", "pooling", "layer", "crop", "resample", "decoder", "draw", "perm_seed")


def matrix_rows(curve):
    """[(axis, value)]: the matrix's rows, the axes that take more than one value in ``curve``, each
    value as the rows write it (the default's "" as "default")."""
    rows = []
    for axis in AXES:
        values = list(dict.fromkeys(curve[axis].astype(str))) if axis in curve else []
        if len(values) > 1:
            rows += [(axis, v) for v in values]
    return rows


def plot_curve(curve, path, title, alpha=0.05):
    """Draw the specification curve of ``curve`` (one test × model's rows) to ``path`` (PNG): filled
    points Holm-significant at ``alpha``, the default in red. Returns the figure."""
    ok = curve[curve["status"] == "ok"].copy()
    ok["d"] = pd.to_numeric(ok["d"], errors="coerce")
    rows = matrix_rows(ok)  # in the specifications' order: each axis's default value first
    ok = ok.sort_values("d", kind="stable").reset_index(drop=True)
    x = np.arange(len(ok))
    fig = Figure(figsize=(max(6, 0.12 * len(ok) + 2), 3 + 0.22 * len(rows)), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, max(1, 0.3 * len(rows))])
    low, high = (pd.to_numeric(ok.get(c, pd.Series(np.nan, index=ok.index)), errors="coerce") for c in
                 ("d_low", "d_high"))
    if low.notna().any():
        top.vlines(x, low, high, color="#9a9a9a", linewidth=1)
    significant = pd.to_numeric(ok["p_holm"], errors="coerce") < alpha
    default = ok["default"].astype(bool)
    for mask, face, label in ((significant, "#3b75af", f"Holm p < {alpha:g}"), (~significant, "white", "not")):
        top.scatter(x[mask & ~default], ok["d"][mask & ~default], s=18, facecolor=face, edgecolor="#3b75af", zorder=3,
                    label=label)
    top.scatter(x[default], ok["d"][default], s=36, color="#c53a32", zorder=4, label="default")
    top.axhline(0, color="black", linewidth=0.6)
    top.set_ylabel("effect size d")
    top.set_title(title)
    top.legend(loc="upper left", frameon=False)
    for i, (axis, value) in enumerate(rows):
        taken = ok[axis].astype(str) == value
        bottom.scatter(x[taken], np.full(taken.sum(), i), s=10, color="black", marker="s")
    bottom.set_yticks(range(len(rows)), [f"{a}: {v or 'default'}" for a, v in rows], fontsize=7)
    bottom.set_ylim(len(rows) - 0.5, -0.5)
    bottom.set_xlabel("specifications, by d")
    save_png(fig, path, tight=False)
    return fig


def write_robustness(table, curve, twins, caption, *, csv, md, html, specifications, curves, alpha=0.05):
    """The outputs of a suite's curves: the summary ``table`` (vlbias.robustness.summary) as CSV, Markdown
    and a page with every curve's figure; every specification's and twin's row (column ``twin``) in
    ``specifications``; a figure per model and test, ``<curves>/<model>/<test>.png``."""
    from vlbias.io.atomic import atomic_path
    from vlbias.report.html import figure_html, png_data_uri, table_html, write_page
    from vlbias.report.tables import write_tables

    write_tables(table, caption, csv=csv)
    shown = table.round(3)  # the CSV keeps every digit
    write_tables(shown, caption, md=md, note=ROBUST_NOTE)
    with atomic_path(specifications) as tmp:
        pd.concat([curve.assign(twin=False), twins.assign(twin=True)], ignore_index=True).to_csv(tmp, index=False)
    figures = []
    for (test, model), rows in curve.groupby(["test", "model"], sort=False):
        path = Path(curves, str(model), f"{test}.png")
        plot_curve(rows, path, f"{rows['name'].iloc[0]} on {model}", alpha=alpha)
        figures.append(figure_html(png_data_uri(path), f"{test} on {model}: d by specification"))
    write_page(html, caption, [table_html(shown, caption, ROBUST_NOTE), *figures], heading=False)


ROBUST_NOTE = ("robust: at least the sign_share threshold of specifications give the default's sign, and the "
               "random-init twins' empirical p (twins_p) is below alpha; empty without twins")
