"""The specification curve's figure: d sorted on top, each specification's axis values in the matrix
beneath at its place in that order, only the axes that vary; and a suite's robustness outputs."""

import numpy as np
import pandas as pd

from vlbias.report.speccurve import matrix_rows, plot_curve, write_robustness


def curve():
    return pd.DataFrame({
        "test": "t", "model": "m", "name": "T", "status": "ok", "casing": "given",
        "template": ["bare", "photo", "bare", "photo"], "draw": ["", "", 0, 0],
        "d": [0.5, -0.4, 0.9, -0.1], "d_low": [0.2, -0.8, 0.5, -0.5], "d_high": [0.8, 0.0, 1.2, 0.3],
        "p_holm": [0.01, 0.3, 0.01, 0.6], "default": [True, False, False, False]})


def test_the_matrix_has_a_row_per_value_of_each_axis_varied():
    assert matrix_rows(curve()) == [("template", "bare"), ("template", "photo"), ("draw", ""), ("draw", "0")]


def test_the_curve_is_sorted_and_the_matrix_marks_each_specification_in_place(tmp_path):
    fig = plot_curve(curve(), tmp_path / "c.png", "T on m")
    top, bottom = fig.axes
    points = np.concatenate([c.get_offsets() for c in top.collections if len(c.get_offsets())
                             and c.get_offsets().shape[1] == 2 and not hasattr(c, "get_segments")])
    assert sorted(points[:, 1]) == [-0.4, -0.1, 0.5, 0.9]
    by_x = dict(zip(points[:, 0], points[:, 1], strict=True))
    assert [by_x[x] for x in range(4)] == [-0.4, -0.1, 0.5, 0.9]  # sorted by d along x
    default = top.collections[-1].get_offsets()
    assert default.tolist() == [[2, 0.5]]  # the default, red, at its rank
    marks = {round(y): sorted(c.get_offsets()[:, 0]) for c in bottom.collections
             for y in set(c.get_offsets()[:, 1])}
    assert marks[1] == [0, 1] and marks[0] == [2, 3]  # template photo: the two lowest d; bare the others
    assert (tmp_path / "c.png").stat().st_size > 0


def test_the_outputs_of_a_suites_curves(tmp_path):
    table = pd.DataFrame({"test": ["t"], "model": ["m"], "d": [0.5], "robust": [""]})
    twins = pd.DataFrame({"test": ["t"], "model": ["m"], "d": [0.1], "status": ["ok"]})
    paths = {k: tmp_path / f"out.{k}" for k in ("csv", "md", "html")}
    write_robustness(table, curve(), twins, "caption", specifications=tmp_path / "s.csv", curves=tmp_path / "curves",
                     **paths)
    rows = pd.read_csv(tmp_path / "s.csv")
    assert len(rows) == 5 and rows["twin"].tolist() == [False] * 4 + [True]
    assert (tmp_path / "curves" / "m" / "t.png").is_file()
    assert "data:image/png;base64," in paths["html"].read_text() and "robust:" in paths["md"].read_text()
