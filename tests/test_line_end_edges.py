"""Text traces at the line bound and with a long first line (found by bench/bench_fuzz.py
--states probes): a line of exactly --max-line bytes is read whatever its line end, and a
file whose lines end in CR alone is split on CR when its first line is past 64 KiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from shrink.errors import TraceFormatError
from shrink.ingest import read_clf
from shrink.ingest._io import line_batches, split_lines

pytestmark = pytest.mark.compute

PRE = b'1.2.3.4 - - [01/Jul/1995:00:00:01 -0400] "GET /'
POST = b' HTTP/1.0" 200 10'
GOOD = b'1.2.3.4 - - [01/Jul/1995:00:00:02 -0400] "GET /b HTTP/1.0" 200 10'


def _line(size: int) -> bytes:
    return PRE + b"a" * (size - len(PRE) - len(POST)) + POST


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_a_line_of_exactly_the_bound_is_read_whatever_its_line_end(
    tmp_path: Path, end: bytes
) -> None:
    """Before: read with LF; with CR LF (the CR counted), 'line 1: a line longer than
    4,096 bytes (no line break)'."""
    p = tmp_path / "a.log"
    p.write_bytes(_line(4096) + end + GOOD + end)
    lines = [x for b in line_batches(p, max_line=4096) for x in b.lines]
    assert [len(x.rstrip(b"\r")) for x in lines] == [4096, len(GOOD)]


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
def test_a_line_one_past_the_bound_is_refused_naming_it(tmp_path: Path, end: bytes) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(GOOD + end + _line(4097) + end + GOOD + end)
    with pytest.raises(TraceFormatError, match=r"line 2: a line longer than 4,096 bytes"):
        list(line_batches(p, max_line=4096))


def test_a_cr_ended_log_whose_first_line_is_past_64_kib_is_split_on_cr(tmp_path: Path) -> None:
    """Before: 'line 1: a line longer than 1,048,576 bytes (no line break)' for a log of
    2,001 lines of which the first is 100 KB."""
    p = tmp_path / "a.log"
    data = _line(100_000) + b"\r" + (GOOD + b"\r") * 2000
    p.write_bytes(data)
    assert len(read_clf(p)) == 2001
    assert len(split_lines(data)) == 2001


def test_a_crlf_log_whose_first_line_is_past_64_kib_is_split_on_lf(tmp_path: Path) -> None:
    p = tmp_path / "a.log"
    p.write_bytes(_line(100_000) + b"\r\n" + (GOOD + b"\r\n") * 2000)
    lines = [x for b in line_batches(p) for x in b.lines]
    assert len(lines) == 2001 and all(x.endswith(b"\r") for x in lines)
