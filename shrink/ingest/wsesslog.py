"""httperf ``--wsesslog`` session logs: reader and writer.

The syntax is httperf's (man page, option ``--wsesslog``; parser in
``src/gen/wsesslog.c``), reproduced here rule by rule:

* A line whose first character is ``#`` is a comment. Only column 1 counts: an
  indented ``#x`` is a request for the URI ``#x``, as in httperf.
* A line with no non-blank character ends the current session. Repeated blank
  lines make no empty session.
* Otherwise the first whitespace-delimited word is the URI. A line that starts
  with whitespace (space or tab) is an embedded request: it joins the current
  burst. A line that starts in column 1 starts a new burst. The first request of
  a session starts its first burst even when indented.
* Further words are arguments:

  - ``think=X``: think time in seconds after the burst this line belongs to (an
    embedded line sets its burst's think time; the last one given wins).
    Without it a burst gets ``think_default`` (httperf's ``--wsesslog N,X,F``).
  - ``method=M``: httperf compares the *start* of M with DELETE, GET, HEAD,
    OPTIONS, POST, PUT, TRACE in that order (``strncmp`` with the length of the
    known name), so ``method=POSTED`` means POST; reproduced. Case matters.
  - ``contents=...``: the request body. ``'...'`` and ``"..."`` quote (the
    other quote is literal inside), ``\\n``, ``\\r``, ``\\t`` are escapes, a
    backslash before any other character keeps that character, and a backslash
    at the end of a line puts a newline in the body and continues the body on
    the next line. Unquoted blanks end the value. An empty body (``contents=''``)
    means no body, as in httperf. The body is the file's bytes as they are, as
    httperf sends them: a byte that is not UTF-8 (raw, or after a backslash) too.

  Any other argument is an error (``TraceFormatError`` naming the file and line),
  as httperf panics on it too.

Where shrink is stricter than httperf (each an error with the line): a think time
that is not a whole finite number >= 0 (httperf's ``sscanf`` would take
``think=2s`` as 2), a quote left open at the end of a line (httperf would take
the newline into the body and go on), a backslash-newline at the end of the
file. A CR before the LF is dropped, so CRLF files read like LF files; a file whose
lines end in CR alone is split on CR (:func:`shrink.ingest._io.line_end`).

**Mapping to the Trace.** A session log records no times. Session ``i`` (0, 1,
... in file order) starts at ``i / session_rate`` seconds (default 1 session/s:
httperf's ``--rate``); a burst's ``t`` is its session's start plus the think times
of the bursts before it (response times are unknown and counted as 0). ``rt`` is
NaN, ``bytes`` -1, ``status`` 0, ``client`` "". The ``body`` column (bytes) is present
when any request has a body (b"" for those without). A path's byte that is not UTF-8
reads as its ``%hh`` escape, as in the other readers.

**Canonical form** (what :func:`write_wsesslog` writes): sessions separated by
one blank line, no comments; a burst's first request in column 1, its embedded
requests indented by one tab; on each line the URI, then ``think=`` (first line
of a burst only, when the think time differs from ``think_default``; Python's
shortest round-trip float text), ``method=`` (when not GET), ``contents='...'``
(when the body is not empty; ``\\`` ``'`` newline CR tab written as ``\\\\``
``\\'`` ``\\n`` ``\\r`` ``\\t``), separated by one space; a final LF. It follows the
session list httperf prints with ``--debug 4`` (which rounds think times and
does not escape bodies, so it is not lossless). Reading a canonical file and
writing it again gives the same bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shrink.atomic import atomic_file
from shrink.bodies import MAX_BODY, too_large
from shrink.checks import MAX_SECONDS, check_int, check_rate, check_scalar
from shrink.classify import Classifier
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest._columns import Columns, Distinct, classify_paths, release
from shrink.ingest._io import MAX_LINE, LineBatch, decode_line, line_batches
from shrink.trace import WRITE_BATCH, Trace

__all__ = ["METHODS", "read_wsesslog", "write_wsesslog"]

# httperf's call_method_name[], in its order: the order decides prefix matches.
METHODS: tuple[str, ...] = ("DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "TRACE")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t"}


class _Lines:
    """The file's lines with 1-based numbers, a batch at a time; the contents parser may
    pull the next one."""

    def __init__(
        self, path: Path, batches: Iterator[LineBatch], max_line: int, max_body: int
    ) -> None:
        self.path = path
        self.max_line = max_line
        self.max_body = max_body
        self._batches = batches
        self._lines: list[bytes] = []
        self._first = 1
        self._terminated = True
        self._i = 0
        self.damage: str | None = None  # a damaged gzip file's, read leniently

    def __iter__(self) -> Iterator[tuple[int, str, bool]]:
        return self

    def __next__(self) -> tuple[int, str, bool]:
        """(line number, text without LF and its CR, whether an LF followed)."""
        while self._i >= len(self._lines):
            batch = next(self._batches)  # its StopIteration ends this iteration too
            self._lines, self._first, self._terminated = batch.lines, batch.first, batch.terminated
            self.damage = batch.damage or self.damage
            self._i = 0
        i = self._i
        self._i += 1
        # Bytes that are not UTF-8 are kept as lone surrogates: a body gets them back as
        # they were (:func:`_body`), a path and a message read them as %hh (:func:`_shown`).
        text = self._lines[i].decode("utf-8", "surrogateescape")
        if text.endswith("\r"):
            text = text[:-1]
        return self._first + i, text, self._terminated or i < len(self._lines) - 1

    def error(self, message: str, line: int) -> TraceFormatError:
        return TraceFormatError(message, path=self.path, line=line)


class _Sessions:
    """The requests read so far, in Arrow columns: a row per request naming its burst,
    and a row per burst (its session, index, start time and think time) once the burst
    is complete, that is when its think time is final."""

    def __init__(self, think_default: float, rate: float) -> None:
        self.requests = Columns(
            {"burst": pa.int64(), "method": pa.int32(), "path": pa.string(), "body": pa.binary()}
        )
        self.methods = Distinct()  # the method column holds their codes
        self.bursts = Columns(
            {"session": pa.int64(), "index": pa.int32(), "t": pa.float64(), "think": pa.float64()}
        )
        self.think_default = think_default
        self.rate = rate
        self.session = 0  # the session being read (sessions before it are complete)
        self.count = 0  # bursts in it so far; 0 while no session is open
        self.burst = -1  # the burst being read, counted over the file
        self.t = 0.0  # its start time
        self.think = think_default  # its think time so far
        self.bodies = False  # a request had a body

    def new_burst(self) -> None:
        if self.count:
            self._close_burst()
        else:
            self.t = self.session / self.rate
            if self.t > MAX_SECONDS:
                # The option's fault, not the file's: it was "row 8: t == inf" (rate 1e-320).
                raise ParameterError(
                    f"session_rate == {self.rate:g} starts session {self.session} at "
                    f"{self.t:.3g} s, past the {MAX_SECONDS:.0f} s (a century) a trace may "
                    "span; raise it."
                )
        self.count += 1
        self.burst += 1
        self.think = self.think_default

    def end_session(self) -> None:
        if self.count:
            self._close_burst()
            self.session += 1
            self.count = 0

    def _close_burst(self) -> None:
        cols = self.bursts.lists
        cols["session"].append(self.session)
        cols["index"].append(self.count - 1)
        cols["t"].append(self.t)
        cols["think"].append(self.think)
        self.t += self.think

    def request(self, path: str, method: str, body: str) -> None:
        cols = self.requests.lists
        cols["burst"].append(self.burst)
        cols["method"].append(self.methods.code(method))
        cols["path"].append(_shown(path))
        cols["body"].append(_body(body))
        self.bodies = self.bodies or bool(body)

    def flush(self) -> None:
        self.requests.flush()
        self.bursts.flush()


# C isspace() in the C locale is " \t\n\v\f\r": what sscanf("%s") stops at.
_WORD = re.compile(r"[^ \t\n\v\f\r]+")
_HAS_BLANK = re.compile(r"[ \t\n\v\f\r]")


def _shown(text: str) -> str:
    """A line's ``text`` as the other readers read text: a byte that is not UTF-8 (a lone
    surrogate here) as its ``%hh`` escape."""
    return text if text.isascii() else decode_line(text.encode("utf-8", "surrogateescape"))


def _body(text: str) -> bytes:
    """A parsed contents value as the bytes the file held (httperf sends them as they are:
    a body sent as the ``%hh`` text of a byte that is not UTF-8 was another request)."""
    return text.encode("utf-8", "surrogateescape")


def _match_method(word: str) -> str | None:
    for name in METHODS:
        if word.startswith(name):
            return name
    return None


def _parse_contents(
    lines: _Lines, lineno: int, text: str, has_lf: bool, pos: int
) -> tuple[str, int, str, bool, int]:
    """Parse a contents value starting at ``pos``; returns (body, lineno, text, has_lf, pos).

    The returned position is just past the blank that ended the value; the
    line may have changed through backslash-newline continuations.
    """
    out: list[str] = []
    quote = ""  # "'" or '"' while inside quotes
    escaped = False
    start = lineno
    while True:
        if pos < len(text):
            ch = text[pos]
            pos += 1
        elif pos == len(text) and has_lf:
            ch = "\n"
            pos += 1
        else:  # end of the line's text with no LF: end of file
            if escaped:
                raise lines.error("backslash at the end of the file in contents=", lineno)
            if quote:
                raise lines.error(f"contents= quote {quote} is never closed", lineno)
            return "".join(out), lineno, text, has_lf, pos
        if escaped:
            escaped = False
            if ch == "\n":
                out.append("\n")
                if len(out) > lines.max_line:
                    # Continued over line after line, a body was as long as the file and
                    # held a pointer per character: 20 MB of it took 270 MB.
                    raise lines.error(
                        f"contents= body longer than {lines.max_line:,} characters (continued "
                        f"over lines up to line {lineno}); raise --max-line",
                        start,
                    )
                try:
                    lineno, text, has_lf = next(lines)
                except StopIteration:
                    raise lines.error(
                        "backslash-newline in contents= at the end of the file", lineno
                    ) from None
                pos = 0
            else:
                out.append(_ESCAPES.get(ch, ch))
        elif quote and ch == quote:
            quote = ""
        elif ch == "\n" and quote:
            raise lines.error(f"contents= quote {quote} is never closed on this line", lineno)
        elif ch in " \t\n" and not quote:
            return "".join(out), lineno, text, has_lf, pos
        elif ch == "\\":
            escaped = True
        elif ch in "'\"" and not quote:
            quote = ch
        else:
            out.append(ch)


def _parse_think(word: str, lines: _Lines, lineno: int) -> float:
    value = word[len("think=") :]
    try:
        think = float(value)
    except ValueError:
        raise lines.error(f"think={_shown(value)!r} is not a number of seconds", lineno) from None
    if not math.isfinite(think) or think < 0:
        raise lines.error(f"think={value} must be a finite number of seconds >= 0", lineno)
    if think > MAX_SECONDS:
        # Read, it became the next burst's start and the error named a row of the trace.
        raise lines.error(f"think={value} is past a century ({MAX_SECONDS:.0f} s)", lineno)
    return think


def _read_sessions(lines: _Lines, out: _Sessions) -> None:
    """Read the sessions of a wsesslog file into ``out``, as httperf would build them."""
    for lineno, text, has_lf in lines:
        if text.startswith("#"):
            continue
        first = _WORD.search(text)
        if first is None:
            out.end_session()
            continue
        if not out.count or first.start() == 0:
            out.new_burst()
            if out.t > MAX_SECONDS:
                raise lines.error(
                    f"this burst starts {out.t:.3g} s into the trace (the think times "
                    f"before it), past a century ({MAX_SECONDS:.0f} s)",
                    lineno,
                )
        if "\x00" in first.group():  # (the replay refused it only when it came to send it)
            raise lines.error("the path holds a NUL byte, which no request line can", lineno)
        if not first.group().startswith("/"):  # (an absolute URI names its own host)
            raise lines.error(
                f"the path {first.group()[:60]!r} does not start with '/' (the replay sends "
                "paths only, to the target)",
                lineno,
            )
        method, body = "GET", ""
        pos = first.end()
        while (m := _WORD.search(text, pos)) is not None:
            word = m.group()
            if word.startswith("method=") and len(word) > len("method="):
                known = _match_method(word[len("method=") :])
                if known is None:
                    raise lines.error(
                        f"unknown method in {_shown(word)!r} (httperf knows {', '.join(METHODS)})",
                        lineno,
                    )
                method = known
                pos = m.end()
            elif word.startswith("think=") and len(word) > len("think="):
                out.think = _parse_think(word, lines, lineno)
                pos = m.end()
            elif word.startswith("contents=") and len(word) > len("contents="):
                at = lineno
                body, lineno, text, has_lf, pos = _parse_contents(
                    lines, lineno, text, has_lf, m.start() + len("contents=")
                )
                if (size := len(_body(body))) > lines.max_body:
                    raise lines.error(f"contents=: {too_large(size, lines.max_body)}", at)
            elif word in ("method=", "think=", "contents="):
                # (a blank after the =: "think=\t3" read as "unknown argument 'think='")
                raise lines.error(f"{word} has no value (no blank may follow the =)", lineno)
            else:
                raise lines.error(
                    f"unknown argument {_shown(word)!r} (httperf knows think=, method=, contents=)",
                    lineno,
                )
        out.request(first.group(), method, body)
        if out.requests.full():
            out.flush()
    out.end_session()
    out.flush()


def read_wsesslog(
    path: str | Path,
    *,
    strict: bool = False,
    session_rate: float = 1.0,
    think_default: float = 0.0,
    classifier: Classifier | None = None,
    max_line: int = MAX_LINE,
    max_body: int = MAX_BODY,
) -> Trace:
    """Read an httperf ``--wsesslog`` file into a Trace (see the module docstring).

    ``session_rate`` (sessions/s) spaces the session start times; ``think_default``
    is the think time of bursts without ``think=``. The syntax has no lenient
    mode: any error raises. ``strict`` says only what a damaged gzip file is (cut short
    while copied or written): an error with it; without, the lines before the damage
    are read, and meta ``damage`` says where it broke off.
    ``max_line``: the longest line, in bytes, and the longest ``contents=`` body
    continued over lines, in characters; a longer one is an error naming it.
    ``max_body``: the longest ``contents=`` body, in bytes; a longer one is an error
    naming its line.
    The file is read in batches of lines, its requests kept in Arrow columns, so the
    memory grows with the requests, not with the text.
    """
    path = Path(path)
    rate = check_rate(session_rate, "session_rate")
    think_default = check_scalar(think_default, "think_default", low=0.0)
    sessions = _Sessions(think_default, rate)
    # Every syntax error is fatal, as in httperf: strict says only what damaged gzip is.
    max_body = check_int(max_body, "max_body", low=1)
    batches = line_batches(path, max_line=max_line, strict=strict)
    lines = _Lines(path, batches, max_line, max_body)
    _read_sessions(lines, sessions)
    meta: dict[str, Any] = {
        "reader": "wsesslog",
        "source": str(path),
        "skipped": 0,
        "skipped_lines": [],
        "mode": "session",
        "session_rate": rate,
        "think_default": think_default,
    }
    if lines.damage:
        meta["damage"] = lines.damage
    if not sessions.requests.rows:
        return Trace.empty(meta)
    # Each column is built on its own and what it was made from released before the next.
    if not sessions.bodies:
        sessions.requests.discard("body")
    burst = sessions.requests.array("burst")
    cols: dict[str, Any] = {}
    for name, field in (("session", "session"), ("burst", "index"), ("t", "t"), ("think", "think")):
        cols[name] = sessions.bursts.array(field).take(burst)
        release()
    del burst
    cols["method"] = sessions.methods.decode(sessions.requests.array("method"))
    release()
    cols["path"] = sessions.requests.array("path")
    cols["cls"] = classify_paths(cols["path"], classifier)
    release()
    if sessions.bodies:
        cols["body"] = sessions.requests.array("body")
    return Trace.from_columns(cols, meta)


def _quote_body(body: bytes) -> str:
    """``body`` quoted; a byte that is not UTF-8 as a lone surrogate, which the writer
    turns back into that byte."""
    out = ["'"]
    for ch in body.decode("utf-8", "surrogateescape"):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    out.append("'")
    return "".join(out)


def format_wsesslog(trace: Trace, *, think_default: float = 0.0, source: str = "") -> str:
    """The canonical wsesslog text of ``trace`` (see the module docstring); a body's byte
    that is not UTF-8 as a lone surrogate (``encode("utf-8", "surrogateescape")``)."""
    return "".join(wsesslog_chunks(trace, think_default=think_default, source=source))


def wsesslog_chunks(trace: Trace, *, think_default: float = 0.0, source: str = "") -> Iterator[str]:
    """The canonical wsesslog text of ``trace``, a batch of rows at a time."""
    # httperf's default think time (--wsesslog N,X,F) is seconds >= 0; NaN equals no
    # think time, so it silently wrote every one.
    think_default = check_scalar(think_default, "think_default", low=0.0)
    n = len(trace)
    if n == 0:
        return
    session = trace.table.column("session").to_numpy()
    burst = trace.table.column("burst").to_numpy()
    new_session = np.r_[True, session[1:] != session[:-1]]
    new_burst = np.r_[True, burst[1:] != burst[:-1]] | new_session
    where = source or "trace"
    for lo in range(0, n, WRITE_BATCH):
        part = trace.table.slice(lo, WRITE_BATCH)
        think = part.column("think").to_pylist()
        methods = part.column("method").to_pylist()
        paths = part.column("path").to_pylist()
        bodies = part.column("body").to_pylist() if trace.has("body") else [None] * len(part)
        starts = new_session[lo : lo + len(part)].tolist()
        firsts = new_burst[lo : lo + len(part)].tolist()
        out: list[str] = []
        for j, (path, method) in enumerate(zip(paths, methods, strict=True)):
            i, body = lo + j, bodies[j] or b""
            if not path or _HAS_BLANK.search(path) or method not in METHODS or b"\0" in body:
                _refuse(where, i, session[i], burst[i], path, method, body)
            if starts[j] and i > 0:
                out.append("\n")
            parts = [path]
            if firsts[j]:
                th = think[j]
                if path.startswith("#") or not math.isfinite(th) or th < 0:
                    _refuse(where, i, session[i], burst[i], path, method, body, th)
                if th != think_default:
                    parts.append(f"think={th!r}")
            if method != "GET":
                parts.append(f"method={method}")
            if body:
                parts.append(f"contents={_quote_body(body)}")
            out.append(("" if firsts[j] else "\t") + " ".join(parts) + "\n")
        yield "".join(out)


def _refuse(
    where: str,
    i: int,
    session: int,
    burst: int,
    path: str,
    method: str,
    body: bytes,
    think: float = 0.0,
) -> None:
    """Raise the TraceFormatError that says why row ``i`` cannot be written."""
    row = f"{where} row {i} (session {session}, burst {burst})"
    if not path or _HAS_BLANK.search(path):
        raise TraceFormatError(f"{row}: path {path!r} is empty or has blanks")
    if method not in METHODS:
        raise TraceFormatError(
            f"{row}: httperf cannot send method {method!r} (it knows {', '.join(METHODS)})"
        )
    if b"\0" in body:
        raise TraceFormatError(f"{row}: a body with a NUL byte cannot be written")
    if path.startswith("#"):
        raise TraceFormatError(f"{row}: a burst cannot start with {path!r} (a comment)")
    raise TraceFormatError(f"{row}: think time {think} must be finite and >= 0")


def write_wsesslog(trace: Trace, path: str | Path, *, think_default: float = 0.0) -> Path:
    """Write ``trace`` as a canonical httperf session log; returns the path.

    Raises TraceFormatError for what httperf cannot express: a method it does
    not know, a path with blanks, a burst starting with ``#``, a NUL in a body.
    Times, sizes, statuses and response times are not part of the format.
    """
    path = Path(path)
    # Streamed through one temporary file: a refused row or a full disk leaves nothing.
    with atomic_file(path, "wb") as fh:
        for chunk in wsesslog_chunks(trace, think_default=think_default, source=str(path)):
            fh.write(chunk.encode("utf-8", "surrogateescape"))
    return path
