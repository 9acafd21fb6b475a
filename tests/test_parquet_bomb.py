"""A small Parquet file whose repeated values decode to more memory than the process has
left is refused in one line naming the file and the column, before it is decoded; a file
that fits reads as before, each column typed as the file types it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shrink.errors import TraceFormatError
from shrink.parquet_read import decoded_size, memory_left, read_bounded
from shrink.runlog import RunLog
from shrink.trace import Trace

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _bomb(path: Path, rows: int, value_bytes: int, column: str = "body") -> Path:
    """A trace of ``rows`` rows sharing one ``value_bytes``-long body (or path), stored
    once: the file is a few KB, whatever it decodes to."""
    big = pa.array([b"x" * value_bytes] if column == "body" else ["/" + "y" * value_bytes])
    shared = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), big)
    cols: dict[str, pa.Array] = {
        "session": pa.array(np.arange(rows, dtype=np.int64)),
        "t": pa.array(np.arange(rows, dtype=np.float64) * 0.01),
        "path": pa.array(["/a"] * rows),
    }
    cols[column] = shared
    table = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).table
    for name in table.column_names:
        if name not in cols:
            cols[name] = pa.repeat(table.column(name)[0], rows)
    pq.write_table(
        pa.table(cols), path, compression="zstd", dictionary_pagesize_limit=2 * value_bytes
    )
    return path


@pytest.mark.parametrize("column", ["body", "path"])
def test_a_repeated_value_past_the_memory_left_names_file_and_column(tmp_path, column):
    path = _bomb(tmp_path / "t.parquet", rows=2000, value_bytes=4096, column=column)
    assert path.stat().st_size < 50_000  # 8 MB once decoded
    with pytest.raises(TraceFormatError) as err:
        read_bounded(path, left=4 << 20)
    msg = str(err.value)
    assert str(path) in msg and f"{column!r}" in msg and "2,000 rows" in msg
    assert "more than the 4 MiB of memory this process has left" in msg


def test_a_trace_that_fits_reads_as_pyarrow_reads_it(tmp_path):
    path = _bomb(tmp_path / "t.parquet", rows=300, value_bytes=100)
    got = read_bounded(path, left=1 << 30)
    want = pq.read_table(path)
    assert got.schema == want.schema
    assert got.column("body").to_pylist() == want.column("body").to_pylist()
    same = ["session", "t", "path", "method", "client"]  # (rt is NaN: never equal)
    assert got.select(same).equals(want.select(same))
    # a file written as plain trace columns keeps its plain types
    plain = tmp_path / "plain.parquet"
    Trace.from_columns(
        {"session": [1, 2], "t": [0.0, 1.0], "path": ["/a", "/b"], "body": [b"", b"q"]}
    ).write_parquet(plain)
    again = read_bounded(plain, left=1 << 30)
    assert again.schema == pq.read_table(plain).schema
    assert again.column("body").type == pa.binary()


def test_decoded_size_counts_each_row_with_nulls_as_nothing():
    values = [b"ab", None, b"abcd", b"ab", b""]
    plain = pa.chunked_array([pa.array(values, pa.binary())])
    encoded = pa.chunked_array([pa.array(values, pa.binary()).dictionary_encode()])
    assert decoded_size(plain) == decoded_size(encoded) == 8
    assert decoded_size(pa.chunked_array([], pa.dictionary(pa.int32(), pa.string()))) == 0


def test_memory_left_is_the_least_of_what_the_machine_says(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    status, cgroup = tmp_path / "status", tmp_path / "cgroup"  # absent: not known
    assert memory_left(meminfo, status, cgroup) == 2048 * 1024
    assert memory_left(tmp_path / "none", status, cgroup) in (None, _rlimit_left())


def _rlimit_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def test_memory_left_counts_what_ulimit_d_leaves(tmp_path, monkeypatch):
    # Only ulimit -v was read: under ulimit -d the bounds took the machine's memory.
    real = resource.getrlimit
    monkeypatch.setattr(
        resource, "getrlimit",
        lambda w: (64 << 20, -1) if w == resource.RLIMIT_DATA else real(w),
    )  # fmt: skip
    meminfo, status = tmp_path / "meminfo", tmp_path / "status"
    meminfo.write_text("MemAvailable:    8388608 kB\n")
    status.write_text("VmSize:\t 900000 kB\nVmData:\t   16384 kB\n")
    assert memory_left(meminfo, status, tmp_path / "cgroup") == 48 << 20


def test_a_run_log_is_read_with_the_same_bound(tmp_path, monkeypatch):
    path = _bomb(tmp_path / "r.parquet", rows=2000, value_bytes=4096)
    monkeypatch.setattr("shrink.parquet_read.memory_left", lambda: 1 << 20)
    with pytest.raises(TraceFormatError, match="decode to 8 MiB"):
        RunLog.read_parquet(path)
    with pytest.raises(TraceFormatError, match="decode to 8 MiB"):
        Trace.read_parquet(path)


def test_trace_info_under_ulimit_v_refuses_the_file_in_one_line(tmp_path):
    """A 10 KB trace holding one 1 MiB body in 1,500 rows took 3.75 GB to read; under a
    ``ulimit -v`` that leaves about 1 GB it failed inside pyarrow."""
    path = _bomb(tmp_path / "t.parquet", rows=1500, value_bytes=1 << 20)
    assert path.stat().st_size < 100_000

    # the limit is set once pyarrow and the CLI are loaded: 1 GiB more than they take
    run = (
        "import resource, sys, pyarrow.parquet, shrink.cli.trace_cmd\n"
        "from shrink.cli import main\n"
        "size = next(int(x.split()[1]) * 1024 for x in open('/proc/self/status')"
        " if x.startswith('VmSize:'))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), size + (1 << 30)))\n"
        "sys.argv = ['shrink', 'trace', 'info', sys.argv[1]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", run, str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {path}: its text and bytes columns decode to 1,500 MiB")
    assert "'body'" in last


def _nothing_read(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the file was read before its size was checked")

    monkeypatch.setattr("shrink.parquet_read.pq.read_table", refuse)


def test_a_body_without_a_dictionary_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Plain-encoded compressed pages: 1,500 rows of one 1 MiB body in an 80 KB file took
    1.1 GB before the check after the read refused it (read_dictionary decodes such pages)."""
    rows, value = 200, 64 << 10
    cols = pq.read_table(_bomb(tmp_path / "d.parquet", rows, 8)).to_pydict()
    cols["body"] = [b"x" * value] * rows
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table(cols), path, compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 100_000  # 12.5 MiB once decoded
    _nothing_read(monkeypatch)
    with pytest.raises(TraceFormatError) as err:
        read_bounded(path, left=4 << 20)
    msg = str(err.value)
    assert "its columns decode to 13 MiB ('body': 13 MiB, 200 rows)" in msg
    assert "more than the 4 MiB" in msg


def test_many_rows_of_a_constant_are_refused_before_they_are_read(tmp_path, monkeypatch):
    """A number repeated in every row compresses to nothing: only the text columns were
    bounded, so a million rows of constants passed a 4 MiB bound (8 MB a column)."""
    path = _bomb(tmp_path / "c.parquet", rows=1_000_000, value_bytes=1)
    table = pq.read_table(path)
    table = table.set_column(0, "session", pa.array(np.zeros(1_000_000, np.int64)))
    table = table.set_column(1, "t", pa.array(np.zeros(1_000_000)))
    pq.write_table(table, path, compression="zstd")
    assert path.stat().st_size < 200_000
    _nothing_read(monkeypatch)
    with pytest.raises(TraceFormatError, match=r"its columns decode to \d+ MiB"):
        read_bounded(path, left=4 << 20)


def test_a_nested_column_is_refused_by_name_before_it_is_read(tmp_path, monkeypatch):
    """A list of bytes sharing one 1 MiB value in 1,500 rows, with no Arrow schema stored:
    an 11 KB file read to 3.6 GB, past the check (it looked at flat columns only)."""
    rows = 50
    shared = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array([b"x"]))
    table = pq.read_table(_bomb(tmp_path / "n.parquet", rows, 8))
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32))
    table = table.append_column("extra", pa.ListArray.from_arrays(offsets, shared))
    path = tmp_path / "nested.parquet"
    pq.write_table(table, path, store_schema=False)
    _nothing_read(monkeypatch)
    with pytest.raises(TraceFormatError) as err:
        read_bounded(path, left=1 << 30)
    assert "column 'extra' is nested (list<element: binary>)" in str(err.value)
    assert str(path) in str(err.value)


def test_a_parquet_file_is_read_on_the_calling_thread(tmp_path):
    """``predict`` under ``ulimit -v 471040`` hung for good (SIGTERM could not stop it):
    ``pq.read_table`` handed the scan to pyarrow's worker threads, one could not be
    made, and the scan's future never ended; at 481280 it said "not a readable Parquet
    trace (Failed to launch worker thread)". The read starts no pool of workers now
    (pyarrow may still start its one I/O thread)."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"t": [0.0, 1.0], "path": ["/a", "/b"]}), path)
    code = (
        "import os, sys; from pathlib import Path; import pyarrow.parquet\n"
        "from shrink.parquet_read import read_bounded\n"
        "n = len(os.listdir('/proc/self/task'))\n"
        "read_bounded(Path(sys.argv[1]))\n"
        "print(len(os.listdir('/proc/self/task')) - n)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
        cwd=ROOT, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) <= 1  # read_table started three (two workers, one for I/O)


def _many_row_groups(path: Path, groups: int) -> Path:
    """A trace of ``groups`` one-row row groups: a small file with a large footer."""
    table = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).table
    with pq.ParquetWriter(path, table.schema) as w:
        for _ in range(groups):
            w.write_table(table)
    return path


def test_a_footer_past_the_memory_left_is_refused_before_pyarrow_parses_it(tmp_path, monkeypatch):
    """20,000 one-row row groups (a 20 MB footer) took 1.4 GB to read and aborted with
    std::bad_alloc under ``ulimit -v 1500000``: the bounds applied only once pyarrow had
    parsed the footer. Its length (the file's last 8 bytes) bounds it first."""
    from shrink.defaults import FOOTER_READ_FACTOR
    from shrink.parquet_read import footer_length

    path = _many_row_groups(tmp_path / "groups.parquet", 500)
    n = footer_length(path)
    assert n is not None and n > 100_000
    _nothing_read(monkeypatch)

    def no_parse(*args, **kwargs):
        raise AssertionError("the footer was parsed before its length was checked")

    monkeypatch.setattr("shrink.parquet_read.pq.ParquetFile", no_parse)
    monkeypatch.setattr("shrink.parquet_read.pq.read_schema", no_parse)
    with pytest.raises(TraceFormatError) as err:
        read_bounded(path, left=n * FOOTER_READ_FACTOR - 1)
    msg = str(err.value)
    assert str(path) in msg and f"its footer (the file's metadata, {n:,} bytes)" in msg
    monkeypatch.setattr("shrink.parquet_read.memory_left", lambda: n)
    with pytest.raises(TraceFormatError, match="its footer"):
        Trace.read_parquet(path)


def test_a_footer_within_the_memory_left_reads(tmp_path):
    from shrink.defaults import FOOTER_READ_FACTOR
    from shrink.parquet_read import footer_length

    path = _many_row_groups(tmp_path / "groups.parquet", 20)
    n = footer_length(path)
    assert n is not None
    assert read_bounded(path, left=n * FOOTER_READ_FACTOR).num_rows == 20
    assert footer_length(tmp_path / "missing.parquet") is None
    (tmp_path / "short").write_bytes(b"PAR1")
    assert footer_length(tmp_path / "short") is None


def test_a_footer_longer_than_the_file_is_a_corrupt_file_not_a_memory_refusal(tmp_path):
    """A length of 0xFFFFFFFF (or 2**31, negative as signed) in a 1 KB file was "its
    footer ... takes about 393,216 MiB to read ... a file of fewer row groups reads in
    less": the file is cut or corrupt, which pyarrow says."""
    import struct

    from shrink.parquet_read import footer_length

    good = _many_row_groups(tmp_path / "good.parquet", 2).read_bytes()
    for n in (0xFFFFFFFF, 1 << 31, len(good) - 11):
        path = tmp_path / f"bad{n}.parquet"
        path.write_bytes(good[:-8] + struct.pack("<I", n) + b"PAR1")
        assert footer_length(path) is None
        with pytest.raises(TraceFormatError, match="not a readable Parquet trace") as err:
            Trace.read_parquet(path)
        assert "its footer" not in str(err.value)
    n = struct.unpack("<I", good[-8:-4])[0]
    assert footer_length(tmp_path / "good.parquet") == n


def test_memory_refused_while_reading_is_said_as_memory_not_as_a_bad_file(tmp_path, monkeypatch):
    """Under ``ulimit -d 102400`` ``trace info`` said "not a readable Parquet trace (malloc
    of size 256 failed)": a good file, called unreadable. The line now says memory ran
    out, what was left, and that a damaged file can do it too."""
    path = tmp_path / "t.parquet"
    Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).write_parquet(path)

    def refused(*_a: object, **_k: object) -> None:
        raise pa.ArrowMemoryError("malloc of size 256 failed")

    monkeypatch.setattr("shrink.trace.read_bounded", refused)
    monkeypatch.setattr("shrink.runlog.read_bounded", refused)
    monkeypatch.setattr("shrink.parquet_read.memory_left", lambda: 300 << 20)
    for read in (Trace.read_parquet, RunLog.read_parquet):
        with pytest.raises(TraceFormatError) as info:
            read(path)
        text = str(info.value)
        assert "not a readable Parquet" not in text
        assert "needed more memory than this process could get (malloc of size 256" in text
        assert "300 MiB were left" in text and "a limit (ulimit, a cgroup) to raise" in text
