"""Tables and figures of the masked-entity association scores (Srinivasan & Bisk 2022).

    write_report(vl_df, ref_df, case_study, entities, model, reference, out)   # every table and figure
    write_scored_table(df, caption, csv=..., md=..., tex=...)        # CSV in full, MD/LaTeX rounded
    plot_association(scores, "L", "figure3.png", title)                # Figures 2-4: male vs female per entity
    plot_entity_bias(entities, "B_L", "figure5a.png", title, xlabel)   # Figure 5: ordered, by stereotype

Figures are drawn on a bare matplotlib Figure (no pyplot state, no display) and written atomically.
A score that cannot be computed (no images of an entity or gender) is not drawn as a bar but
labelled "no images" at zero, so a missing number never looks like a score of zero.
"""

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from vlbias.suites.mlm.plan import TABLES
from vlbias.suites.mlm.scores import LogProbs, association_scores, bias_scores, contradictions, entity_bias
from vlbias.report.figures import save_png
from vlbias.report.formats import NOT_COMPUTED
from vlbias.report.tables import write_tables

GENDER_COLOURS = {"male": "#3b75af", "female": "#d9822b"}  # the same colour per gender in every figure
FORMULAS = {  # the y axis of Figures 2-4
    "PT": r"$S_{PT}(E,g) = \ln\,P_{VL}(E|g)\,/\,P_L(E|g)$",
    "L": r"$S_L(E,g) = \mathrm{mean}_{I}\,\ln\,P_{VL}(E|g,I)\,/\,P_{VL}(E|p,I)$",
    "V": r"$S_V(E,g) = \ln\,\hat P_{VL}(E|I_g)\,/\,P_{VL}(E)$",
}


def _rounded(df, digits):
    # floats to significant digits (probabilities of a few 1e-5 stay readable); a score that could not
    # be computed prints "n/a", not an empty cell
    out = df.copy()
    for column in out.columns:
        if pd.api.types.is_float_dtype(out[column]):
            out[column] = [(NOT_COMPUTED if math.isnan(v) else f"{v:.{digits}g}") for v in out[column]]
    return out


def write_scored_table(df, caption, *, csv, md, tex, html=None, label=None, note="", digits=3):
    """CSV with full precision; Markdown, LaTeX and HTML with ``digits`` significant digits."""
    write_tables(df, caption, csv=csv, label=label, note=note)
    write_tables(_rounded(df, digits), caption, md=md, tex=tex, html=html, label=label, note=note)


def plot_association(scores, source, path, title):
    """Grouped bars: per entity, S_<source>(E, male) and S_<source>(E, female) (paper Figures 2-4)."""
    column = f"S_{source}"
    entities = list(dict.fromkeys(scores["entity"]))
    x = np.arange(len(entities))
    width = 0.38
    fig = Figure(figsize=(max(4.0, 1.1 * len(entities) + 1.5), 3.6))
    ax = fig.add_subplot()
    for offset, gender in ((-width / 2, "male"), (width / 2, "female")):
        values = [scores[(scores["entity"] == e) & (scores["gender"] == gender)][column].iloc[0] for e in entities]
        ax.bar(x + offset, values, width, label=gender, color=GENDER_COLOURS[gender])
        for xi, v in zip(x + offset, values):
            if math.isnan(v):
                ax.text(xi, 0, "no images", rotation=90, ha="center", va="bottom", fontsize=7, color="0.4")
    ax.axhline(0, color="0.2", linewidth=0.8)
    ax.set_xticks(x, entities)
    ax.set_xlim(-0.6, len(entities) - 0.4)  # missing bars do not take part in autoscaling
    ax.set_ylabel(FORMULAS[source])
    ax.set_title(title, fontsize=10)
    ax.legend(title="agent", fontsize=8, title_fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    ax.spines[["top", "right"]].set_visible(False)
    save_png(fig, path)


def plot_entity_bias(entities, column, path, title, xlabel):
    """Horizontal bars of ``column`` per entity, ordered by value, coloured by the stereotype label (Figure 5)."""
    df = entities.sort_values(column, kind="stable").reset_index(drop=True)
    fig = Figure(figsize=(5.5, max(2.5, 0.22 * len(df) + 1.2)))
    ax = fig.add_subplot()
    colours = [GENDER_COLOURS[s] for s in df["stereotype"]]
    ax.barh(np.arange(len(df)), df[column], color=colours, height=0.7)
    ax.set_yticks(np.arange(len(df)), df["entity"], fontsize=8)
    ax.set_ylim(-0.6, len(df) - 0.4)
    ax.axvline(0, color="0.2", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(handles=[Patch(color=c, label=f"stereotypically {s}") for s, c in GENDER_COLOURS.items()],
              fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
    ax.spines[["top", "right"]].set_visible(False)
    save_png(fig, path)


def _named(spec):
    pinned = "@".join(spec[k] for k in ("model_id", "revision") if spec.get(k))
    return f"{spec['name']} ({pinned})" if pinned else spec["name"]


NOTE = ("S_PT = ln P_VL(E|g)/P_L(E|g) (no image); S_L = mean over the images of E of ln P_VL(E|g,I)/P_VL(E|person,I) "
        "(n_L images); S_V = ln mean over the images of E with gender g of P_VL(E|person,I) / P_VL(E|person) "
        "(n_V images); n/a: no images.")


def write_report(vl_df, ref_df, case_study, entities, model, reference, out):
    """Every table and figure of one vision-language model from the log-probability tables
    (vlbias.suites.mlm.scores.QUERY_COLUMNS) of the model and of the text-only reference.

    ``model``, ``reference``: {"name", "model_id", "revision"} for captions; ``out``: output paths keyed
    <table>_{csv,md,tex} and optionally <table>_html (scores, bias, contradictions, entities) and
    figure2, figure3, figure4, figure5a, figure5b. Returns the four tables.
    """
    vl, ref = LogProbs(vl_df, case_study.id, model["name"]), LogProbs(ref_df, case_study.id, reference["name"])
    scores = association_scores(vl, ref, case_study)
    biases = bias_scores(scores)
    contra = contradictions(vl, case_study)
    ent = entity_bias(LogProbs(vl_df, entities.id, model["name"]), LogProbs(ref_df, entities.id, reference["name"]),
                      entities)

    who = f"{_named(model)}; text-only reference {_named(reference)}"

    def tables(name, df, caption, note):
        write_scored_table(df, caption, csv=out[f"{name}_csv"], md=out[f"{name}_md"], tex=out[f"{name}_tex"],
                           html=out.get(f"{name}_html"), label=f"tab:mlm-{name}", note=note)

    tables("scores", scores, f"{TABLES['scores']}: {who}", NOTE)
    tables("bias", biases, f"{TABLES['bias']}: {who}",
           "Positive: the entity leans female, negative: male. n_female, n_male: images per gender (S_V); "
           "B_L uses both. " + NOTE)
    shown = contra[contra["contradicts"].astype(bool)].drop(columns="contradicts")
    tables("contradictions", shown, f"{TABLES['contradictions']}: {who}",
           f"{len(shown)} of {len(contra)} images: P_VL(contrast | person, I) > P_VL(entity | person, I) although "
           "the image shows the entity (caption with the agent 'person').")
    tables("entities", ent, f"Language bias B_L(E) of {entities.name}: {who}",
           "Text only. S_L(E,g) = ln P(E|g)/P(E|person); B_L = S_L(E,female) - S_L(E,male) of the model, B_L_ref "
           "of the reference; B_L_diff = B_L - B_L_ref (negative: moved towards male).")

    name, title = model["name"], f"{model['name']} vs {reference['name']}"
    plot_association(scores, "PT", out["figure2"], f"Figure 2: visual-linguistic pre-training association shift, "
                                                    f"{title}")
    plot_association(scores, "L", out["figure3"], f"Figure 3: language-context association, {name}")
    plot_association(scores, "V", out["figure4"], f"Figure 4: visual-context association, {name}")
    plot_entity_bias(ent, "B_L", out["figure5a"], f"Figure 5a: language bias of {name} ({entities.id})",
                     r"$B_L(E)$ (> 0: female, < 0: male)")
    plot_entity_bias(ent, "B_L_diff", out["figure5b"], f"Figure 5b: {name} minus {reference['name']} ({entities.id})",
                     r"$B_L^{VL}(E) - B_L^{BERT}(E)$ (< 0: moved towards male)")
    return {"scores": scores, "bias": biases, "contradictions": contra, "entities": ent}
