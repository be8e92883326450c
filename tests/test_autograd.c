/* The backward engine: accumulation, no-grad, detach, views and broadcasting reduce gradients,
 * anomaly mode, thread independence, and a small MLP trained with no allocation per step. */
#include <math.h>
#include <stdlib.h>
#include <omp.h>
#include <string.h>

#include "test_util.h"

/* y = sum(x * x) → dy/dx = 2x, and a second backward adds another 2x */
static void test_backward_accumulates_across_calls_until_zeroed(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, -2, 3));
    ag_backward(ag_sum(ag_mul(x, x), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 0, 2, -4, 6);
    ag_backward(ag_sum(ag_mul(x, x), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 0, 4, -8, 12);
    ag_zero_grad_(x);
    ag_backward(ag_sum(ag_mul_scalar(x, 3), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 0, 3, 3, 3);
}

/* Two backward passes over one graph: intermediate grads restart from zero each pass, so the
 * leaf gets exactly twice the single-pass gradient. */
static void test_second_backward_over_same_graph_does_not_double_count_intermediates(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 1, 2));
    ag_tensor *h = ag_exp(x); /* intermediate */
    ag_tensor *y = ag_sum(ag_mul(h, h), 0, NULL, false);
    ag_backward(y, NULL);
    double g1[2] = {2 * exp(2.0), 2 * exp(4.0)};
    tu_assert_values(x->grad, 1e-9, g1[0], g1[1]);
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 1e-9, 2 * g1[0], 2 * g1[1]);
}

static void test_no_grad_records_nothing(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(2), 1, 2));
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_mul(x, x);
    ag_set_grad_enabled(prev);
    assert_null(y->node);
    assert_false(y->requires_grad);
    ag_tensor *z = ag_mul(x, x);
    assert_non_null(z->node);
    assert_string_equal(z->node->op->name, "ag_mul");
    /* backward of a no-grad result is misuse, named as such */
    ag_backward(ag_sum(y, 0, NULL, false), NULL);
    tu_assert_error("ag_backward", "does not require grad");
}

static void test_detach_stops_gradients(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 3, 4));
    /* y = x * detach(x): dy/dx = detach(x) only */
    ag_tensor *y = ag_sum(ag_mul(x, ag_detach(x)), 0, NULL, false);
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 0, 3, 4);
    ag_tensor *d = ag_detach(x);
    assert_ptr_equal(d->data, x->data);
    assert_null(d->node);
    assert_false(d->requires_grad);
}

static void test_broadcast_gradient_is_summed_to_input_shape(void **s) {
    ag_tensor *a = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 10, 20, 30));
    ag_tensor *c = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 1), 100, 200));
    ag_backward(ag_sum(ag_mul(ag_add(a, b), c), 0, NULL, false), NULL);
    tu_assert_values(a->grad, 0, 100, 100, 100, 200, 200, 200);
    tu_assert_values(b->grad, 0, 300, 300, 300);
    tu_assert_values(c->grad, 0, 1 + 2 + 3 + 60, 4 + 5 + 6 + 60);
}

static void test_gradient_flows_through_views_into_the_right_elements(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    /* select column 1 of the transpose's row... i.e. x[:, 1], then narrow and weight */
    ag_tensor *col = ag_select(ag_transpose(x, 0, 1), 0, 1); /* (2): x[0][1], x[1][1] */
    ag_tensor *w = tu_tensor(AG_F64, AG_SHAPE(2), 10, 100);
    ag_tensor *row = ag_slice(x, 1, 0, 3, 2); /* (2,2): columns 0 and 2 */
    ag_tensor *y = ag_add(ag_sum(ag_mul(col, w), 0, NULL, false), ag_sum(row, 0, NULL, false));
    ag_backward(y, NULL);
    tu_assert_values(x->grad, 0, 1, 10, 1, 1, 100, 1);
}

static void test_explicit_output_gradient(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 1, 2));
    ag_tensor *y = ag_mul_scalar(x, 5);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2), 1, -1));
    tu_assert_values(x->grad, 0, 5, -5);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(3), 1, 1, 1));
    tu_assert_error("ag_backward", "(3)", "(2)");
    ag_backward(y, NULL);
    tu_assert_error("ag_backward", "2 elements");
}

static void test_requires_grad_only_on_float_leaves(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 1, 2));
    ag_requires_grad_(ag_exp(x), true);
    tu_assert_error("ag_requires_grad_", "not a leaf", "ag_exp");
    ag_requires_grad_(ag_zeros(AG_I64, AG_SHAPE(2)), true);
    tu_assert_error("ag_requires_grad_", "i64");
}

static void test_frozen_parameter_gets_no_gradient_and_records_nothing(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(2)), *b = ag_params_add(p, "b", AG_SHAPE(2));
    ag_fill_(w, 2.0);
    ag_fill_(b, 1.0);
    ag_requires_grad_(w, false); /* frozen, e.g. a pretrained embedding */
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2), 3, 4);
    ag_tensor *y = ag_sum(ag_add(ag_mul(w, x), b), 0, NULL, false);
    ag_backward(y, NULL);
    tu_assert_values(w->grad, 0, 0, 0);
    tu_assert_values(b->grad, 0, 1, 1);
    /* nothing that depends only on frozen tensors is recorded */
    assert_null(ag_mul(w, x)->node);
    ag_requires_grad_(w, true);
    ag_backward(ag_sum(ag_mul(w, x), 0, NULL, false), NULL);
    tu_assert_values(w->grad, 0, 3, 4);
    ag_params_free(p);
}

static void test_anomaly_mode_names_the_op_that_made_a_nan(void **s) {
    ag_set_anomaly_enabled(true);
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, -1, 2));
    ag_tensor *y = ag_log(x);
    ag_set_anomaly_enabled(false);
    tu_assert_error("ag_log", "anomaly in forward", "(3)", "has NaN at flat index 1");
    (void)y;
}

static void test_anomaly_mode_catches_nan_in_backward(void **s) {
    /* sqrt at 0 is finite forward (0) but its gradient is inf */
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 4, 0));
    ag_set_anomaly_enabled(true);
    ag_tensor *y = ag_sum(ag_sqrt(x), 0, NULL, false);
    assert_int_equal(tu_error_count(), 0);
    ag_backward(y, NULL);
    ag_set_anomaly_enabled(false);
    tu_assert_error("ag_sqrt", "anomaly in backward", "input 0", "has Inf at flat index 1");
}

/* a deterministic loss big enough to cross the OpenMP thresholds */
static void backward_big(double *out, int threads) {
    omp_set_num_threads(threads);
    ag_rng r = ag_rng_new(7);
    ag_tensor *a = tu_leaf(ag_randn(&r, AG_F32, AG_SHAPE(256, 300)));
    ag_tensor *b = tu_leaf(ag_randn(&r, AG_F32, AG_SHAPE(300)));
    ag_tensor *h = ag_tanh(ag_add(a, b));
    ag_tensor *y = ag_mean(ag_mul(ag_softmax(h, -1), ag_sigmoid(h)), 0, NULL, false);
    ag_backward(y, NULL);
    ag_to_buffer(a->grad, AG_F64, out);
    ag_to_buffer(b->grad, AG_F64, out + 256 * 300);
}

static void test_backward_is_identical_for_one_and_two_threads(void **s) {
    size_t n = 256 * 300 + 300;
    double *g1 = malloc(n * sizeof(double)), *g2 = malloc(n * sizeof(double));
    backward_big(g1, 1);
    backward_big(g2, 2);
    omp_set_num_threads(2);
    assert_memory_equal(g1, g2, n * sizeof(double));
    free(g1);
    free(g2);
}

/* ---- a 2-layer MLP on a fixed regression problem, trained with SGD over the flat slab ---- */

typedef struct {
    ag_params *p;
    ag_tensor *w1, *b1, *w2, *b2;
} mlp;

static mlp mlp_new(ag_dtype dt, uint64_t seed) {
    mlp m;
    m.p = ag_params_new(dt);
    m.w1 = ag_params_add(m.p, "0.weight", AG_SHAPE(8, 3));
    m.b1 = ag_params_add(m.p, "0.bias", AG_SHAPE(8));
    m.w2 = ag_params_add(m.p, "2.weight", AG_SHAPE(1, 8));
    m.b2 = ag_params_add(m.p, "2.bias", AG_SHAPE(1));
    ag_rng r = ag_rng_new(seed);
    ag_uniform_(&r, m.p->flat, -0.5, 0.5);
    return m;
}

/* (N,3) → (N,1): tanh(x W1ᵀ + b1) W2ᵀ + b2 */
static ag_tensor *mlp_forward(mlp *m, ag_tensor *x) {
    ag_tensor *h = ag_tanh(ag_add(ag_matmul(x, ag_transpose(m->w1, 0, 1)), m->b1));
    return ag_add(ag_matmul(h, ag_transpose(m->w2, 0, 1)), m->b2);
}

static ag_tensor *mlp_loss(mlp *m, ag_tensor *x, ag_tensor *t) {
    ag_tensor *d = ag_sub(mlp_forward(m, x), t);
    return ag_mean(ag_mul(d, d), 0, NULL, false);
}

typedef struct {
    mlp *m;
    ag_tensor *x, *t;
} mlp_ctx;

static ag_tensor *mlp_loss_fn(int n, ag_tensor **in, void *ctx) {
    mlp_ctx *c = ctx;
    return mlp_loss(c->m, c->x, c->t);
}

static void make_data(ag_dtype dt, ag_tensor **x, ag_tensor **t) {
    ag_rng r = ag_rng_new(3);
    *x = ag_uniform(&r, dt, AG_SHAPE(16, 3), -1, 1);
    /* target: a smooth function of the inputs */
    ag_tensor *s = ag_sum(*x, 1, (int[]){1}, true);
    *t = ag_add(ag_mul_scalar(ag_tanh(ag_mul_scalar(s, 2)), 0.5), ag_mul_scalar(s, 0.1));
}

static void test_mlp_loss_goes_down_and_gradients_match_gradcheck(void **s) {
    ag_tensor *x, *t;
    make_data(AG_F64, &x, &t);
    mlp m = mlp_new(AG_F64, 11);
    mlp_ctx c = {&m, x, t};
    /* parameters as the gradcheck's inputs: the whole model is checked */
    ag_gradcheck_result r = ag_gradcheck(mlp_loss_fn, &c, m.p->count, m.p->list, NULL);
    assert_true(r.ok);
    if (!r.ok) fail_msg("%s", r.message);

    ag_arena *step = ag_arena_new(1 << 16);
    ag_arena *prev = ag_arena_use(step);
    double first = 0, last = 0;
    for (int it = 0; it < 200; it++) {
        ag_params_zero_grad(m.p);
        ag_tensor *loss = mlp_loss(&m, x, t);
        ag_backward(loss, NULL);
        double l = ag_item(loss);
        if (it == 0) first = l;
        last = l;
        double *w = (double *)m.p->data, *g = (double *)m.p->grad;
        for (int64_t i = 0; i < m.p->numel; i++) w[i] -= 0.1 * g[i];
        ag_arena_reset(step);
    }
    ag_arena_use(prev);
    ag_arena_free(step);
    assert_true(last < 0.2 * first);
    /* and the trained model still has exact gradients */
    r = ag_gradcheck(mlp_loss_fn, &c, m.p->count, m.p->list, NULL);
    if (!r.ok) fail_msg("%s", r.message);
    ag_params_free(m.p);
}

static void test_training_step_allocates_nothing_after_warm_up(void **s) {
    ag_tensor *x, *t;
    make_data(AG_F32, &x, &t);
    mlp m = mlp_new(AG_F32, 5);
    ag_arena *step = ag_arena_new(4096); /* small on purpose: it must grow, then settle */
    ag_arena *prev = ag_arena_use(step);
    uint64_t after_warmup = 0;
    for (int it = 0; it < 20; it++) {
        if (it == 3) after_warmup = ag_alloc_count();
        ag_params_zero_grad(m.p);
        ag_tensor *loss = mlp_loss(&m, x, t);
        ag_backward(loss, NULL);
        float *w = (float *)m.p->data, *g = (float *)m.p->grad;
        for (int64_t i = 0; i < m.p->numel; i++) w[i] -= 0.05f * g[i];
        ag_arena_reset(step);
    }
    assert_int_equal(ag_alloc_count(), after_warmup);
    ag_arena_use(prev);
    ag_arena_free(step);
    ag_params_free(m.p);
}

/* ---- memory of a backward pass ---- */

/* h = 2x, y = Σ h²: dy/dh = 2h = 4x, dy/dx = 8x */
static void test_non_leaf_gradients_are_freed_unless_retained(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, -2, 3));
    ag_tensor *h = ag_mul_scalar(x, 2), *y = ag_sum(ag_mul(h, h), 0, NULL, false);
    ag_backward(y, NULL);
    assert_null(h->grad); /* as torch: .grad of a non-leaf is None */
    assert_null(y->grad);
    tu_assert_values(x->grad, 0, 8, -16, 24);
    ag_tensor *h2 = ag_mul_scalar(x, 2), *y2 = ag_sum(ag_mul(h2, h2), 0, NULL, false);
    ag_retain_grad(h2);
    ag_backward(y2, NULL);
    tu_assert_values(h2->grad, 0, 4, -8, 12);
    tu_assert_values(x->grad, 0, 16, -32, 48);
    /* a later pass, and other tensors' grads from the pool, leave the retained copy alone */
    ag_backward(ag_sum(ag_mul_scalar(ag_mul_scalar(x, 5), 7), 0, NULL, false), NULL);
    tu_assert_values(h2->grad, 0, 4, -8, 12);
}

/* Each op's backward temporaries are gone once it is done: after the first pass (which creates
 * the leaves' gradient buffers) a backward pass leaves the arena exactly as it found it, and the
 * pool of non-leaf gradients stops growing. */
static void test_backward_leaves_the_arena_as_it_found_it_and_the_pool_settles(void **s) {
    ag_tensor *x, *t;
    make_data(AG_F32, &x, &t);
    mlp m = mlp_new(AG_F32, 5);
    ag_arena *a = ag_arena_current();
    ag_tensor *loss = mlp_loss(&m, x, t);
    ag_backward(loss, NULL);
    size_t pool = ag_grad_pool_bytes();
    for (int it = 0; it < 3; it++) {
        loss = mlp_loss(&m, x, t);
        size_t before = ag_arena_used(a);
        ag_backward(loss, NULL);
        assert_int_equal(ag_arena_used(a), before);
        assert_int_equal(ag_grad_pool_bytes(), pool);
    }
    ag_params_free(m.p);
}

/* ---- versions: in-place writes, and the check at backward (PyTorch's) ---- */

/* torch's t._version: 0 when made, +1 per write into existing data through the API, one
 * counter per storage shared by every view of it */
static void test_version_counts_in_place_writes_and_views_share_it(void **s) {
    ag_rng r = ag_rng_new(1);
    ag_tensor *made[] = {ag_zeros(AG_F32, AG_SHAPE(2)), ag_ones(AG_F64, AG_SHAPE(2)), ag_arange(AG_F32, 0, 4, 1),
                         ag_randn(&r, AG_F32, AG_SHAPE(3)), ag_clone(ag_ones(AG_F32, AG_SHAPE(2))),
                         ag_to(ag_ones(AG_F32, AG_SHAPE(2)), AG_F64), ag_exp(ag_ones(AG_F32, AG_SHAPE(2)))};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) assert_int_equal(ag_version(made[i]), 0);
    ag_tensor *t = ag_zeros(AG_F64, AG_SHAPE(2, 3)), *other = ag_zeros(AG_F64, AG_SHAPE(2, 3));
    ag_tensor *tt = ag_transpose(t, 0, 1), *row = ag_select(t, 0, 1), *d = ag_detach(t);
    ag_fill_(t, 1);
    assert_int_equal(ag_version(t), 1);
    ag_copy_(row, ag_ones(AG_F64, AG_SHAPE(3))); /* through views too */
    ag_uniform_(&r, tt, 0, 1);
    ag_normal_(&r, d, 0, 1);
    ag_set(t, (int64_t[]){0, 0}, 5);
    ag_add_(tt, ag_ones(AG_F64, AG_SHAPE(3, 2)));
    ag_mul_scalar_(row, 2);
    ag_dropout_(t, 0.5, true, &r);
    ag_relu_dropout_(t, 0.5, true, &r);
    ag_tensor *views[] = {t, tt, row, d, ag_reshape(t, AG_SHAPE(6))};
    for (size_t i = 0; i < sizeof views / sizeof *views; i++) assert_int_equal(ag_version(views[i]), 9);
    /* no write, no move: dropout off, in-place dropout of a strided view (done out of place), copies */
    ag_dropout_(t, 0.5, false, &r);
    ag_dropout_(tt, 0.5, true, &r);
    assert_int_equal(ag_version(t), 9);
    assert_int_equal(ag_version(ag_contiguous(tt)), 0);
    assert_int_equal(ag_version(other), 0);
}

/* the parameters are views of one slab: a write to one, or an optimizer step, moves them all */
static void test_parameters_share_their_slab_version_and_an_optimizer_step_moves_it(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(2, 2)), *b = ag_params_add(p, "b", AG_SHAPE(2));
    assert_int_equal(ag_version(w), 0);
    ag_fill_(w, 0.5);
    assert_int_equal(ag_version(b), 1);
    assert_int_equal(ag_version(p->flat), 1);
    ag_optim *o = ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1});
    ag_optim_step(o);
    assert_int_equal(ag_version(w), 2);
    assert_int_equal(ag_version(w->grad), 0); /* the gradients are the other slab */
    ag_params_zero_grad(p);
    ag_clip_grad_norm(p, 1.0);
    assert_int_equal(ag_version(b->grad), 2);
    assert_int_equal(ag_version(p->flat_grad), 2);
    assert_int_equal(ag_version(w), 2);
    ag_optim_free(o);
    ag_params_free(p);
}

/* y = exp(x) read by exp's backward, then doubled in place: PyTorch's "output 0 of ExpBackward0
 * ... is at version 1; expected version 0 instead", and no gradient. The engine is fine after. */
static void test_exp_output_changed_in_place_is_reported_at_backward_with_both_versions(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 0, 1, 2));
    ag_tensor *y = ag_exp(x);
    ag_backward(ag_sum(ag_mul_scalar_(y, 2), 0, NULL, false), NULL);
    tu_assert_error("ag_exp", "modified by an in-place operation", "its output (3) f64", "at version 1",
                    "expected version 0");
    assert_null(x->grad);
    assert_true(ag_grad_enabled());
    ag_backward(ag_sum(ag_exp(x), 0, NULL, false), NULL);
    tu_assert_values(x->grad, 1e-12, 1, exp(1.0), exp(2.0));
}

/* an input that backward reads, changed afterwards by an in-place op of any kind */
static void test_input_changed_in_place_is_reported_naming_the_op_and_the_input(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 2, 3, 4));
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 2), 5, 6, 7, 8));
    /* mul reads both inputs; the first, mul_scalar's output, gets ag_add_ */
    ag_tensor *a = ag_mul_scalar(x, 1), *y = ag_mul(a, w);
    ag_add_(a, ag_ones(AG_F64, AG_SHAPE(2)));
    ag_backward(y, ag_ones(AG_F64, AG_SHAPE(2, 2)));
    tu_assert_error("ag_mul", "its input 0, (2,2) f64 (the output of ag_mul_scalar)", "at version 1",
                    "expected version 0");
    /* matmul's second input overwritten with ag_copy_ (which records nothing) */
    ag_tensor *b = ag_mul_scalar(w, 1), *z = ag_matmul(x, b);
    ag_copy_(b, ag_zeros(AG_F64, AG_SHAPE(2, 2)));
    ag_backward(ag_sum(z, 0, NULL, false), NULL);
    tu_assert_error("ag_matmul", "its input 1, (2,2) f64", "at version 1", "expected version 0");
    /* a leaf changed with grad mode off (allowed, as torch: an optimizer does it) */
    ag_tensor *v = ag_matmul(x, w);
    bool prev = ag_set_grad_enabled(false);
    ag_add_(w, ag_ones(AG_F64, AG_SHAPE(2)));
    ag_mul_scalar_(w, 0.5);
    ag_set_grad_enabled(prev);
    ag_backward(ag_sum(v, 0, NULL, false), NULL);
    tu_assert_error("ag_matmul", "its input 1, (2,2) f64 (a leaf)", "at version 2", "expected version 0");
    tu_assert_values(w, 0, 3, 3.5, 4, 4.5);
    assert_null(x->grad);
    assert_null(w->grad);
}

/* a view shares its storage's version: writing a slice or a transposed row counts */
static void test_change_through_a_view_of_a_saved_tensor_is_reported(void **s) {
    ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.3, 0.1));
    ag_tensor *y = ag_tanh(x); /* backward reads y */
    ag_tensor *loss = ag_sum(y, 0, NULL, false);
    ag_fill_(ag_select(ag_transpose(y, 0, 1), 0, 2), 0);
    ag_backward(loss, NULL);
    tu_assert_error("ag_tanh", "its output (2,3) f64", "at version 1", "expected version 0");
    y = ag_sigmoid(x);
    loss = ag_sum(y, 0, NULL, false);
    ag_mul_scalar_(ag_slice(y, 1, 0, 3, 2), 3);
    ag_backward(loss, NULL);
    tu_assert_error("ag_sigmoid", "its output (2,3) f64", "at version 1", "expected version 0");
}

/* a parameter updated between forward and backward: the message names it */
static void test_optimizer_step_between_forward_and_backward_is_reported_by_name(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_rng r = ag_rng_new(2);
    ag_linear_module lin = ag_linear_new(p, "lin", 3, 2, true, &r);
    ag_optim *o = ag_sgd_new(p, &(ag_sgd_config){.lr = 0.1});
    ag_tensor *loss = ag_sum(ag_linear_forward(&lin, tu_seq(AG_F64, AG_SHAPE(4, 3), 0.5, 0.2)), 0, NULL, false);
    ag_optim_step(o);
    ag_backward(loss, NULL);
    tu_assert_error("ag_linear", "its input 1, (2,3) f64 'lin.weight' (a leaf)", "expected version");
    ag_optim_free(o);
    ag_params_free(p);
}

/* relu + dropout in place keeps no mask: its backward reads its output, so that is checked */
static void test_output_of_relu_dropout_changed_in_place_is_reported(void **s) {
    ag_rng r = ag_rng_new(3);
    ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(4), 1.1, 0.2));
    ag_tensor *h = ag_relu_dropout_(ag_mul_scalar(x, 1), 0.5, true, &r);
    ag_backward(ag_add_(h, ag_ones(AG_F64, AG_SHAPE(4))), ag_ones(AG_F64, AG_SHAPE(4)));
    tu_assert_error("ag_relu_dropout_", "its output (4) f64", "at version 2", "expected version 1");
}

/* An op that does not say what its backward reads is checked on all its tensors; one that says
 * AG_SAVES_NONE on none. Both: y = 2x, dx = 2g. */
static void twice_backward(ag_node *n) { ag_accum_grad(n->in[0], ag_mul_scalar(n->out->grad, 2)); }
static const ag_op TWICE_UNSAID = {.name = "twice_unsaid", .backward = twice_backward};
static const ag_op TWICE_NONE = {"twice_none", twice_backward, AG_SAVES_NONE};
static ag_tensor *twice(const ag_op *op, ag_tensor *x) {
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_mul_scalar(x, 2);
    ag_set_grad_enabled(prev);
    ag_finish(op, y, 1, &x);
    return y;
}

static void test_an_op_that_does_not_declare_what_it_reads_is_checked_on_everything(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 1, 2));
    ag_tensor *a = ag_mul_scalar(x, 1), *y = twice(&TWICE_UNSAID, a);
    ag_fill_(a, 0);
    ag_backward(y, ag_ones(AG_F64, AG_SHAPE(2)));
    tu_assert_error("twice_unsaid", "its input 0", "at version 1", "expected version 0");
    y = twice(&TWICE_UNSAID, x);
    ag_mul_scalar_(y, 3);
    ag_backward(y, ag_ones(AG_F64, AG_SHAPE(2)));
    tu_assert_error("twice_unsaid", "its output (2) f64", "at version 1", "expected version 0");
    a = ag_mul_scalar(x, 1);
    y = twice(&TWICE_NONE, a);
    ag_fill_(a, 0);
    ag_backward(ag_mul_scalar_(y, 3), ag_ones(AG_F64, AG_SHAPE(2)));
    tu_assert_values(x->grad, 0, 6, 6);
}

/* add's backward reads neither input: changing one in place afterwards is legal, and the
 * gradient is that of the out-of-place sum */
static void test_in_place_change_of_an_input_of_add_keeps_the_exact_gradient(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, 2, 3));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 4, 5, 6));
    ag_tensor *a = ag_mul_scalar(x, 2), *y = ag_add(a, b);
    ag_mul_scalar_(a, 10);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(3), 1, -1, 0.5));
    tu_assert_values(x->grad, 0, 2, -2, 1);
    tu_assert_values(b->grad, 0, 1, -1, 0.5);
    tu_assert_values(y, 0, 6, 9, 12); /* y was computed before a changed */
}

/* The Transformer's residual (nn/transformer/transformer.c): block(x) = dropout_(linear(x)), then the sum
 * made in the block's output, ag_add_(block, x), then LayerNorm. Legal: the ops that read the
 * overwritten values (linear reads its input, not its output; dropout_ its mask) do not. */
typedef struct { bool in_place; } residual_ctx;

static ag_tensor *residual(int n, ag_tensor **in, void *ctx) {
    const residual_ctx *c = ctx;
    ag_rng r = ag_rng_new(9); /* the same mask in every call */
    ag_tensor *x = ag_tanh(in[0]), *h = ag_linear(x, in[1], in[2]);
    ag_tensor *y = c->in_place ? ag_add_(ag_dropout_(h, 0.3, true, &r), x) : ag_add(ag_dropout(h, 0.3, true, &r), x);
    ag_tensor *out = ag_layer_norm(y, NULL, NULL, 1e-5);
    return ag_sum(ag_mul(out, tu_seq(AG_F64, AG_SHAPE(5, 4), 0.9, 0.4)), 0, NULL, false);
}

static void test_transformer_residual_in_place_passes_gradcheck_and_equals_out_of_place(void **s) {
    ag_tensor *in[3] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(5, 4), 0.7, 0.1)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 4), 1.3, 0.2)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(4), 0.5, 0.3))};
    residual_ctx inplace = {true}, outofplace = {false};
    tu_assert_gradcheck(residual, &inplace, 3, in);
    double g[3][20];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 3; i++) ag_zero_grad_(in[i]);
        ag_backward(residual(3, in, pass ? &outofplace : &inplace), NULL);
        for (int i = 0; i < 3; i++) {
            if (pass == 0) ag_to_buffer(in[i]->grad, AG_F64, g[i]);
            else tu_assert_values_(__FILE__, __LINE__, in[i]->grad, g[i], ag_numel(in[i]), 0);
        }
    }
}

/* Reusing a batch buffer: once the backward that read it is done, overwriting it is legal and a
 * new graph reads the new values; only a second backward over the old graph is refused. */
static void test_writing_a_saved_tensor_after_its_backward_is_done_is_legal(void **s) {
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2), 1, 1));
    ag_tensor *batch = tu_tensor(AG_F64, AG_SHAPE(2), 3, 4);
    ag_tensor *first = ag_sum(ag_mul(batch, w), 0, NULL, false);
    ag_backward(first, NULL);
    tu_assert_values(w->grad, 0, 3, 4);
    ag_copy_(batch, tu_tensor(AG_F64, AG_SHAPE(2), 10, 20));
    ag_backward(ag_sum(ag_mul(batch, w), 0, NULL, false), NULL);
    tu_assert_values(w->grad, 0, 13, 24);
    ag_backward(first, NULL);
    tu_assert_error("ag_mul", "its input 0, (2) f64 (a leaf)", "at version 1", "expected version 0");
    tu_assert_values(w->grad, 0, 13, 24);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_backward_accumulates_across_calls_until_zeroed, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_second_backward_over_same_graph_does_not_double_count_intermediates,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_no_grad_records_nothing, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_detach_stops_gradients, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_gradient_is_summed_to_input_shape, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gradient_flows_through_views_into_the_right_elements, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_explicit_output_gradient, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_requires_grad_only_on_float_leaves, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_frozen_parameter_gets_no_gradient_and_records_nothing, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_anomaly_mode_names_the_op_that_made_a_nan, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_anomaly_mode_catches_nan_in_backward, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_backward_is_identical_for_one_and_two_threads, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_mlp_loss_goes_down_and_gradients_match_gradcheck, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_training_step_allocates_nothing_after_warm_up, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_non_leaf_gradients_are_freed_unless_retained, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_backward_leaves_the_arena_as_it_found_it_and_the_pool_settles, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_version_counts_in_place_writes_and_views_share_it, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_parameters_share_their_slab_version_and_an_optimizer_step_moves_it,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_exp_output_changed_in_place_is_reported_at_backward_with_both_versions,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_input_changed_in_place_is_reported_naming_the_op_and_the_input,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_change_through_a_view_of_a_saved_tensor_is_reported,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_optimizer_step_between_forward_and_backward_is_reported_by_name,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_output_of_relu_dropout_changed_in_place_is_reported,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_an_op_that_does_not_declare_what_it_reads_is_checked_on_everything,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_in_place_change_of_an_input_of_add_keeps_the_exact_gradient,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_transformer_residual_in_place_passes_gradcheck_and_equals_out_of_place,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_writing_a_saved_tensor_after_its_backward_is_done_is_legal,
                                        tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
