"""The machine's established TCP connections from the kernel's socket diagnostics
(netlink ``NETLINK_SOCK_DIAG``, what ``ss`` reads), not from ``/proc/net/tcp``.

A level looks for other clients three times (:mod:`shrink.replay.clients`). Reading
``/proc/net/tcp`` lists every socket, TIME_WAIT ones included (tens of thousands after
a few runs at 20,000 requests a second), as text that Python then splits: 5-26 ms a
look on the generator's CPU, and the send lag's p99 went from 0.2 ms to 4-10 ms at
20,000/s. Asked for established sockets only, the kernel sends a few dozen records.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct

__all__ = ["established"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCP_ESTABLISHED = 1
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
# inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid (48 bytes)
_REQ = struct.Struct("=BBBxI48x")
# inet_diag_msg: family, state, timer, retrans; sockid: sport, dport (big-endian), src[16],
# dst[16], if, cookie[2]; expires, rqueue, wqueue, uid, inode
_MSG = struct.Struct("=BBBB2s2s16s16sI8xIIIII")


_INET_DIAG_INFO = 2  # the attribute holding the socket's struct tcp_info
_RTA = struct.Struct("=HH")  # rtattr: len, type
# struct tcp_info's bytes_acked and bytes_received (u64, Linux 4.1 on): what the
# connection has moved, told apart from an idle one kept alive
_TCP_BYTES = struct.Struct("=QQ")
_TCP_BYTES_AT = 120


def _request(family: int, seq: int) -> bytes:
    ext = 1 << (_INET_DIAG_INFO - 1)
    body = _REQ.pack(family, socket.IPPROTO_TCP, ext, 1 << _TCP_ESTABLISHED)
    head = _NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY,
                       _NLM_F_REQUEST | _NLM_F_DUMP, seq, 0)  # fmt: skip
    return head + body


def _address(family: int, raw: bytes, port: bytes) -> tuple[str, int]:
    ip = ipaddress.ip_address(raw[:4] if family == socket.AF_INET else raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int.from_bytes(port, "big")


def _moved(data: bytes, start: int, end: int) -> int:
    """The bytes a connection has moved (acked out and received in), from its record's
    ``tcp_info`` attribute between ``start`` and ``end``; -1 when not given."""
    off = start
    while off + _RTA.size <= end:
        length, kind = _RTA.unpack_from(data, off)
        if length < _RTA.size:
            return -1
        if kind == _INET_DIAG_INFO and length >= _RTA.size + _TCP_BYTES_AT + _TCP_BYTES.size:
            acked, received = _TCP_BYTES.unpack_from(data, off + _RTA.size + _TCP_BYTES_AT)
            return acked + received
        off += (length + 3) & ~3
    return -1


def _parse(data: bytes, out: list[tuple[tuple[str, int], int, int]]) -> bool:
    """Append each record's (remote address, inode, bytes moved or -1); True once the
    dump is done."""
    off = 0
    while off + _NLMSG.size <= len(data):
        length, kind, _, _, _ = _NLMSG.unpack_from(data, off)
        if length < _NLMSG.size:
            raise OSError("a malformed netlink message")
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            errno = -struct.unpack_from("=i", data, off + _NLMSG.size)[0]
            raise OSError(errno, os.strerror(errno))
        if kind == _SOCK_DIAG_BY_FAMILY and length >= _NLMSG.size + _MSG.size:
            family, state, _, _, _, dport, _, dst, _, _, _, _, _, inode = _MSG.unpack_from(
                data, off + _NLMSG.size
            )
            if state == _TCP_ESTABLISHED:
                moved = _moved(data, off + _NLMSG.size + _MSG.size, off + length)
                out.append((_address(family, dst, dport), inode, moved))
        off += (length + 3) & ~3
    return False


def established() -> list[tuple[tuple[str, int], int, int]]:
    """(remote address, socket inode, bytes it has moved or -1) of every established TCP
    connection, IPv4 and IPv6; OSError when the kernel offers no socket diagnostics."""
    out: list[tuple[tuple[str, int], int, int]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(2.0)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            nl.send(_request(family, seq))
            while not _parse(nl.recv(1 << 16), out):
                pass
    return out
