"""The replay engine against its own fake server: parsing, semantics, failures, self-check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.realtime import RT
from helpers.session_traces import session_trace
from helpers.surface import exported, public_names
from scipy import stats

from shrink.errors import OptionError, ReplayError
from shrink.replay import (
    EngineConfig,
    LiveTarget,
    RunLogRow,
    RunLogWriter,
    build_schedule,
    generator_check,
    open_loop_trace,
    run_engines,
    run_schedule,
)
from shrink.replay._http import build_request, parse_head
from shrink.runlog import RunLog
from shrink.schedule import ScheduleOptions
from shrink.target import GeneratorPlacement
from shrink.trace import Trace

# Functional tests judge behaviour, not speed: other work shares this machine, so
# the generator's lag bound for "on schedule" is loose here (the benchmark and
# bench/RESULTS.md hold the 1 ms figures).
LOOSE_LAG = 0.05


def _start_fake(cpu: int | None = None, *extra: str) -> tuple[subprocess.Popen[str], int]:
    args = [sys.executable, "-m", "shrink.replay.fakeserver", "--port", "0", *extra]
    if cpu is not None and cpu in os.sched_getaffinity(0):
        args += ["--cpu", str(cpu)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split()[2])


@pytest.fixture(scope="module")
def fake() -> tuple[str, int]:
    proc, port = _start_fake(cpu=1)
    yield "127.0.0.1", port
    proc.kill()
    proc.wait()


def _run(trace: Trace, targets, *, horizon: float, rate_factor: float = 1.0, **cfg) -> RunLog:
    sched = build_schedule(trace, rate_factor, horizon, loop=False)
    w = RunLogWriter(None)
    run_schedule(sched, EngineConfig(targets=targets, **cfg), w, handle_signals=False)
    return w.runlog()


# --- the HTTP bits -----------------------------------------------------------------
def test_parse_head_reads_status_length_chunked_and_close():
    assert parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12") == (200, 12, False, False)
    assert parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length:0\r\nX: y") == (
        404,
        0,
        False,
        False,
    )
    assert parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked") == (200, -1, True, False)
    assert parse_head(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1")[3] is True
    assert parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 1")[3] is True
    assert parse_head(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive")[3] is False
    with pytest.raises(ValueError):
        parse_head(b"SSH-2.0-OpenSSH")


def test_requests_are_prebuilt_http11_bytes():
    b = build_request("GET", "/a?b=1", "127.0.0.1:80")
    assert b.startswith(b"GET /a?b=1 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n") and b.endswith(
        b"\r\n\r\n"
    )
    p = build_request("POST", "/f", "h:1", b"x=1")
    assert b"Content-Length: 3\r\n" in p and p.endswith(b"\r\n\r\nx=1")


# --- schedules -------------------------------------------------------------------------
def test_session_schedule_scales_starts_and_keeps_bursts():
    tr = session_trace(4, ["/a", "/b", "/c"], gap=2.0, think=1.0, bursts=2)
    s = build_schedule(tr, 2.0, 100.0, loop=False)
    assert s.session_start.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert s.session_bursts[0] == [(0, 3, 1.0), (3, 6, 1.0)]
    assert len(s) == 24


def test_looping_fills_the_horizon_with_distinctsession_trace():
    tr = session_trace(5, ["/a"], gap=1.0, think=0.0)
    s = build_schedule(tr, 1.0, 30.0, loop=True)
    assert s.copies >= 5
    assert len(set(s.session_ids)) == len(s.session_ids)
    assert s.session_start.max() < 30.0
    gaps = np.diff(s.session_start)
    assert gaps.min() > 0.9 and gaps.max() < 1.3  # copies follow on at the trace's own pace


def _burst_times(sched) -> np.ndarray:
    out = []
    for st, plan in zip(sched.session_start, sched.session_bursts, strict=True):
        off = 0.0
        for _, _, think in plan:
            out.append(st + off)
            off += think
    return np.asarray(out)


def test_warm_start_runs_the_steady_state_from_time_zero():
    # one session a second, 3 pages 5 s apart: 3 pages/s once sessions overlap
    tr = session_trace(60, ["/a"], gap=1.0, think=5.0, bursts=3)
    cold = _burst_times(build_schedule(tr, 1.0, 20.0, warm_start=False))
    warm = _burst_times(build_schedule(tr, 1.0, 20.0))
    assert np.sum(cold < 5) == 5  # only new sessions' first pages at the start
    assert np.sum(warm < 5) == 15 and np.sum((warm >= 10) & (warm < 15)) == 15
    s = build_schedule(tr, 1.0, 20.0)
    assert len(set(s.session_ids)) == len(s.session_ids)


def test_constant_open_loop_trace_has_exact_spacing():
    tr = open_loop_trace("/x", 1000.0, 2.0)
    s = build_schedule(tr, 1.0, 2.0, loop=False)
    assert len(s) == 2000
    assert np.allclose(np.diff(s.times), 0.001)


def test_poisson_open_loop_counts_over_seeds():
    # Counts in 1 s at 500/s: Poisson(500). The KS test over 60 seeds of the
    # standardized counts guards the generator, not one lucky seed.
    counts = np.array(
        [len(open_loop_trace("/x", 500.0, 1.0, arrival="poisson", seed=s)) for s in range(60)]
    )
    z = (counts - 500) / np.sqrt(500)
    assert stats.kstest(z, "norm").pvalue > 0.001
    gaps = np.diff(open_loop_trace("/x", 500.0, 20.0, arrival="poisson", seed=1).column("t"))
    assert stats.kstest(gaps * 500, "expon").pvalue > 0.001


# --- the writer ---------------------------------------------------------------------------
def test_writer_flushes_row_groups_and_reads_back(tmp_path: Path):
    import pyarrow.parquet as pq

    w = RunLogWriter(tmp_path / "r.parquet", {"x": 1}, flush_rows=3)
    tc = w.targets.code("127.0.0.1:1")
    for i in range(7):
        w.add(
            RunLogRow(
                i,
                i + 0.1,
                i + 0.2,
                i + 0.3,
                200,
                10,
                i % 2,
                i,
                tc,
                w.errors.code("timeout" if i == 6 else ""),
            )
        )
        w.maybe_flush()
    w.close()
    f = pq.ParquetFile(tmp_path / "r.parquet")
    assert f.metadata.num_row_groups == 3
    log = RunLog.read_parquet(tmp_path / "r.parquet")
    assert len(log) == 7 and log.meta == {"x": 1}
    assert log.column("cls").tolist()[:2] == ["static", "dynamic"]
    assert log.column("error").tolist()[-1] == "timeout"
    assert log.ok_mask().sum() == 6


# --- self-check -----------------------------------------------------------------------------
def _log(intended, sent):
    n = len(intended)
    return RunLog.from_columns(
        {
            "intended": np.asarray(intended),
            "sent": np.asarray(sent),
            "done": np.asarray(sent) + 1e-3,
        }
        | {"status": np.full(n, 200)}
    )


def test_selfcheck_on_time_late_and_short():
    t = np.arange(1000) / 1000.0
    ok = generator_check(_log(t, t + 1e-4), (0.0, 1.0))
    assert not ok.behind and ok.intended_rate == pytest.approx(1000)
    late = t + np.where(np.arange(1000) % 50 == 0, 5e-3, 1e-4)  # 2% of requests 5 ms late
    g = generator_check(_log(t, late), (0.0, 1.0))
    assert g.behind and "send-lag" in g.reason
    sent = np.where(t < 0.9, t, np.nan)  # the last 10% never went out
    g = generator_check(_log(t, sent), (0.0, 1.0), lag_limit=10.0)
    assert g.behind and "achieved" in g.reason and g.achieved_rate == pytest.approx(900)


def test_a_late_level_says_whether_its_send_thread_waited_for_its_cpu():
    from types import SimpleNamespace

    from shrink.replay.selfcheck import thread_wait

    t = np.arange(1000) / 1000.0
    # 2% of the sends 5 ms late: a thread held that long waited at least half of it
    late = _log(t, t + np.where(np.arange(1000) % 50 == 0, 5e-3, 1e-4))
    held = generator_check(late, (0.0, 1.0), thread_wait=0.015, realtime=True)
    assert held.behind and held.thread_wait == 0.015
    assert "waited for its CPU 1.5% of the run: under SCHED_FIFO" in held.reason
    crowded = generator_check(late, (0.0, 1.0), thread_wait=0.03)
    assert crowded.reason.endswith(
        "(its send thread waited for its CPU 3% of the run: other work ran there)"
    )
    below = generator_check(late, (0.0, 1.0), thread_wait=0.0002, realtime=True)
    assert "0.02% of the run, 2% of its sends were late: the delay was below" in below.reason
    # unknown (an older core): the reason is the lag alone; on time: no reason at all
    assert generator_check(late, (0.0, 1.0)).reason.endswith("> 1 ms")
    assert generator_check(_log(t, t + 1e-4), (0.0, 1.0), thread_wait=0.05).reason == ""
    # the most over the engine's processes, from their counted microseconds and wall time
    stats = [SimpleNamespace(extra={"loop": {"runq_wait_us": us}}, wall=2.0) for us in (300, 50800)]
    assert thread_wait(stats) == pytest.approx(0.0254)
    assert thread_wait([SimpleNamespace(extra={"engine": "python"}, wall=2.0)]) is None


# --- the engine ------------------------------------------------------------------------------
def test_wsesslog_semantics_first_alone_then_embedded_over_n_connections(fake):
    paths = ["/p?bytes=100&delay_us=20000"] + [f"/e{i}?bytes=2000&delay_us=10000" for i in range(4)]
    tr = session_trace(3, paths, gap=0.05, think=0.1, bursts=2)
    log = _run(tr, [fake], horizon=3.0, conns_per_session=2)
    assert len(log) == 30 and log.ok_mask().all()
    t = log.table.to_pylist()
    for s in range(3):
        rows = sorted((r for r in t if r["session"] == s), key=lambda r: r["intended"])
        for b in (0, 1):
            burst = rows[5 * b : 5 * b + 5]
            first = burst[0]
            assert first["bytes"] == 100
            emb = burst[1:]
            assert all(r["sent"] >= first["done"] for r in emb)
            # never more than N=2 of the session's requests in flight at once
            for r in emb:
                in_flight = sum(1 for o in emb if o["sent"] <= r["sent"] < o["done"])
                assert in_flight <= 2
        # the second burst starts a think time (0.1 s) after the first burst's last byte
        end_first = max(r["done"] for r in rows[:5])
        assert rows[5]["intended"] == pytest.approx(end_first + 0.1, abs=2e-3)


def test_chunked_close_and_status_are_parsed(fake):
    paths = [
        "/a?bytes=5000&chunked=1",
        "/b?bytes=10&close=1",
        "/c?bytes=0&status=404",
        "/d?bytes=70000",
    ]
    tr = session_trace(4, paths, gap=0.02, think=0.0)
    log = _run(tr, [fake], horizon=2.0, conns_per_session=1)
    # a 404 arrived whole, but it is a failure (as wrk and httperf count it)
    assert log.ok_mask().sum() == 12
    assert log.failures() == {"transport": 0, "http_4xx": 4, "http_5xx": 0}
    by_path = {}
    for r, s in zip(log.column("bytes"), log.column("status"), strict=True):
        by_path.setdefault((int(r), int(s)), 0)
        by_path[(int(r), int(s))] += 1
    assert by_path == {(5000, 200): 4, (10, 200): 4, (0, 404): 4, (70000, 200): 4}


def test_connection_errors_and_timeouts_are_rows_not_exceptions(fake):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    tr = open_loop_trace("/x", 50.0, 0.5)
    log = _run(tr, [("127.0.0.1", dead)], horizon=0.5)
    assert len(log) == 25 and set(log.column("error")) == {"refused"}
    tr = open_loop_trace("/x?delay_us=3000000", 20.0, 0.5)
    log = _run(tr, [fake], horizon=0.5, timeout=0.3)
    assert len(log) == 10 and set(log.column("error")) == {"timeout"}
    assert np.isnan(log.column("done")).all()


def test_hash_routing_keeps_sessions_on_one_address_and_splits_evenly(fake):
    proc, port2 = _start_fake(cpu=1)
    try:
        tr = session_trace(200, ["/a?bytes=10", "/b?bytes=10"], gap=0.003, think=0.0)
        targets = [fake, ("127.0.0.1", port2)]
        log = _run(tr, targets, horizon=2.0)
        sess, tgt = log.column("session"), log.column("target")
        per = {s: set(tgt[sess == s]) for s in np.unique(sess)}
        assert all(len(v) == 1 for v in per.values())
        first = sum(1 for v in per.values() if f"127.0.0.1:{fake[1]}" in v)
        assert stats.binomtest(first, len(per), 0.5).pvalue > 0.001
        log = _run(tr, targets, horizon=2.0, routing="round-robin")
        sess, tgt = log.column("session"), log.column("target")
        per_session = [tgt[sess == s][0] for s in range(200)]  # sessions in start order
        assert per_session[0::2] == [per_session[0]] * 100
        assert per_session[1::2] == [per_session[1]] * 100 and per_session[0] != per_session[1]
    finally:
        proc.kill()
        proc.wait()


def test_scale_out_partitions_sessions_and_shares_the_clock(fake):
    tr = session_trace(120, ["/a?bytes=10", "/b?bytes=10"], gap=0.01, think=0.0)
    log, eng = run_engines(
        tr,
        EngineConfig([fake]),
        rate_factor=1.0,
        horizon=1.5,
        schedule=ScheduleOptions(loop=False),
        generator=GeneratorPlacement(processes=2),
    )
    assert len(eng.stats) == 2 and all(s.requests > 0 for s in eng.stats), eng
    assert len(log) == 240, eng
    assert log.ok_mask().all(), set(log.column("error"))
    assert sorted(np.unique(log.column("session")).tolist()) == list(range(120))
    sess, intended = log.column("session"), log.column("intended")
    starts = np.array([intended[sess == s].min() for s in range(120)])
    assert np.allclose(starts, np.arange(120) * 0.01)
    # both processes count from one monotonic zero, so their times are comparable
    assert all(s.t0 == eng.t0 for s in eng.stats)


def test_a_scaled_out_replay_removes_the_part_folders_killed_runs_left(fake, tmp_path, monkeypatch):
    """Without -o the parts go in a temporary folder that a kill -9 left for good (29
    empty ``shrink-replay-*`` folders had piled up in one /tmp); the next run removes
    the ones whose maker is gone, and its own."""
    import subprocess
    import sys

    from shrink.replay import scaleout
    from shrink.replay.part_dirs import SPAWNED

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"{SPAWNED}{dead.pid}-killed"
    left.mkdir()
    monkeypatch.setattr(scaleout, "scratch_base", lambda: tmp_path)
    tr = session_trace(20, ["/a?bytes=10"], gap=0.01, think=0.0)
    log, _ = run_engines(
        tr, EngineConfig([fake]), rate_factor=1.0, horizon=0.3,
        schedule=ScheduleOptions(loop=False), generator=GeneratorPlacement(processes=2),
    )  # fmt: skip
    assert len(log) == 20
    assert list(tmp_path.iterdir()) == []


def test_a_merged_run_log_that_cannot_be_written_leaves_no_parts(fake, tmp_path, monkeypatch):
    """With two engine processes (a 2-replica testbed), a merged RunLog the disk had no
    room for left ``run.part0.parquet`` and ``run.part1.parquet`` in the --runlogs
    folder, named by no message."""
    import errno

    from shrink.errors import WriteError

    def full(self, path):
        raise WriteError(path, OSError(errno.ENOSPC, "No space left on device"))

    monkeypatch.setattr(RunLog, "write_parquet", full)  # the parent's merge; not the parts
    tr = session_trace(20, ["/a?bytes=10"], gap=0.01, think=0.0)
    with pytest.raises(WriteError):
        run_engines(
            tr,
            EngineConfig([fake]),
            rate_factor=1.0,
            horizon=0.3,
            schedule=ScheduleOptions(loop=False),
            generator=GeneratorPlacement(processes=2),
            out=tmp_path / "run.parquet",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _part_one_fails(sched, config, writer, on_ready=None, **options):
    """An engine whose second process fails once the run starts, writing no part."""
    if ".part1." in str(writer.path):
        on_ready()
        raise RuntimeError("part 1 stopped")
    return run_schedule(sched, config, writer, on_ready=on_ready, **options)


def _part_zero_disk_full(sched, config, writer, on_ready=None, **options):
    """An engine whose first process finds its part's disk full once the run starts."""
    import errno

    from shrink.errors import WriteError

    if ".part0." in str(writer.path):
        on_ready()
        raise WriteError(writer.path, OSError(errno.ENOSPC, "No space left on device"))
    return run_schedule(sched, config, writer, on_ready=on_ready, **options)


def test_a_part_that_cannot_be_written_is_said_without_a_class_name(fake, tmp_path):
    # "error: engine process 0 (PID N): WriteError: tm/r.part0.HEX.parquet: cannot
    # write (no space left on the device, ENOSPC)": shrink's own sentence behind its
    # class name
    from shrink.errors import ReplayError

    tr = session_trace(20, ["/a?bytes=10"], gap=0.01, think=0.0)
    with pytest.raises(ReplayError) as err:
        run_engines(
            tr, EngineConfig([fake]), rate_factor=1.0, horizon=0.3,
            schedule=ScheduleOptions(loop=False),
            generator=GeneratorPlacement(processes=2, engine=_part_zero_disk_full),
            out=tmp_path / "run.parquet",
        )  # fmt: skip
    said = str(err.value)
    assert "cannot write (no space left on the device, ENOSPC)" in said, said
    assert "WriteError" not in said, said


def test_a_run_reads_only_its_own_parts(fake, tmp_path, monkeypatch, capsys):
    """A kill -9 of a replay's parent (two engine processes) left ``run.part0.parquet``
    and ``run.part1.parquet`` beside its OUT; the next run into OUT whose second
    process wrote no part merged the stale one as its own. Its parts are now marked
    with the run's id; those left are named when a replay into OUT starts, and kept."""
    from shrink.cli.replay_cmd import _held

    stale = RunLogWriter(tmp_path / "run.part1.parquet", {"part": 1})
    stale.targets.code("127.0.0.1:80")
    stale.add(RunLogRow(0.0, 0.0, 1e-4, 2e-4, 200, 100, 0, 99, 0, 0))
    stale.close()
    (tmp_path / "run.part0.parquet").symlink_to(tmp_path / "run.part1.parquet")
    with _held(tmp_path / "run.parquet"):
        pass
    err = capsys.readouterr().err
    assert "1 engine process part of a replay into run.parquet" in err, err
    assert "run.part1.parquet" in err and "run.part0" not in err, err  # a link is no part
    tr = session_trace(20, ["/a?bytes=10"], gap=0.01, think=0.0)
    log, eng = run_engines(
        tr,
        EngineConfig([fake]),
        rate_factor=1.0,
        horizon=0.5,
        schedule=ScheduleOptions(loop=False),
        generator=GeneratorPlacement(processes=2, engine=_part_one_fails),
        out=tmp_path / "run.parquet",
    )
    assert 99 not in set(log.column("session").tolist()), "the stale part was merged"
    assert eng.extra["errors"] and "part 1 stopped" in eng.extra["errors"][0]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["run.parquet", "run.part0.parquet", "run.part1.parquet"], left


def test_a_scaled_out_replay_into_a_long_legal_name_writes_its_parts(fake, tmp_path):
    """Each part is named after OUT's stem, 20 bytes and more longer: beside a legal
    OUT of 255 bytes, every part was "File name too long" and the run failed, leaving
    its parts' temporaries. The parts' stem is cut to fit, its temporaries' too."""
    out = tmp_path / ("é" * 60 + "a" * 127 + ".parquet")  # 255 bytes
    tr = session_trace(20, ["/a?bytes=10"], gap=0.01, think=0.0)
    log, eng = run_engines(
        tr, EngineConfig([fake]), rate_factor=1.0, horizon=0.3, out=out,
        schedule=ScheduleOptions(loop=False), generator=GeneratorPlacement(processes=2),
    )  # fmt: skip
    assert len(log) == 20 and not eng.extra.get("errors"), eng.extra
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_two_long_names_sharing_their_head_do_not_share_their_parts(tmp_path, capsys):
    """Two legal RunLog names alike in their first 204 bytes: their parts' stems were
    both cut there, and a replay into one named the other's stopped run's parts as its
    own ("holds 1 engine process part of a replay into B.parquet")."""
    from shrink.cli.replay_cmd import _held
    from shrink.replay.part_dirs import PART_STEM_MAX, part_stem

    head = "é" * 60 + "a" * 100  # 220 bytes
    a, b = tmp_path / f"{head}A.parquet", tmp_path / f"{head}B.parquet"
    assert part_stem(a) != part_stem(b)
    assert all(len(os.fsencode(part_stem(p))) <= PART_STEM_MAX for p in (a, b))
    assert part_stem(a).encode().decode("utf-8")  # (whole characters)
    (tmp_path / f"{part_stem(a)}.part0.0123456789ab.parquet").write_bytes(b"x")
    with _held(b):
        pass
    assert "engine process part" not in capsys.readouterr().err
    with _held(a):
        pass
    assert "engine process part of a replay into" in capsys.readouterr().err


def test_a_name_equal_to_a_long_names_cut_stem_does_not_take_its_parts(tmp_path, capsys):
    """A legal RunLog name whose stem is another's cut parts' stem (its head, ~ and 8 hex
    digits, copied from the parts' names): kept as it was, the stem was the same, and a
    replay into it named the long RunLog's stopped run's parts as its own."""
    from shrink.cli.replay_cmd import _held
    from shrink.replay.part_dirs import PART_STEM_MAX, part_stem

    for head in ("a" * 300, "é" * 150):  # cut stems of 204 and 203 bytes
        long = tmp_path / f"{head}.parquet"
        short = tmp_path / f"{part_stem(long)}.parquet"  # a legal name: 212 bytes or less
        assert part_stem(short) != part_stem(long)
        assert len(os.fsencode(part_stem(short))) <= PART_STEM_MAX
        part = tmp_path / f"{part_stem(long)}.part0.0123456789ab.parquet"
        part.write_bytes(b"x")
        with _held(short):
            pass
        assert "engine process part" not in capsys.readouterr().err
        with _held(long):
            pass
        assert "engine process part of a replay into" in capsys.readouterr().err
        part.unlink()
    assert part_stem(tmp_path / "run~0123abcd.parquet") == "run~0123abcd"  # (short: as it is)


def test_a_sweep_names_the_parts_a_stopped_sweep_left(tmp_path, capsys):
    """--runlogs after a sweep with two engine processes was killed: its parts are named."""
    import contextlib

    from shrink.cli._runlogs import claim_runlogs

    for name in ("run002-rf0.5.part0.0123456789ab.parquet", "run002-rf0.5.part1.parquet"):
        (tmp_path / name).write_bytes(b"PAR1")
    (tmp_path / "run001-rf0.5.parquet").write_bytes(b"PAR1")  # a whole RunLog: no part
    with contextlib.ExitStack() as held:
        claim_runlogs(held, tmp_path)
    err = " ".join(capsys.readouterr().err.split())
    assert "2 engine process parts of a sweep's run that stopped before merging them" in err
    assert "run002-rf0.5.part0.0123456789ab.parquet, run002-rf0.5.part1.parquet;" in err
    assert len(list(tmp_path.iterdir())) == 3  # kept


def test_over_driving_the_generator_is_flagged(fake):
    # 3M requests/s is far past what one Python engine can send: the level must
    # come back flagged, never as a server result. Saturated, the engine here sends
    # about 590k/s (97% CPU). 400k was not far enough: on one CI machine the engine
    # met it at 89.8% CPU and a 0.92 ms send-lag p99, under both limits. The
    # native core is not judged here: it kept 400k/s on schedule on a quiet machine.
    tr = open_loop_trace("/x?bytes=10", 3_000_000.0, 0.3)
    python = GeneratorPlacement(engine="python")
    target = LiveTarget([fake], config={"max_pool": 64, "drain": 0.5}, generator=python)
    res = target.run(tr, rate_factor=1.0, warmup=0.1, duration=0.2)
    assert res.generator.behind
    # Behind on the schedule itself, not only on the CPU limit.
    assert res.generator.achieved_rate < 0.5 * res.generator.intended_rate
    from shrink.measure import level_stats

    assert level_stats(res).generator_behind


def test_a_modest_rate_is_not_flagged(fake):
    tr = open_loop_trace("/x?bytes=1024", 200.0, 2.0)
    target = LiveTarget([fake], lag_limit=LOOSE_LAG, generator=GeneratorPlacement(realtime=RT))
    # This VM's host stalls it now and then (77 ms once, at 6% generator CPU): one
    # run can be flagged by that. A generator that cannot keep 200/s fails all three.
    reasons = []
    for seed in range(3):
        res = target.run(tr, rate_factor=1.0, warmup=0.5, duration=1.5, seed=seed)
        if not res.generator.behind:
            break
        reasons.append(res.generator.reason)
    assert not res.generator.behind, reasons
    assert res.generator.intended_rate == pytest.approx(200, rel=0.02)
    assert res.runlog.ok_mask().all()


def test_the_lag_limit_comes_from_the_call_else_the_placement_else_the_default():
    from shrink.replay.selfcheck import LAG_LIMIT

    where = [("127.0.0.1", 9)]
    assert LiveTarget(where).lag_limit == LAG_LIMIT
    placed = GeneratorPlacement(lag_limit=0.005)
    assert LiveTarget(where, generator=placed).lag_limit == 0.005
    assert LiveTarget(where, generator=placed).describe()["lag_limit"] == 0.005
    assert LiveTarget(where, generator=placed, lag_limit=0.002).lag_limit == 0.002


@pytest.mark.compute
def test_a_live_targets_record_names_the_shrink_version_as_the_simulators_does():
    """A sweep's curve.json keeps the target's record as its provenance: a live one named
    the server's versions but not shrink's, which the simulator's named."""
    from shrink import __version__
    from shrink.sim.target import SimTarget

    live = LiveTarget([("127.0.0.1", 9)]).describe()
    sim = SimTarget.from_toml(
        Path(__file__).parent.parent / "examples" / "machines" / "nehalem-2s.toml"
    ).describe()
    assert live["shrink_version"] == sim["shrink_version"] == __version__


def test_predict_takes_a_lag_limit_as_sweep_does(tmp_path):
    from typer.testing import CliRunner

    from shrink.cli import app

    args = ["predict", str(tmp_path / "t.parquet"), "-o", str(tmp_path / "o")]
    r = CliRunner().invoke(app, [*args, "--lag-limit", "soon"])
    assert r.exit_code == 2 and "--lag-limit" in r.output, r.output


def test_generator_refuses_the_shares_cpus(fake):
    allowed = sorted(os.sched_getaffinity(0))
    with pytest.raises(ReplayError, match="--allow-overlap"):
        LiveTarget([fake], share_cpus=allowed)
    with pytest.raises(ReplayError, match="overlap") as info:
        LiveTarget([fake], share_cpus=[allowed[0]], generator=GeneratorPlacement((allowed[0],)))
    # a value given and refused before anything runs: the CLI exits 2 naming it (was 1)
    assert isinstance(info.value, OptionError) and info.value.option == "--generator-cpus"
    t = LiveTarget([fake], share_cpus=allowed, generator=GeneratorPlacement(allow_overlap=True))
    assert t.generator_cpus == allowed
    if len(allowed) > 1:
        assert LiveTarget([fake], share_cpus=allowed[1:]).generator_cpus == allowed[:1]
    with pytest.raises(ReplayError, match="loopback"):
        LiveTarget([("192.0.2.1", 80)])


def test_sigint_keeps_what_was_measured(tmp_path: Path, fake):
    out = tmp_path / "run.parquet"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shrink",
            "replay",
            "--rate",
            "200",
            "--duration",
            "60s",
            "--path",
            "/x?bytes=100",
            "--target",
            f"http://127.0.0.1:{fake[1]}",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    # the RunLog is written under a temporary name until it is whole
    while not list(tmp_path.glob(f".{out.name}.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    sigint = time.monotonic()
    so, se = proc.communicate(timeout=20)
    # it stops at once (the issue saw 40 s: the planned end); loose for a busy machine
    assert time.monotonic() - sigint < 5.0
    log = RunLog.read_parquet(out)
    assert 100 <= len(log) < 12000
    assert log.ok_mask().mean() > 0.95
    # the summary on stdout, the stop's one line on stderr
    assert "interrupted: the requests sent so far are kept in" in se and proc.returncode == 130
    assert "interrupted" not in so


# --- sweep, MAT and the adaptive search -------------------------------------------------
def _mm1_trace() -> Trace:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1 / 100.0, 24000))
    t = t[t < 200.0]
    return Trace.from_columns(
        {"session": np.arange(t.size), "t": t, "path": ["/x"] * t.size}, meta={"mode": "open"}
    )


def test_adaptive_search_narrows_the_mat_interval():
    from shrink.mat import mat
    from shrink.measure import sweep
    from shrink.replay.adaptive import refine
    from shrink.target import FakeTarget

    target = FakeTarget(servers=1, demand={"static": 0.001})
    trace = _mm1_trace()
    curve = sweep(target, trace, [3, 9.5], reps=3, warmup=2, duration=20, seed=1)
    before = mat(curve, "mean", 0.005)
    assert before.status == "ok"
    # Two M/M/1 levels already give the crossing within 1% (the queue's curve through
    # them), their interval 7.4% wide: ask for 4%.
    out, added = refine(target, trace, curve, "mean", 0.005, rel_width=0.04, max_levels=5)
    after = mat(out, "mean", 0.005)
    assert added and all(3 < x < 9.5 for x in added)
    assert len(out.levels) == 2 + len(added)
    assert (after.ci[1] - after.ci[0]) < (before.ci[1] - before.ci[0])
    # M/M/1 with a 1 ms server: mean 5 ms at 800 req/s
    assert after.mat == pytest.approx(800, rel=0.08)


def test_cli_sweep_with_repetitions_and_mat(fake, tmp_path: Path):
    from typer.testing import CliRunner

    from shrink.cli import app
    from shrink.loadcurve import LoadCurve

    trace = tmp_path / "open.parquet"
    open_loop_trace("/x?bytes=512&delay_us=200", 100.0, 30.0).write_parquet(trace)
    curve = tmp_path / "curve.json"
    runner = CliRunner()
    r = runner.invoke(
        app,
        ["sweep", str(trace), "--target", f"http://127.0.0.1:{fake[1]}", "--levels", "1,3",
         "--reps", "2", "--warmup", "0.3s", "--duration", "0.6s", "--lag-limit", "50ms",
         "-o", str(curve), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lc = LoadCurve.read_json(curve)
    assert [len(lv.reps) for lv in lc.levels] == [2, 2]
    mean, lo, hi = lc.levels[1].stat("throughput")
    assert lo <= mean <= hi and mean == pytest.approx(300, rel=0.1)
    summary = json.loads(curve.read_text())["meta"]["summary"]
    assert summary[1]["throughput"] == pytest.approx([mean, lo, hi])
    assert summary[1]["reps"] == 2 and summary[1]["p999"][1] <= summary[1]["p999"][2]
    r = runner.invoke(app, ["mat", str(curve), "--stat", "p999", "--threshold", "1s", "--json"])
    assert r.exit_code == 99, r.output  # never crossed: a lower bound, k6's failed-threshold code
    d = json.loads(r.stdout)
    assert d["status"] == "not_reached" and d["mat"] == pytest.approx(300, rel=0.1)
    assert d["bound"] == "lower" and d["ci"] is None and d["text"].startswith(">= ")
    # never crossed: the adaptive search measures above the highest level (--max-levels
    # counts the curve's levels in all, as predict's: the two measured and one added)
    out = tmp_path / "curve2.json"
    r = runner.invoke(
        app,
        ["mat", str(curve), "--stat", "p999", "--threshold", "1s", "--adaptive",
         "--trace", str(trace), "--target", f"http://127.0.0.1:{fake[1]}",
         "--max-levels", "3", "--lag-limit", "50ms", "-o", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 99, r.output  # still under 1 s at the added level: still a bound
    assert json.loads(r.stdout)["added_levels"] == [4.5]
    assert [lv.level for lv in LoadCurve.read_json(out).levels] == [1, 3, 4.5]
    r = runner.invoke(app, ["mat", str(curve), "--stat", "p100", "--threshold", "1s"])
    assert r.exit_code == 2 and "p100" in r.output  # a refused option (p42 is a percentile)


def test_keep_alive_closed_by_the_server_during_think_time_is_reopened():
    # the server drops connections idle for 0.1 s; sessions think 0.25 s between bursts
    proc, port = _start_fake(None, "--idle-timeout", "0.1")
    try:
        tr = session_trace(6, ["/a?bytes=10", "/b?bytes=10", "/c?bytes=10"], gap=0.05, think=0.25,
                       bursts=3)  # fmt: skip
        t = tr.table.to_pydict()
        t["t"] = [s * 0.05 for s in t["session"]]  # every burst's t is its session's start
        tr = Trace.from_columns(t, meta={"mode": "session"})
        log = _run(tr, [("127.0.0.1", port)], horizon=3.0)
        assert len(log) == 54
        assert log.ok_mask().all(), set(log.column("error"))
    finally:
        proc.kill()
        proc.wait()


def test_public_surface():
    import shrink.replay as rp

    assert public_names(rp) == exported(rp)


def test_cli_replay_over_two_engine_processes(fake, tmp_path: Path):
    from typer.testing import CliRunner

    from shrink.cli import app

    out = tmp_path / "run.parquet"
    r = CliRunner().invoke(
        app,
        ["replay", "--rate", "200", "--duration", "1s", "--arrival", "poisson", "--seed", "4",
         "--path", "/x?bytes=64", "--target", f"http://127.0.0.1:{fake[1]}", "--processes", "2",
         "-o", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    n = len(open_loop_trace("/x", 200.0, 1.0, arrival="poisson", seed=4))
    log = RunLog.read_parquet(out)
    assert d["requests"] == len(log) == n and log.ok_mask().all()
    assert log.meta["processes"] == 2
    assert not list(tmp_path.glob("*.part*"))  # parts merged and removed


def test_head_requests_complete_without_a_body(fake):
    # the reply to HEAD announces Content-Length 5000 but carries no body
    tr = Trace.from_columns(
        {"session": [0, 1, 2], "t": [0.0, 0.01, 0.02], "path": ["/h?bytes=5000"] * 3,
         "method": ["HEAD", "GET", "HEAD"]},
        meta={"mode": "open"},
    )  # fmt: skip
    log = _run(tr, [fake], horizon=1.0, timeout=0.5)
    assert log.ok_mask().all(), set(log.column("error"))
    assert sorted(log.column("bytes").tolist()) == [0, 0, 5000]


# --- the fake engine: the code around the engine, without sockets ---------------------------
def test_scale_out_over_three_processes_equals_one_process():
    from shrink.replay import FakeEngine

    tr = session_trace(90, ["/a", "/b", "/c", "/d"], gap=0.05, think=0.3, bursts=3)
    cfg = EngineConfig([("127.0.0.1", 1), ("127.0.0.1", 2)], conns_per_session=2)
    fake = FakeEngine()
    kw = dict(rate_factor=2.0, horizon=5.0)
    one, _ = run_engines(tr, cfg, generator=GeneratorPlacement(processes=1, engine=fake), **kw)
    three, eng = run_engines(tr, cfg, generator=GeneratorPlacement(processes=3, engine=fake), **kw)
    assert len(eng.stats) == 3 and sum(s.requests for s in eng.stats) == len(three)

    def rows(log):
        return sorted(
            zip(log.column("session"), log.column("intended"), log.column("target"), strict=True)
        )

    assert len(one) > 1000 and rows(one) == rows(three)


def test_live_target_sweep_with_the_fake_engine():
    from shrink.measure import sweep
    from shrink.replay import FakeEngine

    tr = open_loop_trace("/x", 100.0, 60.0)
    fake = GeneratorPlacement(engine=FakeEngine({"static": 0.002}))
    target = LiveTarget([("127.0.0.1", 9)], generator=fake)
    curve = sweep(target, tr, [1, 2, 4], warmup=1.0, duration=5.0)
    assert [lv.throughput for lv in curve.levels] == pytest.approx([100, 200, 400], rel=0.01)
    assert all(lv.stat("mean")[0] == pytest.approx(0.002) for lv in curve.levels)
    assert not any(lv.generator_behind for lv in curve.levels)


def test_cli_errors_name_what_is_wrong(tmp_path: Path):
    from typer.testing import CliRunner

    from shrink.cli import app

    runner = CliRunner()
    out = str(tmp_path / "r.parquet")
    r = runner.invoke(
        app, ["replay", "--target", str(tmp_path / "none.json"), "-o", out, "--rate", "5"]
    )
    assert r.exit_code == 1 and "none.json" in r.output and "no such" in r.output
    r = runner.invoke(app, ["replay", "--target", "http://192.0.2.7:80", "-o", out, "--rate", "5"])
    # refused before anything runs: the option's value (exit 2, named)
    assert r.exit_code == 2 and "--target:" in r.output and "loopback" in r.output
    r = runner.invoke(app, ["replay", "--target", "http://127.0.0.1:9", "-o", out])
    assert r.exit_code == 1 and "--rate" in r.output
    bad = tmp_path / "state.json"
    bad.write_text('{"schema": "other"}')
    r = runner.invoke(app, ["sweep", str(tmp_path / "t.parquet"), "--target", str(bad),
                            "--levels", "1", "-o", out])  # fmt: skip
    assert r.exit_code == 1 and "t.parquet" in r.output


def test_finished_sessions_are_freed_during_the_run(fake):
    """The collector is off in a run: a session and its connections must let go of each
    other, or every session of a long run stays in memory (issue #17)."""
    import gc

    from shrink.replay._owners import _Session

    trace = session_trace(300, ["/a?bytes=100", "/b?bytes=100"], gap=0.002, think=0.0, bursts=2)
    sched = build_schedule(trace, 1.0, 0.6, loop=False)
    alive: list[int] = []
    engine = run_schedule.__globals__["_Engine"]
    real_finish = engine.finish

    def finish(self):  # at the end of the run, once: count the sessions still in memory
        alive.append(sum(isinstance(o, _Session) for o in gc.get_objects()))
        real_finish(self)

    gc.collect()
    w = RunLogWriter(None)
    try:
        engine.finish = finish
        run_schedule(sched, EngineConfig(targets=[fake]), w, handle_signals=False)
    finally:
        engine.finish = real_finish
    assert len(w.runlog()) == 1200
    # Every session has ended by then: none should be held; 300 without the fix.
    assert len(alive) == 1 and alive[0] < 100
