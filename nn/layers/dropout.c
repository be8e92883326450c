/* Dropout: out of place, in place, and relu + dropout in place, with masks drawn from the
 * counter-based generator so that they depend neither on the thread count nor, sample by sample,
 * on the batch's layout or the process that runs the sample (ag_rng_share_batch). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"
#include "layers_internal.h"

/* masks drawn per chunk: an element's word of the stream depends only on the mask's counter and
 * its place in the batch's mask, so the chunks can be spread over threads and the mask is the
 * same for any split (a multiple of 8: a chunk owns whole bytes of a bit mask) */
#define DROP_CHUNK 2048

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

/* bit e0+i of bits = keep[i] (0/1), for i < n; the other bits as they were */
static void set_bits(uint8_t *bits, int64_t e0, int64_t n, const uint8_t *keep) {
    for (int64_t i = 0, e = e0; i < n; i++, e++)
        bits[e >> 3] = (uint8_t)((bits[e >> 3] & ~(1u << (e & 7))) | (unsigned)keep[i] << (e & 7));
}

/* drop_fwd_f32, drop_bwd_f32, drop_fwd_f64, drop_bwd_f64 */
#define T float
#define FN(name) name##_f32
#include "dropout_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "dropout_kernels.inc"
#undef T
#undef FN

void ag__drop_bwd(ag_dtype dt, const uint8_t *bits, const char *y, const char *g, char *dx, int64_t n, double scale,
                  bool acc) {
    if (dt == AG_F32) drop_bwd_f32(bits, y, g, dx, n, (float)scale, acc);
    else drop_bwd_f64(bits, y, g, dx, n, scale, acc);
}

/* ---- where a mask's elements are drawn ---- */

ag__mask_place ag__place_dense(int ndim, const int64_t *shape, int dim) {
    ag__mask_place m = {.pre = 1, .n = 1, .inner = 1};
    if (ndim == 0) return m;
    m.pre = ag__shape_numel(dim, shape);
    m.n = shape[dim];
    m.inner = ag__shape_numel(ndim - dim - 1, shape + dim + 1);
    return m;
}

ag__mask_place ag__place_rows(const int64_t *pos, int64_t n, int64_t len, int64_t D) {
    return (ag__mask_place){.pos = pos, .n = n, .len = len, .D = D};
}

bool ag__place_bind(const char *op, ag__mask_place *m, const ag_rng *r, const ag_tensor *x) {
    if (!r->share_count) {
        m->first = 0;
        m->total = m->n;
        return true;
    }
    if (m->n != r->share_count) {
        char b[128];
        ag_error(op, "input %s holds %lld samples along its batch dim, but the generator is shared for samples "
                 "%lld .. %lld of %lld (ag_rng_share_batch)", ag_shape_str(x, b), (long long)m->n,
                 (long long)r->share_first, (long long)(r->share_first + r->share_count - 1),
                 (long long)r->share_total);
        return false;
    }
    m->first = r->share_first;
    m->total = r->share_total;
    return true;
}

int64_t ag__place_numel(const ag__mask_place *m) {
    return m->pos ? m->total * m->len * m->D : m->total * m->pre * m->inner;
}

/* element e's index in the whole batch's mask */
static int64_t place_at(const ag__mask_place *m, int64_t e) {
    if (m->pos) return (m->first * m->len + m->pos[e / m->D]) * m->D + e % m->D;
    int64_t q = e % m->inner, b = e / m->inner % m->n, p = e / m->inner / m->n;
    return ((m->first + b) * m->pre + p) * m->inner + q;
}

/* elements e .. of the tensor that continue each other in the whole mask, at most left: the
 * rest of a row (packed: and the rows after it that follow it there) or of a sample's block
 * (dense; all of them when the batch is the first dim) */
static int64_t place_run(const ag__mask_place *m, int64_t e, int64_t left) {
    if (!m->pos) {
        if (m->pre == 1) return left;
        int64_t run = m->inner - e % m->inner;
        return run < left ? run : left;
    }
    int64_t i = e / m->D, run = m->D - e % m->D;
    while (run < left && m->pos[i + 1] == m->pos[i] + 1) run += m->D, i++;
    return run < left ? run : left;
}

void ag__place_keep(const ag__mask_place *m, uint64_t seed, uint64_t base, int64_t e0, int64_t cnt, uint64_t t,
                    bool at_least, uint8_t *keep, uint8_t *bits) {
    for (int64_t e = e0; e < e0 + cnt;) {
        int64_t run = place_run(m, e, e0 + cnt - e);
        bool whole_bytes = bits && e % 8 == 0; /* straight into the bits */
        uint8_t *k = keep + (e - e0);
        ag__rng_keep(seed, base, place_at(m, e), run, t, at_least, k, whole_bytes ? bits + e / 8 : NULL);
        if (bits && !whole_bytes) set_bits(bits, e, run, k);
        e += run;
    }
}

/* ---- applying a mask ---- */

/* y = dropout(x) (relu first when asked) for elements e0 .. e0+n-1 of a mask, x and y (which may
 * be x) contiguous. Element e is kept when its element of the whole batch's mask (placed by m)
 * at r's counter is a uniform below 1-p (the caller advances the counter past the mask once);
 * with bits the mask is stored one bit per element. p == 1 keeps nothing and draws nothing;
 * p == 0 keeps everything. Chunks are aligned to DROP_CHUNK elements of the whole mask, so each
 * owns whole bytes of bits. */
AG_AVX2_CLONES void ag__drop_apply(ag_dtype dt, const char *x, char *y, int64_t n, int64_t e0, double p, bool relu,
                                   const ag__mask_place *m, const ag_rng *r, uint8_t *bits) {
    double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    uint64_t below = ag__u32_count_below(1.0 - p); /* keep: the uniform < 1 - p */
    bool draw = p > 0 && p < 1;
    size_t es = ag_dtype_size(dt);
    int64_t first = e0 / DROP_CHUNK, end = (e0 + n + DROP_CHUNK - 1) / DROP_CHUNK, par_work = n;
    AG_PAR_FOR
    for (int64_t c = first; c < end; c++) {
        uint8_t k[DROP_CHUNK];
        int64_t lo = c * DROP_CHUNK > e0 ? c * DROP_CHUNK : e0, hi = (c + 1) * DROP_CHUNK;
        if (hi > e0 + n) hi = e0 + n;
        if (draw) {
            ag__place_keep(m, r->seed, r->counter, lo, hi - lo, below, false, k, bits);
        } else {
            memset(k, p < 1, (size_t)(hi - lo));
            if (bits) set_bits(bits, lo, hi - lo, k);
        }
        size_t off = (size_t)(lo - e0) * es;
        if (dt == AG_F32) drop_fwd_f32(k, x + off, y + off, hi - lo, (float)scale, relu);
        else drop_fwd_f64(k, x + off, y + off, hi - lo, scale, relu);
    }
}

void ag__drop_advance(ag_rng *r, const ag__mask_place *m, double p) {
    if (p > 0 && p < 1) r->counter += ag__mask_draws(ag__place_numel(m));
}

/* saved[0]: the keep mask (bits), or NULL for the relu form, which reads its output instead */
static void dropout_backward(ag_node *n) {
    bool fresh; /* every element of x's gradient is written */
    ag_tensor *dx = ag__grad_buffer_to_write(n->in[0], &fresh), *g = n->out->grad;
    if (!dx) return;
    const uint8_t *bits = n->saved[0] ? (const uint8_t *)ag__ptr(n->saved[0]) : NULL;
    const char *y = ag__ptr(n->out);
    ag__drop_bwd(g->dtype, bits, y, ag__ptr(g), ag__ptr(dx), ag_numel(g), n->ctx.d[0], !fresh);
}
static const ag_op DROPOUT = {"ag_dropout", dropout_backward, AG_SAVES_NONE},
                   DROPOUT_ = {"ag_dropout_", dropout_backward, AG_SAVES_NONE},
                   RELU_DROPOUT_ = {"ag_relu_dropout_", dropout_backward, AG_SAVES_OUTPUT};

bool ag__check_p(const char *op, const ag_tensor *x, double p) {
    if (p >= 0 && p <= 1) return true;
    char b[128];
    ag_error(op, "input %s: p = %g, expected a probability in [0, 1]", ag_shape_str(x, b), p);
    return false;
}

/* The three dropouts: out of place, in place (y shares x's storage), and relu + dropout in place,
 * the mask placed by m (NULL: x's samples along dim 0). In place needs a contiguous x that is
 * not a leaf requiring grad while grad mode is on; other x are done out of place (the same
 * values and gradients, only the memory differs). */
static ag_tensor *dropout(const ag_op *op, ag_tensor *x, double p, bool training, ag_rng *rng,
                          const ag__mask_place *m) {
    bool relu = op == &RELU_DROPOUT_, inplace = op != &DROPOUT;
    if (!ag__check_float(op->name, x) || !ag__check_p(op->name, x, p)) return NULL;
    if (!training) p = 0;
    if (p == 0 && !relu) return x;
    ag_rng *r = rng ? rng : ag_rng_global();
    ag__mask_place place = m ? *m : ag__place_dense(x->ndim, x->shape, 0);
    if (p > 0 && p < 1 && !ag__place_bind(op->name, &place, r, x)) return NULL;
    if (inplace && (!ag_is_contiguous(x) || (ag_grad_enabled() && x->requires_grad && !x->node))) inplace = false;
    int64_t n = ag_numel(x);
    ag_tensor *bits = relu ? NULL : ag__new(AG_BOOL, 1, (int64_t[]){(n + 7) / 8}), *xd = ag__dense(x);
    ag_tensor *y = inplace ? ag__alias(x) : ag__new(x->dtype, x->ndim, x->shape);
    ag__drop_apply(x->dtype, ag__ptr(xd), ag__ptr(y), n, 0, p, relu, &place, r,
                   bits ? (uint8_t *)ag__ptr(bits) : NULL);
    ag__drop_advance(r, &place, p);
    if (inplace) ag__bump_version(x);
    ag_node *nd = ag_finish(op, y, 1, &x);
    if (nd) {
        nd->saved[0] = bits;
        nd->ctx.d[0] = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    }
    return y;
}

ag_tensor *ag_dropout(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&DROPOUT, x, p, training, rng, NULL);
}
ag_tensor *ag_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&DROPOUT_, x, p, training, rng, NULL);
}
ag_tensor *ag_relu_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng) {
    return dropout(&RELU_DROPOUT_, x, p, training, rng, NULL);
}
ag_tensor *ag__dropout_placed(ag_tensor *x, double p, bool training, ag_rng *rng, bool inplace, bool relu,
                              const ag__mask_place *m) {
    return dropout(relu ? &RELU_DROPOUT_ : inplace ? &DROPOUT_ : &DROPOUT, x, p, training, rng, m);
}
