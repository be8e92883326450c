/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Draw d of a generator is half of one Philox block: block d >> 1 (mod 2^63), its words 0 and 1
 * when d is even, 2 and 3 when odd, so one block serves two draws. Value i of a draw depends only
 * on (seed, counter + i), so any split of the work across threads gives the same numbers.
 * Dropout's keep masks need no 53 bits: element e of a mask at counter c is one 32-bit word,
 * word e & 1 of draw c + e / 2, so a mask of n elements takes (n + 1) / 2 draws and one block
 * serves four elements. The vector paths of the kernel table (tensor/simd/) run 16 blocks at
 * once, 4 per AVX2 vector, and the AVX-512 masks 2 vectors of 8, with the same integer
 * arithmetic: the same numbers, bit for bit. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "simd/philox.h"

typedef struct { uint32_t v[4]; } u32x4;

static u32x4 philox(uint64_t seed, uint64_t ctr) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    u32x4 c = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), PHILOX_W0, PHILOX_W1}};
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(PHILOX_M0, c.v[0], &hi0);
        uint32_t lo1 = mulhilo(PHILOX_M1, c.v[2], &hi1);
        u32x4 n = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
        c = n;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return c;
}

/* the 53-bit integer a draw's uniform is made of: u53 = x · 2^-53 */
static inline uint64_t x53(uint32_t a, uint32_t b) { return ((uint64_t)a << 21) ^ (b >> 11); }
/* draw d's 53-bit integer, from its half of its block */
static inline uint64_t draw_x53(uint64_t seed, uint64_t d) {
    u32x4 r = philox(seed, (d >> 1) & BLOCK_MASK);
    return d & 1 ? x53(r.v[2], r.v[3]) : x53(r.v[0], r.v[1]);
}

/* word e & 1 of draw c + e / 2: word w & 3 of block (c >> 1) + (w >> 2), w = 2 (c & 1) + e */
uint32_t ag__rng_mask_word(uint64_t seed, uint64_t c, uint64_t e) {
    uint64_t w = 2 * (c & 1) + e;
    return philox(seed, ((c >> 1) + (w >> 2)) & BLOCK_MASK).v[w & 3];
}

uint64_t ag__u32_count_below(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1) return (uint64_t)1 << 32;
    return (uint64_t)ceil(v * 0x1.0p32); /* v · 2^32 is exact: a power-of-two scaling */
}

/* ---- the scalar reference: one block per draw ---- */

void ag__rng_uniform_scalar(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++) out[i] = (double)draw_x53(seed, counter + (uint64_t)i) * 0x1.0p-53;
}

void ag__rng_keep_scalar(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                         uint8_t *keep, uint8_t *bits) {
    for (int64_t i0 = 0; i0 < n; i0 += 256) { /* i0 a multiple of 8: a block owns whole bytes of bits */
        uint64_t x[256];
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        for (int64_t j = 0; j < m; j++) x[j] = ag__rng_mask_word(seed, counter, (uint64_t)(first + i0 + j));
        for (int64_t j = 0; j < m; j += 8) {
            unsigned byte = 0, e = m - j < 8 ? (unsigned)(m - j) : 8, mask = (1u << e) - 1;
            for (unsigned q = 0; q < e; q++) {
                unsigned k = (x[j + q] < t) != at_least;
                if (keep) keep[i0 + j + q] = (uint8_t)k;
                byte |= k << q;
            }
            if (bits) bits[(i0 + j) >> 3] = (uint8_t)((bits[(i0 + j) >> 3] & ~mask) | byte);
        }
    }
}

/* ---- the vector paths: the kernel table's (tensor/simd/kernels.h) ---- */

/* the first n (<= 64) bits of k from bit 0 of o on: whole bytes, then the last one's low bits
 * (its others are kept) */
static inline void put_bits(uint8_t *o, uint64_t k, int64_t n) {
    for (int64_t j = 0; j < n / 8; j++) o[j] = (uint8_t)(k >> 8 * j);
    unsigned part = (unsigned)(n & 7), m = (1u << part) - 1;
    if (part) o[n / 8] = (uint8_t)((o[n / 8] & ~m) | ((k >> (n & ~7)) & m));
}

/* Steps start at a block: a mask whose first word is word s of its block takes bits s.. of
 * its first step. below: one step's 64 decisions (a kernel table's rng_below64). */
AG_AVX2_CLONES static void keep_steps(uint64_t (*below)(const uint32_t key[10][2], uint64_t blk, uint64_t t), uint64_t seed,
                       uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least, uint8_t *keep,
                       uint8_t *bits) {
    uint32_t key[10][2];
    round_keys(seed, key);
    const uint64_t flip = at_least ? ~(uint64_t)0 : 0, w0 = 2 * (counter & 1) + (uint64_t)first;
    uint64_t blk = (counter >> 1) + (w0 >> 2);
    unsigned s = (unsigned)(w0 & 3);
    /* outputs i .. i+63 are bits s .. s+63 of the steps at word i - s and i - s + 64 */
    uint64_t cur = n > 0 ? below(key, blk, t) : 0;
    for (int64_t i = 0; i < n; i += 64) {
        uint64_t next = i + 64 < n + s ? below(key, blk + (uint64_t)(i + 64) / 4, t) : 0;
        uint64_t k = (s ? cur >> s | next << (64 - s) : cur) ^ flip;
        int64_t left = n - i < 64 ? n - i : 64;
        if (keep)
            for (int64_t j = 0; j < left; j++) keep[i + j] = (uint8_t)(k >> j & 1);
        if (bits) put_bits(bits + (i >> 3), k, left);
        cur = next;
    }
}

const char *ag__rng_vector_path(void) { return ag__kernels->rng_path; }

void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    if (ag__kernels->rng_uniform) ag__kernels->rng_uniform(seed, counter, n, out);
    else ag__rng_uniform_scalar(seed, counter, n, out);
}

void ag__rng_keep_with(const ag__kernel_table *K, uint64_t seed, uint64_t counter, int64_t first, int64_t n,
                       uint64_t t, bool at_least, uint8_t *keep, uint8_t *bits) {
    if (K->rng_below64) keep_steps(K->rng_below64, seed, counter, first, n, t, at_least, keep, bits);
    else ag__rng_keep_scalar(seed, counter, first, n, t, at_least, keep, bits);
}

void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                  uint8_t *keep, uint8_t *bits) {
    ag__rng_keep_with(ag__kernels, seed, counter, first, n, t, at_least, keep, bits);
}

/* ---- the public generator ---- */

ag_rng ag_rng_new(uint64_t seed) { return (ag_rng){.seed = seed}; }

void ag_rng_share_batch(ag_rng *rng, int64_t first, int64_t count, int64_t total) {
    if (!rng) rng = ag_rng_global();
    bool off = first == 0 && count == 0 && total == 0;
    if (!off && !(first >= 0 && count > 0 && total >= first + count)) {
        ag_error("ag_rng_share_batch", "samples %lld .. %lld of %lld: expected 0 <= first, 0 < count and "
                 "first + count <= total (or all 0 to end the sharing)",
                 (long long)first, (long long)(first + count - 1), (long long)total);
        return;
    }
    rng->share_first = first;
    rng->share_count = count;
    rng->share_total = total;
}

static ag_rng global_rng = {.seed = 0x5eed};
ag_rng *ag_rng_global(void) { return &global_rng; }
void ag_manual_seed(uint64_t seed) { global_rng = ag_rng_new(seed); }

/* draws per block, each block from its own counter: the blocks go to the threads above
 * AG_PAR_THRESHOLD draws, and only this top-level entry opens an OpenMP region */
#define RNG_BLOCK 4096

void ag_rng_uniform_f64(ag_rng *rng, int64_t n, double *out) {
    if (!rng) rng = &global_rng;
    uint64_t seed = rng->seed, base = rng->counter;
    int64_t par_work = n;
    AG_PAR_FOR
    for (int64_t i = 0; i < n; i += RNG_BLOCK)
        ag__rng_uniform_serial(seed, base + (uint64_t)i, n - i < RNG_BLOCK ? n - i : RNG_BLOCK, out + i);
    rng->counter += (uint64_t)n;
}

void ag_rng_normal_f64(ag_rng *rng, int64_t n, double *out) {
    if (!rng) rng = &global_rng;
    uint64_t seed = rng->seed, base = rng->counter;
#pragma omp parallel for if (n > AG_PAR_THRESHOLD) schedule(static)
    for (int64_t i = 0; i < n; i++) { /* Box-Muller of draws d and d + 1: one block when d is even */
        uint64_t d = base + 2 * (uint64_t)i, x1, x2;
        if (d & 1) {
            x1 = draw_x53(seed, d);
            x2 = draw_x53(seed, d + 1);
        } else {
            u32x4 r = philox(seed, (d >> 1) & BLOCK_MASK);
            x1 = x53(r.v[0], r.v[1]);
            x2 = x53(r.v[2], r.v[3]);
        }
        double u1 = 1.0 - (double)x1 * 0x1.0p-53; /* (0,1] so log is finite */
        double u2 = (double)x2 * 0x1.0p-53;
        out[i] = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
    }
    rng->counter += 2 * (uint64_t)n;
}
