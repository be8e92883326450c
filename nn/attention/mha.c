/* nn.MultiheadAttention, step for step as torch 1.13's F.multi_head_attention_forward, with the
 * attention itself as one fused op over the packed projections (ag__attention_heads): heads are
 * column ranges of the (N,L,E) rows, never split or merged by copies, and their gradients go
 * straight into the projections' gradient buffers. Internally (N, L, E): a seq-first input is
 * used through a transposed view, never copied. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "mha.h"
#include "../nn_internal.h"

ag_mha_config ag_mha_defaults(int64_t embed_dim, int64_t num_heads) {
    return (ag_mha_config){.embed_dim = embed_dim, .num_heads = num_heads, .bias = true};
}

/* torch.nn.init.xavier_uniform_ / xavier_normal_ for a weight with these fans */
static void xavier_uniform(ag_rng *rng, ag_tensor *w, int64_t fan_in, int64_t fan_out) {
    double bound = sqrt(6.0 / (double)(fan_in + fan_out));
    ag_uniform_(rng, w, -bound, bound);
}

ag_mha_module ag_mha_new(ag_params *p, const char *prefix, const ag_mha_config *cfg, ag_rng *rng) {
    ag_mha_module m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    int64_t E = cfg->embed_dim, H = cfg->num_heads;
    if (E <= 0 || H <= 0 || E % H != 0 || cfg->dropout < 0 || cfg->dropout > 1 || cfg->kdim < 0 || cfg->vdim < 0) {
        ag_error("ag_mha_new", "embed_dim %lld, num_heads %lld, dropout %g, kdim %lld, vdim %lld: embed_dim must be a "
                               "positive multiple of num_heads and dropout in [0,1]",
                 (long long)E, (long long)H, cfg->dropout, (long long)cfg->kdim, (long long)cfg->vdim);
        return m;
    }
    if (!m.cfg.kdim) m.cfg.kdim = E;
    if (!m.cfg.vdim) m.cfg.vdim = E;
    int64_t kd = m.cfg.kdim, vd = m.cfg.vdim;
    char b[256];
    ag_mha_module none = m; /* no weights: what a failure returns (the first failure is the one report) */
#define ADD(field, name, ...)                                                                              \
    do {                                                                                                \
        if (!(m.field = ag_params_add(p, ag__param_name(b, sizeof b, "ag_mha_new", prefix, name), __VA_ARGS__))) \
            return none;                                                                                \
    } while (0)
    if (kd == E && vd == E) {
        ADD(in_proj_weight, "in_proj_weight", AG_SHAPE(3 * E, E));
        xavier_uniform(rng, m.in_proj_weight, E, 3 * E);
    } else {
        ADD(q_proj_weight, "q_proj_weight", AG_SHAPE(E, E));
        ADD(k_proj_weight, "k_proj_weight", AG_SHAPE(E, kd));
        ADD(v_proj_weight, "v_proj_weight", AG_SHAPE(E, vd));
        xavier_uniform(rng, m.q_proj_weight, E, E);
        xavier_uniform(rng, m.k_proj_weight, kd, E);
        xavier_uniform(rng, m.v_proj_weight, vd, E);
    }
    if (cfg->bias) ADD(in_proj_bias, "in_proj_bias", AG_SHAPE(3 * E));
    if (cfg->add_bias_kv) {
        /* xavier_normal_ on (1,1,E): fan_in = fan_out = E */
        ADD(bias_k, "bias_k", AG_SHAPE(1, 1, E));
        ADD(bias_v, "bias_v", AG_SHAPE(1, 1, E));
        ag_normal_(rng, m.bias_k, 0, sqrt(1.0 / (double)E));
        ag_normal_(rng, m.bias_v, 0, sqrt(1.0 / (double)E));
    }
#undef ADD
    m.out_proj = ag_linear_new(p, ag__param_name(b, sizeof b, "ag_mha_new", prefix, "out_proj"), E, E, cfg->bias, rng);
    if (!m.out_proj.weight) return none;
    if (m.out_proj.bias) ag_fill_(m.out_proj.bias, 0.0);
    return m;
}

/* rows [from, from + n) of the packed in-projection (q 0..E, k E..2E, v 2E..3E) and of its
 * bias (NULL without one); all of them is the tensor itself, not a view */
static ag_tensor *in_w(const ag_mha_module *m, int64_t from, int64_t n) {
    ag_tensor *w = m->in_proj_weight;
    return from == 0 && n == w->shape[0] ? w : ag_narrow(w, 0, from, n);
}
static ag_tensor *in_b(const ag_mha_module *m, int64_t from, int64_t n) {
    ag_tensor *b = m->in_proj_bias;
    return !b || (from == 0 && n == b->shape[0]) ? b : ag_narrow(b, 0, from, n);
}

/* Which rows of an input the in-projection computes: every row (rs NULL: ag_linear), or the
 * rows of rowset rs (ag__linear_rows), read at rs->src of the input in its own layout
 * (in_place) or as its rows 0 .. rs->n-1, and placed at rs->bf of an (N, L, ·) result. */
typedef struct {
    const ag__rowset *rs;
    bool in_place;
} proj_rows;

static ag_tensor *project(ag_tensor *x, proj_rows r, ag_tensor *w, ag_tensor *b) {
    if (!r.rs) return ag_linear(x, w, b);
    return ag__linear_rows(x, w, b, r.rs->n, r.in_place ? r.rs->src : NULL, r.rs->bf,
                           AG_SHAPE(r.rs->N, r.rs->L, w->shape[0]));
}

/* q, k and v after the in-projection: columns [qo, qo+E), [ko, ko+E) and [vo, vo+E) of tq, tk
 * and tv, which are one tensor where one GEMM made them */
typedef struct {
    ag_tensor *tq, *tk, *tv;
    int64_t qo, ko, vo;
} qkv;

/* which of query, key and value are one tensor */
typedef enum { SHARE_NONE, SHARE_KV, SHARE_QKV } share;

/* The in-projection of both entry points: one GEMM for self-attention (SHARE_QKV), one for key
 * and value when they are one tensor (SHARE_KV: a decoder's memory), else one each over slices
 * of the packed weight (or the separate q/k/v weights). qr: the rows of q projected, kr those
 * of k and v. */
static qkv project_qkv(const ag_mha_module *m, ag_tensor *q, proj_rows qr, ag_tensor *k, ag_tensor *v, proj_rows kr,
                       share s) {
    int64_t E = m->cfg.embed_dim;
    qkv t = {0};
    if (m->in_proj_weight && s == SHARE_QKV) {
        t.tq = t.tk = t.tv = project(q, qr, in_w(m, 0, 3 * E), in_b(m, 0, 3 * E)); /* (N,L,3E) */
        t.ko = E;
        t.vo = 2 * E;
    } else if (m->in_proj_weight && s == SHARE_KV) {
        t.tq = project(q, qr, in_w(m, 0, E), in_b(m, 0, E));
        t.tk = t.tv = project(k, kr, in_w(m, E, 2 * E), in_b(m, E, 2 * E)); /* (N,S,2E) */
        t.vo = E;
    } else {
        bool packed = m->in_proj_weight;
        t.tq = project(q, qr, packed ? in_w(m, 0, E) : m->q_proj_weight, in_b(m, 0, E));
        t.tk = project(k, kr, packed ? in_w(m, E, E) : m->k_proj_weight, in_b(m, E, E));
        t.tv = project(v, kr, packed ? in_w(m, 2 * E, E) : m->v_proj_weight, in_b(m, 2 * E, E));
    }
    return t;
}

/* mask (..., S) → (..., S+1), the new key never masked (F.pad(mask, (0, 1))) */
static ag_tensor *pad_key(ag_tensor *mask) {
    if (!mask) return NULL;
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, mask->shape, sizeof(int64_t) * (size_t)mask->ndim);
    shape[mask->ndim - 1] = 1;
    ag_tensor *parts[2] = {mask, ag_zeros(mask->dtype, mask->ndim, shape)};
    return ag_cat(2, parts, -1);
}

/* a mask given is alive, and bool or the query's float dtype (torch: "only bool and floating
 * types of masks are supported") */
static bool check_mask_dtype(const char *op, const char *what, const ag_tensor *mask, ag_dtype dt) {
    if (!mask) return true;
    if (!ag__check_not_null(op, mask)) return false;
    if (mask->dtype == AG_BOOL || mask->dtype == dt) return true;
    char b[128];
    ag_error(op, "%s %s of dtype %s: expected bool or %s (the query's dtype)", what, ag_shape_str(mask, b),
             ag_dtype_name(mask->dtype), ag_dtype_name(dt));
    return false;
}

static bool check_inputs(const ag_mha_module *m, ag_tensor *q, ag_tensor *k, ag_tensor *v, const ag_mha_args *a) {
    const char *op = "ag_mha_forward";
    char b1[128], b2[128], b3[128];
    if (!ag__check_float(op, q) || !ag__check_float(op, k) || !ag__check_float(op, v)) return false;
    const ag_mha_config *c = &m->cfg;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || q->shape[2] != c->embed_dim || k->shape[2] != c->kdim ||
        v->shape[2] != c->vdim || k->shape[0] != v->shape[0] || k->shape[1] != v->shape[1] ||
        q->shape[0] != k->shape[0]) {
        ag_error(op, "query %s, key %s, value %s (batch_first=%d): expected query (N,L,%lld), key (N,S,%lld), "
                     "value (N,S,%lld) in batch-first order",
                 ag_shape_str(q, b1), ag_shape_str(k, b2), ag_shape_str(v, b3), c->batch_first,
                 (long long)c->embed_dim, (long long)c->kdim, (long long)c->vdim);
        return false;
    }
    int64_t N = q->shape[0], L = q->shape[1], S = k->shape[1], H = c->num_heads;
    ag_tensor *kpm = a ? a->key_padding_mask : NULL, *am = a ? a->attn_mask : NULL;
    if (!check_mask_dtype(op, "key_padding_mask", kpm, q->dtype) || !check_mask_dtype(op, "attn_mask", am, q->dtype))
        return false;
    if (kpm && (kpm->ndim != 2 || kpm->shape[0] != N || kpm->shape[1] != S)) {
        ag_error(op, "key_padding_mask %s: expected (%lld,%lld) (batch, source length)", ag_shape_str(kpm, b1),
                 (long long)N, (long long)S);
        return false;
    }
    if (am && !((am->ndim == 2 && am->shape[0] == L && am->shape[1] == S) ||
                (am->ndim == 3 && am->shape[0] == N * H && am->shape[1] == L && am->shape[2] == S))) {
        ag_error(op, "attn_mask %s: expected (%lld,%lld) or (%lld,%lld,%lld) (batch*heads, target, source)",
                 ag_shape_str(am, b1), (long long)L, (long long)S, (long long)(N * H), (long long)L, (long long)S);
        return false;
    }
    return true;
}

/* Unbatched input as torch's _mha_shape_check reads it: query (L,E), key (S,kdim), value
 * (S,vdim), key_padding_mask (S), attn_mask (L,S) or (num_heads,L,S). Run as a batch of one
 * (batch-first views, whatever batch_first says, as torch ignores it here) and the batch dim
 * taken off the output and the weights. */
static ag_tensor *mha_unbatched(const ag_mha_module *m, ag_tensor *query, ag_tensor *key, ag_tensor *value,
                                const ag_mha_args *a, ag_tensor **weights) {
    const char *op = "ag_mha_forward";
    char b1[128], b2[128], b3[128];
    ag_tensor *kpm = a->key_padding_mask, *am = a->attn_mask;
    if (key->ndim != 2 || value->ndim != 2 || (kpm && kpm->ndim != 1) || (am && am->ndim != 2 && am->ndim != 3)) {
        ag_error(op, "query %s, key %s, value %s, key_padding_mask %s, attn_mask %s: for unbatched (2-d) query, "
                     "expected key and value 2-d, key_padding_mask 1-d and attn_mask 2-d or 3-d",
                 ag_shape_str(query, b1), ag_shape_str(key, b2), ag_shape_str(value, b3),
                 kpm ? ag_shape_str(kpm, (char[128]){0}) : "none", am ? ag_shape_str(am, (char[128]){0}) : "none");
        return NULL;
    }
    ag_mha_module one = *m;
    one.cfg.batch_first = true;
    ag_mha_args a1 = *a;
    if (kpm) a1.key_padding_mask = ag_unsqueeze(kpm, 0);
    ag_tensor *q = ag_unsqueeze(query, 0);
    ag_tensor *k = key == query ? q : ag_unsqueeze(key, 0);
    ag_tensor *v = value == key ? k : ag_unsqueeze(value, 0);
    ag_tensor *w = NULL;
    ag_tensor *y = ag_mha_forward(&one, q, k, v, &a1, weights ? &w : NULL);
    if (!y) return NULL;
    if (weights) *weights = w ? ag_squeeze(w, 0) : NULL;
    return ag_squeeze(y, 0);
}

ag_tensor *ag_mha_forward(const ag_mha_module *m, ag_tensor *query, ag_tensor *key, ag_tensor *value,
                          const ag_mha_args *args, ag_tensor **weights) {
    const ag_mha_config *c = &m->cfg;
    ag_mha_args none = {0};
    const ag_mha_args *a = args ? args : &none;
    if (!query || !key || !value) {
        ag_error("ag_mha_forward", "query, key and value are required");
        return NULL;
    }
    if (query->ndim == 2) return mha_unbatched(m, query, key, value, a, weights);
    bool self_attn = query == key && key == value;
    ag_tensor *q_in = query, *k_in = key, *v_in = value;
    if (!c->batch_first) {
        q_in = ag_transpose(query, 0, 1);
        k_in = self_attn ? q_in : ag_transpose(key, 0, 1);
        v_in = self_attn ? q_in : ag_transpose(value, 0, 1);
    }
    if (!check_inputs(m, q_in, k_in, v_in, a)) return NULL;
    int64_t E = c->embed_dim, H = c->num_heads, N = q_in->shape[0];

    /* keys the key padding mask hides: their rows are not projected (left 0), in a GEMM of
     * their own for key and value (read in their own layout); for self-attention only when
     * that saves more than the one packed GEMM of q, k and v gains (an eighth of the keys) */
    ag__rowset kr;
    bool skip_keys = a->key_padding_mask && m->in_proj_weight && key == value && !m->bias_k && !c->add_zero_attn &&
                     ag__live_rows(a->key_padding_mask, c->batch_first, &kr) &&
                     (!self_attn || 8 * kr.n <= 7 * kr.N * kr.L);
    share s = self_attn && !skip_keys ? SHARE_QKV : key == value ? SHARE_KV : SHARE_NONE;
    proj_rows all = {NULL, false}, live = {&kr, true};
    qkv t = skip_keys ? project_qkv(m, q_in, all, key, value, live, s) : project_qkv(m, q_in, all, k_in, v_in, all, s);
    /* the attention reads q, k, v as column ranges [qo, qo+E) ... of tq, tk, tv */
    ag_tensor *tq = t.tq, *tk = t.tk, *tv = t.tv;
    int64_t qo = t.qo, ko = t.ko, vo = t.vo;

    ag_tensor *kpm = a->key_padding_mask, *am = a->attn_mask;
    if (m->bias_k || c->add_zero_attn) { /* extra keys: k and v become their own (N,S',E) tensors */
        tk = ag_narrow(tk, -1, ko, E);
        tv = ag_narrow(tv, -1, vo, E);
        ko = vo = 0;
    }
    if (m->bias_k) { /* one more key and value for every sequence */
        ag_tensor *kk[2] = {tk, ag_expand(m->bias_k, AG_SHAPE(N, 1, E))};
        ag_tensor *vv[2] = {tv, ag_expand(m->bias_v, AG_SHAPE(N, 1, E))};
        tk = ag_cat(2, kk, 1);
        tv = ag_cat(2, vv, 1);
        am = pad_key(am);
        kpm = pad_key(kpm);
    }
    if (c->add_zero_attn) { /* torch appends a zero row per (batch, head): the same as a zero row of E */
        ag_tensor *zero = ag_zeros(tk->dtype, AG_SHAPE(N, 1, E));
        ag_tensor *kk[2] = {tk, zero}, *vv[2] = {tv, zero};
        tk = ag_cat(2, kk, 1);
        tv = ag_cat(2, vv, 1);
        am = pad_key(am);
        kpm = pad_key(kpm);
    }
    ag_tensor *mask = ag_attention_mask(am, kpm, N, H);
    if (!mask && (am || kpm)) return NULL; /* reported; never the unmasked output */
    ag_tensor *w = NULL;
    bool want_w = a->need_weights && weights;
    /* (N,L,E) with the heads merged */
    ag_tensor *o = ag__attention_heads(tq, qo, tk, ko, tv, vo, E, H, mask, a->is_causal, c->dropout, a->rng,
                                       a->training, want_w ? &w : NULL);
    if (!o) return NULL;
    ag_tensor *y = ag_linear_forward(&m->out_proj, o);
    if (!c->batch_first) y = ag_transpose(y, 0, 1);
    if (want_w) *weights = a->average_attn_weights ? ag_mean(w, 1, (int[]){1}, false) : w;
    else if (weights) *weights = NULL;
    return y;
}

ag_tensor *ag__mha_forward_rows(const ag_mha_module *m, ag_tensor *q, const ag__rowset *qr, ag_tensor *kv,
                                const ag__rowset *kr, const ag_mha_args *a) {
    const char *op = "ag__mha_forward_rows";
    const ag_mha_config *c = &m->cfg;
    int64_t E = c->embed_dim, H = c->num_heads, N = qr->N;
    if (!m->in_proj_weight || m->bias_k || c->add_zero_attn || kr->N != N) {
        ag_error(op, "packed rows need the packed in_proj_weight, no bias_k/bias_v or add_zero_attn, and one batch "
                     "size (query %lld, key %lld)",
                 (long long)N, (long long)kr->N);
        return NULL;
    }
    proj_rows qrows = {qr, false}, krows = {kr, false};
    qkv t = project_qkv(m, q, qrows, kv, kv, krows, q == kv ? SHARE_QKV : SHARE_KV);
    ag_tensor *tq = t.tq, *tk = t.tk, *tv = t.tv;
    int64_t qo = t.qo, ko = t.ko, vo = t.vo;
    if (!tq || !tk) return NULL;
    ag_tensor *mask = ag_attention_mask(a->attn_mask, a->key_padding_mask, N, H);
    if (!mask && (a->attn_mask || a->key_padding_mask)) return NULL; /* reported */
    ag_tensor *o = ag__attention_heads(tq, qo, tk, ko, tv, vo, E, H, mask, a->is_causal, c->dropout, a->rng,
                                       a->training, NULL); /* (N, L, E) */
    if (!o) return NULL;
    return ag__linear_rows(o, m->out_proj.weight, m->out_proj.bias, qr->n, qr->bf, NULL, 0, NULL);
}
