//! The replay engine's hot loop: one thread, epoll, non-blocking sockets, a timerfd.
//!
//! A port of shrink/replay/engine.py, _conn.py and _owners.py with the same rules
//! (httperf --wsesslog sessions, open-mode pools, retries, timeouts, cut/unsent
//! rows); the Python side builds the schedule and the request bytes and receives
//! the rows every 100 ms (see shrink/replay/native.py).

use crate::http::{Outcome, Parser, St};
use pyo3::pybacked::PyBackedBytes;
use std::collections::{BinaryHeap, VecDeque};

pub const INF: f64 = f64::INFINITY;
const NAN: f64 = f64::NAN;
const TIMER_TOKEN: u64 = u64::MAX;
/// The token of the pipe Python's C-level signal handler writes a signal's number to
/// (``signal.set_wakeup_fd``; see Engine::watch_signals).
const SIGNAL_TOKEN: u64 = u64::MAX - 1;
const READ_CHUNK: usize = 65536;
// SO_TIMESTAMPNS (asm-generic): the kernel stamps each received segment (CLOCK_REALTIME).
const SO_TIMESTAMPNS: i32 = 35;
/// In open mode a wait shorter than this sleeps on the timer alone: responses are
/// read at the next due time, timed by the kernel's receive stamps, which saves a
/// wake-up per request (tens of microseconds of CPU on a virtual machine).
const TIMER_ONLY_MAX: f64 = 2e-3;
/// Wake-ups at most this often: at high rates one wake-up sends every request
/// then due (each at most this late), rather than one wake-up per request. On a
/// 2-vCPU VM a wake-up cost ~20 us of CPU: with 60 us, 50,000 req/s took 70% of
/// a core with a send-lag p99 of 60 us (2026-11-24, busy machine).
const COALESCE: f64 = 60e-6;
/// Under load the window widens (up to this), so that fewer wake-ups (each costs
/// ~13 us of CPU, plus the IPI that wakes a server idle since the last batch)
/// leave the core for the requests: with 60 us, the loop's own wake-ups took
/// ~35% of a core and capped it at ~80,000 req/s (2026-11-24, busy machine).
const COALESCE_MAX: f64 = 400e-6;
/// Session mode widens less: a response read late delays the request that
/// follows it, and that delay is in the latency (from its intended time, the
/// response's arrival). With 400 us, 40,000 req/s of sessions took 0.79 of a core
/// (0.90 with 60 us) but the latency p50 rose from 0.06 to 0.24 ms.
const SESSION_COALESCE_MAX: f64 = 120e-6;
/// The loop's CPU share (its thread's CPU time over wall time, every 5 ms, less the
/// time it waited on the clock) above which it is under pressure, and below which
/// the window narrows back. A real-time loop under pressure waits out its window on
/// the clock; the window widens only when it found no time to (or the loop is not
/// real-time).
const BUSY_HIGH: f64 = 0.85;
const BUSY_LOW: f64 = 0.70;
/// Under pressure a wake-up costs more than it saves, and a widened window delays
/// each request by up to its width: at 112,000/s on a 2-vCPU VM the window widened
/// to 146-400 us and the send-lag p99 was 0.15-0.21 ms (one run 0.47), over 0.1 ms
/// in 30 of 30 runs. A real-time loop under pressure waits out its window on the
/// clock instead, while its thread's CPU time since the last look leaves at least
/// this share of the time to its CPU's other work: the RunLog's collection
/// (SCHED_OTHER, the same CPU), the kernel's threads, and the margin the kernel's
/// RT throttling needs (it stops real-time threads for 50 ms once they took 95% of
/// a second). Paired runs at 112,000/s (2026-11-29, bench/RESULTS.md): with 0.07,
/// 8 of 10 within 0.1 ms; with 0.1, 6 of 10; a budget of 0.1 of the wall clock
/// around the sleeps (left 5-6% off the CPU, a wake-up's kernel work counted as
/// asleep) hit the RT throttling's 50 ms stops in 6 of 10 runs of a later hour.
const SLEEP_SHARE_MIN: f64 = 0.07;
const ADAPT_EVERY: f64 = 5e-3;
/// Connections opened ahead of the start (open mode): as many as requests are due
/// in the schedule's first PREOPEN_SPAN, at most PREOPEN_MAX per target.
const PREOPEN_SPAN: f64 = 1e-3;
const PREOPEN_MAX: usize = 256;
/// Connections being opened at once, at most (open mode; see connects_capped).
const CONNECT_CAP: u32 = 16;
/// A due time this close is polled for rather than slept for.
const SPIN: f64 = 5e-6;
/// While it handles a batch of socket events, the loop sends what fell due after
/// this many of them.
const DISPATCH_EVERY: usize = 8;

/// The loop hands its finished rows over (and times out stuck requests) this often.
pub const SWEEP_S: f64 = 0.1;
/// Rows a batch has room for, made ready before the run: a sweep's worth at the
/// schedule's mean rate, with half again to spare, within these bounds.
const BATCH_ROWS_MIN: usize = 1024;
const BATCH_ROWS_MAX: usize = 65536;

/// Rows a batch should have room for (see BATCH_ROWS_MIN).
pub fn batch_rows(plan: &Plan) -> usize {
    let requests: usize = if plan.open {
        plan.times.len()
    } else {
        let sizes = plan.burst_first.iter().zip(&plan.burst_end);
        sizes.map(|(a, b)| (b - a).max(0) as usize).sum()
    };
    let first = plan.times.first().copied().unwrap_or(0.0);
    let last = plan.times.last().copied().unwrap_or(0.0);
    let span = (last - first).max(SWEEP_S);
    let n = requests as f64 / span * SWEEP_S * 1.5;
    (n.min(BATCH_ROWS_MAX as f64) as usize).max(BATCH_ROWS_MIN)
}

/// Error names, in the order the Python side passes their codes.
pub const E_REFUSED: usize = 0;
pub const E_CONNECT: usize = 1;
pub const E_RESET: usize = 2;
pub const E_CLOSED: usize = 3;
pub const E_TIMEOUT: usize = 4;
pub const E_BAD: usize = 5;
pub const E_CUT: usize = 6;
pub const E_UNSENT: usize = 7;
/// No file descriptor for a connection (the generator's open-file limit): not the server's.
pub const E_FILES: usize = 8;
pub const N_ERRORS: usize = 9;

/// The time of ``clock`` in seconds.
fn clock_s(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

pub fn mono() -> f64 {
    clock_s(libc::CLOCK_MONOTONIC)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Everything the engine needs, built by the Python adapter from the Schedule.
pub struct Plan {
    pub open: bool,
    pub addrs: Vec<std::net::SocketAddr>,
    // Per target, per request key: the Python bytes themselves, not a copy. A Vec<u8>
    // was filled a byte at a time (pyo3 takes any sequence so), 1 s per 80 MiB body
    // after the run's clock had started, and the copy was the body's size again.
    pub req_bytes: Vec<Vec<PyBackedBytes>>,
    pub key_of_row: Vec<i64>,
    pub cls_of_row: Vec<i8>,
    pub head_only_of_key: Vec<bool>,
    pub times: Vec<f64>,     // open: request times; session: session starts
    pub route: Vec<i64>,     // per unit (request or session): target index
    pub rows: Vec<i64>,      // open mode
    pub sessions: Vec<i64>,  // open: session of each request; session mode: session ids
    pub burst_off: Vec<i64>, // session mode: bursts of session j are burst_off[j]..burst_off[j+1]
    pub burst_first: Vec<i64>,
    pub burst_end: Vec<i64>,
    pub burst_think: Vec<f64>,
    pub horizon: f64,
    pub timeout: f64,
    pub drain: f64,
    pub max_pool: usize,
    pub conns_per_session: usize,
    pub conn_per_request: bool,
    pub batch: usize,
    pub tcodes: Vec<i32>,
    pub ecodes: [i32; N_ERRORS],
    /// False: the loop never waits on the clock, even real-time (its CPU is the
    /// server's: that time would be taken from the server).
    pub may_poll: bool,
}

/// Columns of finished rows, in the writer's order (shrink/replay/writer.py).
#[derive(Default)]
pub struct Rows {
    pub intended: Vec<f64>,
    pub sent: Vec<f64>,
    pub first_byte: Vec<f64>,
    pub done: Vec<f64>,
    pub status: Vec<i32>,
    pub nbytes: Vec<i64>,
    pub cls: Vec<i8>,
    pub session: Vec<i64>,
    pub target: Vec<i32>,
    pub error: Vec<i32>,
    pub dispatched: Vec<f64>,
}

impl Rows {
    /// Room for ``n`` more rows in every column (address space only: its pages are
    /// touched as the rows come).
    pub fn reserve(&mut self, n: usize) {
        self.intended.reserve(n);
        self.sent.reserve(n);
        self.first_byte.reserve(n);
        self.done.reserve(n);
        self.status.reserve(n);
        self.nbytes.reserve(n);
        self.cls.reserve(n);
        self.session.reserve(n);
        self.target.reserve(n);
        self.error.reserve(n);
        self.dispatched.reserve(n);
    }

    /// Empty columns with room for ``n`` rows, their pages touched now: the loop
    /// then writes rows without a page fault (on a VM a fault's exit is microseconds).
    pub fn with_room(n: usize) -> Rows {
        let mut r = Rows::default();
        r.intended.resize(n, 0.0);
        r.sent.resize(n, 0.0);
        r.first_byte.resize(n, 0.0);
        r.done.resize(n, 0.0);
        r.status.resize(n, 0);
        r.nbytes.resize(n, 0);
        r.cls.resize(n, 0);
        r.session.resize(n, 0);
        r.target.resize(n, 0);
        r.error.resize(n, 0);
        r.dispatched.resize(n, 0.0);
        r.clear();
        r
    }

    /// Empty every column, keeping its memory.
    pub fn clear(&mut self) {
        self.intended.clear();
        self.sent.clear();
        self.first_byte.clear();
        self.done.clear();
        self.status.clear();
        self.nbytes.clear();
        self.cls.clear();
        self.session.clear();
        self.target.clear();
        self.error.clear();
        self.dispatched.clear();
    }
}

struct Req {
    row: i64,
    session: i64,
    tidx: u32,
    intended: f64,
    sent: f64,
    first_byte: f64,
    dispatched: f64,
    tries: u8,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Pool(u32),
    Session(u32, u32), // slot, generation
}

struct Conn {
    gen: u32,
    fd: i32,
    alive: bool,
    connected: bool,
    connecting: bool, // counted in Engine::connecting
    owner: Owner,
    tidx: u32,
    req: Option<u32>,
    pending: Option<u32>,
    served: u32,
    p: Parser,
    buf: Vec<u8>,
    // The request whose rest waits for the socket to drain: (its key, bytes sent). The
    // rest was copied out and each send's part drained off its front: an 80 MB body
    // took tens of ms of copying inside the loop.
    out: Option<(usize, usize)>,
}

struct Sess {
    gen: u32,
    live: bool,
    sid: i64,
    tidx: u32,
    b0: usize,
    b1: usize,
    bi: usize,
    conns: Vec<Option<u64>>,
    q_next: i64,
    q_end: i64,
    outstanding: u32,
}

struct Pool {
    idle: Vec<u64>,
    n: usize,
    waiting: VecDeque<u32>,
}

#[derive(PartialEq)]
struct Ev {
    t: f64,
    seq: u64,
    slot: u32,
    gen: u32,
}

impl Eq for Ev {}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // a min-heap on (t, seq)
        o.t.partial_cmp(&self.t)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(o.seq.cmp(&self.seq))
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

fn cref(idx: u32, gen: u32) -> u64 {
    ((gen as u64) << 32) | idx as u64
}

pub struct Engine {
    pub plan: Plan,
    pub t0: f64,
    pub horizon: f64,
    epfd: i32,
    tfd: i32,
    conns: Vec<Conn>,
    free_conns: Vec<u32>,
    to_free: Vec<u32>,
    reqs: Vec<Req>,
    free_reqs: Vec<u32>,
    sess: Vec<Sess>,
    free_sess: Vec<u32>,
    pools: Vec<Pool>,
    heap: BinaryHeap<Ev>,
    seq: u64,
    next_i: usize,
    pub inflight: i64,
    pub sessions_live: i64,
    pub pool_waits: u64,
    pub recorded: u64,
    pub draining: bool,
    pub interrupted: bool,
    deferred: Vec<(u64, i32, bool)>, // (conn, errno, connecting): failures seen inside a call
    armed: f64,
    early_until: f64,
    scratch: Vec<u8>,
    pub rows: Rows,
    pub signalled: bool,
    /// When a stop signal's byte stopped the run (seconds from t0; NaN: none did).
    pub signal_stop: f64,
    events: Vec<libc::epoll_event>,
    tep: i32,        // an epoll set holding the timerfd alone
    connecting: u32, // connections whose connect is under way
    real_off: f64,   // CLOCK_REALTIME - CLOCK_MONOTONIC, for the kernel's receive stamps
    last_wake: f64,
    control: Vec<u8>, // recvmsg's control buffer
    coalesce: f64,
    adapt_at: f64, // when the window was last adapted (monotonic)
    cpu_at: f64,   // the thread's CPU time then
    finish_t: f64, // the receive time of the response being handled (else NaN)
    found: bool,   // the last poll of the sockets found events
    spin: f64,
    may_poll: bool,     // SCHED_FIFO/RR: the loop has its CPU to itself (see polls)
    sig_fd: i32,        // the signal pipe's read end (-1: none)
    sig_stops: Vec<u8>, // the signal numbers that stop the run
    sig_forward: i32,   // where the bytes read from it go on to (-1: nowhere)
    pressure: bool,     // the loop was busy past BUSY_HIGH: see SLEEP_SHARE_MIN
    spun: f64,          // time spent waiting out a window on the clock since adapt_at
    /// turns, waits that slept, events, timer arms, connects, sends, the widest window
    /// (us), the time spent waiting out windows on the clock under pressure (us)
    pub counts: [u64; 8],
}

impl Drop for Engine {
    fn drop(&mut self) {
        for c in &self.conns {
            if c.fd >= 0 {
                // SAFETY: we own these descriptors.
                unsafe { libc::close(c.fd) };
            }
        }
        unsafe {
            libc::close(self.tfd);
            libc::close(self.epfd);
            libc::close(self.tep);
        }
    }
}

impl Engine {
    pub fn new(plan: Plan, t0: f64) -> std::io::Result<Engine> {
        let batch_rows = batch_rows(&plan);
        // SAFETY: plain syscalls; results checked.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let tfd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if tfd < 0 {
            unsafe { libc::close(epfd) };
            return Err(std::io::Error::last_os_error());
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: TIMER_TOKEN,
        };
        unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, tfd, &mut ev) };
        let tep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if tep < 0 {
            unsafe {
                libc::close(tfd);
                libc::close(epfd);
            }
            return Err(std::io::Error::last_os_error());
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: TIMER_TOKEN,
        };
        unsafe { libc::epoll_ctl(tep, libc::EPOLL_CTL_ADD, tfd, &mut ev) };
        let n = plan.addrs.len();
        let horizon = plan.horizon;
        let may_poll = plan.may_poll && realtime();
        Ok(Engine {
            plan,
            t0,
            horizon,
            epfd,
            tfd,
            conns: Vec::new(),
            free_conns: Vec::new(),
            to_free: Vec::new(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            sess: Vec::new(),
            free_sess: Vec::new(),
            pools: (0..n)
                .map(|_| Pool {
                    idle: Vec::new(),
                    n: 0,
                    waiting: VecDeque::new(),
                })
                .collect(),
            heap: BinaryHeap::new(),
            seq: 0,
            next_i: 0,
            inflight: 0,
            sessions_live: 0,
            pool_waits: 0,
            recorded: 0,
            draining: false,
            interrupted: false,
            deferred: Vec::new(),
            armed: INF,
            early_until: 0.0,
            scratch: vec![0u8; READ_CHUNK],
            rows: Rows::with_room(batch_rows),
            signalled: false,
            signal_stop: NAN,
            counts: [0; 8],
            tep,
            connecting: 0,
            real_off: real_offset(),
            last_wake: 0.0,
            coalesce: COALESCE,
            adapt_at: 0.0,
            cpu_at: 0.0,
            finish_t: NAN,
            found: false,
            control: vec![0u8; 128],
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            spin: SPIN,
            may_poll,
            sig_fd: -1,
            sig_stops: Vec::new(),
            sig_forward: -1,
            pressure: false,
            spun: 0.0,
        })
    }

    #[inline]
    fn now(&self) -> f64 {
        mono() - self.t0
    }

    // bookkeeping -------------------------------------------------------------
    fn new_req(&mut self, row: i64, session: i64, tidx: u32, intended: f64) -> u32 {
        self.inflight += 1;
        let r = Req {
            row,
            session,
            tidx,
            intended,
            sent: NAN,
            first_byte: NAN,
            dispatched: NAN,
            tries: 0,
        };
        if let Some(i) = self.free_reqs.pop() {
            self.reqs[i as usize] = r;
            i
        } else {
            self.reqs.push(r);
            (self.reqs.len() - 1) as u32
        }
    }

    /// One finished (or failed) request's row; frees it and returns its trace row.
    fn record(&mut self, rid: u32, status: i32, nbytes: i64, done: f64, err: Option<usize>) -> i64 {
        self.inflight -= 1;
        self.recorded += 1;
        let r = &self.reqs[rid as usize];
        let o = &mut self.rows;
        o.intended.push(r.intended);
        o.sent.push(r.sent);
        o.first_byte.push(r.first_byte);
        o.done.push(done);
        o.status.push(status);
        o.nbytes.push(nbytes);
        o.cls.push(self.plan.cls_of_row[r.row as usize]);
        o.session.push(r.session);
        o.target.push(self.plan.tcodes[r.tidx as usize]);
        o.error.push(err.map(|e| self.plan.ecodes[e]).unwrap_or(0));
        o.dispatched.push(r.dispatched);
        let row = r.row;
        self.free_reqs.push(rid);
        row
    }

    // connections --------------------------------------------------------------
    fn conn_alive(&self, c: u64) -> bool {
        let i = (c & 0xFFFF_FFFF) as usize;
        i < self.conns.len() && self.conns[i].gen == (c >> 32) as u32 && self.conns[i].alive
    }

    fn open_conn(&mut self, owner: Owner, tidx: u32) -> u64 {
        let idx = match self.free_conns.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Conn {
                    gen: 0,
                    fd: -1,
                    alive: false,
                    connected: false,
                    connecting: false,
                    owner,
                    tidx,
                    req: None,
                    pending: None,
                    served: 0,
                    p: Parser::new(),
                    buf: Vec::new(),
                    out: None,
                });
                (self.conns.len() - 1) as u32
            }
        };
        let c = &mut self.conns[idx as usize];
        c.gen = c.gen.wrapping_add(1);
        c.alive = true;
        c.connected = false;
        c.owner = owner;
        c.tidx = tidx;
        c.req = None;
        c.pending = None;
        c.served = 0;
        c.buf.clear();
        c.out = None;
        let r = cref(idx, c.gen);
        let addr = self.plan.addrs[tidx as usize];
        let (fd, rc, err) = connect_nonblocking(&addr);
        self.counts[4] += 1;
        c.fd = fd;
        if fd < 0 || (rc < 0 && err != libc::EINPROGRESS) {
            self.deferred
                .push((r, if fd < 0 { errno() } else { err }, true));
            return r;
        }
        let events = if rc == 0 {
            libc::EPOLLIN
        } else {
            libc::EPOLLOUT
        };
        if rc == 0 {
            c.connected = true;
        } else {
            c.connecting = true;
            self.connecting += 1;
        }
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: r,
        };
        // SAFETY: fd is ours and open.
        unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        r
    }

    fn submit(&mut self, c: u64, rid: u32) {
        let now = self.now();
        let r = &mut self.reqs[rid as usize];
        if r.dispatched.is_nan() {
            r.dispatched = now;
        }
        let ci = (c & 0xFFFF_FFFF) as usize;
        if self.conns[ci].connected {
            self.send(ci, rid);
        } else {
            self.conns[ci].pending = Some(rid);
        }
    }

    fn send(&mut self, ci: usize, rid: u32) {
        let row = self.reqs[rid as usize].row as usize;
        let key = self.plan.key_of_row[row] as usize;
        let head_only = self.plan.head_only_of_key[key];
        let now = self.now();
        self.reqs[rid as usize].sent = now;
        let c = &mut self.conns[ci];
        c.req = Some(rid);
        c.p.reset(head_only);
        c.buf.clear();
        self.counts[5] += 1;
        let bytes = &self.plan.req_bytes[c.tidx as usize][key];
        // SAFETY: a send on our socket from a live buffer.
        let n = unsafe {
            libc::send(
                c.fd,
                bytes.as_ptr() as *const libc::c_void,
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n == bytes.len() as isize {
            return;
        }
        let e = if n < 0 { errno() } else { 0 };
        if n >= 0 || e == libc::EAGAIN {
            // the socket buffer is full: the rest goes when it drains
            c.out = Some((key, n.max(0) as usize));
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLOUT) as u32,
                u64: cref(ci as u32, c.gen),
            };
            unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_MOD, c.fd, &mut ev) };
            return;
        }
        let r = cref(ci as u32, c.gen);
        self.deferred.push((r, e, false)); // lost as we wrote: handled after this step
    }

    fn die(&mut self, ci: usize) {
        self.not_connecting(ci);
        let c = &mut self.conns[ci];
        if c.fd >= 0 {
            // SAFETY: closing our own descriptor also removes it from the epoll set.
            unsafe { libc::close(c.fd) };
            c.fd = -1;
        }
        if c.alive {
            self.to_free.push(ci as u32); // reused only after this turn's events
        }
        c.alive = false;
    }

    /// Close with a reset (what asyncio's transport.abort does).
    fn abort(&mut self, ci: usize) {
        let fd = self.conns[ci].fd;
        if fd >= 0 {
            let lg = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: setsockopt on our socket with a live struct.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &lg as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::linger>() as u32,
                )
            };
        }
        self.die(ci);
    }

    fn connect_failed(&mut self, ci: usize, err: i32) {
        self.die(ci);
        if let Some(rid) = self.conns[ci].pending.take() {
            let name = if err == libc::ECONNREFUSED {
                E_REFUSED
            } else if err == libc::EMFILE || err == libc::ENFILE {
                E_FILES
            } else {
                E_CONNECT
            };
            let row = self.record(rid, 0, -1, NAN, Some(name));
            self.owner_finished(ci, row);
        } else {
            self.owner_lost_idle(ci); // a connection opened ahead (preopen)
        }
    }

    /// Open mode: the connections that the schedule's first millisecond needs,
    /// opened before its start into the pools (idle). Opened on demand, a start at
    /// 100,000/s outran the server's accepts: no connection came back idle for
    /// 80 ms, so every request opened one, up to the pool's 1,024 (2026-11-24).
    pub fn preopen(&mut self) {
        if !self.plan.open || self.plan.conn_per_request {
            return;
        }
        let times = &self.plan.times;
        let Some(&first) = times.first() else {
            return;
        };
        let mut want = vec![0usize; self.pools.len()];
        for (i, &t) in times.iter().enumerate() {
            if t > first + PREOPEN_SPAN {
                break;
            }
            want[self.plan.route[i] as usize] += 1;
        }
        for (t, &k) in want.iter().enumerate() {
            for _ in 0..k.min(self.plan.max_pool).min(PREOPEN_MAX) {
                self.pools[t].n += 1;
                let c = self.open_conn(Owner::Pool(t as u32), t as u32);
                // It waits idle like a reused keep-alive connection: if the server
                // closes it as its first request goes, that request is retried.
                self.conns[(c & 0xFFFF_FFFF) as usize].served = 1;
                self.pools[t].idle.push(c);
            }
        }
        self.run_deferred();
    }

    fn not_connecting(&mut self, ci: usize) {
        if self.conns[ci].connecting {
            self.conns[ci].connecting = false;
            self.connecting -= 1;
        }
    }

    fn on_writable(&mut self, ci: usize) {
        self.not_connecting(ci);
        let c = &mut self.conns[ci];
        if !c.connected {
            let mut err: i32 = 0;
            let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
            // SAFETY: getsockopt into a live i32.
            unsafe {
                libc::getsockopt(
                    c.fd,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    &mut err as *mut i32 as *mut libc::c_void,
                    &mut len,
                )
            };
            if err != 0 {
                self.connect_failed(ci, err);
                return;
            }
            c.connected = true;
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: cref(ci as u32, c.gen),
            };
            unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_MOD, c.fd, &mut ev) };
            if let Some(rid) = c.pending.take() {
                self.send(ci, rid);
            }
            return;
        }
        let Some((key, sent)) = c.out else {
            return;
        };
        let rest = &self.plan.req_bytes[c.tidx as usize][key][sent..];
        // SAFETY: as in send.
        let n = unsafe {
            libc::send(
                c.fd,
                rest.as_ptr() as *const libc::c_void,
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        let done = n > 0 && n as usize == rest.len();
        if n > 0 {
            c.out = if done {
                None
            } else {
                Some((key, sent + n as usize))
            };
        }
        if done {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: cref(ci as u32, c.gen),
            };
            unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_MOD, c.fd, &mut ev) };
        } else if n < 0 && errno() != libc::EAGAIN {
            let e = errno();
            self.lost(ci, e);
        }
    }

    fn on_readable(&mut self, ci: usize) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut control = std::mem::take(&mut self.control);
        loop {
            let fd = self.conns[ci].fd;
            if fd < 0 {
                break;
            }
            let (n, stamp) = recv_stamped(fd, &mut scratch, &mut control);
            if n > 0 {
                // The kernel's receive time, not ours: a response read late (after a
                // timer-only sleep, or a busy turn) is still timed when it arrived.
                let mut now = self.now();
                if let Some(real) = stamp {
                    let t = real - self.real_off - self.t0;
                    if t <= now && t > now - 1.0 {
                        now = t;
                    }
                }
                self.on_data(ci, &scratch[..n as usize], now);
                if (n as usize) < scratch.len() || !self.conns[ci].alive {
                    break;
                }
            } else if n == 0 {
                self.lost(ci, 0);
                break;
            } else {
                let e = errno();
                if e != libc::EAGAIN && e != libc::EINTR {
                    self.lost(ci, e);
                }
                break;
            }
        }
        self.scratch = scratch;
        self.control = control;
    }

    fn on_data(&mut self, ci: usize, data: &[u8], now: f64) {
        let c = &mut self.conns[ci];
        let rid = match c.req {
            Some(r) => r,
            None => {
                // Bytes no request asked for (a second answer, an answer before the
                // request): the connection is out of step, and its next answer could
                // be this one's. Closed, as if the server had closed it while idle.
                self.lost(ci, 0);
                return;
            }
        };
        let r = &mut self.reqs[rid as usize];
        if r.first_byte.is_nan() {
            r.first_byte = now;
        }
        match c.p.feed_read(&mut c.buf, data) {
            Outcome::More(_) => {}
            Outcome::Complete => self.complete(ci, now),
            Outcome::Bad => self.fail(ci, E_BAD, true),
        }
    }

    fn complete(&mut self, ci: usize, now: f64) {
        let c = &mut self.conns[ci];
        let rid = match c.req.take() {
            Some(r) => r,
            None => return,
        };
        c.buf.clear();
        c.served += 1;
        let (status, nbytes, close) = (c.p.status, c.p.nbytes, c.p.close_after);
        if close {
            self.die(ci);
        }
        let row = self.record(rid, status, nbytes, now, None);
        self.finish_t = now;
        self.owner_finished(ci, row);
        self.finish_t = NAN;
    }

    fn fail(&mut self, ci: usize, err: usize, abort: bool) {
        let rid = self.conns[ci].req.take();
        if abort {
            self.abort(ci);
        } else {
            self.die(ci);
        }
        if let Some(rid) = rid {
            let status = if err == E_BAD {
                self.conns[ci].p.status
            } else {
                0
            };
            let row = self.record(rid, status, -1, NAN, Some(err));
            self.owner_finished(ci, row);
        }
    }

    /// The connection ended (EOF or an error `e`; 0 for EOF).
    fn lost(&mut self, ci: usize, e: i32) {
        if !self.conns[ci].alive {
            return;
        }
        let rid = self.conns[ci].req;
        self.die(ci);
        let rid = match rid {
            Some(r) => r,
            None => {
                self.owner_lost_idle(ci);
                return;
            }
        };
        if self.conns[ci].p.st == St::UntilClose {
            let now = self.now();
            self.complete(ci, now);
            return;
        }
        let r = &mut self.reqs[rid as usize];
        if r.first_byte.is_nan() && self.conns[ci].served > 0 && r.tries == 0 {
            // The server closed an idle keep-alive connection as we reused it.
            self.conns[ci].req = None;
            r.tries += 1;
            r.sent = NAN;
            self.owner_retry(ci, rid);
            return;
        }
        self.fail(
            ci,
            if e == libc::ECONNRESET {
                E_RESET
            } else {
                E_CLOSED
            },
            false,
        );
    }

    fn run_deferred(&mut self) {
        while let Some((r, e, connecting)) = self.deferred.pop() {
            let ci = (r & 0xFFFF_FFFF) as usize;
            if !self.conn_alive(r) {
                continue;
            }
            if connecting {
                self.connect_failed(ci, e);
            } else {
                self.lost(ci, e);
            }
        }
    }

    // owners -----------------------------------------------------------------
    fn owner_finished(&mut self, ci: usize, row: i64) {
        match self.conns[ci].owner {
            Owner::Pool(t) => self.pool_finished(t as usize, ci),
            Owner::Session(s, g) => {
                if self.sess[s as usize].gen == g && self.sess[s as usize].live {
                    self.sess_finished(s as usize, ci, row);
                }
            }
        }
    }

    fn owner_retry(&mut self, ci: usize, rid: u32) {
        match self.conns[ci].owner {
            Owner::Pool(t) => {
                self.pools[t as usize].n -= 1;
                self.pool_submit(t as usize, rid);
            }
            Owner::Session(s, g) => {
                let s = s as usize;
                if self.sess[s].gen != g || !self.sess[s].live {
                    self.record(rid, 0, -1, NAN, Some(E_CLOSED));
                    return;
                }
                let slot = self.slot_of(s, ci);
                let c = self.sess_conn(s, slot);
                self.submit(c, rid);
            }
        }
    }

    fn owner_lost_idle(&mut self, ci: usize) {
        if let Owner::Pool(t) = self.conns[ci].owner {
            let me = cref(ci as u32, self.conns[ci].gen);
            let p = &mut self.pools[t as usize];
            p.n -= 1;
            if let Some(k) = p.idle.iter().position(|&x| x == me) {
                p.idle.remove(k);
            }
        } // a session's slot reopens on next use
    }

    fn pool_submit(&mut self, t: usize, rid: u32) {
        while let Some(c) = self.pools[t].idle.pop() {
            if self.conn_alive(c) {
                self.submit(c, rid);
                return;
            }
        }
        if self.pools[t].n < self.plan.max_pool
            && self.pools[t].waiting.is_empty()
            && !self.connects_capped()
        {
            self.pools[t].n += 1;
            let c = self.open_conn(Owner::Pool(t as u32), t as u32);
            self.submit(c, rid);
        } else {
            // The generator is on time; the server holds every connection (or is
            // slow to take new ones). The wait shows in the latency, not as the
            // generator's lag.
            let now = self.now();
            self.reqs[rid as usize].dispatched = now;
            self.pool_waits += 1;
            self.pools[t].waiting.push_back(rid);
        }
    }

    /// Open mode opens at most CONNECT_CAP connections at a time (not when each
    /// request has its own): when the server stalls, every request finds the
    /// pool busy, and opening a connection for each (up to 1,024) cost the loop
    /// ~25 ms of CPU, a send-lag p99 of 3-30 ms (2026-11-24, busy machine).
    fn connects_capped(&self) -> bool {
        !self.plan.conn_per_request && self.connecting >= CONNECT_CAP
    }

    /// Requests waiting for a connection get new ones as the cap allows, in order.
    fn pump_waiting(&mut self) {
        for t in 0..self.pools.len() {
            while self.pools[t].n < self.plan.max_pool && !self.connects_capped() {
                let Some(rid) = self.pools[t].waiting.pop_front() else {
                    break;
                };
                self.pools[t].n += 1;
                let c = self.open_conn(Owner::Pool(t as u32), t as u32);
                self.submit(c, rid);
            }
        }
    }

    fn pool_finished(&mut self, t: usize, ci: usize) {
        if self.conns[ci].alive && self.plan.conn_per_request {
            self.die(ci);
        }
        if !self.conns[ci].alive {
            self.pools[t].n -= 1;
            if let Some(rid) = self.pools[t].waiting.pop_front() {
                self.pool_submit(t, rid);
            }
            return;
        }
        let me = cref(ci as u32, self.conns[ci].gen);
        if let Some(rid) = self.pools[t].waiting.pop_front() {
            self.submit(me, rid);
        } else {
            self.pools[t].idle.push(me);
        }
    }

    fn slot_of(&self, s: usize, ci: usize) -> usize {
        let me = cref(ci as u32, self.conns[ci].gen);
        self.sess[s]
            .conns
            .iter()
            .position(|&x| x == Some(me))
            .unwrap_or(0)
    }

    fn sess_conn(&mut self, s: usize, slot: usize) -> u64 {
        if let Some(c) = self.sess[s].conns[slot] {
            if self.conn_alive(c) {
                return c;
            }
        }
        let owner = Owner::Session(s as u32, self.sess[s].gen);
        let c = self.open_conn(owner, self.sess[s].tidx);
        self.sess[s].conns[slot] = Some(c);
        c
    }

    fn start_session(&mut self, i: usize, due: f64) {
        self.sessions_live += 1;
        let n = self.plan.conns_per_session;
        let (b0, b1) = (
            self.plan.burst_off[i] as usize,
            self.plan.burst_off[i + 1] as usize,
        );
        let tidx = self.plan.route[i] as u32;
        let sid = self.plan.sessions[i];
        let slot = match self.free_sess.pop() {
            Some(s) => s as usize,
            None => {
                self.sess.push(Sess {
                    gen: 0,
                    live: false,
                    sid: 0,
                    tidx: 0,
                    b0: 0,
                    b1: 0,
                    bi: 0,
                    conns: Vec::new(),
                    q_next: 0,
                    q_end: 0,
                    outstanding: 0,
                });
                self.sess.len() - 1
            }
        };
        let s = &mut self.sess[slot];
        s.gen = s.gen.wrapping_add(1);
        s.live = true;
        s.sid = sid;
        s.tidx = tidx;
        s.b0 = b0;
        s.b1 = b1;
        s.bi = b0;
        s.conns.clear();
        s.conns.resize(n, None);
        s.q_next = 0;
        s.q_end = 0;
        s.outstanding = 0;
        self.begin_burst(slot, due);
    }

    fn begin_burst(&mut self, s: usize, due: f64) {
        let now = self.now();
        let st = &self.sess[s];
        if st.bi >= st.b1 || now >= self.horizon {
            self.close_session(s);
            return;
        }
        let first = self.plan.burst_first[st.bi];
        let end = self.plan.burst_end[st.bi];
        let (sid, tidx) = (st.sid, st.tidx);
        let st = &mut self.sess[s];
        st.q_next = first + 1;
        st.q_end = end;
        st.outstanding = 1;
        let rid = self.new_req(first, sid, tidx, due);
        let c = self.sess_conn(s, 0);
        self.submit(c, rid);
    }

    /// Send session `s`'s next queued request over its connection `slot`, intended `now`.
    #[inline]
    fn sess_send_next(&mut self, s: usize, slot: usize, now: f64) {
        let st = &mut self.sess[s];
        st.outstanding += 1;
        let r = st.q_next;
        st.q_next += 1;
        let (sid, tidx) = (st.sid, st.tidx);
        let rid = self.new_req(r, sid, tidx, now);
        let c = self.sess_conn(s, slot);
        self.submit(c, rid);
    }

    fn sess_finished(&mut self, s: usize, ci: usize, row: i64) {
        self.sess[s].outstanding -= 1;
        // What follows a response is intended when it arrived (its receive stamp): a
        // response read late (wake-ups coalesced under load) shows as send lag.
        let now = if self.finish_t.is_nan() {
            self.now()
        } else {
            self.finish_t
        };
        let st = &self.sess[s];
        if st.q_next < st.q_end && now < self.horizon {
            if st.outstanding == 0 && row == self.plan.burst_first[st.bi] {
                // the first request is back: embedded requests go out over N connections
                for slot in 0..self.sess[s].conns.len() {
                    let st = &self.sess[s];
                    if st.q_next >= st.q_end {
                        break;
                    }
                    self.sess_send_next(s, slot, now);
                }
                return;
            }
            let slot = self.slot_of(s, ci);
            self.sess_send_next(s, slot, now);
            return;
        }
        if st.outstanding > 0 {
            return;
        }
        let st = &mut self.sess[s];
        st.q_next = st.q_end;
        let think = self.plan.burst_think[st.bi];
        st.bi += 1;
        if st.bi < st.b1 && now + think < self.horizon {
            self.seq += 1;
            let ev = Ev {
                t: now + think,
                seq: self.seq,
                slot: s as u32,
                gen: st.gen,
            };
            self.heap.push(ev);
        } else {
            self.close_session(s);
        }
    }

    fn close_session(&mut self, s: usize) {
        for k in 0..self.sess[s].conns.len() {
            if let Some(c) = self.sess[s].conns[k] {
                let ci = (c & 0xFFFF_FFFF) as usize;
                if self.conn_alive(c) && self.conns[ci].req.is_none() && self.conns[ci].connected {
                    self.die(ci);
                }
            }
        }
        self.sess[s].live = false;
        self.free_sess.push(s as u32);
        self.sessions_live -= 1;
    }

    // dispatch -----------------------------------------------------------------
    fn next_due(&self) -> f64 {
        let s = if self.next_i < self.plan.times.len() {
            self.plan.times[self.next_i]
        } else {
            INF
        };
        let h = self.heap.peek().map(|e| e.t).unwrap_or(INF);
        s.min(h)
    }

    /// Dispatch what is due; true when the batch ran out with more due.
    fn tick(&mut self, now: f64) -> bool {
        let mut budget = self.plan.batch;
        let n = self.plan.times.len();
        while budget > 0 {
            let nxt_s = if self.next_i < n {
                self.plan.times[self.next_i]
            } else {
                INF
            };
            let nxt_h = self.heap.peek().map(|e| e.t).unwrap_or(INF);
            if nxt_s <= nxt_h {
                if nxt_s > now || nxt_s >= self.horizon {
                    break;
                }
                let i = self.next_i;
                self.next_i += 1;
                if self.plan.open {
                    let tidx = self.plan.route[i] as u32;
                    let rid = self.new_req(self.plan.rows[i], self.plan.sessions[i], tidx, nxt_s);
                    self.pool_submit(tidx as usize, rid);
                } else {
                    self.start_session(i, nxt_s);
                }
            } else {
                if nxt_h > now || nxt_h >= self.horizon {
                    break;
                }
                let ev = self.heap.pop().expect("peeked");
                let s = ev.slot as usize;
                if self.sess[s].gen == ev.gen && self.sess[s].live {
                    self.begin_burst(s, nxt_h);
                }
            }
            budget -= 1;
            self.run_deferred();
        }
        budget == 0
    }

    /// Time out stuck requests and connects (every 100 ms).
    pub fn expire(&mut self, now: f64) {
        self.real_off = real_offset();
        let timeout = self.plan.timeout;
        for ci in 0..self.conns.len() {
            if !self.conns[ci].alive {
                continue;
            }
            if let Some(rid) = self.conns[ci].req {
                if now - self.reqs[rid as usize].sent > timeout {
                    self.fail(ci, E_TIMEOUT, true);
                }
            } else if let Some(rid) = self.conns[ci].pending {
                if now - self.reqs[rid as usize].intended > timeout {
                    self.conns[ci].pending = None;
                    self.die(ci);
                    let row = self.record(rid, 0, -1, NAN, Some(E_TIMEOUT));
                    self.owner_finished(ci, row);
                }
            }
        }
        self.run_deferred();
        self.free_slots();
    }

    /// End of run: what is in flight is ``cut``, what waits is ``unsent``.
    pub fn finish(&mut self) {
        for ci in 0..self.conns.len() {
            if !self.conns[ci].alive {
                continue;
            }
            let rid = self.conns[ci]
                .req
                .take()
                .or_else(|| self.conns[ci].pending.take());
            self.abort(ci);
            if let Some(rid) = rid {
                let err = if self.reqs[rid as usize].sent.is_nan() {
                    E_UNSENT
                } else {
                    E_CUT
                };
                self.record(rid, 0, -1, NAN, Some(err));
            }
        }
        for t in 0..self.pools.len() {
            while let Some(rid) = self.pools[t].waiting.pop_front() {
                self.record(rid, 0, -1, NAN, Some(E_UNSENT));
            }
        }
    }

    /// Watch `fd`, the read end of the pipe Python's C-level signal handler writes
    /// each signal's number to (``signal.set_wakeup_fd``): one of `stops` stops the
    /// run at the loop's next turn, whatever the Python thread is doing. That thread
    /// runs below a real-time loop on its CPU, with what the loop and the machine
    /// leave it: at 150,000/s (past the machine's capacity) the last send came up to
    /// 1.65 s after a SIGTERM it alone saw. Every byte read goes on to `forward`
    /// (the wake-up descriptor this one replaced, -1: none), so that an event loop
    /// waiting on it still learns of its signals; Python runs its handlers by its
    /// own flags, not these bytes.
    pub fn watch_signals(&mut self, fd: i32, stops: Vec<u8>, forward: i32) {
        for ep in [self.epfd, self.tep] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: SIGNAL_TOKEN,
            };
            // SAFETY: adding a descriptor the caller keeps open for the run.
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        }
        self.sig_fd = fd;
        self.sig_stops = stops;
        self.sig_forward = forward;
    }

    /// Reads what the signal pipe holds; a stop signal among it stops the run.
    fn signal_came(&mut self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into our buffer from a non-blocking descriptor.
            let n = unsafe { libc::read(self.sig_fd, buf.as_mut_ptr() as *mut libc::c_void, 64) };
            if n <= 0 {
                return; // empty (EAGAIN), or closed
            }
            let got = &buf[..n as usize];
            if self.sig_forward >= 0 {
                // SAFETY: a write of our buffer; a full or closed descriptor drops it,
                // as Python's handler itself would.
                unsafe {
                    libc::write(
                        self.sig_forward,
                        got.as_ptr() as *const libc::c_void,
                        got.len(),
                    )
                };
            }
            if !self.interrupted && got.iter().any(|b| self.sig_stops.contains(b)) {
                self.signal_stop = self.now();
                self.interrupt();
            }
        }
    }

    pub fn interrupt(&mut self) {
        self.interrupted = true;
        let now = self.now();
        self.horizon = self.horizon.min(now);
        self.draining = true;
    }

    fn free_slots(&mut self) {
        self.free_conns.append(&mut self.to_free);
    }

    fn arm(&mut self, due_abs: f64) {
        let due_abs = due_abs.max(self.last_wake + self.coalesce);
        let delay = due_abs - mono();
        let mut when = due_abs;
        // Only a long sleep is worth waking early for: a (virtual) CPU coming out
        // of deep idle is itself tens of microseconds late; poll the last stretch.
        if delay > 1e-3 {
            when -= 200e-6;
            self.early_until = due_abs;
        } else {
            self.early_until = 0.0;
        }
        if when == self.armed {
            return;
        }
        self.armed = when;
        self.counts[3] += 1;
        let sec = when.floor();
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: ((when - sec) * 1e9) as libc::c_long,
            },
        };
        // SAFETY: arming our timerfd with a live struct.
        unsafe {
            libc::timerfd_settime(
                self.tfd,
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// Widen the wake-up window while the loop is busy, narrow it when it is not.
    fn adapt(&mut self) {
        let wall = mono();
        if wall - self.adapt_at < ADAPT_EVERY {
            return;
        }
        let cpu = thread_cpu();
        if self.adapt_at > 0.0 {
            // the time spent on the clock is the loop's choice, not its work
            let busy = (cpu - self.cpu_at - self.spun) / (wall - self.adapt_at);
            let cap = if self.plan.open {
                COALESCE_MAX
            } else {
                SESSION_COALESCE_MAX
            };
            let before = self.coalesce;
            (self.pressure, self.coalesce) = next_window(
                busy,
                self.pressure,
                self.spun > 0.0,
                self.coalesce,
                cap,
                self.may_poll,
            );
            if self.coalesce > before {
                self.counts[6] = self.counts[6].max((self.coalesce * 1e6) as u64);
            }
        }
        self.adapt_at = wall;
        self.cpu_at = cpu;
        self.spun = 0.0;
    }

    /// Whether the loop waits out its window on the clock rather than asleep: under
    /// pressure, while its thread has left its CPU its share since the last
    /// adaptation (by the thread's CPU time, which holds the kernel's work in its
    /// name: a wake-up's, which a wall clock around the sleep counts as asleep, took
    /// 3-5 more points, enough for the RT throttling's 50 ms stops). Only a
    /// real-time loop does: shrink makes it one only on CPUs the server does not
    /// use, and at normal priority (a generator sharing the server's CPU) the time
    /// on the clock would be taken from the server.
    fn polls(&self) -> bool {
        self.pressure
            && thread_cpu() - self.cpu_at <= (1.0 - SLEEP_SHARE_MIN) * (mono() - self.adapt_at)
    }

    fn timer_fired(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading the timerfd's 8-byte counter.
        let n = unsafe { libc::read(self.tfd, buf.as_mut_ptr() as *mut libc::c_void, 8) };
        if n != 8 {
            return; // already consumed
        }
        self.armed = INF;
        let until = self.early_until;
        if until > 0.0 {
            self.early_until = 0.0;
            while mono() < until {
                std::hint::spin_loop();
            }
        }
        self.last_wake = mono();
    }

    /// One turn of the loop: dispatch, wait for at most `max_wait` seconds, handle events.
    /// Returns false when the run is over.
    pub fn turn(&mut self, max_wait: f64) -> bool {
        let max_wait = max_wait.min(0.1);
        self.adapt();
        let now = self.now();
        // Dispatch even while draining: a session still running schedules its
        // next burst (as the Python engine's timer keeps firing).
        let more = self.tick(now);
        let due = self.next_due();
        if !more && due >= self.horizon {
            self.draining = true;
        }
        if self.draining {
            let idle = self.inflight <= 0 && self.sessions_live <= 0;
            if idle || now >= self.horizon + self.plan.drain || self.interrupted {
                self.finish();
                return false;
            }
        }
        self.free_slots();
        let mut timer_only = false;
        let mut poll_until = 0.0;
        let timeout_ms: i32 = if more {
            0
        } else {
            let mut wait = max_wait;
            if self.draining {
                wait = wait.min(0.005);
            }
            // (not while a connect is under way: its request goes when it completes)
            let quiet = !self.draining && self.connecting == 0;
            if due < self.horizon {
                let delay = due - self.now();
                // (the window's end, as the timer would be armed for)
                let at = (self.t0 + due).max(self.last_wake + self.coalesce);
                if delay <= self.spin {
                    wait = 0.0;
                } else if self.plan.open && quiet && at - mono() <= self.coalesce && self.polls() {
                    poll_until = at;
                    wait = 0.0;
                } else {
                    self.arm(self.t0 + due);
                    timer_only = self.plan.open && quiet && delay < TIMER_ONLY_MAX;
                }
            }
            // Session mode under load (the window widened): responses that arrive
            // within a window of the last wake-up that found some are read together
            // at the window's end, not one wake-up each.
            if !self.plan.open
                && !timer_only
                && wait > 0.0
                && quiet
                && self.found
                && self.coalesce > COALESCE
                && mono() < self.last_wake + self.coalesce
            {
                self.arm(self.last_wake); // (arm waits at least the window)
                timer_only = true;
            }
            (wait * 1e3).ceil().max(0.0) as i32
        };
        self.counts[0] += 1;
        if timeout_ms > 0 {
            self.counts[1] += 1;
        }
        let mut events = std::mem::take(&mut self.events);
        let wait_at = mono();
        if poll_until > 0.0 {
            // the window waited out on the clock: what a wake-up would cost, without
            // the wake-up (see SLEEP_SHARE_MIN)
            while mono() < poll_until {
                std::hint::spin_loop();
            }
            self.last_wake = mono();
            let spun = self.last_wake - wait_at;
            self.spun += spun;
            self.counts[7] += (spun * 1e6) as u64;
        }
        if timer_only {
            // SAFETY: epoll_wait fills our array.
            let n = unsafe { libc::epoll_wait(self.tep, events.as_mut_ptr(), 2, timeout_ms) };
            if n < 0 {
                self.events = events;
                self.signalled = true;
                return true;
            }
            for ev in events.iter().take(n as usize) {
                if ev.u64 == SIGNAL_TOKEN {
                    self.signal_came();
                } else {
                    self.timer_fired();
                }
            }
        }
        let wait_ms = if timer_only { 0 } else { timeout_ms };
        // SAFETY: epoll_wait fills our array.
        let n = unsafe {
            libc::epoll_wait(self.epfd, events.as_mut_ptr(), events.len() as i32, wait_ms)
        };
        if n < 0 {
            self.events = events;
            self.signalled = true; // EINTR: a signal; the caller's check comes next
            return true;
        }
        self.counts[2] += n as u64;
        if !self.plan.open {
            if wait_ms > 0 && n > 0 {
                self.last_wake = mono(); // a wake-up by the sockets opens a window too
            }
            self.found = n > 0;
        }
        for (k, ev) in events.iter().take(n as usize).enumerate() {
            // A long batch of replies must not hold up the sends due meanwhile.
            if k > 0 && k % DISPATCH_EVERY == 0 {
                let now = self.now();
                if self.next_due() <= now {
                    self.tick(now);
                }
            }
            let (flags, data) = (ev.events, ev.u64);
            if data == TIMER_TOKEN {
                self.timer_fired();
                continue;
            }
            if data == SIGNAL_TOKEN {
                self.signal_came();
                continue;
            }
            if !self.conn_alive(data) {
                continue; // an event for a connection that died in this batch
            }
            let ci = (data & 0xFFFF_FFFF) as usize;
            let out = flags & libc::EPOLLOUT as u32 != 0;
            let inn = flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
            if !self.conns[ci].connected {
                if out || inn {
                    self.on_writable(ci);
                }
            } else {
                if out {
                    self.on_writable(ci);
                }
                if inn && self.conn_alive(data) {
                    self.on_readable(ci);
                }
            }
            self.run_deferred();
        }
        self.events = events;
        self.run_deferred();
        if self.plan.open {
            self.pump_waiting();
            self.run_deferred();
        }
        self.free_slots();
        true
    }
}

/// One adaptation of the wake-up window, from the loop's CPU share since the last
/// (less its time on the clock): (under pressure, the window). A loop that may not
/// poll (not real-time) is never under pressure, however wide its window: it widens
/// and narrows as before, and never waits on the clock.
fn next_window(
    busy: f64,
    pressure: bool,
    spun: bool,
    coalesce: f64,
    cap: f64,
    may_poll: bool,
) -> (bool, f64) {
    if busy > BUSY_HIGH && !pressure && may_poll {
        (true, coalesce) // first wait on the clock; widen if that is not enough
    } else if busy > BUSY_HIGH && !(pressure && spun) {
        // (under pressure, a loop that found time to wait on the clock kept up:
        // a wider window would only delay its sends)
        (pressure, (coalesce * 1.25).min(cap))
    } else if busy < BUSY_LOW {
        let narrower = (coalesce / 1.25).max(COALESCE);
        (may_poll && narrower > COALESCE, narrower)
    } else {
        (pressure, coalesce)
    }
}

/// Whether this thread runs SCHED_FIFO or SCHED_RR (the loop's thread inherits it).
fn realtime() -> bool {
    // SAFETY: a query of the calling thread's policy.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy == libc::SCHED_FIFO || policy == libc::SCHED_RR
}

/// This thread's CPU time in seconds.
fn thread_cpu() -> f64 {
    clock_s(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn real_offset() -> f64 {
    let m0 = mono();
    let real = clock_s(libc::CLOCK_REALTIME);
    let m1 = mono();
    real - (m0 + m1) / 2.0
}

/// recvmsg into `buf`; (bytes or -1, the kernel's receive stamp of the last segment read).
fn recv_stamped(fd: i32, buf: &mut [u8], control: &mut [u8]) -> (isize, Option<f64>) {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr pointing at our live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.len() as _;
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n <= 0 {
        return (n, None);
    }
    // cmsghdr: len (usize), level (i32), type (i32), then the data (8-aligned)
    let clen = (msg.msg_controllen as usize).min(control.len());
    let mut off = 0usize;
    let hdr = std::mem::size_of::<libc::cmsghdr>();
    while off + hdr <= clen {
        let len = usize::from_ne_bytes(control[off..off + 8].try_into().unwrap());
        let level = i32::from_ne_bytes(control[off + 8..off + 12].try_into().unwrap());
        let typ = i32::from_ne_bytes(control[off + 12..off + 16].try_into().unwrap());
        if len < hdr || off + len > clen {
            break;
        }
        if level == libc::SOL_SOCKET && typ == SO_TIMESTAMPNS && len >= hdr + 16 {
            let d = off + hdr;
            let sec = i64::from_ne_bytes(control[d..d + 8].try_into().unwrap());
            let nsec = i64::from_ne_bytes(control[d + 8..d + 16].try_into().unwrap());
            if sec > 0 {
                return (n, Some(sec as f64 + nsec as f64 * 1e-9));
            }
        }
        off += (len + 7) & !7;
    }
    (n, None)
}

fn connect_nonblocking(addr: &std::net::SocketAddr) -> (i32, i32, i32) {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket/setsockopt/connect with structs we build on the stack.
    unsafe {
        let fd = libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return (fd, -1, errno());
        }
        let one: i32 = 1;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const i32 as *const libc::c_void,
            4,
        );
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_TIMESTAMPNS,
            &one as *const i32 as *const libc::c_void,
            4,
        );
        let rc = match addr {
            std::net::SocketAddr::V4(a) => {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_port = a.port().to_be();
                sa.sin_addr = libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                };
                libc::connect(
                    fd,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                )
            }
            std::net::SocketAddr::V6(a) => {
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sa.sin6_port = a.port().to_be();
                sa.sin6_addr = libc::in6_addr {
                    s6_addr: a.ip().octets(),
                };
                sa.sin6_scope_id = a.scope_id();
                libc::connect(
                    fd,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in6>() as u32,
                )
            }
        };
        let e = if rc < 0 { errno() } else { 0 };
        (fd, rc, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_may_not_poll_is_never_under_pressure() {
        // busy: the window widens twice; idle again: it narrows, still wide
        let (mut p, mut w) = (false, COALESCE);
        for busy in [0.95, 0.95, 0.95, 0.5] {
            (p, w) = next_window(busy, p, false, w, COALESCE_MAX, false);
            assert!(
                !p,
                "a normal-priority loop under pressure (busy {busy}, window {w})"
            );
        }
        assert!(w > COALESCE);
    }

    #[test]
    fn a_real_time_loop_waits_on_the_clock_before_it_widens() {
        let (p, w) = next_window(0.95, false, false, COALESCE, COALESCE_MAX, true);
        assert!(p && w == COALESCE);
        // it found time to wait: the window stays
        assert_eq!(
            next_window(0.95, p, true, w, COALESCE_MAX, true),
            (true, COALESCE)
        );
        // it found none: it widens
        let (p, w) = next_window(0.95, p, false, w, COALESCE_MAX, true);
        assert!(p && w > COALESCE);
        // idle again: narrower, still under pressure while wider than the least
        assert!(next_window(0.5, p, false, w, COALESCE_MAX, true).0);
    }
}
