/* ag_gradcheck itself (it must be able to fail), and finite-difference checks of every
 * elementwise op and view, with non-contiguous and broadcast inputs. Reductions, matmul and
 * indexing ops are checked in their own test files. */
#include <math.h>
#include <string.h>

#include "test_util.h"
#include "../tensor/node.h"

/* ---- a custom op with a deliberately wrong backward: y = x², dx = g·x (should be 2·g·x) ---- */

static void wrong_square_backward(ag_node *n) { ag_accum_grad(n->in[0], ag_mul(n->out->grad, n->in[0])); }
static const ag_op WRONG_SQUARE = {"wrong_square", wrong_square_backward, AG_SAVES_INPUT(0)};
static ag_tensor *wrong_square(ag_tensor *x) {
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_mul(x, x);
    ag_set_grad_enabled(prev);
    ag_finish(&WRONG_SQUARE, y, 1, &x);
    return y;
}
static ag_tensor *f_wrong(int n, ag_tensor **in, void *ctx) { return wrong_square(in[0]); }
static ag_tensor *f_right(int n, ag_tensor **in, void *ctx) { return ag_mul(in[0], in[0]); }

static ag_tensor *input(ag_rng *r, int ndim, const int64_t *shape) {
    ag_tensor *t = ag_uniform(r, AG_F64, ndim, shape, -1, 1);
    ag_requires_grad_(t, true);
    return t;
}

static void test_gradcheck_fails_on_a_wrong_backward_and_says_where(void **s) {
    ag_rng r = ag_rng_new(1);
    ag_tensor *x = input(&r, AG_SHAPE(2, 3));
    ag_gradcheck_result res = ag_gradcheck(f_wrong, NULL, 1, &x, NULL);
    assert_false(res.ok);
    assert_int_equal(res.input, 0);
    assert_int_equal(res.index, 0);
    assert_int_equal(res.out_index, 0);
    /* numerical is 2x, analytic x */
    double x0 = ag_get(x, (int64_t[]){0, 0});
    assert_true(fabs(res.numerical - 2 * x0) < 1e-6);
    assert_true(fabs(res.analytic - x0) < 1e-12);
    assert_non_null(strstr(res.message, "input 0 (2,3) element [0,0]"));
    assert_non_null(strstr(res.message, "numerical"));
    assert_non_null(strstr(res.message, "analytic"));
    /* the same op with the right backward passes */
    res = ag_gradcheck(f_right, NULL, 1, &x, NULL);
    if (!res.ok) fail_msg("%s", res.message);
}

static void test_fast_gradcheck_fails_on_a_wrong_backward(void **s) {
    ag_rng r = ag_rng_new(2);
    ag_tensor *x = input(&r, AG_SHAPE(4, 5));
    ag_gradcheck_opts o = {.fast = true, .seed = 9};
    ag_gradcheck_result res = ag_gradcheck(f_wrong, NULL, 1, &x, &o);
    assert_false(res.ok);
    assert_non_null(strstr(res.message, "(fast)"));
    res = ag_gradcheck(f_right, NULL, 1, &x, &o);
    if (!res.ok) fail_msg("%s", res.message);
}

static void test_gradcheck_restores_inputs_and_their_grads(void **s) {
    ag_rng r = ag_rng_new(3);
    ag_tensor *x = input(&r, AG_SHAPE(3));
    double before[3], after[3];
    ag_to_buffer(x, AG_F64, before);
    ag_fill_(ag_grad_buffer(x), 7.0);
    ag_gradcheck_result res = ag_gradcheck(f_right, NULL, 1, &x, NULL);
    assert_true(res.ok);
    ag_to_buffer(x, AG_F64, after);
    assert_memory_equal(before, after, sizeof before);
    tu_assert_values(x->grad, 0, 7, 7, 7);
}

static void test_gradcheck_refuses_f32_inputs_and_nothing_to_check(void **s) {
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(2));
    ag_requires_grad_(x, true);
    ag_gradcheck_result res = ag_gradcheck(f_right, NULL, 1, &x, NULL);
    assert_false(res.ok);
    assert_non_null(strstr(res.message, "f64"));
    ag_tensor *y = ag_ones(AG_F64, AG_SHAPE(2));
    res = ag_gradcheck(f_right, NULL, 1, &y, NULL);
    assert_false(res.ok);
    assert_non_null(strstr(res.message, "no input requires grad"));
}

/* ---- every elementwise op and view ---- */

typedef struct {
    const char *name;
    ag_tensor *(*f)(int n, ag_tensor **in, void *ctx);
    int nin;
    int ndim[3];
    int64_t shape[3][4];
    double lo, hi; /* input range (keeps log/sqrt/pow/div away from their poles) */
} case_t;

/* inputs are used through a transposed view when ctx is non-NULL, to exercise strides */
static ag_tensor *T(ag_tensor *t, void *ctx) { return ctx && t->ndim >= 2 ? ag_transpose(t, 0, 1) : t; }

#define UN(op) \
    static ag_tensor *f_##op(int n, ag_tensor **in, void *ctx) { return ag_##op(T(in[0], ctx)); }
UN(neg) UN(exp) UN(log) UN(sqrt) UN(abs) UN(tanh) UN(sigmoid) UN(relu) UN(gelu) UN(gelu_tanh)
#define SC(op, v) \
    static ag_tensor *f_##op(int n, ag_tensor **in, void *ctx) { return ag_##op(T(in[0], ctx), v); }
SC(add_scalar, 1.5) SC(sub_scalar, 0.25) SC(rsub_scalar, 2.0) SC(mul_scalar, -3.0) SC(div_scalar, 4.0)
SC(pow_scalar, 3.0)
#define BIN(op) \
    static ag_tensor *f_##op(int n, ag_tensor **in, void *ctx) { return ag_##op(T(in[0], ctx), T(in[1], ctx)); }
BIN(add) BIN(sub) BIN(mul) BIN(div) BIN(pow)

static ag_tensor *f_pow_scalar_half(int n, ag_tensor **in, void *ctx) { return ag_pow_scalar(in[0], 0.5); }
static ag_tensor *f_where(int n, ag_tensor **in, void *ctx) {
    ag_tensor *c = ag_gt(in[0], ag_scalar(AG_F64, 0));
    return ag_where(c, T(in[0], ctx), in[1]);
}
static ag_tensor *f_masked_fill(int n, ag_tensor **in, void *ctx) {
    ag_tensor *m = ag_lt(in[1], ag_scalar(AG_F64, 0)); /* (3): broadcast over rows */
    return ag_masked_fill(in[0], m, -2.5);
}
static ag_tensor *f_expand_mul(int n, ag_tensor **in, void *ctx) {
    ag_tensor *e = ag_expand(in[0], AG_SHAPE(2, 4, 3)); /* (4,1) → stride-0 dims */
    return ag_mul(e, in[1]);
}
static ag_tensor *f_views(int n, ag_tensor **in, void *ctx) {
    ag_tensor *x = in[0]; /* (2,3,4) */
    ag_tensor *v = ag_permute(x, (int[]){2, 0, 1});      /* (4,2,3) */
    v = ag_slice(v, 0, 1, 4, 2);                         /* (2,2,3) rows 1,3 */
    v = ag_reshape(v, AG_SHAPE(4, 3));                   /* copy: not viewable */
    v = ag_unsqueeze(ag_select(v, 1, 2), 0);             /* (1,4) */
    v = ag_squeeze(v, 0);                                /* (4) */
    return ag_mul(v, ag_exp(v));
}
static ag_tensor *f_reshape_of_narrow(int n, ag_tensor **in, void *ctx) {
    ag_tensor *v = ag_reshape(ag_narrow(in[0], 2, 1, 2), AG_SHAPE(-1)); /* copy path */
    ag_tensor *c = ag_contiguous(ag_transpose(in[0], 1, 2));
    return ag_add(ag_sum(ag_mul(v, v), 0, NULL, false), ag_sum(ag_tanh(ag_view(c, AG_SHAPE(24))), 0, NULL, false));
}
static ag_tensor *f_clone(int n, ag_tensor **in, void *ctx) { return ag_mul(ag_clone(T(in[0], ctx)), in[0]); }

static const case_t cases[] = {
    {"neg", f_neg, 1, {2}, {{3, 4}}, -1, 1},
    {"exp", f_exp, 1, {2}, {{3, 4}}, -1, 1},
    {"log", f_log, 1, {2}, {{3, 4}}, 0.5, 2},
    {"sqrt", f_sqrt, 1, {2}, {{3, 4}}, 0.5, 2},
    {"abs", f_abs, 1, {2}, {{3, 4}}, 0.1, 1}, /* away from the kink at 0 */
    {"tanh", f_tanh, 1, {2}, {{3, 4}}, -2, 2},
    {"sigmoid", f_sigmoid, 1, {2}, {{3, 4}}, -3, 3},
    {"relu", f_relu, 1, {2}, {{3, 4}}, -1, 1},
    {"gelu", f_gelu, 1, {2}, {{3, 4}}, -3, 3},
    {"gelu_tanh", f_gelu_tanh, 1, {2}, {{3, 4}}, -3, 3},
    {"add_scalar", f_add_scalar, 1, {2}, {{3, 4}}, -1, 1},
    {"sub_scalar", f_sub_scalar, 1, {2}, {{3, 4}}, -1, 1},
    {"rsub_scalar", f_rsub_scalar, 1, {2}, {{3, 4}}, -1, 1},
    {"mul_scalar", f_mul_scalar, 1, {2}, {{3, 4}}, -1, 1},
    {"div_scalar", f_div_scalar, 1, {2}, {{3, 4}}, -1, 1},
    {"pow_scalar", f_pow_scalar, 1, {2}, {{3, 4}}, -2, 2},
    {"pow_scalar_half", f_pow_scalar_half, 1, {1}, {{5}}, 0.5, 2},
    {"add_broadcast", f_add, 2, {2, 2}, {{3, 4}, {1, 4}}, -1, 1},
    {"sub_broadcast", f_sub, 2, {2, 1}, {{4, 4}, {4}}, -1, 1},
    {"mul_broadcast", f_mul, 2, {2, 2}, {{3, 1}, {1, 4}}, -1, 1},
    {"div", f_div, 2, {2, 2}, {{3, 4}, {3, 4}}, 0.5, 2},
    {"pow", f_pow, 2, {2, 2}, {{3, 4}, {3, 1}}, 0.5, 2},
    {"where", f_where, 2, {2, 2}, {{3, 3}, {1, 3}}, -1, 1},
    {"masked_fill", f_masked_fill, 2, {2, 1}, {{2, 3}, {3}}, -1, 1},
    {"expand", f_expand_mul, 2, {2, 3}, {{4, 1}, {2, 4, 3}}, -1, 1},
    {"views", f_views, 1, {3}, {{2, 3, 4}}, -1, 1},
    {"reshape_copy_contiguous", f_reshape_of_narrow, 1, {3}, {{2, 3, 4}}, -1, 1},
    {"clone", f_clone, 1, {2}, {{3, 3}}, -1, 1},
};

static void run_case(const case_t *c, void *ctx) {
    ag_rng r = ag_rng_new(42);
    ag_tensor *in[3];
    for (int i = 0; i < c->nin; i++) in[i] = input(&r, c->ndim[i], c->shape[i]);
    for (int i = 0; i < c->nin; i++) {
        /* rescale into the case's range */
        ag_tensor *t = in[i];
        double *d = (double *)t->data;
        for (int64_t k = 0; k < ag_numel(t); k++) d[k] = c->lo + (c->hi - c->lo) * (d[k] + 1) / 2;
    }
    ag_gradcheck_result res = ag_gradcheck(c->f, ctx, c->nin, in, NULL);
    if (!res.ok) fail_msg("%s%s: %s", c->name, ctx ? " (transposed inputs)" : "", res.message);
}

static void test_every_elementwise_op_and_view_passes_gradcheck(void **s) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], NULL);
        assert_int_equal(tu_error_count(), 0);
    }
}

/* the same cases with every 2-d input used through its transpose (strided, not contiguous) */
static void test_elementwise_ops_pass_gradcheck_on_transposed_inputs(void **s) {
    static int on = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], &on);
        assert_int_equal(tu_error_count(), 0);
    }
}

/* f64 → f32 → f64 passes the gradient through both conversions (finite differences cannot
 * see through f32 rounding, so this one is hand-worked) */
static void test_dtype_conversion_passes_gradient_back_in_the_input_dtype(void **s) {
    ag_tensor *x = ag_ones(AG_F64, AG_SHAPE(3));
    ag_requires_grad_(x, true);
    ag_tensor *y = ag_to(ag_mul_scalar(ag_to(x, AG_F32), 3.0), AG_F64);
    ag_backward(ag_sum(y, 0, NULL, false), NULL);
    assert_int_equal(x->grad->dtype, AG_F64);
    tu_assert_values(x->grad, 0, 3, 3, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gradcheck_fails_on_a_wrong_backward_and_says_where, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_fast_gradcheck_fails_on_a_wrong_backward, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gradcheck_restores_inputs_and_their_grads, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gradcheck_refuses_f32_inputs_and_nothing_to_check, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_every_elementwise_op_and_view_passes_gradcheck, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_elementwise_ops_pass_gradcheck_on_transposed_inputs, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_dtype_conversion_passes_gradient_back_in_the_input_dtype, tu_setup,
                                        tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
