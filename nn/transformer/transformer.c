/* The Transformer, step for step as torch 1.13's nn/modules/transformer.py (the differentiable
 * path): here what its layers share (configuration, blocks, residual connections, packed rows,
 * stacks) and nn.Transformer; the layers and stacks are in encoder.c and decoder.c. Layers only
 * combine existing ops (ag_mha_forward, ag_linear, ag_layer_norm, ag_dropout), so every gradient
 * comes from those ops' own backward. LayerNorm and Linear act on the last dim, so batch_first
 * only matters to the attention blocks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"
#include "transformer.h"
#include "transformer_internal.h"

ag_transformer_config ag_transformer_defaults(int64_t d_model, int64_t nhead) {
    return (ag_transformer_config){.d_model = d_model, .nhead = nhead, .dim_feedforward = 2048, .dropout = 0.1,
                                   .activation = AG_ACTIVATION_RELU, .layer_norm_eps = 1e-5};
}

bool ag__tf_check_config(const char *op, const char *prefix, const ag_transformer_config *c) {
    if (!c || c->d_model <= 0 || c->nhead <= 0 || c->d_model % c->nhead != 0 || c->dim_feedforward <= 0 ||
        !(c->dropout >= 0 && c->dropout <= 1) || !(c->layer_norm_eps >= 0) ||
        (c->activation != AG_ACTIVATION_RELU && c->activation != AG_ACTIVATION_GELU &&
         c->activation != AG_ACTIVATION_GELU_TANH)) {
        if (!c) ag_error(op, "'%s': config is NULL", prefix ? prefix : "");
        else
            ag_error(op, "'%s': d_model %lld, nhead %lld, dim_feedforward %lld, dropout %g, layer_norm_eps %g, "
                         "activation %d: d_model must be a positive multiple of nhead, dim_feedforward > 0, dropout "
                         "in [0,1], eps >= 0, activation relu, gelu or gelu_tanh",
                     prefix ? prefix : "", (long long)c->d_model, (long long)c->nhead, (long long)c->dim_feedforward,
                     c->dropout, c->layer_norm_eps, (int)c->activation);
        return false;
    }
    return true;
}

ag_mha_module ag__tf_attn_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c,
                         ag_rng *rng) {
    char b[256];
    ag_mha_config mc = ag_mha_defaults(c->d_model, c->nhead);
    mc.dropout = c->dropout;
    mc.batch_first = c->batch_first;
    return ag_mha_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), &mc, rng);
}

ag_linear_module ag__tf_linear_new(ag_params *p, const char *prefix, const char *name, int64_t in, int64_t out,
                              ag_rng *rng) {
    char b[256];
    return ag_linear_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), in, out, true, rng);
}

ag_layer_norm_module ag__tf_norm_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c) {
    char b[256];
    return ag_layer_norm_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), c->d_model,
                             c->layer_norm_eps, true);
}

/* ---- forward ------------------------------------------------------------------------------ */

bool ag__tf_check_seq(const char *op, const char *what, ag_tensor *t, const ag_transformer_config *c, seq *s) {
    char b[128];
    if (!ag__check_float(op, t)) return false;
    if ((t->ndim != 2 && t->ndim != 3) || t->shape[t->ndim - 1] != c->d_model) {
        ag_error(op, "%s %s: expected %s, or (L,%lld) unbatched", what, ag_shape_str(t, b),
                 c->batch_first ? "(N,L,d_model) (batch_first)" : "(L,N,d_model)", (long long)c->d_model);
        return false;
    }
    int bdim = c->batch_first ? 0 : 1;
    s->x = t->ndim == 2 ? ag_unsqueeze(t, bdim) : t;
    s->n = s->x->shape[bdim];
    s->len = s->x->shape[1 - bdim];
    return s->x != NULL;
}

/* attn_mask (L,S) or (N*H,L,S); key padding mask (N,S), or (S) when the input was unbatched
 * (then *kpm is replaced by its (1,S) view). Checked here so the message names the layer's op
 * and the argument. */
bool ag__tf_check_masks(const char *op, const char *mask_name, ag_tensor *am, const char *kpm_name, ag_tensor **kpm,
                        bool unbatched, int64_t N, int64_t H, int64_t L, int64_t S) {
    char b[128];
    if ((am && !ag__check_not_null(op, am)) || (*kpm && !ag__check_not_null(op, *kpm))) return false;
    if (am && !((am->ndim == 2 && am->shape[0] == L && am->shape[1] == S) ||
                (am->ndim == 3 && am->shape[0] == N * H && am->shape[1] == L && am->shape[2] == S))) {
        ag_error(op, "%s %s: expected (%lld,%lld) or (%lld,%lld,%lld) (batch*nhead, target, source)", mask_name,
                 ag_shape_str(am, b), (long long)L, (long long)S, (long long)(N * H), (long long)L, (long long)S);
        return false;
    }
    if (am && am->dtype != AG_BOOL && am->dtype != AG_F32 && am->dtype != AG_F64) {
        ag_error(op, "%s %s: dtype %s, expected bool or the input's float dtype", mask_name, ag_shape_str(am, b),
                 ag_dtype_name(am->dtype));
        return false;
    }
    ag_tensor *k = *kpm;
    if (!k) return true;
    if (k->dtype != AG_BOOL && k->dtype != AG_F32 && k->dtype != AG_F64) {
        /* torch: "only bool and floating types of key_padding_mask are supported" */
        ag_error(op, "%s %s: dtype %s, only bool and float key padding masks are supported", kpm_name,
                 ag_shape_str(k, b), ag_dtype_name(k->dtype));
        return false;
    }
    bool ok = unbatched ? k->ndim == 1 && k->shape[0] == S : k->ndim == 2 && k->shape[0] == N && k->shape[1] == S;
    if (!ok) {
        if (unbatched)
            ag_error(op, "%s %s: expected (%lld) for unbatched input", kpm_name, ag_shape_str(k, b), (long long)S);
        else
            ag_error(op, "%s %s: expected (%lld,%lld) (batch, source length)", kpm_name, ag_shape_str(k, b),
                     (long long)N, (long long)S);
        return false;
    }
    if (unbatched) *kpm = ag_unsqueeze(k, 0);
    return *kpm != NULL;
}

/* What an attention block reads besides its inputs: kept by ag_recompute for backward. */
typedef struct {
    const ag_mha_module *attn;
    ag_mha_args ma;
    double p;
    bool self_attn;      /* in = {x} (q = k = v: one packed projection GEMM), else {q, kv} */
    ag_tensor **weights; /* the attention weights wanted (never when recomputed) */
    bool packed;         /* skip_padding: q and kv are the rows qr and kr (copies: ag_recompute */
    ag__rowset qr, kr;   /* keeps this context for backward, after the caller's frame is gone) */
    bool batch_first;
} attn_ctx;

/* The place of a dropout mask over a block's rows of D elements: the packed rows r with
 * skip_padding, else x's samples along the batch dim (x is batched inside the layers). */
static ag__mask_place rows_place(const ag_tensor *x, const ag__rowset *r, bool batch_first, int64_t D) {
    if (r) return ag__place_rows(r->bf, r->N, r->L, D);
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = D;
    return ag__place_dense(x->ndim, shape, batch_first ? 0 : 1);
}

/* dropoutN(attn(q, kv, kv)): _sa_block / _mha_block */
static ag_tensor *attn_run(void *ctx, ag_tensor *const *in) {
    attn_ctx *c = ctx;
    ag_tensor *kv = in[c->self_attn ? 0 : 1];
    ag_tensor *y = c->packed ? ag__mha_forward_rows(c->attn, in[0], &c->qr, kv, &c->kr, &c->ma)
                         : ag_mha_forward(c->attn, in[0], kv, kv, &c->ma, c->weights);
    TRY(y);
    /* out_proj's output, in place: its backward reads only its input */
    ag__mask_place m = rows_place(in[0], c->packed ? &c->qr : NULL, c->batch_first, y->shape[y->ndim - 1]);
    return ag__dropout_placed(y, c->p, c->ma.training, c->ma.rng, true, false, &m);
}

static ag_tensor *attn_block(const ag_mha_module *attn, ag_tensor *q, ag_tensor *kv, ag_tensor *mask, ag_tensor *kpm,
                             bool causal, const ag_transformer_config *cfg, const ag_transformer_args *a,
                             ag_tensor **weights, const ag__rowset *qr, const ag__rowset *kr) {
    attn_ctx c = {.attn = attn,
                  .ma = {.key_padding_mask = kpm, .attn_mask = mask, .is_causal = causal, .training = a->training,
                         .rng = a->rng, .need_weights = weights != NULL},
                  .p = cfg->dropout, .self_attn = q == kv, .weights = weights, .packed = qr != NULL,
                  .batch_first = cfg->batch_first};
    bool recompute = cfg->recompute_attention;
    if (qr) c.qr = *qr, c.kr = *kr;
    ag_tensor *in[2] = {q, kv};
    if (recompute && !weights) return ag_recompute(attn_run, &c, sizeof c, c.self_attn ? 1 : 2, in, a->rng);
    return attn_run(&c, in);
}

/* dropoutN(linear2(dropout(activation(linear1(x))))): _ff_block. relu: one op that keeps its
 * (N,L,ff) activation packed for backward (ag_feed_forward), unless keep_ff_activation asks for
 * the composed ops when backward will run; gelu (exact or tanh): composed, its dropout in place
 * (gelu's backward reads gelu's input). The last dropout is in place (linear's output). */
ag_tensor *ag__tf_ff_block(const ag_linear_module *l1, const ag_linear_module *l2, const ag_transformer_config *c, ag_tensor *x,
                           const ag__rowset *r, const ag_transformer_args *a) {
    ag_tensor *h;
    bool gelu = c->activation == AG_ACTIVATION_GELU || c->activation == AG_ACTIVATION_GELU_TANH;
    ag__mask_place hidden = rows_place(x, r, c->batch_first, l1->weight->shape[0]);
    if (gelu || (c->keep_ff_activation && ag_grad_enabled())) {
        TRY(h = ag_linear_forward(l1, x));
        if (gelu) TRY(h = c->activation == AG_ACTIVATION_GELU ? ag_gelu(h) : ag_gelu_tanh(h));
        TRY(h = ag__dropout_placed(h, c->dropout, a->training, a->rng, true, !gelu, &hidden));
        TRY(h = ag_linear_forward(l2, h));
    } else {
        TRY(h = ag__feed_forward_placed(x, l1->weight, l1->bias, l2->weight, l2->bias, c->dropout, a->training, a->rng,
                                        &hidden));
    }
    ag__mask_place out = rows_place(h, r, c->batch_first, h->shape[h->ndim - 1]);
    return ag__dropout_placed(h, c->dropout, a->training, a->rng, true, false, &out);
}

static ag_tensor *block_run(const ag__tf_block *b, ag_tensor *h, const ag_transformer_config *c,
                            const ag_transformer_args *a) {
    if (!b->attn) return ag__tf_ff_block(b->l1, b->l2, c, h, b->qr, a);
    return attn_block(b->attn, h, b->kv ? b->kv : h, b->mask, b->kpm, b->causal, c, a, b->weights, b->qr, b->kr);
}

/* post-norm: norm(x + block(x));  norm_first: x + block(norm(x)).
 * The sum is made in the block's output (x + y == y + x exactly): the blocks end in dropout_,
 * whose backward reads its mask, and x may be saved (by norm_first's LayerNorm, by linear1). */
ag_tensor *ag__tf_residual(ag_tensor *x, const ag_layer_norm_module *norm, const ag__tf_block *b,
                           const ag_transformer_config *c, const ag_transformer_args *a) {
    if (c->norm_first) {
        ag_tensor *h = ag_layer_norm_forward(norm, x);
        TRY(h);
        ag_tensor *y = block_run(b, h, c, a);
        TRY(y);
        return ag_add_(y, x);
    }
    ag_tensor *y = block_run(b, x, c, a);
    TRY(y);
    TRY(x = ag_add_(y, x));
    return ag_layer_norm_forward(norm, x);
}

/* Without grad (inference) a layer keeps only its output: its intermediates are forgotten as
 * soon as it returns, so a stack needs one layer's worth of memory, not all of them. Not when
 * attention weights are handed out (they live in the same arena). */
ag_tensor *ag__tf_layer_result(ag_arena_mark mark, ag_tensor *y, bool keep_all) {
    if (!y || keep_all || ag_grad_enabled()) return y;
    return ag_arena_rewind_keep(ag_arena_current(), mark, y);
}

/* the input's rows that are run (all of it without skip_padding) */
ag_tensor *ag__tf_rows_in(const seq *s, const ag__rowset *r) { return r ? ag__take_rows(s->x, r->src, r->n) : s->x; }

/* the output in the input's layout: padded positions 0 with skip_padding; unbatched again */
ag_tensor *ag__tf_rows_out(ag_tensor *x, const seq *s, const ag__rowset *r, bool unbatched,
                           const ag_transformer_config *c) {
    if (x && r) x = ag__put_rows(x, r->src, s->x->ndim, s->x->shape);
    return x && unbatched ? ag_squeeze(x, c->batch_first ? 0 : 1) : x;
}

/* ---- stacks ------------------------------------------------------------------------------- */

static bool check_layers(const char *op, const char *prefix, int num_layers) {
    if (num_layers < 1 || num_layers > AG_TRANSFORMER_MAX_LAYERS) {
        ag_error(op, "'%s': num_layers %d, expected 1 to %d", prefix ? prefix : "", num_layers,
                 AG_TRANSFORMER_MAX_LAYERS);
        return false;
    }
    return true;
}

/* torch's _get_clones deep-copies one layer: give layers 1.. the values of layer 0, whose
 * parameters are p->list[first, first + per_layer) (every layer adds the same count). */
static void clone_first_layer(ag_params *p, int first, int per_layer, int num_layers) {
    for (int l = 1; l < num_layers; l++)
        for (int k = 0; k < per_layer; k++) ag_copy_(p->list[first + l * per_layer + k], p->list[first + k]);
}

/* The layers "<prefix>.layers.N" of a stack, made by new_layer (false when it failed), then every
 * layer given layer 0's values; false (nothing usable) on any failure. */
bool ag__tf_stack_new(const char *op, ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                      int num_layers, ag_rng *rng,
                      bool (*new_layer)(void *layers, int l, ag_params *p, const char *name,
                                        const ag_transformer_config *cfg, ag_rng *rng),
                      void *layers) {
    if (!check_layers(op, prefix, num_layers) || !ag__tf_check_config(op, prefix, cfg) || !p) {
        if (!p) ag_error(op, "'%s': parameter set is NULL", prefix ? prefix : "");
        return false;
    }
    char b[256], layer[256];
    int first = p->count;
    for (int l = 0; l < num_layers; l++) {
        snprintf(layer, sizeof layer, "layers.%d", l);
        if (!new_layer(layers, l, p, ag__param_name(b, sizeof b, "ag_transformer", prefix, layer), cfg, rng))
            return false;
    }
    clone_first_layer(p, first, (p->count - first) / num_layers, num_layers);
    return true;
}

/* ---- nn.Transformer ------------------------------------------------------------------------ */

ag_transformer_module ag_transformer_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                    int num_encoder_layers, int num_decoder_layers, ag_rng *rng) {
    ag_transformer_module m;
    memset(&m, 0, sizeof m);
    char b[256];
    int first = p ? p->count : 0;
    m.encoder = ag_transformer_encoder_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, "encoder"), cfg,
                                           num_encoder_layers, true, rng);
    if (!m.encoder.num_layers) return m;
    m.decoder = ag_transformer_decoder_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, "decoder"), cfg,
                                           num_decoder_layers, true, rng);
    if (!m.decoder.num_layers) {
        m.encoder.num_layers = 0;
        return m;
    }
    /* _reset_parameters: xavier_uniform_ on every parameter with dim > 1 (all 2-d here:
     * fan_in = shape[1], fan_out = shape[0]), in registration order */
    for (int i = first; i < p->count; i++) {
        ag_tensor *w = p->list[i];
        if (w->ndim < 2) continue;
        double bound = sqrt(6.0 / (double)(w->shape[0] + w->shape[1]));
        ag_uniform_(rng, w, -bound, bound);
    }
    return m;
}

ag_tensor *ag_transformer_forward(const ag_transformer_module *m, ag_tensor *src, ag_tensor *tgt,
                                  const ag_transformer_args *args) {
    const char *op = "ag_transformer_forward";
    if (!m || m->encoder.num_layers < 1 || m->decoder.num_layers < 1) {
        ag_error(op, "module is NULL or was not created (ag_transformer_new failed?)");
        return NULL;
    }
    if (!ag__check_not_null(op, src) || !ag__check_not_null(op, tgt)) return NULL;
    const ag_transformer_config *c = &m->encoder.layers[0].cfg;
    char b1[128], b2[128];
    int bdim = c->batch_first ? 0 : 1;
    if (src->ndim != tgt->ndim || src->ndim < 2 || src->ndim > 3 ||
        (src->ndim == 3 && src->shape[bdim] != tgt->shape[bdim])) {
        ag_error(op, "src %s, tgt %s: expected both batched (3-d) with equal batch sizes "
                     "(batch_first=%d) or both unbatched (2-d)",
                 ag_shape_str(src, b1), ag_shape_str(tgt, b2), c->batch_first);
        return NULL;
    }
    if (src->shape[src->ndim - 1] != c->d_model || tgt->shape[tgt->ndim - 1] != c->d_model) {
        ag_error(op, "src %s, tgt %s: the feature number of src and tgt must be d_model %lld", ag_shape_str(src, b1),
                 ag_shape_str(tgt, b2), (long long)c->d_model);
        return NULL;
    }
    if (c->skip_padding && args && args->src_key_padding_mask &&
        !ag__padding_covers(args->memory_key_padding_mask, args->src_key_padding_mask)) {
        ag_error(op, "skip_padding: memory_key_padding_mask must mask every position src_key_padding_mask masks (the "
                     "encoder's outputs there are not computed, so the decoder must not read them)");
        return NULL;
    }
    ag_tensor *memory = ag_transformer_encoder_forward(&m->encoder, src, args);
    TRY(memory);
    return ag_transformer_decoder_forward(&m->decoder, tgt, memory, args);
}
