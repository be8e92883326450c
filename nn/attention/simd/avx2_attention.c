/* The fused small-attention kernels (nn/attention/simd/kernels.h) for AVX2 + FMA: the same math
 * and masking as the AVX-512 kernels of avx512_attention.c, for up to 64 live keys (a query row
 * in up to 8 vectors) and with dropout; the AVX-512 set runs them too, for the heads its own
 * kernels do not take. Every product is the GEMM's small path (op.h's ag__sgemm_small: the
 * unpacked register tile of the set in use, AVX2's 6×16 or AVX-512's 8×32 on such a CPU), A or
 * Aᵀ read in place:
 *   forward   scores = Q Kᵀ (Kᵀ transposed once per head), row softmax, O = Pd V
 *   backward  dV = Pdᵀ dO, dP = dropout'(dO Vᵀ), dS = P*(dP - rowsum(P*dP)), dQ = α dS K,
 *             dK = α dSᵀ Q
 * with Pd = P·keep/(1-p) (P itself without dropout). Scores, P and dS of a head (at most
 * 64×64) stay in a stack buffer whose rows are the live keys rounded up to 8; no GEMM call,
 * packing or pass over a (B,H,L,S) buffer beyond writing P. Every sum runs in a fixed order
 * per (b,h), so results do not depend on the thread count. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "expf.h"
#include "kernels.h"

#define KEYS AG_ATTN_AVX2_KEYS

#define TARGET __attribute__((target("avx2,fma")))

/* Two AVX2 helpers as tensor/simd/avx2.h has them for the GEMM (that header is private to
 * tensor/): lanes < n of an 8-lane mask (n clamped to 0..8), for masked loads and stores of a
 * row's tail, and an 8×8 block transposed in registers. */
static inline TARGET __m256i first8(int64_t n) {
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline TARGET void transpose8(__m256 r[8]) {
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

/* the first c (<= 8) floats at x, the rest zero, never touching memory past them */
static inline TARGET __m256 load_n(const float *x, int64_t c) {
    if (c >= 8) return _mm256_loadu_ps(x);
    return c > 0 ? _mm256_maskload_ps(x, first8(c)) : _mm256_setzero_ps();
}

static inline TARGET void store_n(float *x, int64_t c, __m256 v) {
    if (c >= 8) _mm256_storeu_ps(x, v);
    else if (c > 0) _mm256_maskstore_ps(x, first8(c), v);
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

/* xt[d·w + j] = X[j][d] for d < D, j < w (a multiple of 8), zero for j >= n (X: n rows, ld
 * apart), in 8×8 blocks */
static TARGET void transpose_rows(const float *x, int64_t ld, int64_t n, int64_t D, int64_t w, float *xt) {
    for (int64_t j0 = 0; j0 < w; j0 += 8)
        for (int64_t d0 = 0; d0 < D; d0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = j0 + i < n ? load_n(x + (j0 + i) * ld + d0, D - d0) : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8 && d0 + i < D; i++) _mm256_store_ps(xt + (d0 + i) * w + j0, r[i]);
        }
}

/* rows n..S-1 of dst (D columns) set to zero: the masked keys of an assigned gradient */
static void zero_rows(float *dst, int64_t ld, int64_t n, int64_t S, int64_t D) {
    for (int64_t j = n; j < S; j++) memset(dst + j * ld, 0, sizeof(float) * (size_t)D);
}

/* the live keys rounded up to whole vectors: the row width of the head's buffers */
static int64_t width(int64_t n) { return (n + 7) / 8 * 8; }

/* dropout on the L×w block x (rows w apart, w = width(n)) in place: x·scale where the keep byte
 * is set, else 0, and 0 from column n on. Eight lanes at a time: left to GCC, the loop is
 * vectorised by its byte type (64 lanes) and rows of fewer keys ran its scalar epilogue. */
static TARGET void drop_rows(float *x, int64_t w, const ag__attn_tile *t) {
    const __m256 sc = _mm256_set1_ps(t->keep_scale);
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t i = 0; i < t->L; i++) {
        float *xi = x + i * w;
        const uint8_t *ki = t->keep + i * t->ldkeep;
        for (int64_t j = 0; j < w; j += 8) {
            uint64_t k8 = 0; /* the keep bytes of keys j..j+7, none read past key n */
            int64_t c = t->n - j;
            if (c >= 8) memcpy(&k8, ki + j, 8);
            else if (c > 0) memcpy(&k8, ki + j, (size_t)c);
            __m256 kept = _mm256_castsi256_ps(
                _mm256_cmpgt_epi32(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)k8)), zero));
            _mm256_store_ps(xi + j, _mm256_and_ps(kept, _mm256_mul_ps(_mm256_load_ps(xi + j), sc)));
        }
    }
}

/* The scores of rows 0..L-1 of s (NV vectors a row) scaled, masked and turned into P in place,
 * P also written to p (rows ldp apart, zeros from the live keys to ldp). NV is a constant at
 * each call (the dispatch below), so a row stays in registers and every loop unrolls. */
static inline TARGET __attribute__((always_inline)) void softmax_rows(const int NV, const ag__attn_tile *t, float *s,
                                                                     float *p, int64_t ldp) {
    const int64_t w = 8 * NV, n = t->n;
    const __m256 al = _mm256_set1_ps(t->alpha), ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const uint64_t pad = n >= 64 ? 0 : ~((UINT64_C(1) << n) - 1); /* keys from n on: dead for every row */
    for (int64_t i = 0; i < t->L; i++) {
        float *si = s + i * w, *pr = p + i * ldp;
        const float *m = t->madd ? t->madd + i * t->madd_ld : NULL;
        uint64_t dead = pad | (t->dead ? t->dead[i * t->dead_ld] : 0u);
        __m256 x[NV], mx = ninf;
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) {
            x[c] = m ? _mm256_fmadd_ps(_mm256_load_ps(si + 8 * c), al, _mm256_loadu_ps(m + 8 * c))
                     : _mm256_mul_ps(_mm256_load_ps(si + 8 * c), al);
            __m256i d = _mm256_set1_epi32((int)(dead >> (8 * c) & 0xFF));
            x[c] = _mm256_blendv_ps(x[c], ninf, _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(d, bit), bit)));
            mx = _mm256_max_ps(mx, x[c]);
        }
        mx = hmax8(mx);
        if (_mm256_cvtss_f32(mx) == -INFINITY) { /* nothing to attend: zeros, not 0/0 */
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) x[c] = zero;
        } else {
            __m256 sum = zero;
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) {
                x[c] = ag__expf_avx2(_mm256_sub_ps(x[c], mx));
                sum = _mm256_add_ps(sum, x[c]);
            }
            __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), hsum8(sum));
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) x[c] = _mm256_mul_ps(x[c], inv);
        }
#pragma GCC unroll 8
        for (int c = 0; c < NV; c++) _mm256_store_ps(si + 8 * c, x[c]);
        if (ldp >= w) {
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) _mm256_storeu_ps(pr + 8 * c, x[c]);
            int64_t j = w;
            for (; j + 8 <= ldp; j += 8) _mm256_storeu_ps(pr + j, zero);
            store_n(pr + j, ldp - j, zero);
        } else {
#pragma GCC unroll 8
            for (int c = 0; c < NV; c++) store_n(pr + 8 * c, ldp - 8 * c, x[c]);
        }
    }
}

TARGET void ag__attn_small_fwd_avx2(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo) {
    float kt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(32)));
    float s[AG_ATTN_SMALL_ROWS * KEYS] __attribute__((aligned(32))); /* the scores, then P, then P after dropout */
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv, w = width(n);
    transpose_rows(t->k, t->ldk, n, Dh, w, kt);
    ag__sgemm_small(false, L, w, Dh, 1.0f, t->q, t->ldq, kt, w, false, s, w);
    switch (w / 8) {
    case 1: softmax_rows(1, t, s, p, ldp); break;
    case 2: softmax_rows(2, t, s, p, ldp); break;
    case 3: softmax_rows(3, t, s, p, ldp); break;
    case 4: softmax_rows(4, t, s, p, ldp); break;
    case 5: softmax_rows(5, t, s, p, ldp); break;
    case 6: softmax_rows(6, t, s, p, ldp); break;
    case 7: softmax_rows(7, t, s, p, ldp); break;
    default: softmax_rows(8, t, s, p, ldp); break;
    }
    if (t->keep) drop_rows(s, w, t);
    ag__sgemm_small(false, L, Dv, n, 1.0f, s, w, t->v, t->ldv, false, o, ldo);
}

TARGET void ag__attn_small_bwd_avx2(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout,
                                    int64_t lddo, float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv,
                                    int64_t lddv, int64_t assign_S) {
    float vt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(32)));
    float ds[AG_ATTN_SMALL_ROWS * KEYS] __attribute__((aligned(32))); /* P after dropout, then dP, then dS */
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv, w = width(n), nv = w / 8;
    bool assign = assign_S > 0;
    if (dv) {
        if (t->keep) { /* dV = Pdᵀ dO with Pd the probabilities after dropout */
            for (int64_t i = 0; i < L; i++) memcpy(ds + i * w, p + i * ldp, sizeof(float) * (size_t)n);
            drop_rows(ds, w, t);
            ag__sgemm_small(true, n, Dv, L, 1.0f, ds, w, dout, lddo, !assign, dv, lddv);
        } else {
            ag__sgemm_small(true, n, Dv, L, 1.0f, p, ldp, dout, lddo, !assign, dv, lddv);
        }
        zero_rows(dv, lddv, n, assign_S, Dv);
    }
    if (!dq && !dk) return;
    transpose_rows(t->v, t->ldv, n, Dv, w, vt);
    ag__sgemm_small(false, L, w, Dv, 1.0f, dout, lddo, vt, w, false, ds, w);
    if (t->keep) drop_rows(ds, w, t);
    for (int64_t i = 0; i < L; i++) {
        float *di = ds + i * w;
        const float *pi = p + i * ldp;
        __m256 dot = _mm256_setzero_ps();
        for (int64_t c = 0; c < nv; c++)
            dot = _mm256_fmadd_ps(_mm256_load_ps(di + 8 * c), load_n(pi + 8 * c, n - 8 * c), dot);
        dot = hsum8(dot);
        for (int64_t c = 0; c < nv; c++)
            _mm256_store_ps(di + 8 * c,
                            _mm256_mul_ps(load_n(pi + 8 * c, n - 8 * c), _mm256_sub_ps(_mm256_load_ps(di + 8 * c), dot)));
    }
    if (dq) ag__sgemm_small(false, L, Dh, n, t->alpha, ds, w, t->k, t->ldk, !assign, dq, lddq);
    if (dk) {
        ag__sgemm_small(true, n, Dh, L, t->alpha, ds, w, t->q, t->ldq, !assign, dk, lddk);
        zero_rows(dk, lddk, n, assign_S, Dh);
    }
}
