/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Value i of a draw depends only on (seed, counter + i), so any split of the work across
 * threads gives the same numbers. */
#include <math.h>

#include "internal.h"

typedef struct { uint32_t v[4]; } u32x4;

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

static u32x4 philox(uint64_t seed, uint64_t ctr) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    u32x4 c = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), 0x9E3779B9u, 0xBB67AE85u}};
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, c.v[0], &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, c.v[2], &hi1);
        u32x4 n = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
        c = n;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

static inline double u53(uint32_t a, uint32_t b) {
    return (double)(((uint64_t)a << 21) ^ (b >> 11)) * 0x1.0p-53;
}

ag_rng ag_rng_new(uint64_t seed) { return (ag_rng){seed, 0}; }

static ag_rng global_rng = {0x5eed, 0};
ag_rng *ag_rng_global(void) { return &global_rng; }
void ag_manual_seed(uint64_t seed) { global_rng = ag_rng_new(seed); }

void ag_rng_uniform_f64(ag_rng *rng, int64_t n, double *out) {
    if (!rng) rng = &global_rng;
    uint64_t base = rng->counter;
#pragma omp parallel for if (n > AG_PAR_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        u32x4 r = philox(rng->seed, base + (uint64_t)i);
        out[i] = u53(r.v[0], r.v[1]);
    }
    rng->counter += (uint64_t)n;
}

void ag_rng_normal_f64(ag_rng *rng, int64_t n, double *out) {
    if (!rng) rng = &global_rng;
    uint64_t base = rng->counter;
#pragma omp parallel for if (n > AG_PAR_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        u32x4 r = philox(rng->seed, base + (uint64_t)i);
        double u1 = 1.0 - u53(r.v[0], r.v[1]); /* (0,1] so log is finite */
        double u2 = u53(r.v[2], r.v[3]);
        out[i] = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    }
    rng->counter += (uint64_t)n;
}
