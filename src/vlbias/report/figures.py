"""Figures of the association tests' results tables (rows of vlbias.associate, as assembled by
vlbias.report.tables.assemble).

    rows = suite_rows({"table1": df1, "table2": df2})                  # one suite's tables as one
    plot_suite_heatmap(rows, "heatmap.png", "iEAT")                     # tests × models, d, stars
    plot_published_vs_reproduced(rows, "published.png", "iEAT")        # d_paper against d per table

Figures are drawn on a bare matplotlib Figure (no pyplot state, no display: the Agg canvas) and
written atomically as PNG.
"""

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from vlbias.io.atomic import atomic_path
from vlbias.report.formats import FAMILY, significance_note, stars
MODEL_COLOURS = ["#3b75af", "#d9822b", "#519e3e", "#c53a32", "#8d69b8", "#84584e", "#d57fbe", "#7f7f7f"]


def save_png(fig, path, dpi=150, tight=True):
    """Write ``fig`` to ``path`` as PNG, atomically; ``tight``: cropped to what is drawn (a second draw of
    the figure; a constrained layout that fits its labels needs none)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight" if tight else None)


def _numeric(series):
    return pd.to_numeric(series, errors="coerce").astype(float)


def _ok(rows):
    return rows["status"].astype(str) == "ok"


def suite_rows(tables):
    """The rows of one suite's results tables ({table name: DataFrame}) as one DataFrame for its
    figures, each row with its table's name in column ``table``. A (test, model) in several tables
    (the same test on the same model twice) is named "<model> (<table>)", so each keeps its cell."""
    rows = pd.concat([df.assign(table=name) for name, df in tables.items()], ignore_index=True)
    twice = rows.duplicated(["test", "model"], keep=False)
    rows.loc[twice, "model"] = rows.loc[twice, "model"].astype(str) + " (" + rows.loc[twice, "table"] + ")"
    return rows


def plot_suite_heatmap(rows, path, title, family=FAMILY):
    """Heatmap of the effect size d, a row per test and a column per model, like Steed & Caliskan's
    figures: a diverging colour map centred on 0 (red: X with A, Y with B), symmetric limits
    ±max(1, max |d|); each cell printed as d with the stars of its Holm-adjusted p (column
    ``p_holm``, over ``family``: vlbias.report.formats.stars); a skipped test a grey cell saying so,
    a (test, model) without a row an empty light grey one. Tests in their first order of appearance,
    models likewise. Returns the Figure.
    """
    rows = rows.reset_index(drop=True)
    if rows.duplicated(["test", "model"]).any():
        dup = rows[rows.duplicated(["test", "model"], keep=False)][["test", "model"]].drop_duplicates()
        raise ValueError(f"two rows for (test, model): {dup.to_records(index=False).tolist()}")
    tests = list(dict.fromkeys(rows["test"]))
    models = list(dict.fromkeys(rows["model"]))
    names = dict(zip(rows["test"], rows["name"] if "name" in rows else rows["test"]))
    d = np.full((len(tests), len(models)), np.nan)
    skipped = np.zeros(d.shape, bool)
    text = np.full(d.shape, "", dtype=object)
    ok, d_col, p_col = _ok(rows), _numeric(rows["d"]), _numeric(rows["p_holm"])
    for i, r in rows.iterrows():
        at = tests.index(r["test"]), models.index(r["model"])
        if ok[i]:
            d[at] = d_col[i]
            text[at] = f"{d_col[i]:.2f}{stars(p_col[i])}"
        else:
            skipped[at] = True
            text[at] = "skipped"
    limit = max(1.0, float(np.nanmax(np.abs(d)))) if np.isfinite(d).any() else 1.0
    norm = Normalize(-limit, limit)

    # room for the test names (about 0.065 in a character at 8 pt) beside the cells, however few the models
    labels = 0.065 * max((len(str(names[t])) for t in tests), default=0)
    fig = Figure(figsize=(labels + 1.6 + 1.05 * len(models), 1.3 + 0.32 * len(tests)), layout="constrained")
    ax = fig.add_subplot()
    ax.set_facecolor("0.93")  # cells without a result; white is d = 0
    image = ax.imshow(np.ma.masked_invalid(d), cmap="RdBu_r", norm=norm, aspect="auto")
    ax.imshow(np.ma.masked_where(~skipped, np.ones(d.shape)), cmap="Greys", vmin=0, vmax=5, aspect="auto")
    cmap = image.get_cmap()
    for (i, j), label in np.ndenumerate(text):
        if label:
            shade = cmap(norm(d[i, j])) if np.isfinite(d[i, j]) else (0.8, 0.8, 0.8, 1)
            dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5
            ax.text(j, i, label, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(range(len(models)), models, fontsize=9)
    ax.set_yticks(range(len(tests)), [names[t] for t in tests], fontsize=8)
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
    ax.set_xticks(np.arange(len(models) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(tests) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    ax.spines[:].set_visible(False)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03, shrink=min(1.0, 6.0 / max(len(tests), 1)) ** 0.5)
    bar.set_label("effect size d", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=10, pad=8)
    ax.set_xlabel(f"{significance_note(family)}; grey: no result", fontsize=7, color="0.3", wrap=True)
    save_png(fig, path)
    return fig


def plot_published_vs_reproduced(rows, path, title, label_above=0.1):
    """The paper's d (x) against ours (y), a panel per table (column ``table``; one panel when
    absent), a colour per model, the identity line; a vertical bar is our confidence interval
    where the rows have one (d_low, d_high). Points more than ``label_above`` from the identity
    line are labelled with the test's name. Rows without a published d or not "ok" are left out.
    Returns the Figure.
    """
    rows = rows.assign(d=_numeric(rows["d"]), d_paper=_numeric(rows["d_paper"]))
    rows = rows[_ok(rows) & rows["d"].notna() & rows["d_paper"].notna()].reset_index(drop=True)
    if "table" not in rows:
        rows = rows.assign(table="")
    tables = list(dict.fromkeys(rows["table"])) or [""]
    models = list(dict.fromkeys(rows["model"]))
    colour = {m: MODEL_COLOURS[i % len(MODEL_COLOURS)] for i, m in enumerate(models)}
    has_ci = {"d_low", "d_high"} <= set(rows) and _numeric(rows["d_low"]).notna().any()
    values = pd.concat([rows["d"], rows["d_paper"]] + ([_numeric(rows["d_low"]), _numeric(rows["d_high"])]
                                                       if has_ci else []))
    lo, hi = (float(values.min()), float(values.max())) if len(values.dropna()) else (-1.0, 1.0)
    pad = 0.08 * max(hi - lo, 0.5)
    lo, hi = lo - pad, hi + pad

    fig = Figure(figsize=(1.4 + 3.2 * len(tables), 3.7), layout="constrained")
    axes = fig.subplots(1, len(tables), squeeze=False, sharex=True, sharey=True)[0]
    for ax, table in zip(axes, tables):
        part = rows[rows["table"] == table]
        ax.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8, linestyle="--", zorder=1)
        for model, group in part.groupby("model", sort=False):
            if has_ci:
                low, high = _numeric(group["d_low"]), _numeric(group["d_high"])
                ax.vlines(group["d_paper"], low, high, color=colour[model], alpha=0.35, linewidth=1.2, zorder=2)
            ax.scatter(group["d_paper"], group["d"], s=18, color=colour[model], zorder=3, edgecolor="white",
                       linewidth=0.4)
        far = part[(part["d"] - part["d_paper"]).abs() > label_above]
        for r in far.itertuples(index=False):
            name = getattr(r, "name", r.test)
            ax.annotate(str(name), (r.d_paper, r.d), xytext=(3, 2), textcoords="offset points", fontsize=6,
                        color="0.25")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.85", linewidth=0.6, zorder=0)
        ax.axvline(0, color="0.85", linewidth=0.6, zorder=0)
        ax.set_title(f"{table} (n = {len(part)})" if table else f"n = {len(part)}", fontsize=9)
        ax.set_xlabel("d published", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0].set_ylabel("d reproduced" + (" (bars: CI)" if has_ci else ""), fontsize=8)
    handles = [Line2D([], [], marker="o", linestyle="", color=colour[m], label=m) for m in models]
    handles.append(Line2D([], [], color="0.5", linestyle="--", label="identity"))
    axes[-1].legend(handles=handles, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title, fontsize=10)
    save_png(fig, path)
    return fig
