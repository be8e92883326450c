/* The pointwise losses (binary cross entropy, with logits, L1, smooth L1, KL divergence) and class
 * weights in cross entropy: f64 gradchecks of input and target for every reduction, values
 * worked by hand, PyTorch's edge cases (log clamp, beta = 0, batchmean), misuse reporting.
 * Adam's amsgrad by hand and through checkpoints (old files without it still load); the config
 * defaults. Their PyTorch parity cases are in tests/parity/nn_more.h5 (gen_nn_more.py). */
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

/* ==== Adam's amsgrad ========================================================================= */

/* hand-worked, one parameter, lr 1, betas (0, 0.5), eps 0: gradients 2 then 0.
 * step 1: m = 2, v = 0.5·4 = 2, bias corrections 1 and 0.5: p -= 2 / (sqrt(2)/sqrt(0.5)) = 1
 * step 2: m = 0, v = 1, vmax = 2: p -= 0 (m = 0) whatever the denominator; then gradient 1:
 * step 3: m = 1, v = 0.5 + 0.5 = 1, vmax stays 2, bc2 = 0.875: p -= 1 / (sqrt(2)/sqrt(0.875))
 * (without amsgrad sqrt(1)/sqrt(0.875)) */
static void test_adam_amsgrad_divides_by_the_running_maximum(void **s) {
    for (int ams = 0; ams < 2; ams++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(1));
        ag_adam_config c = ag_adam_defaults();
        c.lr = 1;
        c.betas[0] = 0;
        c.betas[1] = 0.5;
        c.eps = 0;
        c.amsgrad = ams;
        ag_optim *o = ag_adam_new(p, &c);
        assert_int_equal(ag_optim_state_count(o), ams ? 3 : 2);
        double g[3] = {2, 0, 1};
        for (int k = 0; k < 3; k++) {
            ((double *)p->grad)[0] = g[k];
            ag_optim_step(o);
        }
        double last = ams ? sqrt(0.875) / sqrt(2.0) : sqrt(0.875);
        tu_assert_values(w, 1e-15, -1 - last);
        if (ams) {
            assert_string_equal(ag_optim_state(o, 2, NULL), "max_exp_avg_sq");
            tu_assert_values(ag_optim_state_view(o, "max_exp_avg_sq", w), 0, 2);
            tu_assert_values(ag_optim_state_view(o, "exp_avg_sq", w), 0, 1);
        }
        ag_optim_free(o);
        ag_params_free(p);
    }
}

static char ckpt_dir[256];

static const char *ckpt_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    if (!ckpt_dir[0]) {
        snprintf(ckpt_dir, sizeof ckpt_dir, "/tmp/ag_nn_more_XXXXXX");
        assert_non_null(mkdtemp(ckpt_dir));
    }
    snprintf(buf[k], sizeof buf[k], "%s/%s", ckpt_dir, name);
    return buf[k];
}

static ag_optim *adam_with(ag_params *p, bool amsgrad) {
    ag_adam_config c = ag_adam_defaults();
    c.lr = 0.1;
    c.betas[1] = 0.5;
    c.amsgrad = amsgrad;
    return ag_adam_new(p, &c);
}

/* two steps with gradients that shrink, so max_exp_avg_sq differs from exp_avg_sq */
static void two_steps(ag_params *p, ag_optim *o) {
    for (int k = 0; k < 2; k++) {
        for (int t = 0; t < p->count; t++) /* the parameters' elements; the gaps between them stay 0 */
            for (int64_t i = 0; i < ag_numel(p->list[t]); i++)
                ((float *)p->grad)[p->list[t]->offset + i] = (float)((k ? 0.1 : 3.0) * (double)(i + 1));
        ag_optim_step(o);
    }
}

static ag_params *small(void) {
    ag_params *p = ag_params_new(AG_F32);
    ag_params_add(p, "w", AG_SHAPE(2, 3));
    ag_params_add(p, "b", AG_SHAPE(3));
    ag_fill_(p->flat, 0.5);
    return p;
}

static void test_amsgrad_state_round_trips_through_a_checkpoint(void **s) {
    const char *path = ckpt_path("ams.h5");
    char msg[1024];
    ag_params *p = small(), *q = small();
    ag_optim *o = adam_with(p, true), *oq = adam_with(q, true);
    two_steps(p, o);
    assert_int_equal(ag_checkpoint_save(path, p, o, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    assert_int_equal(ag_checkpoint_load(path, q, oq, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    for (int k = 0; k < 3; k++) {
        void *a, *b;
        assert_string_equal(ag_optim_state(o, k, &a), ag_optim_state(oq, k, &b));
        assert_memory_equal(a, b, (size_t)p->numel * sizeof(float));
    }
    float *vm = o->max_exp_avg_sq, *v = o->exp_avg_sq;
    assert_true(vm[0] > v[0]); /* the maximum is state of its own */
    assert_int_equal(oq->step, 2);
    /* an amsgrad file does not load into an Adam without it */
    ag_optim *plain = adam_with(q, false);
    assert_int_equal(ag_checkpoint_load(path, q, plain, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_EMISMATCH);
    assert_non_null(strstr(msg, "amsgrad on"));
    ag_optim_free(plain);
    ag_optim_free(o);
    ag_optim_free(oq);
    ag_params_free(p);
    ag_params_free(q);
}

/* a file written before amsgrad existed has no "amsgrad" attribute: an Adam without amsgrad
 * loads it; one with amsgrad is told what is missing */
static void test_adam_file_without_the_amsgrad_attribute_still_loads(void **s) {
    const char *path = ckpt_path("old.h5");
    char msg[1024];
    ag_params *p = small(), *q = small();
    ag_optim *o = adam_with(p, false), *oq = adam_with(q, false);
    two_steps(p, o);
    assert_int_equal(ag_checkpoint_save(path, p, o, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    assert_true(H5Aexists(g, "amsgrad") > 0);
    assert_true(H5Adelete(g, "amsgrad") >= 0);
    H5Gclose(g);
    H5Fclose(f);
    tu_checkpoint_rehash(path);
    assert_int_equal(ag_checkpoint_load(path, q, oq, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    assert_memory_equal(o->exp_avg_sq, oq->exp_avg_sq, (size_t)p->numel * sizeof(float));
    assert_memory_equal(p->data, q->data, (size_t)p->numel * sizeof(float));
    ag_optim *ams = adam_with(q, true);
    assert_int_equal(ag_checkpoint_load(path, q, ams, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_EMISMATCH);
    assert_non_null(strstr(msg, "amsgrad off"));
    assert_non_null(strstr(msg, "no optimizer state 'max_exp_avg_sq'"));
    ag_optim_free(ams);
    ag_optim_free(o);
    ag_optim_free(oq);
    ag_params_free(p);
    ag_params_free(q);
    remove(ckpt_path("old.h5"));
    remove(ckpt_path("ams.h5"));
    rmdir(ckpt_dir);
    ckpt_dir[0] = 0;
}

/* the defaults are torch.optim's */
static void test_optimizer_defaults_are_torchs(void **s) {
    ag_adam_config a = ag_adam_defaults(), w = ag_adamw_defaults();
    assert_true(a.lr == 1e-3 && a.betas[0] == 0.9 && a.betas[1] == 0.999 && a.eps == 1e-8);
    assert_true(a.weight_decay == 0 && !a.amsgrad);
    assert_true(w.lr == 1e-3 && w.weight_decay == 1e-2 && !w.amsgrad);
    ag_sgd_config sg = ag_sgd_defaults(0.5);
    assert_true(sg.lr == 0.5 && sg.momentum == 0 && sg.dampening == 0 && sg.weight_decay == 0 && !sg.nesterov);
    ag_loss_config l = ag_loss_defaults();
    assert_true(l.reduction == AG_REDUCTION_MEAN && l.ignore_index == -100 && l.label_smoothing == 0);
    assert_true(l.beta == 1 && !l.log_target && !l.weight && !l.pos_weight);
    ag_params *p = small();
    ag_optim *o = ag_adamw_new(p, NULL);
    assert_true(o->weight_decay == 1e-2 && o->eps == 1e-8 && o->kind == AG_OPTIM_ADAMW);
    ag_optim_free(o);
    assert_null(ag_sgd_new(p, NULL));
    tu_assert_error("ag_sgd_new", "ag_sgd_defaults(lr)");
    ag_params_free(p);
}

/* ==== MultiheadAttention on unbatched input, tanh GELU in the Transformer ==================== */

typedef struct {
    ag_mha_module *m;
    ag_mha_args a;
} mha_case;

static ag_tensor *f_mha_unbatched(int n, ag_tensor **in, void *ctx) {
    mha_case *c = ctx;
    ag_tensor *w = NULL;
    ag_tensor *y = ag_mha_forward(c->m, in[0], in[1], in[1], &c->a, &w);
    return ag_add(y, ag_sum(w, 0, NULL, false)); /* the weights carry no gradient; the sum checks they exist */
}

/* (L,E) input gives what the (1,L,E) batch gives, without the batch dim; weights (H,L,S) */
static void test_mha_unbatched_matches_a_batch_of_one_and_gradchecks(void **s) {
    ag_rng r = ag_rng_new(7);
    ag_params *p = ag_params_new(AG_F64);
    ag_mha_config cfg = ag_mha_defaults(6, 2);
    cfg.batch_first = true;
    ag_mha_module m = ag_mha_new(p, "", &cfg, &r);
    ag_normal_(&r, m.in_proj_bias, 0, 1);
    ag_tensor *q = ag_randn(&r, AG_F64, AG_SHAPE(3, 6)), *kv = ag_randn(&r, AG_F64, AG_SHAPE(4, 6));
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(4));
    ((uint8_t *)kpm->data)[2] = 1;
    ag_mha_args a = {.key_padding_mask = kpm, .need_weights = true, .average_attn_weights = true};
    ag_tensor *w1 = NULL, *wb = NULL;
    ag_tensor *y1 = ag_mha_forward(&m, q, kv, kv, &a, &w1);
    tu_assert_shape(y1, 3, 6);
    tu_assert_shape(w1, 3, 4);
    ag_mha_args ab = {.key_padding_mask = ag_unsqueeze(kpm, 0), .need_weights = true, .average_attn_weights = true};
    ag_tensor *yb = ag_mha_forward(&m, ag_unsqueeze(q, 0), ag_unsqueeze(kv, 0), ag_unsqueeze(kv, 0), &ab, &wb);
    ag_tensor *d = ag_sub(y1, ag_squeeze(yb, 0));
    tu_assert_values(ag_sum(ag_abs(d), 0, NULL, false), 0, 0);
    tu_assert_values(ag_sum(ag_abs(ag_sub(w1, ag_squeeze(wb, 0))), 0, NULL, false), 0, 0);
    ag_tensor *padded = ag_narrow(w1, 1, 2, 1); /* key 2 is padding: weight 0 for every query */
    tu_assert_values(ag_sum(ag_abs(padded), 0, NULL, false), 0, 0);
    mha_case c = {&m, {.key_padding_mask = kpm, .need_weights = true, .average_attn_weights = true}};
    ag_tensor *in[2] = {tu_leaf(q), tu_leaf(kv)};
    tu_assert_gradcheck(f_mha_unbatched, &c, 2, in);
    ag_tensor *w2 = NULL;
    c.a.average_attn_weights = false;
    ag_mha_forward(&m, q, kv, kv, &c.a, &w2);
    tu_assert_shape(w2, 2, 3, 4);
    ag_params_free(p);
}

static void test_mha_unbatched_reports_mixed_dims(void **s) {
    ag_rng r = ag_rng_new(8);
    ag_params *p = ag_params_new(AG_F32);
    ag_mha_config cfg = ag_mha_defaults(4, 2);
    ag_mha_module m = ag_mha_new(p, "", &cfg, &r);
    ag_tensor *q = ag_zeros(AG_F32, AG_SHAPE(3, 4)), *k3 = ag_zeros(AG_F32, AG_SHAPE(5, 1, 4));
    assert_null(ag_mha_forward(&m, q, k3, k3, NULL, NULL));
    tu_assert_error("ag_mha_forward", "query (3,4)", "key (5,1,4)", "unbatched");
    ag_tensor *k = ag_zeros(AG_F32, AG_SHAPE(5, 4));
    ag_mha_args a = {.key_padding_mask = ag_zeros(AG_BOOL, AG_SHAPE(1, 5))};
    assert_null(ag_mha_forward(&m, q, k, k, &a, NULL));
    tu_assert_error("ag_mha_forward", "key_padding_mask (1,5)", "1-d");
    ag_params_free(p);
}

typedef struct {
    ag_transformer_encoder_layer_module *l;
} enc_case;

static ag_tensor *f_encoder(int n, ag_tensor **in, void *ctx) {
    enc_case *c = ctx;
    return ag_transformer_encoder_layer_forward(c->l, in[0], NULL);
}

/* the tanh GELU layer differs from the exact one, gradchecks, and activation 3 is reported */
static void test_transformer_gelu_tanh_layer_gradchecks(void **s) {
    ag_rng r = ag_rng_new(9);
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config cfg = ag_transformer_defaults(4, 2);
    cfg.dim_feedforward = 8;
    cfg.activation = AG_ACTIVATION_GELU_TANH;
    ag_transformer_encoder_layer_module l = ag_transformer_encoder_layer_new(p, "", &cfg, &r);
    ag_tensor *x = ag_randn(&r, AG_F64, AG_SHAPE(3, 4));
    ag_tensor *yt = ag_transformer_encoder_layer_forward(&l, x, NULL);
    l.cfg.activation = AG_ACTIVATION_GELU;
    ag_tensor *ye = ag_transformer_encoder_layer_forward(&l, x, NULL);
    double diff = ag_item(ag_sum(ag_abs(ag_sub(yt, ye)), 0, NULL, false)) / 12;
    assert_true(diff > 1e-6 && diff < 1e-2); /* close, not equal */
    l.cfg.activation = AG_ACTIVATION_GELU_TANH;
    enc_case c = {&l};
    ag_tensor *in[1] = {tu_leaf(x)};
    tu_assert_gradcheck(f_encoder, &c, 1, in);
    cfg.activation = (ag_activation)3;
    ag_transformer_encoder_layer_module bad = ag_transformer_encoder_layer_new(p, "bad", &cfg, &r);
    assert_null(bad.self_attn.in_proj_weight);
    tu_assert_error("activation 3", "gelu_tanh");
    ag_params_free(p);
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
        T(test_adam_amsgrad_divides_by_the_running_maximum),
        T(test_amsgrad_state_round_trips_through_a_checkpoint),
        T(test_adam_file_without_the_amsgrad_attribute_still_loads),
        T(test_optimizer_defaults_are_torchs),
        T(test_mha_unbatched_matches_a_batch_of_one_and_gradchecks),
        T(test_mha_unbatched_reports_mixed_dims),
        T(test_transformer_gelu_tanh_layer_gradchecks),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
