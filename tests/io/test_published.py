"""The reader of the iEAT authors' published embedding CSVs: exact numbers, named errors."""

import re

import numpy as np
import pandas as pd
import pytest

from vlbias.errors import InputError
from vlbias.io.published import read_ieat_csv


def write(tmp_path, df):
    path = tmp_path / "e.csv"
    df.to_csv(path)
    return path


def test_values_are_the_float64_pandas_reads(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(5, 7)) * 10.0 ** rng.integers(-12, 3, size=(5, 7))).assign(
        img=[f"im{i}.jpg" for i in range(5)])
    path = write(tmp_path, df)
    vectors, names = read_ieat_csv(path)
    expected = pd.read_csv(path, index_col=0).drop(columns="img").to_numpy(np.float64)
    assert vectors.dtype == np.float64 and (vectors == expected).all() and names == list(df["img"])


def text_at(df, row, column, value):
    df = df.astype(object)
    df.iloc[row, column] = value
    return df


@pytest.mark.parametrize("change,message", [
    (lambda df: df.drop(columns="img"), "no 'img' column"),
    (lambda df: df.rename(columns={1: "x"}), "dimension columns are not named 0..dim-1"),
    (lambda df: text_at(df, 0, 2, "a"), "line 2: non-numeric value"),
    (lambda df: text_at(df, 1, 0, np.nan), "rows ['b.jpg'] contain NaN or inf"),
    (lambda df: df.iloc[:0], "no embeddings (empty file)"),
])
def test_a_malformed_file_is_named_with_what_is_wrong(tmp_path, change, message):
    df = pd.DataFrame(np.ones((3, 4))).assign(img=["a.jpg", "b.jpg", "c.jpg"])
    path = write(tmp_path, change(df))
    with pytest.raises(InputError, match=re.escape(message)) as e:
        read_ieat_csv(path)
    assert str(e.value).startswith(str(path))


def test_a_ragged_line_is_named(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text(",0,1,img\n0,1.0,2.0,a.jpg\n1,1.0,b.jpg\n")
    with pytest.raises(InputError, match="line 3: 3 fields, the header has 4"):
        read_ieat_csv(path)
