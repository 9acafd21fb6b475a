"""``replay -o DIR/FILE`` holds DIR as ``sweep --runlogs DIR`` does: both wrote there at
once, and a killed replay's RunLog temporaries (its .tmp and 8 MiB .reserve) stayed."""

from __future__ import annotations

import pytest
from helpers.servers import fake_server
from typer.testing import CliRunner

from shrink.cli import app
from shrink.folder_locks import claimed


def _replay(port: int, out) -> list[str]:
    return ["replay", "--target", f"http://127.0.0.1:{port}", "--rate", "50",
            "--path", "/x", "--duration", "1s", "-o", str(out)]  # fmt: skip


def test_replay_into_a_folder_a_sweep_holds_is_refused(tmp_path):
    logs = tmp_path / "logs"
    with fake_server() as port, claimed(logs):
        r = CliRunner().invoke(app, _replay(port, logs / "one.parquet"))
    assert r.exit_code == 1, r.output
    assert f"{logs}: another shrink run is writing this folder" in r.stderr
    assert not (logs / "one.parquet").exists()


@pytest.mark.parametrize("suffix", ["tmp", "reserve"])
def test_replay_removes_what_a_killed_replay_of_its_file_left(tmp_path, suffix):
    logs = tmp_path / "logs"
    logs.mkdir()
    dead = [f".one.parquet.0123456789ab.{suffix}", f".one.part1.parquet.ba9876543210.{suffix}"]
    kept = [f".two.parquet.0123456789ab.{suffix}"]  # another file's: perhaps a live run's
    for name in dead + kept:
        (logs / name).write_bytes(b"\0" * 1024)
    with fake_server() as port:
        r = CliRunner().invoke(app, _replay(port, logs / "one.parquet"))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in logs.iterdir()) == sorted([*kept, "one.parquet"])


def test_two_replays_write_one_folder_and_a_sweep_is_refused_there(tmp_path):
    # Each replay held its folder alone: a second replay into it (-o a.parquet and
    # -o b.parquet in one folder, two load generators) was refused as busy. Another
    # replay's hold is a shared flock on the folder, taken here by hand.
    import fcntl
    import os

    from shrink.errors import OutputBusyError

    logs = tmp_path / "logs"
    logs.mkdir()
    other = logs / ".one.parquet.0123456789ab.tmp"  # perhaps the other replay's: kept
    other.write_bytes(b"\0")
    fd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        with fake_server() as port:
            r = CliRunner().invoke(app, _replay(port, logs / "one.parquet"))
        assert r.exit_code == 0, r.output
        with pytest.raises(OutputBusyError), claimed(logs):
            pass  # a sweep --runlogs there is refused while a replay writes
    finally:
        os.close(fd)
    assert other.exists() and (logs / "one.parquet").exists()
