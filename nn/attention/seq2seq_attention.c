/* Additive (Bahdanau) and dot-product (Luong) attention over encoder states
 * (nn/attention/seq2seq_attention.h): the fused additive score op, and the modules built on it,
 * ag_linear and ag_masked_softmax. */
#include <math.h>
#include <string.h>
#include <tgmath.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"
#include "seq2seq_attention.h"

/* ---- kernels: add_scores_fwd_f32, add_scores_bwd_f32, ... ---- */
#define T float
#define FN(name) name##_f32
#include "additive_scores.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "additive_scores.inc"
#undef T
#undef FN

static void scores_backward(ag_node *n) { /* saved: kp, qp, v (dense) */
    ag_tensor *kp = n->saved[0], *qp = n->saved[1], *v = n->saved[2], *ds = n->out->grad;
    ag_dtype dt = ds->dtype;
    int64_t N = kp->shape[0], S = kp->shape[1], A = kp->shape[2];
    ag_tensor *dkp = ag_grad_buffer(n->in[0]), *dqp = ag_grad_buffer(n->in[1]), *dv = ag_grad_buffer(n->in[2]);
    double *vpart = ag__alloc(n->op->name, ag_arena_current(), sizeof(double) * (size_t)max1(N * A), "partial sums");
    if (!vpart) return;
    (dt == AG_F32 ? add_scores_bwd_f32 : add_scores_bwd_f64)(N, S, A, ag__ptr(kp), ag__ptr(qp), ag__ptr(v),
                                                              ag__ptr(ds), dkp ? ag__ptr(dkp) : NULL,
                                                              dqp ? ag__ptr(dqp) : NULL, vpart);
    if (!dv) return;
    ag_tensor *sum = ag__new(AG_F64, AG_SHAPE(A));
    double *sp = (double *)ag__ptr(sum);
    for (int64_t i = 0; i < A; i++) sp[i] = 0;
    for (int64_t b = 0; b < N; b++) /* fixed order over the batch */
        for (int64_t i = 0; i < A; i++) sp[i] += vpart[b * A + i];
    ag__add_into(dv, ag_view(ag_to(sum, dt), dv->ndim, dv->shape));
}
static const ag_op ADDITIVE_SCORES = {"ag_additive_scores", scores_backward,
                                      AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(2)};

ag_tensor *ag_additive_scores(ag_tensor *keys_proj, ag_tensor *query_proj, ag_tensor *v) {
    const char *op = "ag_additive_scores";
    if (!ag__check_float(op, keys_proj) || !ag__check_float(op, query_proj) || !ag__check_float(op, v)) return NULL;
    if (!ag__same_dtype(op, keys_proj, 2, (ag_tensor *[]){query_proj, v}, (const char *[]){"query_proj", "v"}))
        return NULL;
    char b1[128], b2[128], b3[128];
    ag_tensor *k = keys_proj, *q = query_proj;
    int64_t A = k->ndim == 3 ? k->shape[2] : -1;
    if (k->ndim != 3 || q->ndim != 2 || q->shape[0] != k->shape[0] || q->shape[1] != A || ag_numel(v) != A ||
        v->shape[v->ndim - 1] != A || v->ndim > 2) {
        ag_error(op, "keys_proj %s, query_proj %s, v %s: expected keys_proj (N,S,A), query_proj (N,A), v (A) or (1,A)",
                 ag_shape_str(k, b1), ag_shape_str(q, b2), ag_shape_str(v, b3));
        return NULL;
    }
    int64_t N = k->shape[0], S = k->shape[1];
    ag_tensor *kd = ag__dense(k), *qd = ag__dense(q), *vd = ag__dense(v);
    ag_tensor *y = ag__new(k->dtype, AG_SHAPE(N, S));
    (k->dtype == AG_F32 ? add_scores_fwd_f32 : add_scores_fwd_f64)(N, S, A, ag__ptr(kd), ag__ptr(qd), ag__ptr(vd),
                                                                   ag__ptr(y));
    ag_node *n = ag_finish(&ADDITIVE_SCORES, y, 3, (ag_tensor *[]){k, q, v});
    if (n) {
        n->saved[0] = kd;
        n->saved[1] = qd;
        n->saved[2] = vd;
    }
    return y;
}

/* query (N,Hq), keys (N,S,Hk), mask (N,S) bool or float or NULL; reports through op */
static bool check_attention(const char *op, ag_tensor *query, ag_tensor *keys, ag_tensor *mask, int64_t Hq,
                            int64_t Hk) {
    if (!ag__check_float(op, query) || !ag__check_float(op, keys)) return false;
    char b1[128], b2[128], b3[128];
    if (query->ndim != 2 || keys->ndim != 3 || query->shape[0] != keys->shape[0] || query->shape[1] != Hq ||
        keys->shape[2] != Hk) {
        ag_error(op, "query %s, keys %s: expected query (N,%lld) and keys (N,S,%lld)", ag_shape_str(query, b1),
                 ag_shape_str(keys, b2), (long long)Hq, (long long)Hk);
        return false;
    }
    if (mask && (mask->ndim != 2 || mask->shape[0] != keys->shape[0] || mask->shape[1] != keys->shape[1])) {
        ag_error(op, "keys %s, key_padding_mask %s: expected the mask (%lld,%lld) (batch, source length)",
                 ag_shape_str(keys, b1), ag_shape_str(mask, b3), (long long)keys->shape[0], (long long)keys->shape[1]);
        return false;
    }
    return ag__same_dtype(op, keys, 1, &query, (const char *[]){"query"});
}

/* scores (N,S) -> weights (N,S), context Σ_j w_j keys_j (N,Hk) */
static ag_tensor *attend(ag_tensor *scores, ag_tensor *keys, ag_tensor *mask, ag_tensor **weights) {
    ag_tensor *w = ag_masked_softmax(scores, mask, -1);
    if (weights) *weights = w;
    return w ? ag_squeeze(ag_matmul(ag_unsqueeze(w, 1), keys), 1) : NULL;
}

ag_additive_attention_module ag_additive_attention_new(ag_params *p, const char *prefix, int64_t query_size,
                                                  int64_t key_size, int64_t attn_size, ag_rng *rng) {
    ag_additive_attention_module m;
    memset(&m, 0, sizeof m);
    m.query_size = query_size, m.key_size = key_size, m.attn_size = attn_size;
    if (!p || query_size <= 0 || key_size <= 0 || attn_size <= 0) {
        ag_error("ag_additive_attention_new", "'%s': query_size %lld, key_size %lld, attn_size %lld: expected a "
                 "parameter set and sizes > 0", prefix ? prefix : "", (long long)query_size, (long long)key_size,
                 (long long)attn_size);
        return m;
    }
    char name[512];
    m.W1 = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "W1"), key_size,
                         attn_size, false, rng);
    m.W2 = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "W2"), query_size,
                         attn_size, false, rng);
    m.v = ag_linear_new(p, ag__param_name(name, sizeof name, "ag_additive_attention_new", prefix, "v"), attn_size, 1,
                        false, rng);
    return m;
}

ag_tensor *ag_additive_attention_keys(const ag_additive_attention_module *m, ag_tensor *keys) {
    const char *op = "ag_additive_attention_keys";
    if (!m || !m->v.weight) {
        ag_error(op, "module is NULL or was not created (ag_additive_attention_new failed?)");
        return NULL;
    }
    if (!ag__check_float(op, keys)) return NULL;
    if (keys->ndim != 3 || keys->shape[2] != m->key_size) {
        char b[128];
        ag_error(op, "keys %s: expected (N,S,%lld)", ag_shape_str(keys, b), (long long)m->key_size);
        return NULL;
    }
    return ag_linear(keys, m->W1.weight, NULL);
}

ag_tensor *ag_additive_attention_forward(const ag_additive_attention_module *m, ag_tensor *query, ag_tensor *keys,
                                         ag_tensor *keys_proj, ag_tensor *key_padding_mask, ag_tensor **weights) {
    const char *op = "ag_additive_attention_forward";
    if (weights) *weights = NULL;
    if (!m || !m->v.weight) {
        ag_error(op, "module is NULL or was not created (ag_additive_attention_new failed?)");
        return NULL;
    }
    if (!check_attention(op, query, keys, key_padding_mask, m->query_size, m->key_size)) return NULL;
    if (keys_proj && (keys_proj->ndim != 3 || keys_proj->shape[0] != keys->shape[0] ||
                      keys_proj->shape[1] != keys->shape[1] || keys_proj->shape[2] != m->attn_size)) {
        char b1[128], b2[128];
        ag_error(op, "keys %s, keys_proj %s: expected keys_proj (N,S,%lld) from ag_additive_attention_keys",
                 ag_shape_str(keys, b1), ag_shape_str(keys_proj, b2), (long long)m->attn_size);
        return NULL;
    }
    ag_tensor *kp = keys_proj ? keys_proj : ag_additive_attention_keys(m, keys);
    ag_tensor *scores = ag_additive_scores(kp, ag_linear(query, m->W2.weight, NULL), m->v.weight);
    return scores ? attend(scores, keys, key_padding_mask, weights) : NULL;
}

ag_dot_attention_module ag_dot_attention_new(ag_params *p, const char *prefix, int64_t query_size, int64_t key_size,
                                        bool general, ag_rng *rng) {
    ag_dot_attention_module m = {NULL, query_size, key_size};
    if (query_size <= 0 || key_size <= 0 || (!general && query_size != key_size) || (general && !p)) {
        ag_error("ag_dot_attention_new", "'%s': query_size %lld, key_size %lld, general %d: expected sizes > 0, equal "
                 "for the plain dot score, and a parameter set for the general one", prefix ? prefix : "",
                 (long long)query_size, (long long)key_size, (int)general);
        m.query_size = m.key_size = 0;
        return m;
    }
    if (general) {
        char name[512];
        ag__param_name(name, sizeof name, "ag_dot_attention_new", prefix, "W");
        m.weight = ag_linear_new(p, name, key_size, query_size, false, rng).weight;
    }
    return m;
}

ag_tensor *ag_dot_attention_forward(const ag_dot_attention_module *m, ag_tensor *query, ag_tensor *keys,
                                    ag_tensor *key_padding_mask, ag_tensor **weights) {
    const char *op = "ag_dot_attention_forward";
    if (weights) *weights = NULL;
    if (!m || m->query_size <= 0) {
        ag_error(op, "module is NULL or was not created (ag_dot_attention_new failed?)");
        return NULL;
    }
    if (!check_attention(op, query, keys, key_padding_mask, m->query_size, m->key_size)) return NULL;
    ag_tensor *q = m->weight ? ag_matmul(query, m->weight) : query; /* sᵀW, so W h_j is never formed */
    ag_tensor *scores = ag_squeeze(ag_matmul(keys, ag_unsqueeze(q, -1)), -1);
    return scores ? attend(scores, keys, key_padding_mask, weights) : NULL;
}
