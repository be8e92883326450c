/* Embedding (the row gather, with a padding row that gets no gradient, and the nn.Embedding
 * module) and the sinusoidal positional encodings. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"
#include "layers_internal.h"

/* dw[id] += dy row for each id except padding; parallel over column blocks so each element of
 * dw is summed by one thread in id order */
#define T float
#define FN(name) name##_f32
#include "embedding_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "embedding_kernels.inc"
#undef T
#undef FN

/* y[i] = weight[ids[i]], a row of e elements for each of the n ids (in range), from a weight
 * whose rows are rs and columns cs elements apart */
#define T float
#define FN(name) name##_f32
#include "embedding_gather.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "embedding_gather.inc"
#undef T
#undef FN

static void embedding_backward(ag_node *n) {
    ag_tensor *dw = ag_grad_buffer(n->in[0]), *ids = n->saved[0];
    if (!dw) return;
    ag_tensor *dy = ag__dense(n->out->grad);
    (dw->dtype == AG_F32 ? embed_scatter_f32 : embed_scatter_f64)(
        ag__ptr(dw), ag__ptr(dy), (const int64_t *)ag__ptr(ids), ag_numel(ids), dw->shape[1], n->ctx.i[0]);
}
static const ag_op EMBEDDING = {"ag_embedding", embedding_backward, AG_SAVES_NONE}; /* its own ids */

/* ids as int64 (a copy the node keeps), every one a row of weight, else reported */
static ag_tensor *checked_ids(const char *op, const ag_tensor *weight, const ag_tensor *ids) {
    char b1[128], b2[128];
    if (ids->ndim >= AG_MAX_DIMS) {
        ag_error(op, "ids %s: at most %d dims (the output adds one)", ag_shape_str(ids, b2), AG_MAX_DIMS - 1);
        return NULL;
    }
    ag_tensor *idx = ag__new(AG_I64, ids->ndim, ids->shape);
    ag__copy(idx, ids);
    const int64_t *v = (const int64_t *)ag__ptr(idx);
    for (int64_t i = 0, n = ag_numel(idx); i < n; i++)
        if (v[i] < 0 || v[i] >= weight->shape[0]) {
            ag_error(op, "id %lld is out of range for the rows of weight %s (size %lld)", (long long)v[i],
                     ag_shape_str(weight, b1), (long long)weight->shape[0]);
            return NULL;
        }
    return idx;
}

ag_tensor *ag_embedding(ag_tensor *weight, ag_tensor *ids, int64_t padding_idx) {
    const char *op = "ag_embedding";
    if (!ag__check_float(op, weight) || !ag__check_not_null(op, ids)) return NULL;
    char b1[128], b2[128];
    if (weight->ndim != 2 || (ids->dtype != AG_I64 && ids->dtype != AG_I32)) {
        ag_error(op, "weight %s %s, ids %s %s: expected weight (num, dim) and integer ids", ag_shape_str(weight, b1),
                 ag_dtype_name(weight->dtype), ag_shape_str(ids, b2), ag_dtype_name(ids->dtype));
        return NULL;
    }
    if (padding_idx < -1 || padding_idx >= weight->shape[0]) {
        ag_error(op, "padding_idx %lld out of range for weight %s (0..%lld, or -1 for none)", (long long)padding_idx,
                 ag_shape_str(weight, b1), (long long)weight->shape[0] - 1);
        return NULL;
    }
    ag_tensor *idx = checked_ids(op, weight, ids);
    if (!idx) return NULL;
    int64_t shape[AG_MAX_DIMS], e = weight->shape[1];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = e;
    ag_tensor *y = ag__new(weight->dtype, ids->ndim + 1, shape);
    (weight->dtype == AG_F32 ? embed_gather_f32 : embed_gather_f64)(
        ag__ptr(weight), weight->stride[0], weight->stride[1], (const int64_t *)ag__ptr(idx), ag_numel(idx), e,
        ag__ptr(y));
    ag_node *n = ag_finish(&EMBEDDING, y, 1, &weight);
    if (n) {
        n->saved[0] = idx;
        n->ctx.i[0] = padding_idx;
    }
    return y;
}

ag_embedding_module ag_embedding_new(ag_params *p, const char *prefix, int64_t num_embeddings, int64_t embedding_dim,
                                int64_t padding_idx, ag_rng *rng) {
    ag_embedding_module m = {NULL, num_embeddings, embedding_dim, padding_idx};
    char name[512];
    if (!p || num_embeddings < 0 || embedding_dim < 0 || padding_idx < -1 || padding_idx >= num_embeddings) {
        ag_error("ag_embedding_new",
                 "'%s': needs a parameter set, sizes >= 0 and padding_idx in [0, %lld) or -1 (got %lld)",
                 prefix ? prefix : "", (long long)num_embeddings, (long long)padding_idx);
        return m;
    }
    ag_tensor *w = ag_params_add(p, ag__param_name(name, sizeof name, "ag_embedding_new", prefix, "weight"),
                                 AG_SHAPE(num_embeddings, embedding_dim));
    if (!w) return m;
    ag_normal_(rng, w, 0.0, 1.0);
    if (padding_idx >= 0) {
        ag_tensor row = *w; /* a header copy: the row view is not an op */
        row.offset += padding_idx * w->stride[0];
        row.shape[0] = 1;
        ag_fill_(&row, 0.0);
    }
    m.weight = w;
    return m;
}

ag_tensor *ag_embedding_forward(const ag_embedding_module *m, ag_tensor *ids) {
    if (!m || !m->weight) {
        ag_error("ag_embedding_forward", "module is NULL or was not created (ag_embedding_new failed?)");
        return NULL;
    }
    return ag_embedding(m->weight, ids, m->padding_idx);
}

/* ---- positional encodings ---- */

ag_tensor *ag_sinusoidal_positions(int64_t L, int64_t D, ag_dtype dtype) {
    if (L < 0 || D < 0 || (dtype != AG_F32 && dtype != AG_F64)) {
        ag_error("ag_sinusoidal_positions", "L %lld, D %lld, dtype %s: sizes must be >= 0 and dtype f32 or f64",
                 (long long)L, (long long)D, ag_dtype_name(dtype));
        return NULL;
    }
    const char *op = "ag_sinusoidal_positions";
    int64_t n;
    if (__builtin_mul_overflow(L, D, &n) || !ag__numel_fits(1, &n)) {
        ag_error(op, "L %lld, D %lld: more elements than any tensor can hold", (long long)L, (long long)D);
        return NULL;
    }
    double *v = ag__alloc(op, ag_arena_current(), sizeof(double) * (size_t)max1(n), "the table in double");
    if (!v) return NULL;
    for (int64_t j = 0; j < D; j++) {
        double div = pow(10000.0, (double)(j - j % 2) / (double)D);
        for (int64_t pos = 0; pos < L; pos++)
            v[pos * D + j] = j % 2 ? cos((double)pos / div) : sin((double)pos / div);
    }
    ag_tensor *t = ag__new_op(op, dtype, AG_SHAPE(L, D));
    if (!t) return NULL;
    ag__copy(t, ag_wrap(AG_F64, AG_SHAPE(L, D), v));
    return t;
}
