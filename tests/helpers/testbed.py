"""What the testbed tests (and bench_testbed) share: a small document root, the processes
a test left, and two PHP requests spinning on a replica's CPU while its share is read."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from shrink import processes as process
from shrink.errors import RecipeError
from shrink.testbed.state import ReplicaState, TestbedState


def sleeper() -> tuple[subprocess.Popen[bytes], int]:
    """A process that sleeps 30 s, once it runs as ``sleep``, and its start time: a PID
    a test state may name without it being the test's own."""
    proc = subprocess.Popen(["sleep", "30"])
    for _ in range(100):
        info = process.proc_info(proc.pid)
        if info is not None and info.comm == "sleep":
            return proc, info.starttime
        time.sleep(0.01)
    raise AssertionError("sleep did not start")


def this_process_replica() -> ReplicaState:
    """A replica whose one server process is this test's: a testbed that still runs."""
    me = process.proc_info(os.getpid())
    assert me is not None
    return ReplicaState(
        name="r0", address="127.0.0.1", port=80, cpus=[0], masters=[me.pid],
        processes={"lighttpd": [me.pid]}, starttimes={me.pid: me.starttime}, pinned={},
        config="c", errorlog="e", run_dir="d",
    )  # fmt: skip


def as_root_with(recipe: str, monkeypatch: pytest.MonkeyPatch, runs: Path) -> None:
    """Skip unless root runs this (as another user the servers run as that user anyway)
    and ``recipe``'s programs are installed; then keep the testbed's run folders in
    ``runs``."""
    from shrink.testbed.servers import load_recipe

    if os.geteuid() != 0:
        pytest.skip("as another user the servers run as that user anyway")
    try:
        load_recipe(recipe).versions()
    except RecipeError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("SHRINK_RUN_DIR", str(runs))


def lighttpd_replica(port: int = 80) -> ReplicaState:
    """A recorded replica on CPU 0: lighttpd PID 10, its php-cgi children 11 and 12 (12
    pinned), with their start times; the files' names are placeholders."""
    return ReplicaState(
        name="r0", address="127.0.0.1", port=port, cpus=[0], masters=[10],
        processes={"lighttpd": [10], "php-cgi": [11, 12]}, starttimes={10: 5, 11: 6, 12: 6},
        pinned={12: [0]}, config="c", errorlog="e", run_dir="d", nic_socket=0, cgroup=None,
    )  # fmt: skip


def write_docroot(root: Path, page_php: str, **more_php: str) -> Path:
    """``root/doc`` with a 1 KiB static file and ``app/page.php`` (plus ``app/<name>.php``)."""
    d = root / "doc"
    (d / "static").mkdir(parents=True)
    (d / "app").mkdir()
    (d / "static" / "file1k.bin").write_bytes(bytes(range(256)) * 4)
    (d / "app" / "page.php").write_text(page_php)
    for name, text in more_php.items():
        (d / "app" / f"{name}.php").write_text(text)
    return d


def running_under(path: Path) -> list[int]:
    """Live processes whose command line names ``path`` (what a test started there)."""
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(path).encode() in cmd and process.is_alive(int(entry)):
            out.append(int(entry))
    return out


def assert_replicas_serve(st: TestbedState, pool: str) -> None:
    """Every replica serves the static file, and its page from a process of its own ``pool``."""
    with httpx.Client(trust_env=False, timeout=5) as c:
        for r in st.replicas:
            base = f"http://{r.address}:{r.port}"
            static = c.get(f"{base}/static/file1k.bin")
            assert static.status_code == 200 and static.content == bytes(range(256)) * 4
            page = c.get(f"{base}/app/page.php")
            assert page.status_code == 200 and page.text.startswith("page:")
            assert int(page.text[5:]) in r.processes[pool]  # served by this replica's pool


# Spins for s seconds of wall time (1 by default), using whatever CPU it is given.
SPIN_PHP = (
    '<?php $end = microtime(true) + (float) ($_GET["s"] ?? 1); $x = 0;'
    " while (microtime(true) < $end) { $x++; } echo $x;\n"
)


@contextmanager
def favoured(r: ReplicaState) -> Iterator[None]:
    """The replica's cgroup, and its parent (which competes with the root's tasks), at the
    highest weight while the block runs. A cgroup competes as one entity, so the group's
    weight, not its members' nice values, decides what other work on the CPU takes."""
    cg = r.cgroup
    if not cg or "cpu" not in cg["dirs"]:
        yield
        return
    group = Path(cg["dirs"]["cpu"])
    v1 = cg["version"] == 1
    try:
        for g in (group, group.parent):
            (g / ("cpu.shares" if v1 else "cpu.weight")).write_text("262144" if v1 else "10000")
        yield
    finally:
        if v1:  # the parent outlives the replica if other testbeds run
            (group.parent / "cpu.shares").write_text("1024")


@contextmanager
def spinning(r: ReplicaState, seconds: float) -> Iterator[None]:
    """Two requests spin the replica's ``app/spin.php`` (:data:`SPIN_PHP`) for ``seconds``;
    the block runs once they are under way, and they are waited for after it."""
    url = f"http://{r.address}:{r.port}/app/spin.php?s={seconds}"

    def spin() -> None:
        with httpx.Client(trust_env=False, timeout=seconds + 10) as c:
            c.get(url)

    threads = [threading.Thread(target=spin) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.25)
        yield
    finally:
        for t in threads:
            t.join()


def cpu_rate(pids: list[int], seconds: float) -> float:
    """CPU seconds per wall second that ``pids`` use over the next ``seconds``."""
    before, t0 = process.cpu_seconds(pids), time.monotonic()
    time.sleep(seconds)
    return (process.cpu_seconds(pids) - before) / (time.monotonic() - t0)


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The ``pids`` still alive after up to ``seconds`` (none: all gone)."""
    deadline = time.monotonic() + seconds
    left = pids
    while time.monotonic() < deadline:
        left = [p for p in pids if process.is_alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return left
