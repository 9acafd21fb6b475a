"""Other clients of the server under test: connections to its address that no process of
this run holds (a second ``sweep`` or ``replay`` on the same testbed).

A level measures the server under the run's own load; another load beside it makes the
level a mix that no number in the curve shows (the server's own CPU counts both). On
loopback both ends of a connection are this machine's, so ``/proc/net/tcp`` lists the
client's end, and the socket's inode says whose it is.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from pathlib import Path

from shrink.errors import printable
from shrink.replay.sock_diag import established

__all__ = [
    "ClientSampler",
    "foreign_clients",
    "foreign_connections",
    "own_pids",
    "parse_connections",
]

_ESTABLISHED = "01"


def _address(field: str) -> tuple[str, int]:
    """``0100007F:1F90`` (or 32 hex digits of an IPv6 address) -> ("127.0.0.1", 8080)."""
    hexaddr, _, hexport = field.partition(":")
    words = [int(hexaddr[i : i + 8], 16) for i in range(0, len(hexaddr), 8)]
    raw = struct.pack(f"={len(words)}I", *words)  # the kernel prints host-order words
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(hexport, 16)


def parse_connections(text: str) -> list[tuple[tuple[str, int], int]]:
    """The established connections of a ``/proc/net/tcp`` (or ``tcp6``) text:
    (remote address, socket inode) of each."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != _ESTABLISHED:
            continue
        try:
            out.append((_address(f[2]), int(f[9])))
        except ValueError:
            continue  # a line the kernel may add in a form not known here
    return out


def _norm(addr: tuple[str, int]) -> tuple[str, int]:
    try:
        return str(ipaddress.ip_address(addr[0])), addr[1]
    except ValueError:
        return socket.gethostbyname(addr[0]), addr[1]


def own_pids(root: int | None = None) -> set[int]:
    """This process (or ``root``) and every process descended from it."""
    todo, seen = [os.getpid() if root is None else root], set()
    while todo:
        pid = todo.pop()
        seen.add(pid)
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split() if int(c) not in seen]
            except OSError:
                continue
    return seen


def _inodes(pid: int) -> set[int]:
    """The socket inodes ``pid`` holds open."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def _holders(inodes: set[int]) -> dict[int, set[int]]:
    """PID -> which of ``inodes`` it holds, over every process this one may read."""
    out: dict[int, set[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (held := _inodes(int(d)) & inodes):
            out[int(d)] = held
    return out


def _connections(proc_net: str | Path) -> list[tuple[tuple[str, int], int, int]]:
    """The machine's established connections (remote address, inode, bytes moved or -1):
    from the kernel's socket diagnostics, or (none offered, or another ``proc_net``
    given) from ``tcp`` and ``tcp6`` there, which do not say what a connection moved."""
    if Path(proc_net) == Path("/proc/net"):
        with contextlib.suppress(OSError):
            return established()
    out = []
    for name in ("tcp", "tcp6"):
        try:
            out += [
                (a, ino, -1) for a, ino in parse_connections((Path(proc_net) / name).read_text())
            ]
        except OSError:
            continue
    return out


def foreign_connections(
    targets: Iterable[tuple[str, int]],
    proc_net: str | Path = "/proc/net",
    skip: Iterable[int] = (),
) -> dict[int, tuple[int, int]]:
    """Socket inode -> (the PID holding it, bytes it has moved or -1) of each connection
    to ``targets`` (address, port) that no process holds that is this one or descended
    from it, nor in ``skip`` or descended from one of them (PID 0: a holder that could
    not be read)."""
    want = {_norm(t) for t in targets}
    moved = {ino: n for addr, ino, n in _connections(proc_net) if addr in want and ino}
    inodes = set(moved)
    if not inodes:
        return {}
    mine = own_pids().union(*(own_pids(p) for p in skip))
    for pid in mine:
        inodes -= _inodes(pid)
    if not inodes:
        return {}
    holder = {ino: pid for pid, held in _holders(inodes).items() for ino in held}
    # A connection this run closed between the listing and the look at its own files
    # (a session's, closed as it ends) was held by no one by then: "a hidden process",
    # at two looks a stopped sweep. Only one still open when listed again is another's.
    still = {ino for addr, ino, _ in _connections(proc_net) if addr in want}
    return {ino: (holder.get(ino, 0), moved[ino]) for ino in inodes if ino in still}


def foreign_clients(
    targets: Iterable[tuple[str, int]],
    proc_net: str | Path = "/proc/net",
    skip: Iterable[int] = (),
) -> dict[int, int]:
    """PID -> connections it holds to ``targets`` (:func:`foreign_connections`)."""
    out: dict[int, int] = {}
    for pid, _ in foreign_connections(targets, proc_net, skip).values():
        out[pid] = out.get(pid, 0) + 1
    return out


class ClientSampler:
    """The other clients seen at each of a window's looks (:func:`foreign_clients`)."""

    def __init__(self, targets: list[tuple[str, int]], server: Iterable[int] = ()) -> None:
        self.targets = targets
        self.server = set(server)  # the server's own processes (a page that calls it back)
        self.looks: list[dict[int, int]] = []
        self.names: dict[int, str] = {}  # named when seen: a client may be gone by the end
        self.moved: dict[int, int] = {}  # each connection's bytes at the look before

    def look(self) -> None:
        """The other clients' connections that carry load: new since the look before,
        or that moved bytes since (one kept alive and idle, a browser's to the
        testbed's page, is no load; it stopped a sweep as "another client")."""
        found: dict[int, int] = {}
        for ino, (pid, moved) in foreign_connections(self.targets, skip=self.server).items():
            if moved < 0 or self.moved.get(ino) != moved:
                found[pid] = found.get(pid, 0) + 1
            self.moved[ino] = moved
        for pid in found:
            if pid and pid not in self.names:
                self.names[pid] = _command(pid)
        self.looks.append(found)

    def problem(self) -> str | None:
        """Another client carrying load at two looks or more (a health check's one
        request is not a load), named with its process, or None."""
        seen = [x for x in self.looks if x]
        if len(seen) < 2:
            return None
        pids: dict[int, int] = {}
        looks: dict[int, int] = {}
        for x in seen:
            for p, n in x.items():
                pids[p] = max(pids.get(p, 0), n)
                looks[p] = looks.get(p, 0) + 1
        if max(looks.values()) >= 2:  # named: those seen loading more than once (a new
            # connection counts at its first look, whatever it does after)
            pids = {p: n for p, n in pids.items() if looks[p] >= 2}
        who = ", ".join(
            f"{n} of PID {p} ({self.names.get(p, 'gone')})" if p else f"{n} of a hidden process"
            for p, n in sorted(pids.items())
        )
        where = ", ".join(f"{a}:{p}" for a, p in self.targets)
        return (
            f"was loaded by another client too: connections to {where} that this run does "
            f"not hold, {who}; the level measured a mix of loads; measure with one load at "
            "a time"
        )


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    words = raw.rstrip(b"\0").split(b"\0")
    text = " ".join(w.decode("utf-8", "backslashreplace") for w in words[:4])
    return printable(text[:80]) or "?"
