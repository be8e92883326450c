/* The fused small-attention kernels (nn/attention/simd/kernels.h) for AVX-512F, and the AVX-512
 * set, which says which of them or the AVX2 ones (avx2_attention.c) takes a head.
 * Layout: the keys of a query row are the 16 lanes of a vector, so
 *   scores  s_i = Σ_d Q[i][d] · Kᵀ[d]        (Kᵀ: K transposed once per head, 16 lanes a row)
 *   softmax over the lanes of s_i            (two horizontal reductions per row)
 *   output  O[i] = Σ_j P[i][j] · V[j]        (V's rows as they lie, 16 columns a vector)
 * with 8 query rows in flight to cover the FMA latency. Backward likewise: dP_i = Σ_d dO[i][d]
 * · Vᵀ[d], dS_i in registers, dQ[i] = α Σ_j dS[i][j] K[j], and dK, dV summed over the query
 * rows with one accumulator per key. Every sum runs in a fixed order per (b,h), so results
 * do not depend on the thread count. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "expf.h"
#include "kernels.h"

#define KEYS AG_ATTN_SMALL_KEYS
#define RB 8 /* query rows per block */

#define TARGET __attribute__((target("avx512f,fma")))

static inline TARGET __mmask16 first(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

/* 16×16 transpose of r in registers */
static inline TARGET void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* r[4i+c] holds, in 128-bit block k, column 4k+c of rows 4i..4i+3 */
    for (int c = 0; c < 4; c++) {
        __m512 t0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), t1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        __m512 t2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        __m512 t3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        t[c] = _mm512_shuffle_f32x4(t0, t2, 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(t0, t2, 0xDD);
        t[8 + c] = _mm512_shuffle_f32x4(t1, t3, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(t1, t3, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* xt[d·16 + j] = X[j][d] for d < D, j < 16, zero for j >= n (X: n rows, ld apart, D columns) */
static TARGET void transpose_rows(const float *x, int64_t ld, int64_t n, int64_t D, float *xt) {
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
        __mmask16 cm = first(D - d0);
        __m512 r[16];
        for (int64_t j = 0; j < 16; j++) r[j] = j < n ? _mm512_maskz_loadu_ps(cm, x + j * ld + d0) : _mm512_setzero_ps();
        transpose16(r);
        for (int64_t d = 0; d < 16 && d0 + d < D; d++) _mm512_store_ps(xt + (d0 + d) * 16, r[d]);
    }
}

/* Forward, 16 query rows at a time, in transposed form: with Kᵀ and the block's Qᵀ, the
 * scores of key j over the 16 rows are one vector, xᵀ[j] = Σ_d Kᵀ[d][j] · Qᵀ[d], so the mask
 * is a per-lane select and max, exp, sum and scale are vertical operations (no horizontal
 * chain per row). Oᵀ = Σ_j V[j]ᵀ · Pᵀ[j] with broadcasts of V; P and O are transposed back. */
TARGET void ag__attn_small_fwd_avx512(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo) {
    float kt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(64)));
    float qt[AG_ATTN_SMALL_DIM * 16] __attribute__((aligned(64)));
    float mt[KEYS * 16] __attribute__((aligned(64))); /* the additive mask, transposed */
    float pt[KEYS * 16] __attribute__((aligned(64))); /* Pᵀ of the block: key j's 16 rows at pt + 16j */
    uint32_t dd[16] __attribute__((aligned(64)));
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv;
    transpose_rows(t->k, t->ldk, n, Dh, kt);
    const __m512 al = _mm512_set1_ps(t->alpha), ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    const __mmask16 pst = first(ldp);
    for (int64_t i0 = 0; i0 < L; i0 += 16) {
        int64_t mr = L - i0 < 16 ? L - i0 : 16;
        transpose_rows(t->q + i0 * t->ldq, t->ldq, mr, Dh, qt);
        __m512 x[16];
        for (int j = 0; j < 16; j++) x[j] = zero;
        for (int64_t d = 0; d < Dh; d++) {
            __m512 qd = _mm512_load_ps(qt + d * 16);
            const float *kd = kt + d * KEYS;
            for (int j = 0; j < 16; j++) x[j] = _mm512_fmadd_ps(_mm512_set1_ps(kd[j]), qd, x[j]);
        }
        if (t->madd) { /* transposed in registers, then added to the scaled scores */
            __m512 m[16];
            for (int r = 0; r < 16; r++) m[r] = r < mr ? _mm512_loadu_ps(t->madd + (i0 + r) * t->madd_ld) : zero;
            transpose16(m);
            for (int j = 0; j < 16; j++) _mm512_store_ps(mt + j * 16, m[j]);
            for (int j = 0; j < 16; j++) x[j] = _mm512_fmadd_ps(x[j], al, _mm512_load_ps(mt + j * 16));
        } else {
            for (int j = 0; j < 16; j++) x[j] = _mm512_mul_ps(x[j], al);
        }
        for (int r = 0; r < 16; r++) dd[r] = r < mr && t->dead ? (uint32_t)t->dead[(i0 + r) * t->dead_ld] : 0;
        __m512i dead = _mm512_load_si512(dd);
        __mmask16 spare = (__mmask16)~first(mr); /* rows past L: all masked */
        for (int j = 0; j < 16; j++) {
            __mmask16 dj = j >= n ? (__mmask16)0xFFFF : spare | _mm512_test_epi32_mask(dead, _mm512_set1_epi32(1 << j));
            x[j] = _mm512_mask_mov_ps(x[j], dj, ninf);
        }
        __m512 mx = x[0];
        for (int j = 1; j < 16; j++) mx = _mm512_max_ps(mx, x[j]);
        /* a row with nothing to attend (max -inf) gets zeros, not 0/0 */
        __mmask16 none = _mm512_cmp_ps_mask(mx, ninf, _CMP_EQ_OQ);
        mx = _mm512_mask_mov_ps(mx, none, zero);
        __m512 sum = zero;
        for (int j = 0; j < 16; j++) {
            x[j] = ag__expf_avx512(_mm512_sub_ps(x[j], mx));
            sum = _mm512_add_ps(sum, x[j]);
        }
        __m512 inv = _mm512_maskz_div_ps((__mmask16)~none, _mm512_set1_ps(1.0f), sum);
        for (int j = 0; j < 16; j++) {
            x[j] = _mm512_mul_ps(x[j], inv);
            _mm512_store_ps(pt + j * 16, x[j]);
        }
        transpose16(x); /* back to rows */
        for (int r = 0; r < mr; r++) {
            float *pr = p + (i0 + r) * ldp;
            _mm512_mask_storeu_ps(pr, pst, x[r]);
            if (ldp > KEYS) memset(pr + KEYS, 0, sizeof(float) * (size_t)(ldp - KEYS));
        }
        for (int64_t c = 0; c < Dv; c += 16) {
            int64_t dc = Dv - c < 16 ? Dv - c : 16;
            __m512 acc[16];
            for (int d = 0; d < 16; d++) acc[d] = zero;
            if (dc == 16) {
                for (int64_t j = 0; j < n; j++) {
                    __m512 pj = _mm512_load_ps(pt + j * 16);
                    const float *vj = t->v + j * t->ldv + c;
                    for (int d = 0; d < 16; d++) acc[d] = _mm512_fmadd_ps(_mm512_set1_ps(vj[d]), pj, acc[d]);
                }
            } else { /* columns from dc on repeat the last (computed, never stored) */
                for (int64_t j = 0; j < n; j++) {
                    __m512 pj = _mm512_load_ps(pt + j * 16);
                    const float *vj = t->v + j * t->ldv + c;
                    for (int d = 0; d < 16; d++)
                        acc[d] = _mm512_fmadd_ps(_mm512_set1_ps(vj[d < dc ? d : dc - 1]), pj, acc[d]);
                }
            }
            transpose16(acc);
            __mmask16 cm = first(dc);
            for (int r = 0; r < mr; r++) _mm512_mask_storeu_ps(o + (i0 + r) * ldo + c, cm, acc[r]);
        }
    }
}

/* acc[d] = Σ_i X[i][c+d] · w_i over the L rows, w_i the 16-lane row i of W (ldw apart, lanes
 * masked by wm): the transpose of a key-by-column block, built from vector loads of W and
 * broadcasts of X. Columns from c + dc on repeat the last one (computed, never stored). */
static inline TARGET void sum_outer(const float *w, int64_t ldw, __mmask16 wm, const float *x, int64_t ld, int64_t L,
                                    int64_t dc, __m512 acc[16]) {
    for (int d = 0; d < 16; d++) acc[d] = _mm512_setzero_ps();
    if (dc == 16) {
        for (int64_t i = 0; i < L; i++) {
            __m512 wi = _mm512_maskz_loadu_ps(wm, w + i * ldw);
            for (int d = 0; d < 16; d++) acc[d] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ld + d]), wi, acc[d]);
        }
    } else {
        for (int64_t i = 0; i < L; i++) {
            __m512 wi = _mm512_maskz_loadu_ps(wm, w + i * ldw);
            for (int d = 0; d < 16; d++)
                acc[d] = _mm512_fmadd_ps(_mm512_set1_ps(x[i * ld + (d < dc ? d : dc - 1)]), wi, acc[d]);
        }
    }
}

/* dst[j][c..] += scale · Σ_i W[i][j] X[i][c..] for the n live keys j, in chunks of 16 columns;
 * with assign_S > 0 = instead, and zeros in rows n..assign_S-1 */
static TARGET void keys_by_columns(const float *w, int64_t ldw, __mmask16 wm, const float *x, int64_t ld, int64_t L,
                                   int64_t D, int64_t n, __m512 scale, float *dst, int64_t ldd, int64_t assign_S) {
    for (int64_t c = 0; c < D; c += 16) {
        int64_t dc = D - c < 16 ? D - c : 16;
        __mmask16 cm = first(dc);
        __m512 acc[16];
        sum_outer(w, ldw, wm, x + c, ld, L, dc, acc);
        transpose16(acc);
        for (int64_t j = 0; j < n; j++) {
            float *d = dst + j * ldd + c;
            _mm512_mask_storeu_ps(d, cm, assign_S ? _mm512_mul_ps(acc[j], scale)
                                                  : _mm512_fmadd_ps(acc[j], scale, _mm512_maskz_loadu_ps(cm, d)));
        }
        for (int64_t j = n; j < assign_S; j++) _mm512_mask_storeu_ps(dst + j * ldd + c, cm, _mm512_setzero_ps());
    }
}

TARGET void ag__attn_small_bwd_avx512(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout,
                                      int64_t lddo, float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv,
                                      int64_t lddv, int64_t assign_S) {
    float vt[AG_ATTN_SMALL_DIM * KEYS] __attribute__((aligned(64)));
    float ds[AG_ATTN_SMALL_ROWS * KEYS] __attribute__((aligned(64)));
    int64_t L = t->L, n = t->n, Dh = t->Dh, Dv = t->Dv;
    const __m512 al = _mm512_set1_ps(t->alpha);
    const __mmask16 live = first(n);
    if (dv) keys_by_columns(p, ldp, live, dout, lddo, L, Dv, n, _mm512_set1_ps(1.0f), dv, lddv, assign_S);
    if (!dq && !dk) return;
    transpose_rows(t->v, t->ldv, n, Dv, vt);
    for (int64_t i0 = 0; i0 < L; i0 += RB) {
        int64_t mr = L - i0 < RB ? L - i0 : RB;
        const float *gr[RB];
        __m512 g[RB];
        for (int r = 0; r < RB; r++) {
            gr[r] = dout + (i0 + (r < mr ? r : mr - 1)) * lddo;
            g[r] = _mm512_setzero_ps();
        }
        for (int64_t d = 0; d < Dv; d++) {
            __m512 vd = _mm512_load_ps(vt + d * KEYS);
            for (int r = 0; r < RB; r++) g[r] = _mm512_fmadd_ps(_mm512_set1_ps(gr[r][d]), vd, g[r]);
        }
        for (int r = 0; r < RB; r++) {
            if (r >= mr) break;
            __m512 y = _mm512_maskz_loadu_ps(live, p + (i0 + r) * ldp);
            float dot = _mm512_reduce_add_ps(_mm512_mul_ps(g[r], y));
            _mm512_store_ps(ds + (i0 + r) * KEYS, _mm512_mul_ps(y, _mm512_sub_ps(g[r], _mm512_set1_ps(dot))));
        }
        if (!dq) continue;
        for (int64_t c = 0; c < Dh; c += 16) {
            __mmask16 cm = first(Dh - c);
            __m512 a[RB];
            for (int r = 0; r < RB; r++) a[r] = _mm512_setzero_ps();
            for (int64_t j = 0; j < n; j++) {
                __m512 kj = _mm512_maskz_loadu_ps(cm, t->k + j * t->ldk + c);
                for (int r = 0; r < RB; r++)
                    a[r] = _mm512_fmadd_ps(_mm512_set1_ps(ds[(i0 + (r < mr ? r : 0)) * KEYS + j]), kj, a[r]);
            }
            for (int r = 0; r < RB; r++) {
                if (r >= mr) break;
                float *d = dq + (i0 + r) * lddq + c;
                _mm512_mask_storeu_ps(d, cm, assign_S ? _mm512_mul_ps(a[r], al)
                                                      : _mm512_fmadd_ps(a[r], al, _mm512_maskz_loadu_ps(cm, d)));
            }
        }
    }
    if (dk) keys_by_columns(ds, KEYS, 0xFFFF, t->q, t->ldq, L, Dh, n, al, dk, lddk, assign_S);
}

/* The AVX-512 set: its own kernels take a head of up to 16 live keys without dropout, the AVX2
 * ones (whose products run on the AVX-512 GEMM tile) every other head of up to
 * AG_ATTN_AVX2_KEYS keys, measured faster there than the GEMM path */

static bool avx512_takes(const ag__attn_tile *t) { return t->n <= AG_ATTN_SMALL_KEYS && !t->keep; }

static void attn_fwd(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo) {
    if (avx512_takes(t)) ag__attn_small_fwd_avx512(t, p, ldp, o, ldo);
    else ag__attn_small_fwd_avx2(t, p, ldp, o, ldo);
}

static void attn_bwd(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout, int64_t lddo, float *dq,
                     int64_t lddq, float *dk, int64_t lddk, float *dv, int64_t lddv, int64_t assign_S) {
    if (avx512_takes(t))
        ag__attn_small_bwd_avx512(t, p, ldp, dout, lddo, dq, lddq, dk, lddk, dv, lddv, assign_S);
    else ag__attn_small_bwd_avx2(t, p, ldp, dout, lddo, dq, lddq, dk, lddk, dv, lddv, assign_S);
}

const ag__attn_kernels ag__attn_kernels_avx512 = {
    .isa = AG_ISA_AVX512,
    .fwd = attn_fwd,
    .bwd = attn_bwd,
};
