"""An overloaded server's error log is kept bounded while load runs against it.

One 10 s level at ten times a 1@50% lighttpd-php-cgi share's capacity wrote 108,777
lines (16 MB) to its error log, in the run folder (a tmpfs on most systems), never
cut; every further level past the knee added as much."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from shrink.procfs import proc_info
from shrink.replay.live import LiveTarget
from shrink.target import GeneratorPlacement
from shrink.testbed.logcap import cap_log

LINE = b"2026-01-01 00:00:00: (gw_backend.c.2026) connection was dropped after accept()\n"


def _log(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.write(b"2026-01-01 00:00:00: (server.c.1704) server started\n")
        f.write(LINE * (size // len(LINE)))
        f.write(b"the last line\n")
    return path


@pytest.mark.compute
def test_a_log_over_the_cap_keeps_its_first_and_last_lines_and_a_writer_goes_on_at_its_end(
    tmp_path,
):
    log = _log(tmp_path / "error.log", 3 * 2**20)
    writer = os.open(log, os.O_WRONLY | os.O_APPEND)  # as lighttpd and nginx hold it
    try:
        cut = cap_log(log, cap=2**20, head=4096, tail=64 * 1024)
        os.write(writer, b"written after the cut\n")
    finally:
        os.close(writer)
    data = log.read_bytes()
    assert cut > 2 * 2**20
    assert len(data) < 80 * 1024
    lines = data.splitlines()
    assert lines[0].endswith(b"server started")
    assert lines[-2:] == [b"the last line", b"written after the cut"]
    assert b"\0" not in data  # not written at the old end (a sparse file as large as before)
    noted = [line for line in lines if line.startswith(b"[shrink] ")]
    assert len(noted) == 1 and f"{cut} bytes of this log cut here".encode() in noted[0]
    assert all(
        line in (LINE.strip(), b"") or line in lines[:1] + lines[-2:] + noted for line in lines
    )  # fmt: skip  (whole lines only)


@pytest.mark.compute
def test_a_log_under_the_cap_is_left_as_it_is(tmp_path):
    log = _log(tmp_path / "error.log", 10_000)
    before = log.read_bytes()
    assert cap_log(log, cap=2**20) == 0
    assert log.read_bytes() == before


@pytest.mark.compute
def test_a_symlink_or_hard_link_in_the_servers_folder_is_not_cut(tmp_path):
    """The log's folder is the server user's: a link there to a file of root's is not
    a log to cut."""
    theirs = _log(tmp_path / "roots-file", 3 * 2**20)
    before = theirs.stat().st_size
    (tmp_path / "sym.log").symlink_to(theirs)
    os.link(theirs, tmp_path / "hard.log")
    assert cap_log(tmp_path / "sym.log", cap=2**20) == 0
    assert cap_log(tmp_path / "hard.log", cap=2**20) == 0
    assert cap_log(tmp_path / "missing.log", cap=2**20) == 0
    assert theirs.stat().st_size == before


@pytest.mark.parametrize("where", ["errorlog", "logs"])
def test_the_level_watch_keeps_a_replicas_error_log_bounded(tmp_path, monkeypatch, where):
    """Each look of a run's watch (every 0.25 s) cuts the testbed's error logs: also a
    replica's other logs (``logs``: nginx-php-fpm's php-fpm.log, left uncut)."""
    import shrink.testbed.logcap as logcap

    monkeypatch.setattr(logcap, "CAP_BYTES", 2**20)
    monkeypatch.setattr(logcap, "HEAD_BYTES", 4096)
    monkeypatch.setattr(logcap, "TAIL_BYTES", 64 * 1024)
    log = _log(tmp_path / ("error.log" if where == "errorlog" else "php-fpm.log"), 3 * 2**20)
    logs = {"errorlog": str(log)} if where == "errorlog" else {"logs": [str(log)]}
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cpus = sorted(os.sched_getaffinity(0))
        state = {"replicas": [
            {"name": "r0", "address": "127.0.0.1", "port": 9, "cpus": cpus, "masters": [srv.pid],
             "processes": {"lighttpd": [srv.pid]},
             "starttimes": {str(srv.pid): proc_info(srv.pid).starttime},
             "pinned": {}, "config": "", **logs},
        ]}  # fmt: skip
        target = LiveTarget(
            [("127.0.0.1", 9)], state=state, share_cpus=cpus[-1:],
            generator=GeneratorPlacement(tuple(cpus[:1]), True), idle_bound=0.1,
        )  # fmt: skip
        assert target._problem() is None
    finally:
        srv.kill()
        srv.wait()
    assert log.stat().st_size < 80 * 1024
    assert log.read_bytes().splitlines()[-1] == b"the last line"


@pytest.mark.compute
def test_a_log_cut_again_counts_every_cut_in_its_one_note(tmp_path):
    """A second cut removes the first one's note with the lines around it: its count of
    the server's bytes cut goes on in the new note, not lost."""
    log = _log(tmp_path / "error.log", 3 * 2**20)
    sizes = dict(cap=2**20, head=4096, tail=64 * 1024)

    def notes() -> list[bytes]:
        return [line for line in log.read_bytes().splitlines() if line.startswith(b"[shrink] ")]

    first = cap_log(log, **sizes)
    old_note = len(notes()[0]) + 1
    with log.open("ab") as f:
        f.write(LINE * (2 * 2**20 // len(LINE)))
    second = cap_log(log, **sizes)
    assert first > 0 and second > 0
    assert len(notes()) == 1, notes()
    assert int(notes()[0].split()[1]) == first + second - old_note


@pytest.mark.compute
@pytest.mark.parametrize("width", [284, 384, 434])
def test_a_log_cut_again_keeps_one_note_whatever_its_lines_widths(tmp_path, width):
    """The first cut's note lies in the head a second cut reads: with lines of 384 or 434
    bytes (nginx's connect() failures are about 400) its line ended inside the head, so
    the head was kept past it into the old tail, and a second note began a count of its
    own: two notes, the head no longer the server's start."""
    line = b"2026/01/01 00:00:00 [error] connect() failed (11)" + b"x" * (width - 50) + b"\n"
    log = tmp_path / "error.log"
    log.write_bytes(b"server started\n" + line * (3 * 2**20 // width))
    sizes = dict(cap=2**20, head=4096, tail=64 * 1024)
    cuts = []
    for _ in range(3):
        cuts.append(cap_log(log, **sizes))
        with log.open("ab") as f:
            f.write(line * (2 * 2**20 // width))
    data = log.read_bytes()
    notes = [x for x in data.splitlines() if x.startswith(b"[shrink] ")]
    assert len(notes) == 1, notes
    note = len(notes[0]) + 1
    assert int(notes[0].split()[1]) == sum(cuts) - 2 * note
    head = data[: data.index(b"[shrink] ")]
    assert len(head) <= 4096 and head.startswith(b"server started\n")


@pytest.mark.compute
def test_lines_the_server_writes_during_a_cut_are_kept(tmp_path, monkeypatch):
    """The file's size was read once: what the server appended while the tail was read
    was cut with the middle, though it was the newest line of all."""
    import shrink.testbed.logcap as logcap

    log = _log(tmp_path / "error.log", 3 * 2**20)
    real_pread = os.pread
    reads = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        reads.append(n)
        if len(reads) == 2:  # the tail's read: the server goes on meanwhile
            with log.open("ab") as f:
                f.write(b"written during the cut\n")
        return data

    monkeypatch.setattr(logcap.os, "pread", pread)
    assert cap_log(log, cap=2**20, head=4096, tail=64 * 1024) > 0
    monkeypatch.undo()
    assert log.read_bytes().splitlines()[-2:] == [b"the last line", b"written during the cut"]


@pytest.mark.parametrize("mode", [0o600, 0o666], ids=["0600", "0666"])
def test_a_state_file_another_user_could_write_has_no_file_cut(tmp_path, monkeypatch, mode):
    """The watch cuts the files a state names, as root: a state file anyone may write
    (``testbed down`` refuses one) named any file of root's over 8 MiB to be cut to its
    first and last lines by a sweep on it."""
    import json

    import shrink.testbed.logcap as logcap

    monkeypatch.setattr(logcap, "CAP_BYTES", 2**20)
    log = _log(tmp_path / "root-owned.log", 3 * 2**20)
    size = log.stat().st_size
    srv = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cpus = sorted(os.sched_getaffinity(0))
        state = tmp_path / "tb.json"
        state.write_text(json.dumps({"schema": "shrink.testbed/1", "replicas": [
            {"name": "r0", "address": "127.0.0.1", "port": 9, "cpus": cpus, "masters": [srv.pid],
             "processes": {"lighttpd": [srv.pid]},
             "starttimes": {str(srv.pid): proc_info(srv.pid).starttime},
             "pinned": {}, "config": "", "errorlog": str(log)},
        ]}))  # fmt: skip
        state.chmod(mode)
        # (the file's other fields, which the cut does not read, are not spelled out)
        import shrink.replay.live as live

        replica = SimpleNamespace(address="127.0.0.1", port=9, cpus=cpus)
        monkeypatch.setattr(live.TestbedState, "from_dict", lambda *a, **k: SimpleNamespace(
            share=SimpleNamespace(cpus=cpus[-1:]), replicas=[replica]))  # fmt: skip
        monkeypatch.setattr(live, "hold_testbed", lambda *a: None)
        target = LiveTarget.from_state(
            state, share_cpus=cpus[-1:], generator=GeneratorPlacement(tuple(cpus[:1]), True),
            idle_bound=0.1,
        )  # fmt: skip
        target._problem()
        target.close()
    finally:
        srv.kill()
        srv.wait()
    assert (log.stat().st_size < size) == (mode == 0o600)


def test_a_run_refused_quotes_every_error_log_of_the_testbed(monkeypatch):
    """A level of 4xx names the logs to look in: php-fpm's (nginx-php-fpm's ``logs``)
    was never named, only nginx's error.log."""
    import shrink.replay.live as live

    monkeypatch.setattr(live, "refused", lambda log, window: (100, 100, 404))
    monkeypatch.setattr(live, "expects_4xx", lambda trace: False)
    target = SimpleNamespace(state={"replicas": [
        {"errorlog": "/run/x/r0/srv/error.log", "logs": ["/run/x/r0/srv/php-fpm.log"]},
        {"errorlog": "/run/x/r1/srv/error.log"},
    ]})  # fmt: skip
    said = live.LiveTarget._refusing(target, None, (0.0, 1.0), None)
    assert said is not None and said.endswith(
        "; see /run/x/r0/srv/error.log, /run/x/r0/srv/php-fpm.log, /run/x/r1/srv/error.log"
    ), said


@pytest.mark.compute
@pytest.mark.parametrize("end", [b"", b"\n"])
def test_one_line_longer_than_the_tail_keeps_its_last_bytes(tmp_path, end):
    """A log ending in one line longer than the tail (no newline in its last bytes,
    or only its own at the end) kept nothing of it, though the note said the last
    lines stay."""
    log = tmp_path / "error.log"
    long = b"x" * (3 * 2**20) + b"...the end of a very long line" + end
    log.write_bytes(b"started\n" + long)
    cut = cap_log(log, cap=2**20, head=4096, tail=64 * 1024)
    data = log.read_bytes()
    assert cut > 0 and data.endswith(b"...the end of a very long line" + end)
    note = data.split(b"\n")[1]
    assert data.startswith(b"started\n[shrink] ") and len(data) == 8 + len(note) + 1 + 64 * 1024
    assert note.endswith(b"(its first lines and the last 65536 bytes of its last line stay)")
