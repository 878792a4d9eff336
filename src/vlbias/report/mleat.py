"""ML-EAT figures and table (vlbias.stats.mleat; Wolfe, Hiniker & Howe 2024): an EAT-Map per test and
a pattern summary per table.

    r = mleat(X, Y, A, B, n_samples=100_000, seed=0)
    plot_eat_map(r, "insect-flower.png", "Insect-Flower on SimCLR", labels={"X": "Flower", ...})
    rows = [{"test": ..., "name": ..., "model": ..., **r.row()}, ...]
    df = mleat_frame(rows)                                 # the table, columns in order
    plot_pattern_summary(df, "patterns.png", "iEAT Table 1")

The EAT-Map is four quadrants, a row per target concept (X above Y) and a column per attribute
concept (A left of B), the layout of an IAT's four pairings. Quadrant TC shows Level 3 (μ_TC, the line;
μ_TC ± σ_TC, the band) and the data of Level 2 (a point per attribute stimulus c of C at
s(c, T) = mean_t cos(c, t), so a row's two quadrants are the two groups d_T compares). A quadrant is
shaded where Level 2 found T associated with C (the pattern's pairs): red where the pair goes with
the test (X–A, Y–B), blue where against it (X–B, Y–A), the colours of the d heatmap
(vlbias.report.figures). Level 2's d_T and p_T head each row; Level 1's d and p, the pattern and the
cosine flag head the figure.

``write_mleat`` writes a table's ML-EAT files: the CSV (one row per test and model, the statistics
of all three levels, the pattern, the cosine flag, n per set and provenance), the summary figure, an
EAT-Map per (test, model) under ``maps/<test>/<model>.png``, and the report's HTML page (the table's main
numbers, the summary, a link to each map).

The summary draws every (test, model) as a small copy of the map's shading (2 × 2 squares: X above
Y, A left of B) beside Level 1's d with its stars; a test whose cosines are uninformative sits on a
yellow cell.
"""

import html
import multiprocessing
import os
import re
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import Bbox, ScaledTranslation
from PIL import Image

from vlbias.io.atomic import atomic_path
from vlbias.report.figures import save_png, stars
from vlbias.report.formats import format_p, missing, significance_note
from vlbias.report.html import figure_html, png_data_uri, table_html, write_page
from vlbias.stats.adjust import holm
from vlbias.stats.mleat import ATTRIBUTES, PATTERNS, QUADRANTS, TARGETS, UNDEFINED
from vlbias.stats.row import MLEAT

WITH, AGAINST, OFF = "#c53a32", "#3b75af", "0.86"  # a pair with the test, against it, not significant
WITH_LIGHT, AGAINST_LIGHT = "#f6d2cf", "#cfe0f1"  # the EAT-Map's quadrant shading
FLAGGED = "#fff0b3"
DESCRIPTIONS = dict(PATTERNS.values())
# Stars, as on every table and heatmap (vlbias.report.formats): on the Holm-adjusted p, within the rows
# of a table that share these columns (one model's tests of one stimulus family; the grounded suite's
# one column of one dataset at one level), so Level 1's stars are its results table's
FAMILY = ("protocol", "dataset", "family", "model", "column", "level")
ADJUSTED = {"l1_p": "l1_p_holm", "l2x_p": "l2x_p_holm", "l2y_p": "l2y_p_holm"}
STARS_FAMILY = "one model's tests in the table (Level 1, as its results table) and their targets (Level 2)"


def lit(pattern):
    """The quadrants ("XA", ...) a pattern names: where Level 2 found the target with the attribute."""
    if missing(pattern) or pattern in ("none", UNDEFINED):
        return set()
    return set(str(pattern).split("-"))


def congruent(quadrant):
    """Whether a (target, attribute) pair goes with the test's hypothesis: X with A, Y with B."""
    return quadrant in ("XA", "YB")


def mleat_frame(rows):
    """ML-EAT result rows (each its identity, an MLEATResult.row() and its provenance) as a table, its
    columns those of vlbias.stats.row.MLEAT in order (the identity and provenance its rows have)."""
    return MLEAT.frame(rows)


def adjusted(rows):
    """``rows`` (mleat_frame's table) with ``ADJUSTED``'s columns: Level 1's p Holm-adjusted within each
    family (the rows sharing the ``FAMILY`` columns they have), Level 2's p of both targets of those rows
    Holm-adjusted together; a missing p (a skipped test) is left out and stays missing."""
    out = rows.reset_index(drop=True)
    family = [c for c in FAMILY if c in out] or [lambda _: 0]
    groups = out.groupby(family, sort=False, dropna=False).indices.values()
    for level in (["l1_p"], ["l2x_p", "l2y_p"]):
        values = out[level].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        result = np.full(values.shape, np.nan)
        for at in groups:
            result[at] = holm(values[at].ravel()).reshape(len(at), len(level))
        out = out.assign(**{ADJUSTED[c]: result[:, j] for j, c in enumerate(level)})
    return out


def _p(p):
    """"p = 0.012", "p < 0.001"."""
    return "p n/a" if missing(p) else (f"p = {p:.3f}" if p >= 0.001 else "p < 0.001")


class _EatMapFigure:
    """The EAT-Map's Figure, made once per process and redrawn for each map (draw_maps draws a table's
    maps one after another): its four Axes and their artists are updated in place, and the axes are placed
    from the measured extents of the texts around them (``place``) instead of by constrained layout, whose
    solve (run twice per savefig) and the fresh Figure cost three quarters of each map."""

    SIZE, DPI = (6.6, 5.6), 150
    PAD = 3 / 72  # inches between a text and what borders it, as constrained layout's pads

    def __init__(self):
        # an Agg canvas of its own: its renderer, and the text extents cached on it, live as long as the figure
        self.fig = fig = Figure(figsize=self.SIZE, dpi=self.DPI)
        FigureCanvasAgg(fig)
        self._note = None  # (the note's text, its strip of the canvas as drawn): render
        self._strip = None  # the figure below the tick labels of the lower axes: place
        grid = fig.subplots(2, 2, sharey=True)
        self.axes, self.band, self.mean, self.points, self.level3 = {}, {}, {}, {}, {}
        for i, t in enumerate(TARGETS):
            for j, c in enumerate(ATTRIBUTES):
                q = t + c
                self.axes[q] = ax = grid[i][j]
                ax.set_gid(q)
                self.band[q] = ax.axhspan(0, 0, color="0.55", alpha=0.18, linewidth=0, gid="std")
                self.mean[q] = ax.axhline(0, color="0.15", linewidth=1.2, gid="mean")
                self.points[q] = ax.scatter([], [], s=14, color="0.25", alpha=0.75, linewidth=0, gid="points", zorder=3)
                self.level3[q] = ax.text(0.03, 0.97, "", transform=ax.transAxes, ha="left", va="top", fontsize=8,
                                         gid="level3")
                ax.set_xlim(-0.5, 0.5)
                ax.set_xticks([])
                # labels placed by hand, where there are none: a draw then measures no ticks for them
                ax.xaxis.set_label_coords(0.5, 0)
                if j:
                    ax.yaxis.set_label_coords(0, 0.5)
                ax.tick_params(labelsize=7)

    def draw(self, result, path, title, labels, p_holm):
        """Write the EAT-Map of ``result`` to ``path`` (plot_eat_map's arguments, ``labels`` complete)."""
        l1, l2, l3 = result.level1, result.level2, result.level3
        shaded = lit(result.pattern)
        points = {t + c: np.asarray(getattr(l2[t], "s_" + c.lower()), dtype=float) for t in TARGETS for c in ATTRIBUTES}
        spans = [v for q in QUADRANTS for v in (*points[q], l3[q].mean - np.nan_to_num(l3[q].std),
                                                l3[q].mean + np.nan_to_num(l3[q].std))]
        lo, hi = min(spans), max(spans)
        pad = 0.08 * max(hi - lo, 1e-3)
        for q, ax in self.axes.items():
            t, c = q
            ax.set_facecolor((WITH_LIGHT if congruent(q) else AGAINST_LIGHT) if q in shaded else "white")
            m, s = l3[q].mean, l3[q].std
            self.band[q].set_visible(bool(np.isfinite(s)))
            if np.isfinite(s):
                self.band[q].set_y(m - s)
                self.band[q].set_height(2 * s)
            self.mean[q].set_ydata([m, m])
            v = points[q]
            x = np.linspace(-0.3, 0.3, len(v)) if len(v) > 1 else np.zeros(len(v))
            self.points[q].set_offsets(np.column_stack([x, v]))
            self.level3[q].set_text(f"μ = {m:.3f}\nσ = {s:.3f}" if np.isfinite(s) else f"μ = {m:.3f}")
            if t == TARGETS[0]:
                ax.set_title(f"{c}: {labels[c]}", fontsize=9)
            if c == ATTRIBUTES[0]:
                d, p, mark = l2[t].d, l2[t].p, stars(p_holm[f"l2{t.lower()}_p_holm"])
                level2 = f"Level 2: d = {d:.2f}{mark}, {_p(p)}" if np.isfinite(d) else f"Level 2: {l2[t].status}"
                ax.set_ylabel(f"{t}: {labels[t]}\n{level2}", fontsize=8)
        self.axes["XA"].set_ylim(lo - pad, hi + pad)  # the four share it
        level1 = f"d = {l1.d:.2f}{stars(p_holm['l1_p_holm'])}, {_p(l1.p)}" if np.isfinite(l1.d) else l1.status
        head = f"{title}\n" if title else ""
        pattern = f"pattern {result.pattern}" + (f": {DESCRIPTIONS[result.pattern]}" if result.pattern in DESCRIPTIONS
                                                  else "")
        flag = (f"\ncosine similarity uninformative: every μ ≥ {result.saturation:g}"
                if result.cosine_uninformative else "")
        edge = self.PAD / self.SIZE[1]  # the figure fraction between its edge and the texts along it
        self.fig.suptitle(f"{head}Level 1: {level1}\n{pattern}{flag}", fontsize=9, y=1 - edge, va="top")
        note = (f"points: s(c, T) = mean cos(c, t) over t ∈ T, one per attribute stimulus; line μ, band μ ± σ (all "
                f"cosines of T with C); shaded: Level 2 p < {result.alpha:g} ({result.null} null); p as computed; "
                f"{significance_note(STARS_FAMILY)}")
        # wrapped to the figure's width: at 6.5 pt a line holds about 135 characters
        note = textwrap.fill(note, 125, break_on_hyphens=False)
        self.fig.supxlabel(note, fontsize=6.5, color="0.3", y=edge, va="bottom")
        # FreeType's autohinter, not the font's own hinting: a tenth less time per map, and a smaller PNG
        # (no hinting: a sixth less time, a fourth more bytes); the layout measures the glyphs alike
        with mpl.rc_context({"text.hinting": "force_autohint"}):
            self.place()
            # the layout fits the labels in the figure: no tight bounding box, whose second draw would cost as much
            self.render(note)
        with atomic_path(path) as tmp:
            # RGB, not savefig's RGBA: the figure is opaque, and the PNG a tenth smaller and quicker to write;
            # zlib level 3, not 6: a third less time for 5% more bytes
            rgba = Image.frombuffer("RGBA", self.fig.canvas.get_width_height(), self.fig.canvas.buffer_rgba())
            rgba.convert("RGB").save(tmp, format="png", dpi=(self.DPI, self.DPI), compress_level=3)
        return self.fig

    def render(self, note):
        """Draw the figure on its canvas. The note under the quadrants, the same on every map of a table, is
        drawn once: a later map with the same note is drawn without it, and the note's strip (``place``: the
        figure's width, below the axes and their tick labels) pasted back from the first, pixel for pixel. The
        note's 300 glyphs were a fifth of a map's drawing."""
        canvas, label = self.fig.canvas, self.fig._supxlabel
        if self._note is not None and self._note[0] == note:
            label.set_visible(False)
            canvas.draw()
            label.set_visible(True)
            canvas.restore_region(self._note[1])
            return
        canvas.draw()
        self._note = (note, canvas.copy_from_bbox(self._strip))

    def place(self):
        """Place the four axes (figure pixels) between the texts around them: above, the suptitle and the top
        row's titles; left, the left column's y axis (tick labels, their offset, the label); below, the
        supxlabel; half a tick label's height beyond each axes' top and bottom, where a label on a tick at the
        limit reaches. Each extent is measured on the renderer (its text extents cached): a map's layout is
        arithmetic on them, independent of the map drawn before."""
        fig, ax = self.fig, self.axes
        renderer = fig.canvas.get_renderer()
        width, height = fig.bbox.width, fig.bbox.height
        pad = self.PAD * fig.dpi
        top = height - fig._suptitle.get_window_extent(renderer).height - 2 * pad
        bottom = fig._supxlabel.get_window_extent(renderer).height + 2 * pad
        # the note's strip (render): up to half a pad above the note, clear of a tick label below the axes
        self._strip = Bbox.from_extents(0, 0, width, bottom - pad / 2)
        left = pad + max(self._place_ylabel(ax[q], renderer) for q in ("XA", "YA"))
        tick = ax["XA"].yaxis.get_majorticklabels()[0].get_window_extent(renderer).height / 2
        offset = ax["XA"].yaxis.offsetText
        offset = offset.get_window_extent(renderer).height + pad if offset.get_text() else 0
        above = max(max(ax[q].title.get_window_extent(renderer).y1 - ax[q].bbox.y1 for q in ("XA", "XB")), tick,
                    offset)
        cell_w = (width - left - 3 * pad) / 2
        gap = 2 * tick + pad + offset
        cell_h = (top - above - bottom - tick - gap) / 2
        for i, t in enumerate(TARGETS):
            for j, c in enumerate(ATTRIBUTES):
                x0 = left + j * (cell_w + 2 * pad)
                y0 = bottom + tick + (1 - i) * (cell_h + gap)
                ax[t + c].set_position([x0 / width, y0 / height, cell_w / width, cell_h / height])

    def _place_ylabel(self, ax, renderer):
        """Put ``ax``'s y label left of its tick labels, a label pad away, as matplotlib would, and return the
        pixels both take left of the axes. Placed here, once: left to matplotlib, each draw placed it anew,
        recomputing every tick of the axis a second time (a fifth of a map's drawing)."""
        yaxis, dpi = ax.yaxis, self.fig.dpi
        labels, _ = yaxis._get_ticklabel_bboxes(yaxis._update_ticks(), renderer)
        yaxis.offsetText.set_text(yaxis.major.formatter.get_offset())  # as a draw would: place reads it
        room = max([ax.bbox.x0 - box.x0 for box in labels] + [0]) + yaxis.labelpad * dpi / 72
        yaxis.set_label_coords(0, 0.5, ax.transAxes + ScaledTranslation(-room / dpi, 0, self.fig.dpi_scale_trans))
        return room + yaxis.label.get_window_extent(renderer).width


_FIGURE = None  # this process's _EatMapFigure, made by the first map it draws


def plot_eat_map(result, path, title="", labels=None, p_holm=None):
    """The EAT-Map of one vlbias.stats.mleat.MLEATResult (module docstring), written to ``path`` as PNG.

    ``labels``: the concepts' names ({"X": "Flower", "Y": "Insect", "A": "Pleasant", "B": "Unpleasant"});
    the set symbols where absent. ``p_holm``: the p its stars mark, {"l1_p_holm": ..., "l2x_p_holm": ...,
    "l2y_p_holm": ...} (``adjusted``: within its table's family); without it, the map's own (Level 1 alone,
    Level 2's two targets together). Each quadrant's Axes has the gid "XA", "XB", "YA" or "YB". Returns the
    Figure: this process's one EAT-Map Figure, which the next call redraws.
    """
    global _FIGURE
    labels = {s: s for s in (*TARGETS, *ATTRIBUTES)} | dict(labels or {})
    if p_holm is None:
        l1, l2 = result.level1, result.level2
        p_holm = dict(zip(ADJUSTED.values(), [l1.p, *holm([l2[t].p for t in TARGETS])], strict=True))
    if _FIGURE is None:
        _FIGURE = _EatMapFigure()
    return _FIGURE.draw(result, path, title, labels, p_holm)


def _draw_map(result, path, title, labels, p_holm=None):
    plot_eat_map(result, path, title, labels, p_holm)  # the Figure stays in the worker


def draw_maps(maps, workers=1):
    """Each (result, path, title, labels[, p_holm]) of ``maps`` drawn by plot_eat_map, in up to ``workers``
    processes forked from this one (a map is a fraction of a second of matplotlib, all CPU; a table of
    many tests and models spreads over the job's cores). One worker, or no ``fork`` on this platform
    (starting a fresh interpreter would cost more than it saves): one after another, here."""
    workers = min(workers, len(maps))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for m in maps:
            _draw_map(*m)
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_draw_map, *zip(*maps), chunksize=-(-len(maps) // workers)))


def plot_pattern_summary(rows, path, title):
    """Every (test, model) of a table's ML-EAT rows (mleat_frame; columns test, model, pattern, l1_d,
    l1_p, cosine_uninformative, and name where present) as a small 2 × 2 map of its pattern beside
    Level 1's d with the stars of its Holm-adjusted p (``adjusted``: ``l1_p_holm`` where ``rows`` has it,
    else within ``rows``' families); a row per test in first order of appearance, a column per model. A row
    without a pattern (a skipped test) is a blank map marked "skipped". Each square is a Rectangle with
    the gid "<test>|<model>|<quadrant>", each cell's background "<test>|<model>|cell". Returns the
    Figure.
    """
    rows = rows.reset_index(drop=True)
    if "l1_p_holm" not in rows:
        rows = adjusted(rows)
    if rows.duplicated(["test", "model"]).any():
        dup = rows[rows.duplicated(["test", "model"], keep=False)][["test", "model"]].drop_duplicates()
        raise ValueError(f"two rows for (test, model): {dup.to_records(index=False).tolist()}")
    tests = list(dict.fromkeys(rows["test"]))
    models = list(dict.fromkeys(rows["model"]))
    names = dict(zip(rows["test"], rows["name"] if "name" in rows else rows["test"]))
    width, side, gap = 3.0, 0.34, 0.04  # a cell's width; a square's side and the gap between squares

    labels = 0.065 * max((len(str(names[t])) for t in tests), default=0)
    fig = Figure(figsize=(labels + 1.2 + 1.25 * len(models), 1.5 + 0.26 * len(tests)), layout="constrained")
    ax = fig.add_subplot()
    for r in rows.itertuples(index=False):
        i, j = tests.index(r.test), models.index(r.model)
        x0, y0 = j * width + 0.15, i + 0.5 - side - gap / 2
        flagged = not missing(r.cosine_uninformative) and str(r.cosine_uninformative) == "True"
        ax.add_patch(Rectangle((j * width + 0.05, i + 0.05), width - 0.1, 0.9, facecolor=FLAGGED if flagged else "none",
                               edgecolor="none", gid=f"{r.test}|{r.model}|cell"))
        skipped = missing(r.pattern)
        on = lit(r.pattern)
        for k, q in enumerate(QUADRANTS):  # XA top left, XB top right, YA bottom left, YB bottom right
            colour = (WITH if congruent(q) else AGAINST) if q in on else ("white" if skipped else OFF)
            ax.add_patch(Rectangle((x0 + (k % 2) * (side + gap), y0 + (k // 2) * (side + gap)), side, side,
                                   facecolor=colour, edgecolor="0.6" if skipped else "none", linewidth=0.5,
                                   gid=f"{r.test}|{r.model}|{q}"))
        d = pd.to_numeric(pd.Series([r.l1_d]), errors="coerce")[0]
        p = pd.to_numeric(pd.Series([r.l1_p_holm]), errors="coerce")[0]
        if skipped:
            label = "skipped"
        elif r.pattern == UNDEFINED:
            label = "undefined"
        else:
            label = f"{d:.2f}{stars(p)}" if np.isfinite(d) else "d n/a"
        ax.text(x0 + 2 * side + gap + 0.15, i + 0.5, label, va="center", ha="left", fontsize=7.5,
                gid=f"{r.test}|{r.model}|d")
    ax.set_xlim(0, width * len(models))
    ax.set_ylim(len(tests), 0)
    ax.set_xticks([j * width + width / 2 for j in range(len(models))], models, fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(tests))], [names[t] for t in tests], fontsize=7.5)
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
    ax.spines[:].set_visible(False)
    ax.set_title(title, fontsize=10)
    handles = [Patch(color=WITH, label="Level 2: X with A or Y with B (with the test)"),
               Patch(color=AGAINST, label="Level 2: X with B or Y with A (against it)"),
               Patch(color=OFF, label="not significant"),
               Patch(color=FLAGGED, label="cosine similarity uninformative"),
               Line2D([], [], linestyle="", label="each map: X above Y, A left of B; number: Level 1 d; "
                                                   + significance_note("one model's tests in the table"))]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    save_png(fig, path)
    return fig


def _file_name(name):
    """A test's or model's name as one path component: what is not a letter, digit, '.', '_' or '-' as '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", str(name)).lstrip(".") or "_"


def map_path(maps, test, model):
    """The EAT-Map of (``test``, ``model``) in the folder ``maps``: ``maps/<test>/<model>.png``."""
    return Path(maps, _file_name(test), f"{_file_name(model)}.png")


def _number(value, digits=2):
    return "" if missing(value) else f"{float(value):.{digits}f}"


def compact(df):
    """The page's (and `vlbias show`'s) view of a table: per (test, model) the pattern, the flag and each level's numbers."""
    out = pd.DataFrame({"test": df["name"] if "name" in df else df["test"], "model": df["model"]})
    if "level" in df:
        out.insert(1, "level", df["level"])
    out["n (X, Y, A, B)"] = [", ".join("" if missing(v) else str(int(v)) for v in r)
                             for r in df[["n_x", "n_y", "n_a", "n_b"]].itertuples(index=False)]
    out["pattern"] = [r.status if missing(r.pattern) else r.pattern for r in df.itertuples(index=False)]
    out["cosine uninformative"] = ["yes" if str(v) == "True" else "" for v in df["cosine_uninformative"]]
    out["L1 d"] = [_number(v) for v in df["l1_d"]]
    out["L1 p"] = [format_p(float(v), 4) if not missing(v) else "" for v in df["l1_p"]]
    for t in "xy":
        out[f"L2 d_{t.upper()}"] = [_number(v) for v in df[f"l2{t}_d"]]
        out[f"L2 p_{t.upper()}"] = [format_p(float(v), 4) if not missing(v) else "" for v in df[f"l2{t}_p"]]
    for q in ("xa", "xb", "ya", "yb"):
        out[f"L3 μ_{q.upper()}"] = [_number(v, 3) for v in df[f"l3_{q}_mean"]]
    return out


def write_mleat(found, *, csv, page, summary, maps, title, caption, workers=1):
    """Write one table's ML-EAT files (module docstring) from ``found``, [(row, MLEATResult or None)]
    as vlbias.associate.run_mleats (or the grounded suite's run) returns them, each row keyed by its
    (test, model) (the grounded suite's test key folds in its dataset and level).

    ``csv``: the table (mleat_frame); ``summary``: the pattern summary (PNG); ``maps``: the folder of
    EAT-Maps (one per result; a skipped test has none); ``page``: an HTML page with the table's main numbers
    and the summary inlined (it stands alone, and in the report), and a link to each map (a path relative to
    the page: ``maps`` beside it). ``workers``: the processes that draw the maps (draw_maps).
    Returns the table.
    """
    df = adjusted(mleat_frame(row for row, _ in found))  # the p the stars mark, in the CSV beside its p
    with atomic_path(csv) as tmp:
        df.to_csv(tmp, index=False)
    plot_pattern_summary(df, summary, title)
    Path(maps).mkdir(parents=True, exist_ok=True)
    links, drawn = [], []
    for (row, result), p_holm in zip(found, df[list(ADJUSTED.values())].to_dict("records"), strict=True):
        if result is None:
            continue
        path = map_path(maps, row["test"], row["model"])
        path.parent.mkdir(parents=True, exist_ok=True)
        label = f"{row.get('name') or row['test']} on {row['model']}"
        drawn.append((result, path, label, {s: row[s] for s in (*TARGETS, *ATTRIBUTES) if not missing(row.get(s))},
                      p_holm))
        href = Path(os.path.relpath(path, Path(page).parent)).as_posix()
        links.append(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a>: {html.escape(result.pattern)}</li>')
    draw_maps(drawn, workers)
    note = ("Level 1: the differential EAT (the tables' d and one-sided permutation p); Level 2: each target's "
            "effect size against A and B and its p in the direction of d; Level 3: each target concept's mean "
            "cosine with each attribute concept. Stars in the summary and the EAT-Maps: "
            f"{significance_note(STARS_FAMILY)} (the CSV's l1_p_holm, l2x_p_holm, l2y_p_holm). Every statistic "
            f"with its settings and provenance is in the CSV beside this page ({Path(csv).name}); docs/mleat.md.")
    # the maps stay files of their own (a table of many tests and models would make a page of megabytes);
    # the report shows each as an entry (EAT-Maps), the page links them
    maps_part = ('<p class="vlbias-note">EAT-Maps, one per test and model (the report lists them under EAT-Maps):'
                 "</p>\n<ul>\n" + "\n".join(links) + "\n</ul>\n") if links else ""
    write_page(page, title, [f"<p>{html.escape(caption)}</p>\n", table_html(compact(df), title, note),
                             figure_html(png_data_uri(summary), f"{title}: the pattern of each test and model."),
                             maps_part])
    return df
