/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Value i of a draw depends only on (seed, counter + i), so any split of the work across
 * threads gives the same numbers. Where the CPU has AVX-512F, 16 counters run at once, one per
 * 32-bit lane, with the same integer arithmetic: the same numbers, bit for bit. */
#include <math.h>
#include <pthread.h>
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
    for (int64_t i = 0; i < n; i++) {
        u32x4 r = philox(seed, counter + (uint64_t)i);
        unsigned k = (x53(r.v[0], r.v[1]) < t) != at_least;
        if (keep) keep[i] = (uint8_t)k;
        if (bits) bits[i >> 3] = (uint8_t)((bits[i >> 3] & ~(1u << (i & 7))) | k << (i & 7));
    }
}

/* ---- 16 counters per AVX-512 vector ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RNG_X86 1
#define TARGET __attribute__((target("avx512f")))

/* lo, hi of m · b in each 32-bit lane (m the same in every lane) */
static inline TARGET void mulhilo16(__m512i m, __m512i b, __m512i *lo, __m512i *hi) {
    __m512i even = _mm512_mul_epu32(m, b), odd = _mm512_mul_epu32(m, _mm512_srli_epi64(b, 32));
    *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

/* words 0 and 1 of philox(seed, ctr + lane) for the 16 lanes; key[r] holds round r's key words */
static inline TARGET void philox16(const uint32_t key[10][2], uint64_t ctr, __m512i *w0, __m512i *w1) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i lo = _mm512_set1_epi32((int)(uint32_t)ctr), hi = _mm512_set1_epi32((int)(uint32_t)(ctr >> 32));
    __m512i c0 = _mm512_add_epi32(lo, iota); /* a lane that wrapped carries into word 1 */
    __m512i c1 = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(c0, lo), hi, _mm512_set1_epi32(1));
    __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1), lo0, hi0, lo1, hi1;
    /* round 0: words 2 and 3 are the same constants in every lane */
    uint32_t h1, l1 = mulhilo(PHILOX_M1, PHILOX_W0, &h1);
    mulhilo16(m0, c0, &lo0, &hi0);
    __m512i c2 = _mm512_xor_si512(hi0, _mm512_set1_epi32((int)(PHILOX_W1 ^ key[0][1])));
    c0 = _mm512_xor_si512(c1, _mm512_set1_epi32((int)(h1 ^ key[0][0])));
    c1 = _mm512_set1_epi32((int)l1);
    __m512i c3 = lo0;
    for (int r = 1; r < 9; r++) {
        mulhilo16(m0, c0, &lo0, &hi0);
        mulhilo16(m1, c2, &lo1, &hi1);
        c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32((int)key[r][0]), 0x96);
        c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32((int)key[r][1]), 0x96);
        c1 = lo1;
        c3 = lo0;
    }
    /* round 9: only words 0 and 1 are wanted, and they come from word 2 alone */
    mulhilo16(m1, c2, &lo1, &hi1);
    *w0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32((int)key[9][0]), 0x96);
    *w1 = lo1;
}

static void round_keys(uint64_t seed, uint32_t key[10][2]) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += PHILOX_W0, k1 += PHILOX_W1) key[r][0] = k0, key[r][1] = k1;
}

static TARGET void uniform_avx512(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    uint32_t key[10][2];
    round_keys(seed, key);
    const __m512d scale = _mm512_set1_pd(0x1.0p-53), two21 = _mm512_set1_pd(0x1.0p21);
    for (int64_t i = 0; i < n; i += 16) {
        __m512i a, b;
        philox16(key, counter + (uint64_t)i, &a, &b);
        b = _mm512_srli_epi32(b, 11);
        /* x = a · 2^21 + (b >> 11) < 2^53, and each step below is exact */
        __m512d lo = _mm512_mul_pd(_mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(a)), two21,
                                                   _mm512_cvtepu32_pd(_mm512_castsi512_si256(b))), scale);
        __m512d hi = _mm512_mul_pd(_mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(a, 1)), two21,
                                                   _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(b, 1))), scale);
        int64_t left = n - i;
        if (left >= 16) {
            _mm512_storeu_pd(out + i, lo);
            _mm512_storeu_pd(out + i + 8, hi);
        } else {
            _mm512_mask_storeu_pd(out + i, (__mmask8)(left >= 8 ? 0xFF : (1u << left) - 1), lo);
            if (left > 8) _mm512_mask_storeu_pd(out + i + 8, (__mmask8)((1u << (left - 8)) - 1), hi);
        }
    }
}

static TARGET void keep_avx512(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least,
                               uint8_t *keep, uint8_t *bits) {
    uint32_t key[10][2];
    round_keys(seed, key);
    /* x < t, x = a · 2^21 + (b >> 11): a < t >> 21, or a equal to it and b >> 11 below t's low 21 bits */
    bool all = t >= (uint64_t)1 << 53;
    __m512i thi = _mm512_set1_epi32((int)(uint32_t)(t >> 21)), tlo = _mm512_set1_epi32((int)(t & 0x1FFFFF));
    for (int64_t i = 0; i < n; i += 16) {
        __m512i a, b;
        philox16(key, counter + (uint64_t)i, &a, &b);
        __mmask16 below = _mm512_cmplt_epu32_mask(a, thi) |
                          _mm512_mask_cmplt_epu32_mask(_mm512_cmpeq_epi32_mask(a, thi), _mm512_srli_epi32(b, 11), tlo);
        uint16_t k = (uint16_t)((all ? 0xFFFF : below) ^ (at_least ? 0xFFFF : 0));
        int64_t left = n - i;
        if (keep) {
            __m128i bytes = _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(k, 1));
            if (left >= 16) {
                _mm_storeu_si128((__m128i *)(keep + i), bytes);
            } else {
                uint8_t tmp[16];
                _mm_storeu_si128((__m128i *)tmp, bytes);
                memcpy(keep + i, tmp, (size_t)left);
            }
        }
        if (bits) {
            uint8_t *o = bits + (i >> 3);
            if (left >= 16) {
                o[0] = (uint8_t)k, o[1] = (uint8_t)(k >> 8);
            } else { /* whole bytes, then the last one's low bits (its others are kept) */
                for (int64_t j = 0; j < left / 8; j++) o[j] = (uint8_t)(k >> 8 * j);
                unsigned part = (unsigned)(left & 7), m = (1u << part) - 1;
                if (part) o[left / 8] = (uint8_t)((o[left / 8] & ~m) | ((unsigned)(k >> (left & ~7)) & m));
            }
        }
    }
}
#endif

static bool use_avx512;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;
static void check_avx512(void) {
#ifdef RNG_X86
    __builtin_cpu_init();
    use_avx512 = __builtin_cpu_supports("avx512f");
#endif
}
bool ag__rng_vectorised(void) {
    pthread_once(&avx512_once, check_avx512);
    return use_avx512;
}

void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out) {
#ifdef RNG_X86
    if (ag__rng_vectorised()) {
        uniform_avx512(seed, counter, n, out);
        return;
    }
#endif
    ag__rng_uniform_scalar(seed, counter, n, out);
}

void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t n, uint64_t t, bool at_least, uint8_t *keep,
                  uint8_t *bits) {
#ifdef RNG_X86
    if (ag__rng_vectorised()) {
        keep_avx512(seed, counter, n, t, at_least, keep, bits);
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

/* blocks of draws spread over the threads above AG_PAR_THRESHOLD (a multiple of 16) */
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
