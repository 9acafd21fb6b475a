"""shrink in the process's environment: a limit it was given (``ulimit``) is named in one
line, not counted as the server's failures; an output on the kernel's file systems is
refused before anything is measured."""

from __future__ import annotations

import os
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
    if not os.access("/dev/shm", os.W_OK):  # a chroot's /dev/shm: a root folder, no tmpfs
        pytest.skip("the check that a tmpfs is storage needs a writable /dev/shm")
    assert check_output("/dev/shm/x.json") == Path("/dev/shm/x.json")  # tmpfs is storage


def _address_space_limit(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """``getrlimit`` as under ``ulimit -v`` of ``n`` bytes, the data segment unlimited."""
    inf = resource.RLIM_INFINITY
    monkeypatch.setattr(
        resource, "getrlimit", lambda r: (inf, inf) if r == resource.RLIMIT_DATA else (n, n)
    )


def test_out_of_memory_is_one_line_naming_the_limit_not_a_bug(monkeypatch, capsys):
    """``predict`` on the simulator under ``ulimit -v 600000``: "internal error
    (MemoryError: ); this is a bug in shrink", exit 70."""
    import typer

    from shrink.cli._common import cli_errors

    _address_space_limit(monkeypatch, 614_400_000)
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise MemoryError
    assert info.value.exit_code == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: out of memory (ulimit -v 600000): raise the limit, or give a smaller input"
    )


def test_a_library_the_loader_could_not_map_is_out_of_memory_not_a_bug(monkeypatch, capsys):
    """``shrink trace info`` under ``ulimit -v 200000``: "internal error (ImportError:
    libarrow.so.2600: failed to map segment from shared object); this is a bug in
    shrink", exit 70. An import that fails for another reason stays a bug."""
    import typer

    from shrink.cli._common import cli_errors

    _address_space_limit(monkeypatch, 204_800_000)
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise ImportError("libarrow.so.2600: failed to map segment from shared object")
    assert info.value.exit_code == 1
    assert capsys.readouterr().err.strip() == (
        "error: out of memory (ulimit -v 200000): raise the limit, or give a smaller input"
    )
    with pytest.raises(typer.Exit) as info, cli_errors():
        try:  # an import that ran out, then an error of its own while that was handled
            raise MemoryError
        except MemoryError:
            raise SystemError("<function _find_and_load> returned NULL without setting an "
                              "exception") from None  # fmt: skip
    assert info.value.exit_code == 1
    assert capsys.readouterr().err.startswith("error: out of memory (ulimit -v 200000)")
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise ImportError("No module named 'pyarrow'")
    assert info.value.exit_code == 70
    assert "this is a bug in shrink" in capsys.readouterr().err


def _ingest_under(
    tmp_path: Path, mib: int, which: int = resource.RLIMIT_AS
) -> subprocess.CompletedProcess[str]:
    trace = ROOT / "examples" / "traces" / "support-access.log"
    limit = mib << 20
    return subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(trace), "-o", str(tmp_path / "t.parquet")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: resource.setrlimit(which, (limit, limit)),
    )  # fmt: skip


@pytest.mark.parametrize("mib", [150, 250, 300, 500])
def test_an_address_space_shrink_cannot_start_in_is_refused_first(tmp_path, mib):
    """Under ``ulimit -v`` from 200 to 450 MiB a command crashed (SIGSEGV at 290, SIGABRT
    at 240), hung, said "interrupted" (numpy's OpenBLAS raised SIGINT when it could not
    make a thread, 250) or "internal error ... this is a bug" (70): the native code of
    the numerical libraries does not fail cleanly there. Refused before they load."""
    done = _ingest_under(tmp_path, mib)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"error: ulimit -v {mib << 10} (KiB) is less than the 524288 shrink needs: its "
        "numerical libraries' native code crashes, rather than fails, with less\n"
    )
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.parametrize("mib", [512, 600, 700])
def test_a_command_under_an_address_space_limit_it_starts_in_ends_cleanly(tmp_path, mib):
    """Above that floor a command does its work or says memory ran out, in one line."""
    done = _ingest_under(tmp_path, mib)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr and "bug" not in done.stderr
    if done.returncode == 1:
        assert done.stderr.strip().splitlines()[-1].startswith("error: out of memory (ulimit")


@pytest.mark.parametrize("mib", [40, 60, 300])
def test_a_data_segment_shrink_cannot_start_in_is_refused_first(tmp_path, mib):
    """``ulimit -d`` (which counts private mappings too) crashed the same libraries: at
    40 MiB a SIGSEGV (exit 139), at 60 "OpenBLAS error: Memory allocation still failed",
    at 70 jemalloc's "cannot allocate memory for thread-local data: ABORT" (exit 127)."""
    done = _ingest_under(tmp_path, mib, resource.RLIMIT_DATA)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"error: ulimit -d {mib << 10} (KiB) is less than the 524288 shrink needs: its "
        "numerical libraries' native code crashes, rather than fails, with less\n"
    )
    assert not (tmp_path / "t.parquet").exists()


def test_out_of_memory_names_a_data_segment_limit(monkeypatch, capsys):
    import typer

    from shrink.cli._common import cli_errors

    real = resource.getrlimit

    def limits(which):
        if which == resource.RLIMIT_DATA:
            return (300 << 20, resource.RLIM_INFINITY)
        if which == resource.RLIMIT_AS:
            return (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        return real(which)

    monkeypatch.setattr(resource, "getrlimit", limits)
    with pytest.raises(typer.Exit) as info, cli_errors():
        raise MemoryError
    assert info.value.exit_code == 1
    assert capsys.readouterr().err.startswith("error: out of memory (ulimit -d 307200)")


def test_the_floors_line_needs_no_sys_stderr(monkeypatch, capfd):
    """With stderr closed (``2>&-``) Python's sys.stderr is None: the floor's check raised
    an AttributeError instead of its exit. It writes to descriptor 2 itself."""
    from shrink import __main__ as entry

    monkeypatch.setattr(resource, "getrlimit", lambda _r: (300 << 20, 300 << 20))
    monkeypatch.setattr(sys, "stderr", None)
    with pytest.raises(SystemExit) as info:
        entry._address_space_too_small()
    assert info.value.code == 1
    assert capfd.readouterr().err.startswith("error: ulimit -v 307200 (KiB) is less than")
