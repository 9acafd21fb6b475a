"""A recorded request body has a bound (``--max-body``, shrink.defaults.MAX_BODY): a
Parquet trace's ``body`` column, a captured POST and a session log's ``contents=`` each
refuse a longer body in one line naming the file, where the body is and the option, and
a trace's largest body is told from the column's offsets, not from Python bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.captures import req
from helpers.machines import NEHALEM
from helpers.pcap_synth import Conn, http_response, write_capture
from typer.testing import CliRunner

from shrink.cli import app
from shrink.errors import TraceFormatError
from shrink.ingest import read_trace
from shrink.testbed.config import PhpLimits
from shrink.trace import Trace

pytestmark = pytest.mark.compute


def _trace(path: Path, bodies: list[bytes]) -> Path:
    n = len(bodies)
    Trace.from_columns(
        {"session": list(range(n)), "t": [0.1 * i for i in range(n)],
         "path": ["/p"] * n, "method": ["POST"] * n, "body": bodies},
    ).write_parquet(path)  # fmt: skip
    return path


def _invoke(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args], terminal_width=250)
    return res.exit_code, res.output


def test_a_parquet_body_past_the_bound_names_file_row_column_and_option(tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.parquet", [b"a" * 10, b"", b"b" * 300, b"c" * 400])
    with pytest.raises(TraceFormatError) as err:
        Trace.read_parquet(path, max_body=100)
    said = str(err.value)
    assert said.startswith(f"{path}: row 2 (session 2), column body: a body of 300 bytes")
    assert "--max-body (100 bytes)" in said
    assert len(Trace.read_parquet(path, max_body=400)) == 4  # at the bound: read


@pytest.mark.parametrize("command", ["replay", "sweep"])
def test_the_replays_refuse_a_long_body_before_the_target_and_take_the_option(
    tmp_path: Path, command: str
) -> None:
    path = _trace(tmp_path / "t.parquet", [b"x" * 5000])
    extra = ["--levels", "1"] if command == "sweep" else []
    base = [command, path, "--target", "http://127.0.0.1:9/", "-o", tmp_path / "o", *extra]
    status, out = _invoke(*base, "--max-body", "4096")
    assert status == 1 and "row 0 (session 0), column body" in out and "--max-body" in out
    assert len(out.strip().splitlines()) == 1, out
    if command == "replay":  # raised, the trace is read: the target fails (nothing on 9)
        status, out = _invoke(*base, "--max-body", "5000", "--duration", "1s", "--timeout", "1s")
        assert "column body" not in out, out


def test_ingest_wsesslog_contents_past_the_bound_names_the_line(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("/a\n/b method=POST contents='0123456789abcdef'\n")
    with pytest.raises(TraceFormatError) as err:
        read_trace(log, format="wsesslog", max_body=15)
    assert str(err.value).startswith(f"{log}, line 2: contents=: a body of 16 bytes")
    assert read_trace(log, format="wsesslog", max_body=16).table.column("body")[1].as_py()
    out = tmp_path / "t.parquet"
    status, said = _invoke("ingest", log, "-o", out, "--max-body", "15")
    assert status == 1 and "line 2" in said and "--max-body" in said, said
    assert not out.exists()


@pytest.mark.parametrize("chunked", [False, True])
def test_ingest_a_captured_post_past_the_bound_names_the_connection(
    tmp_path: Path, chunked: bool
) -> None:
    body = b"z" * 3000
    if chunked:
        post = (
            req("/up", "POST", "Transfer-Encoding: chunked\r\n")
            + b"bb8\r\n"
            + body
            + b"\r\n0\r\n\r\n"
        )
    else:
        post = req("/up", "POST", f"Content-Length: {len(body)}\r\n") + body
    cap = write_capture(
        tmp_path / "c.pcap", [Conn([(req("/a"), http_response(10)), (post, http_response(3))])]
    )
    with pytest.raises(TraceFormatError) as err:
        read_trace(cap, format="pcap", max_body=2999)
    said = str(err.value)
    assert said.startswith(f"{cap}: the connection first seen in packet 1, its request 2")
    assert "field body: a body of 3,000 bytes" in said and "--max-body" in said
    got = read_trace(cap, format="pcap", max_body=3000)
    assert got.table.column("body")[1].as_py() == body


def test_ingest_refuses_max_body_for_a_format_without_bodies(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text('1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 5\n')
    status, out = _invoke("ingest", log, "-o", tmp_path / "t.parquet", "--max-body", "9")
    assert status == 2 and "--max-body" in out and "clf" in out, out


def test_php_limits_take_the_largest_body_from_offsets(monkeypatch, tmp_path: Path) -> None:
    tr = Trace.read_parquet(_trace(tmp_path / "t.parquet", [b"", b"q" * (5 << 20), b"r"]))

    def no_python_bytes(self, name):  # every body as a Python object: the copy avoided
        raise AssertionError(f"Trace.column({name!r})")

    monkeypatch.setattr(Trace, "column", no_python_bytes)
    php = PhpLimits().for_trace(tr)
    assert php.largest_body == 5 << 20 and php.post_max_mib == 10


def test_testbed_up_reads_its_trace_once(monkeypatch, tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.parquet", [b"x" * 50])
    monkeypatch.setenv("SHRINK_RUN_DIR", str(tmp_path / "run"))
    reads = []
    real = Trace.read_parquet.__func__

    def counted(cls, p, **kw):
        reads.append(kw)
        return real(cls, p, **kw)

    monkeypatch.setattr(Trace, "read_parquet", classmethod(counted))
    docroot = tmp_path / "www"
    docroot.mkdir()
    base = ["testbed", "up", "--docroot", docroot, "--state", tmp_path / "s.json", "--trace", path]
    # A machine spec that cannot be read stops it after the trace is read.
    status, out = _invoke(*base, "--machine", tmp_path / "none.toml")
    assert status == 1 and len(reads) == 1, (out, reads)
    status, out = _invoke(*base, "--max-body", "49")
    assert status == 1 and "column body" in out and "--max-body" in out, out


def _reading_commands(path: Path, out: Path, machine: Path) -> dict[str, list[object]]:
    """Every other command that reads a trace's bodies, each as a user runs it."""
    return {
        "trace info": ["trace", "info", path],
        "sample": ["sample", path, "--alpha", "1", "-o", out / "s.parquet"],
        "split": ["split", path, "--parts", "2", "-o", out / "parts"],
        "export": ["export", path, "-f", "jsonl", "-o", out / "t.jsonl"],
        "sim run": ["sim", "run", path, "--machine", machine, "-o", out / "r.parquet",
                    "--warmup", "0s", "--duration", "2s"],
        "whatif": ["whatif", "--machine", machine, "--workload", path, "--no-sweep"],
    }  # fmt: skip


@pytest.mark.parametrize("name", ["trace info", "sample", "split", "export", "sim run", "whatif"])
def test_every_command_that_reads_a_trace_takes_the_bound_it_names(
    tmp_path: Path, name: str
) -> None:
    path = _trace(tmp_path / "t.parquet", [b"x" * 5000, b"y"])
    machine = NEHALEM.write_toml(tmp_path / "m.toml")
    args = _reading_commands(path, tmp_path, machine)[name]
    status, out = _invoke(*args)  # under the default bound
    assert status == 0, out
    status, out = _invoke(*args, "--max-body", "4096")
    assert status == 1 and "row 0 (session 0), column body" in out, out
    assert "--max-body" in out and len(out.strip().splitlines()) == 1, out


def test_validate_refuses_the_bound_where_it_runs_nothing(tmp_path: Path) -> None:
    status, out = _invoke(
        "validate", tmp_path / "prediction.json", "--full-run", "paired", "--max-body", "5"
    )
    assert status == 2 and "--max-body" in out and "runs nothing" in out, out
