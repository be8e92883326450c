/* The fused small-attention kernels (nn/attention_small.h) for AVX2 + FMA: the same math and
 * masking as the AVX-512 kernels of nn/attention_small.c, with the 16 keys of a query row in
 * two 8-lane vectors. Everything is one register-blocked product,
 *   out[r][c] (=, +=) scale · Σ_k A[r][k] · Y[k][c]     (4 rows × 16 columns in 8 accumulators)
 * with A read through two strides, so it serves both A and Aᵀ:
 *   forward   scores = Q Kᵀ (Kᵀ transposed once per head, 16 lanes a row), row softmax, O = P V
 *   backward  dV = Pᵀ dO, dP = dO Vᵀ, dS = P*(dP - rowsum(P*dP)), dQ = α dS K, dK = α dSᵀ Q
 * Scores, P and dS of a head (at most 64×16) stay in a stack buffer. Every sum runs in a fixed
 * order per (b,h), so results do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "attention_small.h"

#include "../tensor/fastmath.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KEYS AG_ATTN_SMALL_KEYS
#define RB 4 /* rows in flight: 8 accumulators, two loads of Y and a broadcast fit the 16 ymm */

#define TARGET __attribute__((target("avx2,fma")))

/* lanes 0..c-1 of 8 set (0 < c < 8) */
static inline TARGET __m256i first8(int64_t c) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* the first c (<= 8) floats at x, the rest zero, never touching memory past them */
static inline TARGET __m256 load_n(const float *x, int64_t c) {
    if (c >= 8) return _mm256_loadu_ps(x);
    return c > 0 ? _mm256_maskload_ps(x, first8(c)) : _mm256_setzero_ps();
}

static inline TARGET void store_n(float *x, int64_t c, __m256 v) {
    if (c >= 8) _mm256_storeu_ps(x, v);
    else if (c > 0) _mm256_maskstore_ps(x, first8(c), v);
}

/* the first c floats at o (=, +=) scale·acc */
static inline TARGET void put(float *o, int64_t c, __m256 acc, __m256 scale, bool assign) {
    store_n(o, c, assign ? _mm256_mul_ps(acc, scale) : _mm256_fmadd_ps(acc, scale, load_n(o, c)));
}

/* every lane the max (sum) of the 8 */
static inline TARGET __m256 hmax8(__m256 m) {
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
    return _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
}

static inline TARGET __m256 hsum8(__m256 m) {
    m = _mm256_add_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_add_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
    return _mm256_add_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
}

/* ag__expf (tensor/fastmath.h) on 8 lanes, the steps of exp16: 0 below -87.33 (and for -inf) */
static inline TARGET __m256 exp8(__m256 x) {
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

/* out[r][c] = scale·acc (assign) or out[r][c] + scale·acc, acc = Σ_{k<K} A[r·ars + k·aks] ·
 * Y[k·ldy + c], for rows r < R and columns c < D (out: ldo apart). Columns in chunks of 16
 * (two vectors), rows in blocks of RB; a short last block repeats its last row (computed,
 * never stored). Each element sums over k in order. */
static TARGET void mac(int64_t R, int64_t K, int64_t D, const float *a, int64_t ars, int64_t aks, const float *y,
                       int64_t ldy, float scale, bool assign, float *out, int64_t ldo) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t r0 = 0; r0 < R; r0 += RB) {
        int64_t mr = R - r0 < RB ? R - r0 : RB;
        const float *ar[RB];
        for (int r = 0; r < RB; r++) ar[r] = a + (r0 + (r < mr ? r : mr - 1)) * ars;
        for (int64_t c = 0; c < D; c += 16) {
            int64_t dc = D - c < 16 ? D - c : 16;
            __m256 acc[RB][2];
            for (int r = 0; r < RB; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
            if (dc == 16) {
                for (int64_t k = 0; k < K; k++) {
                    __m256 y0 = _mm256_loadu_ps(y + k * ldy + c), y1 = _mm256_loadu_ps(y + k * ldy + c + 8);
                    for (int r = 0; r < RB; r++) {
                        __m256 b = _mm256_broadcast_ss(ar[r] + k * aks);
                        acc[r][0] = _mm256_fmadd_ps(b, y0, acc[r][0]);
                        acc[r][1] = _mm256_fmadd_ps(b, y1, acc[r][1]);
                    }
                }
            } else {
                for (int64_t k = 0; k < K; k++) {
                    __m256 y0 = load_n(y + k * ldy + c, dc), y1 = load_n(y + k * ldy + c + 8, dc - 8);
                    for (int r = 0; r < RB; r++) {
                        __m256 b = _mm256_broadcast_ss(ar[r] + k * aks);
                        acc[r][0] = _mm256_fmadd_ps(b, y0, acc[r][0]);
                        acc[r][1] = _mm256_fmadd_ps(b, y1, acc[r][1]);
                    }
                }
            }
            for (int r = 0; r < RB; r++) { /* a constant trip count: acc stays in registers */
                if (r >= mr) break;
                float *o = out + (r0 + r) * ldo + c;
                put(o, dc, acc[r][0], sc, assign);
                if (dc > 8) put(o + 8, dc - 8, acc[r][1], sc, assign);
            }
        }
    }
}

/* xt[d·16 + j] = X[j][d] for d < D, j < 16, zero for j >= n (X: n rows, ld apart) */
static void transpose_rows(const float *x, int64_t ld, int64_t n, int64_t D, float *xt) {
    for (int64_t d = 0; d < D; d++)
        for (int64_t j = 0; j < KEYS; j++) xt[d * KEYS + j] = j < n ? x[j * ld + d] : 0.0f;
}

/* rows n..S-1 of dst (D columns) set to zero: the masked keys of an assigned gradient */
static void zero_rows(float *dst, int64_t ld, int64_t n, int64_t S, int64_t D) {
    for (int64_t j = n; j < S; j++) memset(dst + j * ld, 0, sizeof(float) * (size_t)D);
}

TARGET void ag__attn_small_fwd_avx2(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo) {
    float kt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(32)));
    float s[AG_ATTN_SMALL_ROWS * KEYS] __attribute__((aligned(32))); /* the scores, then P */
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv;
    transpose_rows(t->k, t->ldk, n, Dh, kt);
    mac(L, Dh, KEYS, t->q, t->ldq, 1, kt, KEYS, 1.0f, true, s, KEYS);
    const __m256 al = _mm256_set1_ps(t->alpha), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i bit0 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128), bit1 = _mm256_slli_epi32(bit0, 8);
    const uint32_t pad = n >= KEYS ? 0 : 0xFFFFu & ~((1u << n) - 1); /* keys from n on: dead for every row */
    for (int64_t i = 0; i < L; i++) {
        float *si = s + i * KEYS;
        __m256 x0 = _mm256_load_ps(si), x1 = _mm256_load_ps(si + 8);
        if (t->madd) {
            const float *m = t->madd + i * t->madd_ld;
            x0 = _mm256_fmadd_ps(x0, al, _mm256_loadu_ps(m));
            x1 = _mm256_fmadd_ps(x1, al, _mm256_loadu_ps(m + 8));
        } else {
            x0 = _mm256_mul_ps(x0, al);
            x1 = _mm256_mul_ps(x1, al);
        }
        __m256i dead = _mm256_set1_epi32((int)(pad | (t->dead ? t->dead[i * t->dead_ld] : 0u)));
        x0 = _mm256_blendv_ps(x0, ninf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(dead, bit0), bit0)));
        x1 = _mm256_blendv_ps(x1, ninf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(dead, bit1), bit1)));
        __m256 mx = hmax8(_mm256_max_ps(x0, x1));
        if (_mm256_cvtss_f32(mx) == -INFINITY) { /* nothing to attend: zeros, not 0/0 */
            x0 = x1 = _mm256_setzero_ps();
        } else {
            x0 = exp8(_mm256_sub_ps(x0, mx));
            x1 = exp8(_mm256_sub_ps(x1, mx));
            __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), hsum8(_mm256_add_ps(x0, x1)));
            x0 = _mm256_mul_ps(x0, inv);
            x1 = _mm256_mul_ps(x1, inv);
        }
        _mm256_store_ps(si, x0);
        _mm256_store_ps(si + 8, x1);
        float *pr = p + i * ldp;
        store_n(pr, ldp, x0);
        store_n(pr + 8, ldp - 8, x1);
        if (ldp > KEYS) memset(pr + KEYS, 0, sizeof(float) * (size_t)(ldp - KEYS));
    }
    mac(L, n, Dv, s, KEYS, 1, t->v, t->ldv, 1.0f, true, o, ldo);
}

TARGET void ag__attn_small_bwd_avx2(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout,
                                    int64_t lddo, float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv,
                                    int64_t lddv, int64_t assign_S) {
    float vt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(32)));
    float ds[AG_ATTN_SMALL_ROWS * KEYS] __attribute__((aligned(32))); /* dP, then dS */
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv;
    bool assign = assign_S > 0;
    if (dv) {
        mac(n, L, Dv, p, 1, ldp, dout, lddo, 1.0f, assign, dv, lddv);
        zero_rows(dv, lddv, n, assign_S, Dv);
    }
    if (!dq && !dk) return;
    transpose_rows(t->v, t->ldv, n, Dv, vt);
    mac(L, Dv, KEYS, dout, lddo, 1, vt, KEYS, 1.0f, true, ds, KEYS);
    for (int64_t i = 0; i < L; i++) {
        float *di = ds + i * KEYS;
        const float *pi = p + i * ldp;
        __m256 y0 = load_n(pi, n), y1 = load_n(pi + 8, n - 8);
        __m256 g0 = _mm256_load_ps(di), g1 = _mm256_load_ps(di + 8);
        __m256 dot = hsum8(_mm256_fmadd_ps(g1, y1, _mm256_mul_ps(g0, y0)));
        _mm256_store_ps(di, _mm256_mul_ps(y0, _mm256_sub_ps(g0, dot)));
        _mm256_store_ps(di + 8, _mm256_mul_ps(y1, _mm256_sub_ps(g1, dot)));
    }
    if (dq) mac(L, n, Dh, ds, KEYS, 1, t->k, t->ldk, t->alpha, assign, dq, lddq);
    if (dk) {
        mac(n, L, Dh, ds, 1, KEYS, t->q, t->ldq, t->alpha, assign, dk, lddk);
        zero_rows(dk, lddk, n, assign_S, Dh);
    }
}

#endif
