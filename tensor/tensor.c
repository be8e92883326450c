/* Creation, copying, element access and printing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int64_t ag__shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int64_t ag_numel(const ag_tensor *t) { return ag__shape_numel(t->ndim, t->shape); }

void ag__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

bool ag__same_shape(const ag_tensor *a, const ag_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

bool ag_is_contiguous(const ag_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

/* bytes [lo, hi) that t's elements occupy; false when t is empty */
static bool byte_span(const ag_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t first = t->offset, last = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) return false;
        int64_t reach = t->stride[i] * (t->shape[i] - 1);
        if (reach < 0) first += reach;
        else last += reach;
    }
    size_t es = ag_dtype_size(t->dtype);
    *lo = (uintptr_t)t->data + (uintptr_t)(first * (int64_t)es);
    *hi = (uintptr_t)t->data + (uintptr_t)((last + 1) * (int64_t)es);
    return true;
}

/* t's elements fill their byte span exactly once (its dims, ordered by stride, are contiguous) */
static bool dense(const ag_tensor *t) {
    int64_t st[AG_MAX_DIMS], sh[AG_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1) continue;
        int j = n++;
        for (; j > 0 && llabs(st[j - 1]) > llabs(t->stride[i]); j--) st[j] = st[j - 1], sh[j] = sh[j - 1];
        st[j] = llabs(t->stride[i]), sh[j] = t->shape[i];
    }
    for (int i = 0, expect = 1; i < n; expect *= sh[i], i++)
        if (st[i] != expect) return false;
    return true;
}

ag_overlap ag__overlap(const ag_tensor *dst, const ag_tensor *src) {
    uintptr_t a0, a1, b0, b1;
    if (!byte_span(dst, &a0, &a1) || !byte_span(src, &b0, &b1) || a1 <= b0 || b1 <= a0) return AG_OVERLAP_NONE;
    if (dst->data == src->data && dst->offset == src->offset && dst->dtype == src->dtype && ag__same_shape(dst, src) &&
        memcmp(dst->stride, src->stride, sizeof(int64_t) * (size_t)dst->ndim) == 0)
        return AG_OVERLAP_FULL;
    return dense(dst) && dense(src) ? AG_OVERLAP_PARTIAL : AG_OVERLAP_MAYBE;
}

const ag_tensor *ag__writable(const char *op, const ag_tensor *dst, const ag_tensor *src) {
    char b1[128], b2[128];
    bool empty = ag_numel(dst) == 0;
    for (int i = 0; i < dst->ndim && !empty; i++)
        if (dst->stride[i] == 0 && dst->shape[i] > 1) {
            ag_error(op, "the destination %s has several elements at one memory location (an expanded view): "
                         "clone it before writing into it", ag_shape_str(dst, b1));
            return NULL;
        }
    if (!src) return dst;
    switch (ag__overlap(dst, src)) {
    case AG_OVERLAP_PARTIAL:
        ag_error(op, "the source %s and the destination %s share some memory in different layouts: "
                     "clone the source first", ag_shape_str(src, b1), ag_shape_str(dst, b2));
        return NULL;
    case AG_OVERLAP_MAYBE: {
        ag_tensor *copy = ag__new(src->dtype, src->ndim, src->shape);
        ag__copy(copy, src);
        return copy;
    }
    default:
        return src;
    }
}

bool ag__check_not_null(const char *op, const ag_tensor *t) {
    if (t) return ag__alive(t) || ag__report_dead(op, t);
    ag_error(op, "input tensor is NULL (an earlier op failed?)");
    return false;
}

bool ag__check_float(const char *op, const ag_tensor *t) {
    if (!ag__check_not_null(op, t)) return false;
    if (t->dtype == AG_F32 || t->dtype == AG_F64) return true;
    char b[128];
    ag_error(op, "%s tensor of dtype %s: expected f32 or f64", ag_shape_str(t, b), ag_dtype_name(t->dtype));
    return false;
}

int ag_wrap_dim(const char *op, const ag_tensor *t, int dim) {
    int n = t->ndim;
    int d = dim < 0 ? dim + n : dim;
    if (d < 0 || d >= n) {
        char b[128];
        ag_error(op, "dim %d out of range for %d-d tensor %s", dim, n, ag_shape_str(t, b));
        return -1;
    }
    return d;
}

bool ag__numel_fits(int ndim, const int64_t *shape) {
    int64_t n = 16; /* the widest element's bytes */
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return false;
    return true;
}

/* the arguments of a constructor: a dtype attograd has, 0 to AG_MAX_DIMS dims, a shape array
 * when there are dims, and a size that fits (ag__numel_fits) */
static bool check_shape(const char *op, ag_dtype dt, int ndim, const int64_t *shape) {
    char b[128];
    if ((unsigned)dt > AG_BOOL) {
        ag_error(op, "dtype %d: expected AG_F32, AG_F64, AG_I32, AG_I64 or AG_BOOL", (int)dt);
        return false;
    }
    if (ndim < 0 || ndim > AG_MAX_DIMS) {
        ag_error(op, "%d dims: attograd supports 0 to %d", ndim, AG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        ag_error(op, "shape is NULL for %d dims", ndim);
        return false;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            ag_error(op, "negative size in shape %s", ag__shape_str(ndim, shape, b));
            return false;
        }
    if (!ag__numel_fits(ndim, shape)) {
        ag_error(op, "shape %s has more elements than any tensor can hold (their bytes overflow 63 bits)",
                 ag__shape_str(ndim, shape, b));
        return false;
    }
    return true;
}

/* a zeroed header that starts a storage of its own as far as versions go: the counter lives in
 * the header, which an arena forgets no sooner than data allocated after it */
static ag_tensor *header(void) {
    return ag__arena_header(ag_arena_current());
}

ag_tensor *ag__new_op(const char *op, ag_dtype dt, int ndim, const int64_t *shape) {
    size_t bytes = (size_t)ag__shape_numel(ndim, shape) * ag_dtype_size(dt);
    ag_tensor *t = header();
    if (t) {
        t->dtype = dt;
        t->ndim = ndim;
        for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
        ag__contiguous_strides(ndim, shape, t->stride);
        t->data = ag_arena_alloc(ag_arena_current(), bytes);
    }
    if (!t || !t->data) {
        char b[128];
        ag_error(op, "cannot allocate %zu bytes for a %s tensor of shape %s: out of memory", bytes,
                 ag_dtype_name(dt), ag__shape_str(ndim, shape, b));
        return NULL;
    }
    return t;
}

ag_tensor *ag__new(ag_dtype dt, int ndim, const int64_t *shape) { return ag__new_op("ag_alloc", dt, ndim, shape); }

ag_tensor *ag__alias(const ag_tensor *src) {
    ag_tensor *t = header();
    if (!t) {
        ag_error("ag_alloc", "cannot allocate a tensor header: out of memory");
        return NULL;
    }
    t->data = src->data;
    t->offset = src->offset;
    t->ndim = src->ndim;
    t->dtype = src->dtype;
    memcpy(t->shape, src->shape, sizeof t->shape);
    memcpy(t->stride, src->stride, sizeof t->stride);
    ag__state(t)->version = ag__state(src)->version;
    return t;
}

uint32_t ag_version(const ag_tensor *t) { return ag__version(t); }

ag_tensor *ag_empty(ag_dtype dt, int ndim, const int64_t *shape) {
    if (!check_shape("ag_empty", dt, ndim, shape)) return NULL;
    return ag__new_op("ag_empty", dt, ndim, shape);
}

ag_tensor *ag_zeros(ag_dtype dt, int ndim, const int64_t *shape) {
    if (!check_shape("ag_zeros", dt, ndim, shape)) return NULL;
    ag_tensor *t = ag__new_op("ag_zeros", dt, ndim, shape);
    if (!t) return NULL;
    ag__zero(t->data, (size_t)ag_numel(t) * ag_dtype_size(dt));
    return t;
}

ag_tensor *ag_full(ag_dtype dt, int ndim, const int64_t *shape, double value) {
    if (!check_shape("ag_full", dt, ndim, shape)) return NULL;
    ag_tensor *t = ag__new_op("ag_full", dt, ndim, shape);
    if (t) ag__fill(t, value);
    return t;
}

ag_tensor *ag_ones(ag_dtype dt, int ndim, const int64_t *shape) { return ag_full(dt, ndim, shape, 1.0); }
ag_tensor *ag_empty_like(const ag_tensor *t) {
    if (!ag__check_not_null("ag_empty_like", t)) return NULL;
    return ag_empty(t->dtype, t->ndim, t->shape);
}
ag_tensor *ag_zeros_like(const ag_tensor *t) {
    if (!ag__check_not_null("ag_zeros_like", t)) return NULL;
    return ag_zeros(t->dtype, t->ndim, t->shape);
}
ag_tensor *ag_full_like(const ag_tensor *t, double value) {
    if (!ag__check_not_null("ag_full_like", t)) return NULL;
    return ag_full(t->dtype, t->ndim, t->shape, value);
}
ag_tensor *ag_ones_like(const ag_tensor *t) {
    if (!ag__check_not_null("ag_ones_like", t)) return NULL;
    return ag_full(t->dtype, t->ndim, t->shape, 1.0);
}
ag_tensor *ag_scalar(ag_dtype dt, double value) { return ag_full(dt, 0, NULL, value); }

static void store(char *p, ag_dtype dt, double v);

ag_tensor *ag_arange(ag_dtype dt, double start, double end, double step) {
    const char *op = "ag_arange";
    if (!isfinite(start) || !isfinite(end) || !isfinite(step) || step == 0 || (end > start && step < 0) ||
        (end < start && step > 0)) {
        ag_error(op, "start %g, end %g, step %g: all must be finite, and step non-zero and point from start to end",
                 start, end, step);
        return NULL;
    }
    double count = ceil((end - start) / step); /* >= 0; inf when end - start or the quotient overflows */
    int64_t n = count < 0x1p62 ? (int64_t)count : -1;
    if (n < 0 || !ag__numel_fits(1, &n)) {
        ag_error(op, "start %g, end %g, step %g: %g elements, more than any tensor can hold", start, end, step, count);
        return NULL;
    }
    if (!check_shape(op, dt, 1, &n)) return NULL;
    ag_tensor *t = ag__new_op(op, dt, 1, &n);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) store(t->data + i * (int64_t)ag_dtype_size(dt), dt, start + (double)i * step);
    return t;
}

ag_tensor *ag_from_buffer(ag_dtype dt, int ndim, const int64_t *shape, const void *data) {
    if (!check_shape("ag_from_buffer", dt, ndim, shape)) return NULL;
    if (ag__shape_numel(ndim, shape) && !data) {
        char b[128];
        ag_error("ag_from_buffer", "data is NULL for shape %s", ag__shape_str(ndim, shape, b));
        return NULL;
    }
    ag_tensor *t = ag__new_op("ag_from_buffer", dt, ndim, shape);
    if (!t) return NULL;
    if (ag_numel(t)) memcpy(t->data, data, (size_t)ag_numel(t) * ag_dtype_size(dt)); /* data may be NULL if empty */
    return t;
}

ag_tensor *ag_wrap(ag_dtype dt, int ndim, const int64_t *shape, void *data) {
    if (!check_shape("ag_wrap", dt, ndim, shape)) return NULL;
    if (!data && ag__shape_numel(ndim, shape) > 0) {
        char b[128];
        ag_error("ag_wrap", "data is NULL for shape %s", ag__shape_str(ndim, shape, b));
        return NULL;
    }
    ag_tensor *t = header();
    if (!t) {
        ag_error("ag_wrap", "cannot allocate a tensor header: out of memory");
        return NULL;
    }
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i]; /* shape may be NULL when ndim == 0 */
    ag__contiguous_strides(ndim, shape, t->stride);
    t->data = data;
    return t;
}

ag_tensor *ag_arena_rewind_keep(ag_arena *a, ag_arena_mark m, ag_tensor *t) {
    const char *op = "ag_arena_rewind_keep";
    if (!a || !ag__check_not_null(op, t)) return NULL;
    if (t->requires_grad) {
        char b[128];
        ag_error(op, "%s requires grad: the graph that computed it may need what a rewind forgets", ag_shape_str(t, b));
        return NULL;
    }
    ag_tensor *c = ag_contiguous(t);
    if (!c) return NULL;
    ag_dtype dt = c->dtype;
    int nd = c->ndim;
    int64_t shape[AG_MAX_DIMS];
    memcpy(shape, c->shape, sizeof shape);
    const char *src = ag__ptr(c);
    size_t bytes = (size_t)ag__shape_numel(nd, shape) * ag_dtype_size(dt);
    char *data = ag__arena_rewind_move(a, m, src, bytes); /* the data first, then its header */
    if (!data) {
        ag_error(op, "cannot allocate %zu bytes to keep %s: out of memory", bytes, ag__shape_str(nd, shape, (char[128]){0}));
        return NULL;
    }
    ag_arena *prev = ag_arena_use(a);
    ag_tensor *k = ag_wrap(dt, nd, shape, data);
    ag_arena_use(prev);
    return k;
}

/* ---- element access ---- */

static int64_t linear_offset(const ag_tensor *t, const int64_t *index) {
    int64_t off = t->offset;
    for (int i = 0; i < t->ndim; i++) off += index[i] * t->stride[i];
    return off;
}

static double load(const char *p, ag_dtype dt) {
    switch (dt) {
    case AG_F32: return *(const float *)p;
    case AG_F64: return *(const double *)p;
    case AG_I32: return *(const int32_t *)p;
    case AG_I64: return (double)*(const int64_t *)p;
    case AG_BOOL: return *(const uint8_t *)p;
    }
    return 0;
}

static void store(char *p, ag_dtype dt, double v) {
    switch (dt) {
    case AG_F32: *(float *)p = (float)v; break;
    case AG_F64: *(double *)p = v; break;
    case AG_I32: *(int32_t *)p = (int32_t)v; break;
    case AG_I64: *(int64_t *)p = (int64_t)v; break;
    case AG_BOOL: *(uint8_t *)p = v != 0; break;
    }
}

/* t alive (ag__check_not_null) and index (NULL for a 0-d t) inside it */
static bool check_index(const char *op, const ag_tensor *t, const int64_t *index) {
    if (!ag__check_not_null(op, t)) return false;
    if (t->ndim > 0 && !index) {
        char b[128];
        ag_error(op, "index is NULL for %s", ag_shape_str(t, b));
        return false;
    }
    for (int i = 0; i < t->ndim; i++)
        if (index[i] < 0 || index[i] >= t->shape[i]) {
            char b[128];
            ag_error(op, "index %lld out of range for dim %d of %s", (long long)index[i], i, ag_shape_str(t, b));
            return false;
        }
    return true;
}

double ag_get(const ag_tensor *t, const int64_t *index) {
    if (!check_index("ag_get", t, index)) return NAN;
    return load(t->data + linear_offset(t, index) * (int64_t)ag_dtype_size(t->dtype), t->dtype);
}

void ag_set(ag_tensor *t, const int64_t *index, double value) {
    if (!check_index("ag_set", t, index)) return;
    store(t->data + linear_offset(t, index) * (int64_t)ag_dtype_size(t->dtype), t->dtype, value);
    ag__bump_version(t);
}

double ag_item(const ag_tensor *t) {
    if (!ag__check_not_null("ag_item", t)) return NAN;
    if (ag_numel(t) != 1) {
        char b[128];
        ag_error("ag_item", "tensor %s has %lld elements, expected 1", ag_shape_str(t, b), (long long)ag_numel(t));
        return NAN;
    }
    return load(ag__ptr(t), t->dtype);
}

/* ---- copy with broadcast and conversion ---- */

typedef struct { ag_dtype dst, src; } conv_ctx;

AG_AVX2_CLONES static void copy_run(int64_t n, char *const *p, const int64_t *s, void *vctx) {
    const conv_ctx *c = vctx;
    size_t es = ag_dtype_size(c->dst);
    if (c->dst == c->src && s[0] == (int64_t)es && s[1] == (int64_t)es) {
        memcpy(p[0], p[1], (size_t)n * es);
    } else if (c->dst == c->src) {
        for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], es);
    } else if ((c->dst == AG_I64 || c->dst == AG_I32) && (c->src == AG_I64 || c->src == AG_I32)) {
        for (int64_t i = 0; i < n; i++) {
            int64_t v = c->src == AG_I64 ? *(int64_t *)(p[1] + i * s[1]) : *(int32_t *)(p[1] + i * s[1]);
            if (c->dst == AG_I64) *(int64_t *)(p[0] + i * s[0]) = v;
            else *(int32_t *)(p[0] + i * s[0]) = (int32_t)v;
        }
    } else {
        for (int64_t i = 0; i < n; i++) store(p[0] + i * s[0], c->dst, load(p[1] + i * s[1], c->src));
    }
}

bool ag__copy(ag_tensor *dst, const ag_tensor *src) {
    if (!ag__check_not_null("ag_copy_", dst) || !ag__check_not_null("ag_copy_", src)) return false;
    int64_t bs[2][AG_MAX_DIMS];
    char b1[128], b2[128];
    if (src->ndim > dst->ndim) goto bad;
    for (int i = 0; i < src->ndim; i++) {
        int64_t ss = src->shape[src->ndim - 1 - i], ds = dst->shape[dst->ndim - 1 - i];
        if (ss != ds && ss != 1) goto bad;
    }
    if (!(src = ag__writable("ag_copy_", dst, src))) return false;
    ag__bcast_bstrides(dst, dst->ndim, dst->shape, bs[0]);
    ag__bcast_bstrides(src, dst->ndim, dst->shape, bs[1]);
    conv_ctx c = {dst->dtype, src->dtype};
    char *base[2] = {ag__ptr(dst), ag__ptr(src)};
    ag__foreach(dst->ndim, dst->shape, 2, base, (const int64_t(*)[AG_MAX_DIMS])bs, copy_run, &c);
    return true;
bad:
    ag_error("ag_copy_", "source %s cannot be broadcast to destination %s", ag_shape_str(src, b1),
             ag_shape_str(dst, b2));
    return false;
}

void ag_copy_(ag_tensor *dst, const ag_tensor *src) {
    if (ag__copy(dst, src)) ag__bump_version(dst);
}

void ag_to_buffer(const ag_tensor *t, ag_dtype dt, void *out) {
    if (!ag__check_not_null("ag_to_buffer", t)) return;
    ag_tensor *dst = ag_wrap(dt, t->ndim, t->shape, out); /* reports NULL out */
    if (dst) ag__copy(dst, t);
}

/* ---- fills ---- */

typedef struct { ag_dtype dt; double v; } fill_ctx;

static void fill_run(int64_t n, char *const *p, const int64_t *s, void *ctx) {
    const fill_ctx *c = ctx;
    for (int64_t i = 0; i < n; i++) store(p[0] + i * s[0], c->dt, c->v);
}

bool ag__fill(ag_tensor *t, double value) {
    if (!ag__check_not_null("ag_fill_", t) || !ag__writable("ag_fill_", t, NULL)) return false;
    fill_ctx c = {t->dtype, value};
    int64_t bs[1][AG_MAX_DIMS];
    ag__bcast_bstrides(t, t->ndim, t->shape, bs[0]);
    char *base[1] = {ag__ptr(t)};
    ag__foreach(t->ndim, t->shape, 1, base, (const int64_t(*)[AG_MAX_DIMS])bs, fill_run, &c);
    return true;
}

void ag_fill_(ag_tensor *t, double value) {
    if (ag__fill(t, value)) ag__bump_version(t);
}

/* Random fills draw numel values in row-major order of t (so a view and a contiguous tensor
 * of the same shape get the same numbers) and write them through t's strides. */
static bool fill_from_f64(ag_tensor *t, const double *v) {
    ag_tensor *src = ag_wrap(AG_F64, t->ndim, t->shape, (void *)v);
    return ag__copy(t, src);
}

/* n doubles of scratch for the draws of op, from a (after a mark: a model's construction
 * leaves nothing behind); NULL after reporting */
static double *draws_scratch(const char *op, ag_arena *a, int64_t n) {
    double *v = ag_arena_alloc(a, (size_t)n * sizeof(double));
    if (!v) ag_error(op, "cannot allocate %zu bytes for %lld draws: out of memory", (size_t)n * sizeof(double), (long long)n);
    return v;
}

static bool uniform_fill(ag_rng *rng, ag_tensor *t, double lo, double hi) {
    if (!ag__check_not_null("ag_uniform_", t)) return false;
    int64_t n = ag_numel(t);
    ag_arena *a = ag_arena_current();
    ag_arena_mark m = ag_arena_get_mark(a);
    double *v = draws_scratch("ag_uniform_", a, n);
    if (!v) return false;
    ag_rng_uniform_f64(rng, n, v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = lo + (hi - lo) * v[i];
        /* rounding to f32 must not reach hi */
        if (t->dtype == AG_F32 && (float)v[i] >= (float)hi && hi > lo) v[i] = nextafterf((float)hi, (float)lo);
    }
    bool ok = fill_from_f64(t, v);
    ag_arena_rewind(a, m);
    return ok;
}

static bool normal_fill(ag_rng *rng, ag_tensor *t, double mean, double std) {
    if (!ag__check_not_null("ag_normal_", t)) return false;
    int64_t n = ag_numel(t);
    ag_arena *a = ag_arena_current();
    ag_arena_mark m = ag_arena_get_mark(a);
    double *v = draws_scratch("ag_normal_", a, n);
    if (!v) return false;
    ag_rng_normal_f64(rng, n, v);
    for (int64_t i = 0; i < n; i++) v[i] = mean + std * v[i];
    bool ok = fill_from_f64(t, v);
    ag_arena_rewind(a, m);
    return ok;
}

void ag_uniform_(ag_rng *rng, ag_tensor *t, double lo, double hi) {
    if (uniform_fill(rng, t, lo, hi)) ag__bump_version(t);
}

void ag_normal_(ag_rng *rng, ag_tensor *t, double mean, double std) {
    if (normal_fill(rng, t, mean, std)) ag__bump_version(t);
}

ag_tensor *ag_uniform(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape, double lo, double hi) {
    if (!check_shape("ag_uniform", dt, ndim, shape)) return NULL;
    if (dt != AG_F32 && dt != AG_F64) {
        ag_error("ag_uniform", "dtype %s: random tensors are f32 or f64", ag_dtype_name(dt));
        return NULL;
    }
    ag_tensor *t = ag__new_op("ag_uniform", dt, ndim, shape);
    return t && uniform_fill(rng, t, lo, hi) ? t : NULL;
}

ag_tensor *ag_rand(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape) {
    return ag_uniform(rng, dt, ndim, shape, 0.0, 1.0);
}

ag_tensor *ag_randn(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape) {
    if (!check_shape("ag_randn", dt, ndim, shape)) return NULL;
    if (dt != AG_F32 && dt != AG_F64) {
        ag_error("ag_randn", "dtype %s: random tensors are f32 or f64", ag_dtype_name(dt));
        return NULL;
    }
    ag_tensor *t = ag__new_op("ag_randn", dt, ndim, shape);
    return t && normal_fill(rng, t, 0.0, 1.0) ? t : NULL;
}

/* ---- printing: tensor([[...]], shape=(2,3), dtype=f32), summarised past 1000 elements ---- */

static void print_value(FILE *f, const ag_tensor *t, const char *p) {
    double v = load(p, t->dtype);
    switch (t->dtype) {
    case AG_F32:
    case AG_F64: fprintf(f, "%10.4f", v); break;
    case AG_BOOL: fprintf(f, "%s", v != 0 ? " True" : "False"); break;
    default: fprintf(f, "%6lld", (long long)v);
    }
}

static void print_rec(FILE *f, const ag_tensor *t, int dim, int64_t off, int indent, bool summarise) {
    size_t es = ag_dtype_size(t->dtype);
    if (t->ndim == 0) {
        print_value(f, t, t->data + off * (int64_t)es);
        return;
    }
    fputc('[', f);
    int64_t n = t->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        if (summarise && n > 6 && i == 3) {
            fprintf(f, dim == t->ndim - 1 ? "    ..., " : "...,\n%*s", dim == t->ndim - 1 ? 0 : indent + 1, "");
            i = n - 3;
        }
        int64_t o = off + i * t->stride[dim];
        if (dim == t->ndim - 1) print_value(f, t, t->data + o * (int64_t)es);
        else print_rec(f, t, dim + 1, o, indent + 1, summarise);
        if (i + 1 < n) {
            if (dim == t->ndim - 1) fputs(", ", f);
            else {
                fputc(',', f);
                for (int k = 0; k < t->ndim - 1 - dim; k++) fputc('\n', f);
                fprintf(f, "%*s", indent + 1, "");
            }
        }
    }
    fputc(']', f);
}

void ag_fprint(FILE *f, const ag_tensor *t, const char *name) {
    char b[128];
    if (t && !ag__check_not_null("ag_fprint", t)) return;
    const char *lead = "tensor(";
    int indent = (int)strlen(lead);
    if (name) {
        fprintf(f, "%s = ", name);
        indent += (int)strlen(name) + 3;
    }
    if (!t) {
        fprintf(f, "NULL\n");
        return;
    }
    fputs(lead, f);
    print_rec(f, t, 0, t->offset, indent, ag_numel(t) > 1000);
    fprintf(f, ", shape=%s, dtype=%s)\n", ag_shape_str(t, b), ag_dtype_name(t->dtype));
}

void ag_print(const ag_tensor *t, const char *name) { ag_fprint(stdout, t, name); }
