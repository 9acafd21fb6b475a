"""A closed stdout (``shrink ... | head -1``) ends a command as SIGPIPE does: exit 141,
no traceback, no "error" naming nothing; one line names the files written, which
are whole, and nothing is said when none were."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shrink.trace import Trace

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _closed_stdout(*args: str) -> tuple[int, list[str]]:
    """(exit status, stderr's lines) of ``shrink ARGS`` whose stdout's reader has gone."""
    r, w = os.pipe()
    os.close(r)  # before the command writes a byte: its first write fails
    try:
        out = subprocess.run(
            [sys.executable, "-m", "shrink", *args], stdout=w, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(w)
    assert "Traceback" not in out.stderr and "error" not in out.stderr, out.stderr
    return out.returncode, out.stderr.splitlines()


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    t = np.arange(200) / 10.0
    path = tmp_path_factory.mktemp("trace") / "t.parquet"
    Trace.from_columns(
        {"session": np.arange(t.size) % 20, "t": t, "path": ["/x?bytes=10"] * t.size},
        meta={"mode": "open"},
    ).write_parquet(path)
    return path


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_split_keeps_its_parts_whole_and_names_them(tmp_path, trace, as_json):
    """It said "error: Broken pipe" and exited 1."""
    parts = tmp_path / "parts"
    status, lines = _closed_stdout(
        "split", str(trace), "--parts", "2", "-o", str(parts), *(["--json"] if as_json else [])
    )
    assert status == 141, lines
    files = [parts / "part-000.parquet", parts / "part-001.parquet"]
    assert lines == [f"stdout closed: kept {files[0]}, {files[1]}"]
    assert sum(len(Trace.read_parquet(f)) for f in files) == len(Trace.read_parquet(trace))


@pytest.mark.parametrize(
    "args",
    [["trace", "info", "{trace}"], ["trace", "info", "{trace}", "--json"], ["--help"]],
    ids=["rich table", "json", "help"],
)
def test_nothing_written_exits_quietly(trace, args):
    """rich's table (as predict's) exited 1 saying nothing; typer's help, 1 as well."""
    status, lines = _closed_stdout(*(a.format(trace=trace) for a in args))
    assert (status, lines) == (141, [])


def test_stdout_closed_before_the_start_is_a_closed_pipe(trace, tmp_path):
    """fd 1 closed (``shrink ... >&-``): the table went nowhere and the command exited 0;
    now it ends as when stdout's reader has gone, naming the files it wrote."""
    out = tmp_path / "s.parquet"
    for args, said in ((["trace", "info", str(trace)], []),
                       (["sample", str(trace), "--alpha", "0.5", "-o", str(out)],
                        [f"stdout closed: kept {out}"])):  # fmt: skip
        done = subprocess.run(
            ["sh", "-c", 'exec 1>&-; exec "$0" -m shrink "$@"', sys.executable, *args],
            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 141 and done.stderr.splitlines() == said, done.stderr


def _full_stdout(*args: str) -> subprocess.CompletedProcess[str]:
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "shrink", *args], stdout=full, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, timeout=120,
        )  # fmt: skip


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["machine", "--help"], ["machine", "show"], ["info"]],
    ids=["help", "version", "group-help", "command", "trace-info"],
)
def test_a_stdout_that_refuses_a_write_is_named(trace, args):
    """``shrink ... >/dev/full``: a command said "error: No space left on device",
    naming nothing; ``--help`` and ``--version`` were a traceback."""
    if args == ["info"]:
        args = ["trace", "info", str(trace)]
    out = _full_stdout(*args)
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == ["error: standard output: No space left on device"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_stdout_keeps_the_files_written_and_names_them(tmp_path, trace):
    out = _full_stdout("sample", str(trace), "--alpha", "0.5", "-o", str(tmp_path / "s.parquet"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines() == [
        f"error: standard output: No space left on device; kept {tmp_path / 's.parquet'}"
    ]
    assert len(Trace.read_parquet(tmp_path / "s.parquet")) > 0


def test_a_non_blocking_stdout_waits_for_its_reader():
    """A stdout left non-blocking by its parent (O_NONBLOCK on the pipe) whose reader
    is slow: the whole output arrives, exit 0. The write past the pipe's buffer failed
    with EAGAIN: exit 1, "write could not complete without blocking", the rest lost."""
    import fcntl
    import time

    want = subprocess.run(
        [sys.executable, "-m", "shrink", "predict", "--help"], capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=True,
    ).stdout  # fmt: skip
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: the smallest pipe, filled by the help
    fcntl.fcntl(w, fcntl.F_SETFL, fcntl.fcntl(w, fcntl.F_GETFL) | os.O_NONBLOCK)
    assert len(want) > 4096
    proc = subprocess.Popen(
        [sys.executable, "-m", "shrink", "predict", "--help"], stdout=w,
        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    os.close(w)
    try:
        time.sleep(2)  # the reader is late: the pipe fills
        got = b""
        while chunk := os.read(r, 65536):
            got += chunk
        err = proc.communicate(timeout=120)[1].decode()
    finally:
        os.close(r)
    assert (proc.returncode, err, got) == (0, "", want)


@pytest.mark.parametrize("closed", ["2>&-", "<&- 2>&-"], ids=["stderr", "stdin-and-stderr"])
def test_a_closed_stderr_loses_nothing_measured(tmp_path, trace, closed):
    """``shrink predict ... 2>&-`` (a cron job's or a daemon child's stderr): the first
    progress line wrote to a missing sys.stderr, "internal error (AttributeError)",
    exit 70, nothing written. Now what stderr would show goes nowhere and the
    prediction is written, exit 0 (or 99 for a bound)."""
    out = tmp_path / "out"
    spec = ROOT / "examples" / "machines" / "nehalem-2s.toml"
    args = ["predict", str(trace), "--target", f"sim:{spec}", "--alpha", "0.5",
            "--thresholds", "mean=10ms", "--duration", "1s", "--warmup", "0s",
            "--max-levels", "4", "--reps", "1", "-o", str(out)]  # fmt: skip
    done = subprocess.run(
        ["sh", "-c", f'exec {closed}; exec "$0" -m shrink "$@"', sys.executable, *args],
        stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 99)
    assert (out / "prediction.json").is_file() and (out / "report.html").is_file()
