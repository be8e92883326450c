/* Elementwise ops: values for f32 and f64, broadcasting edge cases, strided operands, errors,
 * and independence from the OpenMP thread count. Transcendental expected values were computed
 * with PyTorch 1.13 (float64, e.g. torch.nn.functional.gelu(x, approximate='tanh')) and pasted
 * as literals; the rest are hand-worked. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const ag_dtype FLOATS[2] = {AG_F32, AG_F64};
/* f32 results are compared with the float64 reference: a few f32 ulps at the values used (<= 20) */
static double tol_for(ag_dtype dt, double f32_tol) { return dt == AG_F32 ? f32_tol : 1e-13; }

/* ---- binary arithmetic ---- */

static void test_add_sub_mul_div_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *a = tu_tensor(dt, AG_SHAPE(2, 2), 1, -2, 3.5, 4);
        ag_tensor *b = tu_tensor(dt, AG_SHAPE(2, 2), 2, 4, -0.5, 8);
        tu_assert_values(ag_add(a, b), 0, 3, 2, 3, 12);
        tu_assert_values(ag_sub(a, b), 0, -1, -6, 4, -4);
        tu_assert_values(ag_mul(a, b), 0, 2, -8, -1.75, 32);
        tu_assert_values(ag_div(a, b), 0, 0.5, -0.5, -7, 0.5);
        assert_int_equal(ag_add(a, b)->dtype, dt);
        /* IEEE division by zero */
        tu_assert_values(ag_div(tu_tensor(dt, AG_SHAPE(3), 1, -1, 0), ag_zeros(dt, AG_SHAPE(3))), 0, INFINITY, -INFINITY,
                         NAN);
    }
}

static void test_pow_values_including_zero_base(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *a = tu_tensor(dt, AG_SHAPE(4), 0.5, 1, 2, 4);
        tu_assert_values(ag_pow(a, tu_tensor(dt, AG_SHAPE(4), 2, 0.5, -1, 1.5)), 0, 0.25, 1, 0.5, 8);
        /* torch: 0 ** 0 = 1, 0 ** -0.5 = inf, (-8) ** (1/3) = nan */
        tu_assert_values(ag_pow(tu_tensor(dt, AG_SHAPE(3), 0, 0, -8), tu_tensor(dt, AG_SHAPE(3), 0, -0.5, 1.0 / 3)), 0, 1, INFINITY,
                         NAN);
    }
}

static void test_integer_arithmetic_keeps_the_dtype_and_records_nothing(void **state) {
    (void)state;
    ag_tensor *a = tu_tensor(AG_I64, AG_SHAPE(3), 5, -7, 3000000000);
    ag_tensor *b = tu_tensor(AG_I64, AG_SHAPE(3), 2, 3, 3000000000);
    ag_tensor *s = ag_add(a, b);
    assert_int_equal(s->dtype, AG_I64);
    assert_int_equal(((int64_t *)s->data)[2], 6000000000LL); /* no trip through int32 */
    tu_assert_values(ag_sub(a, b), 0, 3, -10, 0);
    tu_assert_values(ag_mul(a, b), 0, 10, -21, 9e18);
    ag_tensor *i = tu_tensor(AG_I32, AG_SHAPE(2), 7, -3);
    tu_assert_values(ag_mul(i, i), 0, 49, 9);
    assert_null(s->node);
}

/* ---- scalar ops ---- */

static void test_scalar_ops_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(4), 0.5, 1, 2, 4);
        tu_assert_values(ag_add_scalar(x, 1.5), 0, 2, 2.5, 3.5, 5.5);
        tu_assert_values(ag_sub_scalar(x, 1), 0, -0.5, 0, 1, 3);
        tu_assert_values(ag_rsub_scalar(x, 1), 0, 0.5, 0, -1, -3);
        tu_assert_values(ag_mul_scalar(x, -2), 0, -1, -2, -4, -8);
        tu_assert_values(ag_div_scalar(x, 4), 0, 0.125, 0.25, 0.5, 1);
        tu_assert_values(ag_pow_scalar(x, 2), 0, 0.25, 1, 4, 16);
        /* torch.pow(x, 1.5) */
        tu_assert_values(ag_pow_scalar(x, 1.5), tol_for(dt, 1e-6), 0.3535533905932738, 1.0, 2.8284271247461903, 8.0);
        tu_assert_values(ag_pow_scalar(x, 0), 0, 1, 1, 1, 1);
    }
}

/* ---- unary ops ---- */

static void test_neg_abs_relu_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(5), -1.5, -0.0, 0, 2, -3);
        tu_assert_values(ag_neg(x), 0, 1.5, 0, 0, -2, 3);
        tu_assert_values(ag_abs(x), 0, 1.5, 0, 0, 2, 3);
        tu_assert_values(ag_relu(x), 0, 0, 0, 0, 2, 0);
        /* torch.relu propagates NaN (relu(nan) = nan), it does not clamp it to 0 */
        tu_assert_values(ag_relu(tu_tensor(dt, AG_SHAPE(2), NAN, -1)), 0, NAN, 0);
        tu_assert_values(ag_abs(tu_tensor(dt, AG_SHAPE(1), -INFINITY)), 0, INFINITY);
    }
}

static void test_exp_log_sqrt_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(6), -2.0, -0.5, 0.0, 0.75, 1.5, 3.0);
        /* torch.exp */
        tu_assert_values(ag_exp(x), tol_for(dt, 4e-6), 0.1353352832366127, 0.6065306597126334, 1.0, 2.117000016612675,
                         4.4816890703380645, 20.085536923187668);
        ag_tensor *p = tu_tensor(dt, AG_SHAPE(4), 0.5, 1.0, 2.0, 4.0);
        /* torch.log, torch.sqrt */
        tu_assert_values(ag_log(p), tol_for(dt, 1e-6), -0.6931471805599453, 0.0, 0.6931471805599453,
                         1.3862943611198906);
        tu_assert_values(ag_sqrt(p), tol_for(dt, 1e-6), 0.7071067811865476, 1.0, 1.4142135623730951, 2.0);
        tu_assert_values(ag_log(tu_tensor(dt, AG_SHAPE(2), 0, -1)), 0, -INFINITY, NAN);
    }
}

static void test_tanh_sigmoid_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(6), -2.0, -0.5, 0.0, 0.75, 1.5, 3.0);
        /* torch.tanh, torch.sigmoid */
        tu_assert_values(ag_tanh(x), tol_for(dt, 1e-6), -0.9640275800758169, -0.46211715726000974, 0.0,
                         0.6351489523872873, 0.9051482536448664, 0.9950547536867305);
        tu_assert_values(ag_sigmoid(x), tol_for(dt, 1e-6), 0.11920292202211755, 0.3775406687981454, 0.5,
                         0.679178699175393, 0.8175744761936437, 0.9525741268224334);
    }
    /* saturates without NaN: torch float64 sigmoid(-100) = 3.7200759760208356e-44 */
    tu_assert_values(ag_sigmoid(tu_tensor(AG_F64, AG_SHAPE(3), -100, 100, -800)), 1e-57, 3.7200759760208356e-44, 1.0, 0.0);
    tu_assert_values(ag_sigmoid(tu_tensor(AG_F32, AG_SHAPE(2), -100, 100)), 0, 0.0, 1.0);
}

static void test_gelu_exact_and_tanh_approximation_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(6), -2.0, -0.5, 0.0, 0.75, 1.5, 3.0);
        /* torch.nn.functional.gelu(x) */
        tu_assert_values(ag_gelu(x), tol_for(dt, 1e-6), -0.04550026389635842, -0.15426876936299344, 0.0,
                         0.5800294857173489, 1.399789198096713, 2.99595030590511);
        /* torch.nn.functional.gelu(x, approximate='tanh') */
        tu_assert_values(ag_gelu_tanh(x), tol_for(dt, 1e-6), -0.04540230591222494, -0.15428599017485606, 0.0,
                         0.5799605551656203, 1.3995715769802328, 2.996362607918227);
    }
}

static void test_unary_ops_record_a_node_when_input_requires_grad(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2), 1, 2);
    assert_null(ag_exp(x)->node);
    x->requires_grad = true;
    ag_tensor *y = ag_mul_scalar(x, 3);
    assert_non_null(y->node);
    assert_string_equal(y->node->op->name, "ag_mul_scalar");
    assert_true(y->node->ctx.d[0] == 3);
    assert_ptr_equal(y->node->in[0], x);
    assert_string_equal(ag_gelu(x)->node->op->name, "ag_gelu");
    assert_string_equal(ag_add(x, x)->node->op->name, "ag_add");
    assert_null(ag_gt(x, x)->node); /* comparisons are not differentiable */
}

/* ---- where, masked_fill ---- */

static void test_where_broadcasts_condition_and_both_values(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *c = tu_tensor(AG_BOOL, AG_SHAPE(2, 1), 1, 0);
        ag_tensor *a = tu_tensor(dt, AG_SHAPE(1, 3), 1, 2, 3);
        ag_tensor *y = ag_where(c, a, ag_scalar(dt, -1));
        tu_assert_shape(y, 2, 3);
        tu_assert_values(y, 0, 1, 2, 3, -1, -1, -1);
        ag_tensor *c2 = tu_tensor(AG_BOOL, AG_SHAPE(3), 0, 1, 0);
        tu_assert_values(ag_where(c2, a, tu_tensor(dt, AG_SHAPE(2, 1), 10, 20)), 0, 10, 2, 10, 20, 2, 20);
    }
    /* integer values work too */
    tu_assert_values(ag_where(tu_tensor(AG_BOOL, AG_SHAPE(2), 1, 0), tu_tensor(AG_I64, AG_SHAPE(2), 5, 6), ag_scalar(AG_I64, 0)), 0, 5,
                     0);
}

static void test_masked_fill_broadcasts_mask_to_input(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *a = tu_tensor(dt, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
        ag_tensor *y = ag_masked_fill(a, tu_tensor(AG_BOOL, AG_SHAPE(3), 1, 0, 1), -INFINITY);
        tu_assert_shape(y, 2, 3);
        tu_assert_values(y, 0, -INFINITY, 2, -INFINITY, -INFINITY, 5, -INFINITY);
        tu_assert_values(a, 0, 1, 2, 3, 4, 5, 6); /* input untouched */
        /* causal mask: upper triangle of a (2,2,2) batch */
        ag_tensor *m = tu_tensor(AG_BOOL, AG_SHAPE(2, 2), 0, 1, 0, 0);
        tu_assert_values(ag_masked_fill(ag_ones(dt, AG_SHAPE(2, 2, 2)), m, 0), 0, 1, 0, 1, 1, 1, 0, 1, 1);
    }
}

static void test_where_and_masked_fill_errors(void **state) {
    (void)state;
    ag_tensor *a = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_where(ag_zeros(AG_F32, AG_SHAPE(2, 3)), a, a));
    tu_assert_error("ag_where", "condition (2,3) f32", "bool");
    assert_null(ag_where(ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), a, ag_zeros(AG_F64, AG_SHAPE(2, 3))));
    tu_assert_error("ag_where", "f32", "f64");
    assert_null(ag_where(ag_zeros(AG_BOOL, AG_SHAPE(4)), a, a));
    tu_assert_error("ag_where", "(4)", "(2,3)");
    assert_null(ag_masked_fill(a, ag_zeros(AG_F32, AG_SHAPE(3)), 0));
    tu_assert_error("ag_masked_fill", "mask (3) f32", "bool");
    /* the mask may not enlarge the input */
    assert_null(ag_masked_fill(ag_zeros(AG_F32, AG_SHAPE(3)), ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), 0));
    tu_assert_error("ag_masked_fill", "(2,3)", "(3)");
    assert_null(ag_masked_fill(ag_zeros(AG_F32, AG_SHAPE(2, 1)), ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), 0));
    tu_assert_error("ag_masked_fill", "(2,3)", "(2,1)");
}

/* ---- comparisons and logic ---- */

static void test_comparisons_give_bool_for_every_dtype(void **state) {
    (void)state;
    ag_dtype dts[] = {AG_F32, AG_F64, AG_I32, AG_I64};
    for (int k = 0; k < 4; k++) {
        ag_tensor *a = tu_tensor(dts[k], AG_SHAPE(3), 1, 2, 3);
        ag_tensor *b = tu_tensor(dts[k], AG_SHAPE(3), 3, 2, 1);
        ag_tensor *eq = ag_eq(a, b);
        assert_int_equal(eq->dtype, AG_BOOL);
        tu_assert_values(eq, 0, 0, 1, 0);
        tu_assert_values(ag_ne(a, b), 0, 1, 0, 1);
        tu_assert_values(ag_lt(a, b), 0, 1, 0, 0);
        tu_assert_values(ag_le(a, b), 0, 1, 1, 0);
        tu_assert_values(ag_gt(a, b), 0, 0, 0, 1);
        tu_assert_values(ag_ge(a, b), 0, 0, 1, 1);
        /* broadcast: (3,1) against (3) */
        tu_assert_values(ag_lt(ag_view(a, AG_SHAPE(3, 1)), b), 0, 1, 1, 0, 1, 0, 0, 0, 0, 0);
        tu_assert_values(ag_eq_scalar(a, 2), 0, 0, 1, 0);
    }
    /* NaN is unequal to everything, itself included */
    ag_tensor *n = tu_tensor(AG_F64, AG_SHAPE(2), NAN, 1);
    tu_assert_values(ag_eq(n, n), 0, 0, 1);
    tu_assert_values(ag_ne(n, n), 0, 1, 0);
    tu_assert_values(ag_eq_scalar(tu_tensor(AG_F32, AG_SHAPE(2), 0.1, 0.2), 0.1), 0, 1, 0); /* 0.1 rounded like the data */
}

static void test_logical_ops_on_bool(void **state) {
    (void)state;
    ag_tensor *a = tu_tensor(AG_BOOL, AG_SHAPE(4), 0, 0, 1, 1);
    ag_tensor *b = tu_tensor(AG_BOOL, AG_SHAPE(4), 0, 1, 0, 1);
    tu_assert_values(ag_logical_and(a, b), 0, 0, 0, 0, 1);
    tu_assert_values(ag_logical_or(a, b), 0, 0, 1, 1, 1);
    ag_tensor *n = ag_logical_not(a);
    assert_int_equal(n->dtype, AG_BOOL);
    tu_assert_values(n, 0, 1, 1, 0, 0);
    tu_assert_values(ag_logical_and(ag_view(a, AG_SHAPE(4, 1)), ag_slice(b, 0, 2, 4, 1)), 0, 0, 0, 0, 0, 0, 1, 0, 1);
    tu_assert_values(ag_logical_not(ag_gt(tu_tensor(AG_F32, AG_SHAPE(2), 1, 3), ag_scalar(AG_F32, 2))), 0, 1, 0);
}

/* ---- broadcasting ---- */

static void test_broadcast_size_one_dims_both_sides(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *y = ag_add(tu_tensor(dt, AG_SHAPE(2, 1), 10, 20), tu_tensor(dt, AG_SHAPE(1, 3), 1, 2, 3));
        tu_assert_shape(y, 2, 3);
        tu_assert_values(y, 0, 11, 12, 13, 21, 22, 23);
        tu_assert_values(ag_sub(tu_tensor(dt, AG_SHAPE(1, 3), 1, 2, 3), tu_tensor(dt, AG_SHAPE(2, 1), 10, 20)), 0, -9, -8, -7, -19,
                         -18, -17);
    }
}

static void test_broadcast_rank_mismatch_aligns_right(void **state) {
    (void)state;
    ag_tensor *a = ag_view(ag_arange(AG_F64, 1, 7, 1), AG_SHAPE(2, 1, 3)); /* a[i][0][k] = 3i + k + 1 */
    ag_tensor *b = tu_tensor(AG_F64, AG_SHAPE(4, 1), 10, 20, 30, 40);              /* b[j][0] = 10 (j + 1) */
    ag_tensor *y = ag_add(a, b);
    tu_assert_shape(y, 2, 4, 3);
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 4; j++)
            for (int64_t k = 0; k < 3; k++)
                assert_true(ag_get(y, (int64_t[]){i, j, k}) == (double)(3 * i + k + 1 + 10 * (j + 1)));
    tu_assert_shape(ag_mul(b, a), 2, 4, 3);
    tu_assert_shape(ag_add(ag_zeros(AG_F32, AG_SHAPE(5, 1, 1, 1)), ag_zeros(AG_F32, AG_SHAPE(2, 1))), 5, 1, 2, 1);
    int64_t out[AG_MAX_DIMS];
    assert_int_equal(ag_broadcast_shape("my_op", a, b, out), 3);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 4);
    assert_int_equal(out[2], 3);
    assert_int_equal(ag_broadcast_shape("my_op", a, ag_zeros(AG_F64, AG_SHAPE(2, 2)), out), -1);
    tu_assert_error("my_op", "(2,1,3)", "(2,2)", "sizes 3 and 2");
}

static void test_broadcast_with_zero_size_dims(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        tu_assert_shape(ag_add(ag_zeros(dt, AG_SHAPE(0, 3)), ag_ones(dt, AG_SHAPE(3))), 0, 3);
        tu_assert_shape(ag_mul(ag_zeros(dt, AG_SHAPE(2, 0)), ag_ones(dt, AG_SHAPE(2, 1))), 2, 0);
        tu_assert_shape(ag_sub(ag_ones(dt, AG_SHAPE(1, 3)), ag_zeros(dt, AG_SHAPE(0, 1))), 0, 3);
        tu_assert_shape(ag_add(ag_scalar(dt, 1), ag_zeros(dt, AG_SHAPE(0))), 0);
        tu_assert_shape(ag_exp(ag_zeros(dt, AG_SHAPE(4, 0, 2))), 4, 0, 2);
        tu_assert_shape(ag_where(ag_zeros(AG_BOOL, AG_SHAPE(0, 1)), ag_ones(dt, AG_SHAPE(3)), ag_scalar(dt, 0)), 0, 3);
        tu_assert_shape(ag_lt(ag_zeros(dt, AG_SHAPE(0)), ag_scalar(dt, 0)), 0);
    }
    /* 0 against 2 is not broadcastable */
    assert_null(ag_add(ag_zeros(AG_F32, AG_SHAPE(0)), ag_zeros(AG_F32, AG_SHAPE(2))));
    tu_assert_error("ag_add", "(0)", "(2)");
}

static void test_broadcast_with_scalar_operands(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *s = ag_scalar(dt, 2);
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
        tu_assert_values(ag_mul(s, x), 0, 2, 4, 6, 8, 10, 12);
        tu_assert_values(ag_div(x, s), 0, 0.5, 1, 1.5, 2, 2.5, 3);
        ag_tensor *ss = ag_sub(s, ag_scalar(dt, 5));
        assert_int_equal(ss->ndim, 0);
        assert_true(ag_item(ss) == -3);
        assert_int_equal(ag_exp(ss)->ndim, 0);
        assert_int_equal(ag_eq(s, s)->ndim, 0);
    }
}

static void test_non_contiguous_operands_transposed_sliced_expanded(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
        ag_tensor *xt = ag_transpose(x, 0, 1); /* (3,2): 1 4 / 2 5 / 3 6 */
        ag_tensor *c = tu_tensor(dt, AG_SHAPE(3, 2), 10, 20, 30, 40, 50, 60);
        /* torch: x.t() * c */
        tu_assert_values(ag_mul(xt, c), 0, 10, 80, 60, 200, 150, 360);
        tu_assert_values(ag_add(c, xt), 0, 11, 24, 32, 45, 53, 66);
        tu_assert_values(ag_sub(xt, xt), 0, 0, 0, 0, 0, 0, 0);
        /* sliced with step: columns 0 and 2 of x */
        ag_tensor *sl = ag_slice(x, 1, 0, 3, 2);
        tu_assert_values(ag_mul(sl, sl), 0, 1, 9, 16, 36);
        tu_assert_values(ag_neg(sl), 0, -1, -3, -4, -6);
        /* expanded (stride 0) operands, alone and on both sides */
        ag_tensor *e = ag_expand(tu_tensor(dt, AG_SHAPE(3, 1), 1, 2, 3), AG_SHAPE(3, 2));
        tu_assert_values(ag_add(e, c), 0, 11, 21, 32, 42, 53, 63);
        tu_assert_values(ag_mul(e, xt), 0, 1, 4, 4, 10, 9, 18);
        ag_tensor *er = ag_expand(tu_tensor(dt, AG_SHAPE(1, 2), 100, 200), AG_SHAPE(3, 2));
        tu_assert_values(ag_add(e, er), 0, 101, 201, 102, 202, 103, 203);
        tu_assert_values(ag_exp(ag_sub(e, e)), 0, 1, 1, 1, 1, 1, 1);
        tu_assert_values(ag_gt(xt, e), 0, 0, 1, 0, 1, 0, 1);
        tu_assert_values(ag_where(ag_gt(xt, e), xt, ag_neg(e)), 0, -1, 4, -2, 5, -3, 6);
        /* offset views */
        ag_tensor *row1 = ag_select(x, 0, 1);
        tu_assert_values(ag_div(row1, ag_slice(ag_select(c, 1, 0), 0, 0, 3, 1)), tol_for(dt, 1e-7), 0.4, 5.0 / 30, 0.12);
    }
}

/* ---- errors ---- */

static void test_incompatible_shapes_error_names_both_shapes(void **state) {
    (void)state;
    assert_null(ag_add(ag_zeros(AG_F32, AG_SHAPE(2, 3)), ag_zeros(AG_F32, AG_SHAPE(4, 3))));
    tu_assert_error("ag_add", "(2,3)", "(4,3)");
    assert_null(ag_mul(ag_zeros(AG_F64, AG_SHAPE(5, 2, 3)), ag_zeros(AG_F64, AG_SHAPE(2, 4))));
    tu_assert_error("ag_mul", "(5,2,3)", "(2,4)");
    assert_null(ag_lt(ag_zeros(AG_I64, AG_SHAPE(3)), ag_zeros(AG_I64, AG_SHAPE(2))));
    tu_assert_error("ag_lt", "(3)", "(2)");
}

static void test_dtype_mismatch_is_reported(void **state) {
    (void)state;
    assert_null(ag_add(ag_zeros(AG_F32, AG_SHAPE(2)), ag_zeros(AG_F64, AG_SHAPE(2))));
    tu_assert_error("ag_add", "f32", "f64", "ag_to");
    assert_null(ag_eq(ag_zeros(AG_I64, AG_SHAPE(2)), ag_zeros(AG_F32, AG_SHAPE(2))));
    tu_assert_error("ag_eq", "i64", "f32");
}

static void test_integer_input_to_float_only_op_is_reported(void **state) {
    (void)state;
    assert_null(ag_exp(ag_zeros(AG_I64, AG_SHAPE(2, 2))));
    tu_assert_error("ag_exp", "(2,2)", "i64");
    assert_null(ag_sigmoid(ag_zeros(AG_BOOL, AG_SHAPE(3))));
    tu_assert_error("ag_sigmoid", "bool");
    assert_null(ag_mul_scalar(ag_zeros(AG_I32, AG_SHAPE(3)), 2));
    tu_assert_error("ag_mul_scalar", "i32");
    assert_null(ag_div(ag_zeros(AG_I64, AG_SHAPE(2)), ag_ones(AG_I64, AG_SHAPE(2))));
    tu_assert_error("ag_div", "i64");
    assert_null(ag_pow(ag_zeros(AG_I32, AG_SHAPE(2)), ag_ones(AG_I32, AG_SHAPE(2))));
    tu_assert_error("ag_pow", "i32");
    assert_null(ag_logical_and(ag_zeros(AG_F32, AG_SHAPE(2)), ag_zeros(AG_F32, AG_SHAPE(2))));
    tu_assert_error("ag_logical_and", "f32");
    assert_null(ag_logical_not(ag_zeros(AG_I64, AG_SHAPE(2))));
    tu_assert_error("ag_logical_not", "i64", "bool");
}

static void test_null_input_is_reported_not_crashed(void **state) {
    (void)state;
    assert_null(ag_add(NULL, ag_zeros(AG_F32, AG_SHAPE(2))));
    tu_assert_error("ag_add", "NULL");
    assert_null(ag_tanh(NULL));
    tu_assert_error("ag_tanh", "NULL");
    assert_null(ag_eq_scalar(NULL, 0));
    tu_assert_error("ag_eq_scalar", "NULL");
}

/* ---- thread-count independence ---- */

static ag_tensor *big_ops(ag_tensor *a, ag_tensor *b, ag_tensor *row) {
    ag_tensor *y = ag_sigmoid(ag_add(ag_mul(a, b), row));
    y = ag_where(ag_gt(y, ag_scalar(y->dtype, 0.5)), ag_gelu(y), ag_div(y, b));
    return ag_add(y, ag_exp(ag_transpose(ag_transpose(a, 0, 1), 0, 1)));
}

static void test_large_op_is_bit_identical_with_one_and_two_threads(void **state) {
    (void)state;
    int saved = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = FLOATS[k];
        ag_rng rng = ag_rng_new(7);
        /* (3, 40000): few long rows (split into pieces) and (400, 300): many short rows */
        int64_t shapes[2][2] = {{3, 40000}, {400, 300}};
        for (int s = 0; s < 2; s++) {
            ag_tensor *a = ag_randn(&rng, dt, 2, shapes[s]);
            ag_tensor *b = ag_uniform(&rng, dt, 2, shapes[s], 0.5, 2);
            ag_tensor *row = ag_randn(&rng, dt, 1, &shapes[s][1]);
            omp_set_num_threads(1);
            ag_tensor *y1 = big_ops(a, b, row);
            ag_tensor *sum1 = ag_add(a, b);
            omp_set_num_threads(2);
            ag_tensor *y2 = big_ops(a, b, row);
            ag_tensor *sum2 = ag_add(a, b);
            size_t bytes = (size_t)ag_numel(y1) * ag_dtype_size(dt);
            assert_true(ag_numel(y1) > 32768);
            assert_int_equal(memcmp(y1->data, y2->data, bytes), 0);
            assert_int_equal(memcmp(sum1->data, sum2->data, bytes), 0);
            /* and every element was computed exactly once, correctly */
            for (int64_t i = 0; i < ag_numel(a); i++) {
                if (dt == AG_F32) {
                    float want = ((float *)a->data)[i] + ((float *)b->data)[i];
                    if (((float *)sum2->data)[i] != want) fail_msg("element %lld differs", (long long)i);
                } else {
                    double want = ((double *)a->data)[i] + ((double *)b->data)[i];
                    if (((double *)sum2->data)[i] != want) fail_msg("element %lld differs", (long long)i);
                }
            }
        }
    }
    omp_set_num_threads(saved);
}

/* ---- add_ ---- */

static void test_add_in_place_writes_into_a_and_routes_gradients_to_both(void **state) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 10, 20, 30));
    ag_tensor *a = ag_mul_scalar(x, 2), *y = ag_add_(a, b);
    assert_ptr_equal(y->data, a->data);
    tu_assert_values(a, 0, 12, 24, 36, 18, 30, 42); /* a itself changed, as Tensor.add_ */
    tu_assert_values(y, 0, 12, 24, 36, 18, 30, 42);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    tu_assert_values(x->grad, 0, 2, 4, 6, 8, 10, 12);
    tu_assert_values(b->grad, 0, 5, 7, 9); /* summed over the broadcast rows */
}

static void test_mul_scalar_in_place_scales_a_and_its_gradient(void **state) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3), 1, -2, 4));
    ag_tensor *a = ag_add_scalar(x, 1), *y = ag_mul_scalar_(a, 0.5);
    assert_ptr_equal(y->data, a->data);
    tu_assert_values(y, 0, 1, -0.5, 2.5);
    ag_backward(y, tu_tensor(AG_F32, AG_SHAPE(3), 2, 4, 6));
    tu_assert_values(x->grad, 0, 1, 2, 3);
    assert_null(ag_mul_scalar_(x, 2));
    tu_assert_error("ag_mul_scalar_", "(3)", "leaf");
}

/* on a product (whose backward reads its inputs, not its output: the condition for in place) */
static ag_tensor *f_mul_scalar_(int n, ag_tensor **in, void *ctx) { return ag_mul_scalar_(ag_mul(in[0], in[0]), -1.7); }

static void test_mul_scalar_in_place_gradcheck(void **state) {
    ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.4, 0.3));
    tu_assert_gradcheck(f_mul_scalar_, NULL, 1, &x);
}

static ag_tensor *f_add_(int n, ag_tensor **in, void *ctx) { return ag_add_(ag_mul(in[0], in[0]), in[1]); }

static void test_add_in_place_gradcheck(void **state) {
    ag_tensor *in[2] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4), 0.7, 0.1)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4), 1.3, 0.5))};
    tu_assert_gradcheck(f_add_, NULL, 2, in);
}

static void test_add_in_place_refuses_leaves_with_grad_on_and_growing_shapes(void **state) {
    ag_tensor *leaf = tu_leaf(ag_ones(AG_F32, AG_SHAPE(3)));
    assert_null(ag_add_(leaf, ag_ones(AG_F32, AG_SHAPE(3))));
    tu_assert_error("ag_add_", "(3)", "leaf", "grad mode on");
    bool prev = ag_set_grad_enabled(false); /* as an optimizer step does: allowed, recorded nowhere */
    ag_tensor *y = ag_add_(leaf, ag_ones(AG_F32, AG_SHAPE(3)));
    ag_set_grad_enabled(prev);
    assert_ptr_equal(y->data, leaf->data);
    assert_null(y->node);
    tu_assert_values(leaf, 0, 2, 2, 2);
    assert_int_equal(ag_version(leaf), 1);
    assert_null(ag_add_(ag_ones(AG_F32, AG_SHAPE(3)), ag_ones(AG_F32, AG_SHAPE(2, 3))));
    tu_assert_error("ag_add_", "(3)", "(2,3)");
    assert_null(ag_add_(ag_ones(AG_F32, AG_SHAPE(3)), ag_ones(AG_F64, AG_SHAPE(3))));
    tu_assert_error("ag_add_", "f32", "f64");
}

/* torch's memory-overlap rules: a source sharing the destination's elements in another dense
 * layout and an expanded destination are errors; the same view is allowed; strided views whose
 * ranges interleave read the old values (torch leaves that order-dependent) */
static void test_add_in_place_with_overlapping_operands_follows_torch_or_reads_old_values(void **state) {
    (void)state;
    ag_tensor *a = tu_tensor(AG_F32, AG_SHAPE(2, 4), 1, 2, 3, 4, 5, 6, 7, 8);
    ag_add_(ag_slice(a, 1, 1, 4, 1), ag_slice(a, 1, 0, 3, 1)); /* a[:, 1:] += a[:, :-1] */
    assert_int_equal(tu_error_count(), 0);
    tu_assert_values(a, 0, 1, 3, 5, 7, 5, 11, 13, 15); /* a loop in order would give running sums 1, 3, 6, 10 */
    ag_add_(a, a);
    assert_int_equal(tu_error_count(), 0);
    tu_assert_values(a, 0, 2, 6, 10, 14, 10, 22, 26, 30);
    ag_tensor *v = tu_tensor(AG_F32, AG_SHAPE(5), 1, 2, 3, 4, 5);
    assert_null(ag_add_(ag_slice(v, 0, 1, 5, 1), ag_slice(v, 0, 0, 4, 1)));
    tu_assert_error("ag_add_", "(4)", "share some memory", "clone");
    tu_assert_values(v, 0, 1, 2, 3, 4, 5);
    assert_null(ag_add_(ag_expand(ag_ones(AG_F32, AG_SHAPE(1, 3)), AG_SHAPE(2, 3)), ag_ones(AG_F32, AG_SHAPE(2, 3))));
    tu_assert_error("ag_add_", "(2,3)", "expanded view");
    assert_null(ag_mul_scalar_(ag_expand(ag_ones(AG_F32, AG_SHAPE(3, 1)), AG_SHAPE(3, 2)), 2));
    tu_assert_error("ag_mul_scalar_", "(3,2)", "expanded view");
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_add_sub_mul_div_values),
        T(test_add_in_place_writes_into_a_and_routes_gradients_to_both),
        T(test_add_in_place_gradcheck),
        T(test_add_in_place_refuses_leaves_with_grad_on_and_growing_shapes),
        T(test_add_in_place_with_overlapping_operands_follows_torch_or_reads_old_values),
        T(test_mul_scalar_in_place_scales_a_and_its_gradient),
        T(test_mul_scalar_in_place_gradcheck),
        T(test_pow_values_including_zero_base),
        T(test_integer_arithmetic_keeps_the_dtype_and_records_nothing),
        T(test_scalar_ops_values),
        T(test_neg_abs_relu_values),
        T(test_exp_log_sqrt_values),
        T(test_tanh_sigmoid_values),
        T(test_gelu_exact_and_tanh_approximation_values),
        T(test_unary_ops_record_a_node_when_input_requires_grad),
        T(test_where_broadcasts_condition_and_both_values),
        T(test_masked_fill_broadcasts_mask_to_input),
        T(test_where_and_masked_fill_errors),
        T(test_comparisons_give_bool_for_every_dtype),
        T(test_logical_ops_on_bool),
        T(test_broadcast_size_one_dims_both_sides),
        T(test_broadcast_rank_mismatch_aligns_right),
        T(test_broadcast_with_zero_size_dims),
        T(test_broadcast_with_scalar_operands),
        T(test_non_contiguous_operands_transposed_sliced_expanded),
        T(test_incompatible_shapes_error_names_both_shapes),
        T(test_dtype_mismatch_is_reported),
        T(test_integer_input_to_float_only_op_is_reported),
        T(test_null_input_is_reported_not_crashed),
        T(test_large_op_is_bit_identical_with_one_and_two_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
