"""More hostile inputs: a trace's metadata of the wrong type, truncated gzip text and
captures, odd encodings. Each is one line naming the file, never a traceback or exit 70."""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import samplers
from shrink.errors import ParameterError, TraceFormatError
from shrink.ingest import detect_format, read_trace
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _trace_with_meta(tmp_path: Path, **meta: object) -> Path:
    table = Trace.from_columns({"session": np.arange(4), "t": np.arange(4.0), "path": ["/a"] * 4})
    path = tmp_path / "t.parquet"
    pq.write_table(table.table.replace_schema_metadata({b"shrink": json.dumps(meta)}), path)
    return path


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        ({"alpha": [1]}, "alpha: must be a number in (0, 1]"),
        ({"alpha": "x"}, "alpha: must be a number in (0, 1] (got 'x')"),
        ({"alpha_total": 0}, "alpha_total: must be a number in (0, 1] (got 0)"),
        ({"users": "many"}, "users: must be a number in [0, 1e+12]"),
        ({"loop_span": -1}, "loop_span: must be a number in (0, 1e+15]"),
        ({"t_start": "x"}, "t_start: must be a number"),
        ({"mode": 5}, "mode: Input should be 'session' or 'open'"),
        ({"lineage": 5, "sampler": "session"}, "lineage: Input should be a valid list"),
        ({"warnings": 5}, "warnings: Input should be a valid list"),
    ],
)
def test_meta_that_later_stages_compute_with_is_typed(
    tmp_path: Path, meta: dict[str, object], said: str
) -> None:
    # float(meta["alpha"]) in the sampler and the sweep stopped them with exit 70.
    path = _trace_with_meta(tmp_path, **meta)
    with pytest.raises(TraceFormatError) as err:
        samplers.sample(Trace.read_parquet(path), 0.5)
    assert str(err.value).startswith(f"{path}: {said}")


def test_meta_numbers_keep_their_type(tmp_path: Path) -> None:
    # An int read back as a float would change the bytes of a trace written again.
    path = _trace_with_meta(tmp_path, alpha=1, users=400, loop_span=3, t_start=0, mode="open")
    meta = Trace.read_parquet(path).meta
    assert meta == {"alpha": 1, "users": 400, "loop_span": 3, "t_start": 0, "mode": "open"}
    assert all(type(meta[k]) is int for k in ("alpha", "users", "loop_span", "t_start"))


def test_a_truncated_gzip_capture_is_read_up_to_the_cut(tmp_path: Path) -> None:
    # Cut before 64 KiB inflated, the format check got nothing and said "the file is empty".
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    plain = write_capture(tmp_path / "c.pcap", mixed())
    packed = gzip.compress(plain.read_bytes())
    cut = tmp_path / "c.pcap.gz"
    cut.write_bytes(packed[: len(packed) * 2 // 3])
    assert detect_format(cut) == "pcap"
    trace = read_trace(cut)
    assert len(trace) > 0 and "record cut short" in trace.meta["damage"]
    with pytest.raises(TraceFormatError, match=r"c\.pcap\.gz, byte offset \d+: gzip stream"):
        read_trace(cut, strict=True)


# Loads a capture as the fast engine does, cuts the file, then reads the buffer's last
# byte (the record walk and the HTTP parser index it later, the same way).
_CUT_WHILE_HELD = r"""
import os, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from helpers.captures import mixed
from helpers.pcap_synth import write_capture
from shrink.ingest.capture import pcap_files
pcap_files.MAX_HELD = int(sys.argv[3])
path = write_capture(Path(sys.argv[2]), mixed() * 40)
last = path.read_bytes()[-1]
buf, n, _ = pcap_files.load_buffer(path, strict=False)
os.truncate(path, 100)
assert int(buf[n - 1]) == last
"""


@pytest.mark.parametrize("held", [1 << 30, 100], ids=["read", "past MAX_HELD"])
def test_a_capture_cut_after_it_was_loaded_does_not_kill_the_reader(
    tmp_path: Path, held: int
) -> None:
    # The file was mapped: cut (a capture rotated) while it was read, the pages past its
    # new end faulted, and the kernel killed shrink with SIGBUS, naming nothing. Past
    # MAX_HELD (made small here) a copy of shrink's own is mapped, which no one cuts.
    root = str(Path(__file__).resolve().parent.parent)
    run = [sys.executable, "-c", _CUT_WHILE_HELD, root, str(tmp_path / "c.pcap"), str(held)]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def test_a_capture_past_the_held_size_cut_while_it_is_copied_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of a capture past MAX_HELD stops short where another process cut the
    file (after the copy's first chunk here): the same error as a read cut short."""
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    from shrink.ingest.capture import pcap_files

    path = write_capture(tmp_path / "c.pcap", mixed())
    size = path.stat().st_size
    monkeypatch.setattr(pcap_files, "MAX_HELD", 100)
    monkeypatch.setattr(pcap_files, "_COPY_CHUNK", 4096)
    real = os.copy_file_range

    def cut_after_the_first_chunk(src: int, dst: int, count: int, *offsets: int) -> int:
        n = real(src, dst, count, *offsets)
        os.truncate(path, 4096)
        return n

    monkeypatch.setattr(pcap_files.os, "copy_file_range", cut_after_the_first_chunk)
    shown = rf"c\.pcap: the file was cut while it was read \(4,096 of its {size:,} bytes\)"
    with pytest.raises(TraceFormatError, match=shown):
        read_trace(path)


def test_a_capture_cut_while_it_is_read_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    from shrink.ingest.capture import pcap_files

    path = write_capture(tmp_path / "c.pcap", mixed())
    real = os.fstat
    size = path.stat().st_size

    def opened_larger(fd: int) -> os.stat_result:
        # The size when opened, before the cut: the read then ends short of it.
        st = list(real(fd))
        st[6] += 4096  # st_size
        return os.stat_result(st)

    monkeypatch.setattr(pcap_files.os, "fstat", opened_larger)
    for strict in (False, True):
        shown = rf"c\.pcap: the file was cut while it was read \({size:,} of its {size + 4096:,}"
        with pytest.raises(TraceFormatError, match=shown):
            read_trace(path, strict=strict)


def test_a_capture_past_the_held_size_is_mapped_and_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    from shrink.ingest.capture import pcap_files

    path = write_capture(tmp_path / "c.pcap", mixed())
    held = read_trace(path)
    monkeypatch.setattr(pcap_files, "MAX_HELD", 100)
    monkeypatch.setattr(pcap_files, "_COPY_CHUNK", 4096)  # the copy in many chunks
    buf, n, _ = pcap_files.load_buffer(path, strict=True)
    assert isinstance(buf.base.obj, pcap_files.mmap.mmap) and n == path.stat().st_size
    assert bytes(buf) == path.read_bytes()
    mapped = read_trace(path)
    assert len(held) > 0 and mapped.same_rows(held)

    def no_kernel_copy(*args: int) -> int:
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(pcap_files.os, "copy_file_range", no_kernel_copy)
    assert read_trace(path).same_rows(held)


def test_no_room_for_the_copy_of_a_large_capture_is_one_line_naming_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    from shrink.ingest.capture import pcap_files

    path = write_capture(tmp_path / "c.pcap", mixed())
    monkeypatch.setattr(pcap_files, "MAX_HELD", 100)

    def full(*args: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pcap_files.os, "copy_file_range", full)
    with pytest.raises(TraceFormatError, match=r"c\.pcap: a capture over 0 MiB .* no copy") as e:
        read_trace(path)
    assert str(tmp_path) in str(e.value) and "No space left on device" in str(e.value)


@pytest.mark.parametrize(
    "data",
    [b"\x1f\x8b", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", b"\x1f\x8bnot deflate at all"],
)
def test_a_gzip_that_inflates_to_nothing_is_damaged_not_empty(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "log.gz"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=r"log\.gz: damaged gzip data \("):
        detect_format(path)


def _text_lines(fmt: str, n: int) -> list[bytes]:
    """``n`` lines of a text trace of format ``fmt``, their paths random (so that the gzip
    of many is large: past 64 KiB, the bytes read to tell the format, and past 1 MiB
    inflated, a batch of lines)."""
    rng = np.random.default_rng(0)
    words = [f"/{w:016x}" for w in rng.integers(0, 2**62, n).tolist()]
    if fmt == "clf":
        return [f'h - - [01/Aug/1995:00:00:01 -0400] "GET {w} HTTP/1.0" 200 1\n'.encode()
                for w in words]  # fmt: skip
    if fmt == "specweb":
        return [f"{i * 0.01:.2f}\tu{i % 7}\t{w}\n".encode() for i, w in enumerate(words)]
    return [f"{w} think=1\n".encode() for w in words]


@pytest.mark.parametrize("fmt", ["clf", "specweb", "wsesslog"])
@pytest.mark.parametrize("lines", [50, 60_000])
def test_a_truncated_gzip_log_is_read_up_to_the_cut(tmp_path: Path, fmt: str, lines: int) -> None:
    # A cut gzip log was refused whole, leniently too: "damaged gzip data".
    packed = gzip.compress(b"".join(_text_lines(fmt, lines)))
    path = tmp_path / f"{fmt}.log.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    whole = _inflated(path.read_bytes()).count(b"\n")  # the lines zcat writes whole
    trace = read_trace(path, format=fmt)
    assert len(trace) == whole > 0
    assert trace.meta["damage"].startswith(f"{path}: damaged gzip data (")
    assert f"read the {whole:,} whole lines before it" in trace.meta["damage"]
    assert f"not the line it cut (line {whole + 1})" in trace.meta["damage"]
    shown = rf"{fmt}\.log\.gz, line {whole + 1}: damaged gzip data \(.*without --strict"
    with pytest.raises(TraceFormatError, match=shown):
        read_trace(path, format=fmt, strict=True)


@pytest.mark.parametrize("fmt", ["clf", "specweb", "wsesslog"])
def test_a_gzip_log_followed_by_bytes_that_are_not_gzip_says_so(tmp_path: Path, fmt: str) -> None:
    """Its gzip data whole, then other bytes: "damaged gzip data (Not a gzipped file
    (b'ga')): cut short or corrupt ... not the line it cut", the last line (not ended by
    a line end) dropped as cut."""
    text = b"".join(_text_lines(fmt, 50))
    path = tmp_path / f"{fmt}.log.gz"
    path.write_bytes(gzip.compress(text[:-1]) + b"garbage after it")
    trace = read_trace(path, format=fmt)
    assert len(trace) == 50
    said = f"{path}: its gzip data is followed by bytes that are not gzip (Not a gzipped file"
    assert trace.meta["damage"].startswith(said), trace.meta["damage"]
    assert trace.meta["damage"].endswith("read the 50 whole lines before it")
    shown = rf"{fmt}\.log\.gz, line 51: its gzip data is followed by bytes that are not gzip"
    with pytest.raises(TraceFormatError, match=shown):
        read_trace(path, format=fmt, strict=True)


def test_a_gzip_log_whose_next_member_is_cut_at_its_first_byte_drops_the_cut_line(
    tmp_path: Path,
) -> None:
    """Lines go on across gzip members (bgzip's, a writer's flushes): a log cut one byte
    into its next member was said to be followed by bytes that are not gzip, and the line
    the whole member ended in, cut, read as a request (a wrong path), where a cut two
    bytes in dropped it as cut."""
    text = b"".join(_text_lines("wsesslog", 20)) + b"/0123456789abcdef think=1\n"
    path = tmp_path / "w.log.gz"
    for tail in (b"\x1f", b"\x1f\x8b"):
        path.write_bytes(gzip.compress(text[:-12]) + tail)  # its member ends mid-line
        trace = read_trace(path, format="wsesslog")
        assert len(trace) == 20, tail
        assert trace.meta["damage"].endswith("not the line it cut (line 21)"), tail


def _inflated(cut: bytes) -> bytes:
    """What inflates of the gzip data ``cut`` (cut short), as zcat writes it."""
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)


def test_a_gzip_log_cut_before_its_first_line_ends_is_refused(tmp_path: Path) -> None:
    packed = gzip.compress(b"".join(_text_lines("clf", 3)))
    path = tmp_path / "access.log.gz"
    path.write_bytes(packed[:30])
    with pytest.raises(TraceFormatError, match=r"log\.gz, line 1: damaged gzip .* first whole"):
        read_trace(path, format="clf")


def test_ingest_warns_of_a_truncated_gzip_log_and_strict_refuses_it(tmp_path: Path) -> None:
    packed = gzip.compress(b"".join(_text_lines("clf", 50)))
    path = tmp_path / "access.log.gz"
    path.write_bytes(packed[:-10])
    out = tmp_path / "t.parquet"
    run = [sys.executable, "-m", "shrink", "ingest", str(path), "-o", str(out)]
    lenient = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert lenient.returncode == 0, lenient.stderr
    assert lenient.stderr.startswith(f"warning: {path}: damaged gzip data"), lenient.stderr
    whole = _inflated(path.read_bytes()).count(b"\n")
    assert len(Trace.read_parquet(out)) == whole > 0
    strict = subprocess.run([*run, "--strict"], capture_output=True, text=True, timeout=60)
    assert strict.returncode == 1
    said = f"error: {path}, line {whole + 1}: damaged gzip data"
    assert strict.stderr.startswith(said), strict.stderr


def test_a_first_line_longer_than_64_kib_but_within_the_bound_is_told(tmp_path: Path) -> None:
    # A 200 KiB URL (readers take lines up to 1 MiB) was "no line break in the first 64 KiB".
    url = "/" + "a" * (200 << 10)
    line = f'h - - [01/Aug/1995:00:00:01 -0400] "GET {url} HTTP/1.0" 200 1\n'
    path = tmp_path / "long.log"
    path.write_text(line * 3)
    assert detect_format(path) == "clf"
    assert read_trace(path).column("path").tolist() == [url] * 3
    with pytest.raises(TraceFormatError, match=r"long\.log, line 1: a line longer than 100,000"):
        read_trace(path, max_line=100_000)


def test_bytes_without_a_line_break_past_the_bound_are_no_text_trace(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"x" * (300 << 10))
    with pytest.raises(TraceFormatError, match=r"blob\.bin, line 1: a line longer than 200,000"):
        detect_format(path, max_line=200_000)
    # A bound far past the file is not read (allocated) at once: it was a MemoryError.
    with pytest.raises(TraceFormatError, match=r"blob\.bin: cannot tell the format of this text"):
        detect_format(path, max_line=10**15)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("/a think=1e308\n/b\n", r"s\.txt, line 1: think=1e308 is past a century"),
        ("/a think=3e9\n/b think=3e9\n/c\n", r"s\.txt, line 3: this burst starts 6e\+09 s into"),
    ],
)
def test_a_session_log_past_a_century_names_the_line(tmp_path: Path, text: str, said: str) -> None:
    # It was refused by a row of the trace it made ("row 1: t == 1e+308"), not by its line.
    path = tmp_path / "s.txt"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=said):
        read_trace(path, format="wsesslog")


def test_a_response_time_past_a_century_is_a_bad_line(tmp_path: Path) -> None:
    # A finite rt of 1e308 s was read, then the whole file refused by a row of the trace,
    # even in lenient mode, which skips bad lines.
    path = tmp_path / "s.tsv"
    path.write_text("# fields: time session url rt\n1\tu\t/a\t0.1\n2\tu\t/b\t1e308\n")
    trace = read_trace(path)
    assert (len(trace), trace.meta["skipped_lines"]) == (1, [3])
    with pytest.raises(TraceFormatError, match=r"s\.tsv, line 3: rt must be seconds in \[0, "):
        read_trace(path, strict=True)


BOM = b"\xef\xbb\xbf"


def test_a_utf8_byte_order_mark_is_not_part_of_line_1(tmp_path: Path) -> None:
    # Kept, it made '#shrink-sessions v1' a data line ("'# fields:' must come before the
    # first data line") and went into the first URL of a wsesslog and the host of a log.
    specweb = tmp_path / "s.tsv"
    specweb.write_bytes(BOM + b"#shrink-sessions v1\n# fields: url session time\n/a\tu\t1\n")
    assert read_trace(specweb).column("path").tolist() == ["/a"]
    wsesslog = tmp_path / "w.txt"
    wsesslog.write_bytes(BOM + b"/index.html think=1\n/b\n")
    assert read_trace(wsesslog).column("path").tolist() == ["/index.html", "/b"]
    clf = tmp_path / "a.log"
    clf.write_bytes(BOM + b'h - - [01/Aug/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 1\n')
    assert read_trace(clf).column("client").tolist() == ["h"]


@pytest.mark.parametrize(
    ("head", "said"),
    [
        ("\ufeff/a\n".encode("utf-16-le"), "UTF-16 text: convert it to UTF-8 first"),
        (b"\xfd7zXZ\x00\x00\x04\xe6\xd6\xb4F", "xz-compressed: decompress it first"),
        (b"BZh91AY&SY\x03\x94\xcf<", "bzip2-compressed: decompress it first"),
        (b"\x28\xb5\x2f\xfd\x64\x46", "zstd-compressed: decompress it first"),
        (b"PK\x03\x04\x14\x00", "a zip archive: extract the trace from it first"),
    ],
)
@pytest.mark.parametrize("fmt", ["auto", "clf", "wsesslog"])
def test_text_that_needs_converting_says_how(
    tmp_path: Path, head: bytes, said: str, fmt: str
) -> None:
    # Read as text it was "cannot tell the format" quoting binary, or every line skipped.
    path = tmp_path / "trace.log"
    path.write_bytes(head + b"\n" * 3)
    with pytest.raises(TraceFormatError, match=rf"^{path}: {said}"):
        read_trace(path, format=fmt)


def test_a_trace_sorted_by_time_is_read_grouped_by_session(tmp_path: Path) -> None:
    # Another tool's file, rows in time order: the schedule started a session at each of
    # its runs of rows, so it was replayed as many one-burst sessions, without a word.
    from shrink.schedule import build_schedule

    grouped = Trace.from_columns(
        {
            "session": [0, 0, 0, 1, 1, 2],
            "burst": [0, 0, 1, 0, 1, 0],
            "t": [0.0, 0.0, 5.0, 1.0, 3.0, 2.0],
            "think": [4.0, 4.0, 0.0, 1.0, 0.0, 0.0],
            "path": ["/a", "/a.gif", "/b", "/c", "/d", "/e"],
        }
    )
    by_time = grouped.take(np.argsort(grouped.column("t"), kind="stable"))
    path = tmp_path / "by_time.parquet"
    pq.write_table(by_time.table, path)
    read = Trace.read_parquet(path)
    assert read.same_rows(grouped)
    assert len(build_schedule(read, 1.0, 10.0).plans) == 3


def test_a_grouped_trace_is_read_in_its_own_order(tmp_path: Path) -> None:
    trace = Trace.from_columns(
        {"session": [7, 7, 2, 9, 9], "burst": [0, 1, 0, 0, 0], "t": [0.0] * 5, "path": ["/a"] * 5}
    )
    path = tmp_path / "t.parquet"
    pq.write_table(trace.table, path)
    assert Trace.read_parquet(path).column("session").tolist() == [7, 7, 2, 9, 9]


def test_a_column_named_twice_is_refused_by_its_name(tmp_path: Path) -> None:
    # pyarrow's message quoted the schema: "Multiple matches for FieldRef.Name(path) in ...".
    table = Trace.from_columns({"session": [0], "t": [0.0], "path": ["/a"]}).table
    path = tmp_path / "t.parquet"
    pq.write_table(table.append_column("path", table.column("path")), path)
    with pytest.raises(TraceFormatError) as err:
        Trace.read_parquet(path)
    assert str(err.value) == (
        f"{path}: column(s) 'path' appear more than once; a trace names each column once"
    )


@pytest.mark.parametrize("option", ["session_rate", "max_line"])
def test_an_option_a_capture_does_not_take_is_named(tmp_path: Path, option: str) -> None:
    # read_capture(**opts) raised a TypeError: `shrink ingest x.pcap --max-line 100`, exit 70.
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    path = write_capture(tmp_path / "c.pcap", mixed())
    with pytest.raises(ParameterError, match=rf"^{option} == 100, does not apply to the pcap"):
        read_trace(path, **{option: 100})


def test_the_cli_names_an_option_the_format_does_not_take(tmp_path: Path) -> None:
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    path = write_capture(tmp_path / "c.pcap", mixed())
    out = tmp_path / "t.parquet"
    r = subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(path), "-o", str(out), "--max-line", "9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    said = "error: --max-line: max_line == 9, does not apply to the pcap format"
    assert r.stderr.startswith(said), r.stderr


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"h - - [01/Aug/1995:00:00:01 -0400] ...\n", "not a Parquet trace (it does not start"),
        (b"", "the file is empty: not a Parquet trace"),
        # mtime 0: the same bytes (and test id) in every process, at any time
        (gzip.compress(b"PAR1 and the rest", mtime=0), "gzip-compressed: gunzip it first"),
    ],
)
def test_a_log_given_as_a_trace_says_what_reads_it(tmp_path: Path, data: bytes, said: str) -> None:
    # pyarrow's "Parquet magic bytes not found in footer. Either the file is corrupted ..."
    path = tmp_path / "access.log"
    path.write_bytes(data)
    with pytest.raises(TraceFormatError, match=rf"access\.log: {re.escape(said)}"):
        Trace.read_parquet(path)


def test_a_body_continued_over_many_lines_is_bounded(tmp_path: Path) -> None:
    # Each line is short, but the body ran on for the whole file, held a pointer per
    # character (20 MB of it took 270 MB): it is bounded as a line is.
    path = tmp_path / "body.txt"
    path.write_text("/a contents='" + ("b" * 99 + "\\\n") * 30 + "end'\n")
    with pytest.raises(TraceFormatError, match=r"body\.txt, line 1: contents= body longer than"):
        read_trace(path, max_line=1000)
    assert len(read_trace(path, max_line=4000).column("body")[0]) == 30 * 100 + 3


def test_obsolete_pcapng_packet_blocks_are_read(tmp_path: Path) -> None:
    # Older writers' packet blocks (type 2) were skipped: no request, "skipped 0 packets".
    from helpers.captures import mixed
    from helpers.pcap_synth import write_capture

    data = bytearray(write_capture(tmp_path / "new.pcapng", mixed(), fmt="pcapng").read_bytes())
    off = 0
    while off < len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        if btype == 6:
            ifid = struct.unpack_from("<I", data, off + 8)[0]
            struct.pack_into("<IIHH", data, off, 2, blen, ifid, 0)
        off += blen
    old = tmp_path / "old.pcapng"
    old.write_bytes(bytes(data))
    want = read_trace(tmp_path / "new.pcapng")
    assert len(want) > 0
    assert read_trace(old).same_rows(want)


def test_an_output_that_is_the_input_is_refused(tmp_path: Path) -> None:
    # `shrink ingest x.log -o x.log` replaced the only copy of the log with its Parquet.
    log = tmp_path / "x.log"
    text = 'h - - [01/Aug/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 1\n'
    log.write_text(text)
    (tmp_path / "link.log").symlink_to(log)
    for out in (log, tmp_path / "link.log"):
        r = subprocess.run(
            [sys.executable, "-m", "shrink", "ingest", str(log), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip() == (
            f"error: --out: output {out} is the input {log}, which writing it would destroy; "
            "name another file"
        )
    assert log.read_text() == text


def _ingest(source: Path, out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shrink", "ingest", str(source), "-o", str(out), *options],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_file_whose_every_line_is_skipped_writes_no_trace(tmp_path: Path) -> None:
    # An empty trace was written with exit 0, and every later step refused it.
    log = tmp_path / "x.log"
    log.write_text("not a log line\nnor this\n")
    out = tmp_path / "t.parquet"
    r = _ingest(log, out, "--format", "clf")
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == (
        f"error: {log}: no request read: every data line was skipped as unreadable "
        "(2 lines: 1, 2); --strict names what is wrong with the first"
    )
    assert not out.exists()
    # A session log of comments only is a valid empty one, as httperf reads it.
    log.write_text("# nothing yet\n")
    assert _ingest(log, out).returncode == 0 and out.exists()


@pytest.mark.parametrize("command", [["ingest", "LOG"], ["sample", "TRACE", "--alpha", "0.5"]])
def test_an_output_of_dash_is_refused_not_written_as_a_file(tmp_path: Path, monkeypatch, command):
    # `shrink ingest x.log -o -` wrote a file named "-" where stdout was meant
    from typer.testing import CliRunner

    from shrink.cli import app

    log = tmp_path / "x.log"
    log.write_text('h - - [01/Aug/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 1\n')
    trace = tmp_path / "t.parquet"
    assert CliRunner().invoke(app, ["ingest", str(log), "-o", str(trace)]).exit_code == 0
    monkeypatch.chdir(tmp_path)
    args = [{"LOG": str(log), "TRACE": str(trace)}.get(a, a) for a in command]
    r = CliRunner().invoke(app, [*args, "-o", "-"])
    assert r.exit_code == 2, r.output
    assert "'-': shrink writes files, not standard output" in r.output
    assert not (tmp_path / "-").exists()
