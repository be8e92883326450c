/* A vectorisable expf for the hot softmax loops (attention, softmax, log-softmax): libm's expf
 * is a call per element that GCC cannot vectorise, and it takes a slow path (errno, xflow)
 * for every underflowing score. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes'
 * degree-7 polynomial for e^r: within 2 ulp of expf over [-87.3, 88.3] (tested against libm
 * in tests/test_reduce.c). Below -87.33 (including -inf) it returns exactly 0: such a term is
 * under FLT_MIN, so a softmax loses nothing it could represent in normal floats. */
#ifndef AG_FASTMATH_H
#define AG_FASTMATH_H
#include <stdint.h>
#include <string.h>

/* The constants of this exp, scalar here and on vectors in nn/attention/simd/expf.h:
 * the clamp, the 1.5·2^23 rounding shift, log2(e), ln2 in two parts (Cody-Waite) and the
 * polynomial's coefficients from the highest power down. */
#define AG_EXPF_LO -87.33654f
#define AG_EXPF_HI 88.3762626647949f
#define AG_EXPF_SHIFT 12582912.0f
#define AG_EXPF_SHIFT_BITS 0x4B400000
#define AG_EXPF_LOG2E 1.44269504088896341f
#define AG_EXPF_LN2_HI 0.693359375f
#define AG_EXPF_LN2_LO -2.12194440e-4f
#define AG_EXPF_P0 1.9875691500e-4f
#define AG_EXPF_P1 1.3981999507e-3f
#define AG_EXPF_P2 8.3334519073e-3f
#define AG_EXPF_P3 4.1665795894e-2f
#define AG_EXPF_P4 1.6666665459e-1f
#define AG_EXPF_P5 5.0000001201e-1f

static inline float ag__expf(float x) {
    const float lo = AG_EXPF_LO, hi = AG_EXPF_HI;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    /* n = round(x / ln2) by the 1.5·2^23 trick (exact for |n| < 2^22), as a float and an int */
    float t = xc * AG_EXPF_LOG2E + AG_EXPF_SHIFT;
    float n = t - AG_EXPF_SHIFT;
    int32_t ni;
    memcpy(&ni, &t, sizeof ni);
    ni -= AG_EXPF_SHIFT_BITS;
    float r = xc - n * AG_EXPF_LN2_HI;
    r = r - n * AG_EXPF_LN2_LO;
    float p = AG_EXPF_P0;
    p = p * r + AG_EXPF_P1;
    p = p * r + AG_EXPF_P2;
    p = p * r + AG_EXPF_P3;
    p = p * r + AG_EXPF_P4;
    p = p * r + AG_EXPF_P5;
    p = p * r * r + r + 1.0f;
    /* unsigned: for a NaN input ni is garbage (the result is NaN through p anyway) */
    uint32_t bits = ((uint32_t)(ni + 127) & 0xFFu) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x < lo ? 0.0f : y;
}
#endif
