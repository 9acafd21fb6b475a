//! shrink's native core: the replay engine's hot loop in Rust, driven from
//! shrink/replay/native.py with the schedule the Python side built; and the
//! simulator's event loop (sim.rs), called by shrink/sim/engine.py.

mod awake;
mod engine;
mod http;
mod sim;

use engine::{batch_rows, mono, Engine, Plan, Rows, N_ERRORS, SWEEP_S};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A column of 8-byte numbers from its native-endian bytes (``kind`` names it in errors).
fn words<T>(b: &[u8], name: &str, kind: &str, read: fn([u8; 8]) -> T) -> PyResult<Vec<T>> {
    if !b.len().is_multiple_of(8) {
        return Err(PyValueError::new_err(format!("{name}: not {kind} bytes")));
    }
    Ok(b.chunks_exact(8)
        .map(|c| read(c.try_into().unwrap()))
        .collect())
}

fn f64s(b: &[u8], name: &str) -> PyResult<Vec<f64>> {
    words(b, name, "float64", f64::from_ne_bytes)
}

fn i64s(b: &[u8], name: &str) -> PyResult<Vec<i64>> {
    words(b, name, "int64", i64::from_ne_bytes)
}

fn raw<T>(v: &[T]) -> &[u8] {
    // SAFETY: plain numeric columns viewed as their bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// The finished rows as one bytes object per writer column (then cleared).
fn take_rows<'py>(py: Python<'py>, r: &mut Rows) -> Vec<Bound<'py, PyBytes>> {
    let out = vec![
        PyBytes::new(py, raw(&r.intended)),
        PyBytes::new(py, raw(&r.sent)),
        PyBytes::new(py, raw(&r.first_byte)),
        PyBytes::new(py, raw(&r.done)),
        PyBytes::new(py, raw(&r.status)),
        PyBytes::new(py, raw(&r.nbytes)),
        PyBytes::new(py, raw(&r.cls)),
        PyBytes::new(py, raw(&r.session)),
        PyBytes::new(py, raw(&r.target)),
        PyBytes::new(py, raw(&r.error)),
        PyBytes::new(py, raw(&r.dispatched)),
    ];
    r.clear();
    out
}

/// Replay a schedule (see shrink/replay/native.py for the arguments' meaning).
///
/// Every 100 ms (and at the end) ``on_rows(columns)`` gets the finished rows (a
/// call a batch: more than one when this thread fell behind, else one, maybe empty);
/// it returns True to stop the run (a signal). Returns (requests, pool waits,
/// interrupted, counts): counts are the loop's turns, the waits that slept, socket
/// events, timer arms, connects, sends, the widest wake-up window (us), the loop
/// thread's time on a run queue (us) and involuntary context switches over the run,
/// the time it polled for a due time under pressure (us), and the instant a stop
/// signal's byte stopped it (us from t0; 2**64 - 1: none did).
///
/// ``signal_fd``: the read end of the pipe given to ``signal.set_wakeup_fd`` for the
/// run (-1: none), whose bytes the loop thread reads: one of ``stop_signals`` stops
/// the sends at once, and each byte goes on to ``forward_fd`` (the wake-up descriptor
/// it replaced; -1: none). The stop signals are blocked on the calling thread meanwhile,
/// so that the kernel hands them to the loop thread (running, real-time), whose
/// Python C-level handler writes the pipe at once; Python's own handlers still run on
/// this thread, at its next look. ``may_poll`` false: the loop never waits on the
/// clock (its CPU is the server's), real-time or not.
#[pyfunction]
#[pyo3(signature = (
    open, targets, req_bytes, key_of_row, cls_of_row, head_only_of_key, times, route, rows,
    sessions, burst_off, burst_first, burst_end, burst_think, horizon, timeout, drain,
    max_pool, conns_per_session, conn_per_request, batch, tcodes, ecodes, t0, on_rows,
    signal_fd=-1, stop_signals=Vec::new(), forward_fd=-1, may_poll=true
))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    open: bool,
    targets: Vec<(String, u16)>,
    req_bytes: Vec<Vec<PyBackedBytes>>,
    key_of_row: &[u8],
    cls_of_row: &[u8],
    head_only_of_key: Vec<bool>,
    times: &[u8],
    route: &[u8],
    rows: &[u8],
    sessions: &[u8],
    burst_off: &[u8],
    burst_first: &[u8],
    burst_end: &[u8],
    burst_think: &[u8],
    horizon: f64,
    timeout: f64,
    drain: f64,
    max_pool: usize,
    conns_per_session: usize,
    conn_per_request: bool,
    batch: usize,
    tcodes: Vec<i32>,
    ecodes: Vec<i32>,
    t0: f64,
    on_rows: PyObject,
    signal_fd: i32,
    stop_signals: Vec<u8>,
    forward_fd: i32,
    may_poll: bool,
) -> PyResult<(u64, u64, bool, Vec<u64>)> {
    let mut addrs = Vec::new();
    for (host, port) in &targets {
        let a = (host.as_str(), *port)
            .to_socket_addrs()
            .map_err(|e| PyOSError::new_err(format!("target {host}:{port}: {e}")))?
            .next()
            .ok_or_else(|| PyOSError::new_err(format!("target {host}:{port}: no address")))?;
        addrs.push(a);
    }
    if ecodes.len() != N_ERRORS || tcodes.len() != addrs.len() || req_bytes.len() != addrs.len() {
        return Err(PyValueError::new_err(
            "codes or request bytes do not match the targets",
        ));
    }
    let plan = Plan {
        open,
        addrs,
        req_bytes,
        key_of_row: i64s(key_of_row, "key_of_row")?,
        cls_of_row: cls_of_row.iter().map(|&b| b as i8).collect(),
        head_only_of_key,
        times: f64s(times, "times")?,
        route: i64s(route, "route")?,
        rows: i64s(rows, "rows")?,
        sessions: i64s(sessions, "sessions")?,
        burst_off: i64s(burst_off, "burst_off")?,
        burst_first: i64s(burst_first, "burst_first")?,
        burst_end: i64s(burst_end, "burst_end")?,
        burst_think: f64s(burst_think, "burst_think")?,
        horizon,
        timeout,
        drain,
        max_pool: max_pool.max(1),
        conns_per_session: conns_per_session.max(1),
        conn_per_request,
        batch: batch.max(1),
        tcodes,
        ecodes: ecodes.try_into().unwrap(),
        may_poll,
    };
    let room = batch_rows(&plan);
    let mut eng = Engine::new(plan, t0).map_err(|e| PyOSError::new_err(e.to_string()))?;
    let stops = if signal_fd >= 0 {
        eng.watch_signals(signal_fd, stop_signals.clone(), forward_fd);
        stop_signals
    } else {
        Vec::new()
    };
    let shared = Arc::new(Shared::default());
    shared
        .spare
        .lock()
        .unwrap()
        .extend((0..SPARES).map(|_| Rows::with_room(room)));
    let sh = shared.clone();
    // The loop runs on its own thread (same CPU and policy, inherited) so that
    // Python's work on the rows (a Parquet flush takes milliseconds) never holds
    // up a send; this thread only moves rows and watches for signals.
    let old_mask = block_signals(&stops);
    let handle = std::thread::Builder::new()
        .name("shrink-core".into())
        .spawn(move || engine_thread(eng, &sh, &stops))
        .map_err(|e| {
            restore_signals(old_mask);
            PyOSError::new_err(e.to_string())
        })?;
    let old_sched = lower_priority();
    let mut pending_err: Option<PyErr> = None;
    let mut result = None;
    loop {
        let finished = py.allow_threads(|| {
            let until = mono() + SWEEP_S;
            // (a loop thread that panicked never says done: is_finished covers it)
            while mono() < until {
                if shared.done.load(Ordering::Acquire) || handle.is_finished() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            shared.done.load(Ordering::Acquire) || handle.is_finished()
        });
        if finished {
            result = Some(());
        }
        // A signal's Python handler runs here; without one, Ctrl-C raises: stop
        // the run, keep its rows, and raise once they are handed over.
        if let Err(e) = py.check_signals() {
            shared.stop.store(true, Ordering::Release);
            pending_err.get_or_insert(e);
        }
        // (only a swap under the lock: the loop thread never waits while this
        // thread, which the loop thread preempts, builds the columns)
        let batches = std::mem::take(&mut *shared.full.lock().unwrap());
        if batches.is_empty() {
            let cols = take_rows(py, &mut Rows::default());
            deliver(py, &on_rows, cols, &shared, &mut pending_err);
        }
        for mut batch in batches {
            let cols = take_rows(py, &mut batch);
            // The emptied batch goes back to the loop thread, memory and all.
            let mut spare = shared.spare.lock().unwrap();
            if spare.len() < SPARES {
                spare.push(batch);
            }
            drop(spare); // (a batch past SPARES is freed here, on this thread)
            deliver(py, &on_rows, cols, &shared, &mut pending_err);
        }
        if result.is_some() {
            break;
        }
    }
    let out = py.allow_threads(|| handle.join());
    restore_priority(old_sched);
    // (a stop signal held meanwhile is handed to this thread now: its C-level
    // handler runs, and Python's at the caller's next look)
    restore_signals(old_mask);
    let out = out.map_err(|_| PyOSError::new_err("the native replay loop panicked"))?;
    if let Some(e) = pending_err {
        return Err(e);
    }
    Ok(out)
}

/// Spinners keeping the calling thread's CPUs awake (native/src/awake.rs) for a run
/// the caller starts next; ``stop()`` ends them. Forked before the run's zero is
/// chosen: a fork copies the page tables of this process (tens of ms for a heap of
/// gigabytes in small objects) and holds malloc's locks meanwhile, which inside a run
/// ate its 50 ms start lead and stalled its loop thread (first sends 70-90 ms late).
#[pyclass(module = "shrink_core")]
struct Spinners(Mutex<Option<awake::Awake>>);

#[pymethods]
impl Spinners {
    /// End them: (the spinners that were spinning, their CPU seconds together, the
    /// seconds they saw this process stopped, during which they slept).
    /// Without the GIL: a spinner killed on a loaded CPU (idle priority) can take
    /// seconds to die, and Python's other threads (the RunLog's writer, the stop
    /// watcher) would wait for it.
    fn stop(&self, py: Python<'_>) -> (usize, f64, f64) {
        let spinners = self.0.lock().unwrap().take();
        match spinners {
            Some(s) => py.allow_threads(move || s.stop()),
            None => (0, 0.0, 0.0),
        }
    }
}

/// Start a spinner on each CPU of the calling thread's affinity (see :class:`Spinners`),
/// each moving itself first into the cgroup whose cgroup.procs file is `group_procs`
/// when given (one that cannot exits at once and is not counted).
#[pyfunction]
#[pyo3(signature = (group_procs=None))]
fn keep_awake(group_procs: Option<&str>) -> PyResult<Spinners> {
    let procs = match group_procs {
        Some(p) => Some(
            std::ffi::CString::new(p).map_err(|_| PyValueError::new_err("a NUL in the path"))?,
        ),
        None => None,
    };
    // (forked off SCHED_FIFO, the caller's priority given back after: a spinner never
    // starts above normal)
    let old_sched = lower_priority();
    let spinners = awake::Awake::start(procs.as_deref());
    restore_priority(old_sched);
    Ok(Spinners(Mutex::new(Some(spinners))))
}

/// Hands ``on_rows`` a batch's columns; an error or a True (a signal) stops the run.
fn deliver(
    py: Python<'_>,
    on_rows: &PyObject,
    cols: Vec<Bound<'_, PyBytes>>,
    shared: &Shared,
    pending_err: &mut Option<PyErr>,
) {
    match on_rows.call1(py, (cols,)) {
        Ok(v) => {
            if v.extract::<bool>(py).unwrap_or(false) {
                shared.stop.store(true, Ordering::Release);
            }
        }
        Err(e) => {
            shared.stop.store(true, Ordering::Release);
            pending_err.get_or_insert(e);
        }
    }
}

/// Emptied batches kept for the loop thread to fill again, at most.
const SPARES: usize = 4;

#[derive(Default)]
struct Shared {
    /// Batches of finished rows, oldest first, for the Python thread.
    full: Mutex<Vec<Rows>>,
    /// Batches the Python thread emptied, their memory kept, for the loop thread.
    spare: Mutex<Vec<Rows>>,
    stop: AtomicBool,
    done: AtomicBool,
}

/// Finished rows move, whole, to the queue the Python thread takes from; false when
/// that thread holds the queue (`wait` false): the rows stay for the next try.
///
/// The loop thread neither copies rows nor, while the Python thread keeps up,
/// allocates: a batch appended to one that thread had not yet taken (the columns
/// grown, copied, new pages faulted in) held up the sends due by 0.2-1.2 ms on a VM,
/// and a fresh batch's allocation 0.05-0.23 ms. It writes on into a batch made ready
/// before the run or emptied and given back by the Python thread, else into one
/// reserved at this batch's size (growing from nothing would copy at every doubling).
fn hand_over(sh: &Shared, rows: &mut Rows, wait: bool) -> bool {
    if rows.intended.is_empty() {
        return true;
    }
    let mut full = if wait {
        sh.full.lock().unwrap()
    } else {
        match sh.full.try_lock() {
            Ok(f) => f,
            Err(_) => return false,
        }
    };
    let n = rows.intended.len();
    let next = sh
        .spare
        .try_lock()
        .ok()
        .and_then(|mut s| s.pop())
        .unwrap_or_default();
    full.push(std::mem::replace(rows, next));
    drop(full);
    rows.reserve(n);
    true
}

/// The signals `sigs` as a set.
fn sig_set(sigs: &[u8]) -> libc::sigset_t {
    // SAFETY: a local signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s as i32);
        }
        set
    }
}

/// Blocks `sigs` on the calling thread; returns the mask to restore (None: none blocked).
fn block_signals(sigs: &[u8]) -> Option<libc::sigset_t> {
    if sigs.is_empty() {
        return None;
    }
    let set = sig_set(sigs);
    // SAFETY: this thread's mask, with live sets.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        (libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) == 0).then_some(old)
    }
}

fn restore_signals(old: Option<libc::sigset_t>) {
    if let Some(old) = old {
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
}

fn engine_thread(mut eng: Engine, sh: &Shared, stops: &[u8]) -> (u64, u64, bool, Vec<u64>) {
    // Without a signal pipe, signals belong to Python's main thread; with one, the stop
    // signals come here (the caller blocks them), where Python's C-level handler
    // writes the pipe this loop watches while it runs.
    // SAFETY: local signal sets, applied to this thread only.
    unsafe {
        let set = sig_set(&[libc::SIGINT as u8, libc::SIGTERM as u8]);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let set = sig_set(stops);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    // At normal priority a timed wake-up may come up to the thread's timer slack
    // late (50 us by default), on top of the CPU's own delay; a real-time thread
    // has none. (A failure leaves the default.)
    // SAFETY: prctl on the calling thread with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    eng.preopen();
    let sched0 = thread_sched();
    let mut next_sweep = mono() + SWEEP_S;
    loop {
        if sh.stop.load(Ordering::Acquire) && !eng.interrupted {
            eng.interrupt();
        }
        let left = next_sweep - mono();
        if left <= 0.0 {
            eng.expire(mono() - eng.t0);
            // Never wait on the Python thread here: it runs below this thread's
            // priority on the same CPU, and on a busy machine a wait for it (it was
            // preempted holding the lock) stalled the loop for tens of ms. Rows
            // it holds then go at the next sweep.
            hand_over(sh, &mut eng.rows, false);
            next_sweep = mono() + SWEEP_S;
            continue;
        }
        if !eng.turn(left) {
            break;
        }
    }
    hand_over(sh, &mut eng.rows, true);
    sh.done.store(true, Ordering::Release);
    let sched1 = thread_sched();
    // (a count added later goes last: an older core's counts are then a prefix, which
    // the Python side reads as they are and leaves the rest out)
    let mut counts = eng.counts[..7].to_vec();
    for i in 0..2 {
        counts.push(match (sched0[i], sched1[i]) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => UNKNOWN,
        });
    }
    counts.push(eng.counts[7]);
    // when a stop signal's byte stopped the loop (us from t0; UNKNOWN: none did)
    counts.push(if eng.signal_stop.is_finite() {
        (eng.signal_stop.max(0.0) * 1e6) as u64
    } else {
        UNKNOWN
    });
    (eng.recorded, eng.pool_waits, eng.interrupted, counts)
}

/// A count /proc did not give (the Python side drops it).
const UNKNOWN: u64 = u64::MAX;

/// The calling thread's time waiting on a run queue (us) and its involuntary context
/// switches, as the kernel counts them (None where /proc does not say). A late send
/// whose loop thread waited on the run queue was held up by another thread of this
/// machine; one whose thread did not wait was held up below the scheduler: the
/// kernel's own work, or, on a VM, the host not running the virtual CPU.
fn thread_sched() -> [Option<u64>; 2] {
    let delay = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|ns| ns / 1000);
    let switches = std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
    [delay, switches]
}

/// Under SCHED_FIFO/RR this thread steps down to SCHED_OTHER for the run, so that
/// it never delays the loop's thread (same policy, same CPU) while Python works.
fn lower_priority() -> Option<(i32, libc::sched_param)> {
    // SAFETY: scheduler calls on the calling thread with a live param.
    unsafe {
        let policy = libc::sched_getscheduler(0);
        if policy != libc::SCHED_FIFO && policy != libc::SCHED_RR {
            return None;
        }
        let mut old: libc::sched_param = std::mem::zeroed();
        libc::sched_getparam(0, &mut old);
        let other = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_OTHER, &other) != 0 {
            return None;
        }
        Some((policy, old))
    }
}

fn restore_priority(old: Option<(i32, libc::sched_param)>) {
    if let Some((policy, param)) = old {
        // SAFETY: as above; a failure leaves SCHED_OTHER, which is harmless.
        unsafe { libc::sched_setscheduler(0, policy, &param) };
    }
}

/// The simulator's event loop (shrink/sim/engine.py's ``simulate``, which gives the
/// arguments' meaning): per-request, per-burst, per-session and per-core columns as
/// native-endian float64 or int64 bytes (``is_dyn`` as int64). Returns (sent, done,
/// core, busy) as bytes of the same kinds, and the number of events.
#[pyfunction]
#[pyo3(signature = (
    static_s, dyn_s, is_dyn, req_burst, req_session, burst_first, burst_end, burst_think,
    burst_next, sess_start, sess_first_burst, sess_replica, sess_queue_socket, sess_accept_u,
    static_factor, stall_s, core_socket, replica_cores, speed, remote_s, horizon, w0, w1,
    idle_first
))]
#[allow(clippy::too_many_arguments)]
fn simulate<'py>(
    py: Python<'py>,
    static_s: &[u8],
    dyn_s: &[u8],
    is_dyn: &[u8],
    req_burst: &[u8],
    req_session: &[u8],
    burst_first: &[u8],
    burst_end: &[u8],
    burst_think: &[u8],
    burst_next: &[u8],
    sess_start: &[u8],
    sess_first_burst: &[u8],
    sess_replica: &[u8],
    sess_queue_socket: &[u8],
    sess_accept_u: &[u8],
    static_factor: &[u8],
    stall_s: &[u8],
    core_socket: &[u8],
    replica_cores: Vec<Vec<i64>>,
    speed: f64,
    remote_s: f64,
    horizon: f64,
    w0: f64,
    w1: f64,
    idle_first: bool,
) -> PyResult<(Vec<Bound<'py, PyBytes>>, i64)> {
    let inp = sim::Input {
        static_s: f64s(static_s, "static_s")?,
        dyn_s: f64s(dyn_s, "dyn_s")?,
        is_dyn: i64s(is_dyn, "is_dyn")?.iter().map(|&d| d != 0).collect(),
        req_burst: i64s(req_burst, "req_burst")?,
        req_session: i64s(req_session, "req_session")?,
        b_first: i64s(burst_first, "burst_first")?,
        b_end: i64s(burst_end, "burst_end")?,
        b_think: f64s(burst_think, "burst_think")?,
        b_next: i64s(burst_next, "burst_next")?,
        s_start: f64s(sess_start, "sess_start")?,
        s_burst: i64s(sess_first_burst, "sess_first_burst")?,
        s_rep: i64s(sess_replica, "sess_replica")?,
        s_qsock: i64s(sess_queue_socket, "sess_queue_socket")?,
        s_u: f64s(sess_accept_u, "sess_accept_u")?,
        static_factor: f64s(static_factor, "static_factor")?,
        stall_s: f64s(stall_s, "stall_s")?,
        core_socket: i64s(core_socket, "core_socket")?,
        replica_cores,
        speed,
        remote_s,
        horizon,
        w0,
        w1,
        idle_first,
    };
    let out = py.allow_threads(|| sim::simulate(&inp));
    let cols = vec![
        PyBytes::new(py, raw(&out.sent)),
        PyBytes::new(py, raw(&out.done)),
        PyBytes::new(py, raw(&out.core)),
        PyBytes::new(py, raw(&out.busy)),
    ];
    Ok((cols, out.events))
}

/// For tests: what one connection's parser makes of a server's `reads` (one bytes
/// object a read), with a request sent when the connection opens and the next one
/// (`head_only[i]` for request i) as soon as one is answered and the connection
/// stays open; a read with no request in flight closes it (out of step), as the
/// engine does. `end`: how the server ends, "eof", "reset" or "hold" (the
/// connection stays open: the request in flight would time out). Returns each
/// request's (outcome, status, body bytes) -- outcome "ok", "bad-response",
/// "closed", "reset", "timeout" or "retry" -- and whether the connection was
/// left open. The engine's reads, out-of-step rule and end of a connection, with
/// the engine's parser and read buffer.
#[pyfunction]
fn parse_stream(
    reads: Vec<PyBackedBytes>,
    head_only: Vec<bool>,
    end: &str,
) -> (Vec<(&'static str, i32, i64)>, bool) {
    let mut p = http::Parser::new();
    let mut kept: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let mut in_flight = !head_only.is_empty();
    let mut got_bytes = false;
    if in_flight {
        p.reset(head_only[0]);
    }
    for data in &reads {
        if data.is_empty() {
            continue;
        }
        if !in_flight {
            return (out, false); // out of step: closed
        }
        got_bytes = true;
        match p.feed_read(&mut kept, data) {
            http::Outcome::More(_) => continue,
            http::Outcome::Bad => {
                out.push(("bad-response", p.status, -1));
                return (out, false);
            }
            http::Outcome::Complete => {
                kept.clear();
                out.push(("ok", p.status, p.nbytes));
                if p.close_after {
                    return (out, false);
                }
                in_flight = out.len() < head_only.len();
                got_bytes = false;
                if in_flight {
                    p.reset(head_only[out.len()]);
                }
            }
        }
    }
    if !in_flight {
        return (out, end == "hold");
    }
    let lost = match end {
        "hold" => "timeout",
        _ if p.st == http::St::UntilClose => "ok",
        _ if !got_bytes && !out.is_empty() => "retry",
        "reset" => "reset",
        _ => "closed",
    };
    let status = match lost {
        "ok" | "bad-response" => p.status,
        _ => 0,
    };
    let nbytes = if lost == "ok" { p.nbytes } else { -1 };
    out.push((lost, status, nbytes));
    (out, false)
}

#[pymodule]
fn shrink_core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(keep_awake, m)?)?;
    // keep_awake takes the cgroup.procs file of a group for its spinners
    m.add("AWAKE_IN_GROUP", true)?;
    // run takes signal_fd, stop_signals, forward_fd and may_poll
    m.add("SIGNAL_FD", true)?;
    m.add_class::<Spinners>()?;
    m.add_function(wrap_pyfunction!(simulate, m)?)?;
    m.add_function(wrap_pyfunction!(parse_stream, m)?)?;
    // the parser frames answers as RFC 9112 section 6.3 says, refuses the field lines
    // of 5.1 and chunked twice (6.1), and reads Connection as tokens (tests skip an
    // older core)
    m.add("FRAMING", "rfc9112-fields")?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
