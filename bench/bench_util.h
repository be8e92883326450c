/* Shared by the bench programs: a monotonic clock, the median of repeated runs, peak RSS and
 * the one output line per measurement that bench/report.py joins with the PyTorch side:
 *     RESULT <side> <benchmark> <shape> <threads> <median_ms> <gflop per run> <note>
 * Header-only so bench/meson.build stays one executable per program. */
#ifndef AG_BENCH_UTIL_H
#define AG_BENCH_UTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../attograd.h"

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median of n samples (sorts them in place); the fastest instead with BENCH_STAT=min in the
 * environment, for A/B runs of two builds on a noisy machine (bench/run.sh reports medians) */
static inline double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp);
    const char *stat = getenv("BENCH_STAT");
    if (stat && !strcmp(stat, "min")) return t[0];
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* peak resident set of this process in MiB (Linux reports ru_maxrss in KiB) */
static inline double bench_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* the thread count the run asked for, from the environment both sides are given */
static inline int bench_threads(void) {
    const char *s = getenv("OMP_NUM_THREADS");
    return s && atoi(s) > 0 ? atoi(s) : 1;
}

static inline void bench_result(const char *name, const char *shape, int threads, double ms, double gflop,
                         const char *note) {
    printf("RESULT attograd %s %s %d %.4f %.6f %s\n", name, shape, threads, ms, gflop, note && *note ? note : "-");
    fflush(stdout);
}

/* repetitions from the command line (--reps N), else def; --quick divides by 4 */
static inline int bench_reps(int argc, char **argv, int def) {
    int reps = def;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) reps = def / 4;
    }
    return reps < 3 ? 3 : reps;
}

/* The data both sides use, from a formula rather than either side's generator:
 * v[i] = scale * sin(0.37 i + 1.3 k + 0.1), in double, then rounded to the tensor's dtype
 * (bench/common.py computes the same). k tells tensors apart. */
static inline void bench_fill(double *v, long n, int k, double scale) {
    for (long i = 0; i < n; i++) v[i] = scale * sin(0.37 * (double)i + 1.3 * k + 0.1);
}
/* t (contiguous, any float dtype) filled by bench_fill in row-major order */
static inline void bench_fill_tensor(ag_tensor *t, int k, double scale) {
    long n = (long)ag_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    bench_fill(v, n, k, scale);
    ag_arena *tmp = ag_arena_new(1 << 12), *prev = ag_arena_use(tmp);
    ag_copy_(t, ag_wrap(AG_F64, t->ndim, t->shape, v));
    ag_arena_use(prev);
    ag_arena_free(tmp);
    free(v);
}
/* Σ of t's elements in double: both sides print it, so a run shows they computed the same */
static inline double bench_checksum(const ag_tensor *t) {
    long n = (long)ag_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1)), s = 0;
    ag_to_buffer(t, AG_F64, v);
    for (long i = 0; i < n; i++) s += v[i];
    free(v);
    return s;
}
#endif
