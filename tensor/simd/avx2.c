/* The AVX2 + FMA kernels and their table (tensor/simd/kernels.h), each function compiled for
 * AVX2 alone (target attributes), so a build for any x86-64 carries them and tensor/cpu.c
 * decides at run time whether they run. Here: the GEMM's register tile, nonzero packing and
 * the Philox generator's draws and masks.
 * The AVX-512 table (tensor/simd/avx512.c) uses this file's pack of a transposed B and its
 * uniform draws too. */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "avx2.h"
#include "kernels.h"
#include "philox.h"

/* ---- the GEMM's 6×16 register tile ----
 * 12 ymm accumulators (two vectors a row); the two B vectors and the broadcast A element make
 * 15 of the 16 ymm registers. Every kernel sums over k in order into one accumulator per element
 * and applies alpha, the bias row and the old C (add) at the end in that order, so it gives the
 * same bits whatever the driver's task split (tensor/gemm.c). */

#define T2 __attribute__((target("avx2,fma")))
#define MR2 6
#define NR2 16

/* alpha·acc + bias (+ C) into C's rows < rows, lanes under m0, m1 (full: plain stores) */
static inline T2 __attribute__((always_inline)) void store_avx2(__m256 acc[MR2][2], int64_t rows, float *c,
                                                                int64_t ldc, float alpha, bool add,
                                                                const float *bias, bool full, __m256i m0,
                                                                __m256i m1) {
    __m256 al = _mm256_set1_ps(alpha), z0 = _mm256_setzero_ps(), z1 = z0;
    if (bias) {
        z0 = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, m0);
        z1 = full ? _mm256_loadu_ps(bias + 8) : _mm256_maskload_ps(bias + 8, m1);
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR2; i++) {
        if (i >= rows) break;
        float *ci = c + i * ldc;
        __m256 v0 = _mm256_fmadd_ps(acc[i][0], al, z0), v1 = _mm256_fmadd_ps(acc[i][1], al, z1);
        if (full) {
            if (add) {
                v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ci));
                v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ci + 8));
            }
            _mm256_storeu_ps(ci, v0);
            _mm256_storeu_ps(ci + 8, v1);
        } else {
            if (add) {
                v0 = _mm256_add_ps(v0, _mm256_maskload_ps(ci, m0));
                v1 = _mm256_add_ps(v1, _mm256_maskload_ps(ci + 8, m1));
            }
            _mm256_maskstore_ps(ci, m0, v0);
            _mm256_maskstore_ps(ci + 8, m1, v1);
        }
    }
}

T2 static void packed_avx2(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                           bool add, const float *bias) {
    __m256 acc[MR2][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR2; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MR2; i++) {
            __m256 ai = _mm256_broadcast_ss(ap + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
        ap += MR2;
        bp += NR2;
    }
    __m256i all = _mm256_set1_epi32(-1);
    store_avx2(acc, MR2, c, ldc, alpha, add, bias, true, all, all);
}

/* the k loop of the small kernel; full: B's 16 columns all live (plain loads) */
static inline T2 __attribute__((always_inline)) void small_loop_avx2(__m256 acc[MR2][2], int64_t kc,
                                                                     const float *const ar[MR2], int64_t aks,
                                                                     const float *b, int64_t ldb, bool full,
                                                                     __m256i m0, __m256i m1) {
    for (int64_t k = 0; k < kc; k++) {
        const float *bk = b + k * ldb;
        __m256 b0 = full ? _mm256_loadu_ps(bk) : _mm256_maskload_ps(bk, m0);
        __m256 b1 = full ? _mm256_loadu_ps(bk + 8) : _mm256_maskload_ps(bk + 8, m1);
#pragma GCC unroll 6
        for (int i = 0; i < MR2; i++) {
            __m256 ai = _mm256_broadcast_ss(ar[i] + k * aks);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
}

/* Unpacked: A in place, B's rows in place, the column tail masked (maskload reads nothing
 * past it) and spare rows repeating the last live one, never stored. */
T2 static void small_avx2(int64_t kc, const float *a, int64_t ars, int64_t aks, int64_t mr, const float *b,
                          int64_t ldb, int64_t nr, float *c, int64_t ldc, float alpha, bool add, const float *bias) {
    const float *ar[MR2];
#pragma GCC unroll 6
    for (int i = 0; i < MR2; i++) ar[i] = a + (i < mr ? i : mr - 1) * ars;
    __m256 acc[MR2][2];
#pragma GCC unroll 6
    for (int i = 0; i < MR2; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    bool full = nr >= NR2;
    __m256i m0 = ag__avx2_first(nr), m1 = ag__avx2_first(nr - 8);
    if (full) small_loop_avx2(acc, kc, ar, aks, b, ldb, true, m0, m1);
    else small_loop_avx2(acc, kc, ar, aks, b, ldb, false, m0, m1);
    if (full) store_avx2(acc, mr, c, ldc, alpha, add, bias, true, m0, m1);
    else store_avx2(acc, mr, c, ldc, alpha, add, bias, false, m0, m1);
}

/* 8×8 blocks of op(B)'s panel from B stored transposed, through registers (8 rows of B in, 8
 * rows of the panel out): columns < nr rounded down to 8, k < kc rounded down to 8 */
T2 void ag__pack_bt_blocks_avx2(const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR, float *bp) {
    for (int64_t j = 0; j + 8 <= nr; j += 8)
        for (int64_t k = 0; k + 8 <= kc; k += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(b + (j + q) * ldb + k);
            ag__avx2_transpose8(r);
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) _mm256_storeu_ps(bp + (k + q) * NR + j, r[q]);
        }
}

/* KC·NR2 floats of a B panel (16 KiB) and MR2·KC of A stay in the 32 KiB L1d; a task's
 * MC×KC of A and KC×NCH of B (288 KiB) in the 512 KiB L2. On Zen 3 the blocked path beats
 * OpenBLAS's Zen kernel by 5-22% on the products of depth up to 128 with A as it lies (the toy
 * Transformer's and MHA (64,16,64,4)'s forward and input gradients: no packing of A, one K
 * slice), is level with it at depth 256-1024 and 2-32% slower on weight gradients (Aᵀ B, depth
 * = rows). On Zen 5 at AVX2, depths up to 1024 with A as it lies are faster than OpenBLAS's
 * Haswell kernel there (with Aᵀ as well, slower): so those go to the blocked path. The blocked
 * path is tested whole (tests/test_kernels.c) either way. */
const ag__sgemm_kernels ag__sgemm_avx2 = {"avx2", MR2, NR2, 256, 72, 256, 96 * 96 * 96, 1024, false, packed_avx2,
                                          small_avx2, ag__pack_bt_blocks_avx2};

/* ---- nonzero packing (tensor/nzpack.c): a permutation from a table per byte of bits ---- */

#define T2POP __attribute__((target("avx2,fma,popcnt")))
#define NZ_STEP static inline __attribute__((always_inline)) T2POP

/* per byte m of bits, the lanes' permutations as 8 indices of 4 bits: pack moves the set lanes
 * to the front in order, unpack sends the k-th packed value to the k-th set lane */
static uint32_t PACK_PERM[256], UNPACK_PERM[256];
static pthread_once_t perm_once = PTHREAD_ONCE_INIT;
static void make_perms(void) {
    for (unsigned m = 0; m < 256; m++) {
        uint32_t p = 0, u = 0;
        for (unsigned i = 0, k = 0; i < 8; i++)
            if (m >> i & 1) p |= i << 4 * k, u |= k << 4 * i, k++;
        PACK_PERM[m] = p, UNPACK_PERM[m] = u;
    }
}
static inline T2POP __m256i perm_lanes(uint32_t p) {
    return _mm256_srlv_epi32(_mm256_set1_epi32((int)p), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
}

/* One vector of elements: x's (w of them; bits for them at bits, whole bytes), the packed
 * values from vals on with room for room of them; the steps return how many they packed or
 * read. Whole vectors are stored and loaded while there is room (AMD's masked stores are slow). */
NZ_STEP int pack_step_avx2(const float *x, uint8_t *bits, float *vals, int64_t room) {
    __m256 v = _mm256_loadu_ps(x);
    __m256i zero = _mm256_cmpeq_epi32(_mm256_castps_si256(v), _mm256_setzero_si256());
    unsigned m = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zero)) & 0xFF;
    int k = __builtin_popcount(m);
    *bits = (uint8_t)m;
    if (vals) {
        __m256 packed = _mm256_permutevar8x32_ps(v, perm_lanes(PACK_PERM[m]));
        if (room >= 8) _mm256_storeu_ps(vals, packed);
        else _mm256_maskstore_ps(vals, ag__avx2_first(k), packed);
    }
    return k;
}
NZ_STEP int unpack_step_avx2(const uint8_t *bits, const float *vals, int64_t room, float *x) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    unsigned m = *bits;
    int k = __builtin_popcount(m);
    __m256 p = room >= 8 ? _mm256_loadu_ps(vals) : _mm256_maskload_ps(vals, ag__avx2_first(k));
    p = _mm256_permutevar8x32_ps(p, perm_lanes(UNPACK_PERM[m]));
    __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), lane_bit), lane_bit);
    _mm256_storeu_ps(x, _mm256_and_ps(_mm256_castsi256_ps(set), p));
    return k;
}

/* n elements (a multiple of 8) from a whole byte of bits on: the table's nz_pack_f32 */
static T2POP int64_t nz_pack(const float *x, int64_t n, uint8_t *bits, float *vals, int64_t cap) {
    pthread_once(&perm_once, make_perms);
    int64_t c = 0;
    for (int64_t e = 0; e < n; e += 8) c += pack_step_avx2(x + e, bits + (e >> 3), vals ? vals + c : NULL, cap - c);
    return c;
}

static T2POP int64_t nz_unpack(const uint8_t *bits, int64_t n, const float *vals, int64_t cap, float *x) {
    pthread_once(&perm_once, make_perms);
    int64_t c = 0;
    for (int64_t e = 0; e < n; e += 8) c += unpack_step_avx2(bits + (e >> 3), vals + c, cap - c, x + e);
    return c;
}

/* ---- Philox (tensor/rng.c): 4 blocks per vector, NV vectors at a time ----
 * Each Philox word lives in the low half of a 64-bit lane: vpmuludq then gives the whole 64-bit
 * product (lo in the low half, hi a shift away) and reads only low halves, so the high halves
 * may hold garbage until the end. Blocks are 64-bit lanes, so the carry into word 1 is free. */
#define TARGET __attribute__((target("avx2,fma")))
#define NV 2 /* chains: measured fastest on Zen 3 (4: 7 % slower, 1: 27 %) */
#define STEP 32 /* draws per step: 16 blocks, STEP / (8 NV) calls of philox_avx2 (64 mask words) */

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
TARGET void ag__rng_uniform_avx2(uint64_t seed, uint64_t counter, int64_t n, double *out) {
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

const ag__kernel_table ag__kernels_avx2 = {
    .isa = AG_ISA_AVX2,
    .sgemm = &ag__sgemm_avx2,
    .nz_pack_f32 = nz_pack,
    .nz_unpack_f32 = nz_unpack,
    .nz_width = 8,
    .rng_uniform = ag__rng_uniform_avx2,
    .rng_below64 = below64_avx2,
    .rng_path = "AVX2",
};
