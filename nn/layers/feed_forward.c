/* The Transformer's feed-forward block as one op: linear, relu, dropout, linear, with the
 * hidden activation kept packed (only its nonzeros) between forward and backward. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"
#include "layers_internal.h"

/* Rows of the hidden activation computed at a time, forward and backward: about 512 KiB of f32
 * for the activation (and as much for its gradient) whatever the batch, but at least 512 rows:
 * the weight gradients are products over the block's rows, and shallower products keep a team
 * of threads busy far less well. Fixed by the shape alone, so results do not depend on the
 * threads. */
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
    ag__operand(x, m, d, &xm);
    ag__operand(w1, ff, d, &w1m);
    ag__operand(w2, out, ff, &w2m);
    bool fresh; /* x's gradient rows are each written by one block: a new buffer is assigned */
    ag_tensor *gx = ag__grad_buffer_to_write(x, &fresh);
    char *dx = gx ? ag__ptr(gx) : NULL, *dw1 = ag__grad_ptr(w1), *db1 = ag__grad_ptr(b1), *dw2 = ag__grad_ptr(w2);
    char *db2 = ag__grad_ptr(n->in[4]);
    ag_tensor *a = ag__new(dt, AG_SHAPE(rows < m ? rows : m, ff)), *da = ag__new(dt, a->ndim, a->shape);
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
        int64_t r = m - r0 < rows ? m - r0 : rows;
        mat xr = rows_from(xm, r0, es);
        const char *gr = ag__ptr(g) + (size_t)(r0 * out) * es;
        packed += ag__nz_unpack(dt, nz, r0 * ff, r * ff, vals + (size_t)packed * es, ag__ptr(a));
        ag__linear_bwd(dt, gr, (mat){ag__ptr(a), false, max1(ff)}, w2m, r, ff, out, ag__ptr(da), true, dw2, db2);
        ag__drop_bwd(dt, NULL, ag__ptr(a), ag__ptr(da), ag__ptr(da), r * ff, scale, false);
        ag__linear_bwd(dt, ag__ptr(da), xr, w1m, r, d, ff, dx ? dx + (size_t)(r0 * d) * es : NULL, fresh, dw1, db1);
    }
}
/* x (dw1), w1 (dx), w2 (da): b1 and b2 are not read */
static const ag_op FEED_FORWARD = {"ag_feed_forward", feed_forward_backward,
                                   AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(3)};

/* ag_feed_forward, the hidden activation's dropout mask placed by hidden (NULL: the samples along
 * x's dim 0) */
static ag_tensor *feed_forward(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2, double p,
                               bool training, ag_rng *rng, const ag__mask_place *hidden) {
    const char *op = "ag_feed_forward";
    if (!ag__check_float(op, x) || !ag__check_float(op, w1) || !ag__check_float(op, w2) ||
        (b1 && !ag__check_float(op, b1)) || (b2 && !ag__check_float(op, b2)) || !ag__check_p(op, x, p))
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
    ag_rng *r = rng ? rng : ag_rng_global();
    shape[x->ndim - 1] = ff; /* the hidden activation's, its samples along x's dim 0 */
    ag__mask_place place = hidden ? *hidden : ag__place_dense(x->ndim, shape, 0);
    if (p > 0 && p < 1 && !ag__place_bind(op, &place, r, x)) return NULL;
    shape[x->ndim - 1] = out;
    ag_tensor *y = ag__new_op(op, dt, x->ndim, shape);
    bool record = ag_any_requires_grad(5, (ag_tensor *[]){x, w1, b1, w2, b2});
    ag_tensor *nz = record ? ag__new_op(op, AG_BOOL, 1, (int64_t[]){(m * ff + 7) / 8}) : NULL;
    if (!y || (record && !nz)) return NULL;
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena); /* the dense hidden activation is scratch */
    mat xm, w1m, w2m;
    ag__operand(x, m, d, &xm);
    ag__operand(w1, ff, d, &w1m);
    ag__operand(w2, out, ff, &w2m);
    size_t es = ag_dtype_size(dt);
    int64_t rows = ff_block_rows(ff), packed = 0;
    ag_tensor *a = ag__new_op(op, dt, AG_SHAPE(rows < m ? rows : m, ff));
    /* room for every hidden value; the packed (nonzero) ones stay */
    char *vals = a && record ? ag__alloc(op, arena, (size_t)(m * ff) * es, "the packed hidden activation") : NULL;
    if (!a || (record && !vals)) {
        ag_arena_rewind(arena, mark);
        return NULL;
    }
    for (int64_t r0 = 0; r0 < m; r0 += rows) {
        int64_t n = m - r0 < rows ? m - r0 : rows;
        ag__linear_fwd(dt, rows_from(xm, r0, es), w1m, b1, n, d, ff, ag__ptr(a));
        ag__drop_apply(dt, ag__ptr(a), ag__ptr(a), n * ff, r0 * ff, p, true, &place, r, NULL);
        if (record)
            packed += ag__nz_pack(dt, ag__ptr(a), n * ff, r0 * ff, (uint8_t *)ag__ptr(nz), vals + (size_t)packed * es);
        ag__linear_fwd(dt, (mat){ag__ptr(a), false, max1(ff)}, w2m, b2, n, ff, out,
                       ag__ptr(y) + (size_t)(r0 * out) * es);
    }
    ag__drop_advance(r, &place, p);
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

ag_tensor *ag_feed_forward(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2, double p,
                           bool training, ag_rng *rng) {
    return feed_forward(x, w1, b1, w2, b2, p, training, rng, NULL);
}
ag_tensor *ag__feed_forward_placed(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2,
                                   double p, bool training, ag_rng *rng, const ag__mask_place *hidden) {
    return feed_forward(x, w1, b1, w2, b2, p, training, rng, hidden);
}
