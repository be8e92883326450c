/* The hand-written kernels under the ops. ag__expf (tensor/fastmath.h) against libm's expf.
 * ag__sgemm (tensor/gemm.h), attograd's own kernel where the CPU has AVX-512 or AVX2: every
 * transpose combination, sizes around the kernel's tile and block edges, padded leading
 * dimensions, alpha and beta (beta 0 must ignore NaN in C), checked element by element
 * against a double-precision triple loop (the witness) with a bound from Σ|a||b|. Also the
 * thread-count independence the library promises: 1 and 2 OpenMP threads give the same bits.
 * Each kernel set the CPU can run (tensor/simd/kernels.h: AVX-512 8×32, AVX2 6×16) is also
 * driven directly through both paths of the driver, at sizes around its own tile and blocks.
 * The fused small-attention kernels (nn/attention/simd/kernels.h) against a double-precision softmax
 * attention and its backward, around their tile edges (8-row blocks, 16-lane head chunks).
 * Nonzero packing (tensor/nzpack.c) on every path against an element-by-element reference. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/fastmath.h"
#include "../tensor/gemm.h"
#include "../tensor/internal.h"
#include "../tensor/simd/kernels.h"
#include "../nn/attention/simd/kernels.h"
#include "test_util.h"

/* distance in units in the last place, for finite floats of one sign */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static void test_expf_within_two_ulp_of_libm_and_zero_below_the_normal_range(void **s) {
    int64_t worst = 0;
    float at = 0;
    for (int i = 0; i <= 1 << 22; i++) { /* 4M points evenly over the range, in double then rounded */
        float x = (float)(-87.33 + (88.37 + 87.33) * i / (double)(1 << 22));
        int64_t u = ulps(ag__expf(x), expf(x));
        if (u > worst) worst = u, at = x;
    }
    if (worst > 2) fail_msg("ag__expf is %lld ulp from expf at %.9g", (long long)worst, at);
    assert_true(ag__expf(-INFINITY) == 0.0f);
    assert_true(ag__expf(-88.0f) == 0.0f);
    assert_true(ag__expf(0.0f) == 1.0f);
    assert_true(isnan(ag__expf(NAN)));
}

static float val(uint32_t *s) { /* xorshift: the test's own numbers in [-1, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)((*s >> 8) * (2.0 / 16777216.0) - 1.0);
}

static float *fill(int64_t count, uint32_t *seed) {
    float *x = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    for (int64_t i = 0; i < count; i++) x[i] = val(seed);
    return x;
}

/* C = alpha op(A) op(B) + beta C (+ bias row) through K's small or blocked path, or through
 * ag__sgemm when K is NULL, against the double witness; returns the elements outside the bound
 * (or touched past n) */
static int check_path(const ag__sgemm_kernels *K, bool small, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      float alpha, float beta, bool with_bias, uint32_t seed) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    int64_t ar = ta ? k : m, br = tb ? n : k;
    float *a = fill(ar * lda, &seed), *b = fill(br * ldb, &seed), *bias = with_bias ? fill(n, &seed) : NULL;
    float *c = fill(m * ldc, &seed), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    if (beta == 0)
        for (int64_t i = 0; i < m * ldc; i++) c[i] = NAN;
    memcpy(c0, c, sizeof(float) * (size_t)(m * ldc));
    if (K) ag__sgemm_path(K, small, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
    else ag__sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sum = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p], y = tb ? b[j * ldb + p] : b[p * ldb + j];
                sum += x * y;
                mag += fabs(x * y);
            }
            double old = (beta == 0 ? 0 : beta * (double)c0[i * ldc + j]) + (bias ? bias[j] : 0);
            double want = alpha * sum + old, tol = 1e-6 * (fabs(alpha) * mag + fabs(old)) + 1e-7 * (double)k + 1e-30;
            if (!(fabs(c[i * ldc + j] - want) <= tol)) bad++;
        }
        for (int64_t j = n; j < ldc; j++)
            if (!(c[i * ldc + j] == c0[i * ldc + j] || (isnan(c[i * ldc + j]) && isnan(c0[i * ldc + j])))) bad++;
    }
    free(a);
    free(b);
    free(bias);
    free(c);
    free(c0);
    return bad;
}

/* the same through ag__sgemm, whichever kernel it picked */
static int check_one(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, uint32_t seed) {
    return check_path(NULL, false, ta, tb, m, n, k, alpha, beta, false, seed);
}

static void test_sgemm_matches_double_reference_for_every_transpose_and_edge_size(void **s) {
    const int64_t sizes[] = {1, 7, 8, 9, 31, 32, 33, 63, 65, 100};
    uint32_t seed = 12345;
    for (int t = 0; t < 4; t++)
        for (int im = 0; im < 10; im++)
            for (int in = 0; in < 10; in += 3)
                for (int ik = 0; ik < 10; ik += 4) {
                    int bad = check_one(t & 1, t & 2, sizes[im], sizes[in], sizes[ik], 1.0f, 0.0f, seed++);
                    if (bad) fail_msg("ta=%d tb=%d m=%lld n=%lld k=%lld: %d elements off", t & 1, !!(t & 2),
                                      (long long)sizes[im], (long long)sizes[in], (long long)sizes[ik], bad);
                }
}

static void test_sgemm_spans_several_k_slices_and_row_blocks_with_alpha_and_beta(void **s) {
    const float ab[][2] = {{1, 1}, {0.375f, 0}, {-2, 0.5f}};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 3; i++) {
            int bad = check_one(t & 1, t & 2, 150, 290, 800, ab[i][0], ab[i][1], 99u + (uint32_t)(t * 3 + i));
            if (bad)
                fail_msg("ta=%d tb=%d alpha=%g beta=%g: %d elements off", t & 1, !!(t & 2), ab[i][0], ab[i][1], bad);
        }
}

/* ag_linear's forward: the bias row added in the kernel equals bias + the plain product, bit for bit */
static void test_sgemm_bias_adds_the_row_to_the_plain_product(void **s) {
    const int64_t dims[][3] = {{5, 7, 9}, {40, 33, 64}, {300, 70, 130}};
    uint32_t seed = 3;
    for (int d = 0; d < 3; d++) {
        int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(n * k));
        float *bias = malloc(sizeof(float) * (size_t)n), *c1 = malloc(sizeof(float) * (size_t)(m * n));
        float *c2 = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t i = 0; i < m * k; i++) a[i] = val(&seed);
        for (int64_t i = 0; i < n * k; i++) b[i] = val(&seed);
        for (int64_t j = 0; j < n; j++) bias[j] = val(&seed);
        ag__sgemm_bias(false, true, m, n, k, a, k, b, k, bias, c1, n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c2[i * n + j] = bias[j];
        ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 1.0f, c2, n);
        assert_memory_equal(c1, c2, sizeof(float) * (size_t)(m * n));
        free(a);
        free(b);
        free(bias);
        free(c1);
        free(c2);
    }
}

static void test_sgemm_results_do_not_depend_on_thread_count(void **s) {
    int64_t m = 300, n = 260, k = 700;
    uint32_t seed = 7;
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
    float *c1 = malloc(sizeof(float) * (size_t)(m * n)), *c2 = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) a[i] = val(&seed);
    for (int64_t i = 0; i < k * n; i++) b[i] = val(&seed);
    int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c1, n);
    omp_set_num_threads(2);
    ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n);
    omp_set_num_threads(prev);
    assert_memory_equal(c1, c2, sizeof(float) * (size_t)(m * n));
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* ---- each kernel set through each path of the driver ---- */

/* the sets this CPU runs (AVX-512's first), whichever ag__sgemm picked */
static int runnable_sets(const ag__sgemm_kernels *sets[2]) {
    int n = 0;
    for (int isa = AG_ISA_AVX512; isa > AG_ISA_GENERIC; isa--) {
        const ag__kernel_table *T = ag__kernels_for((ag__isa)isa);
        if (T && T->sgemm) sets[n++] = T->sgemm;
    }
    return n;
}

static void test_each_kernel_set_matches_the_witness_around_its_tile_and_block_edges(void **s) {
    const ag__sgemm_kernels *sets[2];
    int nsets = runnable_sets(sets);
    if (!nsets) skip();
    uint32_t seed = 4242;
    for (int si = 0; si < nsets; si++) {
        const ag__sgemm_kernels *K = sets[si];
        int64_t MR = K->mr, NR = K->nr, KC = K->kc;
        const int64_t ms[] = {1, MR - 1, MR, MR + 1, 2 * MR + 1, K->mc + 1};
        const int64_t ns[] = {1, NR - 1, NR, NR + 1, 2 * NR + 3};
        const int64_t ks[] = {1, 3, KC - 1, KC, KC + 1, 2 * KC + 5};
        const float betas[] = {0, 1};
        for (int t = 0; t < 4; t++)
            for (int im = 0; im < 6; im++)
                for (int in = 0; in < 5; in++)
                    for (int ik = 0; ik < 6; ik++)
                        for (int path = 0; path < 2; path++) {
                            int64_t m = ms[im], n = ns[in], k = ks[ik];
                            float beta = betas[(im + in + ik) % 2], alpha = path ? 1.0f : -0.75f;
                            bool bias = (im + ik + t) % 3 == 0 && beta == 0; /* ag__sgemm_bias: beta 0 */
                            int bad = check_path(K, path, t & 1, t & 2, m, n, k, alpha, beta, bias, seed++);
                            if (bad)
                                fail_msg("%s %s path: ta=%d tb=%d m=%lld n=%lld k=%lld beta=%g bias=%d: %d elements "
                                         "off",
                                         K->name, path ? "small" : "blocked", t & 1, !!(t & 2), (long long)m,
                                         (long long)n, (long long)k, beta, bias, bad);
                        }
    }
}

/* many tasks with row and column tails, K in several slices, bias or beta 1: the same bits at
 * 1 and 2 threads, for every set */
static void test_each_kernel_set_gives_the_same_bits_at_one_and_two_threads(void **s) {
    const ag__sgemm_kernels *sets[2];
    int nsets = runnable_sets(sets);
    if (!nsets) skip();
    uint32_t seed = 99;
    int prev = omp_get_max_threads();
    for (int si = 0; si < nsets; si++) {
        const ag__sgemm_kernels *K = sets[si];
        int64_t m = 2 * K->mc + K->mr + 1, n = K->nch + K->nr + 3, k = 2 * K->kc + 7;
        for (int t = 0; t < 4; t++)
            for (int v = 0; v < 2; v++) {
                bool ta = t & 1, tb = t & 2;
                int64_t lda = ta ? m : k, ldb = tb ? k : n;
                float *a = fill(m * k, &seed), *b = fill(n * k, &seed), *bias = fill(n, &seed);
                float *c1 = fill(m * n, &seed), *c2 = malloc(sizeof(float) * (size_t)(m * n));
                memcpy(c2, c1, sizeof(float) * (size_t)(m * n));
                omp_set_num_threads(1);
                ag__sgemm_path(K, false, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)v, c1, n, v ? NULL : bias);
                omp_set_num_threads(2);
                ag__sgemm_path(K, false, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, (float)v, c2, n, v ? NULL : bias);
                assert_memory_equal(c1, c2, sizeof(float) * (size_t)(m * n));
                free(a);
                free(b);
                free(bias);
                free(c1);
                free(c2);
            }
    }
    omp_set_num_threads(prev);
}

/* ---- fused small attention ---- */

typedef void (*attn_fwd_fn)(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo);
typedef void (*attn_bwd_fn)(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout, int64_t lddo,
                            float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv, int64_t lddv,
                            int64_t assign_S);

typedef struct {
    int64_t L, n, Dh, Dv, ldp;
    int mask; /* 0 none, 1 dead bits per row (some rows all dead), 2 additive rows with -inf, 3 one shared additive row */
    bool drop; /* a dropout keep mask (about 3 in 4 kept) with scale 4/3 */
    attn_fwd_fn fwd;
    attn_bwd_fn bwd;
} attn_case;


static float *nans(int64_t count) {
    float *x = malloc(sizeof(float) * (size_t)(count > 0 ? count : 1));
    for (int64_t i = 0; i < count; i++) x[i] = NAN;
    return x;
}

static int off(float got, double want, double mag) { return !(fabs(got - want) <= 1e-6 * (1 + mag)); }

/* number of elements of P, O, dQ, dK, dV off the double reference (or touched where they must
 * not be); the backward both accumulating into old values and assigning into NaN (three more
 * masked key rows, which must become zeros) */
static int check_attn(attn_case c, uint32_t seed) {
    int64_t L = c.L, n = c.n, Dh = c.Dh, Dv = c.Dv, ldp = c.ldp, K = AG_ATTN_AVX2_KEYS;
    int64_t ldq = Dh + 3, ldk = Dh + 1, ldv = Dv + 2, ldo = Dv + 1;
    float *q = fill(L * ldq, &seed), *k = fill(n * ldk, &seed), *v = fill(n * ldv, &seed);
    float *madd = fill(L * K, &seed), *dout = fill(L * ldo, &seed);
    float *dq = fill(L * ldq, &seed), *dk = fill(n * ldk, &seed), *dv = fill(n * ldv, &seed);
    float *dq0 = malloc(sizeof(float) * (size_t)(L * ldq)), *dk0 = malloc(sizeof(float) * (size_t)(n * ldk));
    float *dv0 = malloc(sizeof(float) * (size_t)(n * ldv));
    memcpy(dq0, dq, sizeof(float) * (size_t)(L * ldq));
    memcpy(dk0, dk, sizeof(float) * (size_t)(n * ldk));
    memcpy(dv0, dv, sizeof(float) * (size_t)(n * ldv));
    uint64_t *dead = malloc(sizeof(uint64_t) * (size_t)L);
    uint8_t *keep = malloc((size_t)(L * ldp));
    const float sc = 4.0f / 3;
    for (int64_t i = 0; i < L * ldp; i++) keep[i] = val(&seed) > -0.5f;
    for (int64_t i = 0; i < L; i++) {
        dead[i] = 0;
        for (int64_t j = 0; j < K; j++) dead[i] |= (uint64_t)(val(&seed) > 0.5f) << j; /* ~1/4 of the keys */
        if (i % 5 == 3) dead[i] = ~UINT64_C(0); /* nothing to attend */
        for (int64_t j = 0; j < K; j++)
            if (c.mask == 2 && (i + 2 * j) % 7 == 0) madd[i * K + j] = -INFINITY;
        if (c.mask == 2 && i % 6 == 4)
            for (int64_t j = 0; j < K; j++) madd[i * K + j] = -INFINITY;
    }
    float *p = malloc(sizeof(float) * (size_t)(L * ldp)), *o = malloc(sizeof(float) * (size_t)(L * ldo));
    for (int64_t i = 0; i < L * ldp; i++) p[i] = NAN;
    for (int64_t i = 0; i < L * ldo; i++) o[i] = 1234.5f;
    float alpha = 1.0f / sqrtf((float)Dh);
    ag__attn_tile t = {.L = L, .n = n, .Dh = Dh, .Dv = Dv, .q = q, .k = k, .v = v, .ldq = ldq, .ldk = ldk,
                       .ldv = ldv, .alpha = alpha, .madd = c.mask >= 2 ? madd : NULL, .madd_ld = c.mask == 3 ? 0 : K,
                       .dead = c.mask == 1 ? dead : NULL, .dead_ld = 1, .keep = c.drop ? keep : NULL, .ldkeep = ldp,
                       .keep_scale = sc};
    c.fwd(&t, p, ldp, o, ldo);
    c.bwd(&t, p, ldp, dout, ldo, dq, ldq, dk, ldk, dv, ldv, 0);
    float *dq2 = nans(L * ldq), *dk2 = nans((n + 3) * ldk), *dv2 = nans((n + 3) * ldv);
    c.bwd(&t, p, ldp, dout, ldo, dq2, ldq, dk2, ldk, dv2, ldv, n + 3);
    int bad = 0;
    double *pr = malloc(sizeof(double) * (size_t)(L * K)), *ds = malloc(sizeof(double) * (size_t)(L * K));
    for (int64_t i = 0; i < L; i++) {
        double sco[64], mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t d = 0; d < Dh; d++) s += (double)q[i * ldq + d] * k[j * ldk + d];
            s *= alpha;
            if (t.madd) s += t.madd[i * t.madd_ld + j];
            if (t.dead && (t.dead[i] >> j & 1)) s = -INFINITY;
            sco[j] = s;
            mx = s > mx ? s : mx;
        }
        for (int64_t j = 0; j < n; j++) sum += sco[j] == -INFINITY ? 0 : exp(sco[j] - mx);
        for (int64_t j = 0; j < ldp; j++) {
            double want = j < n && mx != -INFINITY && sco[j] != -INFINITY ? exp(sco[j] - mx) / sum : 0;
            if (want == 0 ? p[i * ldp + j] != 0 : !(fabs(p[i * ldp + j] - want) <= 2e-6)) bad++;
            if (j < K) pr[i * K + j] = want * (!c.drop ? 1 : keep[i * ldp + j] ? (double)sc : 0); /* after dropout */
        }
        for (int64_t d = 0; d < ldo; d++) {
            double want = 0, mag = 0;
            for (int64_t j = 0; j < n; j++) want += pr[i * K + j] * v[j * ldv + d], mag += fabs(v[j * ldv + d]);
            if (d >= Dv ? o[i * ldo + d] != 1234.5f : !(fabs(o[i * ldo + d] - want) <= 2e-6 * (1 + mag))) bad++;
        }
        /* backward from the kernel's own P */
        double dp[64], dot = 0;
        for (int64_t j = 0; j < n; j++) {
            dp[j] = 0;
            for (int64_t d = 0; d < Dv; d++) dp[j] += (double)dout[i * ldo + d] * v[j * ldv + d];
            if (c.drop) dp[j] *= keep[i * ldp + j] ? (double)sc : 0;
            dot += dp[j] * p[i * ldp + j];
        }
        for (int64_t j = 0; j < n; j++) ds[i * K + j] = p[i * ldp + j] * (dp[j] - dot);
    }
    for (int64_t i = 0; i < L; i++)
        for (int64_t d = 0; d < ldq; d++) {
            double g = 0, mag = 0, old = dq0[i * ldq + d];
            for (int64_t j = 0; d < Dh && j < n; j++) {
                g += alpha * ds[i * K + j] * k[j * ldk + d];
                mag += fabs(ds[i * K + j] * k[j * ldk + d]);
            }
            bad += off(dq[i * ldq + d], old + g, mag + fabs(old));
            bad += d < Dh ? off(dq2[i * ldq + d], g, mag) : !isnan(dq2[i * ldq + d]);
        }
    for (int64_t j = 0; j < n + 3; j++) {
        for (int64_t d = 0; d < ldk; d++) {
            double g = 0, mag = 0;
            for (int64_t i = 0; j < n && d < Dh && i < L; i++) {
                g += alpha * ds[i * K + j] * q[i * ldq + d];
                mag += fabs(ds[i * K + j] * q[i * ldq + d]);
            }
            if (j < n) bad += off(dk[j * ldk + d], dk0[j * ldk + d] + g, mag + fabs(dk0[j * ldk + d]));
            bad += d < Dh ? off(dk2[j * ldk + d], g, mag) || (j >= n && dk2[j * ldk + d] != 0) : !isnan(dk2[j * ldk + d]);
        }
        for (int64_t d = 0; d < ldv; d++) {
            double g = 0, mag = 0;
            for (int64_t i = 0; j < n && d < Dv && i < L; i++) {
                double pd = p[i * ldp + j] * (!c.drop ? 1 : keep[i * ldp + j] ? (double)sc : 0);
                g += pd * dout[i * ldo + d];
                mag += fabs(pd * dout[i * ldo + d]);
            }
            if (j < n) bad += off(dv[j * ldv + d], dv0[j * ldv + d] + g, mag + fabs(dv0[j * ldv + d]));
            bad += d < Dv ? off(dv2[j * ldv + d], g, mag) || (j >= n && dv2[j * ldv + d] != 0) : !isnan(dv2[j * ldv + d]);
        }
    }
    float *all[] = {q, k, v, madd, dout, dq, dk, dv, dq0, dk0, dv0, dq2, dk2, dv2, p, o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(dead);
    free(keep);
    free(pr);
    free(ds);
    return bad;
}

/* the kernels of every instruction set this CPU runs, whichever table is in use:
 * every key count up to the set's limit with every head dim up to 33 through 16 keys, and the
 * tile edges past it; dropout in a third of the AVX2 cases */
static void test_small_attention_matches_double_reference_around_tile_edges(void **s) {
    /* the AVX-512 table's entries run its own kernels on these cases (up to 16 keys, no dropout) */
    struct {
        const char *name;
        ag__isa isa;
        int64_t keys;
        bool drop;
    } isas[] = {{"avx512", AG_ISA_AVX512, AG_ATTN_SMALL_KEYS, false}, {"avx2", AG_ISA_AVX2, AG_ATTN_AVX2_KEYS, true}};
    const int64_t Ls[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 40, 63, 64};
    const int64_t wide_n[] = {17, 23, 24, 25, 31, 32, 33, 40, 47, 48, 49, 56, 63, 64};
    const int64_t wide_d[] = {1, 7, 8, 9, 16, 17, 31, 32, 33};
    int ran = 0;
    for (int is = 0; is < 2; is++) {
        const ag__attn_kernels *T = ag__attn_kernels_for(isas[is].isa);
        if (!T || !T->fwd) continue;
        ran++;
        uint32_t seed = 77;
        for (int il = 0; il < 14; il++)
            for (int64_t ni = 0; ni < 16 + 14; ni++) {
                int64_t n = ni < 16 ? ni + 1 : wide_n[ni - 16];
                if (n > isas[is].keys) break;
                for (int64_t di = 0; di < (n <= 16 ? 33 : 9); di++) {
                    int64_t Dh = n <= 16 ? di + 1 : wide_d[di];
                    attn_case c = {Ls[il],         n,
                                   Dh,             Dh % 3 ? Dh : 49 - Dh,
                                   Dh % 2 ? n : n + 9, (int)(Dh % 4),
                                   isas[is].drop && (Dh + n) % 3 == 1, T->fwd,
                                   T->bwd};
                    int bad = check_attn(c, seed++);
                    if (bad)
                        fail_msg("%s: L=%lld n=%lld Dh=%lld Dv=%lld ldp=%lld mask=%d drop=%d: %d elements off",
                                 isas[is].name, (long long)c.L, (long long)c.n, (long long)c.Dh, (long long)c.Dv,
                                 (long long)c.ldp, c.mask, c.drop, bad);
                }
            }
    }
    if (!ran) skip();
}

/* elements e0 .. e0+n-1 of an f32 or f64 array (es bytes each) whose bits are x (half of them
 * zero, and -0.0, NaNs and subnormals among the rest), packed and unpacked on path isa: the bits
 * and values against a reference, nothing written outside the range or past the count, nothing
 * read past the packed values (vals holds exactly that many: ASan would see an over-read) */
static void check_nz(ag__isa isa, ag_dtype dt, int64_t e0, int64_t n, uint64_t seed) {
    size_t es = ag_dtype_size(dt);
    int64_t nb = (e0 + n + 7) / 8 + 1;
    size_t bytes = (size_t)n * es + 1;
    unsigned char *x = malloc(bytes), *ref = malloc(bytes), *vals = malloc(bytes), *y = malloc(bytes);
    uint8_t *bits = malloc((size_t)nb), *bits_ref = malloc((size_t)nb);
    memset(bits, 0xA5, (size_t)nb), memset(bits_ref, 0xA5, (size_t)nb), memset(vals, 0xEE, bytes);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        uint64_t r = seed >> 11;
        double v = r % 16 == 1 ? -0.0 : r % 16 == 2 ? NAN : r % 16 == 3 ? 1e-310 : (double)(r % 1000) - 500;
        if (r % 16 > 3 && r % 2) v = 0;
        if (dt == AG_F32) {
            float f = r % 16 == 3 ? 1e-40f : (float)v;
            memcpy(x + i * 4, &f, 4);
        } else {
            memcpy(x + i * 8, &v, 8);
        }
        bool nz = false;
        for (size_t b = 0; b < es; b++) nz |= x[i * es + b] != 0;
        int64_t e = e0 + i;
        bits_ref[e >> 3] = (uint8_t)((bits_ref[e >> 3] & ~(1u << (e & 7))) | (unsigned)nz << (e & 7));
        if (nz) memcpy(ref + count++ * (int64_t)es, x + i * es, es);
    }
    const ag__kernel_table *K = ag__kernels_for(isa);
    int64_t got = ag__nz_pack_with(K, dt, x, n, e0, bits, vals);
    bool bits_ok = !memcmp(bits, bits_ref, (size_t)nb), vals_ok = !memcmp(vals, ref, (size_t)count * es);
    if (got != count || !bits_ok || !vals_ok)
        fail_msg("pack, path %d, %s, e0 %lld, n %lld: count %lld (expected %lld), bits %s, values %s", (int)isa,
                 ag_dtype_name(dt), (long long)e0, (long long)n, (long long)got, (long long)count,
                 bits_ok ? "equal" : "differ", vals_ok ? "equal" : "differ");
    for (int64_t i = count * (int64_t)es; i < n * (int64_t)es; i++) assert_int_equal(vals[i], 0xEE);
    unsigned char *packed = malloc((size_t)count * es + 1); /* exactly the values */
    memcpy(packed, vals, (size_t)count * es);
    memset(y, 0x7F, (size_t)n * es + 1);
    assert_int_equal(ag__nz_unpack_with(K, dt, bits, e0, n, packed, y), count);
    if (memcmp(y, x, (size_t)n * es))
        fail_msg("unpack, path %d, %s, e0 %lld, n %lld: differs", (int)isa, ag_dtype_name(dt), (long long)e0,
                 (long long)n);
    assert_int_equal(y[n * (int64_t)es], 0x7F);
    free(x), free(ref), free(vals), free(y), free(bits), free(bits_ref), free(packed);
}

static void test_nonzero_packing_round_trips_bit_for_bit_on_every_path(void **s) {
    /* starts inside a byte and at chunk (2048) edges; lengths around the vector widths; one
     * range of more than one group of chunks (256 x 2048 elements), at 1 and 2 threads */
    static const int64_t E0[] = {0, 1, 5, 8, 13, 2045, 2048, 4096 + 3};
    static const int64_t N[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 2047, 2048, 2051, 5000, 70001};
    uint64_t seed = 1;
    for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++)
        for (int f = 0; f < 2; f++)
            for (size_t i = 0; i < sizeof E0 / sizeof *E0; i++)
                for (size_t j = 0; j < sizeof N / sizeof *N; j++)
                    if (ag__kernels_for((ag__isa)isa)) check_nz((ag__isa)isa, f ? AG_F64 : AG_F32, E0[i], N[j], seed++);
    for (int t = 1; t <= 2; t++) {
        omp_set_num_threads(t);
        for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++)
            if (ag__kernels_for((ag__isa)isa)) check_nz((ag__isa)isa, AG_F32, 3, 600000, 99);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_within_two_ulp_of_libm_and_zero_below_the_normal_range),
        cmocka_unit_test(test_sgemm_matches_double_reference_for_every_transpose_and_edge_size),
        cmocka_unit_test(test_sgemm_spans_several_k_slices_and_row_blocks_with_alpha_and_beta),
        cmocka_unit_test(test_sgemm_bias_adds_the_row_to_the_plain_product),
        cmocka_unit_test(test_sgemm_results_do_not_depend_on_thread_count),
        cmocka_unit_test(test_each_kernel_set_matches_the_witness_around_its_tile_and_block_edges),
        cmocka_unit_test(test_each_kernel_set_gives_the_same_bits_at_one_and_two_threads),
        cmocka_unit_test(test_small_attention_matches_double_reference_around_tile_edges),
        cmocka_unit_test(test_nonzero_packing_round_trips_bit_for_bit_on_every_path),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
