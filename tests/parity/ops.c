/* The one table that maps a parity case's op name to attograd. An adapter reads the case's
 * configuration, runs the op and returns its outputs; the runner does the rest. */
#include <string.h>

#include "parity.h"

static int softmax(parity_case *c, ag_tensor **out) {
    out[0] = ag_softmax(pc_in(c, 0), (int)pc_int(c, "dim", -1));
    return 1;
}

static int log_softmax(parity_case *c, ag_tensor **out) {
    out[0] = ag_log_softmax(pc_in(c, 0), (int)pc_int(c, "dim", -1));
    return 1;
}

static int matmul(parity_case *c, ag_tensor **out) {
    ag_tensor *a = pc_in(c, 0), *b = pc_in(c, 1);
    /* transpose_a/b: the case stores the operand already transposed; use it through a view */
    if (pc_bool(c, "transpose_a", false)) a = ag_transpose(a, -1, -2);
    if (pc_bool(c, "transpose_b", false)) b = ag_transpose(b, -1, -2);
    out[0] = ag_matmul(a, b);
    return 1;
}

static int gelu(parity_case *c, ag_tensor **out) {
    char approx[16];
    pc_str(c, "approximate", approx, sizeof approx, "none");
    out[0] = strcmp(approx, "tanh") == 0 ? ag_gelu_tanh(pc_in(c, 0)) : ag_gelu(pc_in(c, 0));
    return 1;
}

static int reduce(parity_case *c, ag_tensor **out, int kind) {
    ag_tensor *dims_t = pc_dataset(c, "dims", AG_I64);
    int dims[AG_MAX_DIMS], nd = 0;
    for (int64_t i = 0; dims_t && i < ag_numel(dims_t); i++) dims[nd++] = (int)((int64_t *)dims_t->data)[i];
    bool keep = pc_bool(c, "keepdim", false);
    ag_tensor *x = pc_in(c, 0);
    out[0] = kind == 0 ? ag_sum(x, nd, dims, keep)
           : kind == 1 ? ag_mean(x, nd, dims, keep)
                       : ag_var(x, nd, dims, (int)pc_int(c, "correction", 1), keep);
    return 1;
}
static int sum(parity_case *c, ag_tensor **out) { return reduce(c, out, 0); }
static int mean(parity_case *c, ag_tensor **out) { return reduce(c, out, 1); }
static int var(parity_case *c, ag_tensor **out) { return reduce(c, out, 2); }

static int elementwise(parity_case *c, ag_tensor **out) {
    char fn[32];
    pc_str(c, "fn", fn, sizeof fn, "");
    ag_tensor *a = pc_in(c, 0), *b = c->nin > 1 ? pc_in(c, 1) : NULL;
    static const struct {
        const char *name;
        ag_tensor *(*unary)(ag_tensor *);
        ag_tensor *(*binary)(ag_tensor *, ag_tensor *);
    } fns[] = {{"exp", ag_exp, NULL},         {"log", ag_log, NULL},       {"sqrt", ag_sqrt, NULL},
               {"tanh", ag_tanh, NULL},       {"sigmoid", ag_sigmoid, NULL}, {"relu", ag_relu, NULL},
               {"abs", ag_abs, NULL},         {"neg", ag_neg, NULL},       {"add", NULL, ag_add},
               {"sub", NULL, ag_sub},         {"mul", NULL, ag_mul},       {"div", NULL, ag_div},
               {"pow", NULL, ag_pow}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (strcmp(fns[i].name, fn) == 0) {
            out[0] = fns[i].unary ? fns[i].unary(a) : fns[i].binary(a, b);
            return 1;
        }
    snprintf(c->msg, sizeof c->msg, "elementwise: unknown fn '%s'", fn);
    return -1;
}

/* ---- nn ---- */

static ag_reduction reduction(parity_case *c) {
    char r[16];
    pc_str(c, "reduction", r, sizeof r, "mean");
    return strcmp(r, "sum") == 0 ? AG_REDUCTION_SUM : strcmp(r, "none") == 0 ? AG_REDUCTION_NONE : AG_REDUCTION_MEAN;
}

/* reduction and ignore_index from the case's attributes, the weight from input 2 when present */
static ag_loss_config loss_config(parity_case *c) {
    ag_loss_config lc = ag_loss_defaults();
    lc.reduction = reduction(c);
    lc.ignore_index = pc_int(c, "ignore_index", -100);
    lc.weight = c->nin > 2 ? c->in[2] : NULL;
    return lc;
}

static int linear(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_linear_module m = ag_linear_new(pc_params(c), "", pc_int(c, "in_features", 0), pc_int(c, "out_features", 0),
                                  pc_bool(c, "bias", true), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_linear_forward(&m, pc_in(c, 0));
    return 1;
}

static int layer_norm(parity_case *c, ag_tensor **out) {
    ag_layer_norm_module m = ag_layer_norm_new(pc_params(c), "", pc_int(c, "normalized_shape", 0), pc_double(c, "eps", 1e-5),
                                          pc_bool(c, "elementwise_affine", true));
    if (!pc_load_params(c)) return -1;
    out[0] = ag_layer_norm_forward(&m, pc_in(c, 0));
    return 1;
}

static int embedding(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_embedding_module m = ag_embedding_new(pc_params(c), "", pc_int(c, "num_embeddings", 0),
                                        pc_int(c, "embedding_dim", 0), pc_int(c, "padding_idx", -1), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_embedding_forward(&m, pc_in(c, 0));
    return 1;
}

static int feed_forward(parity_case *c, ag_tensor **out) {
    out[0] = ag_feed_forward(pc_in(c, 0), pc_in(c, 1), pc_in(c, 2), pc_in(c, 3), pc_in(c, 4), 0.0, true, NULL);
    return 1;
}

/* in place on x * 1, as the case's torch side: a leaf cannot be changed in place */
static int relu_dropout_(parity_case *c, ag_tensor **out) {
    out[0] = ag_relu_dropout_(ag_mul_scalar(pc_in(c, 0), 1.0), 0.5, false, NULL);
    return 1;
}

static int add_(parity_case *c, ag_tensor **out) {
    out[0] = ag_add_(ag_mul_scalar(pc_in(c, 0), 1.0), pc_in(c, 1));
    return 1;
}

static int mul_scalar_(parity_case *c, ag_tensor **out) {
    out[0] = ag_mul_scalar_(ag_mul_scalar(pc_in(c, 0), 1.0), pc_double(c, "scalar", 1.0));
    return 1;
}

static int cross_entropy(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    lc.label_smoothing = pc_double(c, "label_smoothing", 0);
    out[0] = ag_cross_entropy(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int nll_loss(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_nll_loss(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int mse_loss(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_mse_loss(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int masked_softmax(parity_case *c, ag_tensor **out) {
    out[0] = ag_masked_softmax(pc_in(c, 0), c->nin > 1 ? pc_in(c, 1) : NULL, (int)pc_int(c, "dim", -1));
    return 1;
}

/* in0 query, in1 key, in2 value (absent for self-attention: the query is used for all
 * three, as the same tensor), in3 key_padding_mask, in4 attn_mask (each may be absent) */
static int mha(parity_case *c, ag_tensor **out) {
    ag_mha_config cfg = ag_mha_defaults(pc_int(c, "embed_dim", 0), pc_int(c, "num_heads", 1));
    cfg.bias = pc_bool(c, "bias", true);
    cfg.add_bias_kv = pc_bool(c, "add_bias_kv", false);
    cfg.add_zero_attn = pc_bool(c, "add_zero_attn", false);
    cfg.kdim = pc_int(c, "kdim", 0);
    cfg.vdim = pc_int(c, "vdim", 0);
    cfg.batch_first = pc_bool(c, "batch_first", false);
    ag_rng r = ag_rng_new(0);
    ag_mha_module m = ag_mha_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_tensor *q = pc_in(c, 0), *k = c->nin > 1 ? c->in[1] : NULL, *v = c->nin > 2 ? c->in[2] : NULL;
    if (!k) k = q;
    if (!v) v = k;
    ag_mha_args a = {
        .key_padding_mask = c->nin > 3 ? c->in[3] : NULL,
        .attn_mask = c->nin > 4 ? c->in[4] : NULL,
        .is_causal = pc_bool(c, "is_causal", false),
        .need_weights = pc_bool(c, "need_weights", true),
        .average_attn_weights = pc_bool(c, "average_attn_weights", true),
    };
    ag_tensor *w = NULL;
    out[0] = ag_mha_forward(&m, q, k, v, &a, &w);
    if (!a.need_weights) return 1;
    out[1] = w;
    return 2;
}

/* Optimizers: parameters "w" and "b" from params/, gradients for step k in grads/step<k>/<name>;
 * outputs are w and b after each step (out0 w after step 1, out1 b after step 1, ...). */
static int optim(parity_case *c, ag_tensor **out) {
    char kind[16];
    pc_str(c, "optimizer", kind, sizeof kind, "");
    ag_params *p = pc_params(c);
    ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(3, 4)), *b = ag_params_add(p, "b", AG_SHAPE(5));
    if (!pc_load_params(c)) return -1;
    double lr = pc_double(c, "lr", 1e-3), wd = pc_double(c, "weight_decay", 0);
    ag_optim *o = NULL;
    if (strcmp(kind, "sgd") == 0) {
        ag_sgd_config sc = {.lr = lr, .momentum = pc_double(c, "momentum", 0), .dampening = pc_double(c, "dampening", 0),
                            .weight_decay = wd, .nesterov = pc_bool(c, "nesterov", 0)};
        o = ag_sgd_new(p, &sc);
    } else if (strcmp(kind, "adam") == 0 || strcmp(kind, "adamw") == 0) {
        ag_adam_config ac = {.lr = lr, .betas = {pc_double(c, "beta1", 0.9), pc_double(c, "beta2", 0.999)},
                             .eps = pc_double(c, "eps", 1e-8), .weight_decay = wd, .amsgrad = pc_bool(c, "amsgrad", 0)};
        o = (kind[4] ? ag_adamw_new : ag_adam_new)(p, &ac);
    }
    if (!o) {
        snprintf(c->msg, sizeof c->msg, "unknown optimizer '%s'", kind);
        return -1;
    }
    int steps = (int)pc_int(c, "steps", 3), n = 0;
    for (int k = 0; k < steps && n + 2 <= PC_MAX_IO; k++) {
        char path[64];
        snprintf(path, sizeof path, "grads/step%d/w", k);
        ag_copy_(w->grad, pc_dataset(c, path, c->dtype));
        snprintf(path, sizeof path, "grads/step%d/b", k);
        ag_copy_(b->grad, pc_dataset(c, path, c->dtype));
        ag_optim_step(o);
        out[n++] = ag_clone(w);
        out[n++] = ag_clone(b);
    }
    ag_optim_free(o);
    return n;
}

const parity_op parity_nn_ops[] = {
    {"optim", optim},
    {"linear", linear},
    {"layer_norm", layer_norm},
    {"embedding", embedding},
    {"feed_forward", feed_forward},
    {"relu_dropout_", relu_dropout_},
    {"add_", add_},
    {"mul_scalar_", mul_scalar_},
    {"cross_entropy", cross_entropy},
    {"nll_loss", nll_loss},
    {"mse_loss", mse_loss},
    {"masked_softmax", masked_softmax},
    {"mha", mha},
    {NULL, NULL},
};

const parity_op parity_tensor_ops[] = {
    {"softmax", softmax},
    {"log_softmax", log_softmax},
    {"matmul", matmul},
    {"gelu", gelu},
    {"sum", sum},
    {"mean", mean},
    {"var", var},
    {"elementwise", elementwise},
    {NULL, NULL},
};

const parity_op *const parity_tables[] = {parity_tensor_ops, parity_nn_ops, parity_transformer_ops, parity_gru_ops,
                                          parity_math_select_ops, parity_nn_losses_options_ops, parity_lstm_ops,
                                          NULL};
