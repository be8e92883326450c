/* ag_recompute (activation recomputation): the same values and gradients as the plain
 * computation, the intermediates forgotten after forward, dropout's masks drawn again the same. */
#include <math.h>
#include <stdlib.h>

#include "test_util.h"

/* a and b hold the same values within rtol (0: exactly) */
static bool near(const ag_tensor *a, const ag_tensor *b, double rtol) {
    int64_t n = ag_numel(a);
    if (!a || !b || n != ag_numel(b)) return false;
    double *u = malloc(sizeof(double) * (size_t)n), *v = malloc(sizeof(double) * (size_t)n);
    ag_to_buffer(a, AG_F64, u);
    ag_to_buffer(b, AG_F64, v);
    bool eq = true;
    for (int64_t i = 0; i < n; i++) eq &= fabs(u[i] - v[i]) <= rtol * fabs(v[i]);
    free(u);
    free(v);
    return eq;
}

/* y = dropout(relu(x wᵀ + b)) * x : reads its input twice, draws from an rng, has parameters */
typedef struct {
    ag_tensor *w, *b;
    ag_rng *rng;
    double p;
} block_ctx;

static ag_tensor *block(void *ctx, ag_tensor *const *in) {
    const block_ctx *c = ctx;
    ag_tensor *h = ag_dropout(ag_relu(ag_linear(in[0], c->w, c->b)), c->p, true, c->rng);
    return ag_mul(h, in[0]);
}

/* sum((block(x) + x)²), block recomputed or not */
static ag_tensor *loss(ag_tensor *x, const block_ctx *c, bool recompute) {
    ag_tensor *y = recompute ? ag_recompute(block, c, sizeof *c, 1, &x, c->rng) : block((void *)c, &x);
    return ag_sum(ag_mul(ag_add(y, x), ag_add(y, x)), 0, NULL, false);
}

static void test_recompute_gives_the_plain_values_and_gradients_with_the_same_dropout_masks(void **s) {
    (void)s;
    ag_tensor *w = tu_leaf(tu_seq(AG_F64, AG_SHAPE(6, 6), 0.7, 0.1)), *b = tu_leaf(tu_seq(AG_F64, AG_SHAPE(6), 1.3, 0.2));
    ag_tensor *x[2], *l[2], *gw[2], *gb[2];
    for (int r = 0; r < 2; r++) {
        ag_rng rng = ag_rng_new(7);
        block_ctx c = {w, b, &rng, 0.4};
        x[r] = ag_mul_scalar(tu_leaf(tu_seq(AG_F64, AG_SHAPE(5, 6), 0.37, 0.5)), 1.0); /* a non-leaf input */
        ag_retain_grad(x[r]);
        w->grad = b->grad = NULL;
        l[r] = loss(x[r], &c, r == 1);
        ag_rng_uniform_f64(&rng, 3, (double[3]){0}); /* the generator moves on before backward */
        ag_backward(l[r], NULL);
        gw[r] = w->grad;
        gb[r] = b->grad;
        assert_int_equal(tu_error_count(), 0);
    }
    assert_true(ag_item(l[0]) > 1);
    assert_true(near(l[1], l[0], 0));
    /* x's gradient sums the same terms, the block's two grouped first: rounding may differ */
    assert_true(near(x[1]->grad, x[0]->grad, 1e-14));
    assert_true(near(gw[1], gw[0], 0));
    assert_true(near(gb[1], gb[0], 0));
}

static ag_tensor *f_loss(int n, ag_tensor **in, void *ctx) {
    (void)n;
    block_ctx c = *(block_ctx *)ctx;
    c.w = in[1];
    c.b = in[2];
    *c.rng = ag_rng_new(3); /* every evaluation draws the same masks; the generator outlives backward */
    return loss(in[0], &c, true);
}

static void test_recompute_gradcheck_over_input_and_parameters(void **s) {
    (void)s;
    ag_rng rng;
    block_ctx c = {.p = 0.3, .rng = &rng};
    ag_tensor *in[3] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 5), 0.41, 0.3)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(5, 5), 0.9, 0.7)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(5), 1.1, 0.4))};
    tu_assert_gradcheck(f_loss, &c, 3, in);
}

static void test_recompute_keeps_only_the_output_after_forward(void **s) {
    (void)s;
    ag_tensor *w = tu_leaf(tu_seq(AG_F32, AG_SHAPE(256, 256), 0.7, 0.1)), *b = tu_leaf(tu_seq(AG_F32, AG_SHAPE(256), 1.3, 0.2));
    ag_tensor *x = tu_seq(AG_F32, AG_SHAPE(64, 256), 0.37, 0.5);
    ag_rng rng = ag_rng_new(1);
    block_ctx c = {w, b, &rng, 0.1};
    ag_arena *a = ag_arena_current();
    size_t used[2];
    for (int r = 0; r < 2; r++) {
        size_t before = ag_arena_used(a);
        ag_tensor *y = r ? ag_recompute(block, &c, sizeof c, 1, &x, &rng) : block(&c, &x);
        assert_non_null(y);
        assert_true(y->requires_grad);
        used[r] = ag_arena_used(a) - before;
    }
    size_t out = 64 * 256 * sizeof(float);
    /* plain: the output, the linear's and relu's outputs and dropout's mask, at least 3 outputs' worth */
    assert_true(used[0] >= 3 * out);
    /* recomputed: the output and the node (with a copy of the context), within 1 KiB */
    assert_true(used[1] >= out && used[1] <= out + 1024);
}

/* recompute of a function that itself recomputes: passes nest */
static ag_tensor *outer_block(void *ctx, ag_tensor *const *in) {
    const block_ctx *c = ctx;
    ag_tensor *x = in[0];
    return ag_add(ag_recompute(block, c, sizeof *c, 1, &x, c->rng), x);
}

/* the gradients of x and w of sum(f(x)²) for a 4x4 block: f plain (r 0) and recomputed (r 1)
 * must agree (x's terms may be grouped otherwise) */
typedef ag_tensor *(*block_use)(block_ctx *c, ag_tensor *x, bool recompute);

static void assert_recomputed_gradients_match(ag_tensor *w, ag_tensor *b, block_use f) {
    ag_tensor *gx[2], *gw[2];
    for (int r = 0; r < 2; r++) {
        ag_rng rng = ag_rng_new(11);
        block_ctx c = {w, b, &rng, 0.25};
        ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4), 0.37, 0.5));
        w->grad = NULL;
        ag_tensor *y = f(&c, x, r == 1);
        ag_backward(ag_sum(ag_mul(y, y), 0, NULL, false), NULL);
        gx[r] = x->grad;
        gw[r] = w->grad;
    }
    assert_int_equal(tu_error_count(), 0);
    assert_true(near(gx[1], gx[0], 1e-14));
    assert_true(near(gw[1], gw[0], 0));
}

/* block(x) + x, the block recomputing its own block inside */
static ag_tensor *nested_use(block_ctx *c, ag_tensor *x, bool recompute) {
    return recompute ? ag_recompute(outer_block, c, sizeof *c, 1, &x, c->rng) : ag_add(block(c, &x), x);
}

static void test_nested_recompute_matches_the_plain_gradients(void **s) {
    (void)s;
    ag_tensor *w = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 4), 0.7, 0.1)), *b = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4), 1.3, 0.2));
    assert_recomputed_gradients_match(w, b, nested_use);
}

/* a tensor that requires grad read from the context instead of the inputs would lose its
 * gradient: refused */
static ag_tensor *reads_ctx_tensor(void *ctx, ag_tensor *const *in) { return ag_mul(in[0], *(ag_tensor **)ctx); }

static ag_tensor *identity(void *ctx, ag_tensor *const *in) {
    (void)ctx;
    return in[0];
}

static void test_recompute_of_a_function_handing_back_its_input_returns_it(void **s) {
    (void)s;
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 3, 4));
    ag_tensor *y = ag_recompute(identity, NULL, 0, 1, &x, NULL);
    assert_ptr_equal(y, x);
    ag_backward(ag_sum(ag_mul(y, y), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 0, 6, 8);
}

static void test_recompute_refuses_a_function_reading_a_graph_tensor_outside_its_inputs(void **s) {
    (void)s;
    ag_tensor *x = tu_leaf(ag_ones(AG_F64, AG_SHAPE(3)));
    ag_tensor *hidden = ag_mul_scalar(tu_leaf(ag_ones(AG_F64, AG_SHAPE(3))), 2.0);
    assert_null(ag_recompute(reads_ctx_tensor, &hidden, sizeof hidden, 1, &x, NULL));
    tu_assert_error("ag_recompute", "not one of its 1 inputs");
    /* without grad mode it is a plain call */
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_recompute(reads_ctx_tensor, &hidden, sizeof hidden, 1, &x, NULL);
    ag_set_grad_enabled(prev);
    tu_assert_values(y, 0, 2, 2, 2);
    assert_false(y->requires_grad);
}

/* block(x') + x' added into the block's output in place, x' = x * 1 (a non-leaf) */
static ag_tensor *residual_use(block_ctx *c, ag_tensor *x, bool recompute) {
    ag_tensor *xr = ag_mul_scalar(x, 1.0);
    ag_tensor *yr = recompute ? ag_recompute(block, c, sizeof *c, 1, &xr, c->rng) : block(c, &xr);
    return ag_add_(yr, xr);
}

/* The version check (tensor/node.h) on a recomputed block: backward reads its inputs and
 * parameters again, so changing one in place is reported; not its output, so adding into that in
 * place (as the Transformer's residual does) is legal and gives the plain gradients. */
static void test_recompute_checks_its_inputs_and_parameters_and_lets_its_output_change_in_place(void **s) {
    (void)s;
    ag_tensor *w = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 4), 0.7, 0.1)), *b = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4), 1.3, 0.2));
    ag_rng rng = ag_rng_new(5);
    block_ctx c = {w, b, &rng, 0.25};
    ag_tensor *x = ag_mul_scalar(tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4), 0.37, 0.5)), 1.0);
    ag_tensor *y = ag_recompute(block, &c, sizeof c, 1, &x, &rng);
    ag_mul_scalar_(x, 2);
    ag_backward(ag_sum(y, 0, NULL, false), NULL);
    tu_assert_error("ag_recompute", "its input 0, (3,4) f64 (the output of ag_mul_scalar)", "at version 1",
                    "expected version 0");
    assert_null(w->grad);
    /* so are the parameters fn reads (the node lists them among its inputs): one updated in place */
    x = ag_mul_scalar(tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4), 0.37, 0.5)), 1.0);
    y = ag_recompute(block, &c, sizeof c, 1, &x, &rng);
    bool prev = ag_set_grad_enabled(false);
    ag_mul_scalar_(w, 0.5);
    ag_set_grad_enabled(prev);
    ag_backward(ag_sum(y, 0, NULL, false), NULL);
    tu_assert_error("ag_recompute", "(4,4) f64 (a leaf)", "at version 1", "expected version 0");
    prev = ag_set_grad_enabled(false);
    ag_mul_scalar_(w, 2); /* back to its values (exactly: a power of two) */
    ag_set_grad_enabled(prev);
    assert_recomputed_gradients_match(w, b, residual_use);
}

/* A version check failing in the graph a recompute builds in backward (fn changes exp's output
 * in place) stops the outer pass too, as torch's exception would: nothing after it runs. */
static ag_tensor *doubles_exp_in_place(void *ctx, ag_tensor *const *in) {
    (void)ctx;
    return ag_mul_scalar_(ag_exp(in[0]), 2);
}

static void test_a_version_error_inside_a_recomputed_graph_stops_the_outer_pass(void **s) {
    (void)s;
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 0, 1));
    ag_tensor *z = ag_mul_scalar(x, 3); /* recorded first: its backward comes after the block's */
    ag_tensor *y = ag_recompute(doubles_exp_in_place, NULL, 0, 1, &x, NULL);
    ag_backward(ag_sum(ag_add(y, z), 0, NULL, false), NULL);
    tu_assert_error("ag_exp", "its output (2) f64", "at version 1", "expected version 0");
    tu_assert_values(x->grad, 0, 0, 0); /* made for the block's backward, which added nothing; z's never ran */
    ag_backward(ag_sum(z, 0, NULL, false), NULL); /* and the next pass runs whole */
    tu_assert_values(x->grad, 0, 3, 3);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_recompute_gives_the_plain_values_and_gradients_with_the_same_dropout_masks),
        T(test_recompute_gradcheck_over_input_and_parameters),
        T(test_recompute_keeps_only_the_output_after_forward),
        T(test_nested_recompute_matches_the_plain_gradients),
        T(test_recompute_refuses_a_function_reading_a_graph_tensor_outside_its_inputs),
        T(test_recompute_of_a_function_handing_back_its_input_returns_it),
        T(test_recompute_checks_its_inputs_and_parameters_and_lets_its_output_change_in_place),
        T(test_a_version_error_inside_a_recomputed_graph_stops_the_outer_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
