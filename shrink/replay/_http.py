"""Pre-built HTTP/1.1 requests and the least response parsing a load generator needs.

A response is read for its status, its length (Content-Length, chunked, or up to
the close) and whether the connection stays open; the body is counted, never kept.
"""

from __future__ import annotations

from shrink.wire import wire_method, wire_target

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "build_request",
    "parse_head",
    "parse_head_cached",
    "wire_method",
    "wire_target",
]

_HEAD_LIMIT = 65536
# A body's type when the trace recorded none (httperf's session logs cannot say one).
DEFAULT_CONTENT_TYPE = "application/x-www-form-urlencoded"


def build_request(
    method: str, path: str, host: str, body: bytes = b"", content_type: str = ""
) -> bytes:
    """The bytes of one HTTP/1.1 keep-alive request; ``body`` goes as it is (a trace's
    recorded bytes, not necessarily UTF-8), typed ``content_type`` (the recorded type,
    checked by :func:`shrink.wire.wire_content_type`), or as form data when none was
    recorded (a session log records none; PHP reads such a body as a form's)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "User-Agent: shrink", "Accept: */*"]
    data = body
    if data or content_type or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Type: {content_type or DEFAULT_CONTENT_TYPE}")
        lines.append(f"Content-Length: {len(data)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


def parse_head(head: bytes) -> tuple[int, int, bool, bool]:
    """(status, content length or -1, chunked, close) of a response head without its CRLFCRLF,
    framed as RFC 9112 section 6.3 says: Transfer-Encoding wins over Content-Length (whose
    length is then -1) and closes the connection after the answer; chunked only when it is
    the final coding (a body up to the close otherwise); Content-Length values (several
    lines, or a list) must all be the same number.

    Raises ValueError on a status line that is not HTTP, a Content-Length that is not
    one number, chunked applied more than once (RFC 9112 6.1) or whitespace between a
    field name and its colon (5.1): an unrecoverable framing error, the connection is
    closed. Connection is read as a list of tokens (RFC 9110 7.6.1).
    """
    if not head.startswith(b"HTTP/1.") or head[8:9] != b" " or head[12:13] not in _AFTER_CODE:
        raise ValueError("not an HTTP/1.x status line")
    status = parse_int(head[9:12])
    if not 100 <= status <= 599:
        raise ValueError("not an HTTP status code")
    lower = head.lower()
    if _blank_before_colon(lower):
        raise ValueError("whitespace between a field name and its colon")
    lengths = _values(lower, b"\r\ncontent-length:")
    clen = _content_length(lengths)
    codings = _values(lower, b"\r\ntransfer-encoding:")
    close = lower[7:8] == b"0"  # HTTP/1.0 closes unless it says keep-alive
    # Connection is a list of tokens (RFC 9110 7.6.1): "closed" is not "close"
    options = {o.strip(b" \t") for v in _values(lower, b"\r\nconnection:") for o in v.split(b",")}
    if b"close" in options:
        close = True
    elif b"keep-alive" in options:
        close = False
    chunked = False
    if codings:
        # the length is the codings' (RFC 9112 6.3 item 3); with a Content-Length too
        # (or from HTTP/1.0, 6.1) the answer may be a smuggling attempt: not reused
        names = [c.split(b";", 1)[0].strip(b" \t") for v in codings for c in v.split(b",")]
        names = [n for n in names if n]
        if names.count(b"chunked") > 1:
            raise ValueError("chunked applied more than once")  # RFC 9112 6.1
        chunked = bool(names) and names[-1] == b"chunked"
        close = close or bool(lengths) or lower[7:8] == b"0"
        clen = -1
    return status, clen, chunked, close


def _blank_before_colon(lower: bytes) -> bool:
    """Whether a field line has whitespace between its name and the colon (RFC 9112
    5.1: an invalid message; ``Content-Length : 5`` is no framing header, and reading
    the body up to the close instead would take the next answer as this one's)."""
    for line in lower.split(b"\r\n")[1:]:
        c = line.find(b":")
        if c > 0 and line[c - 1] in b" \t":
            return True
    return False


def _values(lower: bytes, key: bytes) -> list[bytes]:
    """The values of every header named by ``key`` (lowercase, with its CRLF)."""
    out = []
    i = lower.find(key)
    while i >= 0:
        start = i + len(key)
        end = lower.find(b"\r\n", start)
        if end < 0:
            end = len(lower)
        out.append(lower[start:end])
        i = lower.find(key, end)
    return out


def _content_length(values: list[bytes]) -> int:
    """The length the Content-Length lines give, -1 without one. Several lines, or a
    list in one, must all be the same number (RFC 9112 6.3 item 5: differing values
    are an unrecoverable framing error)."""
    if not values:
        return -1
    lengths = {parse_int(v) for value in values for v in value.split(b",")}
    if len(lengths) != 1:
        raise ValueError("differing Content-Length values")
    clen = lengths.pop()
    if clen > LENGTH_LIMIT:
        raise ValueError("content length past 63 bits")
    return clen


HEAD_LIMIT = _HEAD_LIMIT
# The largest Content-Length: an i64's, all the native core can hold (a body no
# server sends; the request would only wait for it and time out).
LENGTH_LIMIT = (1 << 63) - 1
# The largest chunk a response may announce: its size and CRLF must fit in 63 bits.
CHUNK_LIMIT = (1 << 63) - 3
_AFTER_CODE = (b" ", b"\r", b"")
_DIGITS = {10: frozenset(b"0123456789"), 16: frozenset(b"0123456789abcdefABCDEF")}


def parse_int(text: bytes, base: int = 10) -> int:
    """A length or code: digits only, blanks around allowed. Python's ``int`` would also
    take a sign, ``0x``, and underscores, which no HTTP number has (the native core's
    parser takes none of them either). Leading zeros are dropped first: ``int`` refuses a
    decimal past 4300 digits, and ``0…05`` is 5 (1*DIGIT, as the native core reads it)."""
    digits = text.strip(b" \t")
    if not digits or not _DIGITS[base].issuperset(digits):
        raise ValueError("not a number")
    return int(digits.lstrip(b"0") or b"0", base)


# A server sends the same few heads over and over (only Date changes, once a
# second): remembering parsed heads takes the parser off the hot path.
_SEEN: dict[bytes, tuple[int, int, bool, bool]] = {}


def parse_head_cached(head: bytes) -> tuple[int, int, bool, bool]:
    """:func:`parse_head` with a bounded memo of recent heads."""
    got = _SEEN.get(head)
    if got is None:
        got = parse_head(head)
        if len(_SEEN) >= 4096:
            _SEEN.clear()
        _SEEN[head] = got
    return got
