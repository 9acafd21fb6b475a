"""shrink in the process's environment: a limit it was given (``ulimit``) is named in one
line, not counted as the server's failures; an output on the kernel's file systems is
refused before anything is measured."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shrink.errors import ParameterError
from shrink.files import check_output
from shrink.replay.native import available

ROOT = Path(__file__).resolve().parents[1]


def _limited(n: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_generator_out_of_file_descriptors_says_so(tmp_path, engine):
    """Under ``ulimit -n 32`` a connection the engine could not open (EMFILE) was a
    "connect" failure: the run said "FAILED REQUESTS: 200 of 200 ... not the server
    serving the trace" and "is the server up?"; a sweep's level, thousands "FAILED"."""
    if engine == "native" and not available():
        pytest.skip("the native core is not built")
    # A server that takes connections and never answers: each one holds a descriptor.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1000)
        port = srv.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "shrink", "replay", "--target", f"http://127.0.0.1:{port}",
             "--rate", "200", "--path", "/x", "--duration", "1s", "--timeout", "1s",
             "--engine", engine, "-o", str(tmp_path / "r.parquet")],
            cwd=ROOT, capture_output=True, text=True, timeout=60, preexec_fn=_limited(32),
        )  # fmt: skip
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert err[-1].startswith("error: the load generator ran out of file descriptors (ulimit")
    assert "ulimit -n 32" in err[-1] and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("path", "kind", "fs"),
    [("/sys/kernel/mm", "dir", "sysfs"), ("/sys/kernel/x.json", "file", "sysfs"),
     ("/proc/sys/kernel/x.json", "file", "proc"), ("/proc/1/new", "dir", "proc")],
)  # fmt: skip
def test_an_output_on_the_kernels_file_systems_is_refused_before_measuring(path, kind, fs):
    """As root ``access()`` calls /sys folders writable: ``predict -o /sys/kernel/mm``
    measured every level, then "cannot write (Permission denied)"."""
    with pytest.raises(ParameterError, match=rf"is on {fs} \(the kernel's, not storage\)"):
        check_output(path, kind=kind)
    assert check_output("/dev/shm/x.json") == Path("/dev/shm/x.json")  # tmpfs is storage


def test_out_of_memory_is_one_line_naming_the_limit_not_a_bug(monkeypatch, capsys):
    """``predict`` on the simulator under ``ulimit -v 600000``: "internal error
    (MemoryError: ); this is a bug in shrink", exit 70."""
    import typer

    from shrink.cli._common import cli_errors

    monkeypatch.setattr(resource, "getrlimit", lambda _r: (614_400_000, 614_400_000))
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise MemoryError
    assert info.value.exit_code == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: out of memory (ulimit -v 600000): raise the limit, or give a smaller input"
    )
