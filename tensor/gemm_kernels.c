/* The register-tile kernels of attograd's own f32 GEMM (tensor/gemm_kernels.h), one set per
 * ISA, each compiled for its ISA alone (target attributes), so a build for any x86-64 carries
 * both and tensor/gemm.c picks one at run time:
 *   AVX-512F: 8×32 tile, 16 zmm accumulators (two vectors a row)
 *   AVX2+FMA: 6×16 tile, 12 ymm accumulators (two vectors a row), the two B vectors and the
 *             broadcast A element make 15 of the 16 ymm registers
 * Every kernel sums over k in order into one accumulator per element and applies alpha, the
 * bias row and the old C (add) at the end in that order, so each set gives the same bits
 * whatever the driver's task split. */
#include "gemm_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* ---- AVX-512F ---- */

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

const ag__sgemm_kernels ag__sgemm_avx512 = {"avx512", MR5, NR5, 384, 64, 256, 96 * 96 * 96, INT64_MAX, true,
                                            packed_avx512, small_avx512};

/* ---- AVX2 + FMA ---- */

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
T2 static void pack_bt_blocks(const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR, float *bp) {
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
 * MC×KC of A and KC×NCH of B (288 KiB) in the 512 KiB L2. On Zen 3 (best of 40 runs each,
 * alternating, at the linear layers' shapes of bench/) the blocked path beats OpenBLAS's Zen
 * kernel by 5-22% on the products of depth up to 128 with A as it lies (the toy Transformer's
 * and MHA (64,16,64,4)'s forward and input gradients: no packing of A, one K slice), is level
 * with it at depth 256-1024 and 2-32% slower on weight gradients (Aᵀ B, depth = rows). On Zen 5
 * with AG_GEMM=avx2 (session 11, alternating runs) taking depths up to 1024 too made the MHA
 * benchmarks 2-7% faster than OpenBLAS's Haswell kernel there, the training steps 2-3% (with
 * Aᵀ as well, 5% slower): so products with A as it lies and depth up to 1024 go to the blocked
 * path. The blocked path is tested whole (tests/test_kernels.c) either way. */
const ag__sgemm_kernels ag__sgemm_avx2 = {"avx2", MR2, NR2, 256, 72, 256, 96 * 96 * 96, 1024, false, packed_avx2,
                                          small_avx2};

#endif

/* op(B)'s panel when B is stored transposed: bp[k·NR + j] = b[j·ldb + k] for j < nr, zero for
 * nr <= j < NR. Both sets' driver packs with it; their CPUs all have AVX2, which moves the 8×8
 * blocks, and the edges go element by element. */
void ag__sgemm_pack_bt(const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR, float *bp) {
    int64_t j8 = nr / 8 * 8, k8 = kc / 8 * 8;
#if defined(__x86_64__) && defined(__GNUC__)
    pack_bt_blocks(b, ldb, kc, nr, NR, bp);
#else
    j8 = k8 = 0;
#endif
    for (int64_t k = 0; k < kc; k++) {
        for (int64_t j = k < k8 ? j8 : 0; j < nr; j++) bp[k * NR + j] = b[j * ldb + k];
        for (int64_t j = nr; j < NR; j++) bp[k * NR + j] = 0;
    }
}
