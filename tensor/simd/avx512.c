/* The AVX-512F kernels and their table (tensor/simd/kernels.h), each function compiled for
 * AVX-512 alone (target attributes), so a build for any x86-64 carries them and tensor/cpu.c
 * decides at run time whether they run. Here: the GEMM's register tile, nonzero packing (compress
 * and expand) and the Philox masks. The table takes the rest from the AVX2 kernels, which every
 * AVX-512 CPU runs: the GEMM's pack of a transposed B and the generator's uniform draws. */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "philox.h"

/* ---- the GEMM's 8×32 register tile ----
 * 16 zmm accumulators (two vectors a row). Every kernel sums over k in order into one
 * accumulator per element and applies alpha, the bias row and the old C (add) at the end in that
 * order, so it gives the same bits whatever the driver's task split (tensor/gemm.c). */

#define T512 __attribute__((target("avx512f,fma")))
#define MR5 8
#define NR5 32

/* C tile (MR5×NR5, rows ldc apart) = alpha · Ap Bp (+ bias row, NULL for none) over kc, or += it (add) */
T512 static void packed_avx512(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                                bool add, const float *bias) {
    __m512 acc[MR5][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR5; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR5; i++) {
            __m512 ai = _mm512_set1_ps(ap[i]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        ap += MR5;
        bp += NR5;
    }
    __m512 al = _mm512_set1_ps(alpha), z0 = _mm512_setzero_ps(), z1 = z0;
    if (bias) {
        z0 = _mm512_loadu_ps(bias);
        z1 = _mm512_loadu_ps(bias + 16);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR5; i++) {
        __m512 v0 = _mm512_fmadd_ps(acc[i][0], al, z0), v1 = _mm512_fmadd_ps(acc[i][1], al, z1);
        if (add) {
            v0 = _mm512_add_ps(v0, _mm512_loadu_ps(c + i * ldc));
            v1 = _mm512_add_ps(v1, _mm512_loadu_ps(c + i * ldc + 16));
        }
        _mm512_storeu_ps(c + i * ldc, v0);
        _mm512_storeu_ps(c + i * ldc + 16, v1);
    }
}

/* Small products (attention heads: 16×16×16 up to 64×64×64) skip packing: A is read in place,
 * B too when its rows are unit-stride (else it is transposed once into a small buffer), and
 * the row and column tails are masked instead of padded. Same MR5×NR5 register tile. */
T512 static void small_avx512(int64_t kc, const float *a, int64_t ars, int64_t aks, int64_t mr, const float *b,
                               int64_t ldb, int64_t nr, float *c, int64_t ldc, float alpha, bool add,
                               const float *bias) {
    __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    const float *ar[MR5];
#pragma GCC unroll 8
    for (int i = 0; i < MR5; i++) ar[i] = a + (i < mr ? i : mr - 1) * ars; /* spare rows repeat the last */
    __m512 acc[MR5][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR5; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b + k * ldb), b1 = _mm512_maskz_loadu_ps(m1, b + k * ldb + 16);
#pragma GCC unroll 8
        for (int i = 0; i < MR5; i++) {
            __m512 ai = _mm512_set1_ps(ar[i][k * aks]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __m512 al = _mm512_set1_ps(alpha), z0 = _mm512_setzero_ps(), z1 = z0;
    if (bias) {
        z0 = _mm512_maskz_loadu_ps(m0, bias);
        z1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR5; i++) {
        if (i >= mr) break;
        __m512 v0 = _mm512_fmadd_ps(acc[i][0], al, z0), v1 = _mm512_fmadd_ps(acc[i][1], al, z1);
        if (add) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c + i * ldc));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + i * ldc + 16));
        }
        _mm512_mask_storeu_ps(c + i * ldc, m0, v0);
        _mm512_mask_storeu_ps(c + i * ldc + 16, m1, v1);
    }
}

/* the panels of a transposed B go through AVX2's 8×8 transposes (tensor/simd/avx2.c) */
const ag__sgemm_kernels ag__sgemm_avx512 = {"avx512", MR5, NR5, 384, 64, 256, 96 * 96 * 96, INT64_MAX, true,
                                            packed_avx512, small_avx512, ag__pack_bt_blocks_avx2};

/* ---- nonzero packing (tensor/nzpack.c): compress and expand ---- */

#define T512POP __attribute__((target("avx512f,popcnt")))
#define NZ_STEP static inline __attribute__((always_inline)) T512POP

NZ_STEP int pack_step_avx512(const float *x, uint8_t *bits, float *vals, int64_t room) {
    __m512i v = _mm512_loadu_si512(x);
    uint16_t m = (uint16_t)_mm512_test_epi32_mask(v, v);
    int k = __builtin_popcount(m);
    memcpy(bits, &m, 2);
    if (vals) _mm512_mask_storeu_epi32(vals, (__mmask16)((1u << k) - 1), _mm512_maskz_compress_epi32(m, v));
    (void)room; /* masked stores are fast here */
    return k;
}
NZ_STEP int unpack_step_avx512(const uint8_t *bits, const float *vals, int64_t room, float *x) {
    uint16_t m;
    memcpy(&m, bits, 2);
    int k = __builtin_popcount(m);
    (void)room;
    _mm512_storeu_si512(x, _mm512_maskz_expand_epi32(m, _mm512_maskz_loadu_epi32((__mmask16)((1u << k) - 1), vals)));
    return k;
}

/* n elements (a multiple of 16) from a whole byte of bits on: the table's nz_pack_f32 */
static T512POP int64_t nz_pack(const float *x, int64_t n, uint8_t *bits, float *vals, int64_t cap) {
    int64_t c = 0;
    for (int64_t e = 0; e < n; e += 16)
        c += pack_step_avx512(x + e, bits + (e >> 3), vals ? vals + c : NULL, cap - c);
    return c;
}

static T512POP int64_t nz_unpack(const uint8_t *bits, int64_t n, const float *vals, int64_t cap, float *x) {
    int64_t c = 0;
    for (int64_t e = 0; e < n; e += 16) c += unpack_step_avx512(bits + (e >> 3), vals + c, cap - c, x + e);
    return c;
}

/* ---- Philox (tensor/rng.c): 8 blocks per vector, the AVX2 arithmetic at twice the width, and
 * the comparisons straight into mask registers. 16 blocks (one mask step) per call. ---- */
#define TARGET512 __attribute__((target("avx512f,bmi2")))

/* w[j][v]: word j of philox(seed, blk + 8v + lane), as in tensor/simd/avx2.c */
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

/* the bits of the AVX2 table's below64 (tensor/simd/avx2.c): lane j of vector v is block 8v + j, whose word q is bit 32v + 4j + q */
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

const ag__kernel_table ag__kernels_avx512 = {
    .isa = AG_ISA_AVX512,
    .sgemm = &ag__sgemm_avx512,
    .nz_pack_f32 = nz_pack,
    .nz_unpack_f32 = nz_unpack,
    .nz_width = 16,
    .rng_uniform = ag__rng_uniform_avx2,
    .rng_below64 = below64_avx512,
    .rng_path = "AVX2 draws, AVX-512 masks",
};
