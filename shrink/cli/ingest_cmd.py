"""``shrink ingest`` (trace file -> Parquet Trace) and ``shrink export`` (-> wsesslog, JSONL)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from shrink.cli._common import (
    MaxBodyOpt,
    as_option,
    cli_errors,
    console,
    echo_json,
    escape,
    options_named,
    output_path,
    plural,
)
from shrink.cli._typed_paths import file_out
from shrink.defaults import MAX_BODY, MAX_BODY_TEXT
from shrink.errors import TraceFormatError, printable

_SHOWN_SKIPS = 20
# The readers' names of the options ingest passes them.
_READER_OPTIONS = {
    "idle_gap": "--idle-gap",
    "burst_gap": "--burst-gap",
    "session_rate": "--session-rate",
    "sessions": "--sessions",
    "max_line": "--max-line",
    "max_body": "--max-body",
}
# What a lenient reader skips, by format: packets of a capture, lines of a log.
_UNIT = {"pcap": "packet"}
# What the capture reader counts of HTTP it read but could not take whole, and what
# became of each: the trace is short of it, or holds it otherwise than it was sent.
_HTTP_FAULTS = {
    "incomplete-request-header": "requests cut short in their header (left out)",
    "request-header-in-gap": "request headers with bytes the capture lost (left out)",
    "request-body-incomplete": "request bodies cut short or with lost bytes (kept as far "
    "as they go, lost bytes as zeros)",
    "request-content-type-dropped": "Content-Types that cannot be sent again (a control "
    "character, or too long: the body goes as form data)",
    "request-target-nul": "requests whose target holds a NUL byte, which no request line "
    "can carry (left out)",
    "request-target-not-path": "requests for no path of the server's (an absolute URI a "
    "proxy is asked for, HOST:PORT, '*'; left out: the replay sends paths only)",
    "request-content-type-repeated": "requests with two unlike Content-Types (the first kept)",
    "incomplete-response-header": "responses cut short in their header",
    "response-header-in-gap": "response headers with bytes the capture lost",
    "response-incomplete": "responses cut short or with lost bytes",
    "http-resync": "stretches that are not HTTP inside an HTTP connection (read on past them)",
    "tunnel-requests": "requests sent through a CONNECT tunnel or after a 101 protocol "
    "switch, to another server or in another protocol (left out)",
}


class ReadFormat(StrEnum):
    auto = "auto"
    wsesslog = "wsesslog"
    specweb = "specweb"
    clf = "clf"
    pcap = "pcap"
    parquet = "parquet"


class WriteFormat(StrEnum):
    wsesslog = "wsesslog"
    jsonl = "jsonl"


def ingest(
    input: Annotated[
        Path, typer.Argument(help="Trace file: wsesslog, session log, access log, pcap.")
    ],
    out: Annotated[
        Path,
        file_out("Trace Parquet file to write."),
    ],
    format: Annotated[
        ReadFormat, typer.Option("--format", "-f", help="Input format; auto reads the content.")
    ] = ReadFormat.auto,
    strict: Annotated[
        bool, typer.Option("--strict", help="Stop at the first bad line instead of skipping it.")
    ] = False,
    idle_gap: Annotated[
        str | None,
        typer.Option(
            help="clf/pcap: silence that ends a client's session (e.g. 30m). Default 30m."
        ),
    ] = None,
    burst_gap: Annotated[
        str | None,
        typer.Option(
            help="clf/specweb: requests this close to a burst's first request join it "
            "(e.g. 500ms); pcap: this close to the last response. Defaults: clf 1s, "
            "specweb and pcap 0.5s."
        ),
    ] = None,
    sessions: Annotated[
        str | None,
        typer.Option(
            help="pcap: what makes a session: client (its address), connection, or "
            "cookie:NAME (the value of that cookie). Default client."
        ),
    ] = None,
    session_rate: Annotated[
        float | None,
        typer.Option(help="wsesslog: sessions start at i / rate seconds. Default 1 per second."),
    ] = None,
    max_line: Annotated[
        int | None,
        typer.Option(
            "--max-line",
            min=1,
            help="clf/specweb/wsesslog: the longest line, in bytes; a longer one stops "
            "the reading. Default 1 MiB.",
        ),
    ] = None,
    max_body: Annotated[
        int | None,
        typer.Option(
            "--max-body",
            min=1,
            help="wsesslog/pcap/parquet: the longest request body, in bytes; a longer one "
            f"stops the reading. Default {MAX_BODY_TEXT}.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Read a trace file (format told from its content) and write it as a Parquet Trace.

    Prints requests, sessions, bursts and the lines skipped as unreadable (their
    numbers, the first 20).
    """
    from shrink.ingest import detect_format, read_trace

    opts: dict[str, Any] = {}
    if idle_gap is not None:
        opts["idle_gap"] = idle_gap
    if burst_gap is not None:
        opts["burst_gap"] = burst_gap
    if session_rate is not None:
        opts["session_rate"] = session_rate
    if sessions is not None:
        opts["sessions"] = sessions
    if max_line is not None:
        opts["max_line"] = max_line
    if max_body is not None:
        opts["max_body"] = max_body
    with cli_errors(measures=False):
        output_path(out, inputs=(input,))
        bound = {"max_line": max_line} if max_line is not None else {}
        fmt = detect_format(input, **bound) if format is ReadFormat.auto else format.value
        with options_named(_READER_OPTIONS):
            trace = read_trace(input, format=fmt, strict=strict, **opts)
        _not_all_skipped(input, fmt, trace.meta, len(trace))
        trace.write_parquet(out)
    info = trace.info()
    skipped_lines = list(trace.meta.get("skipped_lines", []))
    summary = {
        "schema": "shrink.ingest/1",
        "input": str(input),
        "format": fmt,
        "output": str(out),
        "requests": info.requests,
        "sessions": info.sessions,
        "bursts": info.bursts,
        "duration": info.duration,
        "skipped": int(trace.meta.get("skipped", 0)),
        "skipped_lines": skipped_lines[:_SHOWN_SKIPS],
    }
    if trace.meta.get("damage"):
        summary["damage"] = trace.meta["damage"]
    if trace.meta.get("joined_captures_at"):
        summary["joined_captures_at"] = trace.meta["joined_captures_at"]
    counts = ("differing_resends", "seen_twice", "skew_seen")
    summary.update({k: int(trace.meta[k]) for k in counts if trace.meta.get(k)})
    faults = {k: int(v) for k, v in (trace.meta.get("http_anomalies") or {}).items() if v}
    if faults:
        summary["http_faults"] = faults
    if as_json:
        echo_json(summary)
        return
    typer.echo(
        f"{printable(input)} ({fmt}): {plural(info.requests, 'request')}, "
        f"{plural(info.sessions, 'session')}, {plural(info.bursts, 'burst')}, "
        f"{info.duration:,.3f} s -> {printable(out)}"
    )
    typer.echo(_skipped_line(fmt, trace.meta, summary["skipped"], summary["skipped_lines"]))
    _notes(trace.meta, faults)


def _notes(meta: dict[str, Any], faults: dict[str, int]) -> None:
    """What the reader read otherwise than as written, or not at all: a line each."""
    if meta.get("damage"):
        # A damaged file read leniently (a capture, a gzip cut short): where, and what was
        # kept. A warning: what lay past the damage is not in the trace.
        console().print(
            f"[yellow]warning:[/] {escape(printable(meta['damage']))}",
            highlight=False,
            soft_wrap=True,
        )
    if joined := meta.get("joined_captures_at"):
        at = ", ".join(f"{x:,}" for x in joined[:5]) + (", ..." if len(joined) > 5 else "")
        typer.echo(
            f"note: {plural(len(joined) + 1, 'capture')} (or pcapng sections) joined in one "
            "file, as `cat a.pcap.gz b.pcap.gz` joins them: read as one, in the file's order "
            f"(a capture's header at byte offset {at})"
        )
    if faults:
        typer.echo(f"note: {_http_faults_text(faults)}")
    if resends := int(meta.get("differing_resends") or 0):
        typer.echo(
            f"note: {plural(resends, 'TCP segment')} sent again bytes already captured, with "
            "other bytes: the first copy was read, as a receiver that had it keeps it"
        )
    if twice := int(meta.get("seen_twice") or 0):
        typer.echo(
            f"note: {plural(twice, 'TCP segment')} captured again on another interface of the "
            "capture (within 0.1 s, every byte the same) read once: one packet seen twice, not "
            "a resend"
        )
    if skew := int(meta.get("skew_seen") or 0):
        typer.echo(
            f"note: {plural(skew, 'response')} stamped before the request it answers, "
            "though the server's TCP ACK says it had the request: paired by the ACK; the "
            "capture's two directions were stamped by clocks apart (two interfaces, a "
            "mirror port): a response time stamped before its request is left unknown"
        )
    extra = int(meta.get("extra_field_lines") or 0)
    if extra:
        typer.echo(
            f"note: fields after the log format's own (a response time?) are not read: "
            f"{plural(extra, 'line')} had some"
        )
    spec = str(meta.get("sessions") or "")
    if spec.startswith("cookie:") and meta.get("cookie_requests") == 0:
        typer.echo(
            f"note: no request sent cookie {spec[7:]} or was answered with it: "
            "every session is by client address, as with --sessions client"
        )
    crowded = int(meta.get("crowded_sessions") or 0)
    if crowded and meta.get("sessions") == "client":
        typer.echo(
            f"note: {plural(crowded, 'session')} had up to {meta['most_connections_at_once']} "
            "connections to one server open at once, more than a browser opens: several "
            "users behind one address (a proxy, a NAT, a load generator)? Their requests "
            "are one session and its bursts merge; --sessions connection or cookie:NAME "
            "tells them apart"
        )
    not_path = int(meta.get("not_path") or 0)
    if not_path:
        lines = ", ".join(str(n) for n in (meta.get("not_path_lines") or [])[:_SHOWN_SKIPS])
        typer.echo(
            f"note: left out {plural(not_path, 'request')} for no path of the server's (an "
            f"absolute URI a proxy is asked for, HOST:PORT, '*'), which the replay does not "
            f"send: {'lines' if not_path > 1 else 'line'} {lines}"
            f"{' ...' if not_path > _SHOWN_SKIPS else ''}"
        )
    repaired = meta.get("repaired_lines") or []
    if repaired:
        console().print(
            f"note: accepted {meta.get('repaired')} line(s) whose last quote is missing: "
            + ", ".join(str(n) for n in repaired[:_SHOWN_SKIPS]),
            highlight=False,
        )


def _not_all_skipped(source: Path, fmt: str, meta: dict[str, Any], requests: int) -> None:
    """A TraceFormatError when the lenient reader skipped everything it read: an empty
    trace was written, exit 0, and every later step refused it (a UTF-16 log read as
    clf, a log in another format, a capture of no HTTP)."""
    skipped = int(meta.get("skipped", 0))
    if requests:
        return
    listed = list(meta.get("skipped_lines", []))[:_SHOWN_SKIPS]
    numbers = ", ".join(str(n) for n in listed) + (" ..." if skipped > len(listed) else "")
    if fmt == "pcap":
        raise TraceFormatError(f"no HTTP request read: {_no_request(meta, listed)}", path=source)
    if not_path := int(meta.get("not_path") or 0):
        raise TraceFormatError(
            f"no request read: every request ({not_path:,}) was for no path of the server's "
            "(an absolute URI a proxy is asked for, HOST:PORT, '*'), which the replay does "
            "not send",
            path=source,
        )
    if not skipped:
        return
    raise TraceFormatError(
        f"no request read: every data line was skipped as unreadable ({plural(skipped, 'line')}"
        f": {numbers}); --strict names what is wrong with the first",
        path=source,
    )


def _no_request(meta: dict[str, Any], listed: list[int]) -> str:
    """Why a capture gave no request, from what its reader counted. An empty trace was
    written, exit 0, for a capture cut by its snapshot length, one of responses only, or
    one with no packet; or the error blamed the packets skipped as not HTTP."""
    packets = int(meta.get("packets", 0))
    truncated = int(meta.get("truncated", 0))
    orphans = int(meta.get("orphan_responses", 0))
    if not packets:
        damage = meta.get("damage")
        return f"no packet could be read ({damage})" if damage else "the capture holds no packet"
    if nul := int((meta.get("http_anomalies") or {}).get("request-target-nul", 0)):
        return (
            f"{plural(nul, 'request')} with a NUL byte in the target (no request line can "
            "carry one)"
        )
    if not_path := int((meta.get("http_anomalies") or {}).get("request-target-not-path", 0)):
        return (
            f"{plural(not_path, 'request')} for no path of the server's (an absolute URI a "
            "proxy is asked for, HOST:PORT, '*'), which the replay does not send"
        )
    if orphans:
        return (
            f"only responses were captured ({plural(orphans, 'response')} without their "
            "request): capture both directions of the traffic"
        )
    if truncated:
        return (
            f"{truncated:,} of {plural(packets, 'packet')} were cut by the capture's snapshot "
            "length, so no request was read whole: capture again with tcpdump -s 0"
        )
    skipped = int(meta.get("skipped", 0))
    if skipped:
        return _skipped_line("pcap", meta, skipped, listed)
    return f"none of its {plural(packets, 'packet')} carries an HTTP/1.x request"


def _http_faults_text(faults: dict[str, int]) -> str:
    """What the capture reader counted of the HTTP it could not take whole, in words."""
    parts = [f"{_HTTP_FAULTS.get(k, k)}: {v:,}" for k, v in faults.items()]
    return "HTTP the capture holds only in part; " + "; ".join(parts)


def _links(meta: dict[str, Any]) -> str:
    """The link types a capture declares that the reader does not decode (it names the
    ones it does), for its packets skipped as of an unsupported link."""
    odd = [t for t in meta.get("link_types") or [] if str(t).isdigit()]
    return f" (link type {', '.join(map(str, odd))})" if odd else ""


def _skipped_line(fmt: str, meta: dict[str, Any], skipped: int, numbers: list[int]) -> str:
    """What a lenient reader left out, in its own unit: packets of a capture, lines of a log."""
    unit = "packet" if fmt == "pcap" else "line"
    if not skipped:
        return f"skipped 0 {unit}s"
    more = " ..." if skipped > len(numbers) else ""
    listed = ", ".join(str(n) for n in numbers)
    if fmt == "pcap":
        kinds = meta.get("skipped_kinds") or {}
        why = ", ".join(f"{k} {v:,}{_links(meta) if k == 'unsupported-link' else ''}"
                        for k, v in kinds.items())  # fmt: skip
        return f"skipped {plural(skipped, unit)} (not HTTP or unreadable: {why}): {listed}{more}"
    return f"skipped {plural(skipped, 'unreadable line')}: {listed}{more}"


def export(
    trace: Annotated[Path, typer.Argument(help="Trace Parquet file.")],
    out: Annotated[
        Path,
        file_out("File to write."),
    ],
    format: Annotated[
        WriteFormat, typer.Option("--format", "-f", help="wsesslog (httperf) or jsonl.")
    ] = WriteFormat.wsesslog,
    think_default: Annotated[
        float,
        typer.Option(help="wsesslog: think time left out of the file (httperf --wsesslog N,X,F)."),
    ] = 0.0,
    max_body: MaxBodyOpt = MAX_BODY,
) -> None:
    """Write a Parquet Trace as an httperf --wsesslog session log or as JSON Lines."""
    from shrink.ingest import write_trace
    from shrink.trace import Trace

    opts: dict[str, Any] = (
        {"think_default": think_default} if format is WriteFormat.wsesslog else {}
    )
    with cli_errors(measures=False):
        output_path(out, inputs=(trace,))
        tr = Trace.read_parquet(trace, max_body=max_body)
        with as_option("--think-default"):  # the one option write_trace checks
            write_trace(tr, out, format.value, **opts)
    typer.echo(
        f"{printable(trace)}: {plural(len(tr), 'request')}, "
        f"{plural(tr.n_sessions, 'session')} -> {printable(out)} "
        f"({format.value})"
    )
    if format is WriteFormat.wsesslog:
        _note_lost_types(tr)


def _note_lost_types(tr: Any) -> None:
    """httperf's session log has no field for a request's Content-Type: a JSON body read
    back from it is sent as form data, a change to the request the export did not say."""
    from shrink.replay._http import DEFAULT_CONTENT_TYPE

    if "content_type" not in tr.columns:
        return
    types = [t for t in tr.column("content_type") if t and t != DEFAULT_CONTENT_TYPE]
    if types:
        kinds = ", ".join(printable(t) for t in sorted(set(types))[:3])
        typer.echo(
            f"note: a session log has no field for a request's Content-Type: that of "
            f"{plural(len(types), 'request')} ({kinds}{', ...' if len(set(types)) > 3 else ''}) "
            f"is left out; read back and replayed, a body is sent as {DEFAULT_CONTENT_TYPE}",
            err=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``ingest`` and ``export`` to ``app``."""
    app.command("ingest")(ingest)
    app.command("export")(export)
