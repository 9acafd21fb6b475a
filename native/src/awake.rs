//! Keeping the generator's CPUs awake for a run: one spinner per CPU, at SCHED_IDLE.
//!
//! A CPU with nothing to run halts (on a VM the host then takes the virtual CPU
//! off its core; on bare metal it enters a C-state), and the loop's next timed
//! wake-up comes late by the time it takes to resume: on a 2-vCPU KVM guest a
//! 60 us sleep at SCHED_FIFO woke 40 us late at the median and 110-124 us at p99
//! with its CPU idle, 22 and 34-37 us with such a spinner beside it (see
//! bench/RESULTS.md). The spinners run at the kernel's idle priority: any other
//! thread, the loop's and Python's included, preempts them at once on waking, so
//! they take only time the CPU would have spent halted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Spinners started at most (one per CPU of the calling thread's affinity): a
/// generator spread over more CPUs than this is left to sleep as it would.
const MAX_CPUS: usize = 64;

pub struct Awake {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<f64>>,
}

/// The CPUs the calling thread may run on, in order (empty when unknown).
fn affinity() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t filled by the kernel for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

fn spin(cpu: usize, stop: &AtomicBool) -> f64 {
    // SAFETY: scheduler and affinity calls on this thread with live structs.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return 0.0;
        }
        let idle = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) != 0 {
            return 0.0; // never spin above idle priority: that would take real time
        }
    }
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

impl Awake {
    /// Start a spinner on each CPU of the calling thread's affinity (none when it
    /// has more than MAX_CPUS, or a thread cannot be made: the run goes on asleep).
    pub fn start() -> Awake {
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = affinity();
        let mut threads = Vec::new();
        if cpus.len() <= MAX_CPUS {
            for cpu in cpus {
                let s = stop.clone();
                let made = std::thread::Builder::new()
                    .name("shrink-awake".into())
                    .stack_size(64 * 1024)
                    .spawn(move || spin(cpu, &s));
                match made {
                    Ok(h) => threads.push(h),
                    Err(_) => break,
                }
            }
        }
        Awake { stop, threads }
    }

    /// Stop the spinners; returns (spinners that ran, their CPU seconds together).
    pub fn stop(mut self) -> (usize, f64) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut self.threads);
        let n = threads.len();
        let cpu = threads.into_iter().filter_map(|h| h.join().ok()).sum();
        (n, cpu)
    }
}

impl Drop for Awake {
    /// However the run ends (an error, a panic unwinding), the spinners end with it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
