"""The text readers stream: a file is read a batch of lines at a time.

Two properties: where the batches are cut does not change the trace read (nor the
errors, nor the lines they name), and the memory a read takes grows with the
requests it keeps, not with the text of the file (a log's referers, blanks and
comments are read and dropped batch by batch).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

import shrink.ingest._io as io_mod
from shrink.errors import TraceFormatError
from shrink.ingest import detect_format, read_clf, read_specweb, read_wsesslog

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"

CLF = (
    b'199.72.81.55 - - [01/Jul/1995:00:00:01 -0400] "GET /history/apollo/ HTTP/1.0" 200 6245\n'
    b"not a log line\n"
    b'1.2.3.4 - frank [10/Oct/2000:13:55:36 -0700] "GET /a.gif HTTP/1.0" 200 2326 '
    b'"http://x/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"\r\n'
    b"\n"
    b'1.2.3.4 - - [10/Oct/2000:13:55:37 -0700] "POST /f.php?q=\\"x\\" HTTP/1.1" 500 - '
    b'"-" "caf\xc3\xa9 \xe9"\n'
    b'1.2.3.4 - - [10/Oct/2000:13:55:39 -0700] "GET /b.gif HTTP/1.0" 304 - "-" "open'
)
SPECWEB = (
    b"#shrink-sessions v1\n# fields: time session url method status bytes rt\n"
    b"100.000\tu1\t/index.php?id=3\tGET\t200\t5120\t0.040\r\n"
    b"100.050\tu1\t/img/a.gif\tGET\t200\t812\t0.010\n"
    b"bad line\n\n# a comment\n"
    b"103.000\tu2\t/cart.php\tPOST\t302\t-\t-"
)
CSV = b'time,session,url\n1.5,"a,b",/x.html\n2.0,a,"/y ""q"".php"\n9,c,/z\n'
READERS = {"clf": read_clf, "specweb": read_specweb, "wsesslog": read_wsesslog}


def _files(tmp: Path) -> list[tuple[str, Path]]:
    ws = (DATA / "wsesslog_all_features.txt").read_bytes()
    out = []
    for name, fmt, data in (
        ("a.log", "clf", CLF * 3),
        ("a.tsv", "specweb", SPECWEB),
        ("a.csv", "specweb", CSV),
        ("a.txt", "wsesslog", ws),
    ):
        (tmp / name).write_bytes(data)
        (tmp / f"{name}.gz").write_bytes(gzip.compress(data))
        out += [(fmt, tmp / name), (fmt, tmp / f"{name}.gz")]
    return out


@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 333])
def test_where_the_batches_are_cut_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    files = _files(tmp_path)
    whole = [READERS[fmt](p) for fmt, p in files]  # one batch: chunks of 1 MiB
    monkeypatch.setattr(io_mod, "_CHUNK", chunk)
    for (fmt, p), ref in zip(files, whole, strict=True):
        got = READERS[fmt](p)
        assert len(got) == len(ref) > 0, p.name
        assert got.same_rows(ref), p.name
        assert {**got.meta, "source": ""} == {**ref.meta, "source": ""}, p.name


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
def test_errors_name_the_same_line_wherever_the_batches_are_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(io_mod, "_CHUNK", chunk)
    log = tmp_path / "a.log"
    log.write_bytes(CLF)
    with pytest.raises(TraceFormatError, match=r"a\.log, line 2: not a Common"):
        read_clf(log, strict=True)
    long = tmp_path / "long.log"
    long.write_bytes(b"a\n" + b"x" * 40 + b"\nb\n")
    with pytest.raises(TraceFormatError, match=r"long\.log, line 2: a line longer than 30 bytes"):
        read_clf(long, max_line=30)
    unended = tmp_path / "unended.log"  # the long line is the last, with no LF
    unended.write_bytes(b"a\n" + b"y" * 100)
    with pytest.raises(TraceFormatError, match=r"unended\.log, line 2: a line longer than 50"):
        read_clf(unended, max_line=50)
    ws = tmp_path / "s.txt"  # a body continued past a batch's end, then an unknown argument
    ws.write_bytes(b"/a contents='x\\\ny'\n/b think=1\n\n/c bad=1\n")
    with pytest.raises(TraceFormatError, match=r"s\.txt, line 5: unknown argument 'bad=1'"):
        read_wsesslog(ws)
    ws.write_bytes(b"/a contents='x\\\ny'\n/b think=1\n")
    trace = read_wsesslog(ws)
    assert trace.table.column("body").to_pylist() == [b"x\ny", b""]


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_a_file_whose_lines_end_in_cr_alone_reads_as_its_lf_twin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    # Classic Mac OS line ends: split on LF only, a log was one line (every request
    # skipped as one bad line), a session log "unknown argument" at line 1.
    monkeypatch.setattr(io_mod, "_CHUNK", chunk)
    for fmt, p in _files(tmp_path):
        if p.suffix == ".gz":
            continue
        lf = p.read_bytes().replace(b"\r\n", b"\n")
        for name, data in (("lf", lf), ("cr", lf.replace(b"\n", b"\r"))):
            (tmp_path / f"{name}-{p.name}").write_bytes(data)
            (tmp_path / f"{name}-{p.name}.gz").write_bytes(gzip.compress(data))
        for suffix in ("", ".gz"):
            lf_file, cr = (tmp_path / f"{name}-{p.name}{suffix}" for name in ("lf", "cr"))
            ref = READERS[fmt](lf_file)
            assert _format_told(cr) == _format_told(lf_file), cr.name
            got = READERS[fmt](cr)
            assert len(got) == len(ref) > 0, cr.name
            assert got.same_rows(ref), cr.name
            assert {**got.meta, "source": ""} == {**ref.meta, "source": ""}, cr.name
    log = tmp_path / "strict.log"  # and an error names the line an editor shows
    log.write_bytes(CLF.replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    with pytest.raises(TraceFormatError, match=r"strict\.log, line 2: not a Common"):
        read_clf(log, strict=True)


def _format_told(path: Path) -> str:
    """What ``--format auto`` says of ``path``: the format, or why it cannot tell."""
    try:
        return detect_format(path)
    except TraceFormatError as exc:
        return exc.reason


def test_a_cr_inside_a_line_of_an_lf_file_stays_in_it(tmp_path: Path) -> None:
    data = b"#shrink-sessions v1\n1.0\tu1\t/a\rb\n2.0\tu1\t/c\n"
    (tmp_path / "s.tsv").write_bytes(data)
    assert read_specweb(tmp_path / "s.tsv").column("path").tolist() == ["/a\rb", "/c"]


# The same requests written with short or long text around them (a referer, blanks,
# a comment line), 12,000 lines: the child reports the growth of its peak RSS over
# the read, after a warm-up read (so that imports and first-use set-up are in its
# baseline). Comparing two files with the same rows leaves out what the rows cost. The
# peak is /proc's VmHWM, the child's own: ru_maxrss starts at the parent's peak (Linux
# carries it across exec), which hid any growth below it.
_CHILD = r"""
import json, re, sys
from pathlib import Path
def hwm():
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read())[1])
sys.path.insert(0, sys.argv[1])
from shrink.ingest import read_clf, read_specweb, read_wsesslog
fmt, tmp, pad = sys.argv[2], Path(sys.argv[3]), "x" * int(sys.argv[4])
if fmt == "clf":
    line = ('10.0.{a}.{b} - - [01/Jul/1995:00:{m:02d}:{s:02d} -0400] "GET /p{a}.gif HTTP/1.0" '
            '200 512 "http://example.com/?q=' + pad + '" "agent"\n')
    read = read_clf
elif fmt == "specweb":
    line = "{m}.{s}\tu{a}\t/p{b}.gif\tGET\t200\t512\t0.004" + " " * len(pad) + "\n"
    read = read_specweb
else:
    line = "#" + pad + "\n/p{a}.gif think=1\n\t/q{b}.gif\n\n"
    read = read_wsesslog
block = "".join(line.format(a=i % 200, b=i % 97, m=i % 60, s=i // 60 % 60) for i in range(1000))
small = tmp / f"small.{fmt}"
small.write_text(block)
read(small)
big = tmp / f"big.{fmt}"
with big.open("w") as fh:  # a block at a time: the child's baseline holds no copy of it
    for _ in range(12):
        fh.write(block)
before = hwm()
trace = read(big)
after = hwm()
print(json.dumps({"text": big.stat().st_size, "rows": len(trace),
                  "growth": (after - before) * 1024}))
"""


def _read_in_child(tmp: Path, fmt: str, pad: int) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT), fmt, str(tmp), str(pad)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fmt", ["clf", "specweb", "wsesslog"])
def test_memory_grows_with_the_requests_not_with_the_text(tmp_path: Path, fmt: str) -> None:
    short = _read_in_child(tmp_path, fmt, 10)
    long = _read_in_child(tmp_path, fmt, 2000)
    assert short["rows"] == long["rows"] >= 12_000
    more_text = long["text"] - short["text"]
    assert more_text > 20 << 20
    # Reading the whole text first took more than the text's size again.
    assert long["growth"] - short["growth"] < more_text / 4, (short, long)
