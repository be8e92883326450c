/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 * Draw d of a generator is half of one Philox block: block d >> 1 (mod 2^63), its words 0 and 1
 * when d is even, 2 and 3 when odd, so one block serves two draws. Value i of a draw depends only
 * on (seed, counter + i), so any split of the work across threads gives the same numbers.
 * Dropout's keep masks need no 53 bits: element e of a mask at counter c is one 32-bit word,
 * word e & 1 of draw c + e / 2, so a mask of n elements takes (n + 1) / 2 draws and one block
 * serves four elements. With AVX2 16 blocks run at once, 4 per vector, and with AVX-512 the
 * masks' 16 blocks take 2 vectors of 8, with the same integer arithmetic: the same numbers, bit
 * for bit. */
#include <math.h>
#include <string.h>

#include "internal.h"

typedef struct { uint32_t v[4]; } u32x4;

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* key increments, also the counter's two fixed words */
#define PHILOX_W1 0xBB67AE85u
#define BLOCK_MASK (~(uint64_t)0 >> 1) /* blocks are counted mod 2^63 */

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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RNG_X86 1

/* the first n (<= 64) bits of k from bit 0 of o on: whole bytes, then the last one's low bits
 * (its others are kept) */
static inline void put_bits(uint8_t *o, uint64_t k, int64_t n) {
    for (int64_t j = 0; j < n / 8; j++) o[j] = (uint8_t)(k >> 8 * j);
    unsigned part = (unsigned)(n & 7), m = (1u << part) - 1;
    if (part) o[n / 8] = (uint8_t)((o[n / 8] & ~m) | ((k >> (n & ~7)) & m));
}

static void round_keys(uint64_t seed, uint32_t key[10][2]) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += PHILOX_W0, k1 += PHILOX_W1) key[r][0] = k0, key[r][1] = k1;
}

/* ---- 4 blocks per AVX2 vector, NV vectors at a time ----
 * Each Philox word lives in the low half of a 64-bit lane: vpmuludq then gives the whole 64-bit
 * product (lo in the low half, hi a shift away) and reads only low halves, so the high halves
 * may hold garbage until the end. Blocks are 64-bit lanes, so the carry into word 1 is free.
 * 1.6 ns a draw on Zen 3 (one block per draw: 2.4); a mask's 32-bit words ~1 ns each. */
#define TARGET __attribute__((target("avx2,fma")))
#define NV 2 /* chains: measured fastest on Zen 3 (4: 7 % slower, 1: 27 %) */
#define STEP 32 /* draws per step: 16 blocks, STEP / (8 NV) calls of philox_avx2 (64 mask words) */

/* The Philox block function on nvec vectors of blocks, written once for both widths
 * (philox_avx2, philox_avx512) with the width's intrinsics: set1, mul (vpmuludq), xor, srl
 * (64-bit shift right); ctr(v) is vector v's block counters. Needs m0, m1 (the multipliers),
 * key and w in scope. Round 0: words 2 and 3 are the same constants in every lane. */
#define PHILOX_BODY(nvec, ctr, set1, mul, xor, srl)                                                                   \
    do {                                                                                                           \
        __typeof__(w[0][0]) c0[nvec], c1[nvec], c2[nvec], c3[nvec];                                               \
        uint32_t h1, l1 = mulhilo(PHILOX_M1, PHILOX_W0, &h1);                                                     \
        __typeof__(m0) x0 = set1(h1 ^ key[0][0]), x2 = set1(PHILOX_W1 ^ key[0][1]);                               \
        for (int v = 0; v < (nvec); v++) {                                                                         \
            __typeof__(m0) ctrv = ctr(v), p0 = mul(m0, ctrv);                                                      \
            c0[v] = xor(srl(ctrv, 32), x0);                                                                        \
            c1[v] = set1(l1);                                                                                      \
            c2[v] = xor(srl(p0, 32), x2);                                                                          \
            c3[v] = p0;                                                                                            \
        }                                                                                                          \
        for (int r = 1; r < 10; r++) {                                                                             \
            __typeof__(m0) k0 = set1(key[r][0]), k1 = set1(key[r][1]);                                             \
            for (int v = 0; v < (nvec); v++) {                                                                     \
                __typeof__(m0) p0 = mul(m0, c0[v]), p1 = mul(m1, c2[v]);                                           \
                c0[v] = xor(xor(srl(p1, 32), c1[v]), k0);                                                          \
                c2[v] = xor(xor(srl(p0, 32), c3[v]), k1);                                                          \
                c1[v] = p1;                                                                                        \
                c3[v] = p0;                                                                                        \
            }                                                                                                      \
        }                                                                                                          \
        for (int v = 0; v < (nvec); v++) w[0][v] = c0[v], w[1][v] = c1[v], w[2][v] = c2[v], w[3][v] = c3[v];      \
    } while (0)

/* w[j][v]: word j of philox(seed, blk + 4v + lane); key[r] holds round r's key words */
static inline TARGET void philox_avx2(const uint32_t key[10][2], uint64_t blk, __m256i w[4][NV]) {
    const __m256i m0 = _mm256_set1_epi64x(PHILOX_M0), m1 = _mm256_set1_epi64x(PHILOX_M1);
    const __m256i bmask = _mm256_set1_epi64x((long long)BLOCK_MASK), base = _mm256_set1_epi64x((long long)blk);
#define CTR(v)                                                                                                      \
    _mm256_and_si256(_mm256_add_epi64(base, _mm256_setr_epi64x(4 * v, 4 * v + 1, 4 * v + 2, 4 * v + 3)), bmask)
    PHILOX_BODY(NV, CTR, _mm256_set1_epi64x, _mm256_mul_epu32, _mm256_xor_si256, _mm256_srli_epi64);
#undef CTR
}

/* bit j of a 4-bit lane mask to bit 4j: lane j of a vector holds words 4j .. 4j + 3 of its 16 */
static const uint16_t SPREAD4[16] = {0x0000, 0x0001, 0x0010, 0x0011, 0x0100, 0x0101, 0x0110, 0x0111,
                                     0x1000, 0x1001, 0x1010, 0x1011, 0x1100, 0x1101, 0x1110, 0x1111};

/* bit j: word j of blocks blk .. blk + 15 (word j & 3 of block blk + j / 4) below t */
static TARGET uint64_t below64_avx2(const uint32_t key[10][2], uint64_t blk, uint64_t t) {
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF), tv = _mm256_set1_epi64x((long long)t);
    uint64_t k = 0;
    for (int h = 0; h < STEP / (8 * NV); h++) {
        __m256i w[4][NV];
        philox_avx2(key, blk + (uint64_t)(4 * NV * h), w);
        /* words < 2^32 and t <= 2^32: the signed 64-bit compare AVX2 has is the unsigned one */
        for (int v = 0; v < NV; v++) {
            unsigned m = 0;
            for (int q = 0; q < 4; q++) {
                __m256i x = _mm256_and_si256(w[q][v], lo32);
                m |= (unsigned)SPREAD4[_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(tv, x)))] << q;
            }
            k |= (uint64_t)m << 16 * (NV * h + v);
        }
    }
    return k;
}

/* the uniforms of the STEP draws of blocks blk .. blk + 15, in draw order */
static inline TARGET void uniform32(const uint32_t key[10][2], uint64_t blk, double *u) {
    /* an integer y < 2^52 becomes a double exactly as bits(y | 2^52's exponent) - 2^52 */
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFF), magic = _mm256_set1_epi64x(0x4330000000000000);
    const __m256d two52 = _mm256_set1_pd(0x1.0p52), scale = _mm256_set1_pd(0x1.0p-53), two21 = _mm256_set1_pd(0x1.0p21);
    for (int g = 0; g < STEP / (8 * NV); g++) {
        __m256i w[4][NV];
        philox_avx2(key, blk + (uint64_t)(4 * NV * g), w);
        for (int v = 0; v < NV; v++) {
            __m256d half[2];
            for (int h = 0; h < 2; h++) { /* x = a · 2^21 + (b >> 11) < 2^53, and each step is exact */
                __m256i a = w[2 * h][v], b = w[2 * h + 1][v];
                __m256d ad = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(a, lo32), magic)), two52);
                __m256i bs = _mm256_srli_epi64(_mm256_slli_epi64(b, 32), 43);
                __m256d bd = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(bs, magic)), two52);
                half[h] = _mm256_mul_pd(_mm256_fmadd_pd(ad, two21, bd), scale);
            }
            /* lanes (e0 e1 e2 e3), (o0 o1 o2 o3) → draws e0 o0 e1 o1 | e2 o2 e3 o3 */
            __m256d lo = _mm256_unpacklo_pd(half[0], half[1]), hi = _mm256_unpackhi_pd(half[0], half[1]);
            double *o = u + 8 * (NV * g + v);
            _mm256_storeu_pd(o, _mm256_permute2f128_pd(lo, hi, 0x20));
            _mm256_storeu_pd(o + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
        }
    }
}

/* Steps start at even draws: an odd counter takes the second half of its first step (s = 1) */
static TARGET void uniform_avx2(uint64_t seed, uint64_t counter, int64_t n, double *out) {
    uint32_t key[10][2];
    round_keys(seed, key);
    uint64_t blk = counter >> 1;
    int64_t s = (int64_t)(counter & 1);
    for (int64_t g = 0; g < n + s; g += STEP) { /* draws counter - s + g ... = outputs g - s ... */
        double u[STEP];
        uniform32(key, blk + (uint64_t)g / 2, u);
        int64_t o = g - s, from = o < 0 ? -o : 0, to = n - o < STEP ? n - o : STEP;
        memcpy(out + o + from, u + from, (size_t)(to - from) * sizeof(double));
    }
}

/* ---- 8 blocks per AVX-512 vector: the AVX2 arithmetic at twice the width, and the
 * comparisons straight into mask registers. 16 blocks (one mask step) per call. ---- */
#define TARGET512 __attribute__((target("avx512f,bmi2")))

/* w[j][v]: word j of philox(seed, blk + 8v + lane), as philox_avx2 */
static inline TARGET512 void philox_avx512(const uint32_t key[10][2], uint64_t blk, __m512i w[4][2]) {
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    const __m512i bmask = _mm512_set1_epi64((long long)BLOCK_MASK), base = _mm512_set1_epi64((long long)blk);
#define CTR(v)                                                                                                      \
    _mm512_and_si512(_mm512_add_epi64(base, _mm512_add_epi64(_mm512_set1_epi64(8 * v),                              \
                                                             _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7))),             \
                     bmask)
    PHILOX_BODY(2, CTR, _mm512_set1_epi64, _mm512_mul_epu32, _mm512_xor_si512, _mm512_srli_epi64);
#undef CTR
}

/* below64_avx2's bits: lane j of vector v is block 8v + j, whose word q is bit 32v + 4j + q */
static TARGET512 uint64_t below64_avx512(const uint32_t key[10][2], uint64_t blk, uint64_t t) {
    const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFF), tv = _mm512_set1_epi64((long long)t);
    __m512i w[4][2];
    philox_avx512(key, blk, w);
    uint64_t k = 0;
    for (int v = 0; v < 2; v++)
        for (int q = 0; q < 4; q++) {
            __mmask8 m = _mm512_cmplt_epu64_mask(_mm512_and_si512(w[q][v], lo32), tv);
            k |= (uint64_t)_pdep_u32(m, 0x11111111u << q) << 32 * v;
        }
    return k;
}

/* Steps start at a block: a mask whose first word is word s of its block takes bits s.. of
 * its first step. below: one step's 64 decisions (below64_avx2 or below64_avx512). */
static void keep_steps(uint64_t (*below)(const uint32_t key[10][2], uint64_t blk, uint64_t t), uint64_t seed,
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
#endif

const char *ag__rng_vector_path(void) {
    if (ag__cpu_isa() == AG_ISA_NONE) return NULL;
    return ag__vector_isa() == AG_ISA_AVX512 ? "AVX2 draws, AVX-512 masks" : "AVX2";
}

void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out) {
#ifdef RNG_X86
    if (ag__cpu_isa() != AG_ISA_NONE) {
        uniform_avx2(seed, counter, n, out);
        return;
    }
#endif
    ag__rng_uniform_scalar(seed, counter, n, out);
}

void ag__rng_keep_isa(ag__isa isa, uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t,
                      bool at_least, uint8_t *keep, uint8_t *bits) {
#ifdef RNG_X86
    if (isa != AG_ISA_NONE) {
        keep_steps(isa == AG_ISA_AVX512 ? below64_avx512 : below64_avx2, seed, counter, first, n, t, at_least, keep,
                   bits);
        return;
    }
#endif
    ag__rng_keep_scalar(seed, counter, first, n, t, at_least, keep, bits);
}

void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                  uint8_t *keep, uint8_t *bits) {
    ag__rng_keep_isa(ag__vector_isa(), seed, counter, first, n, t, at_least, keep, bits);
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
