/* Dropout (in place, fused with relu) and the fused feed-forward block: masks reproducible from
 * the seed and independent of the thread count, exactly the draws below 1 - p kept and scaled,
 * backward through the forward's mask, the block equal bit for bit to its composed ops, its
 * hidden activation held packed, gradients against finite differences, and misuse reporting. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../nn/nn_internal.h"
#include "../tensor/internal.h"
#include "test_util.h"

/* ==== Dropout =============================================================================== */

static void test_dropout_same_seed_same_mask_and_rng_advances(void **s) {
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(1000));
    ag_rng r1 = ag_rng_new(42), r2 = ag_rng_new(42);
    ag_tensor *a = ag_dropout(x, 0.5, true, &r1), *b = ag_dropout(x, 0.5, true, &r2);
    assert_memory_equal(tu_raw(a), tu_raw(b), 1000 * sizeof(float));
    assert_int_equal(r1.counter, 500); /* a mask of 1000 elements: 500 draws, two words each */
    ag_tensor *c = ag_dropout(x, 0.5, true, &r1);
    assert_memory_not_equal(tu_raw(a), tu_raw(c), 1000 * sizeof(float));
}

static void test_dropout_is_identity_in_eval_and_for_p_zero(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(3), 1, 2, 3);
    ag_rng r = ag_rng_new(1);
    assert_ptr_equal(ag_dropout(x, 0.5, false, &r), x);
    assert_ptr_equal(ag_dropout(x, 0.0, true, &r), x);
    assert_int_equal(r.counter, 0);
}

static void test_dropout_zero_fraction_near_p_and_survivors_scaled(void **s) {
    int64_t n = 200000;
    ag_tensor *x = ag_full(AG_F32, AG_SHAPE(n), 2.0);
    ag_rng r = ag_rng_new(7);
    ag_tensor *y = ag_dropout(x, 0.3, true, &r);
    const float *v = (const float *)tu_raw(y);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        if (v[i] == 0) zeros++;
        else assert_true(fabs(v[i] - 2.0 / 0.7) < 1e-6);
    }
    assert_true(fabs((double)zeros / (double)n - 0.3) < 0.01); /* sd of the fraction is 0.001 */
}

static void test_dropout_mask_independent_of_thread_count(void **s) {
    int64_t n = 100000; /* above AG_PAR_THRESHOLD, so 2 threads split the work */
    ag_tensor *x = ag_ones(AG_F64, AG_SHAPE(n));
    omp_set_num_threads(1);
    ag_rng r1 = ag_rng_new(5);
    ag_tensor *a = ag_dropout(x, 0.25, true, &r1);
    omp_set_num_threads(2);
    ag_rng r2 = ag_rng_new(5);
    ag_tensor *b = ag_dropout(x, 0.25, true, &r2);
    assert_memory_equal(tu_raw(a), tu_raw(b), (size_t)n * sizeof(double));
}

/* The mask is the public generator's stream: element i is kept exactly when its word (word i % 2
 * of draw i / 2) is a uniform x · 2^-32 below 1 - p (drawn without doubles in chunks,
 * vectorised where the CPU can), at 1 and 2 threads, from a counter whose blocks carry across
 * 2^32 and that is odd (a mask starting at a block's second half), for a length that is no
 * multiple of 8, 16 or a chunk; the bit mask backward reads says the same. */
static void test_dropout_keeps_exactly_the_draws_below_one_minus_p(void **s) {
    int64_t n = 70001;
    uint64_t c0 = ((uint64_t)1 << 33) - 5001;
    ag_tensor *x = ag_ones(AG_F64, AG_SHAPE(n));
    double *u = ag_arena_alloc(ag_arena_current(), (size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) u[i] = ag__rng_mask_word(9, c0, (uint64_t)i) * 0x1.0p-32;
    int prev = omp_get_max_threads();
    for (int k = 0; k < 4; k++) {
        double p = (double[]){0.1, 0.5, 0.3, 0x1.0p-50}[k];
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            ag_rng r = {.seed = 9, .counter = c0};
            ag_tensor *xl = tu_leaf(ag_detach(x)), *y = ag_dropout(xl, p, true, &r);
            ag_backward(y, ag_ones(AG_F64, AG_SHAPE(n)));
            const double *v = tu_raw(y), *g = tu_raw(xl->grad);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) bad += (v[i] != 0) != (u[i] < 1 - p) || g[i] != v[i];
            assert_int_equal(bad, 0);
            assert_true(r.counter == c0 + (uint64_t)(n + 1) / 2);
        }
    }
    omp_set_num_threads(prev);
}

static void test_dropout_backward_uses_the_forward_mask_and_p_one_gives_zeros(void **s) {
    ag_tensor *x = tu_leaf(ag_ones(AG_F64, AG_SHAPE(64)));
    ag_rng r = ag_rng_new(3);
    ag_tensor *y = ag_dropout(x, 0.5, true, &r);
    ag_backward(y, ag_ones(AG_F64, AG_SHAPE(64)));
    assert_memory_equal(tu_raw(x->grad), tu_raw(y), 64 * sizeof(double)); /* x = 1, g = 1: grad = mask = y */
    ag_tensor *x2 = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, -2, 3));
    ag_tensor *z = ag_dropout(x2, 1.0, true, &r);
    tu_assert_values(z, 0, 0, 0, 0);
    ag_backward(z, ag_ones(AG_F64, AG_SHAPE(3)));
    tu_assert_values(x2->grad, 0, 0, 0, 0);
}

/* x used by a dropout (with and without relu) and by 2·x, summed either way round: x's
 * gradient is the dropout's, (kept)/(1 - p), plus 2, whichever backward writes it first */
static void test_dropout_gradient_adds_to_another_use_of_its_input(void **s) {
    for (int k = 0; k < 4; k++) {
        bool relu = k & 1, dropout_first = k & 2;
        ag_rng r = ag_rng_new(5);
        ag_tensor *x = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(64)));
        ag_tensor *y = relu ? ag_relu_dropout_(x, 0.3, true, &r) : ag_dropout(x, 0.3, true, &r);
        ag_tensor *twice = ag_mul_scalar(x, 2.0);
        ag_tensor *z = dropout_first ? ag_add(y, twice) : ag_add(twice, y);
        ag_backward(z, ag_ones(AG_F64, AG_SHAPE(64)));
        const double *yv = tu_raw(y), *g = tu_raw(x->grad);
        int kept = 0;
        for (int i = 0; i < 64; i++) {
            kept += yv[i] != 0;
            assert_true(fabs(g[i] - ((yv[i] != 0 ? 1 / 0.7 : 0) + 2)) <= 1e-15);
        }
        assert_true(kept > 10 && kept < 64);
    }
}

static ag_tensor *f_dropout(int n, ag_tensor **in, void *ctx) {
    ag_rng r = ag_rng_new(77); /* fresh each call: the same mask for every evaluation */
    return ag_dropout(in[0], 0.4, true, &r);
}

static void test_dropout_gradcheck_with_fixed_mask(void **s) {
    ag_rng r = ag_rng_new(8);
    ag_tensor *x = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(4, 5)));
    tu_assert_gradcheck(f_dropout, NULL, 1, &x);
}

static void test_dropout_reports_p_outside_unit_interval(void **s) {
    assert_null(ag_dropout(ag_ones(AG_F32, AG_SHAPE(2, 2)), 1.5, true, NULL));
    tu_assert_error("ag_dropout", "(2,2)", "1.5");
}

/* ---- in place, and relu + dropout ---- */

/* the same values and input gradient from two ways of computing y = f(x), gradient g */
static void assert_same_values_and_grads(ag_tensor *x1, ag_tensor *y1, ag_tensor *x2, ag_tensor *y2, ag_tensor *g) {
    size_t bytes = (size_t)ag_numel(y1) * ag_dtype_size(y1->dtype);
    assert_memory_equal(tu_raw(ag_contiguous(y1)), tu_raw(ag_contiguous(y2)), bytes);
    ag_backward(y1, g);
    ag_backward(y2, g);
    assert_memory_equal(tu_raw(x1->grad), tu_raw(x2->grad), (size_t)ag_numel(x1) * ag_dtype_size(x1->dtype));
}

static void test_dropout_in_place_matches_dropout_and_shares_storage(void **s) {
    ag_rng r = ag_rng_new(4), r1 = ag_rng_new(9), r2 = ag_rng_new(9);
    ag_tensor *x1 = tu_leaf(ag_randn(&r, AG_F32, AG_SHAPE(5000))), *x2 = tu_leaf(ag_detach(ag_clone(x1)));
    ag_tensor *h1 = ag_mul_scalar(x1, 1.0), *h2 = ag_mul_scalar(x2, 1.0); /* non-leaf inputs */
    ag_tensor *y1 = ag_dropout(h1, 0.3, true, &r1), *y2 = ag_dropout_(h2, 0.3, true, &r2);
    assert_ptr_equal(y2->data, h2->data);
    assert_int_equal(r1.counter, r2.counter);
    assert_same_values_and_grads(x1, y1, x2, y2, ag_randn(&r, AG_F32, AG_SHAPE(5000)));
}

static void test_dropout_in_place_on_a_leaf_or_strided_input_works_out_of_place(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 2, 3, 4)), *xt = ag_transpose(ag_mul_scalar(x, 1), 0, 1);
    ag_rng r = ag_rng_new(1);
    ag_tensor *y = ag_dropout_(x, 0.5, true, &r), *yt = ag_dropout_(xt, 0.5, true, &r);
    assert_ptr_not_equal(y->data, x->data);
    assert_ptr_not_equal(yt->data, xt->data);
    tu_assert_values(x, 0, 1, 2, 3, 4); /* untouched */
    assert_int_equal(tu_error_count(), 0);
}

static void test_relu_dropout_matches_dropout_of_relu_with_same_draws(void **s) {
    ag_rng r = ag_rng_new(5);
    for (int k = 0; k < 4; k++) {
        double p = (double[]){0.0, 0.25, 0.5, 1.0}[k];
        ag_tensor *x1 = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 1500))), *x2 = tu_leaf(ag_detach(ag_clone(x1)));
        ag_rng r1 = ag_rng_new(10 + k), r2 = ag_rng_new(10 + k);
        ag_tensor *y1 = ag_dropout(ag_relu(ag_mul_scalar(x1, 1.0)), p, true, &r1);
        ag_tensor *h2 = ag_mul_scalar(x2, 1.0), *y2 = ag_relu_dropout_(h2, p, true, &r2);
        assert_ptr_equal(y2->data, h2->data);
        assert_int_equal(r1.counter, r2.counter);
        assert_same_values_and_grads(x1, y1, x2, y2, ag_randn(&r, AG_F64, AG_SHAPE(3, 1500)));
    }
    /* eval: relu alone, in place, nothing drawn */
    ag_rng r3 = ag_rng_new(2);
    ag_tensor *e = ag_relu_dropout_(ag_mul_scalar(tu_tensor(AG_F32, AG_SHAPE(4), -1, 2, 0, 3), 1.0), 0.5, false, &r3);
    tu_assert_values(e, 0, 0, 2, 0, 3);
    assert_int_equal(r3.counter, 0);
}

static ag_tensor *f_relu_dropout(int n, ag_tensor **in, void *ctx) {
    ag_rng r = ag_rng_new(31);
    return ag_relu_dropout_(ag_mul_scalar(in[0], 1.0), 0.4, true, &r);
}

static void test_relu_dropout_gradcheck_with_fixed_mask(void **s) {
    /* values kept away from relu's kink, where finite differences straddle it */
    ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 6), 0.9, 0.2));
    tu_assert_gradcheck(f_relu_dropout, NULL, 1, &x);
}

/* ---- the feed-forward block ---- */

typedef struct {
    double p;
    bool fused;
} ff_case;

static ag_tensor *f_feed_forward(int n, ag_tensor **in, void *ctx) {
    const ff_case *c = ctx;
    ag_rng r = ag_rng_new(12);
    if (c->fused) return ag_feed_forward(in[0], in[1], in[2], in[3], in[4], c->p, true, &r);
    return ag_linear(ag_relu_dropout_(ag_linear(in[0], in[1], in[2]), c->p, true, &r), in[3], in[4]);
}

static void ff_inputs(ag_dtype dt, int64_t m, int64_t d, int64_t ff, ag_tensor **in, uint64_t seed) {
    ag_rng r = ag_rng_new(seed);
    in[0] = tu_leaf(ag_randn(&r, dt, AG_SHAPE(m / 2, 2, d)));
    in[1] = tu_leaf(ag_mul_scalar(ag_randn(&r, dt, AG_SHAPE(ff, d)), 0.5));
    in[2] = tu_leaf(ag_randn(&r, dt, AG_SHAPE(ff)));
    in[3] = tu_leaf(ag_mul_scalar(ag_randn(&r, dt, AG_SHAPE(d + 1, ff)), 0.5));
    in[4] = tu_leaf(ag_randn(&r, dt, AG_SHAPE(d + 1)));
    for (int i = 1; i < 5; i++) in[i] = tu_leaf(ag_detach(in[i]));
}

/* The same inputs (seed) into the composed ops (a, outputs y[0]) and ag_feed_forward (b, y[1]),
 * both backpropagated from one random output gradient. */
static void ff_both_ways(ag_dtype dt, int64_t m, int64_t d, int64_t ff, double p, uint64_t seed, ag_tensor **a,
                         ag_tensor **b, ag_tensor **y) {
    ff_case cc = {p, false}, fc = {p, true};
    ff_inputs(dt, m, d, ff, a, seed);
    ff_inputs(dt, m, d, ff, b, seed);
    y[0] = f_feed_forward(5, a, &cc);
    y[1] = f_feed_forward(5, b, &fc);
    ag_rng r = ag_rng_new(4);
    ag_tensor *g = ag_randn(&r, dt, y[0]->ndim, y[0]->shape);
    ag_backward(y[0], g);
    ag_backward(y[1], g);
}

static void test_feed_forward_equals_linear_relu_dropout_linear_bit_for_bit(void **s) {
    /* one block of rows in backward: the same kernels in the same order as the composed ops */
    for (int k = 0; k < 3; k++) {
        ag_tensor *a[5], *b[5], *y[2];
        ff_both_ways(AG_F32, 10, 6, 12, (double[]){0.0, 0.3, 1.0}[k], 3, a, b, y);
        assert_memory_equal(tu_raw(y[0]), tu_raw(y[1]), (size_t)ag_numel(y[0]) * sizeof(float));
        for (int i = 0; i < 5; i++)
            assert_memory_equal(tu_raw(a[i]->grad), tu_raw(b[i]->grad), (size_t)ag_numel(a[i]) * sizeof(float));
    }
}

static void test_feed_forward_in_several_row_blocks_matches_composed_ops(void **s) {
    /* 600 rows x 512 hidden: backward recomputes 512 rows, then 88, summing weight gradients
     * block by block (a different order from one GEMM: equal to rounding) */
    ag_tensor *a[5], *b[5], *y[2];
    ff_both_ways(AG_F64, 600, 16, 512, 0.2, 6, a, b, y);
    for (int i = 0; i < 5; i++) {
        int64_t n = ag_numel(a[i]);
        const double *u = tu_raw(a[i]->grad), *v = tu_raw(b[i]->grad);
        for (int64_t j = 0; j < n; j++) assert_true(fabs(u[j] - v[j]) <= 1e-12 * (1 + fabs(u[j])));
    }
}

static void test_feed_forward_with_row_blocks_that_split_a_mask_byte_matches_composed_ops(void **s) {
    /* ff 3: blocks of 43690 rows, so the second block's mask starts at bit 131070 (6 of a
     * byte): its draws are packed into a shared byte, and backward reads them from there */
    ag_tensor *a[5], *b[5], *y[2];
    ff_both_ways(AG_F64, 44000, 1, 3, 0.3, 8, a, b, y);
    const double *y0 = tu_raw(y[0]), *y1 = tu_raw(y[1]);
    for (int64_t j = 0; j < ag_numel(y[0]); j++) assert_true(fabs(y0[j] - y1[j]) <= 1e-12 * (1 + fabs(y0[j])));
    for (int i = 0; i < 5; i++) {
        int64_t n = ag_numel(a[i]);
        const double *u = tu_raw(a[i]->grad), *v = tu_raw(b[i]->grad);
        for (int64_t j = 0; j < n; j++) assert_true(fabs(u[j] - v[j]) <= 1e-9 * (1 + fabs(u[j])));
    }
}

static void test_feed_forward_gradcheck(void **s) {
    ff_case fc = {0.25, true};
    ag_tensor *in[5];
    ff_inputs(AG_F64, 6, 3, 5, in, 21);
    tu_assert_gradcheck(f_feed_forward, &fc, 5, in);
}

static void test_feed_forward_holds_its_hidden_activation_packed(void **s) {
    ag_tensor *in[5];
    ff_inputs(AG_F32, 64, 8, 256, in, 2);
    /* the hidden activation through the composed ops, same draws: its nonzero elements */
    ag_rng r = ag_rng_new(1);
    ag_tensor *h = ag_relu_dropout_(ag_linear(in[0], in[1], in[2]), 0.1, true, &r);
    int64_t nz = 0;
    for (int64_t i = 0; i < ag_numel(h); i++) nz += ((const float *)tu_raw(h))[i] != 0;
    assert_true(nz > 0 && nz < ag_numel(h));
    ag_arena *a = ag_arena_current();
    size_t before = ag_arena_used(a), packed = (size_t)nz * sizeof(float) + 64 * 256 / 8;
    r = ag_rng_new(1);
    ag_tensor *y = ag_feed_forward(in[0], in[1], in[2], in[3], in[4], 0.1, true, &r);
    assert_non_null(y);
    /* those values and one bit per element, besides the output (64x9 floats), headers and the
     * node: not the 64x256 floats of the dense activation */
    size_t used = ag_arena_used(a) - before;
    assert_true(used >= packed && used < packed + 8192);
}

static void test_feed_forward_reports_shapes(void **s) {
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(2, 3)), *w1 = ag_ones(AG_F32, AG_SHAPE(4, 3)), *w2 = ag_ones(AG_F32, AG_SHAPE(3, 5));
    assert_null(ag_feed_forward(x, w1, NULL, w2, NULL, 0.1, true, NULL));
    tu_assert_error("ag_feed_forward", "(2,3)", "(4,3)", "(3,5)");
}

/* ==== positional encodings ================================================================== */

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
        T(test_dropout_same_seed_same_mask_and_rng_advances),
        T(test_dropout_is_identity_in_eval_and_for_p_zero),
        T(test_dropout_zero_fraction_near_p_and_survivors_scaled),
        T(test_dropout_mask_independent_of_thread_count),
        T(test_dropout_keeps_exactly_the_draws_below_one_minus_p),
        T(test_dropout_backward_uses_the_forward_mask_and_p_one_gives_zeros),
        T(test_dropout_gradcheck_with_fixed_mask),
        T(test_dropout_gradient_adds_to_another_use_of_its_input),
        T(test_dropout_reports_p_outside_unit_interval),
        T(test_dropout_in_place_matches_dropout_and_shares_storage),
        T(test_dropout_in_place_on_a_leaf_or_strided_input_works_out_of_place),
        T(test_relu_dropout_matches_dropout_of_relu_with_same_draws),
        T(test_relu_dropout_gradcheck_with_fixed_mask),
        T(test_feed_forward_equals_linear_relu_dropout_linear_bit_for_bit),
        T(test_feed_forward_in_several_row_blocks_matches_composed_ops),
        T(test_feed_forward_with_row_blocks_that_split_a_mask_byte_matches_composed_ops),
        T(test_feed_forward_gradcheck),
        T(test_feed_forward_holds_its_hidden_activation_packed),
        T(test_feed_forward_reports_shapes),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
