"""The zoo's tables and figures (workflow/rules/zoo.smk): results/zoo/eats.{csv,md} (every test on every
model, beside its metadata), predictors.{csv,md,png} and performance.{csv,md,png} (vlbias.suites.zoo.analysis).

    eats = eats_table(rows, stimuli, metadata)   # rows: vlbias.associate.run_test's, or failure_row's
"""

import numpy as np
import pandas as pd

from vlbias.report.tables import TABLE_COLUMNS, write_tables
from vlbias.stats.adjust import add_adjusted
from vlbias.suites.zoo.analysis import ORDER, POOLED, design, failure_row, order_of, performance, predictors
from vlbias.suites.zoo.metadata import COLUMNS

# the zoo's own columns beside a result row's (TABLE_COLUMNS): the test's order, then the model's metadata
EATS_COLUMNS = [*TABLE_COLUMNS, ORDER, *COLUMNS]


def eats_table(rows, stimuli, metadata):
    """Result rows (tests x models, in the order of ``rows``) with p adjusted by Holm within each model
    (its tests of the battery), the test's order and the model's ``metadata`` (a DataFrame: a row per model,
    vlbias.suites.zoo.select.model_rows)."""
    df = add_adjusted(pd.DataFrame(rows).reindex(columns=[c for c in TABLE_COLUMNS if c not in ("p_holm", "p_bh")]),
                      family=("model",))
    df[ORDER] = df["test"].map({s.id: order_of(s) for s in stimuli})
    meta = metadata.set_index("model")[COLUMNS]
    return df.join(meta, on="model")[EATS_COLUMNS]


def no_accuracy_note(eats):
    """The caption's note on the models the accuracy table lacks (their accuracy cells are empty)."""
    lacking = sorted(set(eats.loc[eats["average38"].isna() & eats["imagenet"].isna(), "model"]))
    return (f" No downstream accuracy for {len(lacking)} model(s), left empty (not in the accuracy table): "
            f"{', '.join(lacking)}." if lacking else "")


def write_eats(tests, stores, models_csv, outputs, *, n_samples, seed, exact, threads, ci):
    """results/zoo/eats.{csv,md}: every test of ``tests`` ([(Stimulus, why it is skipped or None)]) on every
    model's store, one store read at a time; a failed model's rows say why, and a skipped test's."""
    from vlbias.associate import run_test
    from vlbias.suites.zoo import failure

    rows = []
    for model, store in stores.items():
        reason = failure(store)
        rows += [failure_row(s, model, reason) if reason else failure_row(s, model, skip, "skipped") if skip else
                 run_test(s, store, model, n_samples=n_samples, seed=seed, exact=exact, threads=threads, ci=ci)
                 for s, skip in tests]
    stimuli = [s for s, _ in tests]
    eats = eats_table(rows, stimuli, pd.read_csv(models_csv))
    caption = "The zoo's battery: d, its interval and p (Holm within each model) of every test on every model"
    write_tables(eats, caption, csv=outputs.csv)
    shown = eats[["model", "test", ORDER, "d", "p", "p_holm", "status", "dataset", "params", "average38"]]
    write_tables(shown, caption, md=outputs.md, note="Every column (n per set, intervals, provenance, metadata) is "
                                                     "in the CSV beside this file." + no_accuracy_note(eats))


def write_predictors(eats_csv, outputs, *, level):
    """results/zoo/predictors.{csv,md,png}; the figure: each coefficient with its interval, per scope."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vlbias.io.atomic import atomic_path

    table = predictors(pd.read_csv(eats_csv), level=level)
    caption = "Which upstream choices predict d (OLS, statsmodels): coefficients and type-II ANOVA per predictor"
    write_tables(table, caption, csv=outputs.csv, md=outputs.md,
                 note="kind coefficient: estimate, interval, t and p; kind anova: the predictor's F and p beside the "
                      "others (type II). Dataset and family are against their first level (alphabetical).")
    coef = table[(table["kind"] == "coefficient") & (table["term"] != "Intercept")]
    scopes = list(dict.fromkeys(coef["scope"])) or [POOLED]
    fig, axes = plt.subplots(1, len(scopes), figsize=(4 * len(scopes), 0.4 * max(len(coef), 4) + 1), squeeze=False)
    for ax, scope in zip(axes[0], scopes):
        part = coef[coef["scope"] == scope]
        y = np.arange(len(part))
        ax.errorbar(part["estimate"], y, xerr=[part["estimate"] - part["low"], part["high"] - part["estimate"]],
                    fmt="o")
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_yticks(y, part["term"], fontsize=7)
        ax.set_title(scope, fontsize=9)
        ax.set_xlabel("coefficient on d")
    fig.tight_layout()
    with atomic_path(outputs.png) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def write_performance(eats_csv, outputs, *, n_boot, seed, level):
    """results/zoo/performance.{csv,md,png}; the figure: d against the 38-dataset average per test, with
    the least-squares line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vlbias.io.atomic import atomic_path

    eats = pd.read_csv(eats_csv)
    table = performance(eats, n_boot=n_boot, seed=seed, level=level)
    caption = "Bias and downstream accuracy: r between d and accuracy per test (bootstrap intervals, Holm across tests)"
    write_tables(table, caption, csv=outputs.csv, md=outputs.md, note=no_accuracy_note(eats).strip())
    data = design(eats).dropna(subset=["average38"])
    tests = list(dict.fromkeys(data["test"])) or ["(none)"]
    fig, axes = plt.subplots(1, len(tests), figsize=(3.2 * len(tests), 3), squeeze=False)
    for ax, test in zip(axes[0], tests):
        part = data[data["test"] == test]
        ax.scatter(part["average38"], part["d"], s=12)
        if len(part) >= 2 and np.ptp(part["average38"]) > 0:
            slope, intercept = np.polyfit(part["average38"], part["d"], 1)
            xs = np.linspace(part["average38"].min(), part["average38"].max(), 2)
            ax.plot(xs, slope * xs + intercept, color="C1")
        ax.set_title(test, fontsize=8)
        ax.set_xlabel("38-dataset average")
        ax.set_ylabel("d")
    fig.tight_layout()
    with atomic_path(outputs.png) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
