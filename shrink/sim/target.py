"""``SimTarget``: the simulator behind the :class:`shrink.target.Target` protocol.

A run plans the trace with the live engine's own schedule builder
(:func:`shrink.schedule.build_schedule`: same origin, loop period, sessions,
ids and bursts), draws every request's CPU demand and every connection's routing with one
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
from shrink.schedule import build_schedule, schedule_arrays, session_hash
from shrink.share import Share
from shrink.sim.engine import EngineInput, simulate
from shrink.sim.model import Layout, build_layout
from shrink.sim.params import SimParams
from shrink.target import GeneratorCheck, RunResult
from shrink.trace import Trace

__all__ = ["SimTarget"]

_SALT = 0x5131  # keeps the simulator's random streams apart from other seeded users
# Whether a looped run starts with the sessions earlier copies would have open
# (shrink.schedule.build_schedule's warm_start). Off by default, so the simulator's
# results stay what they were; a live sweep's LiveTarget starts warm: pass
# warm_start=True to replay exactly its schedule.
WARM_START = False
# The engine holds about 1 KB of Python objects a request (500,000 took 550 MB), far
# more than the live engine the schedule's own limit is for: past this a run is
# refused before it is planned (--duration 1e6s planned 49 million, a MemoryError).
MAX_SIM_REQUESTS = 10_000_000


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


class SimTarget:
    """A simulated multi-socket web server (see :mod:`shrink.sim`)."""

    # Runs take simulated time: what they cost in wall time says nothing about the
    # run, and must not steer anything that should be reproducible (shrink.scaling).
    simulated = True

    def __init__(
        self,
        machine: Machine,
        mapping: str | Mapping = "1-replica",
        share: Share | None = None,
        params: SimParams | None = None,
        *,
        routing: str = "hash",
        warm_start: bool = WARM_START,
    ) -> None:
        self.machine = machine
        self.share = share or Share.all_of(machine)
        self.params = params or SimParams()
        if routing not in ("hash", "round-robin"):
            raise ParameterError(f"routing == {routing!r}, must be one of hash, round-robin.")
        self.routing = routing
        self.warm_start = warm_start
        check_positive(self.share.fraction, "share speed fraction")
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
        if b.sess.size == 0:
            raise ParameterError("the trace is empty: nothing to simulate")
        # The live engine's own schedule (shrink.schedule): same loop period, same
        # sessions and ids, same bursts, so the simulator replays what the engine does.
        sched = build_schedule(
            b.trace, rate_factor, horizon, mode=b.mode, warm_start=self.warm_start
        )
        planned = sched.copies * len(b.trace)
        if sched.copies > 1 and planned > MAX_SIM_REQUESTS:
            raise ParameterError(
                f"rate factor {rate_factor:g} over {horizon:g} s repeats the trace's "
                f"{len(b.trace):,} requests {sched.copies:,} times, more than the "
                f"{MAX_SIM_REQUESTS:,} requests a simulated run may hold; shorten the "
                "window or lower the level."
            )
        sp = schedule_arrays(sched)
        if sp.sess_start.size == 0:
            raise ParameterError("no session starts inside the horizon")
        rows, n_sess = sp.rows, sp.sess_start.size
        # routing: replica by session hash (or round robin in start order), RSS queue uniform
        p = self.params
        n_rep = len(self.layout.replica_cores)
        if self.routing == "hash":
            rep = (session_hash(sp.sess_ids, 1) % np.uint64(n_rep)).astype(np.int64)
        else:
            rep = np.arange(n_sess, dtype=np.int64) % n_rep
        q_u = rng.random(n_sess)
        qsock = np.empty(n_sess, np.int64)
        for r, socks in enumerate(self.layout.replica_queue_sockets):
            m = rep == r
            qsock[m] = np.asarray(socks)[(q_u[m] * len(socks)).astype(np.int64)]
        accept_u = rng.random(n_sess)
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
            req_burst=sp.req_burst,
            req_session=sp.req_session,
            burst_first=sp.burst_first,
            burst_end=sp.burst_end,
            burst_think=sp.burst_think,
            burst_next=sp.burst_next,
            sess_start=sp.sess_start,
            sess_first_burst=sp.sess_first_burst,
            sess_replica=rep,
            sess_queue_socket=qsock,
            sess_accept_u=accept_u,
            remote_nic_s=p.remote_nic_us * 1e-6 if p.cross_socket else 0.0,
            horizon=horizon,
            window=window,
            accept_idle_first=p.accept_policy == "idle-first",
        )
        return inp, rows, sp.sess_ids[sp.req_session]

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
                "trace": {
                    **{k: b.trace.meta.get(k) for k in ("source", "workload", "alpha", "seed")},
                    "fingerprint": b.trace.fingerprint(),  # (as a sweep's curve records it)
                },
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


# A coefficient of variation below this is none: 1/cv^2, the gamma's shape, overflowed
# (static_cv=1e-300 divided by zero), and a spread this small changes no figure.
_NO_SPREAD = 1e-6


def _gamma(rng: np.random.Generator, mean: np.ndarray, cv: float) -> np.ndarray:
    if cv < _NO_SPREAD:
        return np.asarray(mean, dtype=np.float64).copy()
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0, np.shape(mean)) * (np.asarray(mean) / shape)


def _lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    if cv < _NO_SPREAD or mean <= 0:  # no spread, or no work (a lognormal's log needs a mean > 0)
        return np.full(n, max(mean, 0.0))
    sigma2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
