/* sin, cos, clamp, leaky_relu, silu, softplus, elu, minimum / maximum, the scalar comparisons
 * and full_like / ones_like: values and gradients from PyTorch 1.13 (printed by hand from
 * torch at the edges: bounds, ties, NaN), non-contiguous inputs, error messages, and an f64
 * gradcheck for every differentiable op. */
#include <math.h>
#include <string.h>

#include "test_util.h"

#define NAN_ (0.0 / 0.0)

/* y's gradient when the upstream gradient is all ones: x must be a leaf */
static ag_tensor *grad_of_ones(ag_tensor *y, ag_tensor *x) {
    ag_backward(y, ag_ones_like(y));
    return x->grad;
}

/* ---- sin, cos ---- */

static void test_sin_and_cos_match_libm_in_f32_and_f64(void **s) {
    const double v[] = {0, M_PI / 6, M_PI / 2, -1, 10};
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = tu_tensor(dt, AG_SHAPE(5), v[0], v[1], v[2], v[3], v[4]);
        ag_tensor *y = ag_sin(x), *z = ag_cos(x);
        assert_int_equal(y->dtype, dt);
        double tol = dt == AG_F32 ? 1e-6 : 1e-15;
        tu_assert_values(y, tol, 0, 0.5, 1, sin(-1.0), sin(10.0));
        tu_assert_values(z, tol, 1, sqrt(3) / 2, cos(M_PI / 2), cos(-1.0), cos(10.0));
    }
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 0.5, -2));
    tu_assert_values(grad_of_ones(ag_sin(x), x), 1e-15, cos(0.5), cos(-2.0));
    x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 0.5, -2));
    tu_assert_values(grad_of_ones(ag_cos(x), x), 1e-15, -sin(0.5), -sin(-2.0));
}

/* a transposed (2,3) view gives the values of its contiguous copy, element for element */
static void test_unary_ops_of_transposed_inputs(void **s) {
    ag_tensor *x = ag_transpose(tu_seq(AG_F32, AG_SHAPE(3, 2), 0.9, 0.2), 0, 1), *c = ag_contiguous(x);
    assert_false(ag_is_contiguous(x));
    ag_tensor *pairs[][2] = {{ag_sin(x), ag_sin(c)},
                             {ag_cos(x), ag_cos(c)},
                             {ag_clamp(x, -0.3, 0.4), ag_clamp(c, -0.3, 0.4)},
                             {ag_leaky_relu(x, 0.2), ag_leaky_relu(c, 0.2)},
                             {ag_silu(x), ag_silu(c)},
                             {ag_softplus(x, 2, 1), ag_softplus(c, 2, 1)},
                             {ag_elu(x, 0.7), ag_elu(c, 0.7)}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        float a[6], b[6];
        tu_assert_shape(pairs[k][0], 2, 3);
        ag_to_buffer(pairs[k][0], AG_F32, a);
        ag_to_buffer(pairs[k][1], AG_F32, b);
        assert_memory_equal(a, b, sizeof a);
    }
}

/* ---- clamp ---- */

/* torch.clamp(x, -1, 1) on [-2,-1,0,1,2,nan]: [-1,-1,0,1,1,nan], grad [0,1,1,1,0,0] */
static void test_clamp_passes_the_gradient_at_the_bounds_and_keeps_nan(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = tu_leaf(tu_tensor(dt, AG_SHAPE(6), -2, -1, 0, 1, 2, NAN_));
        ag_tensor *y = ag_clamp(x, -1, 1);
        tu_assert_values(y, 0, -1, -1, 0, 1, 1, NAN_);
        tu_assert_values(grad_of_ones(y, x), 0, 0, 1, 1, 1, 0, 0);
    }
}

/* torch.clamp(x, min=0) and clamp(x, max=0): an absent bound is an infinite one */
static void test_clamp_with_one_bound(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), -1, 0, 1, INFINITY));
    ag_tensor *y = ag_clamp(x, 0, INFINITY);
    tu_assert_values(y, 0, 0, 0, 1, INFINITY);
    tu_assert_values(grad_of_ones(y, x), 0, 0, 1, 1, 1);
    x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), -INFINITY, -1, 0, 1));
    y = ag_clamp(x, -INFINITY, 0);
    tu_assert_values(y, 0, -INFINITY, -1, 0, 0);
    tu_assert_values(grad_of_ones(y, x), 0, 1, 1, 1, 0);
}

/* torch.clamp(x, 1, -1): min > max gives max everywhere, and no gradient */
static void test_clamp_with_min_above_max_gives_max(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3), -2, 0, 2));
    ag_tensor *y = ag_clamp(x, 1, -1);
    tu_assert_values(y, 0, -1, -1, -1);
    tu_assert_values(grad_of_ones(y, x), 0, 0, 0, 0);
}

/* ---- activations ---- */

/* F.leaky_relu(x, 0.1) on [-1,0,1,nan]: [-0.1,0,1,nan], grad [0.1,0.1,1,0.1] */
static void test_leaky_relu_slope_applies_at_zero_and_to_nan(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *x = tu_leaf(tu_tensor(dt, AG_SHAPE(4), -1, 0, 1, NAN_));
        ag_tensor *y = ag_leaky_relu(x, 0.1);
        tu_assert_values(y, 1e-7, -0.1, 0, 1, NAN_);
        tu_assert_values(grad_of_ones(y, x), 1e-7, 0.1, 0.1, 1, 0.1);
    }
}

/* F.elu(x, 0.5) on [-1,0,1,nan]: values and grads from torch */
static void test_elu_matches_pytorch_at_zero_and_nan(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), -1, 0, 1, NAN_));
    ag_tensor *y = ag_elu(x, 0.5);
    tu_assert_values(y, 1e-15, -0.31606027941427883, 0, 1, NAN_);
    tu_assert_values(grad_of_ones(y, x), 1e-15, 0.18393972058572117, 0.5, 1, 1);
}

/* F.softplus(x, beta=2, threshold=3) on [-1,0,1.4,1.5,1.6,nan]: linear only above 1.5 */
static void test_softplus_switches_to_linear_above_the_threshold(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(6), -1, 0, 1.4, 1.5, 1.6, NAN_));
    ag_tensor *y = ag_softplus(x, 2, 3);
    tu_assert_values(y, 1e-15, 0.06346400552148625, 0.34657359027997264, 1.4295164131439857, 1.524293675786871,
                     1.6, NAN_);
    tu_assert_values(grad_of_ones(y, x), 1e-15, 0.11920292202211755, 0.5, 0.9426758241011313, 0.9525741268224333,
                     1, NAN_);
    /* f32, far past exp's range: the linear branch, not inf */
    tu_assert_values(ag_softplus(tu_tensor(AG_F32, AG_SHAPE(2), 100, -100), 1, 20), 1e-30, 100, 3.7200760e-44);
}

/* F.silu on [-1,0,1,-800]: torch gives -0.0 at -800 (no NaN from inf/inf) */
static void test_silu_matches_pytorch_and_stays_finite(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), -1, 0, 1, -800));
    ag_tensor *y = ag_silu(x);
    tu_assert_values(y, 1e-15, -0.2689414213699951, 0, 0.7310585786300049, 0);
    tu_assert_values(grad_of_ones(y, x), 1e-15, 0.07232948812851325, 0.5, 0.9276705118714869, 0);
    tu_assert_values(ag_silu(tu_tensor(AG_F32, AG_SHAPE(2), -200, 200)), 0, 0, 200);
}

/* ---- minimum / maximum ---- */

/* torch on a = [1,2,3,nan,nan,4], b = [1,3,2,1,nan,nan]: NaN wins; a tie halves the gradient;
 * with a NaN on either side both operands get the whole gradient */
static void test_maximum_and_minimum_split_ties_and_propagate_nan(void **s) {
    for (int is_max = 0; is_max < 2; is_max++) {
        ag_tensor *a = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(6), 1, 2, 3, NAN_, NAN_, 4));
        ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(6), 1, 3, 2, 1, NAN_, NAN_));
        ag_tensor *y = is_max ? ag_maximum(a, b) : ag_minimum(a, b);
        ag_backward(y, ag_ones_like(y));
        if (is_max) {
            tu_assert_values(y, 0, 1, 3, 3, NAN_, NAN_, NAN_);
            tu_assert_values(a->grad, 0, 0.5, 0, 1, 1, 1, 1);
            tu_assert_values(b->grad, 0, 0.5, 1, 0, 1, 1, 1);
        } else {
            tu_assert_values(y, 0, 1, 2, 2, NAN_, NAN_, NAN_);
            tu_assert_values(a->grad, 0, 0.5, 1, 0, 1, 1, 1);
            tu_assert_values(b->grad, 0, 0.5, 0, 1, 1, 1, 1);
        }
    }
}

/* (3,1) against (4): the result is (3,4) and each gradient is summed back to its shape */
static void test_maximum_broadcasts_and_sums_gradients_back(void **s) {
    ag_tensor *a = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3, 1), 0, 2, 5));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(4), 1, 2, 3, 4));
    ag_tensor *y = ag_maximum(a, b);
    tu_assert_shape(y, 3, 4);
    tu_assert_values(y, 0, 1, 2, 3, 4, 2, 2, 3, 4, 5, 5, 5, 5);
    ag_backward(y, ag_ones_like(y));
    tu_assert_values(a->grad, 0, 0, 1.5, 4); /* row 1 ties b = 2 once */
    tu_assert_values(b->grad, 0, 1, 1.5, 2, 2);
    /* a transposed operand */
    ag_tensor *t = ag_transpose(tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 5, 3, 0), 0, 1); /* [[1,3],[5,0]] */
    tu_assert_values(ag_minimum(t, tu_tensor(AG_F64, AG_SHAPE(2), 2, 2)), 0, 1, 2, 2, 0);
}

static void test_maximum_and_minimum_of_integers_and_bools(void **s) {
    ag_tensor *y = ag_maximum(tu_tensor(AG_I64, AG_SHAPE(3), -5, 7, 2), tu_tensor(AG_I64, AG_SHAPE(3), 3, 3, 3));
    assert_int_equal(y->dtype, AG_I64);
    tu_assert_values(y, 0, 3, 7, 3);
    y = ag_minimum(tu_tensor(AG_I32, AG_SHAPE(3), -5, 7, 2), tu_tensor(AG_I32, AG_SHAPE(1), 3));
    assert_int_equal(y->dtype, AG_I32);
    tu_assert_values(y, 0, -5, 3, 2);
    y = ag_maximum(tu_tensor(AG_BOOL, AG_SHAPE(2), 1, 0), tu_tensor(AG_BOOL, AG_SHAPE(2), 0, 0));
    tu_assert_values(y, 0, 1, 0);
}

/* ---- scalar comparisons ---- */

static void test_scalar_comparisons_of_floats_use_their_dtype(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(4), 0.1, 0.2, 0.3, NAN_);
    tu_assert_values(ag_lt_scalar(x, 0.2), 0, 1, 0, 0, 0);
    tu_assert_values(ag_le_scalar(x, 0.2), 0, 1, 1, 0, 0); /* 0.2 rounded like the data */
    tu_assert_values(ag_gt_scalar(x, 0.2), 0, 0, 0, 1, 0);
    tu_assert_values(ag_ge_scalar(x, 0.2), 0, 0, 1, 1, 0);
    tu_assert_values(ag_ne_scalar(x, 0.2), 0, 1, 0, 1, 1);
    tu_assert_values(ag_eq_scalar(x, 0.2), 0, 0, 1, 0, 0);
    ag_tensor *y = ag_lt_scalar(ag_transpose(tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 2, 3, 4), 0, 1), 2.5);
    assert_int_equal(y->dtype, AG_BOOL);
    tu_assert_shape(y, 2, 2);
    tu_assert_values(y, 0, 1, 0, 1, 0);
}

/* torch: tensor([1,2,3]) < 2.5 is [T,T,F], == 2.5 all false; an i32 tensor < 1e10 all true */
static void test_scalar_comparisons_of_integers_are_exact(void **s) {
    ag_tensor *x = tu_tensor(AG_I64, AG_SHAPE(3), 1, 2, 3);
    tu_assert_values(ag_lt_scalar(x, 2.5), 0, 1, 1, 0);
    tu_assert_values(ag_le_scalar(x, 2.5), 0, 1, 1, 0);
    tu_assert_values(ag_gt_scalar(x, 2.5), 0, 0, 0, 1);
    tu_assert_values(ag_ge_scalar(x, 2), 0, 0, 1, 1);
    tu_assert_values(ag_eq_scalar(x, 2.5), 0, 0, 0, 0);
    tu_assert_values(ag_ne_scalar(x, 2.5), 0, 1, 1, 1);
    tu_assert_values(ag_eq_scalar(x, 2), 0, 0, 1, 0);
    ag_tensor *i = tu_tensor(AG_I32, AG_SHAPE(2), -2147483647 - 1, 2147483647);
    tu_assert_values(ag_lt_scalar(i, 1e10), 0, 1, 1);
    tu_assert_values(ag_gt_scalar(i, -1e10), 0, 1, 1);
    tu_assert_values(ag_eq_scalar(i, 4294967296.0), 0, 0, 0); /* not wrapped to 0 */
    tu_assert_values(ag_ne_scalar(i, NAN_), 0, 1, 1);
    tu_assert_values(ag_lt_scalar(i, NAN_), 0, 0, 0);
    ag_tensor *b = tu_tensor(AG_BOOL, AG_SHAPE(2), 0, 1);
    tu_assert_values(ag_gt_scalar(b, 0.5), 0, 0, 1);
    tu_assert_values(ag_eq_scalar(b, 1), 0, 0, 1);
    tu_assert_values(ag_eq_scalar(b, 2), 0, 0, 0);
}

/* ---- full_like, ones_like ---- */

static void test_full_like_and_ones_like_take_shape_and_dtype_not_strides(void **s) {
    ag_tensor *t = ag_transpose(ag_zeros(AG_I32, AG_SHAPE(2, 3)), 0, 1);
    ag_tensor *f = ag_full_like(t, 7);
    assert_int_equal(f->dtype, AG_I32);
    tu_assert_shape(f, 3, 2);
    assert_true(ag_is_contiguous(f));
    tu_assert_values(f, 0, 7, 7, 7, 7, 7, 7);
    ag_tensor *o = ag_ones_like(tu_leaf(ag_zeros(AG_F64, AG_SHAPE(2))));
    assert_int_equal(o->dtype, AG_F64);
    assert_false(o->requires_grad);
    tu_assert_values(o, 0, 1, 1);
    tu_assert_values(ag_full_like(ag_zeros(AG_BOOL, AG_SHAPE(1)), 3), 0, 1);
    assert_int_equal(ag_ones_like(ag_scalar(AG_F32, 5))->ndim, 0);
}

/* ---- errors ---- */

static void test_errors_name_the_op_and_the_shapes(void **s) {
    ag_tensor *i = ag_zeros(AG_I64, AG_SHAPE(2, 3));
    ag_tensor *(*unary[])(ag_tensor *) = {ag_sin, ag_cos, ag_silu};
    const char *names[] = {"ag_sin", "ag_cos", "ag_silu"};
    for (int k = 0; k < 3; k++) {
        assert_null(unary[k](i));
        tu_assert_error(names[k], "(2,3)", "i64");
    }
    assert_null(ag_leaky_relu(i, 0.1));
    tu_assert_error("ag_leaky_relu", "(2,3)", "i64");
    assert_null(ag_elu(NULL, 1));
    tu_assert_error("ag_elu", "NULL");
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_clamp(x, NAN_, 1));
    tu_assert_error("ag_clamp", "(2,3)", "NaN");
    assert_null(ag_softplus(x, 0, 20));
    tu_assert_error("ag_softplus", "(2,3)", "beta 0");
    assert_null(ag_maximum(x, ag_zeros(AG_F32, AG_SHAPE(4))));
    tu_assert_error("ag_maximum", "(2,3)", "(4)");
    assert_null(ag_minimum(x, ag_zeros(AG_F64, AG_SHAPE(3))));
    tu_assert_error("ag_minimum", "(2,3)", "f32", "(3)", "f64");
    assert_null(ag_lt_scalar(NULL, 1));
    tu_assert_error("ag_lt_scalar", "NULL");
    assert_null(ag_full_like(NULL, 1));
    tu_assert_error("ag_full_like", "NULL");
}

/* ---- gradchecks (f64, PyTorch's tolerances) ---- */

typedef struct {
    int op;
    bool transpose;
} gc_ctx;

enum { G_SIN, G_COS, G_CLAMP, G_CLAMP_MIN, G_LEAKY, G_SILU, G_SOFTPLUS, G_ELU, G_MAXIMUM, G_MINIMUM, G_COUNT };

static ag_tensor *gc_fn(int n, ag_tensor **in, void *vctx) {
    const gc_ctx *c = vctx;
    ag_tensor *x = c->transpose ? ag_transpose(in[0], 0, 1) : in[0];
    switch (c->op) {
    case G_SIN: return ag_sin(x);
    case G_COS: return ag_cos(x);
    case G_CLAMP: return ag_clamp(x, -0.45, 0.55);
    case G_CLAMP_MIN: return ag_clamp(x, 0.05, INFINITY);
    case G_LEAKY: return ag_leaky_relu(x, 0.03);
    case G_SILU: return ag_silu(ag_mul_scalar(x, 4));
    case G_SOFTPLUS: return ag_softplus(x, 3, 1.2); /* linear above x = 0.4 */
    case G_ELU: return ag_elu(x, 1.7);
    case G_MAXIMUM: return ag_maximum(x, in[1]);
    case G_MINIMUM: return ag_minimum(x, in[1]);
    }
    return NULL;
}

static void test_gradcheck_every_pointwise_op(void **s) {
    for (int op = 0; op < G_COUNT; op++)
        for (int tr = 0; tr < 2; tr++) {
            gc_ctx c = {op, tr};
            /* sin(0.9 i + 0.2): no element within 1e-3 of 0 or of a bound */
            ag_tensor *in[2] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 3), 0.9, 0.2)),
                                tu_leaf(tu_seq(AG_F64, 1, (int64_t[]){tr ? 4 : 3}, 1.3, 0.45))};
            tu_assert_gradcheck(gc_fn, &c, op >= G_MAXIMUM ? 2 : 1, in);
        }
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_sin_and_cos_match_libm_in_f32_and_f64),
        T(test_unary_ops_of_transposed_inputs),
        T(test_clamp_passes_the_gradient_at_the_bounds_and_keeps_nan),
        T(test_clamp_with_one_bound),
        T(test_clamp_with_min_above_max_gives_max),
        T(test_leaky_relu_slope_applies_at_zero_and_to_nan),
        T(test_elu_matches_pytorch_at_zero_and_nan),
        T(test_softplus_switches_to_linear_above_the_threshold),
        T(test_silu_matches_pytorch_and_stays_finite),
        T(test_maximum_and_minimum_split_ties_and_propagate_nan),
        T(test_maximum_broadcasts_and_sums_gradients_back),
        T(test_maximum_and_minimum_of_integers_and_bools),
        T(test_scalar_comparisons_of_floats_use_their_dtype),
        T(test_scalar_comparisons_of_integers_are_exact),
        T(test_full_like_and_ones_like_take_shape_and_dtype_not_strides),
        T(test_errors_name_the_op_and_the_shapes),
        T(test_gradcheck_every_pointwise_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
