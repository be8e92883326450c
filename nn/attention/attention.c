/* Fused scaled dot-product attention (PyTorch 1.13 mask semantics, see attention.h). Its score
 * rows go through the softmax row kernel that the masked softmax (softmax.c) shares: masked
 * positions become -inf, a row with nothing left becomes zeros (not NaN), and the backward of
 * a row is y*(g - Σ g*y), which is zero wherever y is. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <tgmath.h>

#include "../../tensor/op.h"
#include "attention.h"
#include "../nn_internal.h"
#include "simd/kernels.h"

enum { MASK_NONE = AG_SOFTMAX_MASK_NONE, MASK_BOOL = AG_SOFTMAX_MASK_BOOL, MASK_ADD = AG_SOFTMAX_MASK_ADD };

/* ---- fused attention ---- */

/* One operand per (b,h) as a BLAS matrix (ag__blas_mat_of): row-major R×C with leading
 * dimension ld, or (trans) stored as its C×R transpose; (b,h)'s matrix starts b·sb + h·sh
 * bytes after base. The (B,H,R,C) tensors of ag_attention and the head columns of (N,R,E) rows (ag__attention_heads)
 * are both such stacks, so one kernel serves both. base NULL: not needed. */
typedef struct {
    const char *base;
    int64_t sb, sh;
    bool trans;
    int ld;
} mat;

/* (B,H,R,C) t: t itself when every (b,h) slice is a BLAS matrix, else a contiguous copy
 * (outside the graph: the op's gradient goes to t). */
static ag_tensor *as_mat(ag_tensor *t, mat *m) {
    int64_t *st = t->stride;
    ag__blas_mat b;
    if (!ag__blas_mat_of(ag__ptr(t), t->shape[2], t->shape[3], st[2], st[3], &b)) return as_mat(ag__dense(t), m);
    int64_t es = (int64_t)ag_dtype_size(t->dtype);
    m->base = b.p;
    m->trans = b.trans;
    m->ld = (int)b.ld;
    m->sb = st[0] * es;
    m->sh = st[1] * es;
    return t;
}

/* contiguous (B,H,R,C) storage */
static mat dense_mat(const ag_tensor *t) {
    int64_t es = (int64_t)ag_dtype_size(t->dtype), R = t->shape[2], C = t->shape[3];
    return (mat){ag__ptr(t), t->shape[1] * R * C * es, R * C * es, false, (int)C};
}

/* heads of width D starting at column off of a (N,R,W) tensor with unit-stride rows */
static mat head_mat(const ag_tensor *t, int64_t off, int64_t D) {
    int64_t es = (int64_t)ag_dtype_size(t->dtype), R = t->shape[1], W = t->shape[2];
    return (mat){ag__ptr(t) + off * es, t->stride[0] * es, D * es, false, (int)(R == 1 ? W : t->stride[1])};
}

typedef struct {
    int64_t B, H, L, S, Dh, Dv;
    double alpha, keep_scale; /* 1/√Dh; 1/(1-p) */
    mat q, k, v, o;
    int mk;                   /* mask kind */
    const char *mask;
    int64_t mst[4];           /* mask byte strides broadcast to (B,H,L,S) */
    bool causal;
    char *p, *pd;             /* (B,H,L,S) probabilities, after dropout (NULL without) */
    bool pd_per_thread;       /* pd is one L×S block per thread (nobody wants the weights) */
    const uint8_t *keep;      /* dropout keep mask (NULL without) */
    /* backward only */
    mat dout, dq, dk, dv;     /* dq, dk, dv with base NULL when not needed */
    char *ds;                 /* (B,H,L,S) dscores, or one L×S block per thread (!mask_grad) */
    bool mask_grad;
    bool zero_head;           /* dq, dk, dv are new buffers: each head zeroes its blocks first */
    const ag__attn_kernels *fused; /* the fused kernels of the ISA in use (simd/kernels.h) */
} attn;

static const char *at(const mat *m, int64_t b, int64_t h) { return m->base + b * m->sb + h * m->sh; }

/* Scratch of one L×S block per thread (dropped-out probabilities, dscores) has this many
 * blocks, indexed by omp_get_thread_num(): for_each_head's team numbers its threads from 0, and
 * when the heads run serially inside a caller's parallel region, the caller's number is used. */
static int64_t head_slots(void) { return (int64_t)omp_get_thread_num() + omp_get_max_threads(); }

/* A head's blocks of dq (L rows), dk and dv (S rows) set to zero just before it accumulates
 * into them: for new gradient buffers whose every element belongs to exactly one head, this
 * replaces a zeroing pass over the whole buffer. */
static void zero_head_grads(const attn *a, int64_t b, int64_t h, size_t es) {
    const mat *g[3] = {&a->dq, &a->dk, &a->dv};
    int64_t rows[3] = {a->L, a->S, a->S}, cols[3] = {a->Dh, a->Dh, a->Dv};
    for (int i = 0; i < 3; i++) {
        if (!g[i]->base) continue;
        char *p = (char *)at(g[i], b, h);
        for (int64_t r = 0; r < rows[i]; r++) memset(p + r * g[i]->ld * (int64_t)es, 0, (size_t)cols[i] * es);
    }
}

#define T float
#define FN(name) name##_f32
#define GEMM ag__sgemm
#include "attention_head.inc"
#undef T
#undef FN
#undef GEMM
#define T double
#define FN(name) name##_f64
#define GEMM ag__dgemm
#include "attention_head.inc"
#undef T
#undef FN
#undef GEMM

/* The fused kernels of the ISA in use (simd/kernels.h) for f32 heads with
 * 1..AG_ATTN_AVX2_KEYS (64) live keys on either ISA, with dropout too unless the weights after
 * dropout are wanted; a head with more (or none), and every head with the generic set, takes
 * the GEMM path above. The mask of the head becomes per-row bits of dead keys and additive
 * values: one row for all queries unless it varies by row or is causal. */
static bool small_fits(const attn *a) {
    return a->fused->fwd && !a->q.trans && !a->k.trans && !a->v.trans &&
           (!a->keep || a->pd_per_thread) && a->L <= AG_ATTN_SMALL_ROWS &&
           a->Dh >= 1 && a->Dh <= AG_ATTN_SMALL_DIM && a->Dv >= 1 && a->Dv <= AG_ATTN_SMALL_DIM;
}

/* the tile of (b,h) with n live keys, or n 0 when the kernels do not take that many */
static ag__attn_tile small_tile(const attn *a, int64_t b, int64_t h, int64_t n) {
    if (n < 1 || n > AG_ATTN_AVX2_KEYS) n = 0;
    int64_t bh = b * a->H + h;
    return (ag__attn_tile){.L = a->L, .n = n, .Dh = a->Dh, .Dv = a->Dv, .q = (const float *)at(&a->q, b, h),
                           .k = (const float *)at(&a->k, b, h), .v = (const float *)at(&a->v, b, h),
                           .ldq = a->q.ld, .ldk = a->k.ld, .ldv = a->v.ld, .alpha = (float)a->alpha,
                           .keep = a->keep ? a->keep + bh * a->L * a->S : NULL, .ldkeep = a->S,
                           .keep_scale = (float)a->keep_scale};
}

static void attn_fwd_small(const attn *a, int64_t bh) {
    int64_t b = bh / a->H, h = bh % a->H, L = a->L, S = a->S;
    const char *m = a->mask ? a->mask + b * a->mst[0] + h * a->mst[1] : NULL;
    ag__attn_tile t = small_tile(a, b, h, live_keys_f32(a, m));
    if (!t.n) {
        attn_fwd_f32(a, bh);
        return;
    }
    enum { W = AG_ATTN_AVX2_KEYS };
    float madd[AG_ATTN_SMALL_ROWS * W];
    uint64_t dead[AG_ATTN_SMALL_ROWS];
    bool by_row = a->causal || (m && a->mst[2]);
    int64_t lanes = t.n <= 16 ? 16 : (t.n + 7) / 8 * 8; /* the mask lanes a kernel reads */
    for (int64_t i = 0; i < (by_row ? L : 1); i++) {
        float *ad = madd + i * W;
        dead[i] = 0;
        for (int64_t j = 0; j < lanes; j++) {
            const char *e = m ? m + i * a->mst[2] + j * a->mst[3] : NULL;
            ad[j] = 0;
            if (j >= t.n) continue;
            if ((a->causal && j > i) || (a->mk == MASK_BOOL && *e)) dead[i] |= UINT64_C(1) << j;
            else if (a->mk == MASK_ADD) ad[j] = *(const float *)e;
        }
    }
    t.madd = a->mk == MASK_ADD ? madd : NULL;
    t.madd_ld = by_row ? W : 0;
    t.dead = dead;
    t.dead_ld = by_row;
    a->fused->fwd(&t, (float *)a->p + bh * L * S, S, (float *)at(&a->o, b, h), a->o.ld);
}

static void attn_bwd_small(const attn *a, int64_t bh) {
    int64_t b = bh / a->H, h = bh % a->H;
    const char *m = a->mask ? a->mask + b * a->mst[0] + h * a->mst[1] : NULL;
    ag__attn_tile t = small_tile(a, b, h, live_keys_f32(a, m));
    if (!t.n) {
        attn_bwd_f32(a, bh);
        return;
    }
    const mat *g[3] = {&a->dq, &a->dk, &a->dv};
    float *d[3];
    for (int i = 0; i < 3; i++) d[i] = g[i]->base ? (float *)at(g[i], b, h) : NULL;
    a->fused->bwd(&t, (const float *)a->p + bh * a->L * a->S, a->S, (const float *)at(&a->dout, b, h), a->dout.ld,
                  d[0], a->dq.ld, d[1], a->dk.ld, d[2], a->dv.ld, a->zero_head ? a->S : 0);
}

/* Above the threshold each (b,h) is one thread's work (its GEMMs run on that thread alone:
 * tensor/gemm.h), so results never depend on the thread count. */
static void for_each_head(void (*fn)(const attn *, int64_t), const attn *a) {
    int64_t nbh = a->B * a->H, work = nbh * a->L * a->S * (a->Dh + a->Dv);
    int nt = omp_get_max_threads();
    if (nt > 1 && nbh >= 2 * (int64_t)nt && work > AG_PAR_THRESHOLD) {
        ag__blas_single_threaded();
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < nbh; i++) fn(a, i);
    } else {
        for (int64_t i = 0; i < nbh; i++) fn(a, i);
    }
}

/* the backward of both ops once a's gradient matrices are set */
static void attn_backward(ag_node *n, attn *a) {
    ag_tensor *mask = n->in[3];
    a->mask_grad = mask && a->mk == MASK_ADD && mask->requires_grad;
    if (!a->dq.base && !a->dk.base && !a->dv.base && !a->mask_grad) return;
    /* only the mask's gradient needs every head's dscores; else each thread reuses one block
     * (16 MiB of scratch fewer for 8 sequences of 256 with 8 heads) */
    ag_tensor *ds = a->mask_grad ? ag__new(n->out->dtype, 4, (int64_t[]){a->B, a->H, a->L, a->S})
                                 : ag__new(n->out->dtype, 3, (int64_t[]){head_slots(), a->L, a->S});
    a->ds = ag__ptr(ds);
    if (a->L > 0 && a->S > 0)
        for_each_head(n->out->dtype == AG_F64 ? attn_bwd_f64 : !a->mask_grad && small_fits(a) ? attn_bwd_small : attn_bwd_f32,
                      a);
    if (a->mask_grad) ag_accum_grad(mask, ds);
}

static void attention_backward(ag_node *n) {
    attn a = *(const attn *)n->extra;
    ag_tensor *g[3];
    mat *dm[3] = {&a.dq, &a.dk, &a.dv};
    for (int i = 0; i < 3; i++) {
        g[i] = ag_grad_buffer(n->in[i]);
        *dm[i] = g[i] ? dense_mat(g[i]) : (mat){0};
    }
    a.dout = dense_mat(n->out->grad);
    attn_backward(n, &a);
}
/* q, k, v and the mask (the probabilities are its own); the same for the packed heads below */
#define ATTENTION_SAVES (AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(2) | AG_SAVES_INPUT(3))
static const ag_op ATTENTION = {"ag_attention", attention_backward, ATTENTION_SAVES};

/* true when the column ranges [off[i], off[i] + width[i]) of the roles i whose input is t tile
 * t's width exactly (no gap, no overlap): every element of t's gradient then belongs to
 * exactly one head */
static bool heads_tile(const ag_node *n, const ag_tensor *t, const int64_t *width) {
    int64_t lo[3], hi[3], reach = 0;
    int k = 0;
    for (int i = 0; i < 3; i++)
        if (n->in[i] == t) lo[k] = n->ctx.i[i], hi[k] = n->ctx.i[i] + width[i], k++;
    for (int used = 0; used < k; used++) { /* the next range must start where the covered part ends */
        int next = -1;
        for (int j = 0; j < k; j++)
            if (lo[j] == reach && hi[j] > reach) next = j;
        if (next < 0) return false;
        reach = hi[next];
        lo[next] = -1;
    }
    return k > 0 && t->ndim == 3 && reach == t->shape[2];
}

static void heads_backward(ag_node *n) {
    attn a = *(const attn *)n->extra;
    mat *dm[3] = {&a.dq, &a.dk, &a.dv};
    ag_tensor *g[3] = {NULL, NULL, NULL};
    bool fresh[3] = {false, false, false}, per_head = true;
    int64_t width[3] = {a.H * a.Dh, a.H * a.Dh, a.H * a.Dv};
    for (int i = 0; i < 3; i++) { /* tq, tk, tv may be one tensor: one buffer, three column ranges */
        int same = n->in[i] == n->in[0] ? 0 : n->in[i] == n->in[1] ? 1 : i;
        if (same < i) g[i] = g[same], fresh[i] = fresh[same];
        else g[i] = ag__grad_buffer_to_write(n->in[i], &fresh[i]);
        *dm[i] = g[i] ? head_mat(g[i], n->ctx.i[i], i < 2 ? a.Dh : a.Dv) : (mat){0};
        if (g[i] && !(fresh[i] && heads_tile(n, n->in[i], width))) per_head = false;
    }
    per_head = per_head && a.L > 0 && a.S > 0;
    for (int i = 0; i < 3; i++) /* else new buffers are zeroed whole, as ag_grad_buffer does */
        if (fresh[i] && !per_head && (i == 0 || g[i] != g[0]) && (i < 2 || g[i] != g[1]))
            memset(g[i]->data, 0, (size_t)ag_numel(g[i]) * ag_dtype_size(g[i]->dtype));
    a.zero_head = per_head;
    a.dout = head_mat(n->out->grad, 0, a.Dv);
    attn_backward(n, &a);
}
static const ag_op ATTENTION_HEADS = {"ag__attention_heads", heads_backward, ATTENTION_SAVES};

/* keep[i] when element i of the (B,H,L,S) mask from rng is a uniform >= p (with probability
 * 1-p), the B samples placed in rng's batch (ag_rng_share_batch); blocks of it go to the threads,
 * each element from its own word of the stream, so the mask is the same for any thread count.
 * False (reported through op) when rng is shared for another number of samples. */
static bool draw_keep(const char *op, ag_rng *rng, double p, ag_tensor *keep) {
    if (!rng) rng = ag_rng_global();
    ag__mask_place m = ag__place_dense(keep->ndim, keep->shape, 0);
    if (!ag__place_bind(op, &m, rng, keep)) return false;
    uint64_t seed = rng->seed, base = rng->counter, below_p = ag__u32_count_below(p);
    int64_t n = ag_numel(keep), par_work = n;
    uint8_t *k = (uint8_t *)keep->data;
    AG_PAR_FOR
    for (int64_t i = 0; i < n; i += 4096)
        ag__place_keep(&m, seed, base, i, n - i < 4096 ? n - i : 4096, below_p, true, k + i, NULL);
    rng->counter += ag__mask_draws(ag__place_numel(&m));
    return true;
}

/* Checks the mask and dropout_p, then computes out (a->o's storage) into a; the probabilities
 * and the dropout mask are returned in *p and *keep for backward and weights_out, and the
 * probabilities after dropout in *pd when weights are wanted (else they are only scratch: one
 * L×S block per thread, never the whole (B,H,L,S), since backward recomputes them). */
static bool attn_forward(const char *op, attn *a, ag_dtype dt, ag_tensor *mask, double dropout_p, ag_rng *rng,
                         bool training, bool want_weights, ag_tensor **p, ag_tensor **keep, ag_tensor **pd) {
    int64_t sshape[4] = {a->B, a->H, a->L, a->S};
    if (!(dropout_p >= 0 && dropout_p <= 1)) {
        ag_error(op, "dropout_p %g: must be in [0, 1]", dropout_p);
        return false;
    }
    a->mk = ag__check_softmax_mask(op, mask, dt, 4, sshape, "scores (B,H,L,S)");
    if (a->mk < 0) return false;
    if (mask) {
        ag__bcast_bstrides(mask, 4, sshape, a->mst);
        a->mask = ag__ptr(mask);
    }
    a->alpha = a->Dh > 0 ? 1 / sqrt((double)a->Dh) : 1;
    a->fused = ag__attn_kernels_for(ag__isa_in_use());
    *p = ag__new_op(op, dt, 4, sshape);
    *keep = *pd = NULL;
    if (!*p) return false;
    a->p = ag__ptr(*p);
    if (training && dropout_p > 0) {
        *keep = ag__new_op(op, AG_BOOL, 4, sshape);
        a->pd_per_thread = !want_weights;
        *pd = want_weights ? ag__new_op(op, dt, 4, sshape) : ag__new_op(op, dt, 3, (int64_t[]){head_slots(), a->L, a->S});
        if (!*keep || !*pd) return false;
        if (!draw_keep(op, rng, dropout_p, *keep)) return false;
        a->keep = (const uint8_t *)(*keep)->data;
        a->pd = (*pd)->data;
        a->keep_scale = dropout_p < 1 ? 1 / (1 - dropout_p) : 0;
    }
    if (a->L > 0) for_each_head(dt == AG_F64 ? attn_fwd_f64 : small_fits(a) ? attn_fwd_small : attn_fwd_f32, a);
    return true;
}

/* records the node (saving a, the probabilities and the keep mask) and hands out the weights */
static bool attn_finish(const ag_op *OP, const attn *a, ag_tensor *out, ag_tensor *const *in, ag_tensor *p,
                        ag_tensor *keep, ag_tensor *pd, const int64_t *offsets, ag_tensor **weights_out) {
    ag_node *n = ag_finish(OP, out, 4, in);
    if (n) {
        attn *saved = ag__alloc(OP->name, ag_arena_current(), sizeof *saved, "the state backward reads");
        if (!saved) return false;
        *saved = *a;
        saved->pd = NULL;
        n->extra = saved;
        n->saved[0] = p;
        n->saved[1] = keep;
        for (int i = 0; offsets && i < 3; i++) n->ctx.i[i] = offsets[i];
    }
    if (weights_out) {
        if (pd || !n) {
            *weights_out = pd ? pd : p;
        } else { /* p is saved for backward: hand out a copy */
            *weights_out = ag__new_op(OP->name, p->dtype, 4, p->shape);
            if (!*weights_out) return false;
            ag__copy(*weights_out, p);
        }
    }
    return true;
}

static bool check_qkv(const char *op, const ag_tensor *q, const ag_tensor *k, const ag_tensor *v) {
    if (!ag__check_float(op, q) || !ag__check_float(op, k) || !ag__check_float(op, v)) return false;
    char b1[128], b2[128], b3[128];
    const char *why = NULL;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        why = "expected 4-d q (B,H,L,Dh), k (B,H,S,Dh), v (B,H,S,Dv)";
    else if (q->dtype != k->dtype || q->dtype != v->dtype)
        why = "dtypes differ";
    else if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] ||
             v->shape[1] != q->shape[1])
        why = "batch and head dims (B,H) differ";
    else if (k->shape[2] != v->shape[2])
        why = "k and v differ in source length S (dim 2)";
    else if (k->shape[3] != q->shape[3])
        why = "q and k differ in head dim Dh (dim 3)";
    if (!why) return true;
    ag_error(op, "q %s %s, k %s %s, v %s %s: %s", ag_shape_str(q, b1), ag_dtype_name(q->dtype), ag_shape_str(k, b2),
             ag_dtype_name(k->dtype), ag_shape_str(v, b3), ag_dtype_name(v->dtype), why);
    return false;
}

ag_tensor *ag_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, bool causal, double dropout_p,
                        ag_rng *rng, bool training, ag_tensor **weights_out) {
    const char *op = "ag_attention";
    if (weights_out) *weights_out = NULL;
    if (!check_qkv(op, q, k, v)) return NULL;
    ag_dtype dt = q->dtype;
    attn a = {.B = q->shape[0], .H = q->shape[1], .L = q->shape[2], .S = k->shape[2], .Dh = q->shape[3],
              .Dv = v->shape[3], .causal = causal};
    ag_tensor *out = ag__new_op(op, dt, 4, (int64_t[]){a.B, a.H, a.L, a.Dv}), *p, *keep, *pd;
    if (!out) return NULL;
    as_mat(q, &a.q);
    as_mat(k, &a.k);
    as_mat(v, &a.v);
    a.o = dense_mat(out);
    if (!attn_forward(op, &a, dt, mask, dropout_p, rng, training, weights_out != NULL, &p, &keep, &pd)) return NULL;
    return attn_finish(&ATTENTION, &a, out, (ag_tensor *[]){q, k, v, mask}, p, keep, pd, NULL, weights_out) ? out
                                                                                                            : NULL;
}

ag_tensor *ag__attention_heads(ag_tensor *tq, int64_t qo, ag_tensor *tk, int64_t ko, ag_tensor *tv, int64_t vo,
                               int64_t E, int64_t H, ag_tensor *mask, bool causal, double dropout_p, ag_rng *rng,
                               bool training, ag_tensor **weights_out) {
    const char *op = "ag_attention";
    if (weights_out) *weights_out = NULL;
    ag_tensor *t[3] = {tq, tk, tv};
    int64_t off[3] = {qo, ko, vo};
    for (int i = 0; i < 3; i++) {
        if (!ag__check_float(op, t[i])) return NULL;
        char b1[128];
        if (t[i]->ndim != 3 || t[i]->dtype != tq->dtype || off[i] < 0 || off[i] + E > t[i]->shape[2] || H <= 0 ||
            E % H || t[i]->shape[0] != tq->shape[0] || (i == 2 && tv->shape[1] != tk->shape[1])) {
            ag_error(op, "packed heads: %s %s, columns %lld.. of width E=%lld, H=%lld do not fit",
                     i == 0 ? "q" : i == 1 ? "k" : "v", ag_shape_str(t[i], b1), (long long)off[i], (long long)E,
                     (long long)H);
            return NULL;
        }
    }
    ag_dtype dt = tq->dtype;
    int64_t N = tq->shape[0], L = tq->shape[1], D = E / H;
    attn a = {.B = N, .H = H, .L = L, .S = tk->shape[1], .Dh = D, .Dv = D, .causal = causal};
    ag_tensor *out = ag__new_op(op, dt, 3, (int64_t[]){N, L, E}), *p, *keep, *pd, *in[3];
    if (!out) return NULL;
    mat *m[3] = {&a.q, &a.k, &a.v};
    for (int i = 0; i < 3; i++) { /* rows must be unit-stride for BLAS; anything else is copied */
        ag_tensor *x = t[i];
        in[i] = x->stride[2] == 1 && (x->shape[1] == 1 || x->stride[1] >= x->shape[2]) ? x : ag__dense(x);
        *m[i] = head_mat(in[i], off[i], D);
    }
    a.o = head_mat(out, 0, D);
    if (!attn_forward(op, &a, dt, mask, dropout_p, rng, training, weights_out != NULL, &p, &keep, &pd)) return NULL;
    return attn_finish(&ATTENTION_HEADS, &a, out, (ag_tensor *[]){tq, tk, tv, mask}, p, keep, pd, off, weights_out)
               ? out
               : NULL;
}
