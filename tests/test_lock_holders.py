"""Who holds a ``flock`` now: /proc/locks names the process that took the lock, and a
child it forked with the open file holds the lock on after it ends, under a PID that is
then free or another process's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.compute

# Takes the lock on argv[1] (``open`` flags, ``flock`` kind), forks a child that keeps it
# and prints its PID, and ends: the child holds the lock until its stdin closes.
_FORKED = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], {flags})\nfcntl.flock(fd, fcntl.LOCK_{kind})\n"
    "if os.fork() == 0:\n    print(os.getpid(), flush=True)\n    sys.stdin.read()\n"
    "    os._exit(0)\n"
)


@contextmanager
def _held_by_a_forked_child(path: Path, flags: str, kind: str) -> Iterator[tuple[int, int]]:
    """(the PID that took the lock, now ended; the child that holds it) for the block."""
    code = _FORKED.format(flags=flags, kind=kind)
    taker = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert taker.stdout is not None and taker.stdin is not None
    child = int(taker.stdout.readline())
    taker.wait()  # (ended: its PID is free, for another process to take)
    try:
        yield taker.pid, child
    finally:
        taker.stdin.close()
        taker.stdout.read()  # (to its end: the child has ended, its lock with it)


def test_a_flock_is_held_by_the_processes_whose_open_files_hold_it(tmp_path):
    """Read from a /proc as the kernel writes it: the PID in /proc/locks (111, reused)
    holds nothing now; 222's open file holds the lock; 333 cannot be looked into."""
    from shrink.procfs import flock_holding_processes

    dev = os.makedev(0xFD, 1)
    (tmp_path / "locks").write_text("1: FLOCK  ADVISORY  READ 111 fd:01:77 0 EOF\n")
    for pid, info in {"111": "pos:\t0\n", "222": "pos:\t0\nlock:\t1: FLOCK  ADVISORY  "
                      "READ 111 fd:01:77 0 EOF\n"}.items():  # fmt: skip
        (tmp_path / pid / "fdinfo").mkdir(parents=True)
        (tmp_path / pid / "fdinfo" / "5").write_text(info)
    (tmp_path / "333").mkdir()
    (tmp_path / "self").mkdir()
    assert flock_holding_processes(dev, 77, tmp_path) == [222]
    assert flock_holding_processes(dev, 78, tmp_path) == []  # another file: none
    (tmp_path / "locks").write_text("")
    assert flock_holding_processes(dev, 77, tmp_path) == []  # no lock: nothing read


@pytest.fixture
def demo_base(tmp_path, monkeypatch):
    from shrink import demo_work

    base = tmp_path / "vartmp"
    base.mkdir()
    monkeypatch.setattr(demo_work, "WORK_BASE", str(base))
    monkeypatch.setattr(demo_work, "_HELD", {}, raising=False)
    folder = Path(tempfile.mkdtemp(prefix="shrink-demo-", dir=base))
    (folder / ".made-for").write_text(f"{tmp_path / 'gone'}\n")  # its --out is gone
    return folder


def test_an_older_demos_folder_held_by_its_forked_child_is_kept(demo_base):
    """The older demo that took the lock on .made-for has ended, its child holding the
    lock on: the folder was taken for no live demo's (its taker's PID gone) and removed."""
    from shrink import demo_work

    with _held_by_a_forked_child(demo_base / ".made-for", "os.O_RDONLY", "SH"):
        assert demo_work.remove_orphans() == []
        assert demo_base.is_dir()
    assert demo_work.remove_orphans() == [demo_base]  # that child has ended


def test_a_lock_takers_pid_reused_by_a_process_of_this_users_keeps_no_folder(
    demo_base, monkeypatch
):
    """The PID that took the lock is now a process of this user's (here, this one) that
    holds nothing: the folder was kept, for as long as that process ran."""
    from shrink import demo_work, procfs

    monkeypatch.setattr(procfs, "flock_holders", lambda *a, **k: [os.getpid()])
    assert demo_work.remove_orphans() == [demo_base]


def test_a_busy_folder_names_the_process_that_holds_it_not_the_one_that_took_it(tmp_path):
    from shrink.errors import OutputBusyError
    from shrink.folder_locks import claimed

    flags = "os.O_RDONLY | os.O_DIRECTORY"
    held = _held_by_a_forked_child(tmp_path, flags, "EX")
    with held as (taker, child), pytest.raises(OutputBusyError) as err, claimed(tmp_path):
        pass  # pragma: no cover
    assert f"(PID {child} (python" in str(err.value), str(err.value)
    assert f"PID {taker}" not in str(err.value)


def test_a_busy_folder_held_by_the_process_that_took_it_reads_no_other_process(
    tmp_path, monkeypatch
):
    """Every process's open files were read to name a busy folder's holder (seconds on a
    host with a million files open), when the process /proc/locks names holds it still."""
    from shrink import procfs
    from shrink.errors import OutputBusyError
    from shrink.folder_locks import claimed

    looked_into: list[object] = []
    holds = procfs._holds
    monkeypatch.setattr(procfs, "_holds", lambda *a: looked_into.append(a[0]) or holds(*a))
    code = (
        "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint(os.getpid(), flush=True)\nsys.stdin.read()\n"
    )
    taker = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert taker.stdout is not None and taker.stdin is not None
    try:
        pid = int(taker.stdout.readline())
        with pytest.raises(OutputBusyError) as err, claimed(tmp_path):
            pass  # pragma: no cover
    finally:
        taker.stdin.close()
        taker.wait()
    assert f"(PID {pid} (python" in str(err.value), str(err.value)
    assert len(looked_into) == 1, looked_into


def test_the_holder_search_asks_no_file_system_of_an_open_file(tmp_path, monkeypatch):
    """Each open file was stat()ed to pass over those that are not the locked file: that
    asks the file's file system, and a file open on a hung NFS server or a stopped FUSE
    daemon hangs it, and with it the refusal of a busy output (as root, of every
    process's files). The lock's line in fdinfo names its device and inode: enough."""
    from shrink import procfs

    real_stat = os.stat

    def stat(path, *a, **kw):
        assert "/fd/" not in str(path), f"stat of an open file: {path}"
        return real_stat(path, *a, **kw)

    target = tmp_path / "held"
    target.write_text("")
    st = os.stat(target)
    with _held_by_a_forked_child(target, "os.O_RDONLY", "SH") as (_, child):
        monkeypatch.setattr(procfs.os, "stat", stat)
        assert procfs.flock_holding_processes(st.st_dev, st.st_ino) == [child]
