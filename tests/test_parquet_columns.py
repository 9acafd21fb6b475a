"""Parquet traces are checked per column, by name: a wrong type or a value out of
bounds is refused with the column (and the row) named, never accepted silently."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shrink.errors import TraceFormatError
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _written(tmp_path, name: str, values) -> str:
    t = np.arange(5) / 10.0
    good = Trace.from_columns(
        {"session": np.arange(5), "t": t, "path": ["/a"] * 5, "bytes": [10] * 5}
    ).table
    i = good.column_names.index(name)
    table = good.set_column(i, name, pa.array(values))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    return str(path)


@pytest.mark.parametrize(
    ("column", "values", "said"),
    [
        ("t", ["0", "1", "2", "3", "4"], "column 't' is of type string, must be a number"),
        ("path", [1, 2, 3, 4, 5], "column 'path' is of type int64, must be a string"),
        ("session", [0.5, 1, 2, 3, 4], "column 'session' is of type double, must be an integer"),
        ("bytes", [10, 10, -5, 10, 10], "row 2: bytes == -5, must be >= -1"),
        ("t", [0.0, 1e300, 2, 3, 4], "row 1: t == 1e+300"),
        ("t", [0.0, 1, math.nan, 3, 4], "row 2: t == nan"),
        ("t", [0.0, 1, 2, math.inf, 4], "row 3: t == inf"),
        ("think", [0.0, 1, 2, 3, -1.0], "row 4: think == -1.0"),
        ("status", [200, 200, 200, 200, 70000], "row 4: status == 70000"),
        ("rt", [0.1, math.inf, 0.1, 0.1, 0.1], "row 1: rt == inf"),
        ("burst", np.array([0, 0, 2**40, 0, 0], dtype=np.int64), "column 'burst': a value"),
    ],
)
def test_a_bad_column_is_refused_by_name(tmp_path, column, values, said):
    path = _written(tmp_path, column, values)
    with pytest.raises(TraceFormatError) as err:
        Trace.read_parquet(path)
    assert said in str(err.value) and str(err.value).startswith(path)


def test_good_columns_of_another_width_still_read(tmp_path):
    path = _written(tmp_path, "bytes", np.array([1, 2, 3, 4, 5], dtype=np.int32))
    assert Trace.read_parquet(path).column("bytes").tolist() == [1, 2, 3, 4, 5]
    path = _written(tmp_path, "t", np.array([0, 1, 2, 3, 4], dtype=np.int64))
    assert Trace.read_parquet(path).column("t").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def _with_column(tmp_path, name: str, values) -> str:
    good = Trace.from_columns(
        {"session": np.arange(5), "t": np.arange(5) / 10.0, "path": ["/a"] * 5, "bytes": [10] * 5}
    ).table
    path = tmp_path / "t.parquet"
    pq.write_table(good.append_column(name, pa.array(values)), path)
    return str(path)


@pytest.mark.parametrize(
    ("column", "values", "said"),
    [
        ("conn", [0, 1, -3, 1, 2], "row 2: conn == -3, must be a connection number >= 0"),
        ("ttfb", [0.1, 0.1, 0.1, -0.5, 0.1], "row 3: ttfb == -0.5"),
        ("ttfb", [0.1, math.inf, 0.1, 0.1, 0.1], "row 1: ttfb == inf"),
    ],
)
def test_a_bad_optional_column_is_refused_by_name(tmp_path, column, values, said):
    with pytest.raises(TraceFormatError, match=r"\S") as err:
        Trace.read_parquet(_with_column(tmp_path, column, values))
    assert said in str(err.value)


def test_unknown_values_in_optional_columns_still_read(tmp_path):
    tr = Trace.read_parquet(_with_column(tmp_path, "ttfb", [0.1, math.nan, None, 0.0, 0.2]))
    assert np.isnan(tr.column("ttfb")[1])
    assert (
        Trace.read_parquet(_with_column(tmp_path, "conn", [0, None, 1, 1, 2])).table.num_rows == 5
    )
