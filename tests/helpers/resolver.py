"""A resolver that gives ``localhost`` the addresses a test names, whatever this
machine's /etc/hosts says (a debootstrap chroot has none, so ``localhost`` does not
resolve there at all)."""

from __future__ import annotations

import socket


def resolving_localhost_to(monkeypatch, *addresses: str) -> None:
    """``socket.getaddrinfo("localhost", ...)`` gives ``addresses``; none: it fails."""

    def fake(host, *args, **kwargs):
        assert host == "localhost"
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, 0)) for a in addresses]  # fmt: skip

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def localhost_resolves() -> bool:
    try:
        return bool(socket.getaddrinfo("localhost", None))
    except (OSError, UnicodeError):
        return False
