/* Elementwise math beyond elementwise.c's table: sin, cos, clamp and the activations with
 * parameters (leaky_relu, silu, softplus, elu), each one row of the table below with forward
 * and backward side by side and up to two scalar parameters a, b; pointwise_kernels.inc makes
 * a row into f32 and f64 run functions (one body). Then minimum / maximum, which broadcast. */
#include <math.h>
#include <tgmath.h>

#include "internal.h"

/* v != v: true for a NaN, false for integers (a macro, so that GCC does not warn of the
 * self-comparison where T is an integer) */
#define IS_NAN(v) ((v) != (v))

/* min(max(x, lo), hi) with NaN passed through: torch.clamp, where lo > hi gives hi */
#define CLAMP_LO(x, lo) ((x) < (lo) ? (lo) : (x))
/* exp for f32 on fastmath.h's vectorisable expf (within 2 ulp of expf), so that the loops of
 * silu, softplus and elu's backward vectorise (log1p and expm1 stay libm's); inf past that
 * exp's range, as expf, so that silu's sigmoid there is exactly 0 */
static inline float expf_vec(float x) { return x > AG_EXPF_HI ? (float)INFINITY : ag__expf(x); }
#define SIGMOID(x) (1 / (1 + EXP_FAST(-(x))))

/* reads: the values dx reads besides g (ag_op.saves); every row here reads its input x */
#define READS_IN AG_SAVES_INPUT(0)
/*      name        reads  y = forward(x; a, b)                            dx = (g: upstream grad)            */
#define POINTWISE_OPS(X)                                                                                          \
    X(sin, IN, sin(x), g * cos(x))                                                                                \
    X(cos, IN, cos(x), -g * sin(x))                                                                               \
    /* a = min, b = max; the gradient passes at the bounds (x == min or max), as torch's */                       \
    X(clamp, IN, CLAMP_LO(x, a) > b ? b : CLAMP_LO(x, a), x >= a && x <= b ? g : 0)                               \
    /* a = negative_slope */                                                                                      \
    X(leaky_relu, IN, x > 0 ? x : x * a, x > 0 ? g : g * a)                                                       \
    X(silu, IN, x * SIGMOID(x), g * SIGMOID(x) * (1 + x * (1 - SIGMOID(x))))                                      \
    /* a = beta, b = threshold: linear where beta·x > threshold */                                                \
    X(softplus, IN, x * a > b ? x : log1p(EXP_FAST(x * a)) / a,                                                   \
      x * a > b ? g : g * EXP_FAST(x * a) / (EXP_FAST(x * a) + 1))                                                \
    /* a = alpha */                                                                                               \
    X(elu, IN, x <= 0 ? expm1(x) * a : x, x <= 0 ? g * a * EXP_FAST(x) : g)

typedef enum {
#define X(name, reads, fwd, bwd) PW_##name,
    POINTWISE_OPS(X)
#undef X
} pointwise_op;

/* the row's scalar parameters */
typedef struct {
    double a, b;
} pw_params;

#define PW_FLOAT 1
#define EXP_FAST expf_vec
#define T float
#define FN(name) name##_f32
#include "pointwise_kernels.inc"
#undef T
#undef FN
#undef EXP_FAST
#define EXP_FAST exp
#define T double
#define FN(name) name##_f64
#include "pointwise_kernels.inc"
#undef T
#undef FN
#undef EXP_FAST
#undef PW_FLOAT
#define PW_FLOAT 0
#define T int32_t
#define FN(name) name##_i32
#include "pointwise_kernels.inc"
#undef T
#undef FN
#define T int64_t
#define FN(name) name##_i64
#include "pointwise_kernels.inc"
#undef T
#undef FN
#define T uint8_t
#define FN(name) name##_b8
#include "pointwise_kernels.inc"
#undef T
#undef FN
#undef PW_FLOAT

/* ---- the unary ops ---- */

/* an op's row: the op (first, so that a node's op is its row) and its kernels for f32, f64 */
typedef struct {
    ag_op op;
    ag_run_fn fwd[2], bwd[2];
} pointwise_def;

static void pointwise_backward(ag_node *n);
static const pointwise_def POINTWISE[] = {
#define X(name, reads, fwd, bwd)                                                                                      \
    [PW_##name] = {{"ag_" #name, pointwise_backward, READS_##reads}, {pw_##name##_fwd_f32, pw_##name##_fwd_f64},     \
                   {pw_##name##_bwd_f32, pw_##name##_bwd_f64}},
    POINTWISE_OPS(X)
#undef X
};

/* fn over same-shaped operands (2 or 3; y or dx first) */
static void pointwise_run(ag_run_fn fn, int nops, ag_tensor *const *ops, const pw_params *c) {
    int64_t bs[3][AG_MAX_DIMS];
    char *base[3];
    for (int k = 0; k < nops; k++) {
        ag__bcast_bstrides(ops[k], ops[0]->ndim, ops[0]->shape, bs[k]);
        base[k] = ag__ptr(ops[k]);
    }
    ag__foreach(ops[0]->ndim, ops[0]->shape, nops, base, (const int64_t(*)[AG_MAX_DIMS])bs, fn, (void *)c);
}

static void pointwise_backward(ag_node *n) {
    const pointwise_def *u = (const pointwise_def *)n->op;
    ag_tensor *x = n->in[0], *dx = ag_grad_buffer(x);
    if (!dx) return;
    pw_params c = {n->ctx.d[0], n->ctx.d[1]};
    pointwise_run(u->bwd[x->dtype == AG_F32 ? 0 : 1], 3, (ag_tensor *[]){dx, n->out->grad, x}, &c);
}

/* x: f32/f64, any shape, any strides; returns x's shape */
static ag_tensor *pointwise(pointwise_op k, ag_tensor *x, double a, double b) {
    const pointwise_def *u = &POINTWISE[k];
    if (!ag__check_float(u->op.name, x)) return NULL;
    ag_tensor *y = ag__new(x->dtype, x->ndim, x->shape);
    if (!y) return NULL;
    pw_params c = {a, b};
    pointwise_run(u->fwd[x->dtype == AG_F32 ? 0 : 1], 2, (ag_tensor *[]){y, x}, &c);
    ag_node *n = ag_finish(&u->op, y, 1, &x);
    if (n) {
        n->ctx.d[0] = a;
        n->ctx.d[1] = b;
    }
    return y;
}

/* torch.sin */
ag_tensor *ag_sin(ag_tensor *x) { return pointwise(PW_sin, x, 0, 0); }
/* torch.cos */
ag_tensor *ag_cos(ag_tensor *x) { return pointwise(PW_cos, x, 0, 0); }

/* torch.clamp(x, min, max): ±INFINITY for an absent bound */
ag_tensor *ag_clamp(ag_tensor *x, double min, double max) {
    if (isnan(min) || isnan(max)) {
        char b[128];
        ag_error("ag_clamp", "%s with min %g, max %g: a bound is NaN (pass -INFINITY or INFINITY for no bound)",
                 x ? ag_shape_str(x, b) : "NULL", min, max);
        return NULL;
    }
    return pointwise(PW_clamp, x, min, max);
}

/* torch.nn.functional.leaky_relu(x, negative_slope) */
ag_tensor *ag_leaky_relu(ag_tensor *x, double negative_slope) {
    return pointwise(PW_leaky_relu, x, negative_slope, 0);
}
/* torch.nn.functional.silu */
ag_tensor *ag_silu(ag_tensor *x) { return pointwise(PW_silu, x, 0, 0); }

/* torch.nn.functional.softplus(x, beta, threshold) */
ag_tensor *ag_softplus(ag_tensor *x, double beta, double threshold) {
    if (beta == 0 || isnan(beta)) {
        char b[128];
        ag_error("ag_softplus", "%s with beta %g: beta must be non-zero", x ? ag_shape_str(x, b) : "NULL", beta);
        return NULL;
    }
    return pointwise(PW_softplus, x, beta, threshold);
}

/* torch.nn.functional.elu(x, alpha) */
ag_tensor *ag_elu(ag_tensor *x, double alpha) { return pointwise(PW_elu, x, alpha, 0); }

/* ---- minimum / maximum ---- */

typedef struct {
    ag_run_fn k[5];
} minmax_kernels;
static const minmax_kernels MAXIMUM_FWD = {{maximum_fwd_f32, maximum_fwd_f64, maximum_fwd_i32, maximum_fwd_i64,
                                            maximum_fwd_b8}},
                            MINIMUM_FWD = {{minimum_fwd_f32, minimum_fwd_f64, minimum_fwd_i32, minimum_fwd_i64,
                                            minimum_fwd_b8}};
static const ag_run_fn MAXIMUM_BWD[2] = {maximum_bwd_f32, maximum_bwd_f64},
                       MINIMUM_BWD[2] = {minimum_bwd_f32, minimum_bwd_f64};

/* fn over nops operands broadcast to out's shape (out first) */
static void broadcast_run(ag_run_fn fn, int nops, ag_tensor *const *ops) {
    ag_tensor *out = ops[0];
    int64_t bs[4][AG_MAX_DIMS];
    char *base[4];
    for (int k = 0; k < nops; k++) {
        ag__bcast_bstrides(ops[k], out->ndim, out->shape, bs[k]);
        base[k] = ag__ptr(ops[k]);
    }
    ag__foreach(out->ndim, out->shape, nops, base, (const int64_t(*)[AG_MAX_DIMS])bs, fn, NULL);
}

/* each input's share in the broadcast shape (written whole), then summed down to its shape */
static void minmax_backward(ag_node *n) {
    ag_tensor *g = n->out->grad, *a = n->in[0], *b = n->in[1];
    const ag_run_fn *bwd = n->ctx.i[0] ? MAXIMUM_BWD : MINIMUM_BWD;
    ag_run_fn fn = bwd[g->dtype == AG_F32 ? 0 : 1];
    for (int k = 0; k < 2; k++) {
        ag_tensor *x = k ? b : a, *o = k ? a : b;
        if (!x->requires_grad) continue;
        ag_tensor *share = ag__new(g->dtype, g->ndim, g->shape);
        broadcast_run(fn, 4, (ag_tensor *[]){share, g, x, o});
        ag_accum_grad(x, share);
    }
}
static const ag_op MAXIMUM = {"ag_maximum", minmax_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)},
                   MINIMUM = {"ag_minimum", minmax_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

/* a, b: one dtype (any), shapes that broadcast; returns the broadcast shape */
static ag_tensor *minmax(const ag_op *op, const minmax_kernels *ks, bool is_max, ag_tensor *a, ag_tensor *b) {
    if (!ag__check_not_null(op->name, a) || !ag__check_not_null(op->name, b)) return NULL;
    if (a->dtype != b->dtype) {
        char b1[128], b2[128];
        ag_error(op->name, "%s %s and %s %s: dtypes differ (convert with ag_to)", ag_shape_str(a, b1),
                 ag_dtype_name(a->dtype), ag_shape_str(b, b2), ag_dtype_name(b->dtype));
        return NULL;
    }
    int64_t shape[AG_MAX_DIMS];
    int nd = ag_broadcast_shape(op->name, a, b, shape);
    if (nd < 0) return NULL;
    ag_tensor *y = ag__new(a->dtype, nd, shape);
    if (!y) return NULL;
    broadcast_run(ks->k[a->dtype], 3, (ag_tensor *[]){y, a, b});
    if (y->dtype == AG_F32 || y->dtype == AG_F64) {
        ag_node *n = ag_finish(op, y, 2, (ag_tensor *[]){a, b});
        if (n) n->ctx.i[0] = is_max;
    }
    return y;
}

/* torch.maximum */
ag_tensor *ag_maximum(ag_tensor *a, ag_tensor *b) { return minmax(&MAXIMUM, &MAXIMUM_FWD, true, a, b); }
/* torch.minimum */
ag_tensor *ag_minimum(ag_tensor *a, ag_tensor *b) { return minmax(&MINIMUM, &MINIMUM_FWD, false, a, b); }
