/* Joining, splitting and indexing. cat/stack copy through ag__copy (any dtype); split/chunk
 * are views. index_select and gather are one "take" along an indexed stride: out[pos] =
 * src[pos·src_stride + index[pos·index_stride] * step]. Their backward is the matching
 * scatter-add, parallel only across destination elements that no two positions can share, so
 * repeated indices sum in a fixed order. (The embedding's row gather is nn/layers/embedding.c.) */
#include <string.h>

#include "internal.h"

static bool is_float(ag_dtype dt) { return dt == AG_F32 || dt == AG_F64; }

/* ---- cat / stack ---- */

static void cat_backward(ag_node *n) {
    int dim = (int)n->ctx.i[0];
    int64_t start = 0;
    for (int i = 0; i < n->nin; i++) {
        ag_tensor *in = n->in[i], *buf = ag_grad_buffer(in);
        if (buf) ag__add_into(buf, ag_narrow(n->out->grad, dim, start, in->shape[dim]));
        start += in->shape[dim];
    }
}
static const ag_op CAT = {"ag_cat", cat_backward, AG_SAVES_NONE};

static bool check_list(const char *op, int n, ag_tensor *const *ts) {
    if (n <= 0 || !ts) {
        ag_error(op, "%d tensors given: need at least one", n);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!ag__check_not_null(op, ts[i])) return false;
    return true;
}

/* n tensors (…, s_i, …) along dim -> (…, Σ s_i, …) */
ag_tensor *ag_cat(int n, ag_tensor *const *ts, int dim) {
    const char *op = "ag_cat";
    if (!check_list(op, n, ts)) return NULL;
    char b1[128], b2[128];
    const ag_tensor *t0 = ts[0];
    if (t0->ndim == 0) {
        ag_error(op, "tensor 0 is 0-d: cannot concatenate scalars (use ag_stack)");
        return NULL;
    }
    int d = ag_wrap_dim(op, t0, dim);
    if (d < 0) return NULL;
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, t0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const ag_tensor *t = ts[i];
        if (t->dtype != t0->dtype) {
            ag_error(op, "tensor %d %s is %s but tensor 0 %s is %s: dtypes must match", i, ag_shape_str(t, b1),
                     ag_dtype_name(t->dtype), ag_shape_str(t0, b2), ag_dtype_name(t0->dtype));
            return NULL;
        }
        bool same = t->ndim == t0->ndim;
        for (int k = 0; same && k < t->ndim; k++) same = k == d || t->shape[k] == t0->shape[k];
        if (!same) {
            ag_error(op, "tensor %d %s and tensor 0 %s: sizes must match except in dim %d", i, ag_shape_str(t, b1),
                     ag_shape_str(t0, b2), d);
            return NULL;
        }
        shape[d] += t->shape[d];
    }
    ag_tensor *out = ag__new_op(op, t0->dtype, t0->ndim, shape);
    if (!out) return NULL;
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        ag__copy(ag_narrow(out, d, start, ts[i]->shape[d]), ts[i]); /* out needs no grad: no node */
        start += ts[i]->shape[d];
    }
    if (is_float(out->dtype)) {
        ag_node *nd = ag_finish(&CAT, out, n, ts);
        if (nd) nd->ctx.i[0] = d;
    }
    return out;
}

/* n tensors of one shape S -> S with a new dim of size n at dim (-(ndim+1) <= dim <= ndim) */
ag_tensor *ag_stack(int n, ag_tensor *const *ts, int dim) {
    const char *op = "ag_stack";
    if (!check_list(op, n, ts)) return NULL;
    char b1[128], b2[128];
    int nd = ts[0]->ndim, d = dim < 0 ? dim + nd + 1 : dim;
    if (d < 0 || d > nd || nd == AG_MAX_DIMS) {
        ag_error(op, "dim %d out of range for stacking %s tensors (allowed %d..%d)", dim, ag_shape_str(ts[0], b1),
                 -nd - 1, nd);
        return NULL;
    }
    for (int i = 1; i < n; i++) {
        if (!ag__same_shape(ts[i], ts[0])) {
            ag_error(op, "tensor %d %s and tensor 0 %s: all shapes must be equal", i, ag_shape_str(ts[i], b1),
                     ag_shape_str(ts[0], b2));
            return NULL;
        }
        if (ts[i]->dtype != ts[0]->dtype) {
            ag_error(op, "tensor %d %s is %s but tensor 0 %s is %s: dtypes must match", i, ag_shape_str(ts[i], b1),
                     ag_dtype_name(ts[i]->dtype), ag_shape_str(ts[0], b2), ag_dtype_name(ts[0]->dtype));
            return NULL;
        }
    }
    ag_tensor **u = ag__alloc(op, ag_arena_current(), sizeof(ag_tensor *) * (size_t)n, "the unsqueezed inputs");
    if (!u) return NULL;
    for (int i = 0; i < n; i++) u[i] = ag_unsqueeze(ts[i], d);
    return ag_cat(n, u, d);
}

/* ---- split / chunk (views) ---- */

static int pieces(ag_tensor *t, int64_t size, int d, int count, ag_tensor **out, int max) {
    for (int i = 0; i < count && i < max; i++) {
        int64_t start = i * size, len = t->shape[d] - start < size ? t->shape[d] - start : size;
        out[i] = ag_narrow(t, d, start, len);
        if (!out[i]) return -1;
    }
    return count;
}

/* pieces of split_size along dim, the last one smaller; writes the first max, returns how many */
int ag_split(ag_tensor *t, int64_t split_size, int dim, ag_tensor **out, int max) {
    const char *op = "ag_split";
    if (!ag__check_not_null(op, t)) return -1;
    int d = ag_wrap_dim(op, t, dim);
    if (d < 0) return -1;
    int64_t size = t->shape[d];
    if (split_size < 0 || (split_size == 0 && size != 0)) {
        char b[128];
        ag_error(op, "split_size %lld for dim %d of %s: must be positive", (long long)split_size, d,
                 ag_shape_str(t, b));
        return -1;
    }
    int64_t count = size == 0 ? 1 : (size + split_size - 1) / split_size;
    return pieces(t, split_size, d, (int)count, out, max);
}

/* torch.chunk: pieces of ceil(size/chunks), so fewer than chunks when they run out */
int ag_chunk(ag_tensor *t, int chunks, int dim, ag_tensor **out, int max) {
    const char *op = "ag_chunk";
    if (!ag__check_not_null(op, t)) return -1;
    int d = ag_wrap_dim(op, t, dim);
    if (d < 0) return -1;
    if (chunks <= 0) {
        ag_error(op, "chunks %d: must be positive", chunks);
        return -1;
    }
    int64_t size = t->shape[d];
    if (size == 0) return pieces(t, 0, d, chunks, out, max);
    int64_t piece = (size + chunks - 1) / chunks;
    return pieces(t, piece, d, (int)((size + piece - 1) / piece), out, max);
}

/* ---- indices ---- */

static int64_t index_at(const char *p, ag_dtype idt) {
    return idt == AG_I64 ? *(const int64_t *)p : *(const int32_t *)p;
}

static bool check_index_dtype(const char *op, const char *what, const ag_tensor *idx) {
    if (!ag__check_not_null(op, idx)) return false;
    if (idx->dtype == AG_I32 || idx->dtype == AG_I64) return true;
    char b[128];
    ag_error(op, "%s %s has dtype %s: expected i32 or i64", what, ag_shape_str(idx, b), ag_dtype_name(idx->dtype));
    return false;
}

/* idx's values, row-major, as int64 (from the arena); NULL after reporting through op */
static int64_t *values_of(const char *op, const ag_tensor *idx) {
    int64_t n = ag_numel(idx);
    int64_t *v = ag__alloc(op, ag_arena_current(), sizeof(int64_t) * (size_t)(n ? n : 1), "the indices");
    if (v) ag_to_buffer(idx, AG_I64, v);
    return v;
}

/* every value in [0, size), else report the first offender, e.g. "index 5 is out of range for
 * dim 0 of input (3,4) (size 3)" (noun "index", what "dim 0 of input (3,4)") */
static bool in_range(const char *op, const int64_t *v, int64_t n, int64_t size, const char *noun, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= size) {
            ag_error(op, "%s %lld is out of range for %s (size %lld)", noun, (long long)v[i], what, (long long)size);
            return false;
        }
    return true;
}

static bool check_range(const char *op, const ag_tensor *idx, int64_t size, const char *noun, const char *what) {
    const int64_t *v = values_of(op, idx);
    return v && in_range(op, v, ag_numel(idx), size, noun, what);
}

/* ---- take and scatter-add ---- */

/* Positions range over shape. The indexed tensor (the input forward, its gradient buffer
 * backward) is at src with stride src_st per position dim, 0 along the indexed dims; an
 * index value i adds i*step. Strides are in elements of each tensor. */
typedef struct {
    int ndim;
    int64_t shape[AG_MAX_DIMS];
    char *src;
    int64_t src_st[AG_MAX_DIMS], step;
    const char *idx;
    int64_t idx_st[AG_MAX_DIMS];
    ag_dtype idt;
} take_plan;

typedef struct { int64_t step; ag_dtype idt; } take_ctx;

/* take_1, take_4, take_8: by element size. p: out, src (at index 0), index; s in bytes; ctx step
 * in bytes */
#define T uint8_t
#define FN(name) name##_1
#include "take_kernel.inc"
#undef T
#undef FN
#define T uint32_t
#define FN(name) name##_4
#include "take_kernel.inc"
#undef T
#undef FN
#define T uint64_t
#define FN(name) name##_8
#include "take_kernel.inc"
#undef T
#undef FN

/* out (contiguous, shape of the positions) = the taken elements; any dtype */
static void take(ag_tensor *out, const take_plan *q) {
    int64_t es = (int64_t)ag_dtype_size(out->dtype), is = (int64_t)ag_dtype_size(q->idt);
    int64_t bs[3][AG_MAX_DIMS];
    ag__bcast_bstrides(out, q->ndim, q->shape, bs[0]);
    for (int d = 0; d < q->ndim; d++) {
        bs[1][d] = q->shape[d] == 1 ? 0 : q->src_st[d] * es;
        bs[2][d] = q->shape[d] == 1 ? 0 : q->idx_st[d] * is;
    }
    char *base[3] = {ag__ptr(out), q->src, (char *)q->idx};
    take_ctx c = {q->step * es, q->idt};
    ag_run_fn fn = es == 1 ? take_1 : es == 4 ? take_4 : take_8;
    ag__foreach(q->ndim, q->shape, 3, base, (const int64_t(*)[AG_MAX_DIMS])bs, fn, &c);
}

#define SCATTER_CHUNK 256

/* src[…] += g[pos] for every position. Positions that differ only along the indexed dims may
 * hit the same element, so those dims ("reduced") run in order inside one thread; threads
 * own disjoint chunks of the other dims, whose elements no other chunk can reach. */
#define T float
#define FN(name) name##_f32
#include "scatter_kernel.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "scatter_kernel.inc"
#undef T
#undef FN

/* g (the output's gradient, positions' shape) scatter-added into the indexed input's grad;
 * plan_for(input_or_buffer, node, plan) rebuilds the plan on the buffer's strides */
static void scatter_backward(ag_node *n, void (*plan_for)(const ag_tensor *, ag_node *, take_plan *)) {
    ag_tensor *in = n->in[0], *buf = ag_grad_buffer(in);
    if (!buf) return;
    take_plan q;
    plan_for(buf, n, &q);
    if (buf->dtype == AG_F32) scatter_f32(&q, n->out->grad);
    else scatter_f64(&q, n->out->grad);
}

/* ---- index_select ---- */

/* t along dim at the values of index (1-d, or 0-d as one value) */
static void index_select_plan(const ag_tensor *t, int dim, const ag_tensor *index, take_plan *q) {
    q->ndim = t->ndim;
    memcpy(q->shape, t->shape, sizeof q->shape);
    q->shape[dim] = index->ndim ? index->shape[0] : 1;
    memcpy(q->src_st, t->stride, sizeof q->src_st);
    q->src_st[dim] = 0;
    q->step = t->stride[dim];
    q->src = ag__ptr(t);
    memset(q->idx_st, 0, sizeof q->idx_st);
    q->idx_st[dim] = index->ndim ? index->stride[0] : 0;
    q->idx = ag__ptr(index);
    q->idt = index->dtype;
}

static void index_select_plan_node(const ag_tensor *buf, ag_node *n, take_plan *q) {
    index_select_plan(buf, (int)n->ctx.i[0], n->in[1], q);
}
static void index_select_backward(ag_node *n) { scatter_backward(n, index_select_plan_node); }
static const ag_op INDEX_SELECT = {"ag_index_select", index_select_backward, AG_SAVES_INPUT(1)};

/* t (…, s, …), index (L) -> (…, L, …) with out[…, i, …] = t[…, index[i], …] */
ag_tensor *ag_index_select(ag_tensor *t, int dim, ag_tensor *index) {
    const char *op = "ag_index_select";
    if (!ag__check_not_null(op, t) || !check_index_dtype(op, "index", index)) return NULL;
    char b1[128], b2[128], what[200];
    int d = ag_wrap_dim(op, t, dim);
    if (d < 0) return NULL;
    if (index->ndim > 1) {
        ag_error(op, "index %s must be 1-d (selecting from %s)", ag_shape_str(index, b1), ag_shape_str(t, b2));
        return NULL;
    }
    snprintf(what, sizeof what, "dim %d of input %s", d, ag_shape_str(t, b1));
    if (!check_range(op, index, t->shape[d], "index", what)) return NULL;
    take_plan q;
    index_select_plan(t, d, index, &q);
    ag_tensor *out = ag__new(t->dtype, q.ndim, q.shape);
    take(out, &q);
    if (is_float(t->dtype)) {
        ag_node *n = ag_finish(&INDEX_SELECT, out, 2, (ag_tensor *[]){t, index});
        if (n) n->ctx.i[0] = d;
    }
    return out;
}

/* ---- gather ---- */

static void gather_plan(const ag_tensor *t, int dim, const ag_tensor *index, take_plan *q) {
    q->ndim = index->ndim;
    memcpy(q->shape, index->shape, sizeof q->shape);
    memcpy(q->src_st, t->stride, sizeof q->src_st);
    q->src_st[dim] = 0;
    q->step = t->stride[dim];
    q->src = ag__ptr(t);
    memcpy(q->idx_st, index->stride, sizeof q->idx_st);
    q->idx = ag__ptr(index);
    q->idt = index->dtype;
}

static void gather_plan_node(const ag_tensor *buf, ag_node *n, take_plan *q) {
    gather_plan(buf, (int)n->ctx.i[0], n->in[1], q);
}
static void gather_backward(ag_node *n) { scatter_backward(n, gather_plan_node); }
static const ag_op GATHER = {"ag_gather", gather_backward, AG_SAVES_INPUT(1)};

/* t and index of one ndim, index no larger than t off dim -> index's shape; out[i][j] =
 * t[index[i][j]][j] for dim 0 */
ag_tensor *ag_gather(ag_tensor *t, int dim, ag_tensor *index) {
    const char *op = "ag_gather";
    if (!ag__check_not_null(op, t) || !check_index_dtype(op, "index", index)) return NULL;
    char b1[128], b2[128], what[200];
    int d = ag_wrap_dim(op, t, dim);
    if (d < 0) return NULL;
    bool fits = index->ndim == t->ndim;
    for (int k = 0; fits && k < t->ndim; k++) fits = k == d || index->shape[k] <= t->shape[k];
    if (!fits) {
        ag_error(op, "index %s and input %s: need the same ndim and index no larger than the input outside dim %d",
                 ag_shape_str(index, b1), ag_shape_str(t, b2), d);
        return NULL;
    }
    snprintf(what, sizeof what, "dim %d of input %s", d, ag_shape_str(t, b1));
    if (!check_range(op, index, t->shape[d], "index", what)) return NULL;
    take_plan q;
    gather_plan(t, d, index, &q);
    ag_tensor *out = ag__new(t->dtype, q.ndim, q.shape);
    take(out, &q);
    if (is_float(t->dtype)) {
        ag_node *n = ag_finish(&GATHER, out, 2, (ag_tensor *[]){t, index});
        if (n) n->ctx.i[0] = d;
    }
    return out;
}

/* ---- one_hot ---- */

/* index (…) of class ids -> (…, num_classes) AG_I64; num_classes < 0 means max(index) + 1 */
ag_tensor *ag_one_hot(ag_tensor *index, int64_t num_classes) {
    const char *op = "ag_one_hot";
    if (!check_index_dtype(op, "index", index)) return NULL;
    char b[128];
    if (index->ndim >= AG_MAX_DIMS) {
        ag_error(op, "index %s: at most %d dims", ag_shape_str(index, b), AG_MAX_DIMS - 1);
        return NULL;
    }
    int64_t n = ag_numel(index), *v = values_of(op, index);
    if (!v) return NULL;
    if (num_classes < 0) {
        num_classes = 0;
        for (int64_t i = 0; i < n; i++) num_classes = v[i] + 1 > num_classes ? v[i] + 1 : num_classes;
    }
    if (!in_range(op, v, n, num_classes, "class", "num_classes")) return NULL;
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
    shape[index->ndim] = num_classes;
    ag_tensor *out = ag_zeros(AG_I64, index->ndim + 1, shape);
    if (!out) return NULL;
    int64_t *o = (int64_t *)out->data;
    for (int64_t i = 0; i < n; i++) o[i * num_classes + v[i]] = 1;
    return out;
}
