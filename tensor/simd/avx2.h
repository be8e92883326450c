/* Inline AVX2 helpers of the AVX2 kernels (tensor/simd/avx2.c). Internal; the fused attention
 * (nn/attention/simd/avx2_attention.c) has its own copy of the two it needs. */
#ifndef AG_SIMD_AVX2_H
#define AG_SIMD_AVX2_H
#include <immintrin.h>
#include <stdint.h>

/* lanes < n of an 8-lane mask (n clamped to 0..8), for AVX2 masked loads and stores of a row's
 * tail: the GEMM's tiles */
static inline __attribute__((target("avx2"))) __m256i ag__avx2_first(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the 8×8 block r (8 rows of 8 floats) transposed in registers: the GEMM's panels of a
 * transposed B */
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
