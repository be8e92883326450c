/* Reductions over several dims that are not sums: the vector p-norm, any and all. The reduced
 * dims are moved last (a view) and the tensor copied only when that view is not contiguous, so
 * each output element is one contiguous row; norm_rows.inc holds the row kernels, and the
 * norm's backward is one elementwise pass over x with the gradient and the norm broadcast. */
#include <math.h>
#include <string.h>
#include <tgmath.h>

#include "internal.h"

/* what a p-norm sums: |x|, x², x != 0 or |x|^p */
enum { TERM_ABS, TERM_SQUARE, TERM_NONZERO, TERM_POW };

#define NORM_FLOAT 1
#define T float
#define FN(name) name##_f32
#include "norm_rows.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "norm_rows.inc"
#undef T
#undef FN
#undef NORM_FLOAT
#define NORM_FLOAT 0
#define T int32_t
#define FN(name) name##_i32
#include "norm_rows.inc"
#undef T
#undef FN
#define T int64_t
#define FN(name) name##_i64
#include "norm_rows.inc"
#undef T
#undef FN
#define T uint8_t
#define FN(name) name##_b8
#include "norm_rows.inc"
#undef T
#undef FN
#undef NORM_FLOAT

/* t with the dims in mask moved last, contiguous (t's own storage when it already is): *nout
 * rows of *m elements, row o for output element o */
static ag_tensor *rows_last(ag_tensor *t, unsigned mask, int64_t *nout, int64_t *m) {
    ag_tensor *v = ag__alias(t);
    int k = 0;
    *nout = *m = 1;
    for (int pass = 0; pass < 2; pass++)
        for (int d = 0; d < t->ndim; d++)
            if ((mask >> d & 1) == (unsigned)pass) {
                v->shape[k] = t->shape[d];
                v->stride[k++] = t->stride[d];
                *(pass ? m : nout) *= t->shape[d];
            }
    return ag__dense(v);
}

/* ---- norm ---- */

typedef void (*norm_rows_fn)(const void *x, int64_t nout, int64_t m, double p, void *y, void *count);

static void norm_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    double p = n->ctx.d[0];
    if (p == 0) { /* a count: its gradient is zero */
        ag_accum_grad(x, NULL);
        return;
    }
    if (!x->requires_grad) return;
    unsigned mask = (unsigned)n->ctx.i[1];
    ag_tensor *g = ag__keepdim_view(n->out->grad, x, mask), *r = ag__keepdim_view(n->out, x, mask);
    if (isinf(p)) g = ag_div(g, n->saved[0]); /* split among the elements that give the norm */
    ag_tensor *dx = ag__new(x->dtype, x->ndim, x->shape);
    if (!dx || !g) return;
    ag_tensor *ops[4] = {dx, x, g, r};
    int64_t bs[4][AG_MAX_DIMS];
    char *base[4];
    for (int k = 0; k < 4; k++) {
        ag__bcast_bstrides(ops[k], x->ndim, x->shape, bs[k]);
        base[k] = ag__ptr(ops[k]);
    }
    ag__foreach(x->ndim, x->shape, 4, base, (const int64_t(*)[AG_MAX_DIMS])bs,
                x->dtype == AG_F32 ? norm_bwd_f32 : norm_bwd_f64, &p);
    ag_accum_grad(x, dx);
}
/* reads x and the norm; the count of ties for p = ±inf is its own */
static const ag_op NORM = {"ag_norm", norm_backward, AG_SAVES_INPUT(0) | AG_SAVES_OUTPUT};

/* torch.linalg.vector_norm(t, ord=p, dim=dims, keepdim) (torch.norm(t, p, dim) for a number p) */
ag_tensor *ag_norm(ag_tensor *t, double p, int ndims, const int *dims, bool keepdim) {
    const char *op = "ag_norm";
    unsigned mask;
    if (!ag__check_float(op, t) || !ag__dims_mask(op, t, ndims, dims, &mask)) return NULL;
    char b[128];
    if (isnan(p)) {
        ag_error(op, "%s with p nan: p must be a number or ±inf", ag_shape_str(t, b));
        return NULL;
    }
    int64_t shape[AG_MAX_DIMS], kshape[AG_MAX_DIMS], nout, m;
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    ag__reduced_shape(t, mask, true, kshape);
    ag_tensor *rows = rows_last(t, mask, &nout, &m);
    if (isinf(p) && m == 0) {
        ag_error(op, "the %sinf norm of %s over dims of size 0: a %s of nothing", p < 0 ? "-" : "",
                 ag_shape_str(t, b), p < 0 ? "minimum" : "maximum");
        return NULL;
    }
    ag_tensor *y = ag__new(t->dtype, nd, shape);
    ag_tensor *count = isinf(p) && ag_any_requires_grad(1, &t) ? ag__new(t->dtype, t->ndim, kshape) : NULL;
    if (!y || !rows) return NULL;
    norm_rows_fn fn = t->dtype == AG_F32 ? norm_rows_f32 : norm_rows_f64;
    fn(ag__ptr(rows), nout, m, p, y->data, count ? count->data : NULL);
    ag_node *n = ag_finish(&NORM, y, 1, &t);
    if (n) {
        n->ctx.d[0] = p;    /* ctx is a union: d[0] shares i[0], so the mask goes in i[1] */
        n->ctx.i[1] = mask;
        n->saved[0] = count;
    }
    return y;
}

/* ---- any, all ---- */

typedef void (*any_all_fn)(const void *x, int64_t nout, int64_t m, bool all, uint8_t *y);
static const any_all_fn ANY_ALL_K[] = {any_all_rows_f32, any_all_rows_f64, any_all_rows_i32, any_all_rows_i64,
                                       any_all_rows_b8};

static ag_tensor *any_all(const char *op, ag_tensor *t, int ndims, const int *dims, bool keepdim, bool all) {
    unsigned mask;
    if (!ag__check_not_null(op, t) || !ag__dims_mask(op, t, ndims, dims, &mask)) return NULL;
    int64_t shape[AG_MAX_DIMS], nout, m;
    int nd = ag__reduced_shape(t, mask, keepdim, shape);
    ag_tensor *rows = rows_last(t, mask, &nout, &m), *y = ag__new(AG_BOOL, nd, shape);
    if (!rows || !y) return NULL;
    ANY_ALL_K[t->dtype](ag__ptr(rows), nout, m, all, (uint8_t *)y->data);
    return y;
}

/* torch.any(t, dim, keepdim) over dims (NULL or 0: all): AG_BOOL, false over nothing */
ag_tensor *ag_any(ag_tensor *t, int ndims, const int *dims, bool keepdim) {
    return any_all("ag_any", t, ndims, dims, keepdim, false);
}
/* torch.all(t, dim, keepdim) over dims (NULL or 0: all): AG_BOOL, true over nothing */
ag_tensor *ag_all(ag_tensor *t, int ndims, const int *dims, bool keepdim) {
    return any_all("ag_all", t, ndims, dims, keepdim, true);
}
