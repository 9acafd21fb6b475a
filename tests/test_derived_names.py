"""An -o whose derived files (``X.partial.json``, a folder's files) cannot be named is
refused by -o, saying how much shorter it must be, before anything runs.

A sweep -o of a legal 255-byte name was refused as "X.partial.json: File name too
long", a file the user never gave; a predict -o near PATH_MAX ran every level and
then could not write its curve.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shrink.cli import app
from shrink.trace import Trace

pytestmark = pytest.mark.compute

SPEC = Path(__file__).resolve().parent.parent / "examples" / "machines" / "nehalem-2s.toml"


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, [str(a) for a in args])
    return r.exit_code, " ".join(r.output.split())


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    out = tmp_path / "t.parquet"
    Trace.from_columns({"session": [1, 2], "t": [0.0, 0.5], "path": ["/a", "/b"]}).write_parquet(
        out
    )
    return out


def _deep(tmp_path: Path, total: int) -> Path:
    """A folder made in ``tmp_path`` whose path is about ``total`` bytes long."""
    folder = tmp_path
    while len(os.fsencode(str(folder))) < total - 250:
        folder = folder / ("d" * 240)
    folder.mkdir(parents=True)
    return folder / ("p" * (total - len(os.fsencode(str(folder))) - 1))  # (and its "/")


@pytest.mark.parametrize("command", ["sweep", "sim sweep"])
def test_a_legal_out_name_whose_partial_twin_is_too_long_is_refused_by_out(
    tmp_path, trace, command
):
    out = tmp_path / ("a" * 250 + ".json")  # 255 bytes: legal
    where = ["--target", "127.0.0.1:1"] if command == "sweep" else ["--machine", SPEC]
    code, text = _run(*command.split(), trace, *where, "--levels", "0.5", "--duration", "1s",
                      "-o", out)  # fmt: skip
    assert code == 2, text
    assert "--out:" in text and "a name of 255 bytes" in text, text
    assert "<its stem>.partial.summary.json beside it, 16 bytes longer" in text, text
    assert "shorten the name to at most 239 bytes" in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_exports_count_among_the_names_derived_from_out(tmp_path, trace):
    out = tmp_path / ("a" * 230 + ".json")  # fits its .partial.summary.json twin
    code, text = _run("sim", "sweep", trace, "--machine", SPEC, "--levels", "0.5",
                      "--duration", "1s", "-o", out, "--export", "locust")  # fmt: skip
    assert code == 2 and "<its stem>.partial_stats_history.csv beside it" in text, text
    assert "at most 234 bytes" in text, text


def test_an_output_folder_near_path_max_is_refused_before_anything_runs(tmp_path, trace):
    out = _deep(tmp_path, 4080)
    code, text = _run("predict", trace, "--target", f"sim:{SPEC}", "-o", out)
    assert code == 2, text
    assert "measured-curve.partial.json in it" in text and "past the 4095 bytes" in text, text
    assert "shorten it by 13 bytes or more" in text, text
    assert not out.exists()
    code, text = _run("split", trace, "--parts", "2", "-o", out)
    assert code == 2 and ".part-001.parquet." in text and "past the 4095 bytes" in text, text
    assert not out.exists()


def test_a_scaled_out_replay_near_path_max_is_refused_before_it_runs(tmp_path, trace):
    # Its parts were written, then could not be read back to merge: "File name too
    # long" after the run, the parts and their 8 MiB reserves left beside -o.
    out = _deep(tmp_path, 4080).with_suffix(".parquet")
    code, text = _run("replay", trace, "--target", "127.0.0.1:1", "--duration", "1s",
                      "--processes", "2", "-o", out)  # fmt: skip
    assert code == 2, text
    assert ".<its stem>.part1.0123456789ab.parquet.0123456789ab.reserve beside it" in text, text
    assert not [p for p in out.parent.iterdir() if ".part" in p.name]


def test_a_short_out_in_a_working_folder_past_path_max_is_written(tmp_path, monkeypatch):
    # The kernel takes a path relative to the working folder: -o c.json is written there
    # whatever the folder's own path. It was refused as "<the folder's 4,100 bytes and
    # more>/c.json: File name too long" (exit 1), a path the user never gave.
    trace = tmp_path / "t.parquet"
    n = 400
    Trace.from_columns(
        {"session": list(range(n)), "t": [i * 0.05 for i in range(n)], "path": ["/a"] * n}
    ).write_parquet(trace)
    _work_past_path_max(tmp_path, monkeypatch)
    code, text = _run("sim", "sweep", trace, "--machine", SPEC, "--levels", "0.5",
                      "--duration", "1s", "-o", "c.json")  # fmt: skip
    assert code == 0, text
    assert os.path.isfile("c.json") and os.path.isfile("c.partial.json") is False
    code, text = _run("sim", "sweep", trace, "--machine", SPEC, "--levels", "0.5",
                      "--duration", "1s", "-o", "no/c.json")  # fmt: skip
    assert code == 2 and "no/c.json: its folder" in text and "does not exist" in text, text


def _work_past_path_max(tmp_path: Path, monkeypatch) -> None:
    """Work in a folder made in ``tmp_path`` whose path from / passes PATH_MAX."""
    monkeypatch.chdir(tmp_path)
    while len(os.fsencode(os.getcwd())) <= 4096:
        os.mkdir("d" * 240)
        os.chdir("d" * 240)


def test_an_output_folder_made_past_path_max_is_removed_when_nothing_ran(
    tmp_path, trace, monkeypatch
):
    # Removed by its path from /, the empty folder a refused predict had made was left.
    _work_past_path_max(tmp_path, monkeypatch)
    code, text = _run("predict", trace, "--target", f"sim:{SPEC}", "-o", "pr")
    assert code == 1 and "kept none of the trace's 2 requests" in text, text
    assert os.listdir(".") == []


def test_an_output_folder_there_before_the_run_is_kept_past_path_max(tmp_path, trace, monkeypatch):
    # Asked by its path from / (ENAMETOOLONG: "not there"), the empty folder the user had
    # made was taken for one this run made, and removed when the run was refused.
    _work_past_path_max(tmp_path, monkeypatch)
    os.mkdir("pr")
    code, text = _run("predict", trace, "--target", f"sim:{SPEC}", "-o", "pr")
    assert code == 1 and "kept none of the trace's 2 requests" in text, text
    assert os.listdir(".") == ["pr"]
