"""The skew tables' Markdown note and figures (vlbias.suites.skew: a labelled set's table; the bridge).

    plot_skew(table, "results/skew/fairface.png", caption)   # MaxSkew and NDKL per model, k, beside the null
    plot_propagation(table, "results/skew/propagation.png")  # d against skew, a panel per link and set
"""

import numpy as np
from matplotlib.figure import Figure

from vlbias.report.figures import MODEL_COLOURS, save_png

# the columns of a skew table's Markdown (the CSV has them all, with intervals, settings and provenance)
MARKDOWN_COLUMNS = ("model", "attribute", "queries", "direction", "k", "max_skew", "max_skew_null_bound", "max_skew_p",
                    "min_skew", "ndkl", "ndkl_null_bound", "ndkl_p", "max_skew_paper")


def skew_note(settings):
    """The note under a skew table: what each measure is and how the null and interval were drawn."""
    return (f"MaxSkew@k, MinSkew@k: the largest and smallest ln(p_a / d_a) over the attribute's values a (p_a: "
            f"share of a among the top k; desired d_a: {settings['desired']}); NDKL@k: the rank-discounted KL "
            "divergence of the top-i label distribution from the desired one (Geyik et al. 2019). Each the mean "
            f"over a prompt set's queries (Berg et al. 2022); ties at the k-th similarity: {settings['ties']}. "
            f"_null_bound: the {settings['level']:g} quantile of {settings['n_permutations']} label shuffles over the "
            "same images (MinSkew: the lower one); p: the share of shuffles at or beyond ours. max_skew_paper: "
            "the published MaxSkew of the model (resources/published/skew.tsv). Intervals over "
            f"{settings['n_bootstrap']} image resamples, settings and provenance: the CSV.")


def plot_skew(table, path, title):
    """MaxSkew and NDKL (a panel each) per model and k, a marker per (attribute, prompt set, direction) with
    its bootstrap interval, and the permutation null's bound as a grey tick: skew above it is more than the
    set's label balance gives a label-blind ranker. Returns the Figure."""
    measures = (("max_skew", "MaxSkew@k"), ("ndkl", "NDKL@k"))
    keys = list(dict.fromkeys(zip(table["attribute"], table["queries"], table["direction"], table["k"])))
    models = list(dict.fromkeys(table["model"]))
    fig = Figure(figsize=(3.2 + 0.9 * len(keys), 3.2), layout="constrained")
    for panel, (measure, label) in enumerate(measures):
        ax = fig.add_subplot(1, 2, panel + 1)
        for j, model in enumerate(models):
            rows = table[table["model"] == model]
            x = np.array([keys.index(key) for key in zip(rows["attribute"], rows["queries"], rows["direction"],
                                                          rows["k"])]) + (j - (len(models) - 1) / 2) * 0.12
            value = rows[measure].to_numpy(float)
            err = np.abs(np.vstack([value - rows[f"{measure}_low"].to_numpy(float),
                                    rows[f"{measure}_high"].to_numpy(float) - value]))
            ax.errorbar(x, value, yerr=np.nan_to_num(err), fmt="o", ms=4, color=MODEL_COLOURS[j % len(MODEL_COLOURS)],
                        label=model)
            ax.scatter(x, rows[f"{measure}_null_bound"], marker="_", s=120, color="0.5")
        ax.set_xticks(range(len(keys)), [f"{a}\n{q}\n{'t→i' if d == 'text_to_image' else 'i→t'} k={k}"
                                         for a, q, d, k in keys], fontsize=7)
        ax.set_ylabel(label, fontsize=8)
        ax.axhline(0, color="0.8", linewidth=0.8)
    fig.axes[0].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title} (grey: the permutation null's bound)", fontsize=9)
    save_png(fig, path)
    return fig


def plot_propagation(table, path):
    """Each model's d (x) against its skew (y), a panel per (link, labelled set), titled with r and its
    interval. Returns the Figure."""
    groups = list(dict.fromkeys(zip(table["dataset"], table["attribute"], table["queries"], table["test"])))
    fig = Figure(figsize=(3.2 * max(1, len(groups)), 3.2), layout="constrained")
    for i, group in enumerate(groups):
        ax = fig.add_subplot(1, max(1, len(groups)), i + 1)
        rows = table[[key == group for key in zip(table["dataset"], table["attribute"], table["queries"],
                                                  table["test"])]]
        ax.scatter(rows["d"], rows["skew"], color=MODEL_COLOURS[0])
        for _, r in rows.iterrows():
            if r["model"]:
                ax.annotate(r["model"], (r["d"], r["skew"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        first = rows.iloc[0]
        interval = f" [{first['r_low']:.2f}, {first['r_high']:.2f}]" if np.isfinite(first["r_low"]) else ""
        ax.set_title(f"{group[0]}: {group[1]} × {group[2]} vs {group[3]}\nr = {first['r']:.2f}{interval}, "
                     f"n = {first['n_models']}", fontsize=8)
        ax.set_xlabel(f"d ({group[3]})", fontsize=8)
        ax.set_ylabel(f"{first['measure']}@{first['k']}", fontsize=8)
    save_png(fig, path)
    return fig
