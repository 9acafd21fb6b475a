//! The simulator's event loop: shrink/sim/engine.py's `simulate`, step for step.
//!
//! The same events in the same order, each time computed by the same floating-point
//! operations in the same order, so the results are the Python loop's to the last bit
//! (tests/test_sim_native.py compares them). Python's heaps of tuples become binary
//! heaps of keys compared field by field as tuples are; no two keys of one heap are
//! equal (a request, a burst or a core's version number is the last field), so the
//! order they pop in does not depend on how either heap breaks ties. The inputs are
//! finite (the caller checks), so no NaN reaches a comparison.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A heap key: a time, then integers, ordered as a Python tuple of them.
#[derive(Clone, Copy, PartialEq)]
struct Key(f64, i64, i64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .partial_cmp(&other.0)
            .unwrap_or(Ordering::Equal)
            .then(self.1.cmp(&other.1))
            .then(self.2.cmp(&other.2))
    }
}

type MinHeap = BinaryHeap<Reverse<Key>>;

/// Per request, burst, session and core, as EngineInput and Layout hold them.
pub struct Input {
    pub static_s: Vec<f64>,
    pub dyn_s: Vec<f64>, // PHP CPU of a dynamic request, 0 for a static one
    pub is_dyn: Vec<bool>,
    pub req_burst: Vec<i64>,
    pub req_session: Vec<i64>,
    pub b_first: Vec<i64>,
    pub b_end: Vec<i64>,
    pub b_think: Vec<f64>,
    pub b_next: Vec<i64>,
    pub s_start: Vec<f64>,
    pub s_burst: Vec<i64>,
    pub s_rep: Vec<i64>,
    pub s_qsock: Vec<i64>,
    pub s_u: Vec<f64>,
    pub static_factor: Vec<f64>,
    pub stall_s: Vec<f64>,
    pub core_socket: Vec<i64>,
    pub replica_cores: Vec<Vec<i64>>,
    pub speed: f64,
    pub remote_s: f64,
    pub horizon: f64,
    pub w0: f64,
    pub w1: f64,
    pub idle_first: bool,
}

pub struct Output {
    pub sent: Vec<f64>,
    pub done: Vec<f64>,
    pub core: Vec<i64>,
    pub busy: Vec<f64>,
    pub events: i64,
}

struct Cores {
    vclock: Vec<f64>,
    last: Vec<f64>,
    njobs: Vec<i64>,
    jobs: Vec<MinHeap>,
    version: Vec<i64>,
    busy_since: Vec<f64>,
}

fn top(h: &MinHeap) -> f64 {
    h.peek().map_or(f64::INFINITY, |k| k.0 .0)
}

/// A request arrives on core `c` at `now`: the loop's `arrive`.
#[allow(clippy::too_many_arguments)]
fn arrive(
    inp: &Input,
    st: &mut Cores,
    deps: &mut MinHeap,
    out: &mut Output,
    c: usize,
    i: usize,
    now: f64,
    extra: f64,
) {
    let k = st.njobs[c];
    if k != 0 {
        st.vclock[c] += (now - st.last[c]) * inp.speed / k as f64;
    } else {
        st.busy_since[c] = now;
    }
    st.last[c] = now;
    let mut d = inp.static_s[i] * inp.static_factor[c] + extra;
    if inp.is_dyn[i] {
        d += inp.dyn_s[i] + inp.stall_s[c];
    }
    st.jobs[c].push(Reverse(Key(st.vclock[c] + d, i as i64, 0)));
    st.njobs[c] = k + 1;
    st.version[c] += 1;
    let t = now + (top(&st.jobs[c]) - st.vclock[c]) * (k + 1) as f64 / inp.speed;
    deps.push(Reverse(Key(t, c as i64, st.version[c])));
    out.sent[i] = now;
    out.core[i] = c as i64;
}

pub fn simulate(inp: &Input) -> Output {
    let n_req = inp.static_s.len();
    let n_cores = inp.static_factor.len();
    let n_sess = inp.s_start.len();
    let mut out = Output {
        sent: vec![f64::NAN; n_req],
        done: vec![f64::NAN; n_req],
        core: vec![-1; n_req],
        busy: vec![0.0; n_cores],
        events: 0,
    };
    let mut st = Cores {
        vclock: vec![0.0; n_cores],
        last: vec![0.0; n_cores],
        njobs: vec![0; n_cores],
        jobs: (0..n_cores).map(|_| MinHeap::new()).collect(),
        version: vec![0; n_cores],
        busy_since: vec![0.0; n_cores],
    };
    let mut left: Vec<i64> = inp
        .b_end
        .iter()
        .zip(&inp.b_first)
        .map(|(e, f)| e - f)
        .collect();
    let mut s_core = vec![0usize; n_sess];
    let mut s_extra = vec![0.0f64; n_sess];
    let mut deps = MinHeap::new();
    let mut sends = MinHeap::new(); // (time, burst, session)
    let mut sp = 0usize;
    let mut next_start = if n_sess > 0 {
        inp.s_start[0]
    } else {
        f64::INFINITY
    };
    let mut idle: Vec<usize> = Vec::new();
    loop {
        let t_dep = top(&deps);
        let t_snd = top(&sends);
        if t_dep <= t_snd && t_dep <= next_start {
            if t_dep == f64::INFINITY {
                break;
            }
            let Reverse(Key(now, c, v)) = deps.pop().unwrap();
            let c = c as usize;
            if v != st.version[c] {
                continue;
            }
            out.events += 1;
            let Reverse(Key(tag, i, _)) = st.jobs[c].pop().unwrap();
            let i = i as usize;
            let k = st.njobs[c] - 1;
            st.njobs[c] = k;
            st.vclock[c] = tag;
            st.last[c] = now;
            st.version[c] += 1;
            out.done[i] = now;
            if k != 0 {
                let t = now + (top(&st.jobs[c]) - tag) * k as f64 / inp.speed;
                deps.push(Reverse(Key(t, c as i64, st.version[c])));
            } else {
                let a = if st.busy_since[c] > inp.w0 {
                    st.busy_since[c]
                } else {
                    inp.w0
                };
                let e = if now < inp.w1 { now } else { inp.w1 };
                if e > a {
                    out.busy[c] += e - a;
                }
            }
            let b = inp.req_burst[i] as usize;
            left[b] -= 1;
            let s = inp.req_session[i] as usize;
            if i as i64 == inp.b_first[b] && inp.b_end[b] - i as i64 > 1 {
                if now < inp.horizon {
                    // the page is in: its embedded requests go out together
                    for j in i + 1..inp.b_end[b] as usize {
                        arrive(
                            inp, &mut st, &mut deps, &mut out, s_core[s], j, now, s_extra[s],
                        );
                    }
                }
            } else if left[b] == 0 {
                let nb = inp.b_next[b];
                if nb >= 0 {
                    let t_next = now + inp.b_think[b];
                    if t_next < inp.horizon {
                        sends.push(Reverse(Key(t_next, nb, s as i64)));
                    }
                }
            }
        } else if t_snd <= next_start {
            let Reverse(Key(now, b, s)) = sends.pop().unwrap();
            let (b, s) = (b as usize, s as usize);
            out.events += 1;
            let first = inp.b_first[b] as usize;
            arrive(
                inp, &mut st, &mut deps, &mut out, s_core[s], first, now, s_extra[s],
            );
        } else {
            let now = next_start;
            let s = sp;
            sp += 1;
            next_start = if sp < n_sess {
                inp.s_start[sp]
            } else {
                f64::INFINITY
            };
            out.events += 1;
            let cores = &inp.replica_cores[inp.s_rep[s] as usize];
            idle.clear();
            if inp.idle_first {
                idle.extend(
                    cores
                        .iter()
                        .map(|&c| c as usize)
                        .filter(|&c| st.njobs[c] == 0),
                );
            }
            if idle.is_empty() {
                idle.extend(cores.iter().map(|&c| c as usize));
            }
            let c = idle[(inp.s_u[s] * idle.len() as f64) as usize];
            s_core[s] = c;
            s_extra[s] = if inp.s_qsock[s] != inp.core_socket[c] {
                inp.remote_s
            } else {
                0.0
            };
            let first = inp.b_first[inp.s_burst[s] as usize] as usize;
            arrive(inp, &mut st, &mut deps, &mut out, c, first, now, s_extra[s]);
        }
    }
    out
}
