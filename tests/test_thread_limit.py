"""A command refused a thread by the system (a cgroup's pids.max, ``ulimit -u``): a
sweep in a cgroup of pids.max 4 said "internal error (RuntimeError: can't start new
thread); this is a bug in shrink", exit 70, and with pids.max 2 "sup.parquet: not a
readable Parquet trace (... Failed to launch worker thread ...)" of a sound trace."""

from __future__ import annotations

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from shrink import parquet_read
from shrink.cli import app
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _trace(tmp_path):
    path = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        path
    )
    return path


def test_arrow_refused_a_worker_thread_is_the_limit_not_the_file(tmp_path, monkeypatch):
    path = _trace(tmp_path)

    def refused(*args, **kwargs):
        raise pa.ArrowInvalid(
            "Unknown error: Failed to launch worker thread: Resource temporarily unavailable"
        )

    monkeypatch.setattr(parquet_read, "_read_bounded", refused)
    r = CliRunner().invoke(app, ["trace", "info", str(path)])
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: cannot start a thread: the limit on processes and threads")
    assert "not a readable" not in r.stderr and r.stderr.count("\n") == 1


def test_python_refused_a_thread_is_the_limit_not_a_bug(tmp_path, monkeypatch):
    path = _trace(tmp_path)

    def refused(*args, **kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(Trace, "read_parquet", refused)
    r = CliRunner().invoke(app, ["trace", "info", str(path)])
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith("error: cannot start a thread: the limit on processes and threads")
    assert "internal error" not in r.stderr and r.stderr.count("\n") == 1
