/* Linear, Embedding, LayerNorm, Dropout and positional encodings: the fused ops and the
 * modules that own their parameters. Reductions accumulate in double with a fixed order per
 * output element (SIMD reductions fix theirs at compile time), so results do not depend on the
 * OpenMP thread count. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"

/* columns handled by one thread in column reductions (a block's partial sums stay in registers/L1) */
#define COLS 64

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* ==== Linear ================================================================================ */

/* An m×k operand for row-major BLAS (op.h): stored as is (trans false, rows ld apart) or
 * stored as its k×m transpose (trans true, rows of the transpose ld apart). */
typedef ag__blas_mat mat;

static mat transposed(mat a) {
    a.trans = !a.trans;
    return a;
}

/* t (..., k) read in place as an m×k matrix when its strides allow (contiguous, row-sliced, or a
 * 2-d transpose); p is NULL when it must be copied first. */
static mat as_matrix(const ag_tensor *t, int64_t m, int64_t k) {
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
static ag_tensor *operand(ag_tensor *t, int64_t m, int64_t k, mat *out) {
    *out = as_matrix(t, m, k);
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
#define ROW_KERNELS(T, S, D)                                                                                      \
    static void fill_rows_##S(char *y_, int64_t m, int64_t n, const char *b_, int64_t bs) {                       \
        T *y = (T *)y_;                                                                                           \
        const T *b = (const T *)b_;                                                                               \
        int64_t par_work = m * n;                                                                                 \
        AG_PAR_FOR                                                                                                   \
        for (int64_t i = 0; i < m; i++)                                                                           \
            for (int64_t j = 0; j < n; j++) y[i * n + j] = b ? b[j * bs] : 0;                                     \
    }                                                                                                             \
    static void add_col_sums_##S(const char *g_, int64_t m, int64_t n, char *out_, int64_t os) {                  \
        const T *g = (const T *)g_;                                                                               \
        T *out = (T *)out_;                                                                                       \
        int64_t par_work = m * n;                                                                                 \
        AG_PAR_FOR                                                                                                   \
        for (int64_t j0 = 0; j0 < n; j0 += COLS) {                                                                \
            int64_t nj = n - j0 < COLS ? n - j0 : COLS;                                                           \
            double acc[COLS] = {0};                                                                               \
            if (nj == COLS) /* a constant bound keeps acc in registers; the same sums */                         \
                for (int64_t i = 0; i < m; i++)                                                                   \
                    for (int64_t j = 0; j < COLS; j++) acc[j] += g[i * n + j0 + j];                               \
            else                                                                                                  \
                for (int64_t i = 0; i < m; i++)                                                                   \
                    for (int64_t j = 0; j < nj; j++) acc[j] += g[i * n + j0 + j];                                 \
            for (int64_t j = 0; j < nj; j++) out[(j0 + j) * os] += (T)acc[j];                                     \
        }                                                                                                         \
    }
AG_FLOAT_TYPES(ROW_KERNELS)

/* y (m×out, contiguous) = x wᵀ + b: x m×in, w out×in, b (out) strided or NULL */
static void linear_fwd(ag_dtype dt, mat xm, mat wm, const ag_tensor *b, int64_t m, int64_t in, int64_t out, char *y) {
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
static void linear_bwd(ag_dtype dt, const char *dy, mat xm, mat wm, int64_t m, int64_t in, int64_t out, char *dx,
                       bool dx_assign, char *dw, char *db) {
    mat g = {dy, false, max1(out)};
    if (dx) gemm_acc(dt, g, wm, m, in, out, dx, max1(in), dx_assign);
    if (dw) gemm_acc(dt, transposed(g), xm, out, in, m, dw, max1(in), false);
    if (db) (dt == AG_F32 ? add_col_sums_f32 : add_col_sums_f64)(dy, m, out, db, 1);
}

/* t's gradient buffer, NULL when t needs none */
static char *grad_ptr(ag_tensor *t) {
    ag_tensor *g = ag_grad_buffer(t);
    return g ? ag__ptr(g) : NULL;
}

static void linear_backward(ag_node *n) {
    ag_tensor *x = n->saved[0], *w = n->saved[1], *dy = n->out->grad;
    int64_t m = n->ctx.i[0], in = w->shape[1], out = w->shape[0];
    bool fresh; /* dx is written whole: a new buffer is assigned (beta = 0), never zeroed first */
    ag_tensor *dx = ag__grad_buffer_to_write(n->in[0], &fresh);
    linear_bwd(dy->dtype, ag__ptr(dy), as_matrix(x, m, in), as_matrix(w, out, in), m, in, out, dx ? ag__ptr(dx) : NULL,
               fresh, grad_ptr(n->in[1]), grad_ptr(n->in[2]));
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
    ag_tensor *xs = operand(x, m, in, &xm), *ws = operand(w, out, in, &wm);
    linear_fwd(dt, xm, wm, b, m, in, out, ag__ptr(y));
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
static char *temp(size_t bytes) { return ag_arena_alloc(ag_arena_current(), bytes ? bytes : 1); }

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
    char *dw = grad_ptr(n->in[1]), *db = grad_ptr(n->in[2]);
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    const char *g = ag__ptr(dy);
    mat xm = rp->in_rows ? (mat){NULL, false, 0} : as_matrix(x, m, in); /* with in_rows: below */
    if (rp->out_rows) { /* the packed dy: dy's rows */
        char *gp = temp((size_t)(m * out) * es);
        ag__rows_copy(gp, g, rp->out_rows, m, (size_t)out * es, false);
        g = gp;
    }
    char *dxp = dx ? ag__ptr(dx) : NULL;
    if (rp->in_rows) { /* the packed x again from the padded one; dx through a packed buffer */
        char *xp = temp((size_t)(m * in) * es);
        ag__rows_copy(xp, ag__ptr(x), rp->in_rows, m, (size_t)in * es, false);
        xm = (mat){xp, false, max1(in)};
        dxp = dx ? temp((size_t)(m * in) * es) : NULL;
    }
    linear_bwd(dt, g, xm, as_matrix(w, out, in), m, in, out, dxp, fresh || rp->in_rows, dw, db);
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
    ag_tensor *xs = in_rows ? ag__dense(x) : operand(x, m, in, &xm), *ws = operand(w, out, in, &wm);
    ag_tensor *y = out_rows ? ag__new(dt, ndim, shape) : ag__new(dt, 2, (int64_t[]){m, out});
    ag_arena_mark mark = ag_arena_get_mark(ag_arena_current());
    if (in_rows) {
        char *xp = temp((size_t)(m * in) * es);
        ag__rows_copy(xp, ag__ptr(xs), in_rows, m, (size_t)in * es, false);
        xm = (mat){xp, false, max1(in)};
    }
    char *yp = out_rows ? temp((size_t)(m * out) * es) : ag__ptr(y);
    linear_fwd(dt, xm, wm, b, m, in, out, yp);
    if (out_rows) {
        ag__zero_other_rows(ag__ptr(y), out_rows, m, R, (size_t)out * es);
        ag__rows_copy(ag__ptr(y), yp, out_rows, m, (size_t)out * es, true);
    }
    ag_arena_rewind(ag_arena_current(), mark);
    ag_node *n = ag_finish(&LINEAR_ROWS, y, 3, (ag_tensor *[]){x, w, b});
    if (n) {
        rows_pair *rp = ag_arena_alloc(ag_arena_current(), sizeof *rp);
        *rp = (rows_pair){in_rows, out_rows};
        n->saved[0] = xs;
        n->saved[1] = ws;
        n->ctx.i[0] = m;
        n->extra = rp;
    }
    return y;
}

ag_linear_t ag_linear_new(ag_params *p, const char *prefix, int64_t in_features, int64_t out_features, bool bias,
                          ag_rng *rng) {
    ag_linear_t m = {NULL, NULL, in_features, out_features};
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

ag_tensor *ag_linear_forward(const ag_linear_t *m, ag_tensor *x) {
    if (!m || !m->weight) {
        ag_error("ag_linear_forward", "module is NULL or was not created (ag_linear_new failed?)");
        return NULL;
    }
    return ag_linear(x, m->weight, m->bias);
}

/* ==== Embedding ============================================================================= */

/* dw[id] += dy row for each id except padding; parallel over column blocks so each element of
 * dw is summed by one thread in id order */
#define EMBED_KERNEL(T, S, D)                                                                                     \
    static void embed_scatter_##S(char *dw_, const char *dy_, const int64_t *ids, int64_t n, int64_t e,         \
                                  int64_t pad) {                                                                  \
        T *dw = (T *)dw_;                                                                                         \
        const T *dy = (const T *)dy_;                                                                             \
        int64_t par_work = n * e;                                                                                 \
        AG_PAR_FOR                                                                                                   \
        for (int64_t j0 = 0; j0 < e; j0 += COLS) {                                                                \
            int64_t nj = e - j0 < COLS ? e - j0 : COLS;                                                           \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                if (ids[i] == pad) continue;                                                                      \
                T *row = dw + ids[i] * e + j0;                                                                    \
                const T *g = dy + i * e + j0;                                                                     \
                for (int64_t j = 0; j < nj; j++) row[j] += g[j];                                                  \
            }                                                                                                     \
        }                                                                                                         \
    }
AG_FLOAT_TYPES(EMBED_KERNEL)

static void embedding_backward(ag_node *n) {
    ag_tensor *dw = ag_grad_buffer(n->in[0]), *ids = n->saved[0], *dy = n->out->grad;
    if (!dw) return;
    (dw->dtype == AG_F32 ? embed_scatter_f32 : embed_scatter_f64)(
        ag__ptr(dw), ag__ptr(dy), (const int64_t *)ag__ptr(ids), ag_numel(ids), dw->shape[1], n->ctx.i[0]);
}
static const ag_op EMBEDDING = {"ag_embedding", embedding_backward, AG_SAVES_NONE}; /* its own ids */

ag_tensor *ag_embedding(ag_tensor *weight, ag_tensor *ids, int64_t padding_idx) {
    const char *op = "ag_embedding";
    if (!ag__check_float(op, weight) || !ag__check_not_null(op, ids)) return NULL;
    char b1[128], b2[128];
    if (weight->ndim != 2 || (ids->dtype != AG_I64 && ids->dtype != AG_I32)) {
        ag_error(op, "weight %s %s, ids %s %s: expected weight (num, dim) and integer ids", ag_shape_str(weight, b1),
                 ag_dtype_name(weight->dtype), ag_shape_str(ids, b2), ag_dtype_name(ids->dtype));
        return NULL;
    }
    if (padding_idx == -1) return ag_embedding_lookup(weight, ids);
    if (padding_idx < 0 || padding_idx >= weight->shape[0]) {
        ag_error(op, "padding_idx %lld out of range for weight %s (0..%lld, or -1 for none)", (long long)padding_idx,
                 ag_shape_str(weight, b1), (long long)weight->shape[0] - 1);
        return NULL;
    }
    bool prev = ag_set_grad_enabled(false);
    ag_tensor *y = ag_embedding_lookup(weight, ids);
    ag_set_grad_enabled(prev);
    if (!y) return NULL;
    ag_tensor *idx = ag__new(AG_I64, ids->ndim, ids->shape);
    ag__copy(idx, ids);
    ag_node *n = ag_finish(&EMBEDDING, y, 1, &weight);
    if (n) {
        n->saved[0] = idx;
        n->ctx.i[0] = padding_idx;
    }
    return y;
}

ag_embedding_t ag_embedding_new(ag_params *p, const char *prefix, int64_t num_embeddings, int64_t embedding_dim,
                                int64_t padding_idx, ag_rng *rng) {
    ag_embedding_t m = {NULL, num_embeddings, embedding_dim, padding_idx};
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

ag_tensor *ag_embedding_forward(const ag_embedding_t *m, ag_tensor *ids) {
    if (!m || !m->weight) {
        ag_error("ag_embedding_forward", "module is NULL or was not created (ag_embedding_new failed?)");
        return NULL;
    }
    return ag_embedding(m->weight, ids, m->padding_idx);
}

/* ==== LayerNorm ============================================================================= */

/* x, y, dy, dx: (m, d) contiguous; w, b: (d) contiguous, or NULL; mean, rstd: (m). A row's
 * loops are always-inline helpers called with w (and b) NULL or not, so each variant is
 * compiled with unit strides and no test in the loop, and vectorises. */
#define LN_KERNELS(T, S, D)                                                                                       \
    static inline __attribute__((always_inline)) void ln_row_fwd_##S(const T *xr, int64_t d, const T *w,        \
                                                                      const T *b, double eps, T *yr, double *mean,  \
                                                                      double *rstd) {                               \
        double s = 0, v = 0;                                                                                      \
        _Pragma("omp simd reduction(+ : s)") for (int64_t j = 0; j < d; j++) s += xr[j];                          \
        double mu = s / (double)d;                                                                                \
        _Pragma("omp simd reduction(+ : v)") for (int64_t j = 0; j < d; j++) v +=                                 \
            ((double)xr[j] - mu) * ((double)xr[j] - mu);                                                          \
        double r = 1.0 / sqrt(v / (double)d + eps);                                                               \
        *mean = mu;                                                                                               \
        *rstd = r;                                                                                                \
        for (int64_t j = 0; j < d; j++) {                                                                         \
            double h = ((double)xr[j] - mu) * r;                                                                  \
            if (w) h *= w[j];                                                                                     \
            if (b) h += b[j];                                                                                     \
            yr[j] = (T)h;                                                                                         \
        }                                                                                                         \
    }                                                                                                             \
    static void ln_forward_##S(const char *x_, int64_t m, int64_t d, const char *w_, const char *b_, double eps,  \
                               char *y_, double *mean, double *rstd) {                                            \
        const T *x = (const T *)x_, *w = (const T *)w_, *b = (const T *)b_;                                       \
        T *y = (T *)y_;                                                                                           \
        int64_t par_work = m * d;                                                                                 \
        AG_PAR_FOR                                                                                                   \
        for (int64_t i = 0; i < m; i++) {                                                                         \
            const T *xr = x + i * d;                                                                              \
            T *yr = y + i * d;                                                                                    \
            if (w && b) ln_row_fwd_##S(xr, d, w, b, eps, yr, mean + i, rstd + i);                                 \
            else if (w) ln_row_fwd_##S(xr, d, w, NULL, eps, yr, mean + i, rstd + i);                              \
            else if (b) ln_row_fwd_##S(xr, d, NULL, b, eps, yr, mean + i, rstd + i);                              \
            else ln_row_fwd_##S(xr, d, NULL, NULL, eps, yr, mean + i, rstd + i);                                  \
        }                                                                                                         \
    }                                                                                                             \
    /* a row of dx += rstd·(g - mean(g) - x̂·mean(g·x̂)) with g = dy·w (dx = ... unless acc) */                    \
    static inline __attribute__((always_inline)) void ln_row_bwd_##S(const T *xr, const T *gr, int64_t d,       \
                                                                      const T *w, double mu, double r, T *dxr,      \
                                                                      bool acc) {                                   \
        double a = 0, c = 0;                                                                                      \
        _Pragma("omp simd reduction(+ : a, c)") for (int64_t j = 0; j < d; j++) {                                 \
            double g = w ? (double)gr[j] * w[j] : gr[j];                                                          \
            a += g;                                                                                               \
            c += g * ((double)xr[j] - mu) * r;                                                                    \
        }                                                                                                         \
        a /= (double)d;                                                                                           \
        c /= (double)d;                                                                                           \
        for (int64_t j = 0; j < d; j++) {                                                                         \
            double g = w ? (double)gr[j] * w[j] : gr[j];                                                          \
            double xh = ((double)xr[j] - mu) * r;                                                                 \
            T v = (T)(r * (g - a - xh * c));                                                                      \
            dxr[j] = acc ? dxr[j] + v : v;                                                                        \
        }                                                                                                         \
    }                                                                                                             \
    /* dx += the rows above (dx = when not acc); dw += Σ_rows dy·x̂; db += Σ_rows dy */                            \
    static void ln_backward_##S(const char *x_, const char *dy_, int64_t m, int64_t d, const char *w_,          \
                                const double *mean, const double *rstd, char *dx_, bool acc, char *dw_,           \
                                char *db_) {                                                                      \
        const T *x = (const T *)x_, *dy = (const T *)dy_, *w = (const T *)w_;                                     \
        T *dx = (T *)dx_, *dw = (T *)dw_, *db = (T *)db_;                                                         \
        if (dx) {                                                                                                 \
            int64_t par_work = m * d;                                                                             \
            AG_PAR_FOR                                                                                               \
            for (int64_t i = 0; i < m; i++) {                                                                     \
                const T *xr = x + i * d, *gr = dy + i * d;                                                        \
                if (w && acc) ln_row_bwd_##S(xr, gr, d, w, mean[i], rstd[i], dx + i * d, true);                   \
                else if (w) ln_row_bwd_##S(xr, gr, d, w, mean[i], rstd[i], dx + i * d, false);                    \
                else if (acc) ln_row_bwd_##S(xr, gr, d, NULL, mean[i], rstd[i], dx + i * d, true);                \
                else ln_row_bwd_##S(xr, gr, d, NULL, mean[i], rstd[i], dx + i * d, false);                        \
            }                                                                                                     \
        }                                                                                                         \
        if (!dw && !db) return;                                                                                   \
        int64_t par_work = m * d;                                                                                 \
        AG_PAR_FOR                                                                                                   \
        for (int64_t j0 = 0; j0 < d; j0 += COLS) {                                                                \
            int64_t nj = d - j0 < COLS ? d - j0 : COLS;                                                           \
            double aw[COLS] = {0}, ab[COLS] = {0};                                                                \
            for (int64_t i = 0; i < m; i++)                                                                       \
                for (int64_t j = 0; j < nj; j++) {                                                                \
                    double g = dy[i * d + j0 + j];                                                                \
                    aw[j] += g * ((double)x[i * d + j0 + j] - mean[i]) * rstd[i];                                 \
                    ab[j] += g;                                                                                   \
                }                                                                                                 \
            for (int64_t j = 0; j < nj; j++) {                                                                    \
                if (dw) dw[j0 + j] += (T)aw[j];                                                                   \
                if (db) db[j0 + j] += (T)ab[j];                                                                   \
            }                                                                                                     \
        }                                                                                                         \
    }
AG_FLOAT_TYPES(LN_KERNELS)

static void layer_norm_backward(ag_node *n) {
    ag_tensor *x = n->saved[0], *w = n->in[1], *dy = n->out->grad;
    int64_t d = x->shape[x->ndim - 1], m = d ? ag_numel(x) / d : 0;
    const double *mean = (const double *)ag__ptr(n->saved[1]), *rstd = (const double *)ag__ptr(n->saved[2]);
    bool fresh; /* every element of x's gradient is written: a new buffer is assigned, not added to */
    ag_tensor *gx = ag__grad_buffer_to_write(n->in[0], &fresh);
    char *dx = gx ? ag__ptr(gx) : NULL, *dw = grad_ptr(w), *db = grad_ptr(n->in[2]);
    (x->dtype == AG_F32 ? ln_backward_f32 : ln_backward_f64)(ag__ptr(x), ag__ptr(dy), m, d,
                                                               w ? ag__ptr(ag__dense(w)) : NULL, mean, rstd, dx, !fresh,
                                                               dw, db);
}
static const ag_op LAYER_NORM = {"ag_layer_norm", layer_norm_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *w, ag_tensor *b, double eps) {
    const char *op = "ag_layer_norm";
    if (!ag__check_float(op, x) || (w && !ag__check_float(op, w)) || (b && !ag__check_float(op, b))) return NULL;
    char b1[128], b2[128], b3[128];
    int64_t d = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || (w && (w->ndim != 1 || w->shape[0] != d)) || (b && (b->ndim != 1 || b->shape[0] != d))) {
        ag_error(op, "input %s, weight %s, bias %s: expected input (..., D) with weight and bias (D)",
                 ag_shape_str(x, b1), w ? ag_shape_str(w, b2) : "none", b ? ag_shape_str(b, b3) : "none");
        return NULL;
    }
    if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype) || !(eps >= 0)) {
        ag_error(op, "input %s %s, weight %s, bias %s, eps %g: dtypes must match and eps be >= 0",
                 ag_shape_str(x, b1), ag_dtype_name(x->dtype), w ? ag_dtype_name(w->dtype) : "none",
                 b ? ag_dtype_name(b->dtype) : "none", eps);
        return NULL;
    }
    int64_t m = d ? ag_numel(x) / d : 0;
    ag_tensor *xc = ag__dense(x), *y = ag__new(x->dtype, x->ndim, x->shape);
    ag_tensor *mean = ag__new(AG_F64, 1, &m), *rstd = ag__new(AG_F64, 1, &m);
    (x->dtype == AG_F32 ? ln_forward_f32 : ln_forward_f64)(ag__ptr(xc), m, d, w ? ag__ptr(ag__dense(w)) : NULL,
                                                             b ? ag__ptr(ag__dense(b)) : NULL, eps, ag__ptr(y),
                                                             (double *)ag__ptr(mean), (double *)ag__ptr(rstd));
    ag_node *n = ag_finish(&LAYER_NORM, y, 3, (ag_tensor *[]){x, w, b});
    if (n) {
        n->saved[0] = xc;
        n->saved[1] = mean;
        n->saved[2] = rstd;
    }
    return y;
}

ag_layer_norm_t ag_layer_norm_new(ag_params *p, const char *prefix, int64_t normalized_shape, double eps,
                                  bool elementwise_affine) {
    ag_layer_norm_t m = {NULL, NULL, normalized_shape, eps};
    char name[512];
    if (!p || normalized_shape < 0 || !(eps >= 0)) {
        ag_error("ag_layer_norm_new", "'%s': needs a parameter set, normalized_shape %lld >= 0 and eps %g >= 0",
                 prefix ? prefix : "", (long long)normalized_shape, eps);
        return m;
    }
    if (!elementwise_affine) return m;
    m.weight = ag_params_add(p, ag__param_name(name, sizeof name, "ag_layer_norm_new", prefix, "weight"),
                             AG_SHAPE(normalized_shape));
    m.bias = ag_params_add(p, ag__param_name(name, sizeof name, "ag_layer_norm_new", prefix, "bias"),
                           AG_SHAPE(normalized_shape));
    if (m.weight) ag_fill_(m.weight, 1.0);
    if (m.bias) ag_fill_(m.bias, 0.0);
    return m;
}

ag_tensor *ag_layer_norm_forward(const ag_layer_norm_t *m, ag_tensor *x) {
    if (!m) {
        ag_error("ag_layer_norm_forward", "module is NULL");
        return NULL;
    }
    return ag_layer_norm(x, m->weight, m->bias, m->eps);
}

/* ==== Dropout =============================================================================== */

/* masks drawn per chunk: an element's word of the stream depends only on the mask's counter and
 * its index, so the chunks can be spread over threads and the mask is the same for any split (a
 * multiple of 8: a chunk owns whole bytes of a bit mask) */
#define DROP_CHUNK 2048

/* y = keep ? x·scale : 0, or with relu y = keep && x > 0 ? x·scale : 0 (!(x <= 0): NaN passes,
 * as through ag_relu), for one chunk of n; y may be x. dx += keep ? g·scale : 0, keep one bit per
 * element; with relu keep is NULL and y decides: dx += y ≠ 0 ? g·scale : 0 (scale ≥ 1, so a kept
 * positive x never rounds to 0). */
/* keep[i] = bit e0+i of bits (0/1 bytes), for i < n: eight at a time by a multiply that spreads a
 * byte's bits over the bytes of a word */
static void bits_to_bytes(const uint8_t *bits, int64_t e0, int64_t n, uint8_t *keep) {
    int64_t i = 0;
    for (; i < n && (e0 + i) % 8; i++) keep[i] = bits[(e0 + i) >> 3] >> ((e0 + i) & 7) & 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ /* byte q of w is keep[i + q] */
    for (; i + 8 <= n; i += 8) {
        uint64_t w = bits[(e0 + i) >> 3] * 0x0101010101010101ull & 0x8040201008040201ull; /* bit q in byte q */
        w = (w + 0x7F7F7F7F7F7F7F7Full) >> 7 & 0x0101010101010101ull; /* a nonzero byte carries into bit 7 */
        memcpy(keep + i, &w, 8);
    }
#endif
    for (; i < n; i++) keep[i] = bits[(e0 + i) >> 3] >> ((e0 + i) & 7) & 1;
}

/* Both sides of each select are computed and the select is branch-free, so the loops vectorise. */
#define DROPOUT_KERNELS(T, S, D)                                                                                  \
    static void drop_fwd_##S(const uint8_t *keep, const char *x_, char *y_, int64_t n, T sc, bool relu) {         \
        const T *x = (const T *)x_;                                                                               \
        T *y = (T *)y_;                                                                                           \
        if (relu)                                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                T v = x[i] * sc;                                                                                  \
                y[i] = (keep[i] != 0) & !(x[i] <= 0) ? v : 0;                                                     \
            }                                                                                                     \
        else                                                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                T v = x[i] * sc;                                                                                  \
                y[i] = keep[i] != 0 ? v : 0;                                                                      \
            }                                                                                                     \
    }                                                                                                             \
    /* dx += (kept)·g·scale, or dx = when not acc */                                                              \
    static void drop_bwd_##S(const uint8_t *bits, const char *y_, const char *g_, char *dx_, int64_t n, T sc,     \
                             bool acc) {                                                                          \
        const T *g = (const T *)g_, *y = (const T *)y_;                                                           \
        T *dx = (T *)dx_;                                                                                         \
        int64_t par_work = n;                                                                                     \
        if (bits) {                                                                                               \
            AG_PAR_FOR                                                                                            \
            for (int64_t c = 0; c < n; c += DROP_CHUNK) {                                                         \
                uint8_t k[DROP_CHUNK];                                                                            \
                int64_t m = n - c < DROP_CHUNK ? n - c : DROP_CHUNK;                                              \
                bits_to_bytes(bits, c, m, k);                                                                     \
                for (int64_t i = 0; i < m; i++) {                                                                 \
                    T v = g[c + i] * sc, kept = k[i] != 0 ? v : 0;                                                \
                    dx[c + i] = acc ? dx[c + i] + kept : kept;                                                    \
                }                                                                                                 \
            }                                                                                                     \
        } else if (dx_ == g_) { /* dx = (y ≠ 0)·g·scale in place of g */                                          \
            AG_PAR_FOR                                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                T v = dx[i] * sc;                                                                                 \
                dx[i] = y[i] != 0 ? v : 0;                                                                        \
            }                                                                                                     \
        } else {                                                                                                  \
            AG_PAR_FOR                                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                                     \
                T v = g[i] * sc, kept = y[i] != 0 ? v : 0;                                                        \
                dx[i] = acc ? dx[i] + kept : kept;                                                                \
            }                                                                                                     \
        }                                                                                                         \
    }
AG_FLOAT_TYPES(DROPOUT_KERNELS)

/* y = dropout(x) (relu first when asked) for elements e0 .. e0+n-1 of a mask, x and y (which may
 * be x) contiguous. Element e is kept when element e of the mask at counter base of the generator
 * with this seed is a uniform below 1-p (the caller advances the counter past the mask once);
 * with bits the mask is stored one bit per element. replay reads such a mask instead of drawing.
 * p == 1 keeps nothing and draws nothing; p == 0 keeps everything. Chunks are aligned to
 * DROP_CHUNK elements of the whole mask, so each owns whole bytes of bits. */
static void drop_apply(ag_dtype dt, const char *x, char *y, int64_t n, int64_t e0, double p, bool relu,
                       uint64_t seed, uint64_t base, uint8_t *bits, bool replay) {
    double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    uint64_t below = ag__u32_count_below(1.0 - p); /* keep: the uniform < 1 - p */
    bool draw = p > 0 && p < 1 && !replay;
    size_t es = ag_dtype_size(dt);
    int64_t first = e0 / DROP_CHUNK, end = (e0 + n + DROP_CHUNK - 1) / DROP_CHUNK, par_work = n;
    AG_PAR_FOR
    for (int64_t c = first; c < end; c++) {
        uint8_t k[DROP_CHUNK];
        int64_t lo = c * DROP_CHUNK > e0 ? c * DROP_CHUNK : e0, hi = (c + 1) * DROP_CHUNK, m;
        if (hi > e0 + n) hi = e0 + n;
        m = hi - lo;
        bool packed = false;
        if (draw) { /* straight into the bits when the chunk starts a byte */
            packed = bits && lo % 8 == 0;
            ag__rng_keep(seed, base, lo, m, below, false, k, packed ? bits + lo / 8 : NULL);
        } else if (replay && p > 0) {
            bits_to_bytes(bits, lo, m, k);
        } else {
            memset(k, p < 1, (size_t)m);
        }
        if (bits && !replay && !packed)
            for (int64_t i = 0, e = lo; i < m; i++, e++)
                bits[e >> 3] = (uint8_t)((bits[e >> 3] & ~(1u << (e & 7))) | (unsigned)k[i] << (e & 7));
        size_t off = (size_t)(lo - e0) * es;
        if (dt == AG_F32) drop_fwd_f32(k, x + off, y + off, m, (float)scale, relu);
        else drop_fwd_f64(k, x + off, y + off, m, scale, relu);
    }
}

/* the generator's counter moves past a mask of n elements (none when nothing is drawn) */
static void drop_advance(ag_rng *r, int64_t n, double p) {
    if (p > 0 && p < 1) r->counter += ag__mask_draws(n);
}

/* saved[0]: the keep mask (bits), or NULL for the relu form, which reads its output instead */
static void dropout_backward(ag_node *n) {
    bool fresh; /* every element of x's gradient is written */
    ag_tensor *dx = ag__grad_buffer_to_write(n->in[0], &fresh), *g = n->out->grad;
    if (!dx) return;
    const uint8_t *bits = n->saved[0] ? (const uint8_t *)ag__ptr(n->saved[0]) : NULL;
    const char *y = ag__ptr(n->out);
    if (g->dtype == AG_F32) drop_bwd_f32(bits, y, ag__ptr(g), ag__ptr(dx), ag_numel(g), (float)n->ctx.d[0], !fresh);
    else drop_bwd_f64(bits, y, ag__ptr(g), ag__ptr(dx), ag_numel(g), n->ctx.d[0], !fresh);
}
static const ag_op DROPOUT = {"ag_dropout", dropout_backward, AG_SAVES_NONE},
                   DROPOUT_ = {"ag_dropout_", dropout_backward, AG_SAVES_NONE},
                   RELU_DROPOUT_ = {"ag_relu_dropout_", dropout_backward, AG_SAVES_OUTPUT};

static bool check_p(const char *op, const ag_tensor *x, double p) {
    if (p >= 0 && p <= 1) return true;
    char b[128];
    ag_error(op, "input %s: p = %g, expected a probability in [0, 1]", ag_shape_str(x, b), p);
    return false;
}

/* The three dropouts: out of place, in place (y shares x's storage), and relu + dropout in place.
 * In place needs a contiguous x that is not a leaf requiring grad while grad mode is on; other x
 * are done out of place (the same values and gradients, only the memory differs). */
static ag_tensor *dropout(const ag_op *op, ag_tensor *x, double p, bool training, ag_rng *rng) {
    bool relu = op == &RELU_DROPOUT_, inplace = op != &DROPOUT;
    if (!ag__check_float(op->name, x) || !check_p(op->name, x, p)) return NULL;
    if (!training) p = 0;
    if (p == 0 && !relu) return x;
    if (inplace && (!ag_is_contiguous(x) || (ag_grad_enabled() && x->requires_grad && !x->node))) inplace = false;
    int64_t n = ag_numel(x);
    ag_tensor *bits = relu ? NULL : ag__new(AG_BOOL, 1, (int64_t[]){(n + 7) / 8}), *xd = ag__dense(x);
    ag_tensor *y = inplace ? ag__alias(x) : ag__new(x->dtype, x->ndim, x->shape);
    ag_rng *r = rng ? rng : ag_rng_global();
    drop_apply(x->dtype, ag__ptr(xd), ag__ptr(y), n, 0, p, relu, r->seed, r->counter,
               bits ? (uint8_t *)ag__ptr(bits) : NULL, false);
    drop_advance(r, n, p);
    if (inplace) ag__bump_version(x);
    ag_node *nd = ag_finish(op, y, 1, &x);
    if (nd) {
        nd->saved[0] = bits;
        nd->ctx.d[0] = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    }
    return y;
}

ag_tensor *ag_dropout(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&DROPOUT, x, p, training, rng);
}
ag_tensor *ag_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&DROPOUT_, x, p, training, rng);
}
ag_tensor *ag_relu_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&RELU_DROPOUT_, x, p, training, rng);
}

/* ==== the feed-forward block ============================================================== */

/* Rows of the hidden activation computed at a time, forward and backward: about 512 KiB of f32
 * for the activation (and as much for its gradient) whatever the batch, but at least 512 rows:
 * the weight gradients are products over the block's rows, and shallower ones run badly on a
 * team of threads (d 256, ff 1024 at 2 threads: 128-row blocks 1.44x faster than 1 thread,
 * 512-row blocks 1.66x). Fixed by the shape alone, so results do not depend on the threads. */
#define FF_BLOCK_ELEMS ((int64_t)1 << 17)
#define FF_BLOCK_MIN_ROWS 512
static int64_t ff_block_rows(int64_t ff) {
    int64_t rows = FF_BLOCK_ELEMS / max1(ff);
    return rows > FF_BLOCK_MIN_ROWS ? rows : FF_BLOCK_MIN_ROWS;
}

/* rows r0.. of an m×k operand */
static mat rows_from(mat a, int64_t r0, size_t es) {
    a.p += (size_t)(a.trans ? r0 : r0 * a.ld) * es;
    return a;
}

/* saved[0], saved[1]: the hidden activation a = dropout(relu(x w1ᵀ + b1)) packed (ag__nz_pack:
 * which elements are nonzero, and those); in: x, w1, b1, w2, b2. Block by block of rows: a
 * unpacked, then dw2 += gᵀ a, db2 += Σ g, da = g w2 → dh = (a ≠ 0)·da·scale, dw1 += dhᵀ x,
 * db1 += Σ dh, dx = dh w1. The weight gradients sum the blocks in order: fixed for a shape,
 * whatever the thread count. */
static void feed_forward_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *w1 = n->in[1], *b1 = n->in[2], *w2 = n->in[3], *g = n->out->grad;
    ag_dtype dt = g->dtype;
    size_t es = ag_dtype_size(dt);
    int64_t d = w1->shape[1], ff = w1->shape[0], out = w2->shape[0], m = ag__shape_numel(x->ndim - 1, x->shape);
    int64_t rows = ff_block_rows(ff), packed = 0;
    double p = n->ctx.d[0], scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    const uint8_t *nz = (const uint8_t *)ag__ptr(n->saved[0]);
    const char *vals = ag__ptr(n->saved[1]);
    mat xm, w1m, w2m;
    operand(x, m, d, &xm);
    operand(w1, ff, d, &w1m);
    operand(w2, out, ff, &w2m);
    bool fresh; /* x's gradient rows are each written by one block: a new buffer is assigned */
    ag_tensor *gx = ag__grad_buffer_to_write(x, &fresh);
    char *dx = gx ? ag__ptr(gx) : NULL, *dw1 = grad_ptr(w1), *db1 = grad_ptr(b1), *dw2 = grad_ptr(w2);
    char *db2 = grad_ptr(n->in[4]);
    ag_tensor *a = ag__new(dt, AG_SHAPE(rows < m ? rows : m, ff)), *da = ag__new(dt, a->ndim, a->shape);
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
        int64_t r = m - r0 < rows ? m - r0 : rows;
        mat xr = rows_from(xm, r0, es);
        const char *gr = ag__ptr(g) + (size_t)(r0 * out) * es;
        packed += ag__nz_unpack(dt, nz, r0 * ff, r * ff, vals + (size_t)packed * es, ag__ptr(a));
        linear_bwd(dt, gr, (mat){ag__ptr(a), false, max1(ff)}, w2m, r, ff, out, ag__ptr(da), true, dw2, db2);
        if (dt == AG_F32) drop_bwd_f32(NULL, ag__ptr(a), ag__ptr(da), ag__ptr(da), r * ff, (float)scale, false);
        else drop_bwd_f64(NULL, ag__ptr(a), ag__ptr(da), ag__ptr(da), r * ff, scale, false);
        linear_bwd(dt, ag__ptr(da), xr, w1m, r, d, ff, dx ? dx + (size_t)(r0 * d) * es : NULL, fresh, dw1, db1);
    }
}
/* x (dw1), w1 (dx), w2 (da): b1 and b2 are not read */
static const ag_op FEED_FORWARD = {"ag_feed_forward", feed_forward_backward,
                                   AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(3)};

ag_tensor *ag_feed_forward(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2, double p,
                           bool training, ag_rng *rng) {
    const char *op = "ag_feed_forward";
    if (!ag__check_float(op, x) || !ag__check_float(op, w1) || !ag__check_float(op, w2) ||
        (b1 && !ag__check_float(op, b1)) || (b2 && !ag__check_float(op, b2)) || !check_p(op, x, p))
        return NULL;
    char s1[128], s2[128], s3[128], s4[128], s5[128];
    if (x->ndim < 1 || w1->ndim != 2 || w2->ndim != 2 || x->shape[x->ndim - 1] != w1->shape[1] ||
        w2->shape[1] != w1->shape[0] || (b1 && (b1->ndim != 1 || b1->shape[0] != w1->shape[0])) ||
        (b2 && (b2->ndim != 1 || b2->shape[0] != w2->shape[0])) || w1->dtype != x->dtype || w2->dtype != x->dtype ||
        (b1 && b1->dtype != x->dtype) || (b2 && b2->dtype != x->dtype)) {
        ag_error(op, "x %s, w1 %s, b1 %s, w2 %s, b2 %s: expected x (..., d), w1 (ff, d), b1 (ff), w2 (out, ff), "
                 "b2 (out), all of x's dtype", ag_shape_str(x, s1), ag_shape_str(w1, s2),
                 b1 ? ag_shape_str(b1, s3) : "none", ag_shape_str(w2, s4), b2 ? ag_shape_str(b2, s5) : "none");
        return NULL;
    }
    if (!training) p = 0;
    ag_dtype dt = x->dtype;
    int64_t d = w1->shape[1], ff = w1->shape[0], out = w2->shape[0], m = ag__shape_numel(x->ndim - 1, x->shape);
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out;
    ag_tensor *y = ag__new(dt, x->ndim, shape);
    bool record = ag_any_requires_grad(5, (ag_tensor *[]){x, w1, b1, w2, b2});
    ag_tensor *nz = record ? ag__new(AG_BOOL, 1, (int64_t[]){(m * ff + 7) / 8}) : NULL;
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena); /* the dense hidden activation is scratch */
    mat xm, w1m, w2m;
    operand(x, m, d, &xm);
    operand(w1, ff, d, &w1m);
    operand(w2, out, ff, &w2m);
    ag_rng *r = rng ? rng : ag_rng_global();
    size_t es = ag_dtype_size(dt);
    int64_t rows = ff_block_rows(ff), packed = 0;
    ag_tensor *a = ag__new(dt, AG_SHAPE(rows < m ? rows : m, ff));
    char *vals = record ? ag_arena_alloc(arena, (size_t)(m * ff) * es) : NULL; /* room for all; the packed stay */
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
        int64_t n = m - r0 < rows ? m - r0 : rows;
        linear_fwd(dt, rows_from(xm, r0, es), w1m, b1, n, d, ff, ag__ptr(a));
        drop_apply(dt, ag__ptr(a), ag__ptr(a), n * ff, r0 * ff, p, true, r->seed, r->counter, NULL, false);
        if (record)
            packed += ag__nz_pack(dt, ag__ptr(a), n * ff, r0 * ff, (uint8_t *)ag__ptr(nz), vals + (size_t)packed * es);
        linear_fwd(dt, (mat){ag__ptr(a), false, max1(ff)}, w2m, b2, n, ff, out, ag__ptr(y) + (size_t)(r0 * out) * es);
    }
    drop_advance(r, m * ff, p);
    ag_tensor *kept = NULL;
    if (record) /* the packed values to the mark, in place of the scratch */
        kept = ag_wrap(dt, 1, (int64_t[]){packed}, ag__arena_rewind_move(arena, mark, vals, (size_t)packed * es));
    else
        ag_arena_rewind(arena, mark);
    ag_node *nd = ag_finish(&FEED_FORWARD, y, 5, (ag_tensor *[]){x, w1, b1, w2, b2});
    if (nd) {
        nd->saved[0] = nz;
        nd->saved[1] = kept;
        nd->ctx.d[0] = p;
    }
    return y;
}

/* ==== positional encodings ================================================================== */

ag_tensor *ag_sinusoidal_positions(int64_t L, int64_t D, ag_dtype dtype) {
    if (L < 0 || D < 0 || (dtype != AG_F32 && dtype != AG_F64)) {
        ag_error("ag_sinusoidal_positions", "L %lld, D %lld, dtype %s: sizes must be >= 0 and dtype f32 or f64",
                 (long long)L, (long long)D, ag_dtype_name(dtype));
        return NULL;
    }
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)max1(L * D));
    for (int64_t j = 0; j < D; j++) {
        double div = pow(10000.0, (double)(j - j % 2) / (double)D);
        for (int64_t pos = 0; pos < L; pos++)
            v[pos * D + j] = j % 2 ? cos((double)pos / div) : sin((double)pos / div);
    }
    ag_tensor *t = ag__new(dtype, AG_SHAPE(L, D));
    ag__copy(t, ag_wrap(AG_F64, AG_SHAPE(L, D), v));
    return t;
}
