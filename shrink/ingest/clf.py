r"""Common and Combined Log Format access logs (Apache, NCSA, lighttpd, nginx).

A line is ``host ident user [dd/Mon/yyyy:HH:MM:SS +zzzz] "request" status bytes``,
followed in the Combined format by ``"referer" "user-agent"``. What the reader
accepts and how it maps lines to the Trace:

* **Quoted fields** may hold escaped quotes and backslashes (``\"``, ``\\``), as
  Apache writes them; they are unescaped. In the request, the ``\xhh`` that Apache
  and nginx write for odd bytes become the UTF-8 text they spell, else ``%hh``,
  so the replay sends the bytes the client sent. Other backslash sequences are
  kept as written.
* **Request line** ``METHOD URL [HTTP/x.y]``: the version may be missing
  (HTTP/0.9-style lines, common in 1995 logs); a URL with blanks in it is kept
  whole. A request field that is not a request (``"-"``, one word, garbage)
  makes the line skipped. A request for no path of the server's (an absolute URI
  ``http://other.host/x`` a proxy is asked for, ``HOST:PORT``, ``*``) is left out
  in either mode and counted (meta ``not_path``, ``not_path_lines``): the replay
  sends paths only.
* **Variants**: a leading virtual host (Apache's ``vhost_combined``, ``%v:%p %h
  ...``; meta ``vhost_lines``) is accepted and not used. Fields after the format's
  own (nginx's ``$request_time``, Apache's ``%D`` or ``%T`` appended) are accepted
  and counted (meta ``extra_field_lines``), not read: their unit and order depend
  on a configuration the log does not carry, so ``rt`` stays unknown.
* **Time** with its zone offset is converted to UTC epoch seconds; ``t`` counts
  from the earliest request (meta ``origin_epoch`` is that instant). Fractions of
  a second and ISO 8601 stamps (nginx's ``$time_iso8601``) are read too. Times
  more than a century apart are an error naming the later line: one is wrong.
* **bytes** ``-`` means the server sent no body, so it becomes 0; **status**
  ``-`` becomes 0 (unknown). ``rt`` is NaN: access logs in these formats do not
  record response times. ``client`` is the host field.
* **Sessions** are the requests of one client (host, and user agent when the line
  has one) with no silence longer than ``idle_gap`` (default 30 min) between
  consecutive requests. **Bursts**: a request within ``burst_gap`` (default 1 s)
  of its burst's first request joins the burst. With timestamps of 1-s
  resolution this puts a page and the embedded objects fetched in the same or
  the next second together (the NASA log shows ``GET /`` at :07 and its three
  images at :08). Think time = gap to the next burst. Rows are sorted by time
  inside a session, because servers log a request when it completes, so file
  order is not send order. See :mod:`shrink.ingest.sessionize`.
* **Request class** by :class:`shrink.classify.Classifier` (configurable rules).
* **Lines that are not log lines** (blank, truncated, another format) are
  skipped and counted, with their line numbers, in the meta (``skipped``,
  ``skipped_lines``: first 100). With ``strict=True`` the first one raises
  :class:`TraceFormatError` with its line number. A line whose last quoted field
  (the user agent) lacks its closing quote at the end of the line is accepted
  in lenient mode and listed under ``repaired_lines``; strict mode rejects it.
* **A damaged gzip log** (cut short while copied or written): the lines before the
  damage are read and meta ``damage`` says where it broke off; with ``strict=True``
  it is a :class:`TraceFormatError` naming the file and line.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from shrink.checks import parse_duration
from shrink.classify import Classifier
from shrink.errors import TraceFormatError
from shrink.ingest._columns import Columns, Distinct, session_columns, session_keys
from shrink.ingest._io import MAX_LINE, LineBatch, decode_line, line_batches
from shrink.ingest.sessionize import TimeSpan, non_negative_duration, sessionize
from shrink.trace import Trace

__all__ = ["CLF_LINE", "parse_clf_time", "read_clf"]

# Unrolled (much faster than (?:[^"\\]|\\.)*) and possessive: a quoted field never
# gives characters back. Without that, an unclosed user agent ending in blanks made
# the engine retry the trailing [ \t]* at every blank: quadratic in the line length
# (23 s for a 100 KB line).
_QUOTED = r'[^"\\]*+(?:\\.[^"\\]*+)*+'
# An optional leading virtual host (Apache's vhost_combined, ``%v:%p %h ...``): a plain
# line has three words before ``[``, so the longer alternative cannot take one of them.
# Fields after the format's own (nginx's $request_time, Apache's %D or %T appended) are
# kept in ``extra``, possessively: a lazy match there retried the trailing blanks at
# every position. Without a user agent they may not start with a quote: that is a
# Combined line gone wrong, which would otherwise pass as a Common one.
CLF_LINE = re.compile(
    r"^(?:(?P<vhost>\S+) )?(?P<host>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    rf'"(?P<request>{_QUOTED})" (?P<status>\d{{3}}|-) (?P<bytes>\d+|-)'
    rf'(?: "(?P<referer>{_QUOTED})" "(?P<agent>{_QUOTED})(?P<closed>"?))?'
    r"""(?:[ \t](?(agent)|(?!"))(?P<extra>.*+))?$"""
)
_TIME = re.compile(
    r"^(\d{1,2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(?: ([+-])(\d{2}):?(\d{2}))?$",
    re.ASCII,
)
# nginx's $time_iso8601 put where $time_local stands: YYYY-MM-DDThh:mm:ss+hh:mm.
_ISO_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?"
    r"(?:(Z)|([+-])(\d{2}):?(\d{2}))?$",
    re.ASCII,
)
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 token: a method name
_UNESCAPE = re.compile(r"\\([\"\\])")
# Apache and nginx log a request's odd bytes (controls, and all past ASCII) as \xhh.
_LOG_ESCAPE = re.compile(r"\\([\"\\])|\\x([0-9A-Fa-f]{2})")
_MAX_LISTED = 100


def parse_clf_time(text: str) -> float:
    """``01/Aug/1995:00:00:01 -0400`` -> UTC epoch seconds; ValueError if malformed.

    A missing zone is taken as UTC. Fractions of a second (``00:00:01.250``, as
    custom formats with ``%{msec_frac}t`` write) are kept, and an ISO 8601 stamp
    (``1995-08-01T00:00:01-04:00``, nginx's ``$time_iso8601``) is read too.
    """
    m = _TIME.match(text)
    if m:
        day, mon, year, hh, mm, ss, frac, sign, zh, zm = m.groups()
        month = _MONTHS.get(mon.lower())
        if month is None:
            raise ValueError(f"bad month {mon!r}")
    else:
        iso = _ISO_TIME.match(text)
        if not iso:
            raise ValueError(f"bad time {text!r}")
        year, mon, day, hh, mm, ss, frac, _z, sign, zh, zm = iso.groups()
        month = int(mon)
        if not 1 <= month <= 12:
            raise ValueError(f"bad month {mon!r}")
    # timegm rolls an impossible date over (31/Feb is 2 March, 25:61 the next day), so a
    # damaged stamp would pass as another time: each field is checked against its range.
    y, d = int(year), int(day)
    if not (y >= 1 and 1 <= d <= calendar.monthrange(y, month)[1]):
        raise ValueError(f"no day {day}/{mon}/{year}")
    if int(hh) > 23 or int(mm) > 59 or int(ss) > 60:  # 60: a leap second
        raise ValueError(f"no time of day {hh}:{mm}:{ss}")
    if sign and (int(zh) > 23 or int(zm) > 59):  # a UTC offset is under a day
        raise ValueError(f"bad time zone {sign}{zh}{zm}")
    epoch = calendar.timegm((y, month, d, int(hh), int(mm), int(ss), 0, 0, 0))
    if sign:
        offset = int(zh) * 3600 + int(zm) * 60
        epoch -= offset if sign == "+" else -offset
    return epoch + int(frac) / 10 ** len(frac) if frac else float(epoch)


def _unescape_request(request: str) -> str:
    """A request field with its log escapes undone, such that the replay sends the bytes
    the client sent: ``\\"`` and ``\\\\`` are the characters; ``\\xhh`` bytes past ASCII
    that spell UTF-8 are that text (the replay encodes text as UTF-8), any other
    ``\\xhh`` becomes ``%hh``. Kept as written, ``/caf\\xc3\\xa9`` was replayed as
    ``/caf%5Cxc3%5Cxa9``: a file no server has.
    """

    def text(m: re.Match[str]) -> str:
        if m[1]:
            return m[1]
        v = int(m[2], 16)
        return chr(v) if v >= 0x80 else f"%{v:02X}"

    try:
        return _LOG_ESCAPE.sub(text, request).encode("latin-1").decode("utf-8")
    except UnicodeError:  # not UTF-8 (or text past Latin-1 beside the escapes)
        return _LOG_ESCAPE.sub(lambda m: m[1] or f"%{m[2].upper()}", request)


def _split_request(request: str) -> tuple[str, str] | None:
    """(method, url) of a request line, or None when it is not one."""
    words = (_unescape_request(request) if "\\" in request else request).split()
    if len(words) < 2 or not _TOKEN.match(words[0]):
        return None
    if len(words) >= 3 and words[-1].upper().startswith("HTTP/"):
        words = words[:-1]
    return words[0], " ".join(words[1:])


@dataclass
class _Tally:
    """What the reader counts besides the rows: lines, and the skipped and repaired ones."""

    lines: int = 0
    combined: int = 0
    skipped: int = 0
    repaired: int = 0
    vhost: int = 0  # lines that start with a virtual host (vhost_combined)
    extra: int = 0  # lines with fields after the format's own (ignored)
    not_path: int = 0  # requests for no path of the server's (left out)
    not_path_lines: list[int] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)  # the first _MAX_LISTED
    repaired_lines: list[int] = field(default_factory=list)
    span: TimeSpan = field(default_factory=TimeSpan)

    def skip(self, number: int) -> None:
        self.skipped += 1
        if len(self.skipped_lines) < _MAX_LISTED:
            self.skipped_lines.append(number)

    def leave_out(self, number: int) -> None:
        self.not_path += 1
        if len(self.not_path_lines) < _MAX_LISTED:
            self.not_path_lines.append(number)

    def repair(self, number: int) -> None:
        self.repaired += 1
        if len(self.repaired_lines) < _MAX_LISTED:
            self.repaired_lines.append(number)


_COLUMNS = {
    "key": pa.int64(),
    "time": pa.float64(),
    "method": pa.int32(),  # a code of the reader's methods (Distinct)
    "path": pa.string(),
    "bytes": pa.int64(),
    "status": pa.int32(),
}
_TIMES_CACHED = 65_536  # distinct time stamps remembered (a log's are mostly in order)


def read_clf(
    path: str | Path,
    *,
    strict: bool = False,
    idle_gap: float | str = 1800.0,
    burst_gap: float | str = 1.0,
    classifier: Classifier | None = None,
    max_line: int = MAX_LINE,
) -> Trace:
    """Read a Common or Combined Log Format access log into a Trace (see the module docstring).

    ``idle_gap`` and ``burst_gap`` are seconds or durations such as ``"30m"``;
    ``burst_gap`` may be 0 (only requests in the same second share a burst).
    ``max_line``: the longest line, in bytes; a longer one is an error naming it.
    The file is read in batches of lines, its rows kept in Arrow columns, so the
    memory grows with the requests, not with the text.
    """
    path = Path(path)
    idle = parse_duration(idle_gap, "idle_gap")
    bgap = non_negative_duration(burst_gap, "burst_gap")
    rows = Columns(_COLUMNS)
    tally = _Tally()
    keys: dict[tuple[str, str], int] = {}
    methods = Distinct()
    time_cache: dict[str, float] = {}
    damage = None
    for batch in line_batches(path, max_line=max_line, strict=strict):
        _read_batch(batch, path, strict, rows, tally, keys, methods, time_cache)
        rows.flush()
        if len(time_cache) > _TIMES_CACHED:
            time_cache.clear()
        damage = batch.damage
    tally.span.check(path)

    n = rows.rows
    combined = tally.combined
    meta: dict[str, Any] = {
        "reader": "clf",
        "source": str(path),
        "flavor": "combined" if combined == n and n else ("common" if combined == 0 else "mixed"),
        "lines": tally.lines,
        "skipped": tally.skipped,
        "skipped_lines": tally.skipped_lines,
        "repaired": tally.repaired,
        "repaired_lines": tally.repaired_lines,
        "vhost_lines": tally.vhost,
        "extra_field_lines": tally.extra,
        "not_path": tally.not_path,
        "not_path_lines": tally.not_path_lines,
        "mode": "session",
        "idle_gap": idle,
        "burst_gap": bgap,
    }
    if damage:
        meta["damage"] = damage
    if n == 0:
        return Trace.empty({**meta, "origin_epoch": None})
    key = rows.numpy("key")
    s = sessionize(key, rows.numpy("time"), burst_gap=bgap, idle_gap=idle)
    # A session is one (host, agent) key's: its client is the key's host.
    hosts = pa.array([host for host, _agent in keys], pa.string())
    clients = hosts.take(session_keys(key, s))
    del key, hosts
    out = session_columns(rows, s, classifier, methods=methods, clients=clients)
    meta["origin_epoch"] = s.origin
    del s, clients  # the row order: out holds what the trace needs
    return Trace.from_columns(out, meta)


def _read_batch(
    batch: LineBatch,
    path: Path,
    strict: bool,
    rows: Columns,
    tally: _Tally,
    keys: dict[tuple[str, str], int],
    methods: Distinct,
    time_cache: dict[str, float],
) -> None:
    """Parse one batch of lines into ``rows``; a line that is not a log line is counted."""
    cols = rows.lists
    for number, raw in enumerate(batch.lines, start=batch.first):
        text = decode_line(raw).rstrip("\r")
        m = CLF_LINE.match(text)
        why = ""
        req = None
        epoch = 0.0
        if m is None:
            why = "not a Common/Combined Log Format line"
        elif m["agent"] is not None and not m["closed"] and strict:
            why = "user-agent field has no closing quote"
        elif len(m["bytes"]) > 18:  # past int64: no reply is that large
            why = f"bytes {m['bytes'][:30]!r} is too large"
        else:
            req = _split_request(m["request"])
            if req is None:
                why = f"request field {m['request']!r} is not METHOD URL [VERSION]"
            elif "\x00" in req[1]:  # (a server logs one as \x00; sent, it ends the line)
                why = "request field holds a raw NUL byte: not a line a server wrote"
            elif not req[1].startswith("/"):
                # A line the server wrote, but for no path of its own: a proxy probe's
                # absolute URI, CONNECT's HOST:PORT, Apache's own "OPTIONS *". The
                # replay sends paths only, so the line is left out, counted.
                tally.leave_out(number)
                continue
            else:
                stamp = m["time"]
                cached = time_cache.get(stamp)
                if cached is None:
                    try:
                        cached = time_cache[stamp] = parse_clf_time(stamp)
                    except ValueError:
                        why = f"bad time [{stamp}]"
                epoch = cached or 0.0
        if why:
            if strict:
                raise TraceFormatError(why, path=path, line=number)
            tally.skip(number)
            continue
        assert m is not None and req is not None
        agent = m["agent"]
        if agent is not None:
            tally.combined += 1
            if not m["closed"]:
                tally.repair(number)
            if "\\" in agent:
                agent = _UNESCAPE.sub(r"\1", agent)
        if m["vhost"] is not None:
            tally.vhost += 1
        if m["extra"] and not m["extra"].isspace():
            tally.extra += 1
        tally.span.see(epoch, number, f"[{m['time']}]")
        host = m["host"]
        k = (host, agent or "")
        cols["key"].append(keys.setdefault(k, len(keys)))
        cols["time"].append(epoch)
        cols["method"].append(methods.code(req[0]))
        cols["path"].append(req[1])
        cols["bytes"].append(0 if m["bytes"] == "-" else int(m["bytes"]))
        cols["status"].append(0 if m["status"] == "-" else int(m["status"]))
    tally.lines += len(batch.lines)
