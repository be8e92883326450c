/* Philox4x32-10's constants and the pieces its scalar form (tensor/rng.c) and its vector forms
 * (tensor/simd/avx2.c, tensor/simd/avx512.c) share: the multipliers, the key schedule and the
 * block function written once for every vector width. Plain C apart from PHILOX_BODY, which
 * expands into the caller's intrinsics. Internal, not installed. */
#ifndef AG_SIMD_PHILOX_H
#define AG_SIMD_PHILOX_H
#include <stdint.h>

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

/* the round keys of seed: key[r] is round r's pair of key words */
static inline void round_keys(uint64_t seed, uint32_t key[10][2]) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++, k0 += PHILOX_W0, k1 += PHILOX_W1) key[r][0] = k0, key[r][1] = k1;
}

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
#endif
