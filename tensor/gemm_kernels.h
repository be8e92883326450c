/* The register-tile kernels under attograd's own f32 GEMM, one set per ISA
 * (tensor/gemm_kernels.c), and the blocking each set is tuned for. tensor/gemm.c has the one
 * driver (packing, task split, tails) that runs either set; ag__sgemm_kernels_in_use says which
 * set it chose. Internal, not installed. */
#ifndef AG_GEMM_KERNELS_H
#define AG_GEMM_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

/* C tile (mr×nr, rows ldc apart) = alpha · Ap Bp (+ bias row, NULL for none), or += that (add).
 * Ap: kc steps of mr floats (packed A), Bp: kc steps of nr floats (a packed B panel, aligned) */
typedef void ag__tile_packed_fn(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                                bool add, const float *bias);
/* the same tile from A read in place (row i, step k at a[i·ars + k·aks]) and B rows ldb apart;
 * only rows < rows and columns < cols of C are read or written (a tail tile) */
typedef void ag__tile_small_fn(int64_t kc, const float *a, int64_t ars, int64_t aks, int64_t rows, const float *b,
                               int64_t ldb, int64_t cols, float *c, int64_t ldc, float alpha, bool add,
                               const float *bias);

typedef struct {
    const char *name;
    int64_t mr, nr;      /* the register tile */
    int64_t kc;          /* K slice depth */
    int64_t mc, nch;     /* rows and columns of C per task */
    int64_t small;       /* m·n·k up to which the unpacked small path runs */
    /* past the small path, the blocked path runs products of depth k <= blocked_k (with op(A) =
     * Aᵀ too when blocked_ta); the rest go to OpenBLAS (measured as fast or faster there) */
    int64_t blocked_k;
    bool blocked_ta;
    ag__tile_packed_fn *packed;
    ag__tile_small_fn *small_tile;
} ag__sgemm_kernels;

/* the largest mr·nr of any set (a tail tile's scratch) */
#define AG_SGEMM_MAX_TILE (8 * 32)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

extern const ag__sgemm_kernels ag__sgemm_avx512, ag__sgemm_avx2;

/* lanes < n of an 8-lane mask (n clamped to 0..8), for AVX2 masked loads and stores of a row's
 * tail: the GEMM's tiles and the fused attention's rows */
static inline __attribute__((target("avx2"))) __m256i ag__avx2_first(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the 8×8 block r (8 rows of 8 floats) transposed in registers: the GEMM's panels of a
 * transposed B and the fused attention's K and V transposes */
static inline __attribute__((target("avx2"))) void ag__avx2_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}
#endif

/* the driver's B panel from B stored transposed (tensor/gemm_kernels.c): bp[k·NR + j] =
 * b[j·ldb + k] for j < nr (kc steps), zeros up to NR */
void ag__sgemm_pack_bt(const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR, float *bp);

/* the set ag__sgemm runs, NULL when it goes to OpenBLAS (tensor/gemm.c) */
const ag__sgemm_kernels *ag__sgemm_kernels_in_use(void);
/* ag__sgemm (ag__sgemm_bias when bias is non-NULL) with the set K on the small unpacked path
 * (small: beta 0 or 1, and with tb k·n <= 64K) or the blocked one, whatever the size: the
 * driver's paths one by one, for tests */
void ag__sgemm_path(const ag__sgemm_kernels *K, bool small, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc, const float *bias);
#endif
