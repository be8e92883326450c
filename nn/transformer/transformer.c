/* Transformer layers and stacks, step for step as torch 1.13's nn/modules/transformer.py (the
 * differentiable path). Layers only combine existing ops (ag_mha_forward, ag_linear,
 * ag_layer_norm, ag_dropout), so every gradient comes from those ops' own backward. LayerNorm
 * and Linear act on the last dim, so batch_first only matters to the attention blocks. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"
#include "transformer.h"

#define TRY(e)                                                                                                    \
    do {                                                                                                          \
        if (!(e)) return NULL;                                                                                    \
    } while (0)

ag_transformer_config ag_transformer_defaults(int64_t d_model, int64_t nhead) {
    return (ag_transformer_config){.d_model = d_model, .nhead = nhead, .dim_feedforward = 2048, .dropout = 0.1,
                                   .activation = AG_ACTIVATION_RELU, .layer_norm_eps = 1e-5};
}

static bool check_config(const char *op, const char *prefix, const ag_transformer_config *c) {
    if (!c || c->d_model <= 0 || c->nhead <= 0 || c->d_model % c->nhead != 0 || c->dim_feedforward <= 0 ||
        !(c->dropout >= 0 && c->dropout <= 1) || !(c->layer_norm_eps >= 0) ||
        (c->activation != AG_ACTIVATION_RELU && c->activation != AG_ACTIVATION_GELU)) {
        if (!c) ag_error(op, "'%s': config is NULL", prefix ? prefix : "");
        else
            ag_error(op, "'%s': d_model %lld, nhead %lld, dim_feedforward %lld, dropout %g, layer_norm_eps %g, "
                         "activation %d: d_model must be a positive multiple of nhead, dim_feedforward > 0, dropout "
                         "in [0,1], eps >= 0, activation relu or gelu",
                     prefix ? prefix : "", (long long)c->d_model, (long long)c->nhead, (long long)c->dim_feedforward,
                     c->dropout, c->layer_norm_eps, (int)c->activation);
        return false;
    }
    return true;
}

static ag_mha_t attn_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c,
                         ag_rng *rng) {
    char b[256];
    ag_mha_config mc = ag_mha_defaults(c->d_model, c->nhead);
    mc.dropout = c->dropout;
    mc.batch_first = c->batch_first;
    return ag_mha_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), &mc, rng);
}

static ag_linear_t linear_new(ag_params *p, const char *prefix, const char *name, int64_t in, int64_t out,
                              ag_rng *rng) {
    char b[256];
    return ag_linear_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), in, out, true, rng);
}

static ag_layer_norm_t norm_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c) {
    char b[256];
    return ag_layer_norm_new(p, ag__param_name(b, sizeof b, "ag_transformer", prefix, name), c->d_model,
                             c->layer_norm_eps, true);
}

/* Modules are registered in torch's __init__ order, which is the state_dict order. */
ag_transformer_encoder_layer_t ag_transformer_encoder_layer_new(ag_params *p, const char *prefix,
                                                                const ag_transformer_config *cfg, ag_rng *rng) {
    ag_transformer_encoder_layer_t m;
    memset(&m, 0, sizeof m);
    if (!check_config("ag_transformer_encoder_layer_new", prefix, cfg)) return m;
    m.cfg = *cfg;
    m.self_attn = attn_new(p, prefix, "self_attn", cfg, rng);
    m.linear1 = linear_new(p, prefix, "linear1", cfg->d_model, cfg->dim_feedforward, rng);
    m.linear2 = linear_new(p, prefix, "linear2", cfg->dim_feedforward, cfg->d_model, rng);
    m.norm1 = norm_new(p, prefix, "norm1", cfg);
    m.norm2 = norm_new(p, prefix, "norm2", cfg);
    if (!m.linear1.weight || !m.linear2.weight || !m.norm1.weight || !m.norm2.weight) m.self_attn.in_proj_weight = NULL;
    return m;
}

ag_transformer_decoder_layer_t ag_transformer_decoder_layer_new(ag_params *p, const char *prefix,
                                                                const ag_transformer_config *cfg, ag_rng *rng) {
    ag_transformer_decoder_layer_t m;
    memset(&m, 0, sizeof m);
    if (!check_config("ag_transformer_decoder_layer_new", prefix, cfg)) return m;
    m.cfg = *cfg;
    m.self_attn = attn_new(p, prefix, "self_attn", cfg, rng);
    m.multihead_attn = attn_new(p, prefix, "multihead_attn", cfg, rng);
    m.linear1 = linear_new(p, prefix, "linear1", cfg->d_model, cfg->dim_feedforward, rng);
    m.linear2 = linear_new(p, prefix, "linear2", cfg->dim_feedforward, cfg->d_model, rng);
    m.norm1 = norm_new(p, prefix, "norm1", cfg);
    m.norm2 = norm_new(p, prefix, "norm2", cfg);
    m.norm3 = norm_new(p, prefix, "norm3", cfg);
    if (!m.multihead_attn.in_proj_weight || !m.linear1.weight || !m.linear2.weight || !m.norm1.weight ||
        !m.norm2.weight || !m.norm3.weight)
        m.self_attn.in_proj_weight = NULL;
    return m;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* A sequence as the layers see it: always batched; unbatched (L,E) input gets a batch dim of 1
 * (at 0 or 1 by batch_first) and its key padding masks (L) become (1,L). */
typedef struct {
    ag_tensor *x;
    int64_t n, len;
} seq;

static bool check_seq(const char *op, const char *what, ag_tensor *t, const ag_transformer_config *c, seq *s) {
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
static bool check_masks(const char *op, const char *mask_name, ag_tensor *am, const char *kpm_name, ag_tensor **kpm,
                        bool unbatched, int64_t N, int64_t H, int64_t L, int64_t S) {
    char b[128];
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
    const ag_mha_t *attn;
    ag_mha_args ma;
    double p;
    bool self_attn;      /* in = {x} (q = k = v: one packed projection GEMM), else {q, kv} */
    ag_tensor **weights; /* the attention weights wanted (never when recomputed) */
    bool packed;         /* skip_padding: q and kv are the rows qr and kr (copies: ag_recompute */
    ag__rowset qr, kr;   /* keeps this context for backward, after the caller's frame is gone) */
} attn_ctx;

/* dropoutN(attn(q, kv, kv)): _sa_block / _mha_block */
static ag_tensor *attn_run(void *ctx, ag_tensor *const *in) {
    attn_ctx *c = ctx;
    ag_tensor *kv = in[c->self_attn ? 0 : 1];
    ag_tensor *y = c->packed ? ag__mha_forward_rows(c->attn, in[0], &c->qr, kv, &c->kr, &c->ma)
                         : ag_mha_forward(c->attn, in[0], kv, kv, &c->ma, c->weights);
    TRY(y);
    return ag_dropout_(y, c->p, c->ma.training, c->ma.rng); /* out_proj's output: its backward reads only its input */
}

static ag_tensor *attn_block(const ag_mha_t *attn, ag_tensor *q, ag_tensor *kv, ag_tensor *mask, ag_tensor *kpm,
                             bool causal, double p, const ag_transformer_args *a, ag_tensor **weights,
                             bool recompute, const ag__rowset *qr, const ag__rowset *kr) {
    attn_ctx c = {.attn = attn,
                  .ma = {.key_padding_mask = kpm, .attn_mask = mask, .is_causal = causal, .training = a->training,
                         .rng = a->rng, .need_weights = weights != NULL},
                  .p = p, .self_attn = q == kv, .weights = weights, .packed = qr != NULL};
    if (qr) c.qr = *qr, c.kr = *kr;
    ag_tensor *in[2] = {q, kv};
    if (recompute && !weights) return ag_recompute(attn_run, &c, sizeof c, c.self_attn ? 1 : 2, in, a->rng);
    return attn_run(&c, in);
}

/* dropoutN(linear2(dropout(activation(linear1(x))))): _ff_block. relu: one op that keeps its
 * (N,L,ff) activation packed for backward (ag_feed_forward), unless keep_ff_activation asks for
 * the composed ops when backward will run; gelu: composed, its dropout in place (gelu's backward
 * reads gelu's input). The last dropout is in place (linear's output). */
static ag_tensor *ff_block(const ag_linear_t *l1, const ag_linear_t *l2, const ag_transformer_config *c, ag_tensor *x,
                           const ag_transformer_args *a) {
    ag_tensor *h;
    bool gelu = c->activation == AG_ACTIVATION_GELU;
    if (gelu || (c->keep_ff_activation && ag_grad_enabled())) {
        TRY(h = ag_linear_forward(l1, x));
        TRY(h = gelu ? ag_dropout_(ag_gelu(h), c->dropout, a->training, a->rng)
                     : ag_relu_dropout_(h, c->dropout, a->training, a->rng));
        TRY(h = ag_linear_forward(l2, h));
    } else {
        TRY(h = ag_feed_forward(x, l1->weight, l1->bias, l2->weight, l2->bias, c->dropout, a->training, a->rng));
    }
    return ag_dropout_(h, c->dropout, a->training, a->rng);
}

/* post-norm: norm(x + block);  norm_first: x + block(norm(x)) — the block given normed input.
 * The sum is made in the block's output (x + y == y + x exactly): the blocks end in dropout_,
 * whose backward reads its mask, and x may be saved (by norm_first's LayerNorm, by linear1). */
#define RESIDUAL(x, norm, block_of)                                                                              \
    do {                                                                                                          \
        if (c->norm_first) {                                                                                      \
            ag_tensor *h_ = ag_layer_norm_forward(&(norm), x);                                                    \
            TRY(h_);                                                                                              \
            ag_tensor *y_ = block_of(h_);                                                                         \
            TRY(y_);                                                                                              \
            TRY(x = ag_add_(y_, x));                                                                              \
        } else {                                                                                                  \
            ag_tensor *y_ = block_of(x);                                                                          \
            TRY(y_);                                                                                              \
            TRY(x = ag_add_(y_, x));                                                                              \
            TRY(x = ag_layer_norm_forward(&(norm), x));                                                           \
        }                                                                                                         \
    } while (0)

/* Without grad (inference) a layer keeps only its output: its intermediates are forgotten as
 * soon as it returns, so a stack needs one layer's worth of memory, not all of them. Not when
 * attention weights are handed out (they live in the same arena). */
static ag_tensor *layer_result(ag_arena_mark mark, ag_tensor *y, bool keep_all) {
    if (!y || keep_all || ag_grad_enabled()) return y;
    return ag_arena_rewind_keep(ag_arena_current(), mark, y);
}

/* A checked encoder call: the batched input, its key padding mask and, with skip_padding, the
 * rows it runs on (r, else NULL); the same for a decoder, with the memory's. Checked once for
 * a stack: its layers share one config. */
typedef struct {
    seq s;
    ag_tensor *kpm;
    ag__rowset rs;
    const ag__rowset *r;
    bool unbatched;
} enc_call;

typedef struct {
    seq t, mem;
    ag_tensor *tkpm, *mkpm;
    ag__rowset rt, rm;
    const ag__rowset *r, *rmem;
    bool unbatched;
} dec_call;

static bool enc_prepare(const char *op, const ag_transformer_config *c, ag_tensor *src, const ag_transformer_args *a,
                        enc_call *e) {
    if (!check_seq(op, "src", src, c, &e->s)) return false;
    e->unbatched = src->ndim == 2;
    e->kpm = a->src_key_padding_mask;
    if (!check_masks(op, "src_mask", a->src_mask, "src_key_padding_mask", &e->kpm, e->unbatched, e->s.n, c->nhead,
                     e->s.len, e->s.len))
        return false;
    e->r = c->skip_padding && e->kpm && ag__live_rows(e->kpm, c->batch_first, &e->rs) ? &e->rs : NULL;
    return true;
}

static bool dec_prepare(const char *op, const ag_transformer_config *c, ag_tensor *tgt, ag_tensor *memory,
                        const ag_transformer_args *a, dec_call *d) {
    if (!check_seq(op, "tgt", tgt, c, &d->t) || !check_seq(op, "memory", memory, c, &d->mem)) return false;
    if (tgt->ndim != memory->ndim || d->t.n != d->mem.n) {
        char b1[128], b2[128];
        ag_error(op, "tgt %s, memory %s: batch sizes differ (batch_first=%d)", ag_shape_str(tgt, b1),
                 ag_shape_str(memory, b2), c->batch_first);
        return false;
    }
    d->unbatched = tgt->ndim == 2;
    d->tkpm = a->tgt_key_padding_mask;
    d->mkpm = a->memory_key_padding_mask;
    if (!check_masks(op, "tgt_mask", a->tgt_mask, "tgt_key_padding_mask", &d->tkpm, d->unbatched, d->t.n, c->nhead,
                     d->t.len, d->t.len) ||
        !check_masks(op, "memory_mask", a->memory_mask, "memory_key_padding_mask", &d->mkpm, d->unbatched, d->t.n,
                     c->nhead, d->t.len, d->mem.len))
        return false;
    /* skip_padding: the target's rows and the memory's (which only the cross-attention reads) */
    d->r = d->rmem = NULL;
    if (c->skip_padding && d->tkpm && d->mkpm && !a->cross_attn_weights &&
        ag__live_rows(d->tkpm, c->batch_first, &d->rt) && ag__live_rows(d->mkpm, c->batch_first, &d->rm))
        d->r = &d->rt, d->rmem = &d->rm;
    return true;
}

/* the input's rows that are run (all of it without skip_padding) */
static ag_tensor *rows_in(const seq *s, const ag__rowset *r) { return r ? ag__take_rows(s->x, r->src, r->n) : s->x; }

/* the output in the input's layout: padded positions 0 with skip_padding; unbatched again */
static ag_tensor *rows_out(ag_tensor *x, const seq *s, const ag__rowset *r, bool unbatched,
                           const ag_transformer_config *c) {
    if (x && r) x = ag__put_rows(x, r->src, s->x->ndim, s->x->shape);
    return x && unbatched ? ag_squeeze(x, c->batch_first ? 0 : 1) : x;
}

/* self_attn and feed-forward blocks of an encoder layer on x (e's rows) */
static ag_tensor *enc_layer_run(const ag_transformer_encoder_layer_t *m, ag_tensor *x, const enc_call *e,
                                const ag_transformer_args *a) {
    const ag_transformer_config *c = &m->cfg;
#define SA(h)                                                                                                         \
    attn_block(&m->self_attn, h, h, a->src_mask, e->kpm, a->src_is_causal, c->dropout, a, NULL,                       \
               c->recompute_attention, e->r, e->r)
#define FF(h) ff_block(&m->linear1, &m->linear2, c, h, a)
    RESIDUAL(x, m->norm1, SA);
    RESIDUAL(x, m->norm2, FF);
#undef SA
#undef FF
    return x;
}

/* self_attn, multihead_attn (over mx, the memory's rows) and feed-forward blocks of a decoder
 * layer on x (d's target rows) */
static ag_tensor *dec_layer_run(const ag_transformer_decoder_layer_t *m, ag_tensor *x, ag_tensor *mx,
                                const dec_call *d, const ag_transformer_args *a) {
    const ag_transformer_config *c = &m->cfg;
#define SA(h)                                                                                                         \
    attn_block(&m->self_attn, h, h, a->tgt_mask, d->tkpm, a->tgt_is_causal, c->dropout, a, NULL,                      \
               c->recompute_attention, d->r, d->r)
#define FF(h) ff_block(&m->linear1, &m->linear2, c, h, a)
#define CA(h)                                                                                                         \
    attn_block(&m->multihead_attn, h, mx, a->memory_mask, d->mkpm, a->memory_is_causal, c->dropout, a,                 \
               a->cross_attn_weights, c->recompute_attention, d->r, d->rmem)
    RESIDUAL(x, m->norm1, SA);
    RESIDUAL(x, m->norm2, CA);
    RESIDUAL(x, m->norm3, FF);
#undef SA
#undef CA
#undef FF
    return x;
}

ag_tensor *ag_transformer_encoder_layer_forward(const ag_transformer_encoder_layer_t *m, ag_tensor *src,
                                                const ag_transformer_args *args) {
    const char *op = "ag_transformer_encoder_layer_forward";
    if (!m || !m->self_attn.in_proj_weight) {
        ag_error(op, "module is NULL or was not created (ag_transformer_encoder_layer_new failed?)");
        return NULL;
    }
    ag_transformer_args none = {0};
    const ag_transformer_args *a = args ? args : &none;
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    enc_call e;
    if (!enc_prepare(op, &m->cfg, src, a, &e)) return NULL;
    ag_tensor *x = rows_in(&e.s, e.r);
    TRY(x);
    TRY(x = enc_layer_run(m, x, &e, a));
    return layer_result(mark, rows_out(x, &e.s, e.r, e.unbatched, &m->cfg), false);
}

ag_tensor *ag_transformer_decoder_layer_forward(const ag_transformer_decoder_layer_t *m, ag_tensor *tgt,
                                                ag_tensor *memory, const ag_transformer_args *args) {
    const char *op = "ag_transformer_decoder_layer_forward";
    if (!m || !m->self_attn.in_proj_weight) {
        ag_error(op, "module is NULL or was not created (ag_transformer_decoder_layer_new failed?)");
        return NULL;
    }
    ag_transformer_args none = {0};
    const ag_transformer_args *a = args ? args : &none;
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    dec_call d;
    if (!dec_prepare(op, &m->cfg, tgt, memory, a, &d)) return NULL;
    ag_tensor *x = rows_in(&d.t, d.r), *mx = rows_in(&d.mem, d.rmem);
    TRY(x);
    TRY(mx);
    TRY(x = dec_layer_run(m, x, mx, &d, a));
    return layer_result(mark, rows_out(x, &d.t, d.r, d.unbatched, &m->cfg), a->cross_attn_weights != NULL);
}

/* ---- incremental decoding ------------------------------------------------------------------- */

struct ag_decoder_cache {
    int64_t N, S, E, H, max_len, t;
    int layers;
    ag_tensor *k[AG_TRANSFORMER_MAX_LAYERS], *v[AG_TRANSFORMER_MAX_LAYERS];   /* (N,H,max_len,Dh) */
    ag_tensor *mk[AG_TRANSFORMER_MAX_LAYERS], *mv[AG_TRANSFORMER_MAX_LAYERS]; /* (N,H,S,Dh) */
    ag_tensor *mask;                                                          /* (N,1,1,S) or NULL */
};

/* (N,L,E) rows as (N,H,L,Dh) heads, contiguous */
static ag_tensor *split_heads(ag_tensor *x, int64_t N, int64_t L, int64_t H) {
    return ag_contiguous(ag_transpose(ag_reshape(x, AG_SHAPE(N, L, H, x->shape[x->ndim - 1] / H)), 1, 2));
}

static bool inference_only(const char *op) {
    if (!ag_grad_enabled()) return true;
    ag_error(op, "grad mode is on: incremental decoding is for inference (ag_set_grad_enabled(false) first)");
    return false;
}

static bool step_supported(const char *op, const ag_mha_t *a) {
    if (a->in_proj_weight && !a->bias_k && !a->cfg.add_zero_attn) return true;
    ag_error(op, "attention with separate q/k/v projections, bias_k/bias_v or add_zero_attn is not supported");
    return false;
}

ag_decoder_cache *ag_decoder_cache_new(const ag_transformer_decoder_t *m, ag_tensor *memory,
                                       ag_tensor *memory_key_padding_mask, int64_t max_len) {
    const char *op = "ag_decoder_cache_new";
    char b[128];
    if (!m || m->num_layers < 1 || !ag__check_float(op, memory) || !inference_only(op)) return NULL;
    const ag_transformer_config *cf = &m->layers[0].cfg;
    int64_t E = cf->d_model, H = cf->nhead;
    if (memory->ndim != 3 || memory->shape[2] != E || max_len < 1) {
        ag_error(op, "memory %s, max_len %lld: expected (N,S,%lld) and max_len >= 1", ag_shape_str(memory, b),
                 (long long)max_len, (long long)E);
        return NULL;
    }
    int64_t N = memory->shape[0], S = memory->shape[1], Dh = E / H;
    ag_decoder_cache *c = ag_arena_alloc(ag_arena_current(), sizeof *c);
    *c = (ag_decoder_cache){.N = N, .S = S, .E = E, .H = H, .max_len = max_len, .layers = m->num_layers};
    if (memory_key_padding_mask) {
        TRY(c->mask = ag_attention_mask(NULL, memory_key_padding_mask, N, H));
        c->mask = ag_clone(c->mask); /* the cache's own: reordered with the rows */
    }
    for (int l = 0; l < m->num_layers; l++) {
        const ag_mha_t *ca = &m->layers[l].multihead_attn;
        if (!step_supported(op, &m->layers[l].self_attn) || !step_supported(op, ca)) return NULL;
        TRY(c->k[l] = ag_zeros(memory->dtype, AG_SHAPE(N, H, max_len, Dh)));
        TRY(c->v[l] = ag_zeros(memory->dtype, AG_SHAPE(N, H, max_len, Dh)));
        ag_tensor *bkv = ca->in_proj_bias ? ag_narrow(ca->in_proj_bias, 0, E, 2 * E) : NULL;
        ag_tensor *kv = ag_linear(memory, ag_narrow(ca->in_proj_weight, 0, E, 2 * E), bkv); /* (N,S,2E) */
        TRY(kv);
        c->mk[l] = split_heads(ag_narrow(kv, 2, 0, E), N, S, H);
        c->mv[l] = split_heads(ag_narrow(kv, 2, E, E), N, S, H);
    }
    return c;
}

/* softmax(q kᵀ/√Dh) v of one query row per sequence: q (N,E) from the projection's columns
 * [0,E), keys and values (N,H,len,Dh)  ->  (N,E) with the heads merged */
static ag_tensor *attend_one(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, int64_t N, int64_t H) {
    ag_tensor *o = ag_attention(split_heads(ag_unsqueeze(q, 1), N, 1, H), k, v, mask, false, 0, NULL, false, NULL);
    return o ? ag_reshape(o, AG_SHAPE(N, q->shape[1])) : NULL; /* (N,H,1,Dh): heads already in order */
}

static ag_tensor *decoder_layer_step(const ag_transformer_decoder_layer_t *L, ag_decoder_cache *c, int l,
                                     ag_tensor *x) {
    const ag_transformer_config *cf = &L->cfg;
    const ag_transformer_args eval = {0};
    int64_t N = c->N, E = c->E, H = c->H, t = c->t;
    /* self-attention: this position's key and value join the cache, its query attends to them all */
    ag_tensor *h = cf->norm_first ? ag_layer_norm_forward(&L->norm1, x) : x;
    ag_tensor *qkv = ag_linear(h, L->self_attn.in_proj_weight, L->self_attn.in_proj_bias); /* (N,3E) */
    TRY(qkv);
    ag_copy_(ag_select(c->k[l], 2, t), ag_reshape(ag_narrow(qkv, 1, E, E), AG_SHAPE(N, H, E / H)));
    ag_copy_(ag_select(c->v[l], 2, t), ag_reshape(ag_narrow(qkv, 1, 2 * E, E), AG_SHAPE(N, H, E / H)));
    ag_tensor *o = attend_one(ag_narrow(qkv, 1, 0, E), ag_narrow(c->k[l], 2, 0, t + 1),
                              ag_narrow(c->v[l], 2, 0, t + 1), NULL, N, H);
    ag_tensor *y;
    TRY(y = ag_linear_forward(&L->self_attn.out_proj, o));
    x = cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm1, ag_add_(y, x));
    /* cross-attention over the cached memory keys and values */
    const ag_mha_t *ca = &L->multihead_attn;
    h = cf->norm_first ? ag_layer_norm_forward(&L->norm2, x) : x;
    ag_tensor *q = ag_linear(h, ag_narrow(ca->in_proj_weight, 0, 0, E),
                             ca->in_proj_bias ? ag_narrow(ca->in_proj_bias, 0, 0, E) : NULL);
    TRY(q);
    TRY(y = ag_linear_forward(&ca->out_proj, attend_one(q, c->mk[l], c->mv[l], c->mask, N, H)));
    x = cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm2, ag_add_(y, x));
    /* feed-forward */
    h = cf->norm_first ? ag_layer_norm_forward(&L->norm3, x) : x;
    TRY(y = ff_block(&L->linear1, &L->linear2, cf, h, &eval));
    return cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm3, ag_add_(y, x));
}

ag_tensor *ag_decoder_step(const ag_transformer_decoder_t *m, ag_decoder_cache *c, ag_tensor *x) {
    const char *op = "ag_decoder_step";
    char b[128];
    if (!m || !c || !ag__check_float(op, x)) return NULL;
    if (!inference_only(op)) return NULL;
    if (x->ndim != 2 || x->shape[0] != c->N || x->shape[1] != c->E || c->t >= c->max_len) {
        ag_error(op, "x %s at position %lld: expected (%lld,%lld) and a position below max_len %lld",
                 ag_shape_str(x, b), (long long)c->t, (long long)c->N, (long long)c->E, (long long)c->max_len);
        return NULL;
    }
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    for (int l = 0; l < m->num_layers && x; l++) x = decoder_layer_step(&m->layers[l], c, l, x);
    if (x && m->norm.weight) x = ag_layer_norm_forward(&m->norm, x);
    if (!x) return NULL;
    c->t++;
    return ag_arena_rewind_keep(ag_arena_current(), mark, x);
}

void ag_decoder_cache_reorder(ag_decoder_cache *c, ag_tensor *rows) {
    const char *op = "ag_decoder_cache_reorder";
    char b[128];
    if (!c || !ag__check_not_null(op, rows)) return;
    if (rows->ndim != 1 || rows->shape[0] != c->N || (rows->dtype != AG_I64 && rows->dtype != AG_I32)) {
        ag_error(op, "rows %s %s: expected (%lld) integer indices", ag_shape_str(rows, b), ag_dtype_name(rows->dtype),
                 (long long)c->N);
        return;
    }
    ag_arena *a = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(a); /* the gathered copies are scratch */
    for (int l = 0; l < c->layers; l++) {
        ag_tensor *cached[4] = {ag_narrow(c->k[l], 2, 0, c->t), ag_narrow(c->v[l], 2, 0, c->t), c->mk[l], c->mv[l]};
        for (int i = 0; i < 4; i++) ag_copy_(cached[i], ag_index_select(cached[i], 0, rows));
    }
    if (c->mask) ag_copy_(c->mask, ag_index_select(c->mask, 0, rows));
    ag_arena_rewind(a, mark);
}

int64_t ag_decoder_cache_len(const ag_decoder_cache *c) { return c ? c->t : 0; }

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
static bool stack_new(const char *op, ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                      int num_layers, ag_rng *rng, bool (*new_layer)(void *layers, int l, ag_params *p,
                                                                     const char *name, const ag_transformer_config *cfg,
                                                                     ag_rng *rng),
                      void *layers) {
    if (!check_layers(op, prefix, num_layers) || !check_config(op, prefix, cfg) || !p) {
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

static bool new_encoder_layer(void *layers, int l, ag_params *p, const char *name, const ag_transformer_config *cfg,
                              ag_rng *rng) {
    ag_transformer_encoder_layer_t *m = (ag_transformer_encoder_layer_t *)layers + l;
    *m = ag_transformer_encoder_layer_new(p, name, cfg, rng);
    return m->self_attn.in_proj_weight != NULL;
}

static bool new_decoder_layer(void *layers, int l, ag_params *p, const char *name, const ag_transformer_config *cfg,
                              ag_rng *rng) {
    ag_transformer_decoder_layer_t *m = (ag_transformer_decoder_layer_t *)layers + l;
    *m = ag_transformer_decoder_layer_new(p, name, cfg, rng);
    return m->self_attn.in_proj_weight != NULL;
}

ag_transformer_encoder_t ag_transformer_encoder_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                                    int num_layers, bool final_norm, ag_rng *rng) {
    ag_transformer_encoder_t m;
    memset(&m, 0, sizeof m);
    if (!stack_new("ag_transformer_encoder_new", p, prefix, cfg, num_layers, rng, new_encoder_layer, m.layers)) {
        memset(&m, 0, sizeof m);
        return m;
    }
    if (final_norm) m.norm = norm_new(p, prefix, "norm", cfg);
    m.num_layers = num_layers;
    return m;
}

ag_transformer_decoder_t ag_transformer_decoder_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                                    int num_layers, bool final_norm, ag_rng *rng) {
    ag_transformer_decoder_t m;
    memset(&m, 0, sizeof m);
    if (!stack_new("ag_transformer_decoder_new", p, prefix, cfg, num_layers, rng, new_decoder_layer, m.layers)) {
        memset(&m, 0, sizeof m);
        return m;
    }
    if (final_norm) m.norm = norm_new(p, prefix, "norm", cfg);
    m.num_layers = num_layers;
    return m;
}

/* A stack checks its input once and, with skip_padding, takes the rows once: its layers and
 * final norm run on them, and only the result is put back in the padded layout. */
ag_tensor *ag_transformer_encoder_forward(const ag_transformer_encoder_t *m, ag_tensor *src,
                                          const ag_transformer_args *args) {
    const char *op = "ag_transformer_encoder_forward";
    if (!m || m->num_layers < 1) {
        ag_error(op, "module is NULL or was not created (ag_transformer_encoder_new failed?)");
        return NULL;
    }
    ag_transformer_args none = {0};
    const ag_transformer_args *a = args ? args : &none;
    const ag_transformer_config *c = &m->layers[0].cfg;
    enc_call e;
    if (!enc_prepare(op, c, src, a, &e)) return NULL;
    ag_tensor *x = rows_in(&e.s, e.r);
    for (int l = 0; l < m->num_layers && x; l++) {
        ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
        x = layer_result(mark, enc_layer_run(&m->layers[l], x, &e, a), false);
    }
    TRY(x);
    if (m->norm.weight) TRY(x = ag_layer_norm_forward(&m->norm, x));
    return rows_out(x, &e.s, e.r, e.unbatched, c);
}

ag_tensor *ag_transformer_decoder_forward(const ag_transformer_decoder_t *m, ag_tensor *tgt, ag_tensor *memory,
                                          const ag_transformer_args *args) {
    const char *op = "ag_transformer_decoder_forward";
    if (!m || m->num_layers < 1) {
        ag_error(op, "module is NULL or was not created (ag_transformer_decoder_new failed?)");
        return NULL;
    }
    ag_transformer_args la = args ? *args : (ag_transformer_args){0};
    const ag_transformer_config *c = &m->layers[0].cfg;
    dec_call d;
    if (!dec_prepare(op, c, tgt, memory, &la, &d)) return NULL;
    ag_tensor *x = rows_in(&d.t, d.r), *mx = rows_in(&d.mem, d.rmem);
    TRY(mx);
    for (int l = 0; l < m->num_layers && x; l++) {
        if (args && args->cross_attn_weights) la.cross_attn_weights = args->cross_attn_weights + l;
        ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
        x = layer_result(mark, dec_layer_run(&m->layers[l], x, mx, &d, &la), la.cross_attn_weights != NULL);
    }
    TRY(x);
    if (m->norm.weight) TRY(x = ag_layer_norm_forward(&m->norm, x));
    return rows_out(x, &d.t, d.r, d.unbatched, c);
}

/* ---- nn.Transformer ------------------------------------------------------------------------ */

ag_transformer_t ag_transformer_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                    int num_encoder_layers, int num_decoder_layers, ag_rng *rng) {
    ag_transformer_t m;
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

ag_tensor *ag_transformer_forward(const ag_transformer_t *m, ag_tensor *src, ag_tensor *tgt,
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
