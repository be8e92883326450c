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

static inline float ag__expf(float x) {
    const float lo = -87.33654f, hi = 88.3762626647949f;
    float xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    /* n = round(x / ln2) by the 1.5·2^23 trick (exact for |n| < 2^22), as a float and an int */
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    int32_t ni;
    memcpy(&ni, &t, sizeof ni);
    ni -= 0x4B400000;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* unsigned: for a NaN input ni is garbage (the result is NaN through p anyway) */
    uint32_t bits = ((uint32_t)(ni + 127) & 0xFFu) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x < lo ? 0.0f : y;
}
#endif
