/* Packing the rows of a padded batch (nn_internal.h): ag__take_rows and ag__put_rows, the two
 * ops the Transformer's skip_padding runs its layers between, and ag__live_rows, which finds
 * the rows from a key padding mask. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "../nn_internal.h"

/* rows of a tensor seen as (R, D): D its last dim, R the product of the others */
static int64_t row_len(const ag_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

bool ag__check_rows(const char *op, const int64_t *rows, int64_t n, int64_t R) {
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= R) {
            ag_error(op, "row %lld is %lld, outside the %lld rows", (long long)i, (long long)rows[i], (long long)R);
            return false;
        }
    return true;
}

static inline void add_f32(float *d, const float *s, int64_t D) {
    for (int64_t j = 0; j < D; j++) d[j] += s[j];
}
static inline void add_f64(double *d, const double *s, int64_t D) {
    for (int64_t j = 0; j < D; j++) d[j] += s[j];
}

/* the rows are distinct, so the additions never meet */
void ag__rows_add(ag_dtype dt, char *dst, const char *src, const int64_t *rows, int64_t n, int64_t D, bool scatter) {
    size_t row_bytes = (size_t)D * ag_dtype_size(dt);
    int64_t par_work = n * D;
    AG_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        char *d = dst + (size_t)(scatter ? rows[i] : i) * row_bytes;
        const char *s = src + (size_t)(scatter ? i : rows[i]) * row_bytes;
        if (dt == AG_F32) add_f32((float *)d, (const float *)s, D);
        else add_f64((double *)d, (const double *)s, D);
    }
}

void ag__rows_copy(char *dst, const char *src, const int64_t *rows, int64_t n, size_t row_bytes, bool scatter) {
    int64_t par_work = n * (int64_t)row_bytes / 4;
    AG_PAR_FOR
    for (int64_t i = 0; i < n; i++)
        memcpy(dst + (size_t)(scatter ? rows[i] : i) * row_bytes, src + (size_t)(scatter ? i : rows[i]) * row_bytes,
               row_bytes);
}

bool ag__zero_other_rows(char *y, const int64_t *rows, int64_t n, int64_t R, size_t row_bytes) {
    ag_arena *a = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(a);
    uint8_t *kept = ag__alloc("ag__put_rows", a, (size_t)R + 1, "the rows written");
    if (!kept) return false;
    memset(kept, 0, (size_t)R);
    for (int64_t i = 0; i < n; i++) kept[rows[i]] = 1;
    for (int64_t r = 0; r < R;) { /* runs of rows not written */
        if (kept[r]) {
            r++;
            continue;
        }
        int64_t e = r;
        while (e < R && !kept[e]) e++;
        memset(y + (size_t)r * row_bytes, 0, (size_t)(e - r) * row_bytes);
        r = e;
    }
    ag_arena_rewind(a, mark);
    return true;
}

/* ---- take ---- */

static void take_rows_backward(ag_node *n) { /* dx[rows[i]] += dy[i] */
    ag_tensor *dx = ag_grad_buffer(n->in[0]), *dy = n->out->grad;
    if (dx) ag__rows_add(dy->dtype, ag__ptr(dx), ag__ptr(dy), n->extra, n->out->shape[0], row_len(dy), true);
}
static const ag_op TAKE_ROWS = {"ag__take_rows", take_rows_backward, AG_SAVES_NONE};

ag_tensor *ag__take_rows(ag_tensor *x, const int64_t *rows, int64_t n) {
    const char *op = "ag__take_rows";
    if (!ag__check_float(op, x)) return NULL;
    int64_t D = row_len(x), R = D ? ag_numel(x) / D : 0;
    if (!ag__check_rows(op, rows, n, R)) return NULL;
    ag_tensor *xc = ag__dense(x), *y = ag__new_op(op, x->dtype, 2, (int64_t[]){n, D});
    if (!xc || !y) return NULL;
    ag__rows_copy(ag__ptr(y), ag__ptr(xc), rows, n, (size_t)D * ag_dtype_size(x->dtype), false);
    ag_node *nd = ag_finish(&TAKE_ROWS, y, 1, &x);
    if (nd) nd->extra = (void *)rows;
    return y;
}

/* ---- put ---- */

static void put_rows_backward(ag_node *n) { /* dx[i] += dy[rows[i]] */
    ag_tensor *dx = ag_grad_buffer(n->in[0]), *dy = n->out->grad;
    if (dx) ag__rows_add(dy->dtype, ag__ptr(dx), ag__ptr(dy), n->extra, n->in[0]->shape[0], row_len(dy), false);
}
static const ag_op PUT_ROWS = {"ag__put_rows", put_rows_backward, AG_SAVES_NONE};

ag_tensor *ag__put_rows(ag_tensor *x, const int64_t *rows, int ndim, const int64_t *shape) {
    const char *op = "ag__put_rows";
    char b[128];
    if (!ag__check_float(op, x)) return NULL;
    int64_t R = 1;
    for (int d = 0; d < ndim - 1; d++) R *= shape[d];
    if (x->ndim != 2 || ndim < 1 || shape[ndim - 1] != x->shape[1]) {
        ag_error(op, "x %s: expected (n, %lld) rows of the output's last dim", ag_shape_str(x, b),
                 (long long)(ndim ? shape[ndim - 1] : 0));
        return NULL;
    }
    if (!ag__check_rows(op, rows, x->shape[0], R)) return NULL;
    ag_tensor *xc = ag__dense(x), *y = ag__new_op(op, x->dtype, ndim, shape);
    size_t row_bytes = (size_t)x->shape[1] * ag_dtype_size(x->dtype);
    if (!xc || !y || !ag__zero_other_rows(ag__ptr(y), rows, x->shape[0], R, row_bytes)) return NULL;
    ag__rows_copy(ag__ptr(y), ag__ptr(xc), rows, x->shape[0], row_bytes, true);
    ag_node *nd = ag_finish(&PUT_ROWS, y, 1, &x);
    if (nd) nd->extra = (void *)rows;
    return y;
}

/* ---- the rows a key padding mask leaves ---- */

/* is element e of a dense key padding mask padding: bool true or float -inf */
static bool padded_at(const ag_tensor *m, int64_t e) {
    const char *p = ag__ptr(m);
    return m->dtype == AG_BOOL  ? ((const uint8_t *)p)[e] != 0
           : m->dtype == AG_F32 ? ((const float *)p)[e] == -INFINITY
                                : ((const double *)p)[e] == -INFINITY;
}

bool ag__live_rows(ag_tensor *kpm, bool batch_first, ag__rowset *r) {
    int64_t N = kpm->shape[0], L = kpm->shape[1];
    ag_tensor *m = ag__dense(kpm);
    int64_t *bf = m ? ag_arena_alloc(ag_arena_current(), sizeof(int64_t) * (size_t)(N * L + 1)) : NULL;
    if (!bf) return false; /* no memory for the list: every row is computed (the same result) */
    int64_t n = 0;
    for (int64_t e = 0; e < N * L; e++)
        if (!padded_at(m, e)) bf[n++] = e;
    if (n == N * L || n == 0) return false; /* nothing to skip, or nothing left */
    r->bf = bf;
    r->n = n;
    r->N = N;
    r->L = L;
    r->src = bf;
    if (!batch_first) { /* the same positions in (L, N) order */
        int64_t *src = ag_arena_alloc(ag_arena_current(), sizeof(int64_t) * (size_t)(n + 1));
        if (!src) return false;
        for (int64_t i = 0; i < n; i++) src[i] = bf[i] % L * N + bf[i] / L;
        r->src = src;
    }
    return true;
}

bool ag__padding_covers(ag_tensor *a, ag_tensor *b) {
    if (!b) return true;
    if (!a || a->ndim != b->ndim || ag_numel(a) != ag_numel(b)) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    ag_tensor *ad = ag__dense(a), *bd = ag__dense(b);
    for (int64_t e = 0; e < ag_numel(b); e++)
        if (padded_at(bd, e) && !padded_at(ad, e)) return false;
    return true;
}
