"""What the testbed tests share: a small document root and the processes a test left."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from shrink import processes as process
from shrink.testbed.state import ReplicaState, TestbedState


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
