"""The discrete-event core: processor-sharing cores fed by closed-loop sessions.

Each simulated core is an egalitarian processor-sharing (PS) server, which is how
an event-driven worker interleaves its connections and how the kernel shares
the core with the PHP processes. PS is simulated exactly with a virtual clock:
while ``n`` jobs are present the clock advances at ``speed / n`` CPU-seconds per
second, a job arriving when the clock reads ``V`` with demand ``d`` leaves when
it reads ``V + d``. So each core needs one heap of finish tags, and the whole
machine one heap of predicted departures (stale predictions are skipped by a
per-core version number): O(log n) per event, no per-job updates.

Sessions follow the live engine's ``wsesslog`` semantics (:mod:`shrink.schedule`):
a session opens at its scaled start time; a burst sends its first request alone,
then its embedded requests together when the first has been answered; the next
burst goes out the burst's think time (unscaled) after its last reply. A session
is one keep-alive connection, served throughout by the worker that accepted it.
Nothing is sent at or after the horizon; what was sent drains to completion.
Demand sampling, routing draws and the session structure are prepared with numpy
by the caller; this loop only moves jobs. The native core (``shrink_core``, built by
``make setup`` from native/src/sim.rs) runs the same loop step for step, to the same
bits, many times faster; :func:`simulate` takes it wherever it is built.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from shrink.errors import ParameterError
from shrink.sim.model import Layout

try:  # the native core is optional: the Python loop below is the fallback
    import shrink_core as _core
except ImportError:  # pragma: no cover - depends on the build
    _core = None

__all__ = ["EngineInput", "EngineOutput", "native_available", "simulate"]


@dataclass
class EngineInput:
    """Everything the event loop needs, as flat arrays.

    Requests are trace rows (in session, burst order); demands are CPU seconds
    at full speed before the per-core factors. Sessions must be sorted by start.
    """

    static_s: np.ndarray  # per request: worker + network CPU, before static_factor
    php_s: np.ndarray  # per request: PHP CPU (0 for static)
    is_dyn: np.ndarray  # per request: bool
    req_burst: np.ndarray  # per request: its burst index
    req_session: np.ndarray  # per request: its session index (into the session arrays)
    burst_first: np.ndarray  # per burst: first request row
    burst_end: np.ndarray  # per burst: one past its last request row
    burst_think: np.ndarray  # per burst: think time after it, seconds
    burst_next: np.ndarray  # per burst: the session's next burst, -1 if last
    sess_start: np.ndarray  # per session: scaled start time, ascending
    sess_first_burst: np.ndarray  # per session: its first burst
    sess_replica: np.ndarray  # per session: replica index
    sess_queue_socket: np.ndarray  # per session: socket of its RSS queue
    sess_accept_u: np.ndarray  # per session: uniform draw for the accepting worker
    remote_nic_s: float  # extra CPU per request with a remote queue
    horizon: float
    window: tuple[float, float]
    accept_idle_first: bool = True


@dataclass
class EngineOutput:
    sent: np.ndarray  # per request: send time (NaN: not sent before the horizon)
    done: np.ndarray  # per request: completion time
    core: np.ndarray  # per request: core index (-1: not sent)
    busy: np.ndarray  # per core: busy seconds inside the window
    events: int


def native_available() -> bool:
    """Whether the native core with the simulator's loop is built (an older build lacks it)."""
    return _core is not None and hasattr(_core, "simulate")


def simulate(inp: EngineInput, layout: Layout, *, native: bool | None = None) -> EngineOutput:
    """Run the event loop; see the module docstring for the semantics.

    ``native``: None runs the native core where it is built (and every input is
    finite, which its comparisons assume), False the Python loop, True the native core
    or ParameterError. Both give the same output, to the bit."""
    if native is None:
        native = native_available() and _finite(inp, layout)
    if not native:
        return _simulate_python(inp, layout)
    if not native_available():
        raise ParameterError("the native core is not built (make setup builds it with cargo)")
    return _simulate_native(inp, layout)


def _finite(inp: EngineInput, layout: Layout) -> bool:
    arrays = (inp.static_s, inp.php_s, inp.burst_think, inp.sess_start, inp.sess_accept_u)
    scalars = [inp.remote_nic_s, inp.horizon, *inp.window, layout.speed]
    scalars += [x for c in layout.cores for x in (c.static_factor, c.dyn_stall_us)]
    return all(bool(np.isfinite(a).all()) for a in arrays) and all(map(math.isfinite, scalars))


def _simulate_native(inp: EngineInput, layout: Layout) -> EngineOutput:
    def f64(values: object) -> bytes:
        return np.ascontiguousarray(values, dtype=np.float64).tobytes()

    def i64(values: object) -> bytes:
        return np.ascontiguousarray(values, dtype=np.int64).tobytes()

    w0, w1 = inp.window
    (sent, done, core, busy), events = _core.simulate(
        f64(inp.static_s),
        f64(np.where(inp.is_dyn, inp.php_s, 0.0)),
        i64(inp.is_dyn),
        i64(inp.req_burst),
        i64(inp.req_session),
        i64(inp.burst_first),
        i64(inp.burst_end),
        f64(inp.burst_think),
        i64(inp.burst_next),
        f64(inp.sess_start),
        i64(inp.sess_first_burst),
        i64(inp.sess_replica),
        i64(inp.sess_queue_socket),
        f64(inp.sess_accept_u),
        f64([c.static_factor for c in layout.cores]),
        f64([c.dyn_stall_us * 1e-6 for c in layout.cores]),
        i64([c.socket for c in layout.cores]),
        [[int(c) for c in r] for r in layout.replica_cores],
        float(layout.speed),
        float(inp.remote_nic_s),
        float(inp.horizon),
        float(w0),
        float(w1),
        bool(inp.accept_idle_first),
    )
    return EngineOutput(
        sent=np.frombuffer(sent, np.float64).copy(),
        done=np.frombuffer(done, np.float64).copy(),
        core=np.frombuffer(core, np.int64).copy(),
        busy=np.frombuffer(busy, np.float64).copy(),
        events=int(events),
    )


def _simulate_python(inp: EngineInput, layout: Layout) -> EngineOutput:
    """The event loop in Python: the reference the native core is checked against."""
    heappush, heappop = heapq.heappush, heapq.heappop
    inf = math.inf
    n_req = int(inp.static_s.size)
    n_cores = len(layout.cores)
    speed = float(layout.speed)
    sf = [c.static_factor for c in layout.cores]
    stall = [c.dyn_stall_us * 1e-6 for c in layout.cores]
    core_socket = [c.socket for c in layout.cores]
    rep_cores = [list(r) for r in layout.replica_cores]
    static_s = inp.static_s.tolist()
    dyn_s = np.where(inp.is_dyn, inp.php_s, 0.0).tolist()
    is_dyn = inp.is_dyn.tolist()
    req_burst = inp.req_burst.tolist()
    req_session = inp.req_session.tolist()
    b_first = inp.burst_first.tolist()
    b_end = inp.burst_end.tolist()
    b_think = inp.burst_think.tolist()
    b_next = inp.burst_next.tolist()
    left = (inp.burst_end - inp.burst_first).tolist()
    s_start = inp.sess_start.tolist()
    s_burst = inp.sess_first_burst.tolist()
    s_rep = inp.sess_replica.tolist()
    s_qsock = inp.sess_queue_socket.tolist()
    s_u = inp.sess_accept_u.tolist()
    n_sess = len(s_start)
    s_core = [-1] * n_sess
    s_extra = [0.0] * n_sess
    horizon = float(inp.horizon)
    w0, w1 = inp.window
    remote_s = float(inp.remote_nic_s)
    idle_first = inp.accept_idle_first

    sent = [math.nan] * n_req
    done = [math.nan] * n_req
    core_of = [-1] * n_req
    vclock = [0.0] * n_cores
    last = [0.0] * n_cores
    njobs = [0] * n_cores
    jobs: list[list[tuple[float, int]]] = [[] for _ in range(n_cores)]
    version = [0] * n_cores
    busy_since = [0.0] * n_cores
    busy = [0.0] * n_cores
    deps: list[tuple[float, int, int]] = []
    sends: list[tuple[float, int, int]] = []  # (time, burst, session)
    events = 0

    def arrive(c: int, i: int, now: float, extra: float) -> None:
        k = njobs[c]
        if k:
            vclock[c] += (now - last[c]) * speed / k
        else:
            busy_since[c] = now
        last[c] = now
        d = static_s[i] * sf[c] + extra
        if is_dyn[i]:
            d += dyn_s[i] + stall[c]
        h = jobs[c]
        heappush(h, (vclock[c] + d, i))
        njobs[c] = k + 1
        version[c] += 1
        heappush(deps, (now + (h[0][0] - vclock[c]) * (k + 1) / speed, c, version[c]))
        sent[i] = now
        core_of[i] = c

    sp = 0
    next_start = s_start[0] if n_sess else inf
    while True:
        t_dep = deps[0][0] if deps else inf
        t_snd = sends[0][0] if sends else inf
        if t_dep <= t_snd and t_dep <= next_start:
            if t_dep == inf:
                break
            now, c, v = heappop(deps)
            if v != version[c]:
                continue
            events += 1
            tag, i = heappop(jobs[c])
            k = njobs[c] - 1
            njobs[c] = k
            vclock[c] = tag
            last[c] = now
            version[c] += 1
            done[i] = now
            if k:
                heappush(deps, (now + (jobs[c][0][0] - tag) * k / speed, c, version[c]))
            else:
                a = busy_since[c] if busy_since[c] > w0 else w0
                e = now if now < w1 else w1
                if e > a:
                    busy[c] += e - a
            b = req_burst[i]
            left[b] -= 1
            s = req_session[i]
            if i == b_first[b] and b_end[b] - i > 1:
                if now < horizon:  # the page is in: its embedded requests go out together
                    for j in range(i + 1, b_end[b]):
                        arrive(s_core[s], j, now, s_extra[s])
            elif left[b] == 0:
                nb = b_next[b]
                if nb >= 0:
                    t_next = now + b_think[b]
                    if t_next < horizon:
                        heappush(sends, (t_next, nb, s))
        elif t_snd <= next_start:
            now, b, s = heappop(sends)
            events += 1
            arrive(s_core[s], b_first[b], now, s_extra[s])
        else:
            now = next_start
            s = sp
            sp += 1
            next_start = s_start[sp] if sp < n_sess else inf
            events += 1
            cores = rep_cores[s_rep[s]]
            if idle_first:
                idle = [c for c in cores if not njobs[c]]
                pick = idle if idle else cores
            else:
                pick = cores
            c = pick[int(s_u[s] * len(pick))]
            s_core[s] = c
            s_extra[s] = remote_s if s_qsock[s] != core_socket[c] else 0.0
            arrive(c, b_first[s_burst[s]], now, s_extra[s])
    return EngineOutput(
        sent=np.asarray(sent),
        done=np.asarray(done),
        core=np.asarray(core_of, dtype=np.int64),
        busy=np.asarray(busy),
        events=events,
    )
