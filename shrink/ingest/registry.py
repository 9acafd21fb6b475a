"""The registry of trace readers and writers: ``read_trace`` and ``write_trace``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shrink.bodies import MAX_BODY
from shrink.checks import check_int
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest._io import regular_file
from shrink.ingest.clf import read_clf
from shrink.ingest.detect import detect_format
from shrink.ingest.specweb import read_specweb
from shrink.ingest.wsesslog import read_wsesslog, write_wsesslog
from shrink.trace import Trace, check_values

__all__ = ["READ_FORMATS", "WRITE_FORMATS", "Reader", "read_trace", "write_trace"]

Reader = Callable[..., Trace]


def _read_capture(path: str | Path, *, strict: bool = False, **opts: Any) -> Trace:
    """pcap/pcapng: imported only when needed (scapy is slow to import)."""
    try:
        from shrink.ingest.capture import read_capture
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("shrink.ingest.capture"):
            raise TraceFormatError(
                "pcap/pcapng support is missing (no module shrink.ingest.capture)", path=path
            ) from exc
        raise
    _check_options(read_capture, "pcap", opts)  # a TypeError (exit 70) otherwise
    return read_capture(path, strict=strict, **opts)


def _read_parquet(path: str | Path, *, strict: bool = False, max_body: int = MAX_BODY) -> Trace:
    """A trace shrink already wrote (so that every command can take any trace file)."""
    del strict
    return Trace.read_parquet(path, max_body=check_int(max_body, "max_body", low=1))


_READERS: dict[str, Reader] = {
    "wsesslog": read_wsesslog,
    "specweb": read_specweb,
    "clf": read_clf,
    "pcap": _read_capture,
    "parquet": _read_parquet,
}
READ_FORMATS: tuple[str, ...] = tuple(_READERS)
WRITE_FORMATS: tuple[str, ...] = ("wsesslog", "jsonl", "parquet")


def _options(reader: Reader) -> set[str] | None:
    """Keyword options a reader takes, or None when it takes any (``**opts``)."""
    params = inspect.signature(reader).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _check_options(reader: Reader, fmt: str, opts: dict[str, Any]) -> None:
    """A ParameterError naming the options in ``opts`` that ``reader`` does not take."""
    accepted = _options(reader)
    if accepted is None:
        return
    extra = sorted(set(opts) - accepted)
    if extra:
        # "NAME == value, ..." as every check says it: the CLI names its option from NAME.
        takes = ", ".join(sorted(accepted - {"strict"})) or "none"
        nor = f" (nor do {', '.join(extra[1:])})" if len(extra) > 1 else ""
        raise ParameterError(
            f"{extra[0]} == {opts[extra[0]]!r}, does not apply to the {fmt} format{nor}; "
            f"it takes {takes}."
        )


def _line_bound(opts: dict[str, Any]) -> dict[str, Any]:
    """The ``max_line`` among a text reader's options, for telling the format as it reads."""
    return {"max_line": opts["max_line"]} if "max_line" in opts else {}


def read_trace(path: str | Path, format: str = "auto", strict: bool = False, **opts: Any) -> Trace:
    """Read a trace file of any known format into a Trace.

    ``format`` is ``auto`` (from the content) or one of :data:`READ_FORMATS`;
    ``opts`` go to the format's reader, and one it does not take is a
    ParameterError naming the options it does take.
    """
    fmt = detect_format(path, **_line_bound(opts)) if format == "auto" else format
    reader = _READERS.get(fmt)
    if reader is None:
        raise ParameterError(
            f"format == {format!r}, must be one of auto, {', '.join(READ_FORMATS)}."
        )
    _check_options(reader, fmt, opts)
    trace = reader(regular_file(path), strict=strict, **opts)
    if fmt != "parquet":
        # What a reader made must be a trace every command reads back: a time 1e300 s
        # after the first, or a think time past a century, was written and then refused.
        try:
            check_values(trace.table, path)
        except TraceFormatError as exc:
            raise TraceFormatError(f"read as a trace, {exc.reason}", path=path) from None
    return trace


def write_trace(trace: Trace, path: str | Path, format: str, **opts: Any) -> Path:
    """Write ``trace`` as ``wsesslog``, ``jsonl`` or ``parquet``; returns the path."""
    if format == "wsesslog":
        return write_wsesslog(trace, path, **opts)
    if opts:
        raise ParameterError(f"option(s) {', '.join(sorted(opts))} do not apply to {format}.")
    if format == "jsonl":
        return trace.write_jsonl(path)
    if format == "parquet":
        return trace.write_parquet(path)
    raise ParameterError(f"format == {format!r}, must be one of {', '.join(WRITE_FORMATS)}.")
