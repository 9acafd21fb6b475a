"""Uniform checks and parsers for parameters (rates, fractions, percentiles, durations).

Messages follow one form, after scikit-learn's ``check_scalar``:
``alpha == 1.7, must be in (0, 1].`` so a user sees the name, the value and the rule.
"""

from __future__ import annotations

import math
import re
from numbers import Real

from shrink.errors import ParameterError

__all__ = [
    "MAX_SECONDS",
    "MIN_TIMEOUT_S",
    "MIN_WINDOW_S",
    "check_alpha",
    "check_fraction",
    "check_int",
    "check_percentile",
    "check_positive",
    "check_rate",
    "parse_duration",
    "parse_number",
    "parse_stat",
    "parse_threshold",
    "parse_thresholds",
]


def _interval(low: float | None, high: float | None, closed: str) -> str:
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    left = "[" if closed in ("both", "left") else "("
    right = "]" if closed in ("both", "right") else ")"
    return f"{left}{lo}, {hi}{right}"


# The shortest measurement window (seconds): a window below float resolution at its
# start time (2 s + 1e-320 s) was empty, and its throughput divided by zero; no web
# measurement is shorter than a millisecond.
MIN_WINDOW_S = 1e-3
# The shortest per-request timeout (seconds): the engine looks for requests past their
# timeout once per millisecond at best (its epoll wait is in whole ms), and no request,
# even over loopback, is answered reliably sooner; 1e-300 s was taken, and every request
# was given up on, the run measuring nothing. Why, as its error says it:
MIN_TIMEOUT_S = 1e-3
MIN_TIMEOUT_WHY = (
    "the engine checks timeouts each millisecond, and a shorter one gives up on every request"
)
# The longest span a time or a duration may have (seconds): a century, past any
# recording or run, but far below the values (1e300) whose arithmetic loses every
# digit of a request's time. Traces, schedules and every duration option share it.
MAX_SECONDS = 100 * 365.25 * 86400.0


def check_scalar(
    value: object,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    closed: str = "both",
) -> float:
    """Return ``value`` as a float if it is a finite real inside the interval, else raise."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ParameterError(f"{name} == {value!r}, must be a real number.")
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        raise ParameterError(f"{name} == {v}, must be finite.")
    below = low is not None and (v < low or (v == low and closed in ("neither", "right")))
    above = high is not None and (v > high or (v == high and closed in ("neither", "left")))
    if below or above:
        raise ParameterError(f"{name} == {_shown(v)}, must be in {_interval(low, high, closed)}.")
    return v


def _shown(v: float) -> str:
    """``v`` short where that is exact, else every digit: 1.0000001 refused as "alpha
    == 1, must be in (0, 1]" read as a contradiction."""
    short = f"{v:g}"
    return short if float(short) == v else repr(v)


def check_alpha(alpha: object, name: str = "alpha") -> float:
    """The SHRiNK sample fraction: in (0, 1]."""
    return check_scalar(alpha, name, low=0.0, high=1.0, closed="right")


def check_fraction(value: object, name: str) -> float:
    """A fraction in [0, 1]."""
    return check_scalar(value, name, low=0.0, high=1.0, closed="both")


def check_positive(value: object, name: str) -> float:
    """A strictly positive finite number."""
    return check_scalar(value, name, low=0.0, closed="neither")


def check_rate(value: object, name: str = "rate") -> float:
    """A request rate in requests/s: strictly positive."""
    return check_positive(value, name)


def check_percentile(value: object, name: str = "percentile") -> float:
    """A percentile in (0, 100]."""
    return check_scalar(value, name, low=0.0, high=100.0, closed="right")


def check_int(value: object, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """An integer inside [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name} == {value!r}, must be an integer.")
    check_scalar(value, name, low=low, high=high, closed="both")
    return int(value)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]+)?\s*$")
_UNIT_SECONDS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
# A latency threshold is a few microseconds to seconds: minutes and hours are typos.
THRESHOLD_UNITS = ("us", "ms", "s")


def parse_duration(
    text: str | float | int,
    name: str = "duration",
    *,
    units: tuple[str, ...] | None = None,
    zero_ok: bool = False,
    least: float = 0.0,
    why: str = "a measurement window",
) -> float:
    """Parse ``"5ms"``, ``"0.5 s"``, ``"2m"`` into seconds (> 0): every command's durations.

    ``zero_ok``: ``0s`` is allowed too (a warm-up may be left out). ``least``: the
    shortest a nonzero duration may be (a measurement window: :data:`MIN_WINDOW_S`),
    and ``why``, said in its error.

    A bare number is seconds, unless ``units`` is given: then the text must name
    one of them (thresholds: ``--threshold 5`` is refused, since 5 could mean 5 ms
    as well as 5 s).
    """
    allowed = units or tuple(_UNIT_SECONDS)
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if units is not None:
            raise ParameterError(_unit_message(name, text, units))
        seconds = check_scalar(float(text), name, low=0.0, closed="left" if zero_ok else "neither")
        return _within(seconds, name, text, (least, why))
    m = _DURATION.match(str(text))
    unit = None if m is None or m.group(2) is None else m.group(2).replace("µ", "u")
    if not m or (unit is not None and unit not in allowed):
        example = "500us, 5ms or 2s" if units else "500us, 5ms, 2s or 1m"
        raise ParameterError(
            f"{name} == {text!r}, must be a duration such as {example} "
            f"(units: {', '.join(u for u in allowed if u != 'µs')})."
        )
    if unit is None and units is not None:
        raise ParameterError(_unit_message(name, text, units))
    seconds = float(m.group(1)) * _UNIT_SECONDS[unit or "s"]
    seconds = check_scalar(seconds, name, low=0.0, closed="left" if zero_ok else "neither")
    return _within(seconds, name, text, (least, why))


# A number as an option or a parameter writes it: ASCII digits only, no '_' (float()
# reads "1_0" as 10 and other scripts' digits as ours).
_NUMBER = re.compile(
    r"^\s*[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|infinity|nan)\s*$",
    re.IGNORECASE,
)


def parse_number(text: str, name: str = "value") -> float:
    """``text`` as a float, written as a person writes a number (``1.5``, ``2e3``)."""
    if not _NUMBER.match(str(text)):
        raise ParameterError(f"{name} == {str(text).strip()!r}, must be a number.")
    return float(text)


def _within(seconds: float, name: str, text: object, floor: tuple[float, str]) -> float:
    least, why = floor
    if 0 < seconds < least:
        raise ParameterError(
            f"{name} == {str(text).strip()!r}, must be at least {least * 1e3:g} ms ({why})."
        )
    if seconds > MAX_SECONDS:
        raise ParameterError(
            f"{name} == {str(text).strip()!r}, must be at most {MAX_SECONDS:.0f} s (a century)."
        )
    return seconds


def _unit_message(name: str, text: object, units: tuple[str, ...]) -> str:
    return (
        f"{name} == {str(text).strip()!r} has no unit; write it with one of "
        f"{', '.join(units)} (e.g. {str(text).strip()}ms)."
    )


def parse_threshold(text: str | float | int, name: str = "threshold") -> float:
    """A latency threshold in seconds; the unit is required (us, ms or s)."""
    return parse_duration(text, name, units=THRESHOLD_UNITS)


# How users write a percentile (k6, Locust, wrk2): p95, p99.9, p99.99; "p999" is how
# the files spell p99.9 (two digits of the integer part, then the decimals).
_PERCENTILE = re.compile(r"^p(\d{1,2})(?:\.(\d+))?$|^p(\d{2})(\d+)$", re.ASCII)
STAT_HELP = "mean, or a percentile: p50, p75, p90, p95, p99, p99.9 or any pNN(.N)"


def parse_stat(text: str, name: str = "stat") -> str:
    """A statistic as the files spell it: ``mean``, ``p95``, ``p999`` (for p99.9).

    Any percentile in [1, 100) is accepted, written as users write it (``p95``,
    ``p99.9``, ``median``) or as the files do (``p999``); under 10 it is ``p05``.
    """
    t = str(text).strip().lower()
    if t in ("mean", "avg", "average"):
        return "mean"
    if t == "median":
        return "p50"
    m = _PERCENTILE.match(t)
    if m is None:
        raise ParameterError(f"{name} == {text!r}, must be {STAT_HELP}.")
    whole, decimals = (m.group(1), m.group(2) or "") if m.group(1) else (m.group(3), m.group(4))
    if m.group(4) is not None and decimals.endswith("0"):
        # "p100" is not p10.0 spelled as the files do (they never end in 0): refuse it.
        raise ParameterError(f"{name} == {text!r}, must be {STAT_HELP} (under p100).")
    decimals = decimals.rstrip("0")
    if int(whole) < 1:
        raise ParameterError(f"{name} == {text!r}, must be {STAT_HELP} (at least p1).")
    return f"p{int(whole):02d}{decimals}"


def stat_quantile(stat: str) -> float | None:
    """The quantile (0.95 for ``p95``) of a statistic as the files spell it; None for mean."""
    if not stat.startswith("p") or not stat[1:].isdigit() or len(stat) < 3:
        return None
    digits = stat[1:]
    return round(float(f"{digits[:2]}.{digits[2:] or 0}") / 100.0, 12)


def stat_label(stat: str) -> str:
    """How a statistic is written for people: ``p999`` is ``p99.9``, ``p05`` is ``p5``."""
    q = stat_quantile(stat)
    return stat if q is None else f"p{100 * q:.10g}"


def parse_thresholds(text: str) -> dict[str, float]:
    """Parse ``"mean=5ms,p99.9=500ms"`` into ``{"mean": 0.005, "p999": 0.5}`` (seconds)."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ParameterError(f"thresholds == {text!r}, each item must be STAT=DURATION.")
        stat, value = (s.strip() for s in part.split("=", 1))
        stat = parse_stat(stat, "threshold statistic")
        if stat in out:
            raise ParameterError(
                f"thresholds == {text!r}, name {stat_label(stat)} twice: give each statistic once."
            )
        out[stat] = parse_threshold(value, f"threshold {stat_label(stat)}")
    if not out:
        raise ParameterError(f"thresholds == {text!r}, must name at least one STAT=DURATION.")
    return out
