"""The samplers package: semantics, nesting, determinism, provenance, split, CLI."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from helpers.sampler_traces import make_trace, row_ids
from helpers.surface import exported, public_names
from typer.testing import CliRunner

import samplers
from samplers import (
    ConsistencyWarning,
    ObjectSampler,
    Sampler,
    SessionSampler,
    StratifiedSampler,
    StructureWarning,
    check_consistency,
    get_sampler,
    split,
)
from shrink.cli import app
from shrink.errors import ParameterError
from shrink.trace import Trace

pytestmark = pytest.mark.compute

LEVELS = ("session", "object", "request", "stratified")


@pytest.fixture(scope="module")
def parent() -> Trace:
    return make_trace(np.random.default_rng(42), 400)


@pytest.fixture(scope="module")
def open_parent() -> Trace:
    return make_trace(np.random.default_rng(43), 2000, open_loop=True)


def _sample(trace: Trace, alpha: float, seed: int, level: str) -> Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StructureWarning)
        return samplers.sample(trace, alpha, seed=seed, level=level)


# --- the public surface and the registry -------------------------------------------


def test_public_surface_is_explicit():
    assert public_names(samplers) == exported(samplers)
    assert samplers.available() == sorted(LEVELS)
    for level in LEVELS:
        assert isinstance(get_sampler(level), Sampler)
        assert get_sampler(level).name == level
    with pytest.raises(ParameterError, match=r"sampler == 'bogus', must be one of object"):
        get_sampler("bogus")


def test_fake_sampler_keeps_the_first_sessions_and_fits_the_protocol(parent):
    fake = samplers.FirstSessionsSampler()
    assert isinstance(fake, Sampler) and fake.name not in samplers.available()
    s = fake.sample(parent, 0.25, seed=3)
    order = list(dict.fromkeys(parent.column("session").tolist()))
    assert list(dict.fromkeys(s.column("session").tolist())) == order[:100]
    assert s.meta["sampler"] == "first-sessions" and s.meta["parent"] == parent.fingerprint()


@pytest.mark.parametrize(
    ("alpha", "seed", "message"),
    [
        (1.7, 0, r"alpha == 1.7, must be in \(0, 1\]."),
        (0.0, 0, r"alpha == 0, must be in \(0, 1\]."),
        (0.5, -1, r"seed == -1"),
        (0.5, 1.5, r"seed == 1.5, must be an integer."),
    ],
)
def test_bad_parameters_are_refused_with_uniform_messages(parent, alpha, seed, message):
    for level in LEVELS:
        with pytest.raises(ParameterError, match=message):
            _sample(parent, alpha, seed, level)


@pytest.mark.parametrize("mode", ["session", "open"])
def test_empty_trace_gives_empty_samples_and_parts(mode):
    empty = Trace.empty({"mode": mode})
    for level in LEVELS:
        s = _sample(empty, 0.5, 1, level)
        assert len(s) == 0 and s.meta["kept_sessions"] == 0
    assert [len(p) for p in split(empty, 3)] == [0, 0, 0]


def test_alpha_one_keeps_everything_unchanged(parent):
    for level in LEVELS:
        assert _sample(parent, 1.0, 3, level).same_rows(parent)


# --- nesting and determinism ---------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_samples_nest_in_alpha_exactly(parent, open_parent, level):
    for tr in (parent, open_parent):
        for seed in range(10):
            small = set(row_ids(_sample(tr, 0.25, seed, level)).tolist())
            big = set(row_ids(_sample(tr, 0.5, seed, level)).tolist())
            assert small <= big
            assert len(small) < len(big)


def test_session_samples_nest_by_session(parent):
    for seed in range(20):
        a = set(_sample(parent, 0.25, seed, "session").column("session").tolist())
        b = set(_sample(parent, 0.5, seed, "session").column("session").tolist())
        assert a <= b


@pytest.mark.parametrize("level", LEVELS)
def test_same_seed_gives_byte_identical_output(parent, tmp_path, level):
    a = _sample(parent, 0.3, 7, level).write_parquet(tmp_path / "a.parquet").read_bytes()
    b = _sample(parent, 0.3, 7, level).write_parquet(tmp_path / "b.parquet").read_bytes()
    c = _sample(parent, 0.3, 8, level).write_parquet(tmp_path / "c.parquet").read_bytes()
    assert a == b
    assert a != c


def test_decision_does_not_depend_on_the_rest_of_the_trace(parent):
    """A session's fate is a function of (seed, session id) only."""
    ids = np.unique(parent.column("session"))
    half = parent.filter(np.isin(parent.column("session"), ids[::2]))
    whole = set(_sample(parent, 0.4, 5, "session").column("session").tolist())
    part = set(_sample(half, 0.4, 5, "session").column("session").tolist())
    assert part == whole & set(ids[::2].tolist())


def test_interleaved_sessions_are_grouped_before_object_sampling(parent):
    # Rows sorted by time interleave sessions; the result must equal the grouped one's rows.
    by_time = parent.take(np.argsort(parent.column("t"), kind="stable"))
    for level in LEVELS:
        grouped = _sample(parent, 0.4, 11, level)
        mixed = _sample(by_time, 0.4, 11, level)
        order = np.argsort(row_ids(mixed))
        assert (row_ids(mixed)[order] == row_ids(grouped)).all()
        for col in ("t", "think"):
            assert np.array_equal(mixed.column(col)[order], grouped.column(col))
        # ... and the interleaved sample keeps its parent's (time) order.
        pos = np.argsort(row_ids(by_time))[row_ids(mixed)]
        assert (np.diff(pos) > 0).all()


# --- object level --------------------------------------------------------------------


def _tiny() -> Trace:
    return Trace.from_columns(
        {
            "session": [1, 1, 1, 2, 2, 3],
            "burst": [0, 0, 1, 0, 1, 0],
            "t": [0.0, 0.0, 1.0, 0.5, 2.0, 3.0],
            "think": [0.5, 0.5, 1.0, 1.0, 1.0, 1.0],
            "rt": [0.1, 0.3, 0.2, np.nan, 0.1, 0.1],
            "path": ["/a", "/a.gif", "/b", "/c", "/d", "/e"],
        },
        meta={"mode": "session"},
    )


def test_object_sampler_turns_skipped_bursts_into_think_time_or_a_later_start():
    tr = _tiny()
    st = samplers._structure.structure(tr)
    u = samplers.object.object_u(st, 3)
    alpha = float(np.sort(u)[2])  # keeps exactly the two bursts with the smallest draws
    kept_bursts = set(np.flatnonzero(u < alpha).tolist())
    s = ObjectSampler().sample(tr, alpha, seed=3)
    # The expected result, worked by hand for each possible pair of kept bursts.
    bursts = [(0, [0, 1]), (1, [2]), (2, [3]), (3, [4]), (4, [5])]
    dur = {0: 0.3, 1: 0.2, 2: 0.0, 3: 0.1, 4: 0.1}  # burst 2's rt is unknown
    think = {0: 0.5, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    start = {0: 0.0, 1: 0.0, 2: 0.5, 3: 0.5, 4: 3.0}  # the session's start t
    session = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}
    exp_t, exp_think = [], []
    for k, rows in bursts:
        if k not in kept_bursts:
            continue
        earlier = [j for j in range(k) if session[j] == session[k]]
        lead = [j for j in earlier if not any(i in kept_bursts for i in earlier if i <= j)]
        later = []
        for j in range(k + 1, 5):
            if session[j] != session[k] or j in kept_bursts:
                break
            later.append(j)
        t0 = tr.column("t")[rows[0]]
        t = start[k] + sum(dur[j] + think[j] for j in lead) if lead else t0
        exp_t += [t] * len(rows)
        exp_think += [think[k] + sum(dur[j] + think[j] for j in later)] * len(rows)
    assert s.column("t").tolist() == pytest.approx(exp_t, abs=1e-12)
    assert s.column("think").tolist() == pytest.approx(exp_think, abs=1e-12)


def test_object_sampler_leading_skip_and_trailing_skip_by_hand(monkeypatch):
    """Session 1 keeps burst 1 only, session 2 keeps burst 0 only: both rules at once."""
    tr = _tiny()
    keep = np.array([False, True, True, False, False])  # per burst
    monkeypatch.setattr(samplers.object, "object_u", lambda st, seed: np.where(keep, 0.0, 0.9))
    s = ObjectSampler().sample(tr, 0.5, seed=0)
    assert s.column("path").tolist() == ["/b", "/c"]
    assert s.column("t").tolist() == pytest.approx([0.0 + 0.3 + 0.5, 0.5])  # delayed start
    assert s.column("think").tolist() == pytest.approx([1.0, 1.0 + 0.1 + 1.0])  # absorbed
    assert s.meta["kept_bursts"] == 2 and s.meta["parent_bursts"] == 5


def test_object_sampler_on_open_traces_keeps_requests_unchanged(open_parent):
    s = ObjectSampler().sample(open_parent, 0.3, seed=1)
    ids = row_ids(s)
    for col in ("t", "think", "session", "bytes"):
        assert np.array_equal(s.column(col), open_parent.column(col)[ids])
    assert s.meta["objects"].startswith("requests")


def test_object_sampler_keeps_each_users_pacing(parent):
    """A session's last kept burst ends when the recorded session would have ended."""
    s = ObjectSampler().sample(parent, 0.5, seed=4)

    def session_end(tr: Trace) -> dict[int, float]:
        sess, b, t = tr.column("session"), tr.column("burst"), tr.column("t")
        think, rt = tr.column("think"), np.nan_to_num(tr.column("rt"), nan=0.0)
        end: dict[int, float] = {}
        for i in np.flatnonzero(np.r_[(sess[1:] != sess[:-1]) | (b[1:] != b[:-1]), True]):
            first = i
            while first > 0 and sess[first - 1] == sess[i] and b[first - 1] == b[i]:
                first -= 1
            end[int(sess[i])] = t[i] + max(rt[first : i + 1].max(), 0.0) + think[i]
        return end

    full, sampled = session_end(parent), session_end(s)
    assert sampled
    for k, v in sampled.items():
        assert v == pytest.approx(full[k], abs=1e-9)


# --- request and stratified levels -----------------------------------------------------


def test_request_sampler_warns_and_records_on_closed_loop(parent, open_parent):
    with pytest.warns(StructureWarning, match="breaks the traffic's structure"):
        s = samplers.sample(parent, 0.5, seed=1, level="request")
    assert any("structure" in w for w in s.meta["warnings"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o = samplers.sample(open_parent, 0.5, seed=1, level="request")
    assert "warnings" not in o.meta


def _dominant(trace: Trace) -> dict[int, str]:
    out: dict[int, dict[str, int]] = {}
    for s, c in zip(trace.column("session"), trace.column("cls"), strict=True):
        out.setdefault(int(s), {}).setdefault(c, 0)
        out[int(s)][c] += 1
    return {s: sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for s, d in out.items()}


@pytest.mark.parametrize("alpha", [0.1, 0.25, 0.37, 0.5, 0.9])
def test_stratified_mix_is_exact_up_to_rounding(parent, open_parent, alpha):
    for seed in range(5):
        s = StratifiedSampler().sample(parent, alpha, seed=seed)
        dom_parent = _dominant(parent)
        dom_sample = _dominant(s)
        for cls in ("static", "dynamic"):
            n = sum(v == cls for v in dom_parent.values())
            assert sum(v == cls for v in dom_sample.values()) == int(np.floor(alpha * n + 0.5))
            assert s.meta["strata"][cls]["units"] == n
        o = StratifiedSampler().sample(open_parent, alpha, seed=seed)
        for cls in ("static", "dynamic"):
            n = int((open_parent.column("cls") == cls).sum())
            assert int((o.column("cls") == cls).sum()) == int(np.floor(alpha * n + 0.5))


def test_stratified_by_another_column_and_unknown_column(open_parent):
    tr = open_parent.with_column("status", np.resize([200, 304, 404], len(open_parent)))
    s = StratifiedSampler(column="status").sample(tr, 0.2, seed=0)
    for code in (200, 304, 404):
        n = int((tr.column("status") == code).sum())
        assert int((s.column("status") == code).sum()) == int(np.floor(0.2 * n + 0.5))
    with pytest.raises(ParameterError, match="column == 'nope'"):
        StratifiedSampler(column="nope").sample(tr, 0.2)


# --- provenance ----------------------------------------------------------------------------


def test_sample_records_sampler_alpha_seed_and_parent(parent):
    s = SessionSampler().sample(parent, 0.25, seed=7)
    assert (s.meta["sampler"], s.meta["alpha"], s.meta["seed"]) == ("session", 0.25, 7)
    assert s.meta["parent"] == parent.fingerprint()
    assert s.meta["parent_sessions"] == parent.n_sessions
    assert s.meta["kept_sessions"] == s.n_sessions
    assert s.meta["kept_requests"] == len(s)
    assert s.meta["users"] == round(400 * 0.25) and s.meta["parent_users"] == 400
    assert s.meta["source"] == "synthetic"  # the parent's provenance is kept
    again = SessionSampler().sample(s, 0.5, seed=1)
    assert again.meta["lineage"] == [
        {"sampler": "session", "alpha": 0.25, "seed": 7, "parent": parent.fingerprint()}
    ]
    assert again.meta["alpha_total"] == pytest.approx(0.125)


# --- load-balancing consistency -------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "balance", "ok"),
    [
        ("session", "session", True),
        ("session", "connection", True),
        ("stratified", "session", True),
        ("session", "request", False),
        ("object", "session", False),
        ("object", "request", False),
        ("request", "session", False),
        ("request", "connection", False),
        ("request", "request", True),
    ],
)
def test_consistency_with_keepalive(level, balance, ok):
    if ok:
        assert check_consistency(level, balance, keepalive=True) is None
        return
    with pytest.raises(ParameterError, match=r"concurrent connections|connection load"):
        check_consistency(level, balance, keepalive=True)
    with pytest.warns(ConsistencyWarning):
        why = check_consistency(level, balance, keepalive=True, force=True)
    assert why and "--force" in why
    assert check_consistency(level, balance, keepalive=False) is None
    assert check_consistency(level, balance, keepalive=True, open_loop=True) is None


def test_consistency_rejects_unknown_levels():
    with pytest.raises(ParameterError, match="level == 'burst'"):
        check_consistency("burst", "session", True)
    with pytest.raises(ParameterError, match="balance == 'ip'"):
        check_consistency("session", "ip", True)


# --- split -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_split_is_a_partition_by_session(parent, k):
    parts = split(parent, k, seed=5)
    assert len(parts) == k
    ids = np.concatenate([row_ids(p) for p in parts])
    assert np.array_equal(np.sort(ids), np.arange(len(parent)))
    sessions = [set(p.column("session").tolist()) for p in parts]
    for i in range(k):
        assert parts[i].meta["part"] == i and parts[i].meta["parts"] == k
        assert (np.diff(row_ids(parts[i])) > 0).all()
        for j in range(i):
            assert not sessions[i] & sessions[j]
    # Part 0 is the session sample at alpha = 1/k with the same seed.
    assert parts[0].same_rows(SessionSampler().sample(parent, 1 / k, seed=5))


def test_split_refuses_zero_parts(parent):
    with pytest.raises(ParameterError, match="parts == 0"):
        split(parent, 0)


# --- CLI ------------------------------------------------------------------------------------


def test_cli_sample_writes_the_sample_and_trace_info_shows_provenance(parent, tmp_path):
    src = parent.write_parquet(tmp_path / "t.parquet")
    out = tmp_path / "s.parquet"
    runner = CliRunner()
    args = ["sample", str(src), "--alpha", "0.25", "--level", "session", "--seed", "7"]
    res = runner.invoke(app, [*args, "-o", str(out)])
    assert res.exit_code == 0, res.output
    s = Trace.read_parquet(out)
    assert s.same_rows(SessionSampler().sample(parent, 0.25, seed=7))
    assert (s.meta["sampler"], s.meta["alpha"], s.meta["seed"]) == ("session", 0.25, 7)
    assert s.meta["balance"] == "session" and s.meta["keepalive"] is True
    info = runner.invoke(app, ["trace", "info", str(out), "--json"])
    meta = json.loads(info.output)["meta"]
    assert meta["parent"] == parent.fingerprint() and meta["sampler"] == "session"


def test_cli_refuses_inconsistent_level_unless_forced(parent, tmp_path):
    src = parent.write_parquet(tmp_path / "t.parquet")
    out = tmp_path / "s.parquet"
    runner = CliRunner()
    args = ["sample", str(src), "--alpha", "0.5", "--level", "request", "-o", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 1
    assert "concurrent connections" in res.output and not out.exists()
    res = runner.invoke(app, [*args, "--force", "--json"])
    assert res.exit_code == 0, res.output
    assert "warning" in res.output
    s = Trace.read_parquet(out)
    assert "concurrent connections" in s.meta["forced"]
    res = runner.invoke(app, [*args, "--balance", "request"])
    assert res.exit_code == 0, res.output


def test_cli_stratified_and_bad_alpha(parent, tmp_path):
    src = parent.write_parquet(tmp_path / "t.parquet")
    runner = CliRunner()
    res = runner.invoke(
        app,
        ["sample", str(src), "--alpha", "0.3", "--level", "stratified", "--column", "cls",
         "-o", str(tmp_path / "s.parquet"), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["sampler"] == "stratified"
    res = runner.invoke(app, ["sample", str(src), "--alpha", "1.5", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--alpha: alpha == 1.5, must be in (0, 1]." in res.output


def test_cli_split_writes_numbered_parts(parent, tmp_path):
    src = parent.write_parquet(tmp_path / "t.parquet")
    res = CliRunner().invoke(app, ["split", str(src), "--parts", "3", "-o", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "p").glob("part-*.parquet"))
    assert [f.name for f in files] == ["part-000.parquet", "part-001.parquet", "part-002.parquet"]
    parts = [Trace.read_parquet(f) for f in files]
    assert sum(len(p) for p in parts) == len(parent)
    assert [p.meta["part"] for p in parts] == [0, 1, 2]


# --- docs and real traces -------------------------------------------------------------------


def test_docstring_examples_run():
    import doctest

    from samplers import _protocol

    for module in (samplers, _protocol):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_sampling_a_real_access_log(real_dir):
    """A real combined log (sessionized by the CLF reader): nesting and the binomial law."""
    from scipy import stats

    from shrink.ingest import read_trace

    tr = read_trace(real_dir / "elastic_apache_logs_combined.log")
    n = tr.n_sessions
    lo, hi = stats.binom.interval(0.999, n, 0.3)
    outside = 0
    for seed in range(30):
        small = _sample(tr, 0.1, seed, "session")
        big = _sample(tr, 0.3, seed, "session")
        assert set(small.column("session").tolist()) <= set(big.column("session").tolist())
        outside += not lo <= big.n_sessions <= hi
        obj = _sample(tr, 0.3, seed, "object")
        assert len(obj) < len(tr) and obj.meta["parent"] == tr.fingerprint()
    assert outside <= 1  # P(more than 1 of 30 outside a 99.9% interval) < 5e-4
