"""The declared result row (vlbias.stats.row): its order, its builder's check, its tables, the old names."""

import pandas as pd
import pytest

from vlbias.errors import UsageError
from vlbias.stats.row import ASSOCIATION, GROUNDED, MLEAT, renamed


def test_a_row_is_built_in_the_declared_order_whatever_order_it_was_given():
    row = ASSOCIATION.build({"status": "ok", "d": 0.5}, {"test": "t", "n_x": 3}, p=0.1, d=0.7)
    assert list(row) == ["test", "n_x", "d", "p", "status"] and row["d"] == 0.7  # a later value wins


def test_a_computed_column_that_is_not_declared_is_refused_by_name():
    with pytest.raises(UsageError, match=r"undeclared column\(s\) d_magnitude"):
        ASSOCIATION.build(test="t", d_magnitude="large")


def test_every_kind_of_row_counts_its_sets_under_the_papers_lower_case_symbols():
    assert ASSOCIATION.sizes == MLEAT.sizes == ("n_x", "n_y", "n_a", "n_b")
    assert GROUNDED.sizes == ("n_x", "n_y", "n_a_x", "n_a_y", "n_b_x", "n_b_y")
    for kind in (ASSOCIATION, MLEAT, GROUNDED):
        assert kind.columns.index("status") == len(kind.identity) + len(kind.sizes) + len(kind.statistics)
        assert len(set(kind.columns)) == len(kind.columns)


def test_a_table_has_every_declared_column_and_the_optional_ones_only_where_a_row_has_them():
    df = MLEAT.frame([{"test": "t", "model": "m", "n_x": 2, "commit": "abc"}])
    assert list(df.columns) == ["test", "model", *MLEAT.computed, "commit"]
    assert df.loc[0, "n_x"] == 2 and pd.isna(df.loc[0, "l1_d"])
    assert list(ASSOCIATION.frame([]).columns) == ASSOCIATION.columns  # none optional: an empty table too


def test_a_file_written_before_the_rename_reads_under_todays_names():
    old = pd.DataFrame({"n_t": [5], "n_y": [5], "n_A_x": [2]})
    assert list(renamed(old).columns) == ["n_x", "n_y", "n_a_x"]
    both = pd.DataFrame({"n_t": [1], "n_x": [2]})  # today's name is kept where a file has it already
    assert list(renamed(both).columns) == ["n_t", "n_x"]
