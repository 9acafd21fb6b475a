/* A speed probe for bench/bench_host_probe.py: one small fixed kernel every period, on
 * one CPU at SCHED_FIFO (so that it measures the CPU, not the run queue), printing
 * "monotonic_seconds kernel_microseconds" per run of the kernel.
 *
 *   host_probe CPU KERNEL PERIOD_S TOTAL_S
 *
 * KERNEL: "cpu" (xorshift into a 64 KiB table: cycles), "fault" (map 1 MiB, touch
 * every page, unmap: page faults and zeroing, what a PHP request's memory costs) or
 * "chase" (a random pointer chase over 8 MiB: the memory system). Each takes about
 * 0.3 ms, under 1% of a 50 ms period.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static volatile sig_atomic_t stop = 0;
volatile uint64_t probe_sink; /* keeps the kernels from being optimized away */
static void on_signal(int s) { (void)s; stop = 1; }
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t table[8192];
static uint64_t cpu_kernel(uint64_t x) {
  for (long i = 0; i < 200000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; table[x & 8191] += x; }
  return x;
}

static uint64_t fault_kernel(void) {
  const size_t bytes = 1 << 20;
  char *b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return 0;
  for (size_t i = 0; i < bytes; i += 4096) b[i] = (char)i;
  uint64_t v = (uint64_t)b[bytes / 2];
  munmap(b, bytes);
  return v;
}

static size_t *ring;
static size_t ring_n;
static void chase_setup(void) {
  ring_n = (8u << 20) / 64;
  ring = aligned_alloc(64, ring_n * 64);
  size_t *perm = malloc(ring_n * sizeof *perm);
  if (!ring || !perm) exit(1);
  for (size_t i = 0; i < ring_n; i++) perm[i] = i;
  uint64_t x = 88172645463325252ULL;
  for (size_t i = ring_n - 1; i > 0; i--) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    size_t j = x % (i + 1), t = perm[i];
    perm[i] = perm[j]; perm[j] = t;
  }
  for (size_t i = 0; i < ring_n; i++) ring[perm[i] * 8] = perm[(i + 1) % ring_n] * 8;
  free(perm);
}
static size_t chase_at = 0; /* where the chase goes on from: a multiple of 8 on the ring */
static size_t chase_kernel(void) {
  for (long i = 0; i < 1500; i++) chase_at = ring[chase_at];
  return chase_at;
}

int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: host_probe CPU cpu|fault|chase PERIOD_S TOTAL_S\n"); return 2; }
  int cpu = atoi(argv[1]);
  const char *kind = argv[2];
  double period = atof(argv[3]), total = atof(argv[4]);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("sched_setaffinity"); return 1; }
  struct sched_param prio = {.sched_priority = 10};
  if (sched_setscheduler(0, SCHED_FIFO, &prio) != 0) perror("SCHED_FIFO (kept the default policy)");
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  int mode = strcmp(kind, "cpu") == 0 ? 0 : strcmp(kind, "fault") == 0 ? 1 : strcmp(kind, "chase") == 0 ? 2 : -1;
  if (mode < 0) { fprintf(stderr, "unknown kernel %s\n", kind); return 2; }
  if (mode == 2) chase_setup();
  uint64_t sink = 1;
  double end = now() + total;
  struct timespec gap = {(time_t)period, (long)((period - (time_t)period) * 1e9)};
  while (!stop && now() < end) {
    double t0 = now();
    sink += mode == 0 ? cpu_kernel(sink) : mode == 1 ? fault_kernel() : chase_kernel();
    double t1 = now();
    printf("%.6f %.1f\n", t0, (t1 - t0) * 1e6);
    fflush(stdout);
    nanosleep(&gap, NULL);
  }
  probe_sink = sink;
  return 0;
}
