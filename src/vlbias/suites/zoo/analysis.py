"""The zoo's model-level analyses of its eats table (vlbias.report.zoo.eats_table: a row per (model,
test) beside the model's metadata): which upstream choices predict d (``predictors``: linear models
fitted with statsmodels); how d goes with downstream accuracy (``performance``); the models ranked per
test and the rank correlation between tests (``ranking``, ``ranking_correlations``: what WEFE's
create_ranking and calculate_ranking_correlations give).

    predictors(eats)                                # coefficients with intervals, type-II ANOVA per predictor
    performance(eats, n_boot=2000, seed=0)          # Pearson and Spearman r per test and accuracy, Holm across tests
"""

import re

import numpy as np
import pandas as pd

from vlbias.stats.adjust import holm
from vlbias.suites.zoo.metadata import ACCURACY

ORDER = "order"  # the column of a test's order (order_of)
POOLED = "pooled"  # the predictors' scope of every test at once (test a factor)


def order_of(stimulus):
    """The test's order: what its targets and attributes are, "image" or "text" each ("image-text": image
    targets, text attributes; Ghate et al.'s four cross-modal orders)."""
    kind = lambda sets: "text" if all(stimulus.sets[s].items is not None for s in sets) else "image"
    return f"{kind('XY')}-{kind('AB')}"


def failure_row(stimulus, model, reason, status="failed"):
    """The row of a test on a model whose vectors could not be had (its fetch or load failed), or, with
    ``status`` "skipped", of a test whose stimuli the zoo does not have."""
    return {"test": stimulus.id, "name": stimulus.name, "family": stimulus.family, "model": model,
            **{s: st.label for s, st in stimulus.sets.items()}, "status": f"{status}: {reason}"}


def arch_family(arch):
    """An architecture's family: the letters its name starts with ("ViT-B-32" ViT, "RN50x4" RN,
    "convnext_base" convnext, "EVA02-L-14" EVA, "coca_ViT-B-32" coca)."""
    m = re.match(r"[A-Za-z]+", str(arch))
    return m[0] if m else str(arch)


def design(eats):
    """The models' rows with d and the predictors: dataset, log10 parameters, log10 samples seen, family."""
    ok = eats[eats["status"] == "ok"].copy()
    ok["d"] = pd.to_numeric(ok["d"])
    ok["log_params"] = np.log10(pd.to_numeric(ok["params"], errors="coerce"))
    ok["log_samples"] = np.log10(pd.to_numeric(ok["samples_seen"], errors="coerce"))
    ok["arch_family"] = ok["arch"].map(arch_family)
    return ok


PREDICTORS = {"dataset": "C(dataset)", "log_params": "log_params", "log_samples": "log_samples",
              "arch_family": "C(arch_family)"}
PREDICTOR_COLUMNS = ["scope", "kind", "term", "estimate", "low", "high", "statistic", "df", "p", "n_models", "r2",
                     "formula"]


def predictors(eats, level=0.95):
    """Per test and pooled (test a factor): the OLS fit of d on the PREDICTORS that vary among the models
    with d (statsmodels; a predictor with one value, or missing for every model, is left out of that fit
    and the formula says so): a row per coefficient (estimate, interval at ``level``, t, p) and a row
    per predictor (its type-II ANOVA F and p: its contribution beside the others)."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    data = design(eats)
    rows = []
    scopes = [(test, part) for test, part in data.groupby("test", sort=False)] + [(POOLED, data)]
    for scope, part in scopes:
        terms = [PREDICTORS[p] for p in PREDICTORS if part[p].nunique(dropna=True) > 1]
        if scope == POOLED and part["test"].nunique() > 1:
            terms.append("C(test)")
        part = part.dropna(subset=[p for p in PREDICTORS if PREDICTORS[p] in terms])
        if not terms or len(part) <= sum(1 for _ in terms) + 1:
            rows.append({"scope": scope, "kind": "skipped", "n_models": len(part),
                         "term": f"too few models ({len(part)}) for the predictors that vary"})
            continue
        formula = "d ~ " + " + ".join(terms)
        fit = smf.ols(formula, data=part).fit()
        interval = fit.conf_int(alpha=1 - level)
        common = {"scope": scope, "n_models": int(fit.nobs), "r2": fit.rsquared, "formula": formula}
        for term in fit.params.index:
            rows.append({**common, "kind": "coefficient", "term": term, "estimate": fit.params[term],
                         "low": interval.loc[term, 0], "high": interval.loc[term, 1], "statistic": fit.tvalues[term],
                         "df": fit.df_resid, "p": fit.pvalues[term]})
        anova = anova_lm(fit, typ=2)
        for term in anova.index.drop("Residual"):
            rows.append({**common, "kind": "anova", "term": term, "statistic": anova.loc[term, "F"],
                         "df": anova.loc[term, "df"], "p": anova.loc[term, "PR(>F)"]})
    return pd.DataFrame(rows).reindex(columns=PREDICTOR_COLUMNS)


PERFORMANCE_COLUMNS = ["test", "accuracy", "method", "r", "low", "high", "p", "p_holm", "n_models", "n_boot", "seed",
                       "level"]


def performance(eats, *, n_boot, seed, level=0.95):
    """Per test and accuracy (ACCURACY: ImageNet-1k, the 38-dataset average) and method (Pearson,
    Spearman): r between d and the accuracy over the models that have both, its percentile bootstrap
    interval (models resampled, ``n_boot`` times, ``seed``), p, and p adjusted by Holm across the tests
    (per accuracy and method)."""
    from scipy import stats

    data = design(eats)
    rows = []
    for test, part in data.groupby("test", sort=False):
        for accuracy in ACCURACY:
            have = part.dropna(subset=[accuracy]).astype({accuracy: float})
            x, y = have[accuracy].to_numpy(), have["d"].to_numpy()
            for method, correlate in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr)):
                row = {"test": test, "accuracy": accuracy, "method": method, "n_models": len(have),
                       "n_boot": n_boot, "seed": seed, "level": level}
                if len(have) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                    r, p = correlate(x, y)
                    low, high = _bootstrap(x, y, correlate, n_boot, seed, level)
                    row |= {"r": float(r), "p": float(p), "low": low, "high": high}
                rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=PERFORMANCE_COLUMNS)
    for _, index in df.groupby(["accuracy", "method"]).groups.items():
        df.loc[index, "p_holm"] = holm(pd.to_numeric(df.loc[index, "p"]).to_numpy())
    return df


def _bootstrap(x, y, correlate, n_boot, seed, level):
    """Percentile interval of r over ``n_boot`` resamples of the models (a resample whose x or y is
    constant has no r and is left out)."""
    rng = np.random.default_rng(seed)
    rs = []
    for _ in range(n_boot):
        i = rng.integers(0, len(x), len(x))
        if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
            rs.append(correlate(x[i], y[i])[0])
    if not rs:
        return np.nan, np.nan
    tail = (1 - level) / 2 * 100
    return tuple(float(v) for v in np.percentile(rs, [tail, 100 - tail]))


def ranking(eats):
    """The models ranked per test by |d| (1: the most biased), tests as columns (WEFE's create_ranking)."""
    ok = eats[eats["status"] == "ok"].assign(abs_d=lambda df: pd.to_numeric(df["d"]).abs())
    return ok.pivot_table(index="model", columns="test", values="abs_d", sort=False).rank(ascending=False)


def ranking_correlations(ranks):
    """Spearman's correlation between the tests' rankings (WEFE's calculate_ranking_correlations)."""
    return ranks.corr(method="spearman")
