/* The fused attention's kernels (nn/attention/attention.c and simd/): dropout dropping exactly
 * the draws below p, results independent of the thread count, the fused small-head kernels
 * against the composed ops and the f64 path for each mask, and the gradient of packed heads. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../nn/nn_internal.h"
#include "../tensor/internal.h"
#include "nn_attention_util.h"

/* The dropout mask is the public generator's stream: weight i is dropped exactly when its word
 * (word i % 2 of draw i / 2) is a uniform x · 2^-32 below p; the 64K elements are split over the
 * threads in blocks, and 1 and 2 threads give the same weights and output. */
static void test_attention_dropout_drops_exactly_the_draws_below_p_at_any_thread_count(void **s) {
    int64_t n = 4 * 4 * 64 * 64;
    ag_tensor *q = tu_seq(AG_F64, AG_SHAPE(4, 4, 64, 8), 0.1, 0), *k = tu_seq(AG_F64, AG_SHAPE(4, 4, 64, 8), 0.2, 0.3);
    double *u = ag_arena_alloc(ag_arena_current(), (size_t)n * sizeof(double)), *w[2], *o[2];
    int prev = omp_get_max_threads();
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        ag_rng r = {.seed = 11, .counter = ((uint64_t)3 << 32) - 777}, ru = r;
        ag_tensor *wt, *ot = ag_attention(q, k, k, NULL, false, 0.2, &r, true, &wt);
        w[threads - 1] = values(wt), o[threads - 1] = values(ot);
        assert_true(r.counter == ru.counter + (uint64_t)n / 2);
        for (int64_t i = 0; i < n; i++) u[i] = ag__rng_mask_word(ru.seed, ru.counter, (uint64_t)i) * 0x1.0p-32;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += (w[threads - 1][i] == 0) != (u[i] < 0.2);
        assert_int_equal(bad, 0);
    }
    omp_set_num_threads(prev);
    assert_memory_equal(w[0], w[1], (size_t)n * sizeof(double));
    assert_memory_equal(o[0], o[1], (size_t)(n / 64 * 8) * sizeof(double));
}

/* ---- threads ---- */

/* 100 queries and keys: more than the fused kernels take (the GEMM path, its per-thread
 * dscores block) */
static void run_big(int threads, double **out, double **grads) {
    omp_set_num_threads(threads);
    ag_tensor *q = tu_leaf(tu_seq(AG_F32, AG_SHAPE(4, 4, 100, 16), 0.37, 0.1));
    ag_tensor *k = tu_leaf(tu_seq(AG_F32, AG_SHAPE(4, 4, 100, 16), 0.53, 0.7));
    ag_tensor *v = tu_leaf(tu_seq(AG_F32, AG_SHAPE(4, 4, 100, 16), 0.29, 1.1));
    ag_rng r = ag_rng_new(3);
    ag_tensor *o = ag_attention(q, k, v, ag_causal_bool_mask(100), false, 0.1, &r, true, NULL);
    ag_backward(o, tu_seq(AG_F32, AG_SHAPE(4, 4, 100, 16), 0.71, 0.2));
    *out = values(o);
    grads[0] = values(q->grad), grads[1] = values(k->grad), grads[2] = values(v->grad);
}

/* run(threads, &output, grads) at 1 and 2 threads: the same bits, n doubles each */
static void assert_thread_count_independent(void (*run)(int, double **, double **), size_t n) {
    int prev = omp_get_max_threads();
    double *o1, *o2, *g1[3], *g2[3];
    run(1, &o1, g1);
    run(2, &o2, g2);
    omp_set_num_threads(prev);
    assert_memory_equal(o1, o2, n * sizeof(double));
    for (int i = 0; i < 3; i++) assert_memory_equal(g1[i], g2[i], n * sizeof(double));
}

static void test_attention_results_do_not_depend_on_the_thread_count(void **s) {
    assert_thread_count_independent(run_big, 4 * 4 * 100 * 16);
}

/* ---- the fused small-head kernels (f32, up to 64 live keys and dropout; an AVX-512 CPU's own
 * kernels take 16 keys without dropout, the AVX2 ones the rest: nn/attention/simd/avx512_attention.c,
 * nn/attention/simd/avx2_attention.c) ---- */

typedef struct {
    ag_tensor *o, *g[3];
} attn_run;

/* attention of q, k, v = tu_seq in dt of shapes (B,H,L,D), (B,H,S,D), (B,H,S,D), with dropout
 * p (training, the same seed each call, so the same keep mask in either dtype), backward of a
 * tu_seq output gradient; everything back as f64 */
static attn_run run_attn(ag_dtype dt, int64_t B, int64_t H, int64_t L, int64_t S, int64_t D, ag_tensor *mask,
                         bool causal, double p) {
    ag_rng rng = ag_rng_new(9);
    ag_tensor *in[3] = {tu_leaf(tu_seq(dt, AG_SHAPE(B, H, L, D), 0.37, 0.1)),
                        tu_leaf(tu_seq(dt, AG_SHAPE(B, H, S, D), 0.53, 0.7)),
                        tu_leaf(tu_seq(dt, AG_SHAPE(B, H, S, D), 0.29, 1.1))};
    ag_tensor *o = ag_attention(in[0], in[1], in[2], mask, causal, p, &rng, p > 0, NULL);
    ag_backward(o, tu_seq(dt, o->ndim, o->shape, 0.61, 0.4));
    attn_run r = {.o = ag_to(o, AG_F64)};
    for (int i = 0; i < 3; i++) r.g[i] = ag_to(in[i]->grad, AG_F64);
    return r;
}

static void assert_close(const ag_tensor *got, const ag_tensor *want, double tol) {
    tu_assert_values_(__FILE__, __LINE__, got, values(want), ag_numel(want), tol);
}

/* Long heads on the GEMM path: 150 queries against 80 keys (more than the fused kernels take),
 * in f64 and in f32, against softmax(α q kᵀ + mask) v composed of ag_matmul and
 * ag_masked_softmax in f64, with every gradient, the float mask's too. Masks: none, key padding
 * (the second sequence's last 30 keys: the products stop at the live keys), causal (more
 * queries than keys), and a float mask with -inf that requires grad. */
static void test_attention_of_long_heads_matches_the_composed_ops(void **s) {
    const int64_t B = 2, H = 2, L = 150, S = 80, D = 5;
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(B, 1, 1, S));
    for (int64_t j = 50; j < S; j++) ((uint8_t *)kpm->data)[S + j] = 1;
    ag_tensor *causal = ag_zeros(AG_BOOL, AG_SHAPE(L, S));
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = i + 1; j < S; j++) ((uint8_t *)causal->data)[i * S + j] = 1;
    ag_tensor *addm = ag_where(ag_gt(tu_seq(AG_F64, AG_SHAPE(L, S), 0.77, 0.3), ag_scalar(AG_F64, 0.8)),
                               ag_scalar(AG_F64, -INFINITY), tu_seq(AG_F64, AG_SHAPE(L, S), 0.9, 0.2));
    for (int mi = 0; mi < 4; mi++)
        for (int f32 = 0; f32 < 2; f32++) {
            ag_dtype dt = f32 ? AG_F32 : AG_F64;
            ag_tensor *in[4], *ref[4];
            const double sc[3] = {0.37, 0.53, 0.29}, off[3] = {0.1, 0.7, 1.1};
            const int64_t rows[3] = {L, S, S};
            for (int i = 0; i < 3; i++) {
                ag_tensor *x = tu_seq(AG_F64, AG_SHAPE(B, H, rows[i], D), sc[i], off[i]);
                in[i] = tu_leaf(ag_detach(ag_to(x, dt))); /* its own leaf in f64 too */
                ref[i] = tu_leaf(x);
            }
            ag_tensor *mask = mi == 1 ? kpm : NULL, *rmask = mask;
            in[3] = ref[3] = NULL;
            if (mi == 3) {
                in[3] = tu_leaf(ag_detach(ag_to(addm, dt)));
                ref[3] = rmask = tu_leaf(ag_detach(addm));
            }
            ag_tensor *o = ag_attention(in[0], in[1], in[2], in[3] ? in[3] : mask, mi == 2, 0, NULL, false, NULL);
            ag_tensor *scores = ag_mul_scalar(ag_matmul(ref[0], ag_transpose(ref[1], 2, 3)), 1 / sqrt((double)D));
            if (mi == 3) scores = ag_add(scores, rmask);
            ag_tensor *want = ag_matmul(ag_masked_softmax(scores, mi == 2 ? causal : mi == 3 ? NULL : rmask, -1), ref[2]);
            ag_tensor *g = tu_seq(AG_F64, AG_SHAPE(B, H, L, D), 0.61, 0.4);
            ag_backward(o, ag_to(g, dt));
            ag_backward(want, g);
            double tol = f32 ? 2e-5 : 1e-12;
            assert_close(ag_to(o, AG_F64), want, tol);
            for (int i = 0; i < (mi == 3 ? 4 : 3); i++) assert_close(ag_to(in[i]->grad, AG_F64), ref[i]->grad, tol);
        }
}

/* f32 (the fused kernels where the CPU has them) against f64 (the GEMM path), with and without
 * dropout, at 16 keys (on AVX-512 its own kernels without dropout, the AVX2 ones with) and 40
 * (the AVX2 ones) */
static void test_attention_f32_short_keys_match_the_f64_path_for_each_mask(void **s) {
    /* B=4 sequences padded to S keys with S, S-5, 0 (all padded) and 5 live; L around the row blocks */
    const int64_t B = 4, H = 2, Ss[] = {16, 40};
    const int64_t Ls[] = {1, 9, 16, 20}, Ds[] = {3, 16, 17, 33};
    for (int si = 0; si < 2; si++)
        for (int t = 0; t < 4; t++) {
            int64_t S = Ss[si], L = Ls[t], D = Ds[t], live[] = {S, S - 5, 0, 5};
            ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(B, 1, 1, S));
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = live[b]; j < S; j++) ((uint8_t *)kpm->data)[b * S + j] = 1;
            ag_tensor *rowm = ag_zeros(AG_BOOL, AG_SHAPE(L, S)); /* varies by query row; row 2 sees nothing */
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) ((uint8_t *)rowm->data)[i * S + j] = (i + j) % 3 == 0 || i == 2;
            ag_tensor *addm =
                ag_where(rowm, ag_scalar(AG_F64, -INFINITY), tu_seq(AG_F64, AG_SHAPE(L, S), 0.9, 0.2));
            ag_tensor *masks[] = {NULL, kpm, rowm, addm, kpm, kpm};
            for (int mi = 0; mi < 6; mi++) {
                ag_tensor *m64 = masks[mi], *m32 = m64 && m64->dtype == AG_F64 ? ag_to(m64, AG_F32) : m64;
                bool causal = mi == 4;
                double p = mi == 5 || (mi == 3 && t % 2) ? 0.25 : 0;
                attn_run want = run_attn(AG_F64, B, H, L, S, D, m64, causal, p);
                attn_run got = run_attn(AG_F32, B, H, L, S, D, m32, causal, p);
                assert_close(got.o, want.o, 2e-6);
                for (int i = 0; i < 3; i++) assert_close(got.g[i], want.g[i], 1e-5);
                if (mi == 1) { /* the all-padded sequence: zero output, zero gradients */
                    double *o = values(got.o), *dq = values(got.g[0]);
                    for (int64_t e = 2 * H * L * D; e < 3 * H * L * D; e++) assert_true(o[e] == 0 && dq[e] == 0);
                }
            }
        }
}

static void run_small(int threads, double **out, double **grads) {
    omp_set_num_threads(threads);
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(8, 1, 1, 16));
    for (int64_t b = 0; b < 8; b++)
        for (int64_t j = 12; j < 16; j++) ((uint8_t *)kpm->data)[b * 16 + j] = 1;
    attn_run r = run_attn(AG_F32, 8, 4, 16, 16, 16, kpm, false, 0.1);
    *out = values(r.o);
    for (int i = 0; i < 3; i++) grads[i] = values(r.g[i]);
}

static void test_attention_short_keys_results_do_not_depend_on_the_thread_count(void **s) {
    assert_thread_count_independent(run_small, 8 * 4 * 16 * 16);
}

/* Packed heads (ag__attention_heads, as ag_mha_forward uses them) write their new gradient
 * buffer without zeroing it first when the heads tile its columns; when they do not (here a
 * fourth block of columns no head reads), the buffer is zeroed whole. Both must give the same
 * gradient where heads read, and exact zeros elsewhere. The arena is filled with NaN first, so
 * an element nobody writes shows. Returns the gradient as (N·L, W) doubles (malloc'd). */
static double *run_packed(ag_dtype dt, int64_t W) {
    const int64_t N = 2, L = 20, H = 2, E = 16; /* f64: the GEMM path; f32: 12 and 20 keys fused */
    ag_arena *prev = ag_arena_current(), *ar = ag_arena_new(1 << 20);
    ag_arena_use(ar);
    ag_full(AG_F64, AG_SHAPE(1 << 16), NAN);
    ag_arena_reset(ar);
    ag_tensor *t = tu_seq(dt, AG_SHAPE(N, L, 3 * E), 0.37, 0.1);
    if (W > 3 * E) /* the same q, k, v columns, then columns no head reads */
        t = ag_cat(2, (ag_tensor *[]){t, tu_seq(dt, AG_SHAPE(N, L, W - 3 * E), 0.53, 0.7)}, -1);
    t = tu_leaf(t);
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(N, 1, 1, L));
    for (int64_t j = 12; j < L; j++) ((uint8_t *)kpm->data)[L + j] = 1; /* second sequence: 12 live keys */
    ag_tensor *o = ag__attention_heads(t, 0, t, E, t, 2 * E, E, H, kpm, false, 0, NULL, false, NULL);
    ag_backward(o, tu_seq(dt, o->ndim, o->shape, 0.61, 0.4));
    double *g = malloc(sizeof(double) * (size_t)(N * L * W));
    ag_to_buffer(t->grad, AG_F64, g);
    ag_arena_use(prev);
    ag_arena_free(ar);
    return g;
}

static void test_packed_heads_gradient_is_zero_in_columns_no_head_reads(void **s) {
    ag_dtype dts[2] = {AG_F32, AG_F64};
    for (int d = 0; d < 2; d++) {
        double *a = run_packed(dts[d], 48), *b = run_packed(dts[d], 64);
        for (int64_t r = 0; r < 2 * 20; r++) {
            for (int64_t c = 0; c < 48; c++)
                if (a[r * 48 + c] != b[r * 64 + c] || isnan(a[r * 48 + c]))
                    fail_msg("%s row %lld col %lld: %.9g (tiled) vs %.9g", ag_dtype_name(dts[d]), (long long)r,
                             (long long)c, a[r * 48 + c], b[r * 64 + c]);
            for (int64_t c = 48; c < 64; c++) assert_true(b[r * 64 + c] == 0);
        }
        free(a);
        free(b);
    }
}

#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_attention_dropout_drops_exactly_the_draws_below_p_at_any_thread_count),
        T(test_attention_results_do_not_depend_on_the_thread_count),
        T(test_attention_of_long_heads_matches_the_composed_ops),
        T(test_attention_f32_short_keys_match_the_f64_path_for_each_mask),
        T(test_attention_short_keys_results_do_not_depend_on_the_thread_count),
        T(test_packed_heads_gradient_is_zero_in_columns_no_head_reads)
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
