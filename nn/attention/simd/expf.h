/* The vector forms of ag__expf (tensor/fastmath.h, through op.h), one per ISA: its constants
 * and its steps in the same order, the multiply-adds fused. For the fused attention's softmax
 * (avx2_attention.c, avx512_attention.c). Internal. */
#ifndef AG_SIMD_EXPF_H
#define AG_SIMD_EXPF_H
#include <immintrin.h>

#include "../../../tensor/op.h"

/* ag__expf on 8 lanes, the same steps: 0 below -87.33 (and for -inf) */
static inline __attribute__((target("avx2,fma"))) __m256 ag__expf_avx2(__m256 x) {
    const __m256 lo = _mm256_set1_ps(AG_EXPF_LO), hi = _mm256_set1_ps(AG_EXPF_HI);
    const __m256 shift = _mm256_set1_ps(AG_EXPF_SHIFT);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 xc = _mm256_blendv_ps(x, lo, under);
    xc = _mm256_blendv_ps(xc, hi, _mm256_cmp_ps(xc, hi, _CMP_GT_OQ));
    __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(AG_EXPF_LOG2E), shift);
    __m256 n = _mm256_sub_ps(t, shift);
    __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(AG_EXPF_SHIFT_BITS));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(AG_EXPF_LN2_HI), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(AG_EXPF_LN2_LO), r);
    __m256 p = _mm256_set1_ps(AG_EXPF_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AG_EXPF_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AG_EXPF_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AG_EXPF_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AG_EXPF_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(AG_EXPF_P5));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(
        _mm256_and_si256(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), _mm256_set1_epi32(0xFF)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return _mm256_andnot_ps(under, y);
}

/* ag__expf on 16 lanes, the same steps: 0 below -87.33 (and for -inf) */
static inline __attribute__((target("avx512f,fma"))) __m512 ag__expf_avx512(__m512 x) {
    const __m512 lo = _mm512_set1_ps(AG_EXPF_LO), hi = _mm512_set1_ps(AG_EXPF_HI);
    const __m512 shift = _mm512_set1_ps(AG_EXPF_SHIFT);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 xc = _mm512_mask_blend_ps(under, x, lo);
    xc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(xc, hi, _CMP_GT_OQ), xc, hi);
    __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(AG_EXPF_LOG2E), shift);
    __m512 n = _mm512_sub_ps(t, shift);
    __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(AG_EXPF_SHIFT_BITS));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(AG_EXPF_LN2_HI), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(AG_EXPF_LN2_LO), r);
    __m512 p = _mm512_set1_ps(AG_EXPF_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AG_EXPF_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AG_EXPF_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AG_EXPF_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AG_EXPF_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(AG_EXPF_P5));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_and_si512(_mm512_add_epi32(ni, _mm512_set1_epi32(127)),
                                                      _mm512_set1_epi32(0xFF)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    return _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
}
#endif
