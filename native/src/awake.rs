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
//! time. Inside a cpu cgroup other than the root, autogroups do not apply: there the
//! Python side makes a cgroup at the top of the cpu hierarchy with cpu.idle = 1
//! (shrink.enforce.idle_group), idle against every other group, and each spinner
//! moves itself into it first of all (before it takes its CPU: a move into a group of
//! another cpuset would reset the affinity); one that cannot ends at once, uncounted.
//!
//! In sessions of their own, the spinners are not in shrink's process group: Ctrl-Z
//! (SIGTSTP to the group) or a SIGSTOP of shrink left them spinning for as long as it
//! stayed stopped. Each looks at its parent's state every 65,536 turns and sleeps while
//! it is stopped, counting the time in a page shared with the parent, which the run's
//! self-check then names as shrink's own stop rather than the host's.

/// Spinners started at most (one per CPU of the calling thread's affinity): a
/// generator spread over more CPUs than this is left to sleep as it would.
const MAX_CPUS: usize = 64;

pub struct Awake {
    pids: Vec<libc::pid_t>,
    /// Shared with the spinners (one slot each): the nanoseconds each saw its parent
    /// stopped (null when the page could not be mapped).
    stopped: *mut u64,
}

/// The bytes of the shared page of stopped times (one u64 a spinner).
const STOPPED_BYTES: usize = MAX_CPUS * 8;

/// Sleep between two looks at a stopped parent's state (ns).
const STOPPED_POLL_NS: i64 = 5_000_000;

// SAFETY: the page is written only by the spinners (other processes) and read here
// with volatile loads; the pointer itself is never shared between threads unguarded.
unsafe impl Send for Awake {}

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

/// Whether the process whose stat file is open at `fd` is stopped by a signal (job
/// control, SIGSTOP): state 'T' after the command's closing parenthesis. (A tracer's
/// stop, 't', is not: under strace it comes at every system call.)
fn stopped(fd: i32) -> bool {
    let mut buf = [0u8; 512];
    // SAFETY: reading into a live stack buffer of its length.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
    if n <= 0 {
        return false;
    }
    let text = &buf[..n as usize];
    match text.iter().rposition(|&b| b == b')') {
        Some(i) if i + 2 < text.len() => text[i + 2] == b'T',
        _ => false,
    }
}

/// Monotonic nanoseconds.
fn now_ns() -> u64 {
    // SAFETY: a live timespec filled by the kernel.
    unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    }
}

/// While the parent is stopped (Ctrl-Z, SIGSTOP: the spinner, in a session of its own,
/// is not), sleep instead of spinning; adds the time to `slot`.
fn wait_while_stopped(fd: i32, parent: libc::pid_t, slot: *mut u64) {
    if fd < 0 || !stopped(fd) {
        return;
    }
    let mut t = now_ns();
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: STOPPED_POLL_NS,
    };
    // SAFETY: sleeping, and the parent's pid; the slot is this spinner's own in a page
    // mapped shared before the fork (or null).
    unsafe {
        while stopped(fd) && libc::getppid() == parent {
            libc::nanosleep(&pause, std::ptr::null_mut());
            // counted at each look, not once at the end: the parent, continued, may
            // kill this spinner before it has run again to add the whole stop
            let now = now_ns();
            if !slot.is_null() {
                let was = std::ptr::read_volatile(slot);
                std::ptr::write_volatile(slot, was + (now - t));
            }
            t = now;
        }
    }
}

/// Write this process's PID into the cgroup.procs file at `procs` (a NUL-terminated
/// path): system calls only, the digits formatted on the stack. Whether it was taken.
fn join_group(procs: *const libc::c_char) -> bool {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    // SAFETY: getpid has no preconditions; open/write/close on a live path and buffer.
    unsafe {
        let mut pid = libc::getpid() as u64;
        loop {
            at -= 1;
            digits[at] = b'0' + (pid % 10) as u8;
            pid /= 10;
            if pid == 0 {
                break;
            }
        }
        let fd = libc::open(procs, libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let len = digits.len() - at;
        let wrote = libc::write(fd, digits[at..].as_ptr() as *const libc::c_void, len);
        libc::close(fd);
        wrote == len as isize
    }
}

/// The spinner, in the forked child: system calls only (no allocation, no lock another
/// thread of the parent may have held at the fork), and it never returns. While its
/// parent is stopped it sleeps, and the time is added to `slot` (the parent's to read).
fn spin(
    cpu: usize,
    parent: libc::pid_t,
    stat: i32,
    slot: *mut u64,
    procs: *const libc::c_char,
) -> ! {
    // SAFETY: async-signal-safe system calls on this process, with live arguments.
    unsafe {
        // into the idle group first (never spin at full weight in the caller's group)
        if !procs.is_null() && !join_group(procs) {
            libc::_exit(1);
        }
        let idle = libc::sched_param { sched_priority: 0 };
        // never spin above idle priority: that would take real time
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &idle) != 0 {
            libc::_exit(1);
        }
        // Nothing of the parent's is held: its sockets (another client to the server's
        // other-client check, a connection kept open past its close), its locks and
        // the write end of its pipes. close_range, else one by one on an older kernel.
        // All but `stat`, the parent's own stat file (opened by the parent: a path by
        // its PID would name another process in a PID namespace without its own /proc).
        let keep = if stat >= 0 { stat as u32 } else { u32::MAX };
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0;
        let above =
            keep == u32::MAX || libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32) == 0;
        if !(below && above) {
            let mut most: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut most);
            for fd in 0..most.rlim_cur.min(1 << 20) as i32 {
                if fd != stat {
                    libc::close(fd);
                }
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
            if n & 0xFFFF == 0 {
                if libc::getppid() != parent {
                    libc::_exit(0);
                }
                wait_while_stopped(stat, parent, slot);
            }
        }
    }
}

impl Awake {
    /// Start a spinner on each CPU of the calling thread's affinity (none when it has
    /// more than MAX_CPUS, or a process cannot be made: the run goes on asleep), each in
    /// the cgroup whose cgroup.procs file is `procs` when given.
    pub fn start(procs: Option<&std::ffi::CStr>) -> Awake {
        let procs = procs.map_or(std::ptr::null(), |p| p.as_ptr());
        let cpus = affinity();
        let mut awake = Awake {
            pids: Vec::new(),
            stopped: std::ptr::null_mut(),
        };
        if cpus.len() > MAX_CPUS {
            return awake;
        }
        // SAFETY: an anonymous shared mapping (zeroed by the kernel), or none.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STOPPED_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page != libc::MAP_FAILED {
            awake.stopped = page as *mut u64;
        }
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // This process's own stat file, for the spinners to read its state from (pread
        // at 0 each look): opened here, it names this process whatever its PID means
        // in the /proc mounted (a PID namespace without its own /proc).
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        #[allow(clippy::manual_c_str_literals)] // (c"" needs a newer Rust than Debian's)
        let stat = unsafe {
            libc::open(
                b"/proc/self/stat\0".as_ptr() as *const libc::c_char,
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        for (i, cpu) in cpus.into_iter().enumerate() {
            let slot = if awake.stopped.is_null() {
                std::ptr::null_mut()
            } else {
                // SAFETY: i < MAX_CPUS slots of the page
                unsafe { awake.stopped.add(i) }
            };
            // SAFETY: the child runs only `spin`, which makes system calls and exits.
            match unsafe { libc::fork() } {
                0 => spin(cpu, parent, stat, slot, procs),
                pid if pid > 0 => awake.pids.push(pid),
                _ => break,
            }
        }
        if stat >= 0 {
            // SAFETY: the descriptor opened above, no longer needed here
            unsafe { libc::close(stat) };
        }
        awake
    }

    /// Stop the spinners; returns (spinners that were spinning, their CPU seconds
    /// together, the seconds they saw this process stopped: the most any saw). One that
    /// could not drop to idle priority or take its CPU exited on its own and is not
    /// counted.
    pub fn stop(mut self) -> (usize, f64, f64) {
        let mut spun = 0;
        let mut cpu = 0.0;
        let mut stopped_ns = 0u64;
        for (i, pid) in std::mem::take(&mut self.pids).into_iter().enumerate() {
            let (status, used) = reap(pid);
            if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL {
                spun += 1;
            }
            cpu += used;
            if !self.stopped.is_null() {
                // SAFETY: slot i of the mapped page; its writer has ended
                stopped_ns =
                    stopped_ns.max(unsafe { std::ptr::read_volatile(self.stopped.add(i)) });
            }
        }
        (spun, cpu, stopped_ns as f64 * 1e-9)
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
        if !self.stopped.is_null() {
            // SAFETY: the page mapped in start, no spinner left to write it
            unsafe { libc::munmap(self.stopped as *mut libc::c_void, STOPPED_BYTES) };
            self.stopped = std::ptr::null_mut();
        }
    }
}
