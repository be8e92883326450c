/* Ops along one dim that keep the dim: sort, topk and cumsum. Each walks the rows along the dim
 * in place (any strides, no copy) and writes contiguous outputs; sort_rows.inc holds the row
 * kernels for every dtype. Sorting is stable everywhere (torch's stable=True order), so ties
 * and the thread count never change a result. */
#include <omp.h>
#include <string.h>

#include "internal.h"

/* v != v: true for a NaN, false for integers and bool */
#define IS_NAN(v) ((v) != (v))
/* topk of at most this many keeps them by insertion in one pass instead of sorting the row */
#define TOPK_BY_INSERTION 16

/* The rows of a tensor along one dim: row o (row-major over the other dims) starts at
 * row_offset(r, o) (in elements of the tensor, from its first element) and holds len elements
 * step apart. A 0-d tensor is one row of one element. */
typedef struct {
    int nd;
    int64_t shape[AG_MAX_DIMS], st[AG_MAX_DIMS];
    int64_t nrows, len, step;
} rows;

static rows rows_of(const ag_tensor *t, int d) {
    rows r = {.nrows = 1, .len = d >= 0 ? t->shape[d] : 1, .step = d >= 0 ? t->stride[d] : 0};
    for (int k = 0; k < t->ndim; k++)
        if (k != d) {
            r.shape[r.nd] = t->shape[k];
            r.st[r.nd++] = t->stride[k];
            r.nrows *= t->shape[k];
        }
    return r;
}

static inline int64_t row_offset(const rows *r, int64_t o) {
    int64_t off = 0;
    for (int k = r->nd - 1; k >= 0; k--) {
        off += (o % r->shape[k]) * r->st[k];
        o /= r->shape[k];
    }
    return off;
}

#define SORT_FLOAT 1
#define T float
#define TA double
#define TO float
#define FN(name) name##_f32
#include "sort_rows.inc"
#undef T
#undef TA
#undef TO
#undef FN
#define T double
#define TA double
#define TO double
#define FN(name) name##_f64
#include "sort_rows.inc"
#undef T
#undef TA
#undef TO
#undef FN
#undef SORT_FLOAT
#define SORT_FLOAT 0
#define TA uint64_t /* wraps on overflow as torch's int64 sums do, without signed overflow */
#define TO int64_t
#define T int32_t
#define FN(name) name##_i32
#include "sort_rows.inc"
#undef T
#undef FN
#define T int64_t
#define FN(name) name##_i64
#include "sort_rows.inc"
#undef T
#undef FN
#define T uint8_t
#define FN(name) name##_b8
#include "sort_rows.inc"
#undef T
#undef FN
#undef TA
#undef TO
#undef SORT_FLOAT

typedef void (*sort_rows_fn)(const rows *rx, const rows *ry, const void *x, int64_t m, bool desc, void *vals,
                             int64_t *ind, int64_t *scratch);
static const sort_rows_fn SORT_K[] = {sort_rows_f32, sort_rows_f64, sort_rows_i32, sort_rows_i64, sort_rows_b8};
typedef void (*cumsum_rows_fn)(const rows *rx, const rows *ry, const void *x, void *y, bool reverse, bool acc);
static const cumsum_rows_fn CUMSUM_K[] = {cumsum_rows_f32, cumsum_rows_f64, cumsum_rows_i32, cumsum_rows_i64,
                                          cumsum_rows_b8};

/* dim of t, or -1 for a 0-d t given dim 0 or -1 (as torch); -2 after reporting */
static int dim_of(const char *op, const ag_tensor *t, int dim) {
    if (t->ndim == 0 && (dim == 0 || dim == -1)) return -1;
    int d = ag_wrap_dim(op, t, dim);
    return d < 0 ? -2 : d;
}

/* ---- sort and topk ---- */

/* dx += g at the saved positions along the dim */
static void sort_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *dx = ag_grad_buffer(x);
    if (!dx) return;
    int d = (int)n->ctx.i[0];
    ag_tensor *g = ag_contiguous(n->out->grad);
    rows rg = rows_of(g, d), rdx = rows_of(dx, d);
    const int64_t *ind = (const int64_t *)ag__ptr(n->saved[0]);
    if (x->dtype == AG_F32) scatter_rows_f32(&rg, &rdx, ag__ptr(g), ind, ag__ptr(dx));
    else scatter_rows_f64(&rg, &rdx, ag__ptr(g), ind, ag__ptr(dx));
}
/* the positions are the op's own (a caller asking for them gets a copy) */
static const ag_op SORT = {"ag_sort", sort_backward, AG_SAVES_NONE}, TOPK = {"ag_topk", sort_backward, AG_SAVES_NONE};

/* t's rows along d (checked) sorted, the first m of each kept: the values, and the positions
 * into *indices when asked */
static ag_tensor *sorted_along(const ag_op *op, ag_tensor *t, int d, int64_t m, bool desc, ag_tensor **indices) {
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    if (d >= 0) shape[d] = m;
    ag_tensor *vals = ag__new(t->dtype, t->ndim, shape), *ind = ag__new(AG_I64, t->ndim, shape);
    if (!vals || !ind) return NULL;
    rows rx = rows_of(t, d), ry = rows_of(vals, d);
    if (rx.nrows > 0 && rx.len > 0) {
        size_t per_thread = 2 * (size_t)rx.len * sizeof(int64_t);
        int64_t *scratch = ag_arena_alloc(ag_arena_current(), per_thread * (size_t)omp_get_max_threads());
        if (!scratch) {
            char b[128];
            ag_error(op->name, "%s: cannot allocate the sort's scratch", ag_shape_str(t, b));
            return NULL;
        }
        SORT_K[t->dtype](&rx, &ry, ag__ptr(t), m, desc, vals->data, (int64_t *)ind->data, scratch);
    }
    ag_node *n = t->dtype == AG_F32 || t->dtype == AG_F64 ? ag_finish(op, vals, 1, &t) : NULL;
    if (n) {
        n->ctx.i[0] = d;
        n->saved[0] = ind;
    }
    if (indices) *indices = n ? ag_clone(ind) : ind;
    return vals;
}

/* torch.sort(t, dim, descending, stable=True) */
ag_tensor *ag_sort(ag_tensor *t, int dim, bool descending, ag_tensor **indices) {
    if (indices) *indices = NULL;
    if (!ag__check_not_null("ag_sort", t)) return NULL;
    int d = dim_of("ag_sort", t, dim);
    if (d == -2) return NULL;
    return sorted_along(&SORT, t, d, d >= 0 ? t->shape[d] : 1, descending, indices);
}

/* torch.topk(t, k, dim, largest, sorted) */
ag_tensor *ag_topk(ag_tensor *t, int64_t k, int dim, bool largest, bool sorted, ag_tensor **indices) {
    (void)sorted; /* always sorted: torch leaves the order unspecified otherwise */
    if (indices) *indices = NULL;
    if (!ag__check_not_null("ag_topk", t)) return NULL;
    int d = dim_of("ag_topk", t, dim);
    if (d == -2) return NULL;
    int64_t n = d >= 0 ? t->shape[d] : 1;
    if (k < 0 || k > n) {
        char b[128];
        ag_error("ag_topk", "k %lld is out of range for dim %d of %s (size %lld)", (long long)k, dim,
                 ag_shape_str(t, b), (long long)n);
        return NULL;
    }
    return sorted_along(&TOPK, t, d, k, largest, indices);
}

/* ---- cumsum ---- */

/* dx += the running sums of g from the end of each row */
static void cumsum_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *dx = ag_grad_buffer(x);
    if (!dx) return;
    int d = (int)n->ctx.i[0];
    ag_tensor *g = ag_contiguous(n->out->grad);
    rows rg = rows_of(g, d), rdx = rows_of(dx, d);
    CUMSUM_K[x->dtype](&rg, &rdx, ag__ptr(g), ag__ptr(dx), true, true);
}
static const ag_op CUMSUM = {"ag_cumsum", cumsum_backward, AG_SAVES_NONE};

/* torch.cumsum(t, dim): t's shape; f32/f64 keep their dtype (f32 summed in double, as torch on
 * the CPU), integers and bool sum to i64 */
ag_tensor *ag_cumsum(ag_tensor *t, int dim) {
    if (!ag__check_not_null("ag_cumsum", t)) return NULL;
    int d = dim_of("ag_cumsum", t, dim);
    if (d == -2) return NULL;
    bool fl = t->dtype == AG_F32 || t->dtype == AG_F64;
    ag_tensor *y = ag__new(fl ? t->dtype : AG_I64, t->ndim, t->shape);
    if (!y) return NULL;
    rows rx = rows_of(t, d), ry = rows_of(y, d);
    CUMSUM_K[t->dtype](&rx, &ry, ag__ptr(t), y->data, false, false);
    if (fl) {
        ag_node *n = ag_finish(&CUMSUM, y, 1, &t);
        if (n) n->ctx.i[0] = d;
    }
    return y;
}
