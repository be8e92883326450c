/* The masked softmax (PyTorch 1.13 mask semantics, see attention.h) and the masks of
 * attention: masked positions become -inf, a row with nothing left becomes zeros (not NaN),
 * and the backward of a row is y*(g - Σ g*y), which is zero wherever y is. The rows go through
 * the softmax row kernel of tensor/softmax_rows.inc, which the fused attention shares. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "attention.h"
#include "../nn_internal.h"

/* declared in nn_internal.h */
int ag__check_softmax_mask(const char *op, const ag_tensor *mask, ag_dtype dt, int ndim, const int64_t *shape,
                           const char *what) {
    if (!mask) return AG_SOFTMAX_MASK_NONE;
    char b1[128], b2[128];
    if (mask->dtype != AG_BOOL && mask->dtype != dt) {
        ag_error(op, "mask %s of dtype %s: expected bool or %s (the scores' dtype)", ag_shape_str(mask, b1),
                 ag_dtype_name(mask->dtype), ag_dtype_name(dt));
        return -1;
    }
    bool ok = mask->ndim <= ndim;
    for (int i = 0; ok && i < mask->ndim; i++) {
        int64_t m = mask->shape[mask->ndim - 1 - i], s = shape[ndim - 1 - i];
        ok = m == s || m == 1;
    }
    if (!ok) {
        ag_error(op, "mask %s is not broadcastable to the %s %s", ag_shape_str(mask, b1), what,
                 ag__shape_str(ndim, shape, b2));
        return -1;
    }
    return mask->dtype == AG_BOOL ? AG_SOFTMAX_MASK_BOOL : AG_SOFTMAX_MASK_ADD;
}

/* ---- masked softmax ---- */

/* Rows of x along dim: element offsets of row r in x and in a contiguous tensor of x's shape,
 * and byte offset in the broadcast mask. */
typedef struct {
    int nd;
    int64_t shape[AG_MAX_DIMS], xst[AG_MAX_DIMS], cst[AG_MAX_DIMS], mst[AG_MAX_DIMS];
} rows_t;

static void rows_init(rows_t *r, const ag_tensor *x, const ag_tensor *mask, int dim) {
    int64_t cst[AG_MAX_DIMS], mb[AG_MAX_DIMS] = {0};
    ag__contiguous_strides(x->ndim, x->shape, cst);
    if (mask) ag__bcast_bstrides(mask, x->ndim, x->shape, mb);
    r->nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == dim) continue;
        r->shape[r->nd] = x->shape[d];
        r->xst[r->nd] = x->stride[d];
        r->cst[r->nd] = cst[d];
        r->mst[r->nd] = mb[d];
        r->nd++;
    }
}

static void rows_at(const rows_t *r, int64_t row, int64_t *xo, int64_t *co, int64_t *mo) {
    *xo = *co = *mo = 0;
    for (int d = r->nd - 1; d >= 0; d--) {
        int64_t i = row % r->shape[d];
        row /= r->shape[d];
        *xo += i * r->xst[d];
        *co += i * r->cst[d];
        *mo += i * r->mst[d];
    }
}

/* y = softmax(x + mask) along dim, row by row (y contiguous of x's shape) */
static void masked_softmax_rows(const ag_tensor *x, const ag_tensor *mask, int mk, int dim, ag_tensor *y) {
    rows_t r;
    rows_init(&r, x, mask, dim);
    int64_t n = x->shape[dim], rows = ag_numel(x) / n, ys = y->stride[dim], xs = x->stride[dim];
    int64_t ms = 0;
    if (mask) {
        int64_t mb[AG_MAX_DIMS];
        ag__bcast_bstrides(mask, x->ndim, x->shape, mb);
        ms = mb[dim];
    }
    const char *xp = ag__ptr(x), *mp = mask ? ag__ptr(mask) : NULL;
    char *yp = ag__ptr(y);
#pragma omp parallel for if (rows * n > AG_PAR_THRESHOLD) schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        int64_t xo, co, mo;
        rows_at(&r, row, &xo, &co, &mo);
        ag__softmax_mask m = {(ag__softmax_mask_kind)mk, mp ? mp + mo : NULL, ms, n};
        if (x->dtype == AG_F32)
            ag__softmax_row_f32(false, (const float *)xp + xo, xs, (float *)yp + co, ys, n,
                                &m);
        else
            ag__softmax_row_f64(false, (const double *)xp + xo, xs, (double *)yp + co, ys,
                                n, &m);
    }
}

/* dx = (acc: dx +) y*(g - Σ g*y) along dim; y, g, dx contiguous of one shape */
static void masked_softmax_rows_bwd(const ag_tensor *y, const ag_tensor *g, ag_tensor *dx, int dim, bool acc) {
    rows_t r;
    rows_init(&r, y, NULL, dim);
    int64_t n = y->shape[dim], rows = ag_numel(y) / n, st = y->stride[dim];
    const char *yp = ag__ptr(y), *gp = ag__ptr(g);
    char *dp = ag__ptr(dx);
#pragma omp parallel for if (rows * n > AG_PAR_THRESHOLD) schedule(static)
    for (int64_t row = 0; row < rows; row++) {
        int64_t xo, co, mo;
        rows_at(&r, row, &xo, &co, &mo);
        if (y->dtype == AG_F32)
            ag__softmax_row_bwd_f32(false, (const float *)yp + co, (const float *)gp + co,
                                    (float *)dp + co, n, st, acc);
        else
            ag__softmax_row_bwd_f64(false, (const double *)yp + co, (const double *)gp + co,
                                    (double *)dp + co, n, st, acc);
    }
}

/* dscores = y*(g - Σ g*y) along dim; an additive mask gets the same gradient, summed over the
 * dims it was broadcast along. y, g and the grad buffers are contiguous of one shape. */
static void masked_softmax_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *mask = n->in[1], *y = n->out, *g = y->grad;
    int dim = (int)n->ctx.i[0];
    ag_tensor *dx = ag_grad_buffer(x);
    bool mask_grad = mask && mask->dtype != AG_BOOL && mask->requires_grad;
    if (!dx && !mask_grad) return;
    ag_tensor *ds = mask_grad ? ag__new(y->dtype, y->ndim, y->shape) : dx;
    masked_softmax_rows_bwd(y, g, ds, dim, !mask_grad);
    if (mask_grad) {
        if (dx) ag__add_into(dx, ds);
        ag_accum_grad(mask, ds);
    }
}
static const ag_op MASKED_SOFTMAX = {"ag_masked_softmax", masked_softmax_backward, AG_SAVES_OUTPUT};

ag_tensor *ag_masked_softmax(ag_tensor *scores, ag_tensor *mask, int dim) {
    const char *op = "ag_masked_softmax";
    if (!ag__check_float(op, scores)) return NULL;
    int d = ag_wrap_dim(op, scores, dim);
    if (d < 0) return NULL;
    int mk = ag__check_softmax_mask(op, mask, scores->dtype, scores->ndim, scores->shape, "scores");
    if (mk < 0) return NULL;
    ag_tensor *y = ag__new(scores->dtype, scores->ndim, scores->shape);
    if (ag_numel(y) > 0) masked_softmax_rows(scores, mask, mk, d, y);
    ag_node *n = ag_finish(&MASKED_SOFTMAX, y, 2, (ag_tensor *[]){scores, mask});
    if (n) n->ctx.i[0] = d;
    return y;
}

/* ---- masks ---- */

static ag_tensor *neg_inf_where(ag_tensor *m, ag_dtype dt) {
    return ag_where(m, ag_scalar(dt, -INFINITY), ag_scalar(dt, 0));
}

ag_tensor *ag_attention_mask(ag_tensor *attn_mask, ag_tensor *key_padding_mask, int64_t B, int64_t H) {
    const char *op = "ag_attention_mask";
    ag_tensor *am = attn_mask, *kpm = key_padding_mask;
    char b1[128], b2[128];
    for (int i = 0; i < 2; i++) {
        ag_tensor *m = i ? kpm : am;
        if (m && m->dtype != AG_BOOL && m->dtype != AG_F32 && m->dtype != AG_F64) {
            ag_error(op, "%s %s of dtype %s: expected bool, f32 or f64", i ? "key_padding_mask" : "attn_mask",
                     ag_shape_str(m, b1), ag_dtype_name(m->dtype));
            return NULL;
        }
    }
    if (am) {
        bool ok = am->ndim == 2 || (am->ndim == 3 && am->shape[0] == B * H);
        if (!ok || (kpm && kpm->ndim == 2 && kpm->shape[1] != am->shape[am->ndim - 1])) {
            ag_error(op, "attn_mask %s, key_padding_mask %s with B=%lld, H=%lld: expected (L,S) or (B*H,L,S) and (B,S)",
                     ag_shape_str(am, b1), ag_shape_str(kpm, b2), (long long)B, (long long)H);
            return NULL;
        }
        int64_t L = am->shape[am->ndim - 2], S = am->shape[am->ndim - 1];
        am = am->ndim == 2 ? ag_reshape(am, AG_SHAPE(1, 1, L, S)) : ag_reshape(am, AG_SHAPE(B, H, L, S));
    }
    if (kpm) {
        if (kpm->ndim != 2 || kpm->shape[0] != B) {
            ag_error(op, "key_padding_mask %s with B=%lld: expected (B,S)", ag_shape_str(kpm, b1), (long long)B);
            return NULL;
        }
        kpm = ag_reshape(kpm, AG_SHAPE(B, 1, 1, kpm->shape[1]));
    }
    if (!am || !kpm) return am ? am : kpm;
    if (am->dtype == AG_BOOL && kpm->dtype == AG_BOOL) return ag_logical_or(am, kpm);
    if (am->dtype != AG_BOOL && kpm->dtype == AG_BOOL) /* torch: attn_mask.masked_fill(kpm, -inf) */
        return ag_where(kpm, ag_scalar(am->dtype, -INFINITY), am);
    if (am->dtype == AG_BOOL) am = neg_inf_where(am, kpm->dtype);
    return ag_add(am, kpm);
}

static bool check_len(const char *op, int64_t L) {
    if (L >= 0) return true;
    ag_error(op, "L = %lld: must be >= 0", (long long)L);
    return false;
}

ag_tensor *ag_square_subsequent_mask(int64_t L, ag_dtype dt) {
    const char *op = "ag_square_subsequent_mask";
    if (!check_len(op, L)) return NULL;
    if (dt != AG_F32 && dt != AG_F64) {
        ag_error(op, "dtype %s: expected f32 or f64", ag_dtype_name(dt));
        return NULL;
    }
    return neg_inf_where(ag_causal_bool_mask(L), dt);
}

ag_tensor *ag_causal_bool_mask(int64_t L) {
    if (!check_len("ag_causal_bool_mask", L)) return NULL;
    ag_tensor *m = ag__new(AG_BOOL, 2, (int64_t[]){L, L});
    uint8_t *p = (uint8_t *)m->data;
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++) p[i * L + j] = j > i;
    return m;
}
