/* Linear: ag_linear (one GEMM over the flattened leading dims), ag_linear on some rows of a
 * padded batch, and the nn.Linear module. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"
#include "layers_internal.h"

/* t (..., k) read in place as an m×k matrix when its strides allow (contiguous, row-sliced, or a
 * 2-d transpose); p is NULL when it must be copied first. */
mat ag__as_matrix(const ag_tensor *t, int64_t m, int64_t k) {
    int nd = t->ndim;
    bool found = false;
    int64_t row = 0, expect = 0;
    for (int d = nd - 2; d >= 0; d--) { /* leading dims must collapse into one row stride */
        if (t->shape[d] == 1) continue;
        if (!found) {
            found = true;
            row = t->stride[d];
            expect = row * t->shape[d];
        } else if (t->stride[d] != expect) {
            return (mat){NULL, false, 0};
        } else {
            expect *= t->shape[d];
        }
    }
    mat a;
    int64_t cs = nd > 0 ? t->stride[nd - 1] : 1;
    if (!ag__blas_mat_of(ag__ptr(t), found ? m : 1, k, row, cs, &a) || (a.trans && nd != 2))
        return (mat){NULL, false, 0};
    return a;
}

/* t as an m×k operand, copying it (without recording) only when BLAS cannot read it in place */
ag_tensor *ag__operand(ag_tensor *t, int64_t m, int64_t k, mat *out) {
    *out = ag__as_matrix(t, m, k);
    if (out->p) return t;
    t = ag__dense(t);
    *out = (mat){ag__ptr(t), false, max1(k)};
    return t;
}

/* C (m×n, row-major, rows ldc apart) += op(A) op(B), op(A) m×k, op(B) k×n; = when assign
 * (C's old contents never read, zeros for k = 0) */
static void gemm_acc(ag_dtype dt, mat a, mat b, int64_t m, int64_t n, int64_t k, char *c, int64_t ldc, bool assign) {
    if (m == 0 || n == 0 || (k == 0 && !assign)) return;
    double beta = assign ? 0.0 : 1.0;
    if (dt == AG_F32)
        ag__sgemm(a.trans, b.trans, m, n, k, 1.0f, (const float *)a.p, a.ld, (const float *)b.p, b.ld, (float)beta,
                  (float *)c, ldc);
    else
        ag__dgemm(a.trans, b.trans, m, n, k, 1.0, (const double *)a.p, a.ld, (const double *)b.p, b.ld, beta,
                  (double *)c, ldc);
}

/* y (m×n contiguous) = bias broadcast over rows (b strided by bs), or 0 without bias;
 * out[j·os] += Σ_i g[i, j] for g (m×n contiguous) */
#define T float
#define FN(name) name##_f32
#include "linear_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "linear_kernels.inc"
#undef T
#undef FN

/* y (m×out, contiguous) = x wᵀ + b: x m×in, w out×in, b (out) strided or NULL */
void ag__linear_fwd(ag_dtype dt, mat xm, mat wm, const ag_tensor *b, int64_t m, int64_t in, int64_t out, char *y) {
    if (dt == AG_F32 && (!b || out <= 1 || b->stride[0] == 1)) {
        mat wt = transposed(wm);
        ag__sgemm_bias(xm.trans, wt.trans, m, out, in, (const float *)xm.p, xm.ld, (const float *)wt.p, wt.ld,
                       b ? (const float *)ag__ptr(b) : NULL, (float *)y, max1(out));
    } else {
        (dt == AG_F32 ? fill_rows_f32 : fill_rows_f64)(y, m, out, b ? ag__ptr(b) : NULL, b ? b->stride[0] : 0);
        gemm_acc(dt, xm, transposed(wm), m, out, in, y, max1(out), false);
    }
}

/* dx += dy w (dx = dy w when dx_assign) ; dw += dyᵀ x ; db += Σ_rows dy (each skipped when NULL;
 * all contiguous); dy m×out */
void ag__linear_bwd(ag_dtype dt, const char *dy, mat xm, mat wm, int64_t m, int64_t in, int64_t out, char *dx,
                    bool dx_assign, char *dw, char *db) {
    mat g = {dy, false, max1(out)};
    if (dx) gemm_acc(dt, g, wm, m, in, out, dx, max1(in), dx_assign);
    if (dw) gemm_acc(dt, transposed(g), xm, out, in, m, dw, max1(in), false);
    if (db) (dt == AG_F32 ? add_col_sums_f32 : add_col_sums_f64)(dy, m, out, db, 1);
}

/* t's gradient buffer, NULL when t needs none */
char *ag__grad_ptr(ag_tensor *t) {
    ag_tensor *g = ag_grad_buffer(t);
    return g ? ag__ptr(g) : NULL;
}

static void linear_backward(ag_node *n) {
    ag_tensor *x = n->saved[0], *w = n->saved[1], *dy = n->out->grad;
    int64_t m = n->ctx.i[0], in = w->shape[1], out = w->shape[0];
    bool fresh; /* dx is written whole: a new buffer is assigned (beta = 0), never zeroed first */
    ag_tensor *dx = ag__grad_buffer_to_write(n->in[0], &fresh);
    ag__linear_bwd(dy->dtype, ag__ptr(dy), ag__as_matrix(x, m, in), ag__as_matrix(w, out, in), m, in, out,
                   dx ? ag__ptr(dx) : NULL, fresh, ag__grad_ptr(n->in[1]), ag__grad_ptr(n->in[2]));
}
/* x and w (saved as themselves unless copied); not the bias */
static const ag_op LINEAR = {"ag_linear", linear_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

/* input (..., in), weight (out, in), bias (out) or NULL, one float dtype */
static bool linear_check(const char *op, ag_tensor *x, ag_tensor *w, ag_tensor *b) {
    if (!ag__check_float(op, x) || !ag__check_float(op, w) || (b && !ag__check_float(op, b))) return false;
    char b1[128], b2[128], b3[128];
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        ag_error(op, "input %s, weight %s, bias %s: expected input (..., in), weight (out, in), bias (out)",
                 ag_shape_str(x, b1), ag_shape_str(w, b2), b ? ag_shape_str(b, b3) : "none");
        return false;
    }
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype)) {
        ag_error(op, "input %s %s, weight %s %s, bias %s: dtypes differ (convert with ag_to)", ag_shape_str(x, b1),
                 ag_dtype_name(x->dtype), ag_shape_str(w, b2), ag_dtype_name(w->dtype),
                 b ? ag_dtype_name(b->dtype) : "none");
        return false;
    }
    return true;
}

ag_tensor *ag_linear(ag_tensor *x, ag_tensor *w, ag_tensor *b) {
    if (!linear_check("ag_linear", x, w, b)) return NULL;
    ag_dtype dt = x->dtype;
    int64_t in = w->shape[1], out = w->shape[0], m = ag__shape_numel(x->ndim - 1, x->shape);
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    ag_tensor *y = ag__new(dt, x->ndim, shape);
    mat xm, wm;
    ag_tensor *xs = ag__operand(x, m, in, &xm), *ws = ag__operand(w, out, in, &wm);
    ag__linear_fwd(dt, xm, wm, b, m, in, out, ag__ptr(y));
    ag_node *n = ag_finish(&LINEAR, y, 3, (ag_tensor *[]){x, w, b});
    if (n) {
        n->saved[0] = xs;
        n->saved[1] = ws;
        n->ctx.i[0] = m;
    }
    return y;
}

/* ---- ag_linear on some rows of a padded batch ---- */

/* The packed sides live in the arena above a mark and are given back right after: only the
 * padded sides are activations. In backward the gradient buffers are fetched before the mark (a
 * leaf's first buffer comes from the arena too). */
static char *temp(size_t bytes) {
    return ag__alloc("ag__linear_rows", ag_arena_current(), bytes ? bytes : 1, "the packed rows");
}

/* what backward reads beyond the node: the rows (either may be NULL) */
typedef struct { const int64_t *in_rows, *out_rows; } rows_pair;

static void linear_rows_backward(ag_node *n) {
    ag_tensor *x = n->saved[0], *w = n->saved[1], *dy = n->out->grad;
    const rows_pair *rp = n->extra;
    int64_t m = n->ctx.i[0], in = w->shape[1], out = w->shape[0];
    ag_dtype dt = dy->dtype;
    size_t es = ag_dtype_size(dt);
    bool fresh = false; /* dx written whole (no in_rows, a new buffer): assigned, never zeroed first */
    ag_tensor *dx = rp->in_rows ? ag_grad_buffer(n->in[0]) : ag__grad_buffer_to_write(n->in[0], &fresh);
    char *dw = ag__grad_ptr(n->in[1]), *db = ag__grad_ptr(n->in[2]);
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    const char *g = ag__ptr(dy);
    mat xm = rp->in_rows ? (mat){NULL, false, 0} : ag__as_matrix(x, m, in); /* with in_rows: below */
    if (rp->out_rows) { /* the packed dy: dy's rows */
        char *gp = temp((size_t)(m * out) * es);
        if (!gp) return; /* reported */
        ag__rows_copy(gp, g, rp->out_rows, m, (size_t)out * es, false);
        g = gp;
    }
    char *dxp = dx ? ag__ptr(dx) : NULL;
    if (rp->in_rows) { /* the packed x again from the padded one; dx through a packed buffer */
        char *xp = temp((size_t)(m * in) * es);
        dxp = dx && xp ? temp((size_t)(m * in) * es) : NULL;
        if (!xp || (dx && !dxp)) return; /* reported */
        ag__rows_copy(xp, ag__ptr(x), rp->in_rows, m, (size_t)in * es, false);
        xm = (mat){xp, false, max1(in)};
    }
    ag__linear_bwd(dt, g, xm, ag__as_matrix(w, out, in), m, in, out, dxp, fresh || rp->in_rows, dw, db);
    if (dx && rp->in_rows) ag__rows_add(dt, ag__ptr(dx), dxp, rp->in_rows, m, in, true);
    ag_arena_rewind(ag_arena_current(), mark);
}
static const ag_op LINEAR_ROWS = {"ag__linear_rows", linear_rows_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

ag_tensor *ag__linear_rows(ag_tensor *x, ag_tensor *w, ag_tensor *b, int64_t m, const int64_t *in_rows,
                           const int64_t *out_rows, int ndim, const int64_t *shape) {
    const char *op = "ag__linear_rows";
    if (!linear_check(op, x, w, b)) return NULL;
    char b1[128];
    int64_t in = w->shape[1], out = w->shape[0], R = 1;
    for (int d = 0; d < ndim - 1; d++) R *= shape[d];
    if (m < 0 || (!in_rows && ag__shape_numel(x->ndim - 1, x->shape) != m) ||
        (out_rows && (ndim < 1 || shape[ndim - 1] != out))) {
        ag_error(op, "input %s, %lld rows: expected (%lld, %lld) rows in and an output (..., %lld)",
                 ag_shape_str(x, b1), (long long)m, (long long)m, (long long)in, (long long)out);
        return NULL;
    }
    if ((in_rows && !ag__check_rows(op, in_rows, m, ag__shape_numel(x->ndim - 1, x->shape))) ||
        (out_rows && !ag__check_rows(op, out_rows, m, R)))
        return NULL;
    ag_dtype dt = x->dtype;
    size_t es = ag_dtype_size(dt);
    mat xm, wm;
    ag_tensor *xs = in_rows ? ag__dense(x) : ag__operand(x, m, in, &xm), *ws = ag__operand(w, out, in, &wm);
    ag_tensor *y = out_rows ? ag__new_op(op, dt, ndim, shape) : ag__new_op(op, dt, 2, (int64_t[]){m, out});
    if (!xs || !ws || !y) return NULL;
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    if (in_rows) {
        char *xp = temp((size_t)(m * in) * es);
        if (!xp) return NULL;
        ag__rows_copy(xp, ag__ptr(xs), in_rows, m, (size_t)in * es, false);
        xm = (mat){xp, false, max1(in)};
    }
    char *yp = out_rows ? temp((size_t)(m * out) * es) : ag__ptr(y);
    if (!yp) return NULL;
    ag__linear_fwd(dt, xm, wm, b, m, in, out, yp);
    bool zeroed = !out_rows || ag__zero_other_rows(ag__ptr(y), out_rows, m, R, (size_t)out * es);
    if (out_rows && zeroed) ag__rows_copy(ag__ptr(y), yp, out_rows, m, (size_t)out * es, true);
    ag_arena_rewind(ag_arena_current(), mark);
    if (!zeroed) return NULL;
    ag_node *n = ag_finish(&LINEAR_ROWS, y, 3, (ag_tensor *[]){x, w, b});
    if (n) {
        rows_pair *rp = (rows_pair *)temp(sizeof *rp);
        if (!rp) return NULL;
        *rp = (rows_pair){in_rows, out_rows};
        n->saved[0] = xs;
        n->saved[1] = ws;
        n->ctx.i[0] = m;
        n->extra = rp;
    }
    return y;
}

ag_linear_module ag_linear_new(ag_params *p, const char *prefix, int64_t in_features, int64_t out_features, bool bias,
                          ag_rng *rng) {
    ag_linear_module m = {NULL, NULL, in_features, out_features};
    char name[512];
    if (!p || in_features < 0 || out_features < 0) {
        ag_error("ag_linear_new", "'%s': needs a parameter set and in_features %lld, out_features %lld >= 0",
                 prefix ? prefix : "", (long long)in_features, (long long)out_features);
        return m;
    }
    /* kaiming_uniform_(a=√5): gain √(2/(1+5)), bound √3·gain/√fan_in = 1/√fan_in; the bias uses
     * the same bound. fan_in 0 leaves zeros (PyTorch skips zero-element init). */
    double bound = in_features > 0 ? 1.0 / sqrt((double)in_features) : 0.0;
    ag_tensor *w = ag_params_add(p, ag__param_name(name, sizeof name, "ag_linear_new", prefix, "weight"),
                                 AG_SHAPE(out_features, in_features));
    if (!w) return m;
    ag_uniform_(rng, w, -bound, bound);
    if (bias) {
        ag_tensor *b = ag_params_add(p, ag__param_name(name, sizeof name, "ag_linear_new", prefix, "bias"),
                                     AG_SHAPE(out_features));
        if (!b) return m;
        ag_uniform_(rng, b, -bound, bound);
        m.bias = b;
    }
    m.weight = w;
    return m;
}

ag_tensor *ag_linear_forward(const ag_linear_module *m, ag_tensor *x) {
    if (!m || !m->weight) {
        ag_error("ag_linear_forward", "module is NULL or was not created (ag_linear_new failed?)");
        return NULL;
    }
    return ag_linear(x, m->weight, m->bias);
}
