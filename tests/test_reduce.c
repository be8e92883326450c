/* Reductions, softmax / log_softmax and sum_to_shape: hand-worked and PyTorch 1.13 values,
 * non-contiguous inputs, error messages, thread-count independence and gradchecks. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "test_util.h"

#define NAN_ (0.0 / 0.0)

/* [[1,2,3],[4,5,6]] */
static ag_tensor *m23(ag_dtype dt) { return tu_tensor(dt, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6); }

/* ---- sum ---- */

static void test_sum_of_all_dims_is_a_0d_total_for_f32_and_f64(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *y = ag_sum(m23(dt), 0, NULL, false);
        assert_int_equal(y->ndim, 0);
        assert_int_equal(y->dtype, dt);
        tu_assert_values(y, 0, 21);
        y = ag_sum(m23(dt), 0, NULL, true);
        tu_assert_shape(y, 1, 1);
        tu_assert_values(y, 0, 21);
    }
}

static void test_sum_over_one_dim_with_and_without_keepdim(void **s) {
    ag_tensor *x = m23(AG_F32);
    ag_tensor *y = ag_sum(x, 1, (int[]){0}, false);
    tu_assert_shape(y, 3);
    tu_assert_values(y, 0, 5, 7, 9);
    y = ag_sum(x, 1, (int[]){0}, true);
    tu_assert_shape(y, 1, 3);
    tu_assert_values(y, 0, 5, 7, 9);
    y = ag_sum(x, 1, (int[]){-1}, false);
    tu_assert_shape(y, 2);
    tu_assert_values(y, 0, 6, 15);
    y = ag_sum(x, 1, (int[]){-1}, true);
    tu_assert_shape(y, 2, 1);
    tu_assert_values(y, 0, 6, 15);
}

/* x[a][b][c] = 12a + 4b + c; over a and c: Σ = 4·12 + 8·4b + 2·6 = 60 + 32b */
static void test_sum_over_several_dims_including_negative_ones(void **s) {
    ag_tensor *x = ag_reshape(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 3, 4));
    ag_tensor *y = ag_sum(x, 2, (int[]){-1, 0}, false);
    tu_assert_shape(y, 3);
    tu_assert_values(y, 0, 60, 92, 124);
    y = ag_sum(x, 2, (int[]){0, 2}, true);
    tu_assert_shape(y, 1, 3, 1);
    tu_assert_values(y, 0, 60, 92, 124);
    /* over b and c: Σ_b Σ_c = 12·12a + 4·4·3 + 3·6 = 144a + 66 */
    y = ag_sum(x, 2, (int[]){1, 2}, false);
    tu_assert_values(y, 0, 66, 210);
}

static void test_sum_of_transposed_sliced_and_expanded_inputs(void **s) {
    ag_tensor *x = m23(AG_F32);
    ag_tensor *t = ag_transpose(x, 0, 1); /* (3,2): [[1,4],[2,5],[3,6]] */
    tu_assert_values(ag_sum(t, 1, (int[]){0}, false), 0, 6, 15);
    tu_assert_values(ag_sum(t, 1, (int[]){1}, false), 0, 5, 7, 9);
    ag_tensor *sl = ag_slice(x, 1, 0, 3, 2); /* [[1,3],[4,6]] */
    tu_assert_values(ag_sum(sl, 1, (int[]){1}, false), 0, 4, 10);
    tu_assert_values(ag_sum(sl, 1, (int[]){0}, false), 0, 5, 9);
    ag_tensor *row = tu_tensor(AG_F32, AG_SHAPE(1, 3), 1, 2, 3);
    ag_tensor *e = ag_expand(row, AG_SHAPE(4, 3)); /* stride 0 along dim 0 */
    tu_assert_values(ag_sum(e, 1, (int[]){0}, false), 0, 4, 8, 12);
    tu_assert_values(ag_sum(e, 0, NULL, false), 0, 24);
    /* (2,3,4) permuted to (4,2,3): reducing dims 0 and 2 walks the input in no simple order */
    ag_tensor *z = ag_permute(ag_reshape(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 3, 4)), (int[]){2, 0, 1});
    /* Σ over c and b of 12a + 4b + c = 12·12a + 3·6 + 4·12 = 144a + 66 */
    tu_assert_values(ag_sum(z, 2, (int[]){0, 2}, false), 0, 66, 210);
}

static void test_sum_of_ints_and_bools_gives_i64(void **s) {
    ag_tensor *b = tu_tensor(AG_BOOL, AG_SHAPE(2, 3), 1, 0, 1, 1, 1, 1);
    ag_tensor *y = ag_sum(b, 1, (int[]){1}, false);
    assert_int_equal(y->dtype, AG_I64);
    tu_assert_values(y, 0, 2, 3);
    ag_tensor *i = tu_tensor(AG_I32, AG_SHAPE(2, 2), 2000000000, 2000000000, -1, 5);
    y = ag_sum(i, 1, (int[]){0}, false);
    assert_int_equal(y->dtype, AG_I64);
    int64_t v[2];
    ag_to_buffer(y, AG_I64, v);
    assert_int_equal(v[0], 1999999999);
    assert_int_equal(v[1], 2000000005);
    y = ag_sum(i, 0, NULL, false); /* no i32 overflow */
    ag_to_buffer(y, AG_I64, v);
    assert_int_equal(v[0], 4000000004LL);
}

static void test_sum_over_an_empty_dim_is_zero_and_mean_is_nan(void **s) {
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 0));
    ag_tensor *y = ag_sum(x, 1, (int[]){1}, false);
    tu_assert_shape(y, 2);
    tu_assert_values(y, 0, 0, 0);
    y = ag_mean(x, 1, (int[]){1}, false);
    tu_assert_values(y, 0, NAN_, NAN_);
    y = ag_sum(x, 1, (int[]){0}, false); /* no outputs */
    tu_assert_shape(y, 0);
}

static void test_sum_of_a_0d_tensor_accepts_dim_0_and_minus_1(void **s) {
    ag_tensor *x = ag_scalar(AG_F64, 2.5);
    tu_assert_values(ag_sum(x, 1, (int[]){0}, false), 0, 2.5);
    tu_assert_values(ag_sum(x, 1, (int[]){-1}, true), 0, 2.5);
    assert_null(ag_sum(x, 1, (int[]){1}, false));
    tu_assert_error("ag_sum", "dim 1", "()");
}

/* Σ of 2^20 copies of 0.1f: a sequential f32 sum drifts by about 1% (it is stuck adding 0.1
 * to 1e5 with 1/128 resolution); the pairwise sum stays within a few ulps. */
static void test_f32_sums_are_pairwise_accurate_in_both_layouts(void **s) {
    int64_t n = 1 << 20;
    ag_tensor *x = ag_full(AG_F32, AG_SHAPE(n), 0.1);
    double exact = (double)n * (double)0.1f;
    double got = ag_item(ag_sum(x, 0, NULL, false));
    assert_true(fabs(got - exact) < 1e-5 * exact);
    /* the vertical kernel: columns of a (2^18, 4) matrix */
    ag_tensor *m = ag_view(x, AG_SHAPE(n / 4, 4));
    ag_tensor *cols = ag_sum(m, 1, (int[]){0}, false);
    double q = (double)(n / 4) * (double)0.1f;
    tu_assert_values(cols, 1e-5 * q, q, q, q, q);
    tu_assert_values(ag_mean(m, 1, (int[]){0}, false), 1e-6, 0.1f, 0.1f, 0.1f, 0.1f);
}

/* x[i][j] = 1000 i + j, (5, 200): the columns span several 64-wide tiles of the kernel that
 * sums rows; column sums 5j + 10000, variances (correction 0) 1000² · 2 */
static void test_sum_and_var_over_the_rows_of_a_wide_matrix(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = ag_add(ag_reshape(ag_arange(dt, 0, 200, 1), AG_SHAPE(1, 200)),
                              ag_reshape(ag_arange(dt, 0, 5000, 1000), AG_SHAPE(5, 1)));
        double sum[200], var[200], mean[200];
        ag_to_buffer(ag_sum(x, 1, (int[]){0}, false), AG_F64, sum);
        ag_to_buffer(ag_var(x, 1, (int[]){0}, 0, true), AG_F64, var);
        ag_to_buffer(ag_mean(ag_slice(x, 0, 1, 5, 2), 1, (int[]){0}, false), AG_F64, mean); /* rows 1, 3 */
        for (int j = 0; j < 200; j++) {
            assert_true(sum[j] == 5 * j + 10000);
            assert_true(fabs(var[j] - 2e6) < 1e-6 * 2e6);
            assert_true(mean[j] == j + 2000);
        }
    }
}

/* ---- mean, var ---- */

static void test_mean_over_dims_with_keepdim(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = m23(dt);
        tu_assert_values(ag_mean(x, 0, NULL, false), 1e-7, 3.5);
        ag_tensor *y = ag_mean(x, 1, (int[]){1}, true);
        tu_assert_shape(y, 2, 1);
        tu_assert_values(y, 1e-7, 2, 5);
        y = ag_mean(ag_transpose(x, 0, 1), 1, (int[]){-1}, false);
        tu_assert_shape(y, 3);
        tu_assert_values(y, 1e-7, 2.5, 3.5, 4.5);
    }
}

/* rows [1,2,3,4] (mean 2.5, Σd² = 5) and [2,4,6,8] (mean 5, Σd² = 20); PyTorch agrees */
static void test_var_with_correction_0_and_1(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(2, 4), 1, 2, 3, 4, 2, 4, 6, 8);
        tu_assert_values(ag_var(x, 1, (int[]){1}, 1, false), 1e-6, 5.0 / 3, 20.0 / 3);
        ag_tensor *y = ag_var(x, 1, (int[]){-1}, 0, true);
        tu_assert_shape(y, 2, 1);
        tu_assert_values(y, 1e-6, 1.25, 5);
        /* columns: pairs (1,2) (2,4) (3,6) (4,8): d = ±k/2 */
        tu_assert_values(ag_var(x, 1, (int[]){0}, 0, false), 1e-6, 0.25, 1, 2.25, 4);
        /* all 8: torch.var(x) = 5.357142925 */
        tu_assert_values(ag_var(x, 0, NULL, 1, false), 1e-6, 37.5 / 7);
        /* transposed: the same column variances */
        tu_assert_values(ag_var(ag_transpose(x, 0, 1), 1, (int[]){1}, 0, false), 1e-6, 0.25, 1, 2.25, 4);
    }
}

static void test_var_of_one_element_with_correction_1_is_nan(void **s) {
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(1), 1);
    tu_assert_values(ag_var(x, 0, NULL, 1, false), 0, NAN_);
    tu_assert_values(ag_var(x, 0, NULL, 0, false), 0, 0);
}

/* two-pass variance does not cancel: values 1e4 + {0,1,2} in f32 */
static void test_var_of_large_offset_values_keeps_precision(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(3), 10000, 10001, 10002);
    tu_assert_values(ag_var(x, 0, NULL, 1, false), 1e-6, 1);
}

/* ---- max, argmax ---- */

static void test_max_and_argmax_take_the_first_of_tied_maxima(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 3), 3, 1, 3, 0, 5, 5);
    ag_tensor *v = ag_max(x, 1, false);
    tu_assert_shape(v, 2);
    tu_assert_values(v, 0, 3, 5);
    ag_tensor *i = ag_argmax(x, -1, false);
    assert_int_equal(i->dtype, AG_I64);
    tu_assert_values(i, 0, 0, 1);
    i = ag_argmax(x, 0, true);
    tu_assert_shape(i, 1, 3);
    tu_assert_values(i, 0, 0, 1, 1);
    tu_assert_values(ag_max(x, 0, true), 0, 3, 5, 5);
}

static void test_max_gradient_goes_to_the_first_maximum_only(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 3, 1, 3, 0, 5, 5));
    ag_tensor *w = tu_tensor(AG_F64, AG_SHAPE(2), 10, 100);
    ag_backward(ag_sum(ag_mul(ag_max(x, 1, false), w), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 0, 10, 0, 0, 0, 100, 0);
}

static void test_max_and_argmax_of_non_contiguous_and_int_inputs(void **s) {
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2, 3), 3, 1, 3, 0, 5, 5);
    ag_tensor *t = ag_transpose(x, 0, 1); /* [[3,0],[1,5],[3,5]] */
    tu_assert_values(ag_max(t, 0, false), 0, 3, 5);
    tu_assert_values(ag_argmax(t, 0, false), 0, 0, 1);
    tu_assert_values(ag_argmax(t, 1, false), 0, 0, 1, 1);
    ag_tensor *n = tu_tensor(AG_I32, AG_SHAPE(2, 3), 2, 7, 7, 9, 1, 9);
    tu_assert_values(ag_argmax(n, 1, false), 0, 1, 0); /* torch.argmax: [1, 0] */
    ag_tensor *m = ag_max(n, 1, false);
    assert_int_equal(m->dtype, AG_I32);
    tu_assert_values(m, 0, 7, 9);
}

/* PyTorch: torch.max([1, nan, 3, nan], 0) = (nan, 1) */
static void test_max_treats_nan_as_the_maximum(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(4), 1, NAN_, 3, NAN_);
    tu_assert_values(ag_max(x, 0, false), 0, NAN_);
    tu_assert_values(ag_argmax(x, 0, false), 0, 1);
    /* long rows (the 8-lane path): NaN late in the row; a tie late in the row */
    ag_tensor *l = tu_tensor(AG_F64, AG_SHAPE(2, 10), 1, 2, 3, 4, 5, 6, 7, 8, NAN_, 9, /**/
                             0, 1, 2, 3, 4, 5, 6, 9, 8, 9);
    tu_assert_values(ag_argmax(l, 1, false), 0, 8, 7);
    tu_assert_values(ag_max(l, 1, false), 0, NAN_, 9);
}

/* ---- softmax, log_softmax ---- */

static void test_softmax_matches_pytorch_and_rows_sum_to_one(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *y = ag_softmax(tu_tensor(dt, AG_SHAPE(3), 1, 2, 3), 0);
        tu_assert_values(y, 1e-7, 0.090030573, 0.244728476, 0.665240943);
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(2, 3), 0.5, -1, 2, 3, 0, -2);
        /* torch.softmax(x, 0) */
        y = ag_softmax(x, 0);
        tu_assert_values(y, 1e-7, 0.075858180, 0.268941421, 0.982013790, 0.924141820, 0.731058579, 0.017986210);
        y = ag_softmax(x, -1);
        tu_assert_values(ag_sum(y, 1, (int[]){1}, false), 1e-6, 1, 1);
    }
}

static void test_log_softmax_matches_pytorch_and_stays_finite_for_large_inputs(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *y = ag_log_softmax(tu_tensor(dt, AG_SHAPE(2), 1000, 1001), 0);
        tu_assert_values(y, 1e-6, -1.313261688, -0.313261688);
        y = ag_softmax(tu_tensor(dt, AG_SHAPE(2), 1000, 1001), 0);
        tu_assert_values(y, 1e-7, 0.268941421, 0.731058579);
        /* torch.log_softmax(x, 1) */
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(2, 3), 0.5, -1, 2, 3, 0, -2);
        tu_assert_values(ag_log_softmax(x, 1), 1e-6, -1.741311297, -3.241311297, -0.241311297, -0.054985235,
                         -3.054985235, -5.054985235);
    }
}

static void test_softmax_of_transposed_and_expanded_inputs(void **s) {
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2, 3), 0.5, -1, 2, 3, 0, -2);
    ag_tensor *y = ag_softmax(ag_transpose(x, 0, 1), 1); /* = softmax(x, 0) transposed */
    tu_assert_shape(y, 3, 2);
    tu_assert_values(y, 1e-9, 0.075858180, 0.924141820, 0.268941421, 0.731058579, 0.982013790, 0.017986210);
    ag_tensor *e = ag_expand(tu_tensor(AG_F64, AG_SHAPE(3, 1), 1, 2, 3), AG_SHAPE(3, 4));
    tu_assert_values(ag_softmax(e, 1), 1e-12, .25, .25, .25, .25, .25, .25, .25, .25, .25, .25, .25, .25);
    tu_assert_values(ag_softmax(e, 0), 1e-7, 0.090030573, 0.090030573, 0.090030573, 0.090030573, 0.244728476,
                     0.244728476, 0.244728476, 0.244728476, 0.665240943, 0.665240943, 0.665240943, 0.665240943);
}

/* PyTorch gives NaN for a row that is all -inf (a fully masked row must be handled above) */
static void test_softmax_of_an_all_minus_inf_row_is_nan(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2), -INFINITY, -INFINITY);
    tu_assert_values(ag_softmax(x, 0), 0, NAN_, NAN_);
}

/* ---- sum_to_shape ---- */

static void test_sum_to_shape_sums_leading_and_size_one_dims(void **s) {
    ag_tensor *g = ag_reshape(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 3, 4)); /* 12a + 4b + c */
    ag_tensor *y = ag_sum_to_shape(g, AG_SHAPE(3, 1));                        /* Σ_a Σ_c = 60 + 32b */
    tu_assert_shape(y, 3, 1);
    tu_assert_values(y, 0, 60, 92, 124);
    y = ag_sum_to_shape(g, AG_SHAPE(4)); /* Σ_a Σ_b = 3·12 + 2·4·3 + 6c = 60 + 6c */
    tu_assert_values(y, 0, 60, 66, 72, 78);
    y = ag_sum_to_shape(g, AG_SHAPE(1, 1, 1));
    tu_assert_shape(y, 1, 1, 1);
    tu_assert_values(y, 0, 276);
    y = ag_sum_to_shape(g, 0, NULL);
    assert_int_equal(y->ndim, 0);
    tu_assert_values(y, 0, 276);
    y = ag_sum_to_shape(g, AG_SHAPE(2, 1, 4)); /* Σ_b = 36a + 12 + 3c */
    tu_assert_values(y, 0, 12, 15, 18, 21, 48, 51, 54, 57);
    assert_ptr_equal(ag_sum_to_shape(g, AG_SHAPE(2, 3, 4)), g);
}

static void test_sum_to_shape_of_a_transposed_gradient(void **s) {
    ag_tensor *g = ag_transpose(m23(AG_F32), 0, 1); /* (3,2): [[1,4],[2,5],[3,6]] */
    tu_assert_values(ag_sum_to_shape(g, AG_SHAPE(2)), 0, 6, 15);
    tu_assert_values(ag_sum_to_shape(g, AG_SHAPE(3, 1)), 0, 5, 7, 9);
}

static void test_sum_to_shape_records_nothing_with_grad_mode_off(void **s) {
    ag_tensor *g = tu_leaf(m23(AG_F64));
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_sum_to_shape(g, AG_SHAPE(3));
    ag_set_grad_enabled(prev);
    tu_assert_values(y, 0, 5, 7, 9);
    assert_null(y->node);
    assert_false(y->requires_grad);
    y = ag_sum_to_shape(g, AG_SHAPE(3));
    assert_non_null(y->node);
}

/* ---- errors ---- */

static void test_errors_name_the_op_and_the_shape(void **s) {
    ag_tensor *x = m23(AG_F32);
    assert_null(ag_sum(x, 1, (int[]){2}, false));
    tu_assert_error("ag_sum", "dim 2", "(2,3)");
    assert_null(ag_mean(x, 2, (int[]){1, -1}, false));
    tu_assert_error("ag_mean", "dim -1 appears more than once", "(2,3)");
    assert_null(ag_var(x, 1, (int[]){-3}, 1, false));
    tu_assert_error("ag_var", "dim -3", "(2,3)");
    assert_null(ag_var(x, 0, NULL, -1, false));
    tu_assert_error("ag_var", "correction -1", "(2,3)");
    assert_null(ag_mean(m23(AG_I32), 0, NULL, false));
    tu_assert_error("ag_mean", "(2,3)", "i32");
    assert_null(ag_softmax(m23(AG_I64), 0));
    tu_assert_error("ag_softmax", "(2,3)", "i64");
    assert_null(ag_log_softmax(x, 2));
    tu_assert_error("ag_log_softmax", "dim 2", "(2,3)");
    assert_null(ag_argmax(m23(AG_BOOL), 0, false));
    tu_assert_error("ag_argmax", "(2,3)", "bool");
    assert_null(ag_max(x, 5, false));
    tu_assert_error("ag_max", "dim 5", "(2,3)");
    assert_null(ag_sum(NULL, 0, NULL, false));
    tu_assert_error("ag_sum", "NULL");
}

static void test_max_over_an_empty_dim_is_an_error(void **s) {
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 0));
    assert_null(ag_max(x, 1, false));
    tu_assert_error("ag_max", "dim 1", "(2,0)", "size 0");
    assert_null(ag_argmax(x, -1, false));
    tu_assert_error("ag_argmax", "dim -1", "(2,0)", "size 0");
    tu_assert_shape(ag_max(x, 0, false), 0); /* over a non-empty dim: an empty result */
}

static void test_sum_to_shape_rejects_shapes_that_do_not_broadcast(void **s) {
    ag_tensor *g = m23(AG_F32);
    assert_null(ag_sum_to_shape(g, AG_SHAPE(4)));
    tu_assert_error("ag_sum_to_shape", "(2,3)", "(4)");
    assert_null(ag_sum_to_shape(g, AG_SHAPE(2, 1, 3)));
    tu_assert_error("ag_sum_to_shape", "(2,3)", "(2,1,3)");
    assert_null(ag_sum_to_shape(g, AG_SHAPE(1, 2, 3))); /* more dims than g */
    tu_assert_error("ag_sum_to_shape", "(2,3)", "(1,2,3)");
}

/* ---- thread-count independence ---- */

typedef ag_tensor *(*unary_fn)(ag_tensor *x);
static ag_tensor *r_sum_last(ag_tensor *x) { return ag_sum(x, 1, (int[]){-1}, false); }
static ag_tensor *r_sum_first(ag_tensor *x) { return ag_sum(x, 1, (int[]){0}, false); }
static ag_tensor *r_sum_transposed(ag_tensor *x) { return ag_sum(ag_transpose(x, 0, 1), 1, (int[]){0}, false); }
static ag_tensor *r_var_last(ag_tensor *x) { return ag_var(x, 1, (int[]){1}, 1, false); }
static ag_tensor *r_var_first(ag_tensor *x) { return ag_var(x, 1, (int[]){0}, 0, false); }
static ag_tensor *r_max_last(ag_tensor *x) { return ag_max(x, 1, false); }
static ag_tensor *r_argmax_first(ag_tensor *x) { return ag_argmax(x, 0, false); }
static ag_tensor *r_softmax_last(ag_tensor *x) { return ag_softmax(x, -1); }
static ag_tensor *r_softmax_first(ag_tensor *x) { return ag_log_softmax(x, 0); }
/* the gradient of Σ w·softmax(x) */
static ag_tensor *r_softmax_grad(ag_tensor *x) {
    ag_tensor *c = tu_leaf(ag_clone(ag_detach(x)));
    ag_rng r = ag_rng_new(11);
    ag_tensor *w = ag_randn(&r, c->dtype, c->ndim, c->shape);
    ag_backward(ag_sum(ag_mul(ag_softmax(c, -1), w), 0, NULL, false), NULL);
    return c->grad;
}

static void test_results_are_bitwise_identical_with_1_and_2_threads(void **s) {
    ag_rng r = ag_rng_new(7);
    int64_t shape[2] = {96, 1000}; /* 96000 > AG_PAR_THRESHOLD */
    unary_fn fns[] = {r_sum_last,   r_sum_first,    r_sum_transposed, r_var_last,     r_var_first,
                      r_max_last,   r_argmax_first, r_softmax_last,   r_softmax_first, r_softmax_grad};
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = ag_randn(&r, dt, 2, shape);
        for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
            omp_set_num_threads(1);
            ag_tensor *a = fns[k](x);
            omp_set_num_threads(2);
            ag_tensor *b = fns[k](x);
            assert_non_null(a);
            assert_int_equal(a->ndim, b->ndim);
            assert_memory_equal(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
            size_t bytes = (size_t)ag_numel(a) * ag_dtype_size(a->dtype);
            assert_memory_equal(a->data, b->data, bytes);
        }
    }
}

/* ---- against a naive loop on random strided views ---- */

/* row-major index of x's element k */
static void unravel(const ag_tensor *x, int64_t k, int64_t *idx) {
    for (int d = x->ndim - 1; d >= 0; d--) {
        idx[d] = k % x->shape[d];
        k /= x->shape[d];
    }
}

/* output element of x's element idx when the dims in mask are reduced */
static int64_t out_index(const ag_tensor *x, const int64_t *idx, unsigned mask) {
    int64_t o = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!(mask >> d & 1)) o = o * x->shape[d] + idx[d];
    return o;
}

/* a random (3-4)-d f64 view: permuted, maybe sliced with step 2, maybe a size-1 dim expanded */
static ag_tensor *random_view(ag_rng *r) {
    double u[8];
    ag_rng_uniform_f64(r, 8, u);
    int nd = 3 + (u[0] < 0.5);
    int64_t shape[4];
    for (int d = 0; d < nd; d++) shape[d] = 1 + (int64_t)(u[1 + d] * 6);
    ag_tensor *x = ag_randn(r, AG_F64, nd, shape);
    int perm[4] = {0, 1, 2, 3};
    for (int d = nd - 1; d > 0; d--) { /* Fisher-Yates */
        double v;
        ag_rng_uniform_f64(r, 1, &v);
        int j = (int)(v * (d + 1)), t = perm[d];
        perm[d] = perm[j];
        perm[j] = t;
    }
    x = ag_permute(x, perm);
    if (u[5] < 0.5) x = ag_slice(x, (int)(u[6] * nd), 0, 6, 2);
    for (int d = 0; d < nd && u[7] < 0.5; d++)
        if (x->shape[d] == 1) {
            int64_t e[4];
            memcpy(e, x->shape, sizeof e);
            e[d] = 3;
            x = ag_expand(x, nd, e);
            break;
        }
    return x;
}

static void test_reductions_match_a_naive_loop_on_random_strided_views(void **s) {
    ag_rng r = ag_rng_new(5);
    for (int trial = 0; trial < 200; trial++) {
        ag_tensor *x = random_view(&r);
        double u[2];
        ag_rng_uniform_f64(&r, 2, u);
        unsigned mask = 1 + (unsigned)(u[0] * ((1u << x->ndim) - 1)); /* a non-empty subset */
        int dims[4], nd = 0, one = (int)(u[1] * x->ndim);
        for (int d = 0; d < x->ndim; d++)
            if (mask >> d & 1) dims[nd++] = d - (trial % 2) * x->ndim; /* negative dims half the time */
        int64_t n = ag_numel(x), nout = 1, nmax = 1, idx[4];
        for (int d = 0; d < x->ndim; d++) {
            if (!(mask >> d & 1)) nout *= x->shape[d];
            if (d != one) nmax *= x->shape[d];
        }
        double sum[256] = {0}, sq[256] = {0}, mx[256], count = (double)(n / nout);
        int64_t arg[256];
        for (int64_t k = 0; k < n; k++) {
            unravel(x, k, idx);
            double v = ag_get(x, idx);
            sum[out_index(x, idx, mask)] += v;
            int64_t o = out_index(x, idx, 1u << one);
            if (idx[one] == 0 || v > mx[o]) {
                mx[o] = v;
                arg[o] = idx[one];
            }
        }
        for (int64_t k = 0; k < n; k++) {
            unravel(x, k, idx);
            int64_t o = out_index(x, idx, mask);
            double dv = ag_get(x, idx) - sum[o] / count;
            sq[o] += dv * dv;
        }
        bool keep = trial % 3 == 0;
        ag_tensor *ys = ag_sum(x, nd, dims, keep), *ym = ag_mean(x, nd, dims, keep),
                  *yv = ag_var(x, nd, dims, 0, keep), *yx = ag_max(x, one, keep), *ya = ag_argmax(x, one, keep);
        assert_int_equal(ag_numel(ys), nout);
        assert_int_equal(ag_numel(yx), nmax);
        double got[4][256];
        ag_to_buffer(ys, AG_F64, got[0]);
        ag_to_buffer(ym, AG_F64, got[1]);
        ag_to_buffer(yv, AG_F64, got[2]);
        for (int64_t o = 0; o < nout; o++) {
            if (fabs(got[0][o] - sum[o]) > 1e-12 * (1 + fabs(sum[o])) ||
                fabs(got[1][o] - sum[o] / count) > 1e-12 * (1 + fabs(sum[o])) ||
                fabs(got[2][o] - sq[o] / count) > 1e-12 * (1 + sq[o]))
                fail_msg("trial %d output %lld: sum %g/%g mean %g var %g/%g", trial, (long long)o, got[0][o], sum[o],
                         got[1][o], got[2][o], sq[o] / count);
        }
        ag_to_buffer(yx, AG_F64, got[3]);
        int64_t ga[256];
        ag_to_buffer(ya, AG_I64, ga);
        for (int64_t o = 0; o < nmax; o++)
            if (got[3][o] != mx[o] || ga[o] != arg[o])
                fail_msg("trial %d max output %lld: %g at %lld, expected %g at %lld", trial, (long long)o, got[3][o],
                         (long long)ga[o], mx[o], (long long)arg[o]);
    }
}

/* ---- gradchecks: every differentiable op, through non-contiguous views and keepdim ---- */

enum { OP_SUM, OP_MEAN, OP_VAR, OP_MAX, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_SUM_TO_SHAPE };
enum { V_NONE, V_TRANSPOSE, V_SLICE, V_EXPAND };
typedef struct {
    int op, view;
    int ndims, dims[3]; /* for max and the softmaxes: dims[0] */
    bool keepdim;
    int correction;
    int tndim;
    int64_t target[3]; /* sum_to_shape */
} gcase;

static ag_tensor *apply_view(ag_tensor *x, int view) {
    switch (view) {
    case V_TRANSPOSE: return ag_transpose(x, 0, -1);
    case V_SLICE: return ag_slice(x, -1, 0, x->shape[x->ndim - 1], 2);
    case V_EXPAND: { /* a new dim 1 of size 2, stride 0 */
        ag_tensor *u = ag_unsqueeze(x, 1);
        int64_t shape[AG_MAX_DIMS];
        memcpy(shape, u->shape, sizeof shape);
        shape[1] = 2;
        return ag_expand(u, u->ndim, shape);
    }
    default: return x;
    }
}

static ag_tensor *gc_fn(int n, ag_tensor **in, void *ctx) {
    const gcase *c = ctx;
    ag_tensor *x = apply_view(in[0], c->view);
    switch (c->op) {
    case OP_SUM: return ag_sum(x, c->ndims, c->dims, c->keepdim);
    case OP_MEAN: return ag_mean(x, c->ndims, c->dims, c->keepdim);
    case OP_VAR: return ag_var(x, c->ndims, c->dims, c->correction, c->keepdim);
    case OP_MAX: return ag_max(x, c->dims[0], c->keepdim);
    case OP_SOFTMAX: return ag_softmax(x, c->dims[0]);
    case OP_LOG_SOFTMAX: return ag_log_softmax(x, c->dims[0]);
    default: return ag_sum_to_shape(x, c->tndim, c->target);
    }
}

static void gradcheck_cases(const gcase *cs, int n) {
    ag_rng r = ag_rng_new(3);
    for (int i = 0; i < n; i++) {
        ag_tensor *x = tu_leaf(ag_uniform(&r, AG_F64, AG_SHAPE(3, 4, 5), -2, 2));
        ag_gradcheck_result res = ag_gradcheck(gc_fn, (void *)&cs[i], 1, &x, NULL);
        if (!res.ok) fail_msg("case %d (op %d, view %d): %s", i, cs[i].op, cs[i].view, res.message);
    }
}

static void test_gradcheck_sum_and_mean(void **s) {
    const gcase cs[] = {
        {OP_SUM, V_NONE, 0, {0}, false, 0, 0, {0}},
        {OP_SUM, V_NONE, 1, {1}, true, 0, 0, {0}},
        {OP_SUM, V_NONE, 2, {0, -1}, false, 0, 0, {0}},
        {OP_SUM, V_TRANSPOSE, 1, {0}, false, 0, 0, {0}},
        {OP_SUM, V_SLICE, 2, {-1, 1}, true, 0, 0, {0}},
        {OP_SUM, V_EXPAND, 1, {1}, false, 0, 0, {0}},
        {OP_SUM, V_EXPAND, 2, {0, 3}, true, 0, 0, {0}},
        {OP_MEAN, V_NONE, 0, {0}, false, 0, 0, {0}},
        {OP_MEAN, V_NONE, 1, {-1}, true, 0, 0, {0}},
        {OP_MEAN, V_TRANSPOSE, 2, {0, 1}, false, 0, 0, {0}},
        {OP_MEAN, V_EXPAND, 1, {1}, true, 0, 0, {0}},
    };
    gradcheck_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

static void test_gradcheck_var(void **s) {
    const gcase cs[] = {
        {OP_VAR, V_NONE, 0, {0}, false, 1, 0, {0}},
        {OP_VAR, V_NONE, 1, {-1}, true, 0, 0, {0}},
        {OP_VAR, V_NONE, 2, {0, 2}, false, 1, 0, {0}},
        {OP_VAR, V_TRANSPOSE, 1, {0}, true, 1, 0, {0}},
        {OP_VAR, V_SLICE, 1, {2}, false, 0, 0, {0}},
        {OP_VAR, V_EXPAND, 2, {1, 2}, false, 1, 0, {0}},
    };
    gradcheck_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

static void test_gradcheck_max(void **s) {
    const gcase cs[] = {
        {OP_MAX, V_NONE, 1, {-1}, false, 0, 0, {0}},
        {OP_MAX, V_NONE, 1, {0}, true, 0, 0, {0}},
        {OP_MAX, V_TRANSPOSE, 1, {1}, false, 0, 0, {0}},
        {OP_MAX, V_SLICE, 1, {2}, true, 0, 0, {0}},
    };
    gradcheck_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

static void test_gradcheck_softmax_and_log_softmax(void **s) {
    const gcase cs[] = {
        {OP_SOFTMAX, V_NONE, 1, {-1}, false, 0, 0, {0}},
        {OP_SOFTMAX, V_NONE, 1, {0}, false, 0, 0, {0}},
        {OP_SOFTMAX, V_TRANSPOSE, 1, {1}, false, 0, 0, {0}},
        {OP_SOFTMAX, V_SLICE, 1, {-1}, false, 0, 0, {0}},
        {OP_SOFTMAX, V_EXPAND, 1, {1}, false, 0, 0, {0}},
        {OP_LOG_SOFTMAX, V_NONE, 1, {-1}, false, 0, 0, {0}},
        {OP_LOG_SOFTMAX, V_NONE, 1, {1}, false, 0, 0, {0}},
        {OP_LOG_SOFTMAX, V_TRANSPOSE, 1, {0}, false, 0, 0, {0}},
        {OP_LOG_SOFTMAX, V_EXPAND, 1, {-1}, false, 0, 0, {0}},
    };
    gradcheck_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

static void test_gradcheck_sum_to_shape(void **s) {
    const gcase cs[] = {
        {OP_SUM_TO_SHAPE, V_NONE, 0, {0}, false, 0, 2, {4, 1}},
        {OP_SUM_TO_SHAPE, V_NONE, 0, {0}, false, 0, 1, {5}},
        {OP_SUM_TO_SHAPE, V_NONE, 0, {0}, false, 0, 3, {3, 1, 1}},
        {OP_SUM_TO_SHAPE, V_TRANSPOSE, 0, {0}, false, 0, 2, {1, 3}},
        {OP_SUM_TO_SHAPE, V_EXPAND, 0, {0}, false, 0, 3, {1, 4, 5}},
    };
    gradcheck_cases(cs, (int)(sizeof cs / sizeof cs[0]));
}

/* 0-d inputs: the reduction is the identity; softmax of one element is 1 with zero gradient */
static void test_0d_inputs_reduce_to_themselves(void **s) {
    ag_tensor *x = tu_leaf(ag_scalar(AG_F64, 1.5));
    tu_assert_values(ag_max(x, 0, true), 0, 1.5);
    tu_assert_values(ag_argmax(x, -1, false), 0, 0);
    tu_assert_values(ag_softmax(x, 0), 0, 1);
    tu_assert_values(ag_log_softmax(x, -1), 0, 0);
    tu_assert_values(ag_var(x, 0, NULL, 0, false), 0, 0);
    ag_backward(ag_mul_scalar(ag_max(x, 0, false), 3), NULL);
    tu_assert_values(x->grad, 0, 3);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_sum_of_all_dims_is_a_0d_total_for_f32_and_f64),
        T(test_sum_over_one_dim_with_and_without_keepdim),
        T(test_sum_over_several_dims_including_negative_ones),
        T(test_sum_of_transposed_sliced_and_expanded_inputs),
        T(test_sum_of_ints_and_bools_gives_i64),
        T(test_sum_over_an_empty_dim_is_zero_and_mean_is_nan),
        T(test_sum_of_a_0d_tensor_accepts_dim_0_and_minus_1),
        T(test_f32_sums_are_pairwise_accurate_in_both_layouts),
        T(test_sum_and_var_over_the_rows_of_a_wide_matrix),
        T(test_mean_over_dims_with_keepdim),
        T(test_var_with_correction_0_and_1),
        T(test_var_of_one_element_with_correction_1_is_nan),
        T(test_var_of_large_offset_values_keeps_precision),
        T(test_max_and_argmax_take_the_first_of_tied_maxima),
        T(test_max_gradient_goes_to_the_first_maximum_only),
        T(test_max_and_argmax_of_non_contiguous_and_int_inputs),
        T(test_max_treats_nan_as_the_maximum),
        T(test_softmax_matches_pytorch_and_rows_sum_to_one),
        T(test_log_softmax_matches_pytorch_and_stays_finite_for_large_inputs),
        T(test_softmax_of_transposed_and_expanded_inputs),
        T(test_softmax_of_an_all_minus_inf_row_is_nan),
        T(test_sum_to_shape_sums_leading_and_size_one_dims),
        T(test_sum_to_shape_of_a_transposed_gradient),
        T(test_sum_to_shape_records_nothing_with_grad_mode_off),
        T(test_errors_name_the_op_and_the_shape),
        T(test_max_over_an_empty_dim_is_an_error),
        T(test_sum_to_shape_rejects_shapes_that_do_not_broadcast),
        T(test_results_are_bitwise_identical_with_1_and_2_threads),
        T(test_reductions_match_a_naive_loop_on_random_strided_views),
        T(test_gradcheck_sum_and_mean),
        T(test_gradcheck_var),
        T(test_gradcheck_max),
        T(test_gradcheck_softmax_and_log_softmax),
        T(test_gradcheck_sum_to_shape),
        T(test_0d_inputs_reduce_to_themselves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
