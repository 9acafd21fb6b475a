"""A RunLog file read back (a part's, merged by the parent) that is not as the writer
writes it is refused in one line naming the file and the column, never a traceback:
a missing column, one that does not read as its type, or a null where text is written
(the stop's ``cut``/``unsent`` marks are read from the ``error`` column). Found by the
fuzz campaign's run log reader."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shrink.errors import TraceFormatError
from shrink.measure import level_stats
from shrink.runlog import RunLog
from shrink.target import GeneratorCheck, RunResult

pytestmark = pytest.mark.compute


def _written(tmp_path, change=None):
    t = np.arange(4) * 0.1
    cols = {"intended": t, "sent": t, "done": t + 1e-3, "error": ["", "", "cut", "unsent"]}
    path = RunLog.from_columns(cols, meta={"engine": "python"}).write_parquet(
        tmp_path / "r.parquet"
    )
    if change is not None:
        table = pq.read_table(path)
        pq.write_table(change(table), path)
    return path


def _not_utf8():
    """A string column holding a byte that is not UTF-8 (Parquet does not check it)."""
    raw = pa.array([b"", b"\xe1\x00x", b"cut", b"unsent"], pa.binary())
    return raw.cast(pa.string(), safe=False)


def _set(name, values):
    def change(table):
        i = table.column_names.index(name)
        return table.set_column(
            i, name, values if isinstance(values, pa.Array) else pa.array(values)
        )

    return change


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda t: t.drop_columns(["error"]), r"not a run log: it lacks columns \['error'\]"),
        (lambda t: t.drop_columns(["intended"]), r"lacks columns \['intended'\]"),
        (_set("intended", ["x", "1.5", "", "2"]), "column 'intended' is of type string"),
        (_set("status", ["1.5"] * 4), "column 'status' is of type string"),
        (_set("bytes", [1.5] * 4), "column 'bytes' is of type double"),
        (_set("error", ["", None, "cut", "unsent"]), "row 1: column 'error' is null"),
        (_set("cls", ["static", "static", None, "static"]), "row 2: column 'cls' is null"),
        (_set("error", _not_utf8()), r"not a readable Parquet run log \(Column 9: .*Invalid UTF8"),
    ],
)
def test_a_run_log_not_as_written_is_refused_naming_the_column(tmp_path, change, words):
    path = _written(tmp_path, change)
    with pytest.raises(TraceFormatError, match=words) as info:
        RunLog.read_parquet(path)
    assert str(path) in str(info.value)


def test_a_run_log_as_written_reads_and_is_measured_as_a_stopped_run(tmp_path):
    # a column of a narrower type is read as the writer types it, as before
    path = _written(tmp_path, _set("session", np.arange(4, dtype=np.int32)))
    log = RunLog.read_parquet(path)
    assert log.column("error").tolist() == ["", "", "cut", "unsent"]
    assert log.table.schema.field("session").type == pa.int64()
    check = GeneratorCheck(0.0, 0.0, 0.0, 0.0, 0.0)
    res = RunResult(log, (0.0, 0.4), check, describe={"engine": {"interrupted": True}})
    st = level_stats(res)
    assert st.requests == 2 and st.errors == 0
