"""What may go on a request line: a trace's method and path made safe for the wire.

Outside :mod:`shrink.replay` because the schedule builder (:mod:`shrink.schedule`,
which the replay engines import) checks every distinct request with these before
anything is sent; :mod:`shrink.replay._http` re-exports them.
"""

from __future__ import annotations

import re

__all__ = ["wire_method", "wire_target"]

# What a request-target may hold as it is (RFC 3986 unreserved, sub-delims, ":@/?" and
# "%" starting an escape); anything else is percent-encoded as UTF-8.
_NOT_SENDABLE = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/?%]|%(?![0-9A-Fa-f]{2})")
_SMUGGLING = re.compile(r"[\r\n\x00]")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 token: a method name


def wire_target(path: str) -> str:
    """``path`` as it can go on a request line: blanks, non-ASCII (as UTF-8) and other
    characters a request-target may not hold are percent-encoded; a path already
    encoded is left alone. CR, LF and NUL raise ValueError: they would end the
    request line early and smuggle a second request (or a header) to the server.
    """
    if _SMUGGLING.search(path):
        raise ValueError("holds CR, LF or NUL, which would smuggle a request past the server")
    if not path:
        return "/"
    if _NOT_SENDABLE.search(path) is None:
        return path
    return _NOT_SENDABLE.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), path)


def wire_method(method: str) -> str:
    """``method`` if it is an HTTP method name (a token); ValueError otherwise."""
    if not _TOKEN.fullmatch(method):
        raise ValueError(f"method {method[:40]!r} is not an HTTP method name")
    return method
