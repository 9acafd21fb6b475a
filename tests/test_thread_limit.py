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


def test_the_limit_named_is_the_cgroup_above_when_that_one_is_reached(tmp_path, monkeypatch):
    """Only the process's own cgroup's pids.max was read: in a slice of pids.max 8 (all
    taken), a cgroup of its own with pids.max 1000 was named as the limit reached."""
    from shrink import errors

    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/slice/job\n")
    for folder, limit, now in (("slice", "8", "8"), ("slice/job", "1000", "3")):
        (tmp_path / "fs" / folder).mkdir(parents=True)
        (tmp_path / "fs" / folder / "pids.max").write_text(limit + "\n")
        (tmp_path / "fs" / folder / "pids.current").write_text(now + "\n")
    monkeypatch.setattr(errors, "_CGROUPS", str(tmp_path / "proc"))
    monkeypatch.setattr(errors, "_CGROUP_FS", str(tmp_path / "fs"))
    assert "(pids.max 8 of cgroup /slice" in str(errors.ThreadLimitError())


def test_a_thread_refused_under_ulimit_v_names_that_limit(tmp_path):
    """Under ulimit -v a thread's stack cannot be mapped: Python says "can't start new
    thread" as it does past pids.max, and the line named only processes and threads."""
    import subprocess
    import sys

    code = (
        "import resource\nfrom shrink.errors import ThreadLimitError\n"
        "resource.setrlimit(resource.RLIMIT_AS, (600 << 20, resource.RLIM_INFINITY))\n"
        "print(ThreadLimitError())\n"
    )
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert "or on address space (" in said and "ulimit -v 614400 KiB" in said, said
