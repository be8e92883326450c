/* Broadcasting and the strided N-d loop under every elementwise kernel. */
#include <string.h>

#include "internal.h"

int ag_broadcast_shape(const char *op, const ag_tensor *a, const ag_tensor *b, int64_t *out) {
    if (!ag__alive(a) || !ag__alive(b)) {
        ag__report_dead(op, ag__alive(a) ? b : a);
        return -1;
    }
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char b1[128], b2[128];
            ag_error(op, "shapes %s and %s cannot be broadcast: dim %d (from the left of the result) has sizes "
                         "%lld and %lld",
                     ag_shape_str(a, b1), ag_shape_str(b, b2), i, (long long)sa, (long long)sb);
            return -1;
        }
        out[i] = sa == 1 ? sb : sa;
    }
    return n;
}

void ag__bcast_bstrides(const ag_tensor *t, int ndim, const int64_t *shape, int64_t *bstride) {
    int64_t es = (int64_t)ag_dtype_size(t->dtype);
    for (int i = 0; i < ndim; i++) {
        int it = t->ndim - ndim + i;
        bstride[i] = (it >= 0 && t->shape[it] == shape[i] && shape[i] != 1) ? t->stride[it] * es : 0;
    }
}

/* elements per piece when a long run is split across threads */
#define PIECE 8192

void ag__foreach(int ndim, const int64_t *shape_in, int nops, char *const *base,
                 const int64_t (*bstride_in)[AG_MAX_DIMS], ag_run_fn fn, void *ctx) {
    int64_t shape[AG_MAX_DIMS + 1], st[AG_MAX_OPS][AG_MAX_DIMS + 1];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape_in[d] == 0) return;
        if (shape_in[d] == 1) continue;
        shape[nd] = shape_in[d];
        for (int k = 0; k < nops; k++) st[k][nd] = bstride_in[k][d];
        nd++;
    }
    /* coalesce d with d+1 where every operand steps through them as one dim */
    int w = 0;
    for (int d = 1; d < nd; d++) {
        bool merge = true;
        for (int k = 0; k < nops; k++)
            if (st[k][w] != st[k][d] * shape[d]) merge = false;
        if (merge) {
            shape[w] *= shape[d];
            for (int k = 0; k < nops; k++) st[k][w] = st[k][d];
        } else {
            w++;
            shape[w] = shape[d];
            for (int k = 0; k < nops; k++) st[k][w] = st[k][d];
        }
    }
    nd = nd ? w + 1 : 0;
    if (nd == 0) { /* a single element */
        shape[0] = 1;
        for (int k = 0; k < nops; k++) st[k][0] = 0;
        nd = 1;
    }
    int64_t inner = shape[nd - 1], outer = 1;
    for (int d = 0; d < nd - 1; d++) outer *= shape[d];
    int64_t pieces_per_run = 1, piece = inner;
    if (outer * inner >= AG_PAR_THRESHOLD && outer < 64 && inner >= 2 * PIECE) {
        piece = PIECE;
        pieces_per_run = (inner + PIECE - 1) / PIECE;
    }
    int64_t total = outer * pieces_per_run;
    int64_t inner_st[AG_MAX_OPS];
    for (int k = 0; k < nops; k++) inner_st[k] = st[k][nd - 1];

#pragma omp parallel for if (outer * inner >= AG_PAR_THRESHOLD && total > 1) schedule(static)
    for (int64_t it = 0; it < total; it++) {
        int64_t o = it / pieces_per_run, pc = it % pieces_per_run;
        char *p[AG_MAX_OPS];
        for (int k = 0; k < nops; k++) p[k] = base[k];
        int64_t rem = o;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % shape[d];
            rem /= shape[d];
            for (int k = 0; k < nops; k++) p[k] += i * st[k][d];
        }
        int64_t start = pc * piece, n = inner - start < piece ? inner - start : piece;
        for (int k = 0; k < nops; k++) p[k] += start * inner_st[k];
        fn(n, p, inner_st, ctx);
    }
}
