/* Elementwise ops with broadcasting. Each unary op is one line of a table below that gives its
 * forward and backward formulas side by side; unary_kernels.inc turns a line into the f32 and
 * f64 kernels (one body), and the line's row of UNARY holds its ag_op and kernels. The binary
 * ops and comparisons are tables of formulas too (binary_kernels.inc). */
#include <math.h>
#include <string.h>
#include <tgmath.h>

#include "internal.h"

/* ---- the strided loops: one per operand count, contiguous fast path first ---- */

#define AT(T, k, i) (*(T *)(p[k] + (i) * s[k]))
#define CONTIG2(T) (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T))
#define CONTIG3(T) (CONTIG2(T) && s[2] == (int64_t)sizeof(T))

/* ---- unary ops: y = f(x, s); dx += expr(g, x, y, s) ---- */

#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794
#define GELU_TANH_IN(x) ((T)SQRT_2_OVER_PI * ((x) + (T)0.044715 * (x) * (x) * (x)))

/* reads: the values dx reads besides g (ag_op.saves): IN x, OUT y, or NONE */
#define READS_NONE AG_SAVES_NONE
#define READS_IN AG_SAVES_INPUT(0)
#define READS_OUT AG_SAVES_OUTPUT
/*      name  reads  forward                                dx = (g: upstream grad)                              */
#define UNARY_OPS(X)                                                                                              \
    X(neg, NONE, -x, -g)                                                                                          \
    X(exp, OUT, exp(x), g * y)                                                                                    \
    X(log, IN, log(x), g / x)                                                                                     \
    X(sqrt, OUT, sqrt(x), g / (2 * y))                                                                            \
    X(abs, IN, fabs(x), x > 0 ? g : x < 0 ? -g : 0)                                                               \
    X(tanh, OUT, tanh(x), g * (1 - y * y))                                                                        \
    X(sigmoid, OUT, 1 / (1 + exp(-x)), g * y * (1 - y))                                                           \
    X(relu, OUT, x > 0 || isnan(x) ? x : 0, y > 0 || isnan(y) ? g : 0) /* NaN propagates, as in torch */         \
    X(gelu, IN, (T)0.5 * x * (1 + erf(x * (T)M_SQRT1_2)),                                                         \
      g * ((T)0.5 * (1 + erf(x * (T)M_SQRT1_2)) + x * (T)INV_SQRT_2PI * exp((T)-0.5 * x * x)))                   \
    X(gelu_tanh, IN, (T)0.5 * x * (1 + tanh(GELU_TANH_IN(x))),                                                    \
      g * ((T)0.5 * (1 + tanh(GELU_TANH_IN(x))) +                                                                 \
           (T)0.5 * x * (1 - tanh(GELU_TANH_IN(x)) * tanh(GELU_TANH_IN(x))) * (T)SQRT_2_OVER_PI *               \
               (1 + (T)3 * (T)0.044715 * x * x)))                                                                 \
    X(add_scalar, NONE, x + s, g)                                                                                 \
    X(sub_scalar, NONE, x - s, g)                                                                                 \
    X(rsub_scalar, NONE, s - x, -g)                                                                               \
    X(mul_scalar, NONE, x * s, g * s)                                                                             \
    X(div_scalar, NONE, x / s, g / s)                                                                             \
    X(pow_scalar, IN, pow(x, s), s == 0 ? 0 : g * s * pow(x, s - 1))

typedef struct { double s; } scalar_ctx;

/* the ops of the table by name: OP_neg, OP_exp, ... */
typedef enum {
#define X(name, reads, fwd, bwd) OP_##name,
    UNARY_OPS(X)
#undef X
} unary_op;

#define T float
#define FN(name) name##_f32
#include "unary_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "unary_kernels.inc"
#undef T
#undef FN

/* run fn over same-shaped operands (2 or 4) */
static void unary_run(ag_run_fn fn, ag_tensor *o0, ag_tensor *o1, ag_tensor *o2, ag_tensor *o3, double s) {
    ag_tensor *ops[4] = {o0, o1, o2, o3};
    int nops = o2 ? 4 : 2;
    int64_t bs[4][AG_MAX_DIMS];
    char *base[4];
    for (int k = 0; k < nops; k++) {
        ag__bcast_bstrides(ops[k], o0->ndim, o0->shape, bs[k]);
        base[k] = ag__ptr(ops[k]);
    }
    scalar_ctx c = {s};
    ag__foreach(o0->ndim, o0->shape, nops, base, (const int64_t(*)[AG_MAX_DIMS])bs, fn, &c);
}

/* an op's row: the op (first, so that a node's op is its row) and its kernels for f32, f64 */
typedef struct {
    ag_op op;
    ag_run_fn fwd[2], bwd[2];
} unary_def;

static void unary_backward(ag_node *n);
static const unary_def UNARY[] = {
#define X(name, reads, fwd, bwd)                                                                                      \
    [OP_##name] = {{"ag_" #name, unary_backward, READS_##reads}, {name##_fwd_f32, name##_fwd_f64},                    \
                   {name##_bwd_f32, name##_bwd_f64}},
    UNARY_OPS(X)
#undef X
};

static void unary_backward(ag_node *n) {
    const unary_def *u = (const unary_def *)n->op;
    ag_tensor *x = n->in[0], *y = n->out, *dx = ag_grad_buffer(x);
    if (!dx) return;
    unary_run(u->bwd[x->dtype == AG_F32 ? 0 : 1], dx, y->grad, x, y, n->ctx.d[0]);
}

static ag_tensor *unary(unary_op k, ag_tensor *x, double s) {
    const unary_def *u = &UNARY[k];
    if (!ag__check_float(u->op.name, x)) return NULL;
    ag_tensor *y = ag__new(x->dtype, x->ndim, x->shape);
    unary_run(u->fwd[x->dtype == AG_F32 ? 0 : 1], y, x, NULL, NULL, s);
    ag_node *n = ag_finish(&u->op, y, 1, &x);
    if (n) n->ctx.d[0] = s;
    return y;
}

ag_tensor *ag_neg(ag_tensor *a) { return unary(OP_neg, a, 0); }
ag_tensor *ag_exp(ag_tensor *a) { return unary(OP_exp, a, 0); }
ag_tensor *ag_log(ag_tensor *a) { return unary(OP_log, a, 0); }
ag_tensor *ag_sqrt(ag_tensor *a) { return unary(OP_sqrt, a, 0); }
ag_tensor *ag_abs(ag_tensor *a) { return unary(OP_abs, a, 0); }
ag_tensor *ag_tanh(ag_tensor *a) { return unary(OP_tanh, a, 0); }
ag_tensor *ag_sigmoid(ag_tensor *a) { return unary(OP_sigmoid, a, 0); }
ag_tensor *ag_relu(ag_tensor *a) { return unary(OP_relu, a, 0); }
ag_tensor *ag_gelu(ag_tensor *a) { return unary(OP_gelu, a, 0); }
ag_tensor *ag_gelu_tanh(ag_tensor *a) { return unary(OP_gelu_tanh, a, 0); }
ag_tensor *ag_add_scalar(ag_tensor *a, double s) { return unary(OP_add_scalar, a, s); }
ag_tensor *ag_sub_scalar(ag_tensor *a, double s) { return unary(OP_sub_scalar, a, s); }
ag_tensor *ag_rsub_scalar(ag_tensor *a, double s) { return unary(OP_rsub_scalar, a, s); }
ag_tensor *ag_mul_scalar(ag_tensor *a, double s) { return unary(OP_mul_scalar, a, s); }
ag_tensor *ag_div_scalar(ag_tensor *a, double s) { return unary(OP_div_scalar, a, s); }
ag_tensor *ag_pow_scalar(ag_tensor *a, double p) { return unary(OP_pow_scalar, a, p); }

/* ---- binary ops with broadcasting: y = f(a, b) ---- */

/*      name  y =          */
#define BINARY_OPS(X) X(add, a + b) X(sub, a - b) X(mul, a * b) X(div, a / b) X(pow, pow(a, b)) \
    X(land, a && b) X(lor, a || b)
#define COMPARE_OPS(X) X(eq, a == b) X(ne, a != b) X(lt, a < b) X(le, a <= b) X(gt, a > b) X(ge, a >= b)

typedef enum {
#define X(name, expr) BIN_##name,
    BINARY_OPS(X)
#undef X
} binary_formula;
typedef enum {
#define X(name, expr) CMP_##name,
    COMPARE_OPS(X)
#undef X
} compare_formula;

/* add_f32, ..., eq_f32, ..., where_f32, ...: the ops each dtype takes */
#define T float
#define FN(name) name##_f32
#define ARITH_OPS(X) X(add) X(sub) X(mul) X(div) X(pow)
#define LOGIC_OPS(X) 
#include "binary_kernels.inc"
#undef T
#undef FN
#undef ARITH_OPS
#undef LOGIC_OPS
#define T double
#define FN(name) name##_f64
#define ARITH_OPS(X) X(add) X(sub) X(mul) X(div) X(pow)
#define LOGIC_OPS(X) 
#include "binary_kernels.inc"
#undef T
#undef FN
#undef ARITH_OPS
#undef LOGIC_OPS
#define T int32_t
#define FN(name) name##_i32
#define ARITH_OPS(X) X(add) X(sub) X(mul)
#define LOGIC_OPS(X) 
#include "binary_kernels.inc"
#undef T
#undef FN
#undef ARITH_OPS
#undef LOGIC_OPS
#define T int64_t
#define FN(name) name##_i64
#define ARITH_OPS(X) X(add) X(sub) X(mul)
#define LOGIC_OPS(X) 
#include "binary_kernels.inc"
#undef T
#undef FN
#undef ARITH_OPS
#undef LOGIC_OPS
#define T uint8_t
#define FN(name) name##_b8
#define ARITH_OPS(X) 
#define LOGIC_OPS(X) X(land) X(lor)
#include "binary_kernels.inc"
#undef T
#undef FN
#undef ARITH_OPS
#undef LOGIC_OPS

/* kernels by dtype, NULL where the op does not take that dtype */
typedef struct { ag_run_fn k[5]; } kernels;
#define NUMERIC(name) {{name##_f32, name##_f64, name##_i32, name##_i64, NULL}}
#define FLOATS(name) {{name##_f32, name##_f64, NULL, NULL, NULL}}
#define ALL(name) {{name##_f32, name##_f64, name##_i32, name##_i64, name##_b8}}

/* Broadcast a and b, allocate y (dtype out_dt, or a's when out_dt < 0) and run the kernel. */
static ag_tensor *binary(const char *op, const kernels *ks, ag_tensor *a, ag_tensor *b, int out_dt) {
    if (!ag__check_not_null(op, a) || !ag__check_not_null(op, b)) return NULL;
    char b1[128], b2[128];
    if (a->dtype != b->dtype) {
        ag_error(op, "%s %s and %s %s: dtypes differ (convert with ag_to)", ag_shape_str(a, b1),
                 ag_dtype_name(a->dtype), ag_shape_str(b, b2), ag_dtype_name(b->dtype));
        return NULL;
    }
    ag_run_fn fn = ks->k[a->dtype];
    if (!fn) {
        ag_error(op, "%s of dtype %s is not supported", ag_shape_str(a, b1), ag_dtype_name(a->dtype));
        return NULL;
    }
    int64_t shape[AG_MAX_DIMS];
    int nd = ag_broadcast_shape(op, a, b, shape);
    if (nd < 0) return NULL;
    ag_tensor *y = ag__new(out_dt < 0 ? a->dtype : (ag_dtype)out_dt, nd, shape);
    int64_t bs[3][AG_MAX_DIMS];
    ag__bcast_bstrides(y, nd, shape, bs[0]);
    ag__bcast_bstrides(a, nd, shape, bs[1]);
    ag__bcast_bstrides(b, nd, shape, bs[2]);
    char *base[3] = {ag__ptr(y), ag__ptr(a), ag__ptr(b)};
    ag__foreach(nd, shape, 3, base, (const int64_t(*)[AG_MAX_DIMS])bs, fn, NULL);
    return y;
}

static const kernels ADD_K = NUMERIC(add), SUB_K = NUMERIC(sub), MUL_K = NUMERIC(mul), DIV_K = FLOATS(div),
                     POW_K = FLOATS(pow);

static bool wants(const ag_tensor *t) { return t && t->requires_grad; }

/*  op   backward: g = dL/dy; each input's share is summed back to its own shape by ag_accum_grad */
static void add_backward(ag_node *n) {
    ag_accum_grad(n->in[0], n->out->grad);
    ag_accum_grad(n->in[1], n->out->grad);
}
static void sub_backward(ag_node *n) {
    ag_accum_grad(n->in[0], n->out->grad);
    if (wants(n->in[1])) ag_accum_grad(n->in[1], ag_neg(n->out->grad));
}
static void mul_backward(ag_node *n) {
    ag_tensor *g = n->out->grad, *a = n->in[0], *b = n->in[1];
    if (wants(a)) ag_accum_grad(a, ag_mul(g, b));
    if (wants(b)) ag_accum_grad(b, ag_mul(g, a));
}
static void div_backward(ag_node *n) { /* da = g/b; db = -g a/b² = -g y/b */
    ag_tensor *g = n->out->grad, *a = n->in[0], *b = n->in[1];
    if (wants(a)) ag_accum_grad(a, ag_div(g, b));
    if (wants(b)) ag_accum_grad(b, ag_neg(ag_mul(g, ag_div(n->out, b))));
}
static void pow_backward(ag_node *n) { /* da = g b a^(b-1); db = g y log a, taken as 0 where a == 0 */
    ag_tensor *g = n->out->grad, *a = n->in[0], *b = n->in[1];
    if (wants(a)) ag_accum_grad(a, ag_mul(g, ag_mul(b, ag_pow(a, ag_sub_scalar(b, 1)))));
    if (wants(b)) {
        ag_tensor *loga = ag_masked_fill(ag_log(a), ag_eq_scalar(a, 0), 0);
        ag_accum_grad(b, ag_mul(g, ag_mul(n->out, loga)));
    }
}
static const ag_op ADD = {"ag_add", add_backward, AG_SAVES_NONE}, SUB = {"ag_sub", sub_backward, AG_SAVES_NONE},
                   MUL = {"ag_mul", mul_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)},
                   DIV = {"ag_div", div_backward, AG_SAVES_INPUT(1) | AG_SAVES_OUTPUT},
                   POW = {"ag_pow", pow_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_OUTPUT};

static ag_tensor *binary_op(const ag_op *op, const kernels *ks, ag_tensor *a, ag_tensor *b) {
    ag_tensor *y = binary(op->name, ks, a, b, -1);
    ag_tensor *in[2] = {a, b};
    if (y && (y->dtype == AG_F32 || y->dtype == AG_F64)) ag_finish(op, y, 2, in);
    return y;
}

ag_tensor *ag_add(ag_tensor *a, ag_tensor *b) { return binary_op(&ADD, &ADD_K, a, b); }
ag_tensor *ag_sub(ag_tensor *a, ag_tensor *b) { return binary_op(&SUB, &SUB_K, a, b); }
ag_tensor *ag_mul(ag_tensor *a, ag_tensor *b) { return binary_op(&MUL, &MUL_K, a, b); }
ag_tensor *ag_div(ag_tensor *a, ag_tensor *b) { return binary_op(&DIV, &DIV_K, a, b); }
ag_tensor *ag_pow(ag_tensor *a, ag_tensor *b) { return binary_op(&POW, &POW_K, a, b); }

/* an in-place op may change a unless it is a leaf that requires grad while grad mode is on (as
 * torch: with grad off, e.g. in an optimizer step, it may), or an expanded view */
static bool check_in_place(const char *op, const ag_tensor *a) {
    char b[128];
    if (ag_grad_enabled() && a->requires_grad && !a->node) {
        ag_error(op, "%s is a leaf that requires grad, used in an in-place operation with grad mode on: change it "
                     "with grad mode off (ag_set_grad_enabled(false)), or out of place", ag_shape_str(a, b));
        return false;
    }
    return ag__writable(op, a, NULL) != NULL;
}

ag_tensor *ag_mul_scalar_(ag_tensor *a, double s) {
    if (!ag__check_float("ag_mul_scalar_", a) || !check_in_place("ag_mul_scalar_", a)) return NULL;
    unary_run(a->dtype == AG_F32 ? mul_scalar_fwd_f32 : mul_scalar_fwd_f64, a, a, NULL, NULL, s);
    ag__bump_version(a);
    ag_tensor *y = ag__alias(a);
    ag_node *n = ag_finish(&UNARY[OP_mul_scalar].op, y, 1, &a); /* its backward reads neither x nor y */
    if (n) n->ctx.d[0] = s;
    return y;
}

ag_tensor *ag_add_(ag_tensor *a, ag_tensor *b) {
    const char *op = "ag_add_";
    if (!ag__check_float(op, a) || !ag__check_float(op, b) || !check_in_place(op, a)) return NULL;
    char b1[128], b2[128];
    int64_t shape[AG_MAX_DIMS];
    int nd = ag_broadcast_shape(op, a, b, shape);
    if (nd < 0) return NULL;
    if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd) != 0 || a->dtype != b->dtype) {
        ag_error(op, "%s %s += %s %s: b must have a's dtype and broadcast to a's shape", ag_shape_str(a, b1),
                 ag_dtype_name(a->dtype), ag_shape_str(b, b2), ag_dtype_name(b->dtype));
        return NULL;
    }
    const ag_tensor *src = ag__writable(op, a, b);
    if (!src) return NULL;
    ag__add_into(a, src); /* the same a + b per element as ag_add */
    ag__bump_version(a);
    ag_tensor *y = ag__alias(a), *in[2] = {a, b};
    ag_finish(&ADD, y, 2, in);
    return y;
}

/* ---- comparisons and logic (not differentiable) ---- */

static const kernels EQ_K = ALL(eq), NE_K = ALL(ne), LT_K = ALL(lt), LE_K = ALL(le), GT_K = ALL(gt), GE_K = ALL(ge);
static const kernels LAND_K = {{NULL, NULL, NULL, NULL, land_b8}}, LOR_K = {{NULL, NULL, NULL, NULL, lor_b8}};

ag_tensor *ag_eq(ag_tensor *a, ag_tensor *b) { return binary("ag_eq", &EQ_K, a, b, AG_BOOL); }
ag_tensor *ag_ne(ag_tensor *a, ag_tensor *b) { return binary("ag_ne", &NE_K, a, b, AG_BOOL); }
ag_tensor *ag_lt(ag_tensor *a, ag_tensor *b) { return binary("ag_lt", &LT_K, a, b, AG_BOOL); }
ag_tensor *ag_le(ag_tensor *a, ag_tensor *b) { return binary("ag_le", &LE_K, a, b, AG_BOOL); }
ag_tensor *ag_gt(ag_tensor *a, ag_tensor *b) { return binary("ag_gt", &GT_K, a, b, AG_BOOL); }
ag_tensor *ag_ge(ag_tensor *a, ag_tensor *b) { return binary("ag_ge", &GE_K, a, b, AG_BOOL); }
ag_tensor *ag_logical_and(ag_tensor *a, ag_tensor *b) { return binary("ag_logical_and", &LAND_K, a, b, AG_BOOL); }
ag_tensor *ag_logical_or(ag_tensor *a, ag_tensor *b) { return binary("ag_logical_or", &LOR_K, a, b, AG_BOOL); }

/* a (any dtype) against the number s as torch compares a tensor with a Python scalar: floats in
 * their own dtype (s rounded to it); integers and bool exactly, in f64 when their dtype cannot
 * hold s (a fraction, a value out of its range, NaN) */
static ag_tensor *compare_scalar(const char *op, const kernels *ks, ag_tensor *a, double s) {
    if (!ag__check_not_null(op, a)) return NULL;
    bool holds = a->dtype == AG_F32 || a->dtype == AG_F64 ||
                 (s == trunc(s) && (a->dtype == AG_I32   ? s >= -2147483648.0 && s <= 2147483647.0
                                    : a->dtype == AG_I64 ? s >= -9223372036854775808.0 && s < 9223372036854775808.0
                                                         : s == 0 || s == 1));
    ag_tensor *x = holds ? a : ag_to(a, AG_F64);
    return x ? binary(op, ks, x, ag_scalar(x->dtype, s), AG_BOOL) : NULL;
}

/* torch.eq, ne, lt, le, gt, ge with a scalar (a == s, ...) */
ag_tensor *ag_eq_scalar(ag_tensor *a, double s) { return compare_scalar("ag_eq_scalar", &EQ_K, a, s); }
ag_tensor *ag_ne_scalar(ag_tensor *a, double s) { return compare_scalar("ag_ne_scalar", &NE_K, a, s); }
ag_tensor *ag_lt_scalar(ag_tensor *a, double s) { return compare_scalar("ag_lt_scalar", &LT_K, a, s); }
ag_tensor *ag_le_scalar(ag_tensor *a, double s) { return compare_scalar("ag_le_scalar", &LE_K, a, s); }
ag_tensor *ag_gt_scalar(ag_tensor *a, double s) { return compare_scalar("ag_gt_scalar", &GT_K, a, s); }
ag_tensor *ag_ge_scalar(ag_tensor *a, double s) { return compare_scalar("ag_ge_scalar", &GE_K, a, s); }

ag_tensor *ag_logical_not(ag_tensor *a) {
    if (!ag__check_not_null("ag_logical_not", a)) return NULL;
    if (a->dtype != AG_BOOL) {
        char b[128];
        ag_error("ag_logical_not", "%s of dtype %s: expected bool", ag_shape_str(a, b), ag_dtype_name(a->dtype));
        return NULL;
    }
    return ag_eq(a, ag_scalar(AG_BOOL, 0));
}

/* ---- where / masked_fill ---- */

static const kernels WHERE_K = ALL(where);

static void where_backward(ag_node *n) {
    ag_tensor *g = n->out->grad, *c = n->in[0], *zero = ag_scalar(g->dtype, 0);
    if (wants(n->in[1])) ag_accum_grad(n->in[1], ag_where(c, g, zero));
    if (wants(n->in[2])) ag_accum_grad(n->in[2], ag_where(c, zero, g));
}
static const ag_op WHERE = {"ag_where", where_backward, AG_SAVES_INPUT(0)}; /* the condition */

static ag_tensor *where(const char *op, ag_tensor *c, ag_tensor *a, ag_tensor *b) {
    if (!ag__check_not_null(op, c) || !ag__check_not_null(op, a) || !ag__check_not_null(op, b)) return NULL;
    char b1[128], b2[128], b3[128];
    if (c->dtype != AG_BOOL || a->dtype != b->dtype) {
        ag_error(op, "condition %s %s, values %s %s and %s %s: condition must be bool and values of one dtype",
                 ag_shape_str(c, b1), ag_dtype_name(c->dtype), ag_shape_str(a, b2), ag_dtype_name(a->dtype),
                 ag_shape_str(b, b3), ag_dtype_name(b->dtype));
        return NULL;
    }
    int64_t s1[AG_MAX_DIMS], shape[AG_MAX_DIMS];
    int n1 = ag_broadcast_shape(op, a, b, s1);
    if (n1 < 0) return NULL;
    ag_tensor ab = {.ndim = n1};
    memcpy(ab.shape, s1, sizeof s1);
    int nd = ag_broadcast_shape(op, c, &ab, shape);
    if (nd < 0) return NULL;
    ag_tensor *y = ag__new(a->dtype, nd, shape);
    ag_tensor *ops[4] = {y, c, a, b};
    int64_t bs[4][AG_MAX_DIMS];
    char *base[4];
    for (int k = 0; k < 4; k++) {
        ag__bcast_bstrides(ops[k], nd, shape, bs[k]);
        base[k] = ag__ptr(ops[k]);
    }
    ag__foreach(nd, shape, 4, base, (const int64_t(*)[AG_MAX_DIMS])bs, WHERE_K.k[a->dtype], NULL);
    return y;
}

ag_tensor *ag_where(ag_tensor *cond, ag_tensor *a, ag_tensor *b) {
    ag_tensor *y = where("ag_where", cond, a, b);
    ag_tensor *in[3] = {cond, a, b};
    if (y && (y->dtype == AG_F32 || y->dtype == AG_F64)) ag_finish(&WHERE, y, 3, in);
    return y;
}

static void masked_fill_backward(ag_node *n) {
    ag_accum_grad(n->in[0], ag_masked_fill(n->out->grad, n->in[1], 0));
}
static const ag_op MASKED_FILL = {"ag_masked_fill", masked_fill_backward, AG_SAVES_INPUT(1)}; /* the mask */

ag_tensor *ag_masked_fill(ag_tensor *a, ag_tensor *mask, double value) {
    const char *op = "ag_masked_fill";
    if (!ag__check_not_null(op, a) || !ag__check_not_null(op, mask)) return NULL;
    char b1[128], b2[128];
    int64_t shape[AG_MAX_DIMS];
    int nd = ag_broadcast_shape(op, a, mask, shape);
    if (nd < 0) return NULL;
    if (nd != a->ndim || mask->dtype != AG_BOOL) {
        ag_error(op, "mask %s %s must be bool and broadcastable to the input %s", ag_shape_str(mask, b1),
                 ag_dtype_name(mask->dtype), ag_shape_str(a, b2));
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        if (shape[i] != a->shape[i]) {
            ag_error(op, "mask %s must be broadcastable to the input %s", ag_shape_str(mask, b1), ag_shape_str(a, b2));
            return NULL;
        }
    ag_tensor *y = where(op, mask, ag_scalar(a->dtype, value), a);
    if (y && (y->dtype == AG_F32 || y->dtype == AG_F64)) ag_finish(&MASKED_FILL, y, 2, (ag_tensor *[]){a, mask});
    return y;
}

/* ---- accumulation into a (possibly strided) destination ---- */

/* src summed down to dst's shape where it has more (or larger) dims, in dst's dtype: what
 * broadcasts onto dst element by element (NULL on failure) */
static const ag_tensor *onto(const ag_tensor *dst, const ag_tensor *src) {
    const ag_tensor *s = src;
    bool fits = s->ndim <= dst->ndim;
    for (int i = 0; fits && i < s->ndim; i++) {
        int64_t ss = s->shape[s->ndim - 1 - i], ds = dst->shape[dst->ndim - 1 - i];
        if (ss != ds && ss != 1) fits = false;
    }
    if (!fits && !(s = ag_sum_to_shape((ag_tensor *)src, dst->ndim, dst->shape))) return NULL;
    return s->dtype != dst->dtype ? ag_to((ag_tensor *)s, dst->dtype) : s;
}

bool ag__set_into(ag_tensor *dst, const ag_tensor *src) {
    const ag_tensor *s = onto(dst, src);
    return s && ag__copy(dst, s);
}

void ag__add_into(ag_tensor *dst, const ag_tensor *src) {
    const ag_tensor *s = onto(dst, src);
    if (!s) return;
    int64_t bs[3][AG_MAX_DIMS];
    ag__bcast_bstrides(dst, dst->ndim, dst->shape, bs[0]);
    ag__bcast_bstrides(dst, dst->ndim, dst->shape, bs[1]);
    ag__bcast_bstrides(s, dst->ndim, dst->shape, bs[2]);
    char *base[3] = {ag__ptr(dst), ag__ptr(dst), ag__ptr(s)};
    ag__foreach(dst->ndim, dst->shape, 3, base, (const int64_t(*)[AG_MAX_DIMS])bs, ADD_K.k[dst->dtype], NULL);
}
