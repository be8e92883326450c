/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Value i of a draw depends only on (seed, counter + i), so any split of the work across
 * threads gives the same numbers. Where the CPU has AVX-512F, 32 counters run at once, 8 per
 * vector, and with AVX2 8 at once, 4 per vector, with the same integer arithmetic: the same
 * numbers, bit for bit. */
#include <math.h>
#include <string.h>

#include "internal.h"

typedef struct { uint32_t v[4]; } u32x4;

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* key increments, also the counter's two fixed words */
#define PHILOX_W1 0xBB67AE85u

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

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
static inline double u53(uint32_t a, uint32_t b) { return (double)x53(a, b) * 0x1.0p-53; }

uint64_t ag__u53_count_below(double v) {
    if (!(v > 0)) return 0;
    if (v >= 1) return (uint64_t)1 << 53;
    return (uint64_t)ceil(v * 0x1.0p53); /* v · 2^53 is exact: a power-of-two scaling */
}

/* ---- the scalar reference ---- */

void ag__rng_uniform_scalar(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++) {
        u32x4 r = philox(seed, counter + (uint64_t)i);
        out[i] = u53(r.v[0], r.v[1]);
    }
}

void ag__rng_keep_scalar(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least, uint8_t *keep,
                         uint8_t *bits) {
    for (int64_t i0 = 0; i0 < n; i0 += 256) { /* i0 a multiple of 8: a block owns whole bytes of bits */
        uint64_t x[256];
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        for (int64_t j = 0; j < m; j++) { /* a loop the compiler can vectorise */
            u32x4 r = philox(seed, counter + (uint64_t)(i0 + j));
            x[j] = x53(r.v[0], r.v[1]);
        }
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

/* ---- 8 counters per AVX-512 vector, 4 vectors at a time ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RNG_X86 1
#define TARGET __attribute__((target("avx512f")))

/* draws per step: NV vectors of 8 consecutive counters, independent chains for the pipelines */
#define NV 4
#define STEP (8 * NV)

/* Each Philox word lives in the low half of a 64-bit lane: vpmuludq then gives the whole 64-bit
 * product (lo in the low half, hi a shift away) and reads only low halves, so the high halves
 * may hold garbage until the end. Counters are 64-bit lanes, so the carry into word 1 is free.
 * w0, w1: words 0 and 1 of philox(seed, ctr + 8v + lane); key[r] holds round r's key words. */
static inline TARGET void philox8x4(const uint32_t key[10][2], uint64_t ctr, __m512i w0[NV], __m512i w1[NV]) {
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    __m512i c0[NV], c1[NV], c2[NV], c3[NV];
    /* round 0: words 2 and 3 are the same constants in every lane */
    uint32_t h1, l1 = mulhilo(PHILOX_M1, PHILOX_W0, &h1);
    __m512i x0 = _mm512_set1_epi64(h1 ^ key[0][0]), x2 = _mm512_set1_epi64(PHILOX_W1 ^ key[0][1]);
    for (int v = 0; v < NV; v++) {
        __m512i ctrv = _mm512_add_epi64(_mm512_set1_epi64((long long)ctr),
                                        _mm512_setr_epi64(8 * v, 8 * v + 1, 8 * v + 2, 8 * v + 3, 8 * v + 4,
                                                          8 * v + 5, 8 * v + 6, 8 * v + 7));
        __m512i p0 = _mm512_mul_epu32(m0, ctrv);
        c0[v] = _mm512_xor_si512(_mm512_srli_epi64(ctrv, 32), x0);
        c1[v] = _mm512_set1_epi64(l1);
        c2[v] = _mm512_xor_si512(_mm512_srli_epi64(p0, 32), x2);
        c3[v] = p0;
    }
    for (int r = 1; r < 9; r++) {
        __m512i k0 = _mm512_set1_epi64(key[r][0]), k1 = _mm512_set1_epi64(key[r][1]);
        for (int v = 0; v < NV; v++) {
            __m512i p0 = _mm512_mul_epu32(m0, c0[v]), p1 = _mm512_mul_epu32(m1, c2[v]);
            c0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[v], k0, 0x96);
            c2[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[v], k1, 0x96);
            c1[v] = p1;
            c3[v] = p0;
        }
    }
    /* round 9: only words 0 and 1 are wanted, and they come from word 2 alone */
    __m512i k0 = _mm512_set1_epi64(key[9][0]);
    for (int v = 0; v < NV; v++) {
        __m512i p1 = _mm512_mul_epu32(m1, c2[v]);
        w0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[v], k0, 0x96);
        w1[v] = p1;
    }
}

/* x = (a << 21) ^ (b >> 11) from words with garbage high halves */
static inline TARGET __m512i x53_8(__m512i a, __m512i b) {
    return _mm512_or_si512(_mm512_srli_epi64(_mm512_slli_epi64(a, 32), 11),
                           _mm512_srli_epi64(_mm512_slli_epi64(b, 32), 43));
}

/* the first n (<= 32) bits of k from bit 0 of o on: whole bytes, then the last one's low bits
 * (its others are kept) */
static inline void put_bits(uint8_t *o, uint32_t k, int64_t n) {
    for (int64_t j = 0; j < n / 8; j++) o[j] = (uint8_t)(k >> 8 * j);
    unsigned part = (unsigned)(n & 7), m = (1u << part) - 1;
    if (part) o[n / 8] = (uint8_t)((o[n / 8] & ~m) | ((k >> (n & ~7)) & m));
}

static void round_keys(uint64_t seed, uint32_t key[10][2]) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += PHILOX_W0, k1 += PHILOX_W1) key[r][0] = k0, key[r][1] = k1;
}

static TARGET void uniform_avx512(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    uint32_t key[10][2];
    round_keys(seed, key);
    const __m512d scale = _mm512_set1_pd(0x1.0p-53), two21 = _mm512_set1_pd(0x1.0p21);
    for (int64_t i = 0; i < n; i += STEP) {
        __m512i a[NV], b[NV];
        philox8x4(key, counter + (uint64_t)i, a, b);
        for (int v = 0; v < NV; v++) {
            /* x = a · 2^21 + (b >> 11) < 2^53, and each step below is exact */
            __m512d ad = _mm512_cvtepu32_pd(_mm512_cvtepi64_epi32(a[v]));
            __m512d bd = _mm512_cvtepu32_pd(_mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_slli_epi64(b[v], 32), 43)));
            __m512d u = _mm512_mul_pd(_mm512_fmadd_pd(ad, two21, bd), scale);
            int64_t left = n - i - 8 * v;
            if (left >= 8) _mm512_storeu_pd(out + i + 8 * v, u);
            else if (left > 0) _mm512_mask_storeu_pd(out + i + 8 * v, (__mmask8)((1u << left) - 1), u);
        }
    }
}

static TARGET void keep_avx512(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least,
                               uint8_t *keep, uint8_t *bits) {
    uint32_t key[10][2];
    round_keys(seed, key);
    const __m512i tv = _mm512_set1_epi64((long long)t), one = _mm512_set1_epi64(1);
    const uint32_t flip = at_least ? 0xFFFFFFFFu : 0;
    for (int64_t i = 0; i < n; i += STEP) {
        __m512i a[NV], b[NV];
        philox8x4(key, counter + (uint64_t)i, a, b);
        uint32_t k = 0;
        uint8_t bytes[STEP];
        for (int v = 0; v < NV; v++) {
            __mmask8 m = _mm512_cmplt_epu64_mask(x53_8(a[v], b[v]), tv) ^ (__mmask8)flip;
            k |= (uint32_t)m << 8 * v;
            if (keep) _mm_storel_epi64((__m128i *)(bytes + 8 * v), _mm512_cvtepi64_epi8(_mm512_maskz_mov_epi64(m, one)));
        }
        int64_t left = n - i;
        if (keep) memcpy(keep + i, bytes, (size_t)(left < STEP ? left : STEP));
        if (bits) put_bits(bits + (i >> 3), k, left < STEP ? left : STEP);
    }
}

/* ---- 4 counters per AVX2 vector, NV2 vectors at a time ----
 * The same arithmetic as above in 256-bit lanes (AVX2 has vpmuludq and 64-bit shifts; three-way
 * xors are two xors). 4 chains measured fastest on Zen 3 (2.4 ns a draw; 2: 2.9) although their
 * 16 words do not all fit the 16 registers. */
#define TARGET2 __attribute__((target("avx2,fma")))
#define NV2 4
#define STEP2 (4 * NV2)

static inline TARGET2 void philox_avx2(const uint32_t key[10][2], uint64_t ctr, __m256i w0[NV2], __m256i w1[NV2]) {
    const __m256i m0 = _mm256_set1_epi64x(PHILOX_M0), m1 = _mm256_set1_epi64x(PHILOX_M1);
    __m256i c0[NV2], c1[NV2], c2[NV2], c3[NV2];
    uint32_t h1, l1 = mulhilo(PHILOX_M1, PHILOX_W0, &h1);
    __m256i x0 = _mm256_set1_epi64x(h1 ^ key[0][0]), x2 = _mm256_set1_epi64x(PHILOX_W1 ^ key[0][1]);
    for (int v = 0; v < NV2; v++) {
        __m256i ctrv = _mm256_add_epi64(_mm256_set1_epi64x((long long)ctr),
                                        _mm256_setr_epi64x(4 * v, 4 * v + 1, 4 * v + 2, 4 * v + 3));
        __m256i p0 = _mm256_mul_epu32(m0, ctrv);
        c0[v] = _mm256_xor_si256(_mm256_srli_epi64(ctrv, 32), x0);
        c1[v] = _mm256_set1_epi64x(l1);
        c2[v] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), x2);
        c3[v] = p0;
    }
    for (int r = 1; r < 9; r++) {
        __m256i k0 = _mm256_set1_epi64x(key[r][0]), k1 = _mm256_set1_epi64x(key[r][1]);
        for (int v = 0; v < NV2; v++) {
            __m256i p0 = _mm256_mul_epu32(m0, c0[v]), p1 = _mm256_mul_epu32(m1, c2[v]);
            c0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), k0);
            c2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[v]), k1);
            c1[v] = p1;
            c3[v] = p0;
        }
    }
    __m256i k0 = _mm256_set1_epi64x(key[9][0]);
    for (int v = 0; v < NV2; v++) {
        __m256i p1 = _mm256_mul_epu32(m1, c2[v]);
        w0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), k0);
        w1[v] = p1;
    }
}

static inline TARGET2 __m256i x53_4(__m256i a, __m256i b) {
    return _mm256_or_si256(_mm256_srli_epi64(_mm256_slli_epi64(a, 32), 11),
                           _mm256_srli_epi64(_mm256_slli_epi64(b, 32), 43));
}

static TARGET2 void uniform_avx2(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    uint32_t key[10][2];
    round_keys(seed, key);
    /* an integer y < 2^52 becomes a double exactly as bits(y | 2^52's exponent) - 2^52 */
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF), magic = _mm256_set1_epi64x(0x4330000000000000);
    const __m256d two52 = _mm256_set1_pd(0x1.0p52), scale = _mm256_set1_pd(0x1.0p-53), two21 = _mm256_set1_pd(0x1.0p21);
    for (int64_t i = 0; i < n; i += STEP2) {
        __m256i a[NV2], b[NV2];
        philox_avx2(key, counter + (uint64_t)i, a, b);
        for (int v = 0; v < NV2; v++) {
            __m256d ad = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(a[v], lo32), magic)), two52);
            __m256i bs = _mm256_srli_epi64(_mm256_slli_epi64(b[v], 32), 43);
            __m256d bd = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(bs, magic)), two52);
            __m256d u = _mm256_mul_pd(_mm256_fmadd_pd(ad, two21, bd), scale); /* exact, as above */
            int64_t left = n - i - 4 * v;
            if (left >= 4) {
                _mm256_storeu_pd(out + i + 4 * v, u);
            } else if (left > 0) {
                double t[4];
                _mm256_storeu_pd(t, u);
                memcpy(out + i + 4 * v, t, (size_t)left * sizeof(double));
            }
        }
    }
}

static TARGET2 void keep_avx2(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least, uint8_t *keep,
                              uint8_t *bits) {
    uint32_t key[10][2];
    round_keys(seed, key);
    /* x < 2^53 and t <= 2^53, so the signed 64-bit compare AVX2 has is the unsigned one */
    const __m256i tv = _mm256_set1_epi64x((long long)t);
    const unsigned flip = at_least ? (1u << STEP2) - 1 : 0;
    for (int64_t i = 0; i < n; i += STEP2) {
        __m256i a[NV2], b[NV2];
        philox_avx2(key, counter + (uint64_t)i, a, b);
        unsigned k = 0;
        for (int v = 0; v < NV2; v++)
            k |= (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(tv, x53_4(a[v], b[v])))) << 4 * v;
        k ^= flip;
        int64_t left = n - i < STEP2 ? n - i : STEP2;
        if (keep)
            for (int64_t j = 0; j < left; j++) keep[i + j] = (uint8_t)(k >> j & 1);
        if (bits) put_bits(bits + (i >> 3), k, left);
    }
}
#endif

const char *ag__rng_vector_path(void) {
    static const char *names[] = {[AG_ISA_NONE] = NULL, [AG_ISA_AVX2] = "AVX2", [AG_ISA_AVX512] = "AVX-512"};
    return names[ag__cpu_isa()];
}

void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out) {
#ifdef RNG_X86
    ag__isa isa = ag__cpu_isa();
    if (isa == AG_ISA_AVX512 || isa == AG_ISA_AVX2) {
        (isa == AG_ISA_AVX512 ? uniform_avx512 : uniform_avx2)(seed, counter, n, out);
        return;
    }
#endif
    ag__rng_uniform_scalar(seed, counter, n, out);
}

void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least, uint8_t *keep,
                  uint8_t *bits) {
#ifdef RNG_X86
    ag__isa isa = ag__cpu_isa();
    if (isa == AG_ISA_AVX512 || isa == AG_ISA_AVX2) {
        (isa == AG_ISA_AVX512 ? keep_avx512 : keep_avx2)(seed, counter, n, t, at_least, keep, bits);
        return;
    }
#endif
    ag__rng_keep_scalar(seed, counter, n, t, at_least, keep, bits);
}

/* ---- the public generator ---- */

ag_rng ag_rng_new(uint64_t seed) { return (ag_rng){seed, 0}; }

static ag_rng global_rng = {0x5eed, 0};
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
