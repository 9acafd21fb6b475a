/* The duty-cycle co-runner: takes (1 - share) of one CPU, period after period.
 *
 *   corunner CPU PERIOD_US SPIN_US WATCH_PID
 *
 * Pinned to CPU at SCHED_FIFO priority 1, it spins SPIN_US of every PERIOD_US
 * (period edges on CLOCK_MONOTONIC, absolute, so lateness does not accumulate)
 * and sleeps the rest, leaving the CPU to the server's normal-priority tasks.
 * It exits when WATCH_PID is gone, a zombie or, given WATCH_START (its start time in
 * /proc/PID/stat), another process under that number (checked every ~100 ms), or on
 * SIGTERM, so a server that dies never leaves a spinner behind. Python's timing (sleep
 * overshoot ~60 us) is too coarse for a 1 ms period; this is the reason for C.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Whether PID has ended: no such process, a zombie no one has reaped yet (kill(pid, 0)
 * succeeds on a zombie, and an orphan's is reaped by init a second or more late), or
 * another process under the same number (its start time, field 22, is not START; START
 * < 0: not compared). */
static int gone(int pid, long long start) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT || errno == ESRCH;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end = strrchr(buf, ')');  /* the name may hold spaces and parentheses */
    if (!end || end[1] != ' ') return 0;
    if (end[2] == 'Z' || end[2] == 'X') return 1;
    if (start < 0) return 0;
    char *p = end + 2;
    for (int field = 3; field < 22 && p; field++) {  /* the state is field 3 */
        p = strchr(p, ' ');
        if (p) p++;
    }
    return p && strtoll(p, NULL, 10) != start;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: corunner CPU PERIOD_US SPIN_US WATCH_PID [WATCH_START]\n");
        return 2;
    }
    int cpu = atoi(argv[1]);
    long long period = atoll(argv[2]) * 1000LL, spin = atoll(argv[3]) * 1000LL;
    int watch = atoi(argv[4]);
    long long start = argc == 6 ? atoll(argv[5]) : -1;
    if (cpu < 0 || period <= 0 || spin < 0 || spin > period || watch <= 0) {
        fprintf(stderr, "corunner: bad arguments\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("corunner: affinity"); return 1; }
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) { perror("corunner: SCHED_FIFO"); return 1; }
    long long edge = now_ns(), checked = edge;
    while (!stop) {
        while (now_ns() < edge + spin) { /* spin: the CPU time the share does not get */ }
        edge += period;
        long long t = now_ns();
        if (edge < t) edge = t;  /* woke past a whole period: restart the phase, no catch-up */
        struct timespec ts = {.tv_sec = edge / 1000000000LL, .tv_nsec = edge % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR && !stop) {}
        if (edge - checked > 100000000LL) {
            checked = edge;
            if (gone(watch, start)) break;
        }
    }
    return 0;
}
