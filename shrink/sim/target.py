"""``SimTarget``: the simulator behind the :class:`shrink.target.Target` protocol.

A run turns the trace into the live engine's schedule (same origin, looping and
session semantics as :func:`shrink.replay.schedule.build_schedule`, vectorised
here), draws every request's CPU demand and every connection's routing with one
seeded generator, runs :func:`shrink.sim.engine.simulate`, and writes a RunLog
with exactly the live engine's columns (``target`` = ``sim:<address:port>`` of
the replica). The simulated generator never falls behind, so ``intended`` and
``sent`` coincide and the GeneratorCheck says ``behind=False``.

Share: a :class:`shrink.share.Share`: a CPU subset of the machine (the mapping is
built over it) and/or a CPU-time fraction (every demand divided by it, an ideal
slower server). Text forms: :meth:`shrink.share.Share.parse`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shrink._version import __version__
from shrink.checks import check_positive
from shrink.errors import ParameterError
from shrink.machine import Machine
from shrink.mapping import Mapping, build_mapping
from shrink.runlog import RunLog
from shrink.share import Share
from shrink.sim.engine import EngineInput, simulate
from shrink.sim.model import Layout, build_layout
from shrink.sim.params import SimParams
from shrink.target import GeneratorCheck, RunResult
from shrink.trace import Trace

__all__ = ["SimTarget"]

_SALT = 0x5131  # keeps the simulator's random streams apart from other seeded users


def _session_hash(ids: np.ndarray, salt: int = 1) -> np.ndarray:
    """The live engine's session hash (splitmix64), so replicas get the same sessions."""
    try:
        from shrink.replay.schedule import session_hash
    except ImportError:  # pragma: no cover - the replay package ships with shrink
        mask = np.uint64(0xFFFFFFFFFFFFFFFF)
        with np.errstate(over="ignore"):
            z = np.asarray(ids).astype(np.int64).view(np.uint64) + np.uint64(
                (0x9E3779B97F4A7C15 * (salt + 1)) & 0xFFFFFFFFFFFFFFFF
            )
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9) & mask
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB) & mask
            return z ^ (z >> np.uint64(31))
    return session_hash(ids, salt)


@dataclass
class _Base:
    """What a run needs from the trace, computed once per trace."""

    trace: Trace
    mode: str
    sess: np.ndarray
    t: np.ndarray
    think: np.ndarray
    burst_start: np.ndarray  # per row: a new burst starts here
    is_dyn: np.ndarray
    kib: np.ndarray
    work_us: np.ndarray  # NaN where the path names no work
    cls: np.ndarray
    nbytes: np.ndarray


def _base(trace: Trace) -> _Base:
    tab = trace.table
    sess = tab.column("session").to_numpy()
    burst = tab.column("burst").to_numpy()
    cls = np.asarray(tab.column("cls").to_pylist(), dtype=object)
    nbytes = tab.column("bytes").to_numpy()
    work_us = _work_units(tab.column("path"))
    n = len(trace)
    mode = str(trace.meta.get("mode") or "session")
    if mode not in ("open", "session"):
        raise ParameterError(f"trace mode == {mode!r}, must be one of session, open.")
    return _Base(
        trace=trace,
        mode=mode,
        sess=sess,
        t=tab.column("t").to_numpy(),
        think=tab.column("think").to_numpy(),
        burst_start=np.r_[True, (sess[1:] != sess[:-1]) | (burst[1:] != burst[:-1])]
        if n
        else np.zeros(0, bool),
        is_dyn=cls == "dynamic",
        kib=np.maximum(nbytes, 0) / 1024.0,
        work_us=work_us,
        cls=cls,
        nbytes=nbytes,
    )


def _work_units(paths: pa.ChunkedArray) -> np.ndarray:
    """``work=W`` from each path (the synthetic docroot's PHP work units), NaN where absent."""
    if not pc.any(pc.match_substring(paths, "work=")).as_py():
        return np.full(len(paths), np.nan)
    work = pc.extract_regex(paths, r"[?&]work=(?P<w>\d+(?:\.\d+)?)")
    vals = pc.cast(pc.struct_field(work, [0]), pa.float64())
    return vals.to_numpy(zero_copy_only=False).astype(np.float64)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, e)`` for each pair, vectorised."""
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offs = np.repeat(starts - np.r_[0, np.cumsum(lens)[:-1]], lens)
    return np.arange(total, dtype=np.int64) + offs


class SimTarget:
    """A simulated multi-socket web server (see :mod:`shrink.sim`)."""

    # Runs take simulated time: what they cost in wall time says nothing about the
    # run, and must not steer anything that should be reproducible (shrink.speed).
    simulated = True

    def __init__(
        self,
        machine: Machine,
        mapping: str | Mapping = "1-replica",
        share: Share | None = None,
        params: SimParams | None = None,
        *,
        routing: str = "hash",
    ) -> None:
        self.machine = machine
        self.share = share or Share.all_of(machine)
        self.params = params or SimParams()
        if routing not in ("hash", "round-robin"):
            raise ParameterError(f"routing == {routing!r}, must be one of hash, round-robin.")
        self.routing = routing
        check_positive(self.share.cpu_fraction, "share speed fraction")
        if isinstance(mapping, Mapping):
            self.mapping = mapping
        else:
            self.mapping = build_mapping(mapping, machine, self.share.cpus)
        self.layout: Layout = build_layout(
            machine, self.mapping, self.params, speed_fraction=self.share.cpu_fraction
        )
        self._cache: _Base | None = None

    @classmethod
    def from_toml(
        cls,
        path: str | Path,
        mapping: str = "1-replica",
        share: str | None = None,
        params: SimParams | None = None,
    ) -> SimTarget:
        """The target ``sim:SPEC.toml`` names, with a mapping and a share in CLI form.

        ``path`` may carry the ``sim:`` prefix of a ``--target`` option.
        """
        text = str(path)
        machine = Machine.read_toml(text[4:] if text.startswith("sim:") else text)
        parsed = Share.parse(share, machine) if share else None
        return cls(machine, mapping, parsed, params)

    def describe(self) -> dict[str, Any]:
        return {
            "target": "sim",
            "shrink_version": _version(),
            "machine": self.machine.to_dict(),
            "mapping": self.mapping.to_dict(),
            "share": self.share.to_dict(),
            "params": self.params.to_dict(),
            "routing": self.routing,
            "cores": self.layout.to_dict()["cores"],
        }

    def _trace_base(self, trace: Trace) -> _Base:
        if self._cache is None or self._cache.trace is not trace:
            self._cache = _base(trace)
        return self._cache

    def run(
        self, trace: Trace, *, rate_factor: float, warmup: float, duration: float, seed: int
    ) -> RunResult:
        """Simulate ``trace`` at ``rate_factor``; measure ``[warmup, warmup + duration)``."""
        check_positive(rate_factor, "rate factor")
        check_positive(duration, "duration")
        if warmup < 0:
            raise ParameterError(f"warmup == {warmup:g}, must be in [0, inf).")
        horizon = warmup + duration
        window = (float(warmup), float(horizon))
        b = self._trace_base(trace)
        rng = np.random.default_rng([int(seed), _SALT])
        inp, rows, sim_ids = self._plan(b, rate_factor, horizon, window, rng)
        out = simulate(inp, self.layout)
        return self._result(b, inp, out, rows, sim_ids, window, duration, rate_factor, seed)

    # -- planning -----------------------------------------------------------------
    def _plan(
        self,
        b: _Base,
        rate_factor: float,
        horizon: float,
        window: tuple[float, float],
        rng: np.random.Generator,
    ) -> tuple[EngineInput, np.ndarray, np.ndarray]:
        n = b.sess.size
        if n == 0:
            raise ParameterError("the trace is empty: nothing to simulate")
        origin = float(b.t.min())
        stride = int(b.sess.max()) + 1
        if b.mode == "open":
            order = np.argsort(b.t, kind="stable")
            unit_first = order
            unit_end = order + 1
            base_t = (b.t[order] - origin) / rate_factor
        else:
            first = np.flatnonzero(np.r_[True, b.sess[1:] != b.sess[:-1]])
            unit_first = first
            unit_end = np.r_[first[1:], n]
            base_t = (b.t[first] - origin) / rate_factor
        units = base_t.size
        raw = float(b.t.max() - origin)
        span = raw * (1 + 1 / max(units, 1)) if raw > 0 else 1.0
        period = span / rate_factor
        copies = max(1, math.ceil(horizon / period))
        u_t = np.concatenate([base_t + k * period for k in range(copies)])
        u_k = np.repeat(np.arange(copies), units)
        u_j = np.tile(np.arange(units), copies)
        keep = u_t < horizon
        u_t, u_k, u_j = u_t[keep], u_k[keep], u_j[keep]
        if u_t.size == 0:
            raise ParameterError("no session starts inside the horizon")
        # simulated requests: each kept unit's rows, unit after unit
        rows = _ranges(unit_first[u_j], unit_end[u_j])
        per_unit = unit_end[u_j] - unit_first[u_j]
        req_unit = np.repeat(np.arange(u_t.size), per_unit)
        sim_ids = b.sess[rows] + stride * u_k[req_unit]
        new_burst = b.burst_start[rows].copy()
        unit_head = np.r_[0, np.cumsum(per_unit)[:-1]]
        new_burst[unit_head] = True
        if b.mode == "open":
            new_burst[:] = True
        burst_first = np.flatnonzero(new_burst)
        burst_end = np.r_[burst_first[1:], rows.size]
        req_burst = np.cumsum(new_burst) - 1
        burst_unit = req_unit[burst_first]
        same_next = np.r_[burst_unit[1:] == burst_unit[:-1], False]
        burst_next = np.where(same_next, np.arange(burst_first.size) + 1, -1)
        burst_think = (
            b.think[rows[burst_first]] if b.mode == "session" else np.zeros(burst_first.size)
        )
        # sessions sorted by start; requests keep their unit-major order
        sess_order = np.argsort(u_t, kind="stable")
        rank = np.empty_like(sess_order)
        rank[sess_order] = np.arange(sess_order.size)
        unit_first_burst = req_burst[unit_head]
        unit_ids = b.sess[unit_first[u_j]] + stride * u_k
        # routing: replica by session hash (or round robin in start order), RSS queue uniform
        p = self.params
        n_rep = len(self.layout.replica_cores)
        if self.routing == "hash":
            rep = (_session_hash(unit_ids, 1) % np.uint64(n_rep)).astype(np.int64)
        else:
            rep = np.empty(u_t.size, np.int64)
            rep[sess_order] = np.arange(u_t.size) % n_rep
        q_u = rng.random(u_t.size)
        qsock = np.empty(u_t.size, np.int64)
        for r, socks in enumerate(self.layout.replica_queue_sockets):
            m = rep == r
            qsock[m] = np.asarray(socks)[(q_u[m] * len(socks)).astype(np.int64)]
        accept_u = rng.random(u_t.size)
        # demands: CPU seconds at full speed before the per-core factors
        kib = b.kib[rows]
        mean_static = (p.static_base_us + p.static_per_kib_us * kib) * 1e-6
        static_s = _gamma(rng, mean_static, p.static_cv)
        is_dyn = b.is_dyn[rows]
        work = b.work_us[rows]
        php = _lognormal(rng, p.dynamic_php_us * 1e-6, p.dynamic_cv, rows.size)
        php = np.where(np.isfinite(work), work * 1e-6, php)
        inp = EngineInput(
            static_s=static_s,
            php_s=np.where(is_dyn, php, 0.0),
            is_dyn=is_dyn,
            req_burst=req_burst,
            req_session=rank[req_unit],
            burst_first=burst_first,
            burst_end=burst_end,
            burst_think=burst_think,
            burst_next=burst_next,
            sess_start=u_t[sess_order],
            sess_first_burst=unit_first_burst[sess_order],
            sess_replica=rep[sess_order],
            sess_queue_socket=qsock[sess_order],
            sess_accept_u=accept_u[sess_order],
            remote_nic_s=p.remote_nic_us * 1e-6 if p.cross_socket else 0.0,
            horizon=horizon,
            window=window,
            accept_idle_first=p.accept_policy == "idle-first",
        )
        return inp, rows, sim_ids

    # -- results ------------------------------------------------------------------
    def _result(
        self,
        b: _Base,
        inp: EngineInput,
        out: Any,
        rows: np.ndarray,
        sim_ids: np.ndarray,
        window: tuple[float, float],
        duration: float,
        rate_factor: float,
        seed: int,
    ) -> RunResult:
        sent_mask = np.isfinite(out.sent)
        idx = np.flatnonzero(sent_mask)
        idx = idx[np.argsort(out.sent[idx], kind="stable")]
        r = rows[idx]
        core = out.core[idx]
        core_rep = np.array([c.replica for c in self.layout.cores], dtype=np.int64)
        labels = np.array([f"sim:{lab}" for lab in self.layout.replica_labels], dtype=object)
        sent = out.sent[idx]
        log = RunLog.from_columns(
            {
                "intended": sent,
                "sent": sent,
                "first_byte": out.done[idx],
                "done": out.done[idx],
                "status": np.full(idx.size, 200, np.int32),
                "bytes": b.nbytes[r],
                "cls": b.cls[r],
                "session": sim_ids[idx],
                "target": labels[core_rep[core]],
                "error": np.full(idx.size, "", dtype=object),
            },
            meta={
                "target": "sim",
                "shrink_version": _version(),
                "machine": self.machine.to_dict(),
                "params": self.params.to_dict(),
                "trace": {k: b.trace.meta.get(k) for k in ("source", "workload", "alpha", "seed")},
                "rate_factor": rate_factor,
                "seed": seed,
                "window": list(window),
                "mapping": self.mapping.name,
                "share": self.share.to_dict(),
            },
        )
        in_win = (sent >= window[0]) & (sent < window[1])
        rate = float(in_win.sum()) / duration
        util = {
            c.cpu: float(u) / duration for c, u in zip(self.layout.cores, out.busy, strict=True)
        }
        gen = GeneratorCheck(
            intended_rate=rate,
            achieved_rate=rate,
            send_lag_p50=0.0,
            send_lag_p99=0.0,
            send_lag_max=0.0,
            cpu=None,
            behind=False,
            reason="",
        )
        return RunResult(
            runlog=log,
            window=window,
            generator=gen,
            utilization=float(np.mean(list(util.values()))),
            per_cpu_utilization=util,
            describe=self.describe(),
        )


def _version() -> str:
    return __version__


def _gamma(rng: np.random.Generator, mean: np.ndarray, cv: float) -> np.ndarray:
    if cv <= 0:
        return np.asarray(mean, dtype=np.float64).copy()
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0, np.shape(mean)) * (np.asarray(mean) / shape)


def _lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    if cv <= 0:
        return np.full(n, mean)
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
