"""JSON and TOML files as editors and generators leave them: a UTF-8 byte order mark at
the start, and a number longer than Python converts (found by bench/bench_fuzz.py
--states)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shrink import files
from shrink.errors import TraceFormatError

pytestmark = pytest.mark.compute

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    ("name", "data", "read"),
    [
        ("a.json", b'{"a": 1}', files.read_json),
        ("a.toml", b"a = 1\n", files.read_toml),
    ],
)
def test_a_utf8_byte_order_mark_is_read_past(tmp_path: Path, name: str, data: bytes, read) -> None:
    """Before: 'line 1: not JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)' and
    'not TOML: Invalid statement (at line 1, column 1)' for a file that is JSON or TOML."""
    p = tmp_path / name
    p.write_bytes(BOM + data)
    assert read(p) == {"a": 1}
    # two (a tool that adds one to a file that has one): the second was "line 1: not
    # JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)"
    p.write_bytes(BOM + BOM + data)
    assert read(p) == {"a": 1}


def test_a_bad_byte_after_a_byte_order_mark_is_named_by_its_offset_in_the_file(
    tmp_path: Path,
) -> None:
    p = tmp_path / "a.json"
    p.write_bytes(BOM + b'{"a": "\xff"}')
    with pytest.raises(TraceFormatError) as e:
        files.read_json(p)
    assert e.value.offset == 10


@pytest.mark.parametrize(
    ("name", "text", "read"),
    [
        ("a.json", '{\n"a": 1,\n"b": ' + "9" * 4400 + "\n}", files.read_json),
        ("a.toml", "a = 1\n\nb = 1_" + "0" * 4400 + "\n", files.read_toml),
    ],
)
def test_a_number_past_pythons_digit_limit_is_named_by_its_line(
    tmp_path: Path, name: str, text: str, read
) -> None:
    """Before: 'not a JSON file: Exceeds the limit (4300 digits) for integer string
    conversion: value has 4400 digits; use sys.set_int_max_str_digits() to increase the
    limit': no line, and advice for a programmer."""
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceFormatError) as e:
        read(p)
    msg = str(e.value)
    assert "line 3" in msg and "a number of more than 4,300 digits" in msg, msg
    assert "set_int_max_str_digits" not in msg


@pytest.mark.parametrize(
    ("wrap", "hint"),
    [
        (lambda d: __import__("gzip").compress(d), "gzip-compressed: gunzip it first"),
        (lambda d: __import__("bz2").compress(d), "bzip2-compressed"),
        (lambda d: __import__("lzma").compress(d), "xz-compressed"),
        (lambda d: b"\x28\xb5\x2f\xfd" + d, "zstd-compressed"),
        (lambda d: d.decode().encode("utf-16"), "UTF-16 text: convert it to UTF-8 first"),
    ],
)
def test_a_compressed_or_utf16_json_file_is_named_as_such(tmp_path: Path, wrap, hint: str) -> None:
    """Before: 'byte offset 1: not UTF-8 text, so not a JSON file', which reads as damage."""
    p = tmp_path / "a.json"
    p.write_bytes(wrap(b'{"a": 1}'))
    with pytest.raises(TraceFormatError, match="not UTF-8 text") as e:
        files.read_json(p)
    assert hint in str(e.value)


@pytest.mark.parametrize("marks", [1, 2, 3])
def test_every_byte_order_mark_at_a_logs_start_is_read_past(tmp_path: Path, marks: int) -> None:
    """As the JSON and TOML readers do: a log with two marks had its second read into its
    first line, refused as a path '\\ufeff/a' that does not start with '/'."""
    from shrink.ingest import detect_format, read_trace

    p = tmp_path / "w.log"
    p.write_bytes(BOM * marks + b"/a think=1\n/b think=1\n")
    assert detect_format(p) == "wsesslog"
    assert read_trace(p, format="wsesslog").table.column("path").to_pylist() == ["/a", "/b"]


_CLF = '1.2.3.4 - - [01/Aug/1995:00:00:01 -0400] "GET /a.html HTTP/1.0" 200 10\n'
_READERS = [
    ("a.log", _CLF * 3, "auto"),
    ("a.log", _CLF * 3, "clf"),
    ("a.log", "#shrink-specweb\n" + _CLF, "specweb"),
    ("a.log", "#shrink-sessions\n/a think=1\n/b\n", "wsesslog"),
    ("a.log", _CLF, "pcap"),
    ("a.json", '{"a": 1}\n', "json"),
    ("a.toml", "a = 1\n", "toml"),
]


@pytest.mark.parametrize("order", ["LE", "BE"])
@pytest.mark.parametrize(("name", "text", "fmt"), _READERS)
def test_utf16_text_without_a_byte_order_mark_is_refused_by_name(
    tmp_path: Path, name: str, text: str, fmt: str, order: str
) -> None:
    """Every other byte NUL: valid UTF-8, so it was read as text. Before: a CLF or
    specweb log 'no request read: every data line was skipped as unreadable', a session
    log 'line 1: the path holds a NUL byte', detection 'cannot tell the format of this
    text (first data line 'i\\x00n\\x002...')', JSON 'line 1: not JSON: Expecting value'."""
    from shrink.ingest import read_trace

    p = tmp_path / name
    p.write_bytes(text.encode(f"utf-16-{order.lower()}"))
    with pytest.raises(TraceFormatError) as err:
        if fmt == "json":
            files.read_json(p)
        elif fmt == "toml":
            files.read_toml(p)
        else:
            read_trace(p, format=fmt)
    msg = str(err.value)
    assert str(p) in msg
    assert f"UTF-16 text without a byte-order mark ({order}" in msg
    assert f"iconv -f UTF-16{order} -t UTF-8" in msg


def test_text_with_a_few_nuls_or_in_a_script_without_them_is_not_taken_for_utf16() -> None:
    """The judgement needs one byte of each pair NUL nearly always, the other nearly never."""
    assert files.utf16_without_bom("日本語のテキスト".encode("utf-16-le")) is None
    assert files.utf16_without_bom(b"a\x00" + b"bc" * 20) is None
    assert files.utf16_without_bom(b"\x00" * 40) is None  # all NUL: not text of either order
    assert files.utf16_without_bom(b"a") is None
    assert files.utf16_without_bom("éa€b\n".encode("utf-16-be")) is None  # 1 NUL pair in 5
    assert files.utf16_without_bom(("é" * 9 + "€").encode("utf-16-be")) is not None


def test_reading_a_small_json_file_makes_no_buffer_of_the_size_bound(tmp_path: Path) -> None:
    """``f.read(MAX_BYTES + 1)`` made a 16 MiB buffer for every JSON or TOML file read
    (72 KB or not): tracemalloc's peak was 16 MiB a LoadCurve read, and glibc, taking
    such blocks from its heap, held the fuzz run's RSS up. A pipe and a file at the
    bound are still read to it, and one byte past is refused."""
    import os
    import subprocess
    import sys
    import threading

    p = tmp_path / "c.json"
    p.write_text('{"a": [' + ", ".join(["1.5"] * 15000) + "]}")  # 75 KB
    # In a process of its own: tracemalloc counts every thread's blocks, and a thread
    # left by an earlier test in the same worker made the peak another's.
    probe = (
        "import sys, tracemalloc; from shrink import files; tracemalloc.start(); "
        "files.read_json(sys.argv[1]); print(tracemalloc.get_traced_memory()[1])"
    )
    run = subprocess.run([sys.executable, "-c", probe, str(p)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    peak = int(run.stdout)
    assert peak < 4 * p.stat().st_size + (1 << 20), peak
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    # Its writer open before the read (O_RDWR does not wait for a reader): a FIFO with
    # no writer yet reads as empty, by design, and a thread that opened it only later
    # made the test fail now and then.
    wfd = os.open(fifo, os.O_RDWR)

    def write() -> None:
        with os.fdopen(wfd, "wb") as w:
            w.write(b'{"a": "' + b"x" * 200_000 + b'"}')

    writer = threading.Thread(target=write)
    writer.start()
    assert len(files.read_json(fifo)["a"]) == 200_000
    writer.join()
    big = tmp_path / "big.json"
    big.write_bytes(b'"' + b"x" * (files.MAX_BYTES - 2) + b'"')
    assert len(files.read_json(big)) == files.MAX_BYTES - 2
    big.write_bytes(b'"' + b"x" * (files.MAX_BYTES - 1) + b'"')
    with pytest.raises(TraceFormatError, match="larger than 16 MiB"):
        files.read_json(big)


@pytest.mark.parametrize("bom", [False, True])
def test_a_gzipped_utf16_log_is_told_to_go_through_zcat(tmp_path: Path, bom: bool) -> None:
    """A gzipped UTF-16 log is gunzipped to be read, so it was named as UTF-16 with
    "(iconv -f UTF-16LE -t UTF-8)", which run on the file itself converts gzip bytes."""
    import gzip

    from shrink.ingest import read_trace

    text = '1.2.3.4 - - [01/Jul/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 10\n' * 5
    p = tmp_path / "u.log.gz"
    p.write_bytes(gzip.compress(text.encode("utf-16" if bom else "utf-16-le")))
    for fmt in ("auto", "clf", "pcap"):
        with pytest.raises(TraceFormatError) as err:
            read_trace(p, format=fmt)
        msg = str(err.value)
        assert "gzip-compressed UTF-16 text" in msg, msg
        assert f"(zcat FILE | iconv -f UTF-16{'' if bom else 'LE'} -t UTF-8 > OUT)" in msg, msg
    plain = tmp_path / "u.log"
    plain.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(TraceFormatError, match=r"first \(iconv -f UTF-16LE -t UTF-8\)$"):
        read_trace(plain)


@pytest.mark.parametrize(
    ("codec", "said"),
    [
        ("utf-32-le", "UTF-32 text without a byte-order mark (LE): convert it to UTF-8 first"),
        ("utf-32-be", "UTF-32 text without a byte-order mark (BE): convert it to UTF-8 first"),
        ("utf-32", "UTF-32 text (LE, with a byte-order mark): convert it to UTF-8 first"),
        ("be-bom", "UTF-32 text (BE, with a byte-order mark): convert it to UTF-8 first"),
    ],
)
@pytest.mark.parametrize(("name", "text", "fmt"), _READERS)
def test_utf32_text_is_refused_by_name(
    tmp_path: Path, name: str, text: str, fmt: str, codec: str, said: str
) -> None:
    """Named as UTF-16 text without a mark is. Before: without a mark (valid UTF-8, three
    NULs a letter) read as text with NULs ('every data line was skipped', 'the path holds
    a NUL byte', JSON 'Expecting value'); with one (FF FE 00 00) called UTF-16 text."""
    from shrink.ingest import read_trace

    data = (
        b"\x00\x00\xfe\xff" + text.encode("utf-32-be") if codec == "be-bom" else text.encode(codec)
    )
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as err:
        if fmt == "json":
            files.read_json(p)
        elif fmt == "toml":
            files.read_toml(p)
        else:
            read_trace(p, format=fmt)
    msg = str(err.value)
    assert str(p) in msg and said in msg, msg
    assert "UTF-16" not in msg and "\n" not in msg, msg
    iconv = "UTF-32" + ("" if "with a byte-order mark" in said else said.split("(")[1][:2])
    assert f"(iconv -f {iconv} -t UTF-8)" in msg, msg


def test_a_gzipped_utf32_log_is_told_to_go_through_zcat(tmp_path: Path) -> None:
    import gzip

    from shrink.ingest import read_trace

    p = tmp_path / "u.log.gz"
    p.write_bytes(gzip.compress((_CLF * 3).encode("utf-32-le")))
    with pytest.raises(TraceFormatError) as err:
        read_trace(p, format="auto")
    msg = str(err.value)
    assert "gzip-compressed UTF-32 text without a byte-order mark (LE)" in msg, msg
    assert "(zcat FILE | iconv -f UTF-32LE -t UTF-8 > OUT)" in msg, msg


def test_text_in_utf8_or_utf16_is_not_taken_for_utf32() -> None:
    assert files.utf32("日本語のテキスト".encode("utf-32-le")) is not None  # no NUL rule on byte 1
    assert files.utf32("ab\ncd".encode("utf-16-le")) is None
    assert files.utf32("ab\ncd".encode("utf-16-be")) is None
    assert files.utf32(b"\x00" * 40) is None
    assert files.utf32(b"abcdefgh") is None
    assert files.utf32(b"a\x00\x00\x00") is None  # one letter: too little to judge
    assert files.utf32("\U0001f600".encode("utf-32-le") * 9 + b"a\x00\x00\x00") is None


@pytest.mark.parametrize("order", ["<", ">"])
def test_a_binary_of_small_int32s_is_not_called_utf32_text(tmp_path: Path, order: str) -> None:
    """Judged by its bytes alone (each word's top byte NUL, the next nearly always), a
    file of small int32s was "UTF-32 text without a byte-order mark (LE): convert it to
    UTF-8 first": it decodes, but does not read as text."""
    import numpy as np

    from shrink.ingest import read_trace

    data = np.arange(1, 2000, dtype=f"{order}i4").tobytes()
    said = files.utf32(data)
    assert said is not None and said.startswith("binary data, not text"), said
    p = tmp_path / "ints.log"
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as err:
        read_trace(p, format="auto")
    assert "binary data, not text" in str(err.value) and "UTF-32 text" not in str(err.value)
    # text of the same length, with its line breaks, is still UTF-32 text
    text = ("10.0.0.1 - - [01/Jan/2026:00:00:00 +0000] " + '"GET / HTTP/1.1" 200 5\n') * 120
    codec = "utf-32-le" if order == "<" else "utf-32-be"
    assert (files.utf32(text.encode(codec)) or "").startswith("UTF-32 text without")
    # without one in its first 1,024 characters it may be either
    said = files.utf32(text.replace("\n", " ").encode(codec)) or ""
    assert said.startswith("binary data, or UTF-32 text without a byte-order mark"), said


@pytest.mark.parametrize("codec", ["utf-32-le", "utf-32-be"])
def test_a_long_utf32_json_line_is_not_called_binary_data(tmp_path: Path, codec: str) -> None:
    """Round 46d's rule (a line break in the first 1,024 characters) called a session
    log's first JSON line of 1,422 characters "binary data, not text"."""
    from shrink.ingest import read_trace

    line = json.dumps({"path": "/a" * 700, "ts": 1}) + "\n"
    said = files.utf32(line.encode(codec)) or ""
    assert "not text" not in said and "iconv -f UTF-32" in said, said
    p = tmp_path / "s.jsonl"
    p.write_bytes(line.encode(codec) * 3)
    with pytest.raises(TraceFormatError) as err:
        read_trace(p, format="auto")
    assert "not text" not in str(err.value), str(err.value)
