"""A Parquet file whose column chunk's size statistics do not fit its column (a
definition-level histogram of 2 for a column that has none) ended ``trace info`` with
SIGABRT (exit 134, "terminate called after throwing an instance of
'parquet::ParquetException'"): the bound on what its columns decode to asked pyarrow
for the chunk's metadata, which pyarrow builds where its C++ exception cannot be caught.
The chunk sizes are now read from the footer's bytes, and the file is one line naming
it. Found by the fuzz campaign's run log reader (a mutated part file)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shrink.errors import TraceFormatError
from shrink.parquet_footer import FooterError, chunk_sizes, footer_bytes
from shrink.runlog import RunLog

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _histogram_misfit(path: Path) -> Path:
    """A text column written OPTIONAL (its chunk's definition-level histogram holds 2 counts)
    whose schema element is then made REQUIRED (no definition levels): same length."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"abc": pa.array(["x", None, "yz"], pa.string())}), sink)
    optional = b"\x25\x02\x18\x03abc"  # repetition_type 1 (OPTIONAL), then name "abc"
    data = sink.getvalue()
    assert data.count(optional) == 1
    path.write_bytes(data.replace(optional, b"\x25\x00\x18\x03abc"))
    return path


def test_a_chunk_whose_statistics_misfit_its_column_is_one_line_not_an_abort(tmp_path):
    path = _histogram_misfit(tmp_path / "t.parquet")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-m", "shrink", "trace", "info", str(path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "terminate called" not in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        f"error: {path}: not a readable Parquet trace (Definition level histogram size "
        "mismatch, size: 2, expected: 1)"
    )


def test_a_run_log_part_whose_statistics_misfit_is_refused(tmp_path):
    path = _histogram_misfit(tmp_path / "r.parquet")
    code = (
        "import sys\nfrom shrink.errors import TraceFormatError\n"
        "from shrink.runlog import RunLog\n"
        f"try:\n    RunLog.read_parquet({str(path)!r})\n"
        "except TraceFormatError as exc:\n    print(exc)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "not a readable Parquet run log (Definition level histogram" in p.stdout


def test_the_chunk_sizes_are_those_pyarrow_reads(tmp_path):
    n = 50
    t = pa.table(
        {
            "i": np.arange(n),
            "s": [f"x{k}" * (k % 7) for k in range(n)],
            "b": pa.array([bytes(k % 5) for k in range(n)], pa.binary()),
            "f": pa.array([None if k % 3 else 1.5 for k in range(n)], pa.float64()),
        }
    )
    path = tmp_path / "m.parquet"
    pq.write_table(t, path, row_group_size=7)
    meta = pq.ParquetFile(path).metadata
    want = [
        [meta.row_group(i).column(j).total_uncompressed_size for j in range(meta.num_columns)]
        for i in range(meta.num_row_groups)
    ]
    with open(path, "rb") as f:
        assert chunk_sizes(footer_bytes(f)) == want
    assert len(want) == 8


def test_a_footer_that_does_not_walk_is_an_error(tmp_path):
    path = tmp_path / "m.parquet"
    RunLog.from_columns({"intended": np.arange(3.0)}).write_parquet(path)
    with open(path, "rb") as f:
        footer = footer_bytes(f)
    for cut in (1, len(footer) // 2, len(footer) - 1):
        with pytest.raises(FooterError):
            chunk_sizes(footer[:cut])
    with pytest.raises(FooterError, match="unknown type"):
        chunk_sizes(b"\x1f")
    # a list said to hold more elements than there are bytes left
    with pytest.raises(FooterError, match="a list of"):
        chunk_sizes(b"\x49\xfc\xff\xff\xff\x0f")
    # a footer cut short in the file itself: the read says so in one line
    data = path.read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    path.write_bytes(data[: -8 - n] + footer[: n // 2] + bytes(n - n // 2) + data[-8:])
    with pytest.raises(TraceFormatError, match="not a readable Parquet run log"):
        RunLog.read_parquet(path)


def _with_unknown_field(path: Path, elements: int) -> Path:
    """A small run log whose footer gains a field pyarrow does not know (id 100, which
    it skips in C++): a list of ``elements`` empty structs, a byte each."""
    RunLog.from_columns({"intended": np.arange(3.0)}).write_parquet(path)
    data = path.read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - n : -8]
    assert footer[-1] == 0  # FileMetaData's stop
    count = bytearray()
    k = elements
    while True:
        count.append((k & 0x7F) | (0x80 if k >> 7 else 0))
        k >>= 7
        if not k:
            break
    extra = b"\x09\xc8\x01\xfc" + bytes(count) + bytes(elements)  # field 100: list<struct>
    new = footer[:-1] + extra + b"\x00"
    path.write_bytes(data[: -8 - n] + new + len(new).to_bytes(4, "little") + b"PAR1")
    return path


def test_a_footer_of_values_its_row_groups_do_not_need_is_refused_before_it_is_walked(tmp_path):
    """Walking a footer takes about a microsecond a byte in Python where pyarrow skips
    a field it does not know in C++: 4 MB of empty structs in such a field took 4.8 s
    to walk (pyarrow: 0.09 s), a footer at the memory bound (250 MB) minutes. The bytes
    walked are now bounded by the row groups, columns and key-value pairs pyarrow read."""
    path = _with_unknown_field(tmp_path / "r.parquet", 300_000)
    meta = pq.ParquetFile(path).metadata  # pyarrow reads it
    assert meta.num_row_groups == 1 and meta.num_rows == 3
    with pytest.raises(TraceFormatError, match="its footer holds more values than its row groups"):
        RunLog.read_parquet(path)
    # a few such values are walked as before
    small = _with_unknown_field(tmp_path / "s.parquet", 1000)
    assert len(RunLog.read_parquet(small)) == 3
