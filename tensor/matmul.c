/* torch.matmul through the library's GEMMs (tensor/gemm.h, with cblas_?gemm's arguments).
 * Every operand, including the gradient buffers written in backward, is described as a stack
 * of strided matrices ("mat"); a matrix whose rows or columns are unit-stride goes to the GEMM
 * as it lies (NoTrans or Trans with its leading dimension), so transposed views cost nothing.
 * Only a matrix with neither layout (expanded or strided inner dims) is copied first. */
#include <limits.h>
#include <string.h>

#include "internal.h"

/* ---- shapes ---- */

/* The broadcast problem: out[batch] = A[batch] @ B[batch] with A (m,k), B (k,n). A 1-d left
 * operand is a (1,k) row, a 1-d right operand a (k,1) column, and the inserted dim is dropped
 * from the result, as torch does. */
typedef struct {
    bool a1, b1;                    /* operand was 1-d */
    int nb;                         /* batch dims */
    int64_t bshape[AG_MAX_DIMS];
    int64_t m, k, n;
    int ondim;
    int64_t oshape[AG_MAX_DIMS];
} geom;

/* which matrix dims a tensor lacks: a 1-d left operand has no row dim, a 1-d right one no col */
enum { FULL = 0, NO_ROW = 1, NO_COL = 2 };

static bool plan_shapes(ag_tensor *a, ag_tensor *b, geom *g) {
    const char *op = "ag_matmul";
    if (!ag__check_not_null(op, a) || !ag__check_not_null(op, b)) return false;
    char s1[128], s2[128], s3[128], s4[128];
    ag_shape_str(a, s1);
    ag_shape_str(b, s2);
    if (a->dtype != b->dtype) {
        ag_error(op, "%s %s @ %s %s: dtypes differ (convert with ag_to)", s1, ag_dtype_name(a->dtype), s2,
                 ag_dtype_name(b->dtype));
        return false;
    }
    if (a->dtype != AG_F32 && a->dtype != AG_F64) {
        ag_error(op, "%s @ %s: dtype %s is not supported (f32 or f64 only)", s1, s2, ag_dtype_name(a->dtype));
        return false;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        ag_error(op, "%s @ %s: both operands need at least 1 dim (use ag_mul for a 0-d operand)", s1, s2);
        return false;
    }
    g->a1 = a->ndim == 1;
    g->b1 = b->ndim == 1;
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[g->b1 ? 0 : b->ndim - 2];
    if (ka != kb) {
        ag_error(op, "%s @ %s: inner dims %lld and %lld differ", s1, s2, (long long)ka, (long long)kb);
        return false;
    }
    g->m = g->a1 ? 1 : a->shape[a->ndim - 2];
    g->k = ka;
    g->n = g->b1 ? 1 : b->shape[b->ndim - 1];
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    g->nb = na > nbb ? na : nbb;
    for (int i = 0; i < g->nb; i++) {
        int ia = na - g->nb + i, ib = nbb - g->nb + i;
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            ag_error(op, "%s @ %s: batch dims %s and %s cannot be broadcast", s1, s2, ag__shape_str(na, a->shape, s3),
                     ag__shape_str(nbb, b->shape, s4));
            return false;
        }
        g->bshape[i] = sa == 1 ? sb : sa;
    }
    g->ondim = g->nb;
    memcpy(g->oshape, g->bshape, sizeof(int64_t) * (size_t)g->nb);
    if (!g->a1) g->oshape[g->ondim++] = g->m;
    if (!g->b1) g->oshape[g->ondim++] = g->n;
    return true;
}

/* ---- strided matrix stacks ---- */

typedef struct {
    char *p;                  /* element (0,0) of batch 0 */
    int64_t r, c, rs, cs;     /* rows, cols, and their strides in elements */
    int64_t bs[AG_MAX_DIMS];  /* stride along each broadcast batch dim; 0 where broadcast */
} mat;

/* t (an operand, the output, or a gradient of one of them) as a matrix stack over g's batch */
static mat mat_of(const ag_tensor *t, int missing, const geom *g) {
    mat x = {.p = ag__ptr(t)};
    int d = t->ndim;
    if (missing & NO_COL) {
        x.c = 1;
    } else {
        d--;
        x.c = t->shape[d];
        x.cs = t->stride[d];
    }
    if (missing & NO_ROW) {
        x.r = 1;
    } else {
        d--;
        x.r = t->shape[d];
        x.rs = t->stride[d];
    }
    for (int i = 0; i < g->nb; i++) {
        int it = d - g->nb + i;
        x.bs[i] = it >= 0 && t->shape[it] == g->bshape[i] && g->bshape[i] != 1 ? t->stride[it] : 0;
    }
    return x;
}

static mat transposed(mat x) {
    int64_t r = x.r, rs = x.rs;
    x.r = x.c;
    x.rs = x.cs;
    x.c = r;
    x.cs = rs;
    return x;
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* BLAS reads an r×c matrix row-major as it lies (NoTrans, ld = row stride) or as the
 * transpose of a row-major matrix (Trans, ld = col stride). An empty one is read as it lies,
 * whatever its strides (nothing is read; BLAS wants ld >= 1). */
bool ag__blas_mat_of(const void *p, int64_t r, int64_t c, int64_t rs, int64_t cs, ag__blas_mat *m) {
    if (r == 0 || c == 0) {
        *m = (ag__blas_mat){p, false, max1(c)};
        return true;
    }
    if ((c == 1 || cs == 1) && (r == 1 || rs >= max1(c))) {
        *m = (ag__blas_mat){p, false, r == 1 ? max1(c) : rs};
        return true;
    }
    if ((r == 1 || rs == 1) && (c == 1 || cs >= max1(r))) {
        *m = (ag__blas_mat){p, true, c == 1 ? max1(r) : cs};
        return true;
    }
    return false;
}

/* How BLAS can read x (ag__blas_mat_of) */
static bool layout(const mat *x, bool *trans, int64_t *ld) {
    ag__blas_mat b;
    if (!ag__blas_mat_of(x->p, x->r, x->c, x->rs, x->cs, &b)) return false;
    *trans = b.trans;
    *ld = b.ld;
    return true;
}

/* BLAS writes C row-major only */
static bool writable(const mat *x) {
    bool trans;
    int64_t ld;
    return layout(x, &trans, &ld) && !trans;
}

static mat operand(ag_tensor *t, int missing, const geom *g) {
    mat x = mat_of(t, missing, g);
    bool trans;
    int64_t ld;
    /* a contiguous copy outside the graph (a recorded clone would be an orphan node) */
    if (!layout(&x, &trans, &ld)) x = mat_of(ag__dense(t), missing, g);
    return x;
}

/* Merge one batch dim of blen steps of bstride into a matrix dim (len, stride), when the batch
 * step continues that dim's progression. */
static bool fold(int64_t *len, int64_t *stride, int64_t bstride, int64_t blen) {
    if (bstride == 0) return false;
    if (*len == 1) *stride = bstride;
    else if (bstride != *len * *stride) return false;
    *len *= blen;
    return true;
}

/* ---- batched gemm ---- */

typedef struct {
    mat x, y, o;
    int nb;
    int64_t bshape[AG_MAX_DIMS];
    bool tx, ty;
    int64_t ldx, ldy, ldo;
    double beta;
} gemm_plan;

/* Each output matrix is written by one gemm call. Batches that share an output matrix (the
 * reduction over broadcast dims in backward) run in order on one thread; otherwise small
 * matrices, which OpenBLAS computes single-threaded, are spread over OpenMP threads. */
static void bmm_run(ag_dtype dt, const gemm_plan *q) {
    int64_t nbatch = ag__shape_numel(q->nb, q->bshape);
    bool reduce = false;
    for (int d = 0; d < q->nb; d++) reduce |= q->o.bs[d] == 0;
    int64_t work = q->x.r * q->x.c * q->y.c;
    bool par = !reduce && nbatch > 1 && work <= 65536 && nbatch * work > AG_PAR_THRESHOLD;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t b = 0; b < nbatch; b++) {
        int64_t ox = 0, oy = 0, oo = 0, rem = b;
        for (int d = q->nb - 1; d >= 0; d--) {
            int64_t i = rem % q->bshape[d];
            rem /= q->bshape[d];
            ox += i * q->x.bs[d];
            oy += i * q->y.bs[d];
            oo += i * q->o.bs[d];
        }
        if (dt == AG_F32)
            ag__sgemm(q->tx, q->ty, q->x.r, q->y.c, q->x.c, 1.0f, (const float *)q->x.p + ox, q->ldx,
                      (const float *)q->y.p + oy, q->ldy, (float)q->beta, (float *)q->o.p + oo, q->ldo);
        else
            ag__dgemm(q->tx, q->ty, q->x.r, q->y.c, q->x.c, 1.0, (const double *)q->x.p + ox, q->ldx,
                      (const double *)q->y.p + oy, q->ldy, q->beta, (double *)q->o.p + oo, q->ldo);
    }
}

static bool fits_int(int64_t v) { return v <= INT_MAX; }

/* o[batch] = x[batch] @ y[batch] + beta o[batch]; x, y readable by BLAS, o writable; false
 * (reported) when a dim exceeds BLAS's 32-bit ints. Batch dims
 * that continue a matrix dim are folded into it first: rows of x and o when y is shared across
 * them (x @ W over a batch is one gemm), the inner dim when o is (a weight gradient summed over
 * the batch is one gemm). */
static bool bmm(ag_dtype dt, const mat *x, const mat *y, const mat *o, const geom *g, double beta) {
    gemm_plan q = {.x = *x, .y = *y, .o = *o, .beta = beta};
    for (int d = 0; d < g->nb; d++) {
        if (g->bshape[d] == 1) continue;
        q.bshape[q.nb] = g->bshape[d];
        q.x.bs[q.nb] = x->bs[d];
        q.y.bs[q.nb] = y->bs[d];
        q.o.bs[q.nb] = o->bs[d];
        q.nb++;
    }
    if (q.x.r == 0 || q.y.c == 0 || q.x.c == 0 || ag__shape_numel(q.nb, q.bshape) == 0) return true;
    bool t;
    int64_t ld;
    while (q.nb > 0) {
        int d = q.nb - 1;
        int64_t len = q.bshape[d];
        mat x2 = q.x, y2 = q.y, o2 = q.o;
        bool rows = q.y.bs[d] == 0 && fold(&x2.r, &x2.rs, q.x.bs[d], len) && fold(&o2.r, &o2.rs, q.o.bs[d], len);
        if (!rows) {
            x2 = q.x;
            o2 = q.o;
            if (!(q.o.bs[d] == 0 && fold(&x2.c, &x2.cs, q.x.bs[d], len) && fold(&y2.r, &y2.rs, q.y.bs[d], len)))
                break;
        }
        if (!layout(&x2, &t, &ld) || !layout(&y2, &t, &ld) || !writable(&o2)) break;
        q.x = x2;
        q.y = y2;
        q.o = o2;
        q.nb--;
    }
    layout(&q.x, &q.tx, &q.ldx);
    layout(&q.y, &q.ty, &q.ldy);
    layout(&q.o, &t, &q.ldo);
    if (!fits_int(q.x.r) || !fits_int(q.x.c) || !fits_int(q.y.c) || !fits_int(q.ldx) || !fits_int(q.ldy) ||
        !fits_int(q.ldo)) {
        ag_error("ag_matmul", "(%lld,%lld) @ (%lld,%lld): matrix too large for 32-bit BLAS", (long long)q.x.r,
                 (long long)q.x.c, (long long)q.y.r, (long long)q.y.c);
        return false;
    }
    bmm_run(dt, &q);
    return true;
}

/* ---- the op ---- */

/* dst += x @ y into in's gradient buffer (the batch dims in is broadcast over are summed by
 * accumulating their products one after another into the same matrix) */
static void grad_into(ag_tensor *in, int missing, const mat *x, const mat *y, const geom *g) {
    ag_tensor *buf = ag_grad_buffer(in);
    if (!buf) return;
    mat o = mat_of(buf, missing, g);
    if (writable(&o)) {
        bmm(in->dtype, x, y, &o, g, 1.0);
        return;
    }
    ag_tensor *tmp = ag_zeros(in->dtype, in->ndim, in->shape);
    o = mat_of(tmp, missing, g);
    bmm(in->dtype, x, y, &o, g, 1.0);
    ag__add_into(buf, tmp);
}

/* dA = dC @ B^T ; dB = A^T @ dC */
static void matmul_backward(ag_node *n) {
    ag_tensor *a = n->in[0], *b = n->in[1], *gc = n->out->grad;
    geom g;
    if (!plan_shapes(a, b, &g)) return;
    int ma = g.a1 ? NO_ROW : FULL, mb = g.b1 ? NO_COL : FULL;
    mat dc = operand(gc, ma | mb, &g);
    if (a->requires_grad) {
        mat bt = transposed(operand(b, mb, &g));
        grad_into(a, ma, &dc, &bt, &g);
    }
    if (b->requires_grad) {
        mat at = transposed(operand(a, ma, &g));
        grad_into(b, mb, &at, &dc, &g);
    }
}
static const ag_op MATMUL = {"ag_matmul", matmul_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

/* a (…,m,k) or (k), b (…,k,n) or (k) -> broadcast(…) + (m) + (n), the 1-d dims dropped */
ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b) {
    geom g;
    if (!plan_shapes(a, b, &g)) return NULL;
    ag_tensor *out = g.k == 0 ? ag_zeros(a->dtype, g.ondim, g.oshape) : ag__new(a->dtype, g.ondim, g.oshape);
    int ma = g.a1 ? NO_ROW : FULL, mb = g.b1 ? NO_COL : FULL;
    mat x = operand(a, ma, &g), y = operand(b, mb, &g), o = mat_of(out, ma | mb, &g);
    if (!bmm(a->dtype, &x, &y, &o, &g, 0.0)) return NULL;
    ag_finish(&MATMUL, out, 2, (ag_tensor *[]){a, b});
    return out;
}
