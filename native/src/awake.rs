//! Keeping the generator's CPUs awake for a run: one spinner process per CPU, at
//! SCHED_IDLE, in a session of its own whose autogroup runs at nice 19.
//!
//! A CPU with nothing to run halts (on a VM the host then takes the virtual CPU
//! off its core; on bare metal it enters a C-state), and the loop's next timed
//! wake-up comes late by the time it takes to resume: on a 2-vCPU KVM guest a
//! 60 us sleep at SCHED_FIFO woke 40 us late at the median and 110-124 us at p99
//! with its CPU idle, 22 and 34-37 us with such a spinner beside it (see
//! bench/RESULTS.md).
//!
//! SCHED_IDLE yields to every other task only within its own task group: with the
//! kernel's autogroup on (as on most distributions), a SCHED_IDLE thread of this
//! process competed as this session's group against another session's work and took
//! half of the CPU from it. So each spinner is a process of its own (forked: in the
//! child only system calls run), in a new session whose autogroup it sets to nice 19
//! (a weight of 15 against 1,024), where it took 1-2% of a CPU-bound neighbour's
//! time. Inside a cpu cgroup other than the root, autogroups do not apply: the
//! Python side keeps the default off there (shrink.replay.scaleout.default_awake).

/// Spinners started at most (one per CPU of the calling thread's affinity): a
/// generator spread over more CPUs than this is left to sleep as it would.
const MAX_CPUS: usize = 64;

pub struct Awake {
    pids: Vec<libc::pid_t>,
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

/// The spinner, in the forked child: system calls only (no allocation, no lock another
/// thread of the parent may have held at the fork), and it never returns.
fn spin(cpu: usize, parent: libc::pid_t) -> ! {
    // SAFETY: async-signal-safe system calls on this process, with live arguments.
    unsafe {
        let idle = libc::sched_param { sched_priority: 0 };
        // never spin above idle priority: that would take real time
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) != 0 {
            libc::_exit(1);
        }
        // Nothing of the parent's is held: its sockets (another client to the server's
        // other-client check, a connection kept open past its close), its locks and
        // the write end of its pipes. close_range, else one by one on an older kernel.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            let mut most: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut most);
            for fd in 0..most.rlim_cur.min(1 << 20) as i32 {
                libc::close(fd);
            }
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0); // the parent ended before the signal was set
        }
        libc::setsid();
        #[allow(clippy::manual_c_str_literals)] // (c"" needs a newer Rust than Debian's)
        let fd = libc::open(
            b"/proc/self/autogroup\0".as_ptr() as *const libc::c_char,
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"19".as_ptr() as *const libc::c_void, 2);
            libc::close(fd);
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            libc::_exit(1);
        }
        let mut n: u32 = 0;
        loop {
            std::hint::spin_loop();
            n = n.wrapping_add(1);
            if n & 0xF_FFFF == 0 && libc::getppid() != parent {
                libc::_exit(0);
            }
        }
    }
}

impl Awake {
    /// Start a spinner on each CPU of the calling thread's affinity (none when it has
    /// more than MAX_CPUS, or a process cannot be made: the run goes on asleep).
    pub fn start() -> Awake {
        let cpus = affinity();
        let mut pids = Vec::new();
        if cpus.len() > MAX_CPUS {
            return Awake { pids };
        }
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        for cpu in cpus {
            // SAFETY: the child runs only `spin`, which makes system calls and exits.
            match unsafe { libc::fork() } {
                0 => spin(cpu, parent),
                pid if pid > 0 => pids.push(pid),
                _ => break,
            }
        }
        Awake { pids }
    }

    /// Stop the spinners; returns (spinners that were spinning, their CPU seconds
    /// together). One that could not drop to idle priority or take its CPU exited on
    /// its own and is not counted.
    pub fn stop(mut self) -> (usize, f64) {
        let mut spun = 0;
        let mut cpu = 0.0;
        for pid in std::mem::take(&mut self.pids) {
            let (status, used) = reap(pid);
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL {
                spun += 1;
            }
            cpu += used;
        }
        (spun, cpu)
    }
}

/// Kill and wait for a spinner: (its wait status, its CPU seconds).
fn reap(pid: libc::pid_t) -> (i32, f64) {
    // SAFETY: signalling and waiting for our own child, into live structs.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        let mut status = 0;
        let mut usage: libc::rusage = std::mem::zeroed();
        loop {
            let r = libc::wait4(pid, &mut status, 0, &mut usage);
            if r == pid {
                break;
            }
            if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return (0, 0.0);
            }
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        (status, secs(usage.ru_utime) + secs(usage.ru_stime))
    }
}

impl Drop for Awake {
    /// However the run ends (an error, a panic unwinding), the spinners end with it.
    fn drop(&mut self) {
        for pid in std::mem::take(&mut self.pids) {
            reap(pid);
        }
    }
}
