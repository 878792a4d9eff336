"""How the report prints: p-values, missing values, Markdown and LaTeX tables, and the reader of a
paper's published numbers. A leaf: it imports no other module of vlbias.report, so every table
writer (tables, grounded, mlm) and the HTML renderer (html) format the same value the same way.
"""

import pandas as pd

NA = "–"  # a cell that does not apply, or that the paper prints as "–"
NOT_COMPUTED = "n/a"  # a score that could not be computed (no images of an entity or gender)
# decimals of p: the results tables (iEAT, SEAT) in Markdown and HTML alike; the grounded paper-layout
# tables' "d (p)" cells in Markdown, LaTeX and HTML alike
RESULTS_P_DIGITS = 4
LAYOUT_P_DIGITS = 3


# Significance, one convention for every table, figure and legend: stars on the Holm-adjusted p of a
# family of tests (one model's tests of one stimulus family in one table; a grounded table's column and
# group at one level), so a table of 46 tests does not star its chance findings. The raw p is printed
# beside every effect size, as the papers printed it.
STARS = ((0.001, "***"), (0.01, "**"), (0.05, "*"))  # Holm-adjusted p below: mark
FAMILY = "one model's tests of one stimulus family in this table"  # the family of a results table (vlbias.report.tables)


def stars(p_holm):
    """"***", "**", "*" for a Holm-adjusted p below 0.001, 0.01, 0.05; "" otherwise (and when missing)."""
    if missing(p_holm):
        return ""
    return next((mark for bound, mark in STARS if p_holm < bound), "")


def significance_note(family):
    """What the stars mean, for a caption, a note or a legend: the levels, and that p is Holm-adjusted
    over ``family`` (e.g. "one model's tests of one stimulus family in this table")."""
    return f"*, **, ***: p < .05, .01, .001, Holm-adjusted over {family}"


def missing(value):
    """Whether a value is missing: None, NaN, pandas' NA (of nullable integer columns)."""
    return value is None or (not isinstance(value, str) and pd.isna(value))


def text(value):
    """A cell's text; missing values print empty."""
    return "" if missing(value) else str(value)


def format_p(p, digits):
    """p to ``digits`` decimals; below 10^-digits in scientific notation with ``digits`` − 3 decimals
    (1.2e-05 at 4 digits, 1e-04 at 3), so a small p never prints as zero."""
    return f"{p:.{digits}f}" if p >= 10**-digits or p == 0 else f"{p:.{digits - 3}e}"


def read_published(path):
    """A paper's published numbers (TSV: table, test, model, d, p as printed, ...)."""
    return pd.read_csv(path, sep="\t", comment="#", dtype=str, keep_default_na=False)


# -- any table: Markdown and LaTeX beside the CSV ------------------------------------------------

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def markdown_table(df, caption, note=""):
    """``df`` as a Markdown table under a bold caption, with an optional note below."""
    lines = [f"**{caption}**", "", "| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(text(v).replace("|", r"\|") for v in row) + " |"
              for row in df.itertuples(index=False)]
    return "\n".join(lines + (["", note] if note else [])) + "\n"


def latex_escape(value):
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text(value))


def latex_table(df, caption, label=None, note=""):
    """``df`` as a LaTeX ``table`` (booktabs rules); numbers right-aligned, text left-aligned."""
    align = "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in df.columns)
    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{latex_escape(caption)}}}"]
    if label:
        lines.append(rf"\label{{{label}}}")
    lines += [rf"\begin{{tabular}}{{{align}}}", r"\toprule", " & ".join(map(latex_escape, df.columns)) + r" \\",
              r"\midrule"]
    lines += [" & ".join(map(latex_escape, row)) + r" \\" for row in df.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if note:
        lines.append(rf"\par\smallskip{{\footnotesize {latex_escape(note)}}}")
    return "\n".join(lines + [r"\end{table}"]) + "\n"
