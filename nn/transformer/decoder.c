/* The Transformer's decoder layer and decoder stack (torch 1.13's TransformerDecoderLayer and
 * TransformerDecoder), and incremental decoding with cached keys and values. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"
#include "transformer.h"
#include "transformer_internal.h"

ag_transformer_decoder_layer_module ag_transformer_decoder_layer_new(ag_params *p, const char *prefix,
                                                                const ag_transformer_config *cfg, ag_rng *rng) {
    ag_transformer_decoder_layer_module m;
    memset(&m, 0, sizeof m);
    if (!ag__tf_check_config("ag_transformer_decoder_layer_new", prefix, cfg)) return m;
    m.cfg = *cfg;
    /* each module only when the one before was made: the first failure is the one report */
    bool ok = (m.self_attn = ag__tf_attn_new(p, prefix, "self_attn", cfg, rng)).in_proj_weight &&
              (m.multihead_attn = ag__tf_attn_new(p, prefix, "multihead_attn", cfg, rng)).in_proj_weight &&
              (m.linear1 = ag__tf_linear_new(p, prefix, "linear1", cfg->d_model, cfg->dim_feedforward, rng)).weight &&
              (m.linear2 = ag__tf_linear_new(p, prefix, "linear2", cfg->dim_feedforward, cfg->d_model, rng)).weight &&
              (m.norm1 = ag__tf_norm_new(p, prefix, "norm1", cfg)).weight &&
              (m.norm2 = ag__tf_norm_new(p, prefix, "norm2", cfg)).weight &&
              (m.norm3 = ag__tf_norm_new(p, prefix, "norm3", cfg)).weight;
    if (!ok) m.self_attn.in_proj_weight = NULL;
    return m;
}

/* ---- forward ---- */

/* A checked decoder call: the target and the memory, their key padding masks and, with
 * skip_padding, their rows (r, rmem, else NULL). Checked once for a stack. */
typedef struct {
    seq t, mem;
    ag_tensor *tkpm, *mkpm;
    ag__rowset rt, rm;
    const ag__rowset *r, *rmem;
    bool unbatched;
} dec_call;

static bool dec_prepare(const char *op, const ag_transformer_config *c, ag_tensor *tgt, ag_tensor *memory,
                        const ag_transformer_args *a, dec_call *d) {
    if (!ag__tf_check_seq(op, "tgt", tgt, c, &d->t) || !ag__tf_check_seq(op, "memory", memory, c, &d->mem))
        return false;
    if (tgt->ndim != memory->ndim || d->t.n != d->mem.n) {
        char b1[128], b2[128];
        ag_error(op, "tgt %s, memory %s: batch sizes differ (batch_first=%d)", ag_shape_str(tgt, b1),
                 ag_shape_str(memory, b2), c->batch_first);
        return false;
    }
    d->unbatched = tgt->ndim == 2;
    d->tkpm = a->tgt_key_padding_mask;
    d->mkpm = a->memory_key_padding_mask;
    if (!ag__tf_check_masks(op, "tgt_mask", a->tgt_mask, "tgt_key_padding_mask", &d->tkpm, d->unbatched, d->t.n,
                            c->nhead, d->t.len, d->t.len) ||
        !ag__tf_check_masks(op, "memory_mask", a->memory_mask, "memory_key_padding_mask", &d->mkpm, d->unbatched,
                            d->t.n, c->nhead, d->t.len, d->mem.len))
        return false;
    /* skip_padding: the target's rows and the memory's (which only the cross-attention reads) */
    d->r = d->rmem = NULL;
    if (c->skip_padding && d->tkpm && d->mkpm && !a->cross_attn_weights &&
        ag__live_rows(d->tkpm, c->batch_first, &d->rt) && ag__live_rows(d->mkpm, c->batch_first, &d->rm))
        d->r = &d->rt, d->rmem = &d->rm;
    return true;
}

/* self_attn, multihead_attn (over mx, the memory's rows) and feed-forward blocks of a decoder
 * layer on x (d's target rows) */
static ag_tensor *dec_layer_run(const ag_transformer_decoder_layer_module *m, ag_tensor *x, ag_tensor *mx,
                                const dec_call *d, const ag_transformer_args *a) {
    const ag_transformer_config *c = &m->cfg;
    ag__tf_block sa = {.attn = &m->self_attn, .mask = a->tgt_mask, .kpm = d->tkpm, .causal = a->tgt_is_causal,
                       .qr = d->r, .kr = d->r};
    ag__tf_block ca = {.attn = &m->multihead_attn, .kv = mx, .mask = a->memory_mask, .kpm = d->mkpm,
                       .causal = a->memory_is_causal, .weights = a->cross_attn_weights, .qr = d->r, .kr = d->rmem};
    ag__tf_block ff = {.l1 = &m->linear1, .l2 = &m->linear2, .qr = d->r};
    TRY(x = ag__tf_residual(x, &m->norm1, &sa, c, a));
    TRY(x = ag__tf_residual(x, &m->norm2, &ca, c, a));
    return ag__tf_residual(x, &m->norm3, &ff, c, a);
}

ag_tensor *ag_transformer_decoder_layer_forward(const ag_transformer_decoder_layer_module *m, ag_tensor *tgt,
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
    ag_tensor *x = ag__tf_rows_in(&d.t, d.r), *mx = ag__tf_rows_in(&d.mem, d.rmem);
    TRY(x);
    TRY(mx);
    TRY(x = dec_layer_run(m, x, mx, &d, a));
    return ag__tf_layer_result(mark, ag__tf_rows_out(x, &d.t, d.r, d.unbatched, &m->cfg),
                               a->cross_attn_weights != NULL);
}

/* ---- stack ---- */

static bool new_decoder_layer(void *layers, int l, ag_params *p, const char *name, const ag_transformer_config *cfg,
                              ag_rng *rng) {
    ag_transformer_decoder_layer_module *m = (ag_transformer_decoder_layer_module *)layers + l;
    *m = ag_transformer_decoder_layer_new(p, name, cfg, rng);
    return m->self_attn.in_proj_weight != NULL;
}

ag_transformer_decoder_module ag_transformer_decoder_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                                    int num_layers, bool final_norm, ag_rng *rng) {
    ag_transformer_decoder_module m;
    memset(&m, 0, sizeof m);
    if (!ag__tf_stack_new("ag_transformer_decoder_new", p, prefix, cfg, num_layers, rng, new_decoder_layer, m.layers)) {
        memset(&m, 0, sizeof m);
        return m;
    }
    if (final_norm) m.norm = ag__tf_norm_new(p, prefix, "norm", cfg);
    m.num_layers = num_layers;
    return m;
}

ag_tensor *ag_transformer_decoder_forward(const ag_transformer_decoder_module *m, ag_tensor *tgt, ag_tensor *memory,
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
    ag_tensor *x = ag__tf_rows_in(&d.t, d.r), *mx = ag__tf_rows_in(&d.mem, d.rmem);
    TRY(mx);
    for (int l = 0; l < m->num_layers && x; l++) {
        if (args && args->cross_attn_weights) la.cross_attn_weights = args->cross_attn_weights + l;
        ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
        x = ag__tf_layer_result(mark, dec_layer_run(&m->layers[l], x, mx, &d, &la), la.cross_attn_weights != NULL);
    }
    TRY(x);
    if (m->norm.weight) TRY(x = ag_layer_norm_forward(&m->norm, x));
    return ag__tf_rows_out(x, &d.t, d.r, d.unbatched, c);
}

/* ---- incremental decoding ------------------------------------------------------------------- */

struct ag_decoder_cache {
    int64_t N, S, E, H, max_len, t;
    int64_t cap;        /* rows the buffers hold */
    int64_t *src_row;   /* (cap): the memory row each row holds the keys and values of */
    int layers;
    ag_tensor *k[AG_TRANSFORMER_MAX_LAYERS], *v[AG_TRANSFORMER_MAX_LAYERS];   /* (cap,H,max_len,Dh) */
    ag_tensor *mk[AG_TRANSFORMER_MAX_LAYERS], *mv[AG_TRANSFORMER_MAX_LAYERS]; /* (cap,H,S,Dh) per row */
    ag_tensor *mask;                                                          /* (cap,1,1,S) or NULL */
    /* with more rows than sentences: the memory's own (one row per sentence), which a row that
     * changes memory row reads from; else the same tensors as the per-row ones */
    ag_tensor *mk0[AG_TRANSFORMER_MAX_LAYERS], *mv0[AG_TRANSFORMER_MAX_LAYERS], *mask0;
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

static bool step_supported(const char *op, const ag_mha_module *a) {
    if (a->in_proj_weight && !a->bias_k && !a->cfg.add_zero_attn) return true;
    ag_error(op, "attention with separate q/k/v projections, bias_k/bias_v or add_zero_attn is not supported");
    return false;
}

/* x (N,...) contiguous into the first N of cap rows of a new tensor */
static ag_tensor *rows_copy(ag_tensor *x, int64_t cap) {
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[0] = cap;
    ag_tensor *y = ag_empty(x->dtype, x->ndim, shape);
    if (y) ag_copy_(ag_narrow(y, 0, 0, x->shape[0]), x);
    return y;
}

ag_decoder_cache *ag_decoder_cache_new_rows(const ag_transformer_decoder_module *m, ag_tensor *memory,
                                            ag_tensor *memory_key_padding_mask, int64_t max_len, int64_t max_rows) {
    const char *op = "ag_decoder_cache_new";
    char b[128];
    if (!m || m->num_layers < 1 || !ag__check_float(op, memory) || !inference_only(op)) return NULL;
    const ag_transformer_config *cf = &m->layers[0].cfg;
    int64_t E = cf->d_model, H = cf->nhead;
    if (memory->ndim != 3 || memory->shape[2] != E || max_len < 1 || max_rows < memory->shape[0]) {
        ag_error(op, "memory %s, max_len %lld, max_rows %lld: expected (N,S,%lld), max_len >= 1 and max_rows >= N",
                 ag_shape_str(memory, b), (long long)max_len, (long long)max_rows, (long long)E);
        return NULL;
    }
    int64_t N = memory->shape[0], S = memory->shape[1], Dh = E / H, cap = max_rows;
    ag_arena *a = ag_arena_current();
    ag_decoder_cache *c = ag_arena_alloc(a, sizeof *c);
    int64_t *src_row = ag_arena_alloc(a, sizeof(int64_t) * (size_t)cap);
    if (!c || !src_row) {
        ag_error(op, "cannot allocate %zu bytes for the cache: out of memory", sizeof *c + sizeof(int64_t) * (size_t)cap);
        return NULL;
    }
    *c = (ag_decoder_cache){.N = N, .S = S, .E = E, .H = H, .max_len = max_len, .cap = cap,
                            .src_row = src_row, .layers = m->num_layers};
    /* rows past the sentences hold no memory row yet: the first reorder into them copies one */
    for (int64_t i = 0; i < cap; i++) src_row[i] = i < N ? i : -1;
    if (memory_key_padding_mask) {
        TRY(c->mask0 = ag_attention_mask(NULL, memory_key_padding_mask, N, H));
        c->mask0 = c->mask = ag_clone(c->mask0); /* the cache's own */
        if (cap > N) TRY(c->mask = rows_copy(c->mask0, cap));
    }
    for (int l = 0; l < m->num_layers; l++) {
        const ag_mha_module *ca = &m->layers[l].multihead_attn;
        if (!step_supported(op, &m->layers[l].self_attn) || !step_supported(op, ca)) return NULL;
        /* positions past those fed are never read: no need to clear them */
        TRY(c->k[l] = ag_empty(memory->dtype, AG_SHAPE(cap, H, max_len, Dh)));
        TRY(c->v[l] = ag_empty(memory->dtype, AG_SHAPE(cap, H, max_len, Dh)));
        ag_tensor *bkv = ca->in_proj_bias ? ag_narrow(ca->in_proj_bias, 0, E, 2 * E) : NULL;
        ag_tensor *kv = ag_linear(memory, ag_narrow(ca->in_proj_weight, 0, E, 2 * E), bkv); /* (N,S,2E) */
        TRY(kv);
        c->mk0[l] = c->mk[l] = split_heads(ag_narrow(kv, 2, 0, E), N, S, H);
        c->mv0[l] = c->mv[l] = split_heads(ag_narrow(kv, 2, E, E), N, S, H);
        if (cap > N) {
            TRY(c->mk[l] = rows_copy(c->mk0[l], cap));
            TRY(c->mv[l] = rows_copy(c->mv0[l], cap));
        }
    }
    return c;
}

ag_decoder_cache *ag_decoder_cache_new(const ag_transformer_decoder_module *m, ag_tensor *memory,
                                       ag_tensor *memory_key_padding_mask, int64_t max_len) {
    return ag_decoder_cache_new_rows(m, memory, memory_key_padding_mask, max_len, memory ? memory->shape[0] : 0);
}

/* the first N rows of x (cap or B rows) */
static ag_tensor *rows_of(ag_tensor *x, int64_t N) { return x && x->shape[0] != N ? ag_narrow(x, 0, 0, N) : x; }

/* softmax(q kᵀ/√Dh) v of one query row per sequence: q (N,E) from the projection's columns
 * [0,E), keys and values (N,H,len,Dh)  ->  (N,E) with the heads merged */
static ag_tensor *attend_one(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, int64_t N, int64_t H) {
    ag_tensor *o = ag_attention(split_heads(ag_unsqueeze(q, 1), N, 1, H), k, v, mask, false, 0, NULL, false, NULL);
    return o ? ag_reshape(o, AG_SHAPE(N, q->shape[1])) : NULL; /* (N,H,1,Dh): heads already in order */
}

static ag_tensor *decoder_layer_step(const ag_transformer_decoder_layer_module *L, ag_decoder_cache *c, int l,
                                     ag_tensor *x) {
    const ag_transformer_config *cf = &L->cfg;
    const ag_transformer_args eval = {0};
    int64_t N = c->N, E = c->E, H = c->H, t = c->t;
    /* self-attention: this position's key and value join the cache, its query attends to them all */
    ag_tensor *h = cf->norm_first ? ag_layer_norm_forward(&L->norm1, x) : x;
    ag_tensor *qkv = ag_linear(h, L->self_attn.in_proj_weight, L->self_attn.in_proj_bias); /* (N,3E) */
    TRY(qkv);
    ag_tensor *k = rows_of(c->k[l], N), *v = rows_of(c->v[l], N);
    ag_copy_(ag_select(k, 2, t), ag_reshape(ag_narrow(qkv, 1, E, E), AG_SHAPE(N, H, E / H)));
    ag_copy_(ag_select(v, 2, t), ag_reshape(ag_narrow(qkv, 1, 2 * E, E), AG_SHAPE(N, H, E / H)));
    ag_tensor *o = attend_one(ag_narrow(qkv, 1, 0, E), ag_narrow(k, 2, 0, t + 1), ag_narrow(v, 2, 0, t + 1), NULL, N, H);
    ag_tensor *y;
    TRY(y = ag_linear_forward(&L->self_attn.out_proj, o));
    x = cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm1, ag_add_(y, x));
    /* cross-attention over the cached memory keys and values */
    const ag_mha_module *ca = &L->multihead_attn;
    h = cf->norm_first ? ag_layer_norm_forward(&L->norm2, x) : x;
    ag_tensor *q = ag_linear(h, ag_narrow(ca->in_proj_weight, 0, 0, E),
                             ca->in_proj_bias ? ag_narrow(ca->in_proj_bias, 0, 0, E) : NULL);
    TRY(q);
    TRY(y = ag_linear_forward(&ca->out_proj, attend_one(q, rows_of(c->mk[l], N), rows_of(c->mv[l], N),
                                                       rows_of(c->mask, N), N, H)));
    x = cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm2, ag_add_(y, x));
    /* feed-forward */
    h = cf->norm_first ? ag_layer_norm_forward(&L->norm3, x) : x;
    TRY(y = ag__tf_ff_block(&L->linear1, &L->linear2, cf, h, NULL, &eval));
    return cf->norm_first ? ag_add_(y, x) : ag_layer_norm_forward(&L->norm3, ag_add_(y, x));
}

ag_tensor *ag_decoder_step(const ag_transformer_decoder_module *m, ag_decoder_cache *c, ag_tensor *x) {
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

/* Rows i of x (contiguous, row-major) whose rows[i] != i take row rows[i]'s values: blocks
 * of len elements at pitch elements apart in each row (the fed positions of every head), read
 * into scratch first so that a row both read and written moves right. */
static void move_rows(ag_tensor *x, const int64_t *rows, int64_t M, int64_t blocks, int64_t pitch, int64_t len,
                      char *scratch) {
    size_t es = ag_dtype_size(x->dtype), row = (size_t)(x->stride[0]) * es, bytes = (size_t)len * es;
    char *base = x->data + (size_t)x->offset * es, *at = scratch;
    for (int64_t i = 0; i < M; i++)
        for (int64_t b = 0; b < blocks && rows[i] != i; b++, at += bytes)
            memcpy(at, base + (size_t)rows[i] * row + (size_t)(b * pitch) * es, bytes);
    at = scratch;
    for (int64_t i = 0; i < M; i++)
        for (int64_t b = 0; b < blocks && rows[i] != i; b++, at += bytes)
            memcpy(base + (size_t)i * row + (size_t)(b * pitch) * es, at, bytes);
}

/* row i of x (per row) gets row src of x0 (per memory row) */
static void copy_row(ag_tensor *x, int64_t i, const ag_tensor *x0, int64_t src) {
    size_t es = ag_dtype_size(x->dtype), row = (size_t)x->stride[0] * es;
    memcpy(x->data + (size_t)x->offset * es + (size_t)i * row, x0->data + (size_t)x0->offset * es + (size_t)src * row, row);
}

/* rows (M) as int64 into out, each a row of the cache's N: false (reported) otherwise */
static bool read_rows(const char *op, const ag_decoder_cache *c, ag_tensor *rows, int64_t *out) {
    int64_t n = rows->shape[0];
    ag_to_buffer(rows, AG_I64, out);
    for (int64_t j = 0; j < n; j++)
        if (out[j] < 0 || out[j] >= c->N) {
            ag_error(op, "rows[%lld] = %lld: expected a row of the cache's %lld", (long long)j, (long long)out[j],
                     (long long)c->N);
            return false;
        }
    return true;
}

void ag_decoder_cache_reorder(ag_decoder_cache *c, ag_tensor *rows) {
    const char *op = "ag_decoder_cache_reorder";
    char b[128];
    if (!c || !ag__check_not_null(op, rows)) return;
    if (rows->ndim != 1 || rows->shape[0] < 1 || rows->shape[0] > c->cap || (rows->dtype != AG_I64 && rows->dtype != AG_I32)) {
        ag_error(op, "rows %s %s: expected (M) integer indices, 1 <= M <= %lld", ag_shape_str(rows, b),
                 ag_dtype_name(rows->dtype), (long long)c->cap);
        return;
    }
    int64_t M = rows->shape[0], Dh = c->E / c->H, t = c->t;
    ag_arena *a = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(a); /* scratch */
    size_t es = ag_dtype_size(c->k[0]->dtype), per_row = (size_t)(c->H * (t > c->S ? t : c->S) * Dh) + 1;
    int64_t *idx = ag__alloc(op, a, sizeof(int64_t) * (size_t)M, "the row indices");
    char *scratch = idx ? ag__alloc(op, a, (size_t)M * per_row * es + 64, "the reorder scratch") : NULL;
    if (!scratch || !read_rows(op, c, rows, idx)) {
        ag_arena_rewind(a, mark);
        return;
    }
    /* only the rows that change move: a beam that continues in its own row costs nothing */
    for (int l = 0; l < c->layers && t > 0; l++) {
        move_rows(c->k[l], idx, M, c->H, c->max_len * Dh, t * Dh, scratch);
        move_rows(c->v[l], idx, M, c->H, c->max_len * Dh, t * Dh, scratch);
    }
    bool shared = c->mk[0] == c->mk0[0]; /* no memory rows of their own: the rows move */
    for (int l = 0; l < c->layers && shared; l++) {
        move_rows(c->mk[l], idx, M, 1, 0, c->mk[l]->stride[0], scratch);
        move_rows(c->mv[l], idx, M, 1, 0, c->mv[l]->stride[0], scratch);
    }
    if (shared && c->mask) move_rows(c->mask, idx, M, 1, 0, c->mask->stride[0], scratch);
    for (int64_t i = 0; i < M; i++) {
        int64_t src = c->src_row[idx[i]];
        if (!shared && src != c->src_row[i]) { /* beams of one sentence share the memory's keys and values */
            for (int l = 0; l < c->layers; l++) {
                copy_row(c->mk[l], i, c->mk0[l], src);
                copy_row(c->mv[l], i, c->mv0[l], src);
            }
            if (c->mask) copy_row(c->mask, i, c->mask0, src);
        }
        idx[i] = src;
    }
    memcpy(c->src_row, idx, sizeof(int64_t) * (size_t)M);
    c->N = M;
    ag_arena_rewind(a, mark);
}

int64_t ag_decoder_cache_len(const ag_decoder_cache *c) { return c ? c->t : 0; }
