/* PyTorch options of the optimizers, MultiheadAttention and the Transformer layers: Adam's
 * amsgrad by hand and through checkpoints (old files without it still load), the config
 * defaults, unbatched MultiheadAttention input, the tanh GELU. Their PyTorch parity cases are in
 * tests/parity/nn_losses_options.h5 (gen_nn_losses_options.py). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

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
