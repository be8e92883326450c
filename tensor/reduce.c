/* Reductions (sum, mean, var, max, argmax), softmax / log_softmax along a dim, and
 * sum_to_shape (the reverse of broadcasting).
 *
 * Every reduction is planned the same way: the kept dims enumerate output elements in the
 * row-major order of the contiguous output, the reduced dims are the elements combined into
 * each. Sums are pairwise (error O(log n) instead of O(n) in the tensor's own type) and each
 * output is computed by one thread in a fixed order, so results do not depend on the thread
 * count. */
#include <string.h>
#include <tgmath.h>

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
#define E_DOT(x, y, c) ((x) * (y))
#define TILE 64  /* output columns summed together in the vertical kernel */
#define LEAF 16  /* rows summed sequentially at the leaves of the vertical kernel */

/* Pairwise sum of a strided run (numpy's scheme): blocks of <= 128 in 8 lanes, halves above. */
#define RUN_KERNEL(TI, TA, S, NAME, EXPR)                                                                          \
    static inline __attribute__((always_inline)) TA NAME##_block_##S(const TI *x, const TI *y, int64_t n,          \
                                                                      int64_t s, TA c) {                           \
        (void)y;                                                                                                   \
        (void)c;                                                                                                   \
        TA res = EXPR((TA)x[0], (TA)y[0], c);                                                                      \
        int64_t i = 1;                                                                                             \
        if (n >= 8) {                                                                                              \
            TA r[8];                                                                                               \
            for (int k = 0; k < 8; k++) r[k] = EXPR((TA)x[k * s], (TA)y[k * s], c);                                \
            for (i = 8; i + 8 <= n; i += 8)                                                                        \
                for (int k = 0; k < 8; k++) r[k] += EXPR((TA)x[(i + k) * s], (TA)y[(i + k) * s], c);               \
            res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));                               \
        }                                                                                                          \
        for (; i < n; i++) res += EXPR((TA)x[i * s], (TA)y[i * s], c);                                             \
        return res;                                                                                                \
    }                                                                                                              \
    /* n >= 1 elements x[0], x[s], ... */                                                                          \
    static TA NAME##_run_##S(const TI *x, const TI *y, int64_t n, int64_t s, TA c) {                              \
        if (n <= 128) return s == 1 ? NAME##_block_##S(x, y, n, 1, c) : NAME##_block_##S(x, y, n, s, c);          \
        int64_t h = n / 2;                                                                                         \
        h -= h % 8;                                                                                                \
        return NAME##_run_##S(x, y, h, s, c) + NAME##_run_##S(x + h * s, y + h * s, n - h, s, c);                 \
    }

/* A full reduction over the plan: `horizontal` sums each output's elements (runs along the
 * smallest reduced stride, combined pairwise); `vertical` is for outputs that are contiguous in
 * the input (e.g. summing the rows of a (N, E) matrix): TILE neighbouring outputs are summed
 * together, row by row, still pairwise over the rows. c (NULL for plain sums) holds one shift
 * per output. */
#define REDUCE_KERNEL(TI, TA, S, NAME, EXPR)                                                                       \
    static TA NAME##_rows_##S(const plan *p, const TI *x, int64_t lo, int64_t rows, int64_t n, int64_t s, TA c) {  \
        if (rows == 1) {                                                                                           \
            const TI *r = x + red_offset(p, p->nr - 1, lo);                                                        \
            return NAME##_run_##S(r, r, n, s, c);                                                                  \
        }                                                                                                          \
        int64_t h = rows / 2;                                                                                      \
        return NAME##_rows_##S(p, x, lo, h, n, s, c) + NAME##_rows_##S(p, x, lo + h, rows - h, n, s, c);           \
    }                                                                                                              \
    static void NAME##_tile_##S(const plan *p, const TI *x, int64_t lo, int64_t rows, int64_t w, TA *acc,          \
                                const TA *c) {                                                                     \
        if (rows <= LEAF) {                                                                                        \
            const TI *r = x + red_offset(p, p->nr, lo);                                                            \
            for (int64_t j = 0; j < w; j++) acc[j] = EXPR((TA)r[j], 0, c[j]);                                      \
            for (int64_t i = 1; i < rows; i++) {                                                                   \
                r = x + red_offset(p, p->nr, lo + i);                                                              \
                for (int64_t j = 0; j < w; j++) acc[j] += EXPR((TA)r[j], 0, c[j]);                                 \
            }                                                                                                      \
            return;                                                                                                \
        }                                                                                                          \
        TA tmp[TILE];                                                                                              \
        int64_t h = rows / 2;                                                                                      \
        NAME##_tile_##S(p, x, lo, h, w, acc, c);                                                                   \
        NAME##_tile_##S(p, x, lo + h, rows - h, w, tmp, c);                                                        \
        for (int64_t j = 0; j < w; j++) acc[j] += tmp[j];                                                          \
    }                                                                                                              \
    static void NAME##_##S(const plan *p, const void *xv, void *outv, const void *cv) {                           \
        const TI *x = xv;                                                                                          \
        TA *out = outv;                                                                                            \
        const TA *c = cv;                                                                                          \
        if (p->nout == 0) return;                                                                                  \
        if (p->nred == 0) {                                                                                        \
            for (int64_t o = 0; o < p->nout; o++) out[o] = 0;                                                      \
            return;                                                                                                \
        }                                                                                                          \
        int64_t n = p->nr ? p->rshape[p->nr - 1] : 1, s = p->nr ? p->rstride[p->nr - 1] : 0;                       \
        bool vertical = p->nk > 0 && p->kstride[p->nk - 1] == 1 && p->nr > 0 && s != 1;                           \
        if (vertical) {                                                                                            \
            int64_t K = p->kshape[p->nk - 1], ntiles = (K + TILE - 1) / TILE, tasks = p->nout / K * ntiles;        \
            bool par = parallel(p->nout * p->nred, tasks);                                                         \
            _Pragma("omp parallel for if (par) schedule(static)") for (int64_t t = 0; t < tasks; t++) {            \
                int64_t o = t / ntiles * K, j0 = t % ntiles * TILE, w = K - j0 < TILE ? K - j0 : TILE, off, co;     \
                kept_offsets(p, o, &off, &co);                                                                     \
                NAME##_tile_##S(p, x + off + j0, 0, p->nred, w, out + o + j0, c ? c + o + j0 : NULL);              \
            }                                                                                                      \
        } else {                                                                                                   \
            bool par = parallel(p->nout * p->nred, p->nout);                                                       \
            _Pragma("omp parallel for if (par) schedule(static)") for (int64_t o = 0; o < p->nout; o++) {          \
                int64_t off, co;                                                                                   \
                kept_offsets(p, o, &off, &co);                                                                     \
                out[o] = NAME##_rows_##S(p, x + off, 0, p->nred / n, n, s, c ? c[o] : 0);                          \
            }                                                                                                      \
        }                                                                                                          \
    }

#define SUM_FLOAT(T, S, D) RUN_KERNEL(T, T, S, sum, E_SUM) REDUCE_KERNEL(T, T, S, sum, E_SUM)
#define SUM_INT(T, S, D) RUN_KERNEL(T, int64_t, S, sum, E_SUM) REDUCE_KERNEL(T, int64_t, S, sum, E_SUM)
#define SQDEV_FLOAT(T, S, D) RUN_KERNEL(T, T, S, sqdev, E_SQDEV) REDUCE_KERNEL(T, T, S, sqdev, E_SQDEV)
#define DOT_FLOAT(T, S, D) RUN_KERNEL(T, T, S, dot, E_DOT)
AG_FLOAT_TYPES(SUM_FLOAT)
AG_INT_TYPES(SUM_INT)
SUM_INT(uint8_t, b8, AG_BOOL)
AG_FLOAT_TYPES(SQDEV_FLOAT)
AG_FLOAT_TYPES(DOT_FLOAT)

typedef void (*reduce_fn)(const plan *p, const void *x, void *out, const void *c);
static const reduce_fn SUM_K[] = {sum_f32, sum_f64, sum_i32, sum_i64, sum_b8};
static const reduce_fn SQDEV_K[] = {sqdev_f32, sqdev_f64};

#define DIVIDE(T, S, D)                                                                                            \
    static void divide_##S(void *y, int64_t n, double by) {                                                        \
        T *v = y, d = (T)by;                                                                                       \
        for (int64_t i = 0; i < n; i++) v[i] = v[i] / d;                                                           \
    }
AG_FLOAT_TYPES(DIVIDE)
static void divide(ag_tensor *y, double by) { (y->dtype == AG_F32 ? divide_f32 : divide_f64)(y->data, ag_numel(y), by); }

/* ---- dims, shapes, gradient views ---- */

/* A 0-d tensor accepts dim 0 and -1 (as in PyTorch) and reduces over nothing: returns -2. */
static int wrap_dim(const char *op, const ag_tensor *t, int dim) {
    if (t->ndim == 0 && (dim == 0 || dim == -1)) return -2;
    return ag_wrap_dim(op, t, dim);
}

/* dims (ndims of them, NULL or 0: all) as a bit mask over t's dims; false after reporting */
static bool dims_mask(const char *op, const ag_tensor *t, int ndims, const int *dims, unsigned *mask) {
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
static int reduced_shape(const ag_tensor *t, unsigned mask, bool keepdim, int64_t *shape) {
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (!(mask >> d & 1)) shape[n++] = t->shape[d];
        else if (keepdim) shape[n++] = 1;
    }
    return n;
}

/* g (contiguous, the reduced shape) viewed with t's ndim, reduced dims of size 1, so that it
 * broadcasts back over t */
static ag_tensor *keepdim_view(ag_tensor *g, const ag_tensor *t, unsigned mask) {
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
    ag_accum_grad(n->in[0], keepdim_view(n->out->grad, n->in[0], (unsigned)n->ctx.i[0]));
}
static const ag_op SUM = {"ag_sum", sum_backward, AG_SAVES_NONE};

/* t: any shape and dtype; returns t's shape reduced over dims (f32/f64 keep their dtype,
 * integers and bool sum to i64) */
ag_tensor *ag_sum(ag_tensor *t, int ndims, const int *dims, bool keepdim) {
    unsigned mask;
    if (!ag__check_not_null("ag_sum", t) || !dims_mask("ag_sum", t, ndims, dims, &mask)) return NULL;
    int64_t shape[AG_MAX_DIMS];
    int nd = reduced_shape(t, mask, keepdim, shape);
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
    ag_accum_grad(x, keepdim_view(g, x, (unsigned)n->ctx.i[0]));
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
    if (!ag__check_float("ag_mean", t) || !dims_mask("ag_mean", t, ndims, dims, &mask)) return NULL;
    int64_t shape[AG_MAX_DIMS], count = reduced_count(t, mask);
    int nd = reduced_shape(t, mask, keepdim, shape);
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
    ag_tensor *g = ag_mul_scalar(keepdim_view(n->out->grad, x, (unsigned)n->ctx.i[0]), 2.0 / n->ctx.d[1]);
    ag_accum_grad(x, ag_mul(g, ag_sub(x, n->saved[0])));
}
static const ag_op VAR = {"ag_var", var_backward, AG_SAVES_INPUT(0)};

/* t: f32/f64, any shape; returns t's shape reduced over dims: Σ(x - mean)² / max(0, N - correction) */
ag_tensor *ag_var(ag_tensor *t, int ndims, const int *dims, int correction, bool keepdim) {
    unsigned mask;
    if (!ag__check_float("ag_var", t) || !dims_mask("ag_var", t, ndims, dims, &mask)) return NULL;
    if (correction < 0) {
        char b[128];
        ag_error("ag_var", "correction %d for %s: must be 0 (population) or more (1: sample)", correction,
                 ag_shape_str(t, b));
        return NULL;
    }
    int64_t shape[AG_MAX_DIMS], kshape[AG_MAX_DIMS], count = reduced_count(t, mask);
    int nd = reduced_shape(t, mask, keepdim, shape);
    reduced_shape(t, mask, true, kshape);
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

/* ---- max / argmax along one dim ---- */

/* The maximum of a row, in 8 lanes so that it vectorises, and whether the row holds a NaN (then
 * the value returned means nothing: callers look for the NaN). v != v is false for integers. */
#define ROWMAX_KERNEL(T, S, D)                                                                                     \
    static inline __attribute__((always_inline)) T rowmax_##S(const T *x, int64_t n, int64_t s, bool *nan) {       \
        T r[8], m = x[0];                                                                                          \
        bool any = x[0] != x[0];                                                                                   \
        int64_t i = 1;                                                                                             \
        if (n >= 8) {                                                                                              \
            for (int k = 0; k < 8; k++) r[k] = x[k * s];                                                           \
            for (i = 8; i + 8 <= n; i += 8)                                                                        \
                for (int k = 0; k < 8; k++) {                                                                      \
                    T v = x[(i + k) * s];                                                                          \
                    r[k] = v > r[k] ? v : r[k];                                                                    \
                    any |= v != v;                                                                                 \
                }                                                                                                  \
            for (int k = 0; k < 8; k++) {                                                                          \
                m = r[k] > m || m != m ? r[k] : m;                                                                 \
                any |= r[k] != r[k];                                                                               \
            }                                                                                                      \
        }                                                                                                          \
        for (; i < n; i++) {                                                                                       \
            m = x[i * s] > m || m != m ? x[i * s] : m;                                                             \
            any |= x[i * s] != x[i * s];                                                                           \
        }                                                                                                          \
        if (nan) *nan = any;                                                                                       \
        return m;                                                                                                  \
    }
AG_NUMERIC_TYPES(ROWMAX_KERNEL)

/* The first maximum of each row; a NaN counts as the maximum (the first NaN wins), as in
 * PyTorch: the maximum is found first, then its first position. */
#define MAX_KERNEL(T, S, D)                                                                                        \
    static inline __attribute__((always_inline)) int64_t argmax_row_##S(const T *x, int64_t n, int64_t s, T *v) { \
        bool nan;                                                                                                  \
        T m = rowmax_##S(x, n, s, &nan);                                                                           \
        int64_t i = 0;                                                                                             \
        if (nan)                                                                                                   \
            while (x[i * s] == x[i * s]) i++;                                                                      \
        else                                                                                                       \
            while (x[i * s] != m) i++;                                                                             \
        *v = x[i * s];                                                                                             \
        return i;                                                                                                  \
    }                                                                                                              \
    static void max_##S(const plan *p, const void *xv, int64_t n, int64_t s, void *vals, int64_t *idx) {          \
        const T *x = xv;                                                                                           \
        bool par = parallel(p->nout * n, p->nout);                                                                 \
        _Pragma("omp parallel for if (par) schedule(static)") for (int64_t o = 0; o < p->nout; o++) {              \
            int64_t off, co;                                                                                       \
            kept_offsets(p, o, &off, &co);                                                                         \
            T v;                                                                                                   \
            idx[o] = s == 1 ? argmax_row_##S(x + off, n, 1, &v) : argmax_row_##S(x + off, n, s, &v);               \
            if (vals) ((T *)vals)[o] = v;                                                                          \
        }                                                                                                          \
    }
AG_NUMERIC_TYPES(MAX_KERNEL)

/* dx (contiguous, x's shape) at each output's argmax += g */
#define MAX_BWD_KERNEL(T, S, D)                                                                                    \
    static void max_bwd_##S(const plan *p, int64_t s, const int64_t *idx, const void *gv, void *dxv) {            \
        const T *g = gv;                                                                                           \
        T *dx = dxv;                                                                                               \
        for (int64_t o = 0; o < p->nout; o++) {                                                                    \
            int64_t off, co;                                                                                       \
            kept_offsets(p, o, &off, &co);                                                                         \
            dx[co + idx[o] * s] += g[o];                                                                           \
        }                                                                                                          \
    }
AG_FLOAT_TYPES(MAX_BWD_KERNEL)
typedef void (*max_fn)(const plan *p, const void *x, int64_t n, int64_t s, void *vals, int64_t *idx);
static const max_fn MAX_K[] = {max_f32, max_f64, max_i32, max_i64};

/* shared by max and argmax: validates, returns the values (NULL if not wanted) and indices */
static bool max_along(const char *op, ag_tensor *t, int dim, bool keepdim, bool want_values, ag_tensor **vals,
                      ag_tensor **idx, unsigned *mask_out) {
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
        ag_error(op, "dim %d of %s has size 0: there is no maximum of nothing", dim, ag_shape_str(t, b));
        return false;
    }
    int64_t shape[AG_MAX_DIMS];
    int nd = reduced_shape(t, mask, keepdim, shape);
    plan p;
    make_plan(&p, t, mask);
    *vals = want_values ? ag__new(t->dtype, nd, shape) : NULL;
    *idx = ag__new(AG_I64, nd, shape);
    if (p.nout) MAX_K[t->dtype](&p, ag__ptr(t), n, s, want_values ? (*vals)->data : NULL, (int64_t *)(*idx)->data);
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
    (x->dtype == AG_F32 ? max_bwd_f32 : max_bwd_f64)(&p, s, idx, ag__ptr(g), ag__ptr(dx));
}
static const ag_op MAX = {"ag_max", max_backward, AG_SAVES_NONE}; /* the argmax is its own */

/* t: any numeric dtype; returns t's shape without dim (or with it as 1): the maxima */
ag_tensor *ag_max(ag_tensor *t, int dim, bool keepdim) {
    ag_tensor *vals, *idx;
    unsigned mask;
    if (!max_along("ag_max", t, dim, keepdim, true, &vals, &idx, &mask)) return NULL;
    if (is_float(t)) {
        ag_node *n = ag_finish(&MAX, vals, 1, &t);
        if (n) {
            n->ctx.i[0] = mask;
            n->saved[0] = idx;
        }
    }
    return vals;
}

/* t: any numeric dtype; returns t's shape without dim (or with it as 1), AG_I64: the index of
 * the first maximum */
ag_tensor *ag_argmax(ag_tensor *t, int dim, bool keepdim) {
    ag_tensor *vals, *idx;
    unsigned mask;
    if (!max_along("ag_argmax", t, dim, keepdim, false, &vals, &idx, &mask)) return NULL;
    return idx;
}

/* ---- softmax / log_softmax along one dim ---- */

/* A row of n elements: x at stride sx, y at stride sy. The max is subtracted before exp so that
 * large inputs do not overflow; exp(x - max) is written to y first so that its sum can be
 * taken pairwise from there. */
#define SOFTMAX_KERNEL(T, S, D)                                                                                    \
    static inline __attribute__((always_inline)) void softmax_row_##S(const T *x, int64_t sx, T *y, int64_t sy,   \
                                                                       int64_t n, bool log_) {                     \
        T m = rowmax_##S(x, n, sx, NULL);                                                                          \
        for (int64_t i = 0; i < n; i++) y[i * sy] = exp(x[i * sx] - m);                                            \
        T sum = sum_run_##S(y, y, n, sy, 0);                                                                       \
        if (log_) {                                                                                                \
            T lsum = log(sum); /* (x - m) - lsum: m + lsum would round at m's magnitude */                        \
            for (int64_t i = 0; i < n; i++) y[i * sy] = (x[i * sx] - m) - lsum;                                    \
        } else {                                                                                                   \
            T inv = 1 / sum;                                                                                       \
            for (int64_t i = 0; i < n; i++) y[i * sy] *= inv;                                                      \
        }                                                                                                          \
    }                                                                                                              \
    /* y is a contiguous tensor of x's shape */                                                                    \
    static void softmax_##S(const plan *p, const void *xv, int64_t n, int64_t sx, void *yv, int64_t sy,          \
                            bool log_) {                                                                           \
        bool par = parallel(p->nout * n, p->nout);                                                                 \
        _Pragma("omp parallel for if (par) schedule(static)") for (int64_t o = 0; o < p->nout; o++) {              \
            int64_t xo, yo;                                                                                        \
            kept_offsets(p, o, &xo, &yo);                                                                          \
            const T *x = (const T *)xv + xo;                                                                       \
            T *y = (T *)yv + yo;                                                                                   \
            if (sx == 1 && sy == 1) softmax_row_##S(x, 1, y, 1, n, log_);                                          \
            else softmax_row_##S(x, sx, y, sy, n, log_);                                                           \
        }                                                                                                          \
    }                                                                                                              \
    /* softmax: dx += y (g - Σ g y); log_softmax: dx += g - exp(y) Σ g */                                          \
    static inline __attribute__((always_inline)) void softmax_bwd_row_##S(const T *g, const T *y, T *dx,          \
                                                                           int64_t n, int64_t s, bool log_) {      \
        if (log_) {                                                                                                \
            T sg = sum_run_##S(g, g, n, s, 0);                                                                     \
            for (int64_t i = 0; i < n; i++) dx[i * s] += g[i * s] - exp(y[i * s]) * sg;                           \
        } else {                                                                                                   \
            T gy = dot_run_##S(g, y, n, s, 0);                                                                     \
            for (int64_t i = 0; i < n; i++) dx[i * s] += y[i * s] * (g[i * s] - gy);                               \
        }                                                                                                          \
    }                                                                                                              \
    /* g, y, dx: contiguous of one shape, rows at stride s */                                                      \
    static void softmax_bwd_##S(const plan *p, int64_t n, int64_t s, const void *gv, const void *yv, void *dxv,  \
                                bool log_) {                                                                       \
        bool par = parallel(p->nout * n, p->nout);                                                                 \
        _Pragma("omp parallel for if (par) schedule(static)") for (int64_t o = 0; o < p->nout; o++) {              \
            int64_t xo, co;                                                                                        \
            kept_offsets(p, o, &xo, &co);                                                                          \
            const T *g = (const T *)gv + co, *y = (const T *)yv + co;                                              \
            T *dx = (T *)dxv + co;                                                                                 \
            if (s == 1) softmax_bwd_row_##S(g, y, dx, n, 1, log_);                                                 \
            else softmax_bwd_row_##S(g, y, dx, n, s, log_);                                                        \
        }                                                                                                          \
    }
AG_FLOAT_TYPES(SOFTMAX_KERNEL)

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
    (x->dtype == AG_F32 ? softmax_bwd_f32 : softmax_bwd_f64)(&p, len, comp_stride(x, d), ag__ptr(g), ag__ptr(n->out),
                                                             ag__ptr(dx), log_);
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
        (t->dtype == AG_F32 ? softmax_f32 : softmax_f64)(&p, ag__ptr(t), len, d >= 0 ? t->stride[d] : 0, y->data,
                                                         comp_stride(t, d), log_);
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
