"""A paper-layout table (Ross et al. 2021, Tables 3–7) as its renderers share it: the Layout of cells
that vlbias.report.grounded builds, its cells as display text and its note. Markdown and LaTeX
(vlbias.report.grounded) and HTML (vlbias.report.html) print the same text from here.

    rows = display_rows(layout, lambda s: f"**{s}**")   # the printed number, bold where the paper highlights it
    note = layout_note(layout)

A result cell is "d (p)" with d starred by its Holm-adjusted p (vlbias.report.formats.stars), the
family being the cells of one column and one group of tests at one level or mask (``families``): the
tests Table 7 counts together.
"""

from dataclasses import dataclass, field
from itertools import groupby

import numpy as np

from vlbias.report.formats import LAYOUT_P_DIGITS, format_p, significance_note, stars
from vlbias.stats.adjust import holm

# the family of a paper-layout cell's adjusted p
FAMILY = "one column's tests of one group at one level or mask"


@dataclass(frozen=True)
class Column:
    """One column of a table: ``label`` as printed; the model (config name) and dataset whose
    results fill it (model None: the column stays empty); ``block`` an experiment heading or ""."""

    label: str
    model: str | None
    dataset: str | None
    block: str = ""
    experiment: str | None = None
    not_applicable: str | None = None  # the text of every cell: the model gives no such result (a dual encoder)
    published: bool = True  # the paper's column: its printed numbers beside ours (False: an extended model's)


@dataclass
class Layout:
    caption: str
    label: str
    index: list            # names of the index columns, e.g. ["group", "test", "level"]
    columns: list          # Column per value column
    rows: list = field(default_factory=list)  # (index values, cells) with one cell per column
    counts: bool = False   # cells are (significant, tests) counts, not (d, p)
    alpha: float = 0.05
    note: str = ""
    printed: list | None = None  # per row, per column the paper's (value, significant) or None

    def blocks(self):
        """[(experiment block, number of adjacent columns under it)], left to right."""
        return [(block, len(list(cols))) for block, cols in groupby(self.columns, key=lambda c: c.block)]


def value(cell):
    """(d, p) of a result cell, or None when it is text (empty, "–", skipped)."""
    if not isinstance(cell, dict) or cell["status"] != "ok":
        return None
    return float(cell["d"]), float(cell["p"])


def cell_text(cell):
    if isinstance(cell, dict):
        return "skipped"  # a result row whose status is not ok
    return cell


def families(layout):
    """{(row, column): Holm-adjusted p} of the result cells: adjusted within one column's cells of one
    group at one level or mask (the index without the test: its first and third on)."""
    members = {}
    for i, (index, cells) in enumerate(layout.rows):
        for j, cell in enumerate(cells):
            if (v := value(cell)) is not None:
                members.setdefault((j, index[0], *map(str, index[2:])), []).append((i, j, v[1]))
    adjusted = {}
    for cells in members.values():
        for (i, j, _), p in zip(cells, holm(np.array([p for *_, p in cells]))):
            adjusted[(i, j)] = float(p)
    return adjusted


def display_rows(layout, highlight):
    """Rows of display strings: "d (p)" per result cell, d starred by its Holm-adjusted p (``families``);
    counts as "k" or "k of n"; the paper's printed value after it in brackets, ``highlight``-ed
    (e.g. bold) where the paper highlights it."""
    adjusted = {} if layout.counts else families(layout)
    rows = []
    for i, (index, cells) in enumerate(layout.rows):
        out = [str(v) for v in index]
        for j, cell in enumerate(cells):
            if layout.counts:
                text = (cell if not isinstance(cell, tuple) else
                        str(cell[0]) if int(index[1]) == cell[1] else f"{cell[0]} of {cell[1]}")
            else:
                v = value(cell)
                text = cell_text(cell) if v is None else \
                    f"{v[0]:.2f}{stars(adjusted[(i, j)])} ({format_p(v[1], LAYOUT_P_DIGITS)})"
            printed = layout.printed[i][j] if layout.printed is not None else None
            if printed:
                shown = highlight(printed[0]) if printed[1] == "yes" else printed[0]
                text = f"{text} [{shown}]".strip()
            out.append(text)
        rows.append(out)
    return rows


def layout_note(layout):
    """What a paper-layout table's cells mean: the counts' rule (raw p, as the paper counted), or the
    stars' (vlbias.report.formats.significance_note); the printed numbers' brackets and highlight."""
    printed = (" [x]: the number the paper prints, highlighted where the paper highlights it (its p < 0.05); –: "
               "also where the paper prints –." if layout.printed is not None else "")
    if layout.counts:
        return (f"Number of tests with (raw, unadjusted) p < {layout.alpha:g}, as the paper counts them; \"k of n\" "
                f"where only n of the group's tests have a result. Empty: no model fills the column. –: does not "
                f"apply.{printed}")
    return (f"Effect size d (p-value of the permutation test); {significance_note(FAMILY)}. Empty: no model "
            "fills the column. –: does not apply (e.g. image masking on a model never pre-trained with masked "
            f"regions). skipped: the test could not run (see the rows file).{printed}")
