/* The pointwise losses (binary cross entropy, with logits, L1, smooth L1, KL divergence) and class
 * weights in cross entropy: f64 gradchecks of input and target for every reduction, values
 * worked by hand, PyTorch's edge cases (log clamp, beta = 0, batchmean), misuse reporting.
 * Their PyTorch parity cases are in tests/parity/nn_losses_options.h5 (gen_nn_losses_options.py). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

typedef ag_tensor *(*loss_fn)(ag_tensor *, ag_tensor *, const ag_loss_config *);

typedef struct {
    loss_fn fn;
    ag_loss_config cfg;
} loss_case;

static ag_tensor *f_loss(int n, ag_tensor **in, void *ctx) {
    const loss_case *c = ctx;
    return c->fn(in[0], in[1], &c->cfg);
}

/* gradcheck of input and target under NONE, MEAN and SUM (and BATCHMEAN for kl_div) */
static void gradcheck_reductions(loss_fn fn, ag_loss_config cfg, ag_tensor *x, ag_tensor *y, bool batchmean) {
    ag_reduction reds[] = {AG_REDUCTION_NONE, AG_REDUCTION_MEAN, AG_REDUCTION_SUM, AG_REDUCTION_BATCHMEAN};
    for (int r = 0; r < (batchmean ? 4 : 3); r++) {
        loss_case c = {fn, cfg};
        c.cfg.reduction = reds[r];
        ag_tensor *in[2] = {tu_leaf(x), tu_leaf(y)};
        tu_assert_gradcheck(f_loss, &c, 2, in);
    }
}

static void test_binary_cross_entropy_gradcheck_with_weight(void **s) {
    ag_rng r = ag_rng_new(1);
    ag_tensor *x = ag_add_scalar(ag_mul_scalar(ag_rand(&r, AG_F64, AG_SHAPE(3, 4)), 0.9), 0.05);
    ag_tensor *y = ag_rand(&r, AG_F64, AG_SHAPE(3, 4));
    ag_loss_config cfg = ag_loss_defaults();
    gradcheck_reductions(ag_binary_cross_entropy, cfg, x, y, false);
    cfg.weight = ag_add_scalar(ag_rand(&r, AG_F64, AG_SHAPE(4)), 0.5);
    gradcheck_reductions(ag_binary_cross_entropy, cfg, x, y, false);
}

/* -(y log x + (1-y) log(1-x)): x=[0.25, 0.5, 1, 0], y=[1, 0.5, 1, 1] -> [log 4, log 2, 0, 100]
 * (log 0 clamped at -100); input gradient (x-y)/max(x(1-x), 1e-12) */
static void test_binary_cross_entropy_values_and_log_clamp(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), 0.25, 0.5, 1, 0));
    ag_tensor *y = tu_tensor(AG_F64, AG_SHAPE(4), 1, 0.5, 1, 1);
    ag_loss_config cfg = ag_loss_defaults();
    cfg.reduction = AG_REDUCTION_NONE;
    ag_tensor *l = ag_binary_cross_entropy(x, y, &cfg);
    tu_assert_values(l, 1e-12, log(4.0), log(2.0), 0, 100);
    ag_backward(l, ag_ones(AG_F64, AG_SHAPE(4)));
    tu_assert_values(x->grad, 1e-6, -0.75 / 0.1875, 0, 0, -1e12);
}

static void test_binary_cross_entropy_reports_input_outside_0_1(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2), 0.5, 1.5);
    assert_null(ag_binary_cross_entropy(x, ag_zeros(AG_F32, AG_SHAPE(2)), NULL));
    tu_assert_error("ag_binary_cross_entropy", "(2)", "element 1", "between 0 and 1");
}

static void test_bce_with_logits_gradcheck_with_weight_and_pos_weight(void **s) {
    ag_rng r = ag_rng_new(2);
    ag_tensor *x = ag_mul_scalar(ag_randn(&r, AG_F64, AG_SHAPE(4, 3)), 3);
    ag_tensor *y = ag_rand(&r, AG_F64, AG_SHAPE(4, 3));
    ag_loss_config cfg = ag_loss_defaults();
    gradcheck_reductions(ag_binary_cross_entropy_with_logits, cfg, x, y, false);
    cfg.pos_weight = tu_tensor(AG_F64, AG_SHAPE(3), 0.5, 2, 3);
    cfg.weight = ag_add_scalar(ag_rand(&r, AG_F64, AG_SHAPE(4, 1)), 0.5);
    gradcheck_reductions(ag_binary_cross_entropy_with_logits, cfg, x, y, false);
}

/* softplus(-x) stays finite: x = ±1000, y = 0 -> loss [1000, 0]; pos_weight p scales the
 * positive term: x = 0, y = 1, p = 3 -> 3 log 2 */
static void test_bce_with_logits_is_stable_for_large_logits(void **s) {
    ag_loss_config cfg = ag_loss_defaults();
    cfg.reduction = AG_REDUCTION_NONE;
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(2), 1000, -1000));
    ag_tensor *l = ag_binary_cross_entropy_with_logits(x, ag_zeros(AG_F32, AG_SHAPE(2)), &cfg);
    tu_assert_values(l, 1e-3, 1000, 0);
    ag_backward(l, ag_ones(AG_F32, AG_SHAPE(2)));
    tu_assert_values(x->grad, 1e-6, 1, 0);
    cfg.pos_weight = ag_scalar(AG_F64, 3);
    tu_assert_values(ag_binary_cross_entropy_with_logits(ag_zeros(AG_F64, AG_SHAPE(1)), ag_ones(AG_F64, AG_SHAPE(1)),
                                                         &cfg),
                     1e-12, 3 * log(2.0));
}

static void test_l1_and_smooth_l1_gradcheck(void **s) {
    ag_rng r = ag_rng_new(3);
    ag_tensor *x = ag_randn(&r, AG_F64, AG_SHAPE(2, 5)), *y = ag_randn(&r, AG_F64, AG_SHAPE(2, 5));
    ag_loss_config cfg = ag_loss_defaults();
    gradcheck_reductions(ag_l1_loss, cfg, x, y, false);
    gradcheck_reductions(ag_smooth_l1_loss, cfg, x, y, false);
    cfg.beta = 0.3;
    gradcheck_reductions(ag_smooth_l1_loss, cfg, x, y, false);
}

/* d = x - y = [0.2, -3, 0.5]: smooth L1 with beta 1 -> [0.02, 2.5, 0.125]; beta 0 is L1:
 * [0.2, 3, 0.5], gradient sign(d) (0 where d == 0) */
static void test_smooth_l1_values_and_beta_zero_is_l1(void **s) {
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(3), 1.2, -1, 0.5), *y = tu_tensor(AG_F64, AG_SHAPE(3), 1, 2, 0);
    ag_loss_config cfg = ag_loss_defaults();
    cfg.reduction = AG_REDUCTION_NONE;
    tu_assert_values(ag_smooth_l1_loss(x, y, &cfg), 1e-12, 0.02, 2.5, 0.125);
    cfg.beta = 0;
    ag_tensor *xl = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), 1.2, -1, 0.5, 7));
    ag_tensor *yl = tu_tensor(AG_F64, AG_SHAPE(4), 1, 2, 0, 7);
    ag_tensor *l = ag_smooth_l1_loss(xl, yl, &cfg);
    tu_assert_values(l, 1e-12, 0.2, 3, 0.5, 0);
    ag_backward(l, ag_ones(AG_F64, AG_SHAPE(4)));
    tu_assert_values(xl->grad, 0, 1, -1, 1, 0);
    cfg.beta = -1;
    assert_null(ag_smooth_l1_loss(x, y, &cfg));
    tu_assert_error("ag_smooth_l1_loss", "beta -1");
}

static void test_kl_div_gradcheck_each_reduction_and_log_target(void **s) {
    ag_rng r = ag_rng_new(4);
    ag_tensor *x = ag_log_softmax(ag_randn(&r, AG_F64, AG_SHAPE(3, 4)), -1);
    ag_tensor *y = ag_softmax(ag_randn(&r, AG_F64, AG_SHAPE(3, 4)), -1);
    ag_loss_config cfg = ag_loss_defaults();
    gradcheck_reductions(ag_kl_div, cfg, x, y, true);
    cfg.log_target = true;
    gradcheck_reductions(ag_kl_div, cfg, x, ag_detach(ag_log(y)), true);
}

/* x = log [0.5, 0.5], y = [1, 0]: KL = 1·(log 1 - log 0.5) + 0 = log 2; batchmean over a
 * (2,2) batch of that row twice gives log 2, mean over elements log 2 / 2 */
static void test_kl_div_values_batchmean_and_zero_target(void **s) {
    double h = log(0.5);
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2, 2), h, h, h, h), *y = tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 0, 1, 0);
    ag_loss_config cfg = ag_loss_defaults();
    cfg.reduction = AG_REDUCTION_BATCHMEAN;
    tu_assert_values(ag_kl_div(x, y, &cfg), 1e-12, log(2.0));
    cfg.reduction = AG_REDUCTION_MEAN;
    tu_assert_values(ag_kl_div(x, y, &cfg), 1e-12, log(2.0) / 2);
    cfg.reduction = AG_REDUCTION_NONE;
    tu_assert_values(ag_kl_div(x, y, &cfg), 1e-12, log(2.0), 0, log(2.0), 0);
    cfg.reduction = AG_REDUCTION_BATCHMEAN;
    assert_null(ag_l1_loss(x, y, &cfg));
    tu_assert_error("ag_l1_loss", "reduction 3");
}

static void test_pointwise_losses_report_shape_and_option_misuse(void **s) {
    ag_tensor *a = ag_ones(AG_F32, AG_SHAPE(2, 3)), *b = ag_ones(AG_F32, AG_SHAPE(3, 2));
    assert_null(ag_l1_loss(a, b, NULL));
    tu_assert_error("ag_l1_loss", "(2,3)", "(3,2)");
    ag_loss_config cfg = ag_loss_defaults();
    cfg.weight = ag_ones(AG_F32, AG_SHAPE(3));
    assert_null(ag_kl_div(a, a, &cfg));
    tu_assert_error("ag_kl_div", "weight given");
    cfg.weight = ag_ones(AG_F32, AG_SHAPE(2));
    assert_null(ag_binary_cross_entropy_with_logits(a, a, &cfg));
    tu_assert_error("ag_binary_cross_entropy_with_logits", "weight (2)", "(2,3)");
    cfg.weight = NULL;
    cfg.pos_weight = ag_ones(AG_F32, AG_SHAPE(3));
    assert_null(ag_binary_cross_entropy(a, a, &cfg));
    tu_assert_error("ag_binary_cross_entropy", "pos_weight given");
}

typedef struct {
    ag_tensor *t;
    ag_loss_config cfg;
} ce_case;

static ag_tensor *f_ce(int n, ag_tensor **in, void *ctx) {
    ce_case *c = ctx;
    return ag_cross_entropy(in[0], c->t, &c->cfg);
}

static ag_tensor *f_nll(int n, ag_tensor **in, void *ctx) {
    ce_case *c = ctx;
    return ag_nll_loss(in[0], c->t, &c->cfg);
}

static void test_cross_entropy_and_nll_with_class_weights_gradcheck(void **s) {
    ag_rng r = ag_rng_new(5);
    ag_tensor *in[1] = {tu_leaf(ag_mul_scalar(ag_randn(&r, AG_F64, AG_SHAPE(5, 4)), 2))};
    ce_case c = {tu_tensor(AG_I64, AG_SHAPE(5), 0, 3, -100, 2, 1), ag_loss_defaults()};
    c.cfg.weight = tu_tensor(AG_F64, AG_SHAPE(4), 0.5, 2, 1, 3);
    ag_reduction reds[] = {AG_REDUCTION_NONE, AG_REDUCTION_MEAN, AG_REDUCTION_SUM};
    for (int k = 0; k < 3; k++)
        for (int sm = 0; sm < 2; sm++) {
            c.cfg.reduction = reds[k];
            c.cfg.label_smoothing = sm ? 0.2 : 0;
            tu_assert_gradcheck(f_ce, &c, 1, in);
            if (!sm) tu_assert_gradcheck(f_nll, &c, 1, in);
        }
}

/* logits 0 over 2 classes, targets [0, 1], weight [1, 3]: each -log p = log 2, weighted mean
 * (1 + 3) log 2 / (1 + 3) = log 2; the gradient of sample 1 is 3/4 of [0.5, -0.5] */
static void test_cross_entropy_weighted_mean_divides_by_target_weights(void **s) {
    ag_tensor *x = tu_leaf(ag_zeros(AG_F64, AG_SHAPE(2, 2)));
    ag_loss_config cfg = ag_loss_defaults();
    cfg.weight = tu_tensor(AG_F64, AG_SHAPE(2), 1, 3);
    ag_tensor *l = ag_cross_entropy(x, tu_tensor(AG_I64, AG_SHAPE(2), 0, 1), &cfg);
    tu_assert_values(l, 1e-12, log(2.0));
    ag_backward(l, NULL);
    tu_assert_values(x->grad, 1e-12, -0.125, 0.125, 0.375, -0.375);
    cfg.weight = ag_ones(AG_F64, AG_SHAPE(3));
    assert_null(ag_cross_entropy(x, tu_tensor(AG_I64, AG_SHAPE(2), 0, 1), &cfg));
    tu_assert_error("ag_cross_entropy", "weight (3)", "expected (2)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
        T(test_binary_cross_entropy_gradcheck_with_weight),
        T(test_binary_cross_entropy_values_and_log_clamp),
        T(test_binary_cross_entropy_reports_input_outside_0_1),
        T(test_bce_with_logits_gradcheck_with_weight_and_pos_weight),
        T(test_bce_with_logits_is_stable_for_large_logits),
        T(test_l1_and_smooth_l1_gradcheck),
        T(test_smooth_l1_values_and_beta_zero_is_l1),
        T(test_kl_div_gradcheck_each_reduction_and_log_target),
        T(test_kl_div_values_batchmean_and_zero_target),
        T(test_pointwise_losses_report_shape_and_option_misuse),
        T(test_cross_entropy_and_nll_with_class_weights_gradcheck),
        T(test_cross_entropy_weighted_mean_divides_by_target_weights),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
