"""What may go on a request line and in its Content-Type: a trace's method, path and
recorded type made safe for the wire.

Outside :mod:`shrink.replay` because the schedule builder (:mod:`shrink.schedule`,
which the replay engines import) checks every distinct request with these before
anything is sent; :mod:`shrink.replay._http` re-exports them.
"""

from __future__ import annotations

import ipaddress
import os
import re
from urllib.parse import unquote_to_bytes, urlsplit

from shrink.errors import ParameterError

__all__ = [
    "MAX_CONTENT_TYPE",
    "host_header",
    "is_loopback",
    "loopback_url_host",
    "not_loopback_why",
    "refuse_remote",
    "served_path",
    "wire_content_type",
    "wire_method",
    "wire_target",
    "zone_why",
]

# What a request-target may hold as it is (RFC 3986 unreserved, sub-delims, ":@/?" and
# "%" starting an escape); anything else is percent-encoded as UTF-8.
_NOT_SENDABLE = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/?%]|%(?![0-9A-Fa-f]{2})")
_SMUGGLING = re.compile(r"[\r\n\x00]")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: a method name
# What a header value may not hold (RFC 9110 field-value: visible characters, blanks and
# obs-text; no other control character) or cannot go as one byte (past Latin-1).
_NOT_FIELD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\u0100-\U0010ffff]")
# A recorded Content-Type's longest: a multipart boundary is at most 70 characters (RFC
# 2046), so a real type with its parameters fits many times over.
MAX_CONTENT_TYPE = 1024


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 without brackets) is this machine's
    loopback: the only place shrink sends load or probes without ``--allow-remote``.
    ``localhost`` is loopback when every address the resolver gives it is: an
    ``/etc/hosts`` naming another address for it sent the load there."""
    if host == "localhost":
        return bool(addrs := _localhost_addresses()) and all(map(_written_loopback, addrs))
    if "%" in host:
        return False  # a zone ("::1%lo"): see not_loopback_why
    try:
        return _written_loopback(ipaddress.ip_address(host))
    except ValueError:
        return False


def _written_loopback(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """127.0.0.0/8 or ::1. Python 3.13 reads an IPv4-mapped address (``::ffff:127.0.0.1``)
    as its IPv4 one, so Debian 13's took what 3.11 and 3.12 refuse: refused on each."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return False
    return ip.is_loopback


def _localhost_addresses() -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """What the resolver (``/etc/hosts``, nsswitch) gives ``localhost``, as the engines
    will connect to it; none when it cannot be resolved."""
    import socket

    try:
        infos = socket.getaddrinfo("localhost", None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    # (a scope, "fe80::1%lo", is not part of the address)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def not_loopback_why(host: str) -> str:
    """Why ``host`` is not taken as loopback (:func:`is_loopback` is False): another
    machine's address, or a spelling read only by name (``127.1``, ``0x7f.1``,
    ``2130706433``, ``localhost.``), which another resolver could send elsewhere."""
    if host == "localhost":
        addrs = _localhost_addresses()
        if not addrs:
            return "localhost does not resolve here"
        others = sorted({str(a) for a in addrs if not _written_loopback(a)})
        return (f"localhost resolves here to {', '.join(others)}, not loopback "
                "(/etc/hosts); write 127.0.0.1 or ::1")  # fmt: skip
    address, zone = host.split("%", 1) if "%" in host else (host, "")
    if zone and is_loopback(address):
        # Python's engine sent "Host: [::1%lo]:P", which a server may refuse, and the
        # native engine could not connect to it at all ("failed to lookup address").
        return (
            f"{host} names a zone (%{zone}), which a loopback address has none of: write {address}"
        )
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return (
            f"{host} is not an IP address or 'localhost' (loopback is taken as 127.0.0.0/8, "
            "::1 or localhost, written out)"
        )
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    if mapped is not None:
        return f"{host} is an IPv4-mapped address, not read as loopback: write {mapped}"
    return f"{host} is not a loopback address"


def loopback_url_host(url: str) -> str | None:
    """None if ``url`` is ``http://`` to a loopback host, with no user part; else why not.

    Only parsed, never fetched: ``http://127.0.0.1:80@10.0.0.1/`` names 10.0.0.1.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme != "http":
        return "must start with http://"
    if "@" in parts.netloc:
        return f"names a user part ({parts.netloc!r}); the host is what follows '@'"
    if host == "localhost" and not is_loopback(host):
        return not_loopback_why(host)  # does not resolve, or resolves elsewhere
    if host and "%" in host:
        # "[::1%25lo]" (RFC 6874's "%25" for "%") was "host '::1%25lo' is not a loopback
        # address": loopback, but with a zone, which it has none of
        address, zone = host.split("%", 1)
        zone = zone[2:] if zone.startswith("25") else zone
        if is_loopback(address):
            return f"host {not_loopback_why(f'{address}%{zone}')}"
    if not host or not is_loopback(host):
        return f"host {host!r} is not a loopback address"
    return None


def wire_target(path: str) -> str:
    """``path`` as it can go on a request line: blanks, non-ASCII (as UTF-8) and other
    characters a request-target may not hold are percent-encoded; a path already
    encoded is left alone. CR, LF and NUL raise ValueError: they would end the
    request line early and smuggle a second request (or a header) to the server. So
    does a path that does not start with "/" (RFC 9112's origin-form): an absolute URI
    (``http://other.host/x``) names its own host, which a server takes over the Host
    header (and a proxy connects to); ``host:443`` (CONNECT's form), ``*`` and a
    relative path ask for no file.
    """
    if _SMUGGLING.search(path):
        raise ValueError("holds CR, LF or NUL, which would smuggle a request past the server")
    if not path:
        return "/"
    if not path.startswith("/"):
        raise ValueError(
            "does not start with '/': an absolute URI (http://HOST/...) would have the server "
            "take HOST, not the target, as the host (a proxy would fetch from it); "
            "authority-form (HOST:PORT), '*' and relative paths ask for no file"
        )
    if _NOT_SENDABLE.search(path) is None:
        return path
    return _NOT_SENDABLE.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), path)


def served_path(target: str) -> str:
    """The file path, relative to a document root, that a server reads a request-target
    as: the query dropped, percent-escapes decoded to the bytes they name ("/a%20b" is
    "a b", "/caf%E9" the file named by that byte), the leading slashes dropped. Not
    urlsplit, which reads "//a/b" as host "a" and path "/b"."""
    return os.fsdecode(unquote_to_bytes(target.split("?", 1)[0])).lstrip("/")


def wire_method(method: str) -> str:
    """``method`` if it is an HTTP method name (a token); ValueError otherwise."""
    if not _TOKEN.fullmatch(method):
        raise ValueError(f"method {method[:40]!r} is not an HTTP method name")
    return method


def wire_content_type(value: str) -> str:
    """``value`` if it can go on the wire as a Content-Type header's value: at most
    :data:`MAX_CONTENT_TYPE` characters, none of them a control character (CR or LF
    would end the header and smuggle another, or a second request) nor past Latin-1
    (the header goes out a byte per character); ValueError otherwise."""
    if len(value) > MAX_CONTENT_TYPE:
        raise ValueError(
            f"a Content-Type of {len(value)} characters, over the {MAX_CONTENT_TYPE} allowed"
        )
    bad = _NOT_FIELD_VALUE.search(value)
    if bad is not None:
        raise ValueError(
            f"the Content-Type holds {bad[0]!r}: a header value holds no control character "
            "(CR or LF would smuggle a header or a request past the server) and nothing "
            "past Latin-1"
        )
    return value


def refuse_remote(host: str, allowed: bool, error: type[Exception] = ParameterError) -> None:
    """Refuse ``host`` as a target unless it is a loopback address or ``allowed``."""
    if "%" in host and is_loopback(host.split("%", 1)[0]):
        # this machine all the same, in a spelling that one engine could not reach
        raise error(f"target {not_loopback_why(host)}")
    if not allowed and not is_loopback(host):
        # An address off loopback may be another machine's or a network namespace's of
        # this one (a veth peer): nothing on this side tells them apart without routes.
        raise error(
            f"target {not_loopback_why(host)}; pass --allow-remote to load a server off "
            "this network namespace's loopback (another machine, or another network "
            "namespace of this one)"
        )
    if (why := zone_why(host)) is not None:
        raise error(f"target {why}")


def zone_why(host: str) -> str | None:
    """Why a target ``host`` with a zone (``fe80::1%eth0``, allowed with --allow-remote)
    cannot be reached, or None. Told by parsing alone, nothing sent: both engines
    connect through the resolver (getaddrinfo), which takes a zone only as an
    interface of this machine (a name or an index) and, by name, only on a link-local
    address; otherwise the native engine failed ("failed to lookup address") where the
    Python one did."""
    if "%" not in host:
        return _link_local_without_zone(host)
    address, zone = host.split("%", 1)
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return f"{host} names a zone (%{zone}), which only an IPv6 address takes"
    if not ip.is_link_local:
        # RFC 4007: a zone picks the link of a scoped address; a global one has a single
        # zone. The resolver refuses an interface name there, and Linux's connect() reads
        # a scope id only on a link-local address (any index, even of no interface, was
        # connected to as if none were given).
        what = (
            f"Linux connects to {address} as if %{zone} were not there"
            if zone.isascii() and zone.isdigit()
            else "the resolver refuses an interface name on it (no request could connect)"
        )
        return (
            f"{host} names a zone (%{zone}), which only a link-local address (fe80::/10) "
            f"takes: a zone picks the link of a scoped address (RFC 4007), and {what}: "
            f"write {address}"
        )
    if not zone:
        return f"{host} names an empty zone (nothing after its %): write {address}%INTERFACE"
    if not _interface(zone):
        return f"{host} names the zone %{zone}, which is no network interface here (see ip link)"
    return None


def _link_local_without_zone(host: str) -> str | None:
    """Why a link-local ``host`` without a zone cannot be reached, or None: connect()
    refuses it (EINVAL, 'Invalid argument'), as a link-local address is on every link."""
    try:
        ip = ipaddress.IPv6Address(host)
    except ValueError:
        return None
    if not ip.is_link_local:
        return None
    return (
        f"{host} is link-local, on every link of this machine alike: name the interface "
        f"it is reached through, {host}%INTERFACE (RFC 6874: http://[{host}%25INTERFACE]:PORT)"
    )


def _interface(zone: str) -> bool:
    import socket

    try:
        if zone.isascii() and zone.isdigit():  # (int() reads "٢" as 2; the resolver does not)
            socket.if_indextoname(int(zone))
        else:
            socket.if_nametoindex(zone)
    except (OSError, OverflowError, ValueError):
        return False
    return True


def host_header(address: str, port: int) -> str:
    """The Host header's value for a target: ``ADDR:PORT``, ``[ADDR]:PORT`` for IPv6,
    without a zone (``fe80::1%eth0``): it names a link of this machine, nothing the
    server knows, and RFC 9110's Host (the URI's host) has no room for it (the Python
    engine sent ``Host: [fe80::1%eth0]:P``)."""
    return f"[{address.split('%', 1)[0]}]:{port}" if ":" in address else f"{address}:{port}"
