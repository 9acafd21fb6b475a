"""The terminal's variables as a shell, a container or CI may set them: what shrink
says is still said."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.compute

ROOT = Path(__file__).resolve().parents[1]


def _shrink(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shrink", *args], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120,
    )  # fmt: skip


def test_a_zero_width_does_not_silence_errors_or_tables(tmp_path):
    """``COLUMNS=0`` (as a container or CI environment may hold it): rich took a
    width of 0 and printed nothing at all. An error exited 1 without a word, and
    ``trace info`` exited 0 with an empty stdout."""
    zero = {"COLUMNS": "0"}
    done = _shrink(zero, "sample", "missing.parquet", "--alpha", "0.5", "-o", "x.parquet",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == "error: missing.parquet: no such file", done.stderr
    (tmp_path / "a.log").write_text(
        '127.0.0.1 - - [01/Jul/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 10\n'
    )
    assert _shrink(zero, "ingest", "a.log", "-o", "t.parquet", cwd=tmp_path).returncode == 0
    info = _shrink(zero, "trace", "info", "t.parquet", cwd=tmp_path)
    assert info.returncode == 0 and "sessions" in info.stdout, (info.stdout, info.stderr)


@pytest.fixture(scope="module")
def latin1_locale(tmp_path_factory) -> dict[str, str]:
    """The environment of a non-UTF-8 locale (en_US.ISO-8859-1), built here."""
    loc = tmp_path_factory.mktemp("loc")
    build = ["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(loc / "en_US.ISO-8859-1")]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(build, capture_output=True, timeout=60)
    if not (loc / "en_US.ISO-8859-1").is_dir():
        pytest.skip("localedef could not build en_US.ISO-8859-1 here")
    return {"LOCPATH": str(loc), "LC_ALL": "en_US.ISO-8859-1", "PYTHONUTF8": "0"}


def test_a_non_ascii_name_is_read_under_a_non_utf8_locale(tmp_path, latin1_locale):
    """Under LC_ALL=en_US.ISO-8859-1 Python reads a name's bytes as Latin-1 (every byte
    decodes), and pyarrow encodes a name as UTF-8: the trace ``t\\xc3\\xb6.parquet`` was
    looked for under other bytes, "error: tö.parquet: no such file", exit 1."""
    (tmp_path / "a.log").write_text(
        '127.0.0.1 - - [01/Jul/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 10\n'
    )
    assert _shrink({}, "ingest", "a.log", "-o", "t.parquet", cwd=tmp_path).returncode == 0
    os.rename(tmp_path / "t.parquet", os.path.join(os.fsencode(tmp_path), b"t\xc3\xb6.parquet"))
    done = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"shrink", b"sample", b"t\xc3\xb6.parquet",
         b"--alpha", b"1", b"-o", b"\xc3\xb6.parquet"],
        capture_output=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **latin1_locale},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"\xc3\xb6.parquet" in os.listdir(os.fsencode(tmp_path))


@pytest.mark.parametrize("width", ["1", "3", "10", "20"])
def test_a_narrow_terminal_loses_no_value_of_trace_info(tmp_path, width):
    """``COLUMNS=1`` to ``3`` printed ``trace info`` as rows of ``│││``, every value
    lost, exit 0; 10 or 20 cut labels and values to "…". A table is laid out at 40
    columns at least (``cli._common.TABLE_MIN_WIDTH``), its cells folded, not cut."""
    (tmp_path / "a.log").write_text(
        '127.0.0.1 - - [01/Jul/1995:00:00:01 -0400] "GET /a HTTP/1.0" 200 10\n'
    )
    assert _shrink({}, "ingest", "a.log", "-o", "t.parquet", cwd=tmp_path).returncode == 0
    info = _shrink({"COLUMNS": width}, "trace", "info", "t.parquet", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert "…" not in info.stdout, info.stdout
    for label in ("sessions", "requests", "bursts", "loop period", "request rate", "reader"):
        assert label in info.stdout, info.stdout


def test_a_narrow_terminal_loses_no_value_of_the_predict_table(monkeypatch, capsys):
    """``predict``'s table (the other table shrink prints) at ``COLUMNS=3``: its
    mappings and MATs were lost the same way."""
    from shrink.cli.predict_cmd import _print_summary
    from shrink.prediction import MappingPrediction, Prediction, StatPrediction

    monkeypatch.setenv("COLUMNS", "3")
    stats = {"p99": StatPrediction(608.0, (335.0, 700.0), 0.005, None)}
    pred = Prediction(
        machine={}, mappings={"1-replica": MappingPrediction(stats, {}),
                              "4-replicas": MappingPrediction(stats, {})},
        recommended="4-replicas", reason="more", target_description="t",
        thresholds={"p99": 0.05},
    )  # fmt: skip
    _print_summary(pred, Path("out"))
    text = capsys.readouterr().out
    assert "…" not in text, text
    assert "1-replica" in text and "4-replicas" in text and text.count("608") == 2, text
