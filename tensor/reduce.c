/* Reductions (sum, mean, var, max, min, argmax), softmax / log_softmax along a dim, and
 * sum_to_shape (the reverse of broadcasting).
 *
 * Every reduction is planned the same way: the kept dims enumerate output elements in the
 * row-major order of the contiguous output, the reduced dims are the elements combined into
 * each. Sums are pairwise (error O(log n) instead of O(n) in the tensor's own type) and each
 * output is computed by one thread in a fixed order, so results do not depend on the thread
 * count. */
#include <string.h>
#include <tgmath.h>

#include "fastmath.h"
#include "internal.h"

/* ---- plan ---- */

typedef struct {
    int nk, nr;                                    /* kept / reduced dims after simplification */
    int64_t kshape[AG_MAX_DIMS], kstride[AG_MAX_DIMS];
    int64_t kcomp[AG_MAX_DIMS];                    /* kept dims' strides in a contiguous tensor of t's shape */
    int64_t rshape[AG_MAX_DIMS], rstride[AG_MAX_DIMS]; /* largest stride first */
    int64_t nout, nred;                            /* output elements, elements combined per output */
} plan;

/* Size-1 dims are dropped and neighbours that step as one are merged, so a contiguous tensor
 * reduced over its trailing dims becomes one kept and one reduced dim. Reduced dims are sorted
 * by stride (the order in which they are summed is ours to choose), which turns a transposed
 * input's reduction into a contiguous run. */
static void make_plan(plan *p, const ag_tensor *t, unsigned mask) {
    int64_t comp[AG_MAX_DIMS];
    ag__contiguous_strides(t->ndim, t->shape, comp);
    memset(p, 0, sizeof *p);
    p->nout = p->nred = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n = t->shape[d];
        if (mask >> d & 1) {
            p->nred *= n;
            if (n == 1) continue;
            p->rshape[p->nr] = n;
            p->rstride[p->nr++] = t->stride[d];
        } else {
            p->nout *= n;
            if (n == 1) continue;
            int k = p->nk - 1;
            if (k >= 0 && p->kstride[k] == t->stride[d] * n && p->kcomp[k] == comp[d] * n) {
                p->kshape[k] *= n;
                p->kstride[k] = t->stride[d];
                p->kcomp[k] = comp[d];
            } else {
                p->kshape[++k] = n;
                p->kstride[k] = t->stride[d];
                p->kcomp[k] = comp[d];
                p->nk++;
            }
        }
    }
    for (int i = 1; i < p->nr; i++) /* stable insertion sort, stride descending */
        for (int j = i; j > 0 && p->rstride[j - 1] < p->rstride[j]; j--) {
            int64_t s = p->rstride[j], n = p->rshape[j];
            p->rstride[j] = p->rstride[j - 1];
            p->rshape[j] = p->rshape[j - 1];
            p->rstride[j - 1] = s;
            p->rshape[j - 1] = n;
        }
    int w = 0;
    for (int i = 1; i < p->nr; i++) {
        if (p->rstride[w] == p->rstride[i] * p->rshape[i]) {
            p->rshape[w] *= p->rshape[i];
            p->rstride[w] = p->rstride[i];
        } else {
            w++;
            p->rshape[w] = p->rshape[i];
            p->rstride[w] = p->rstride[i];
        }
    }
    if (p->nr) p->nr = w + 1;
}

/* offsets of output element o in the input and in a contiguous tensor of the input's shape */
static inline void kept_offsets(const plan *p, int64_t o, int64_t *in, int64_t *comp) {
    int64_t a = 0, b = 0;
    for (int d = p->nk - 1; d >= 0; d--) {
        int64_t i = o % p->kshape[d];
        o /= p->kshape[d];
        a += i * p->kstride[d];
        b += i * p->kcomp[d];
    }
    *in = a;
    *comp = b;
}

/* offset of row r of the reduced space spanned by the first nd reduced dims */
static inline int64_t red_offset(const plan *p, int nd, int64_t r) {
    int64_t a = 0;
    for (int d = nd - 1; d >= 0; d--) {
        a += (r % p->rshape[d]) * p->rstride[d];
        r /= p->rshape[d];
    }
    return a;
}

static bool parallel(int64_t work, int64_t tasks) { return work > AG_PAR_THRESHOLD && tasks > 1; }

/* ---- sum kernels: EXPR(x, y, c) is what is summed (x, y elements, c a per-output shift) ---- */

#define E_SUM(x, y, c) (x)
#define E_SQDEV(x, y, c) (((x) - (c)) * ((x) - (c)))
#define TILE 64 /* output columns summed together in the vertical kernel */
#define LEAF 16 /* rows summed sequentially at the leaves of the vertical kernel */

/* sum_run_f32, sum_reduce_f32, ...: sums of every dtype (integers and bool in int64_t) and the
 * squared deviations of var */
#define T float
#define TA float
#define FN(name) sum_##name##_f32
#define EXPR E_SUM
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T double
#define TA double
#define FN(name) sum_##name##_f64
#define EXPR E_SUM
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T int32_t
#define TA int64_t
#define FN(name) sum_##name##_i32
#define EXPR E_SUM
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T int64_t
#define TA int64_t
#define FN(name) sum_##name##_i64
#define EXPR E_SUM
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T uint8_t
#define TA int64_t
#define FN(name) sum_##name##_b8
#define EXPR E_SUM
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T float
#define TA float
#define FN(name) sqdev_##name##_f32
#define EXPR E_SQDEV
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR
#define T double
#define TA double
#define FN(name) sqdev_##name##_f64
#define EXPR E_SQDEV
#include "pairwise_sum.inc"
#include "reduce_plan.inc"
#undef T
#undef TA
#undef FN
#undef EXPR

typedef void (*reduce_fn)(const plan *p, const void *x, void *out, const void *c);
static const reduce_fn SUM_K[] = {sum_reduce_f32, sum_reduce_f64, sum_reduce_i32, sum_reduce_i64, sum_reduce_b8};
static const reduce_fn SQDEV_K[] = {sqdev_reduce_f32, sqdev_reduce_f64};

/* y /= by, elementwise */
static void divide(ag_tensor *y, double by) {
    int64_t n = ag_numel(y);
    if (y->dtype == AG_F32) {
        float *v = (float *)y->data, d = (float)by;
        for (int64_t i = 0; i < n; i++) v[i] = v[i] / d;
    } else {
        double *v = (double *)y->data, d = by;
        for (int64_t i = 0; i < n; i++) v[i] = v[i] / d;
    }
}

/* ---- dims, shapes, gradient views ---- */

/* A 0-d tensor accepts dim 0 and -1 (as in PyTorch) and reduces over nothing: returns -2. */
static int wrap_dim(const char *op, const ag_tensor *t, int dim) {
    if (t->ndim == 0 && (dim == 0 || dim == -1)) return -2;
    return ag_wrap_dim(op, t, dim);
}

/* dims (ndims of them, NULL or 0: all) as a bit mask over t's dims; false after reporting */
bool ag__dims_mask(const char *op, const ag_tensor *t, int ndims, const int *dims, unsigned *mask) {
    char b[128];
    *mask = 0;
    if (ndims == 0 || !dims) {
        *mask = (1u << t->ndim) - 1;
        return true;
    }
    if (ndims < 0 || ndims > AG_MAX_DIMS) {
        ag_error(op, "%d dims given for %s", ndims, ag_shape_str(t, b));
        return false;
    }
    for (int i = 0; i < ndims; i++) {
        int d = wrap_dim(op, t, dims[i]);
        if (d == -1) return false;
        if (d == -2) continue;
        if (*mask >> d & 1) {
            ag_error(op, "dim %d appears more than once in the dims reduced over %s", dims[i], ag_shape_str(t, b));
            return false;
        }
        *mask |= 1u << d;
    }
    return true;
}

/* t's shape with the dims in mask removed or (keepdim) set to 1; returns the ndim */
int ag__reduced_shape(const ag_tensor *t, unsigned mask, bool keepdim, int64_t *shape) {
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (!(mask >> d & 1)) shape[n++] = t->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    return n;
}

/* g (contiguous, the reduced shape) viewed with t's ndim, reduced dims of size 1, so that it
 * broadcasts back over t */
ag_tensor *ag__keepdim_view(ag_tensor *g, const ag_tensor *t, unsigned mask) {
    ag_tensor *v = ag__alias(ag_contiguous(g));
    v->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) v->shape[d] = mask >> d & 1 ? 1 : t->shape[d];
    ag__contiguous_strides(v->ndim, v->shape, v->stride);
    return v;
}

static bool is_float(const ag_tensor *t) { return t->dtype == AG_F32 || t->dtype == AG_F64; }
static ag_dtype sum_dtype(const ag_tensor *t) { return is_float(t) ? t->dtype : AG_I64; }

/* t reduced over mask into a new contiguous tensor of ndim/shape (sum_dtype of t's dtype) */
static ag_tensor *sum_into_new(const ag_tensor *t, unsigned mask, int ndim, const int64_t *shape) {
    plan p;
    make_plan(&p, t, mask);
    ag_tensor *y = ag__new(sum_dtype(t), ndim, shape);
    SUM_K[t->dtype](&p, ag__ptr(t), y->data, NULL);
    return y;
}

/* ---- sum, mean, var ---- */

/* dx += g broadcast back over the reduced dims */
static void sum_backward(ag_node *n) {
    ag_accum_grad(n->in[0], ag__keepdim_view(n->out->grad, n->in[0], (unsigned)n->ctx.i[0]));
}
static const ag_op SUM = {"ag_sum", sum_backward, AG_SAVES_NONE};

/* t: any shape and dtype; returns t's shape reduced over dims (f32/f64 keep their dtype,
 * integers and bool sum to i64) */
ag_tensor *ag_sum(ag_tensor *t, int ndims, const int *dims, bool keepdim) {
    unsigned mask;
    if (!ag__check_not_null("ag_sum", t) || !ag__dims_mask("ag_sum", t, ndims, dims, &mask)) return NULL;
    int64_t shape[AG_MAX_DIMS];
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    ag_tensor *y = sum_into_new(t, mask, nd, shape);
    if (is_float(t)) {
        ag_node *n = ag_finish(&SUM, y, 1, &t);
        if (n) n->ctx.i[0] = mask;
    }
    return y;
}

/* dx += g / N broadcast back over the reduced dims */
static void mean_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    ag_tensor *g = ag_div_scalar(n->out->grad, (double)n->ctx.i[1]);
    ag_accum_grad(x, ag__keepdim_view(g, x, (unsigned)n->ctx.i[0]));
}
static const ag_op MEAN = {"ag_mean", mean_backward, AG_SAVES_NONE};

static int64_t reduced_count(const ag_tensor *t, unsigned mask) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (mask >> d & 1) n *= t->shape[d];
    return n;
}

/* t: f32/f64, any shape; returns t's shape reduced over dims (NaN where nothing is averaged) */
ag_tensor *ag_mean(ag_tensor *t, int ndims, const int *dims, bool keepdim) {
    unsigned mask;
    if (!ag__check_float("ag_mean", t) || !ag__dims_mask("ag_mean", t, ndims, dims, &mask)) return NULL;
    int64_t shape[AG_MAX_DIMS], count = reduced_count(t, mask);
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    ag_tensor *y = sum_into_new(t, mask, nd, shape);
    divide(y, (double)count);
    ag_node *n = ag_finish(&MEAN, y, 1, &t);
    if (n) {
        n->ctx.i[0] = mask;
        n->ctx.i[1] = count;
    }
    return y;
}

/* dx += g * 2 (x - mean) / divisor */
static void var_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    ag_tensor *g = ag_mul_scalar(ag__keepdim_view(n->out->grad, x, (unsigned)n->ctx.i[0]), 2.0 / n->ctx.d[1]);
    ag_accum_grad(x, ag_mul(g, ag_sub(x, n->saved[0])));
}
static const ag_op VAR = {"ag_var", var_backward, AG_SAVES_INPUT(0)};

/* t: f32/f64, any shape; returns t's shape reduced over dims: Σ(x - mean)² / max(0, N - correction) */
ag_tensor *ag_var(ag_tensor *t, int ndims, const int *dims, int correction, bool keepdim) {
    unsigned mask;
    if (!ag__check_float("ag_var", t) || !ag__dims_mask("ag_var", t, ndims, dims, &mask)) return NULL;
    if (correction < 0) {
        char b[128];
        ag_error("ag_var", "correction %d for %s: must be 0 (population) or more (1: sample)", correction,
                 ag_shape_str(t, b));
        return NULL;
    }
    int64_t shape[AG_MAX_DIMS], kshape[AG_MAX_DIMS], count = reduced_count(t, mask);
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    ag__reduced_shape(t, mask, true, kshape);
    /* two passes (mean, then squared deviations) rather than Σx² - N·mean², which cancels */
    ag_tensor *mean = sum_into_new(t, mask, t->ndim, kshape);
    divide(mean, (double)count);
    plan p;
    make_plan(&p, t, mask);
    ag_tensor *y = ag__new(t->dtype, nd, shape);
    SQDEV_K[t->dtype](&p, ag__ptr(t), y->data, mean->data);
    double divisor = count > correction ? (double)(count - correction) : 0.0;
    divide(y, divisor);
    ag_node *n = ag_finish(&VAR, y, 1, &t);
    if (n) {
        n->ctx.i[0] = mask;    /* ctx is a union: i[0] shares d[0], so the divisor goes in d[1] */
        n->ctx.d[1] = divisor;
        n->saved[0] = mean;
    }
    return y;
}

/* ---- max / min / argmax along one dim ---- */

/* v != v: true for a NaN, false for integers (a macro, so that GCC does not warn of the
 * self-comparison where T is an integer) */
#define IS_NAN(v) ((v) != (v))
#define T float
#define FN(name) max_##name##_f32
#define BEATS(a, b) ((a) > (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#define FN(name) min_##name##_f32
#define BEATS(a, b) ((a) < (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#undef T
#define T double
#define FN(name) max_##name##_f64
#define BEATS(a, b) ((a) > (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#define FN(name) min_##name##_f64
#define BEATS(a, b) ((a) < (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#undef T
#define T int32_t
#define FN(name) max_##name##_i32
#define BEATS(a, b) ((a) > (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#define FN(name) min_##name##_i32
#define BEATS(a, b) ((a) < (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#undef T
#define T int64_t
#define FN(name) max_##name##_i64
#define BEATS(a, b) ((a) > (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#define FN(name) min_##name##_i64
#define BEATS(a, b) ((a) < (b))
#include "max_rows.inc"
#undef FN
#undef BEATS
#undef T

/* dx (contiguous, x's shape) at each output's argmax += g */
static void max_bwd(const plan *p, int64_t s, const int64_t *idx, ag_dtype dt, const void *g, void *dx) {
    for (int64_t o = 0; o < p->nout; o++) {
        int64_t off, co;
        kept_offsets(p, o, &off, &co);
        int64_t e = co + idx[o] * s;
        if (dt == AG_F32) ((float *)dx)[e] += ((const float *)g)[o];
        else ((double *)dx)[e] += ((const double *)g)[o];
    }
}
typedef void (*max_fn)(const plan *p, const void *x, int64_t n, int64_t s, void *vals, int64_t *idx);
static const max_fn MAX_K[] = {max_best_along_f32, max_best_along_f64, max_best_along_i32, max_best_along_i64};
static const max_fn MIN_K[] = {min_best_along_f32, min_best_along_f64, min_best_along_i32, min_best_along_i64};

/* shared by max, min and argmax: validates, returns the values (NULL if not wanted) and indices */
static bool max_along(const char *op, const max_fn *ks, ag_tensor *t, int dim, bool keepdim, bool want_values,
                      ag_tensor **vals, ag_tensor **idx, unsigned *mask_out) {
    char b[128];
    if (!ag__check_not_null(op, t)) return false;
    if (t->dtype == AG_BOOL) {
        ag_error(op, "%s tensor of dtype bool: expected a numeric dtype", ag_shape_str(t, b));
        return false;
    }
    int d = wrap_dim(op, t, dim);
    if (d == -1) return false;
    int64_t n = d >= 0 ? t->shape[d] : 1, s = d >= 0 ? t->stride[d] : 0;
    unsigned mask = d >= 0 ? 1u << d : 0;
    if (n == 0) {
        ag_error(op, "dim %d of %s has size 0: there is no %s of nothing", dim, ag_shape_str(t, b),
                 ks == MIN_K ? "minimum" : "maximum");
        return false;
    }
    int64_t shape[AG_MAX_DIMS];
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    plan p;
    make_plan(&p, t, mask);
    *vals = want_values ? ag__new(t->dtype, nd, shape) : NULL;
    *idx = ag__new(AG_I64, nd, shape);
    if (p.nout) ks[t->dtype](&p, ag__ptr(t), n, s, want_values ? (*vals)->data : NULL, (int64_t *)(*idx)->data);
    *mask_out = mask;
    return true;
}

static void max_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *dx = ag_grad_buffer(x);
    if (!dx) return;
    unsigned mask = (unsigned)n->ctx.i[0];
    plan p;
    make_plan(&p, x, mask);
    int64_t s = 1; /* stride of the reduced dim in dx */
    for (int d = x->ndim - 1; d >= 0 && !(mask >> d & 1); d--) s *= x->shape[d];
    ag_tensor *g = ag_contiguous(n->out->grad);
    const int64_t *idx = (const int64_t *)n->saved[0]->data;
    max_bwd(&p, s, idx, x->dtype, ag__ptr(g), ag__ptr(dx));
}
/* the argmax is its own (a caller asking for the indices gets a copy) */
static const ag_op MAX = {"ag_max", max_backward, AG_SAVES_NONE}, MAX_DIM = {"ag_max_dim", max_backward, AG_SAVES_NONE},
                   MIN_DIM = {"ag_min_dim", max_backward, AG_SAVES_NONE};

/* ag_max, ag_max_dim, ag_min_dim: the values, and the indices into *indices when asked */
static ag_tensor *best_along(const ag_op *op, const max_fn *ks, ag_tensor *t, int dim, bool keepdim,
                             ag_tensor **indices) {
    ag_tensor *vals, *idx;
    unsigned mask;
    if (indices) *indices = NULL;
    if (!max_along(op->name, ks, t, dim, keepdim, true, &vals, &idx, &mask)) return NULL;
    ag_node *n = is_float(t) ? ag_finish(op, vals, 1, &t) : NULL;
    if (n) {
        n->ctx.i[0] = mask;
        n->saved[0] = idx;
    }
    if (indices) *indices = n ? ag_clone(idx) : idx;
    return vals;
}

/* t: any numeric dtype; returns t's shape without dim (or with it as 1): the maxima */
ag_tensor *ag_max(ag_tensor *t, int dim, bool keepdim) { return best_along(&MAX, MAX_K, t, dim, keepdim, NULL); }

/* torch.max(t, dim, keepdim): the maxima as ag_max, and (indices non-NULL) their positions, AG_I64 */
ag_tensor *ag_max_dim(ag_tensor *t, int dim, bool keepdim, ag_tensor **indices) {
    return best_along(&MAX_DIM, MAX_K, t, dim, keepdim, indices);
}

/* torch.min(t, dim, keepdim): the minima (the first one, or the first NaN) and their positions */
ag_tensor *ag_min_dim(ag_tensor *t, int dim, bool keepdim, ag_tensor **indices) {
    return best_along(&MIN_DIM, MIN_K, t, dim, keepdim, indices);
}

/* t: any numeric dtype; returns t's shape without dim (or with it as 1), AG_I64: the index of
 * the first maximum */
ag_tensor *ag_argmax(ag_tensor *t, int dim, bool keepdim) {
    ag_tensor *vals, *idx;
    unsigned mask;
    if (!max_along("ag_argmax", MAX_K, t, dim, keepdim, false, &vals, &idx, &mask)) return NULL;
    return idx;
}

/* ---- softmax / log_softmax along one dim ---- */

/* The softmax row kernel (softmax_rows.inc, declared in op.h), once per float type */
#define EXP ag__expf
#define T float
#define FN(name) name##_f32
#include "softmax_rows.inc"
#undef T
#undef FN
#undef EXP
#define EXP exp
#define T double
#define FN(name) name##_f64
#include "softmax_rows.inc"
#undef T
#undef FN
#undef EXP

/* y is a contiguous tensor of x's shape; rows of n along the plan's reduced dim, at stride sx in
 * x and sy in y */
static void softmax_rows(const plan *p, ag_dtype dt, const void *xv, int64_t n, int64_t sx, void *yv, int64_t sy,
                         bool log_) {
    bool par = parallel(p->nout * n, p->nout);
#pragma omp parallel for if (par) schedule(static)
    for (int64_t o = 0; o < p->nout; o++) {
        int64_t xo, yo;
        kept_offsets(p, o, &xo, &yo);
        if (dt == AG_F32)
            ag__softmax_row_f32(log_, (const float *)xv + xo, sx, (float *)yv + yo, sy, n, NULL);
        else
            ag__softmax_row_f64(log_, (const double *)xv + xo, sx, (double *)yv + yo, sy, n,
                                NULL);
    }
}

/* g, y, dx: contiguous of one shape, rows at stride s: softmax dx += y (g - Σ g y), log_softmax
 * dx += g - exp(y) Σ g */
static void softmax_rows_bwd(const plan *p, ag_dtype dt, int64_t n, int64_t s, const void *gv, const void *yv,
                             void *dxv, bool log_) {
    bool par = parallel(p->nout * n, p->nout);
#pragma omp parallel for if (par) schedule(static)
    for (int64_t o = 0; o < p->nout; o++) {
        int64_t xo, co;
        kept_offsets(p, o, &xo, &co);
        if (dt == AG_F32)
            ag__softmax_row_bwd_f32(log_, (const float *)yv + co, (const float *)gv + co,
                                    (float *)dxv + co, n, s, true);
        else
            ag__softmax_row_bwd_f64(log_, (const double *)yv + co, (const double *)gv + co,
                                    (double *)dxv + co, n, s, true);
    }
}

/* the row stride of dim d in a contiguous tensor of t's shape (0 for a 0-d t) */
static int64_t comp_stride(const ag_tensor *t, int d) {
    if (d < 0) return 0;
    int64_t s = 1;
    for (int k = t->ndim - 1; k > d; k--) s *= t->shape[k];
    return s;
}

static void softmax_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *dx = ag_grad_buffer(x);
    if (!dx) return;
    int d = (int)n->ctx.i[0];
    bool log_ = n->ctx.i[1];
    int64_t len = d >= 0 ? x->shape[d] : 1;
    if (len == 0) return;
    plan p;
    make_plan(&p, x, d >= 0 ? 1u << d : 0);
    ag_tensor *g = ag_contiguous(n->out->grad);
    softmax_rows_bwd(&p, x->dtype, len, comp_stride(x, d), ag__ptr(g), ag__ptr(n->out), ag__ptr(dx), log_);
}
static const ag_op SOFTMAX = {"ag_softmax", softmax_backward, AG_SAVES_OUTPUT};
static const ag_op LOG_SOFTMAX = {"ag_log_softmax", softmax_backward, AG_SAVES_OUTPUT};

static ag_tensor *softmax(const ag_op *op, ag_tensor *t, int dim, bool log_) {
    if (!ag__check_float(op->name, t)) return NULL;
    int d = wrap_dim(op->name, t, dim);
    if (d == -1) return NULL;
    int64_t len = d >= 0 ? t->shape[d] : 1;
    plan p;
    make_plan(&p, t, d >= 0 ? 1u << d : 0);
    ag_tensor *y = ag__new(t->dtype, t->ndim, t->shape);
    if (len > 0 && p.nout > 0)
        softmax_rows(&p, t->dtype, ag__ptr(t), len, d >= 0 ? t->stride[d] : 0, y->data, comp_stride(t, d), log_);
    ag_node *n = ag_finish(op, y, 1, &t);
    if (n) {
        n->ctx.i[0] = d;
        n->ctx.i[1] = log_;
    }
    return y;
}

/* t: f32/f64; returns t's shape: exp(t) / Σ exp(t) along dim */
ag_tensor *ag_softmax(ag_tensor *t, int dim) { return softmax(&SOFTMAX, t, dim, false); }
/* t: f32/f64; returns t's shape: t - log Σ exp(t) along dim */
ag_tensor *ag_log_softmax(ag_tensor *t, int dim) { return softmax(&LOG_SOFTMAX, t, dim, true); }

/* ---- sum_to_shape ---- */

/* the output broadcasts back to the input's shape, so accumulating it there is the expand */
static void sum_to_shape_backward(ag_node *n) { ag_accum_grad(n->in[0], n->out->grad); }
static const ag_op SUM_TO_SHAPE = {"ag_sum_to_shape", sum_to_shape_backward, AG_SAVES_NONE};

/* g: a shape that shape broadcasts to; returns shape (g itself when the shapes are equal).
 * Works with grad mode off: ag_accum_grad relies on it. */
ag_tensor *ag_sum_to_shape(ag_tensor *g, int ndim, const int64_t *shape) {
    const char *op = "ag_sum_to_shape";
    if (!ag__check_not_null(op, g)) return NULL;
    char b1[128], b2[128];
    bool ok = ndim >= 0 && ndim <= g->ndim && (ndim == 0 || shape);
    unsigned mask = 0;
    int lead = ok ? g->ndim - ndim : 0;
    for (int d = 0; ok && d < g->ndim; d++) {
        if (d < lead) {
            mask |= 1u << d;
        } else if (shape[d - lead] != g->shape[d]) {
            if (shape[d - lead] != 1) ok = false;
            mask |= 1u << d;
        }
    }
    if (!ok) {
        ag_error(op, "%s cannot be summed to %s: the target must broadcast to it", ag_shape_str(g, b1),
                 ndim >= 0 && ndim <= AG_MAX_DIMS && (ndim == 0 || shape) ? ag__shape_str(ndim, shape, b2)
                                                                          : "(invalid)");
        return NULL;
    }
    if (!mask) return g;
    ag_tensor *y = sum_into_new(g, mask, ndim, shape);
    if (is_float(g)) ag_finish(&SUM_TO_SHAPE, y, 1, &g);
    return y;
}
