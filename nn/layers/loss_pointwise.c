/* Pointwise losses as fused ops: F.binary_cross_entropy, F.binary_cross_entropy_with_logits,
 * F.l1_loss, F.smooth_l1_loss and F.kl_div. Each is one public function (its shape and option
 * checks, forward, ag_finish) sharing one kernel template and one backward, which reads the
 * loss's kind from the node. Elements run in parallel; the reduction is a serial sum in double
 * of fixed BLOCK partial sums, so results do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "layers_internal.h"

/* elements per partial sum (fixed, so the summation order is fixed) */
#define BLOCK 8192

typedef enum { PW_BCE, PW_BCE_LOGITS, PW_L1, PW_SMOOTH_L1, PW_KL } pw_kind;

typedef struct {
    pw_kind kind;
    ag_reduction reduction;
    double beta;     /* smooth L1 */
    bool log_target; /* KL */
    int64_t count;   /* elements */
    int64_t batch;   /* BATCHMEAN's divisor: input.size(0) */
} pw_info;

#define T float
#define FN(name) name##_f32
#define LOG logf
#define LOG1P log1pf
#define EXP expf
#include "loss_pointwise_kernels.inc"
#undef T
#undef FN
#undef LOG
#undef LOG1P
#undef EXP
#define T double
#define FN(name) name##_f64
#define LOG log
#define LOG1P log1p
#define EXP exp
#include "loss_pointwise_kernels.inc"
#undef T
#undef FN
#undef LOG
#undef LOG1P
#undef EXP

/* factor from the summed loss to the reduced one */
static double reduce_scale(const pw_info *P) {
    switch (P->reduction) {
    case AG_REDUCTION_MEAN: return 1.0 / (double)P->count; /* mean of nothing is NaN, as in PyTorch */
    case AG_REDUCTION_BATCHMEAN: return 1.0 / (double)P->batch;
    default: return 1.0;
    }
}

static void pointwise_backward(ag_node *n) {
    const pw_info *P = n->extra;
    ag_tensor *dx = ag_grad_buffer(n->in[0]), *dy = ag_grad_buffer(n->in[1]), *x = n->saved[0];
    if (!dx && !dy) return;
    (x->dtype == AG_F32 ? pw_backward_f32 : pw_backward_f64)(
        P, ag__ptr(x), ag__ptr(n->saved[1]), n->saved[2] ? ag__ptr(n->saved[2]) : NULL,
        n->saved[3] ? ag__ptr(n->saved[3]) : NULL, P->count, ag__ptr(n->out->grad),
        P->reduction == AG_REDUCTION_NONE ? 1 : 0, reduce_scale(P), dx ? ag__ptr(dx) : NULL, dy ? ag__ptr(dy) : NULL);
}
/* saved: the dense input and target (themselves when contiguous), weight and pos_weight
 * broadcast to the input's shape (copies of their own) */
static const ag_op BCE = {"ag_binary_cross_entropy", pointwise_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};
static const ag_op BCE_LOGITS = {"ag_binary_cross_entropy_with_logits", pointwise_backward,
                                 AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};
static const ag_op L1 = {"ag_l1_loss", pointwise_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};
static const ag_op SMOOTH_L1 = {"ag_smooth_l1_loss", pointwise_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};
static const ag_op KL_DIV = {"ag_kl_div", pointwise_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

/* w broadcast to x's shape and dtype as a dense copy; NULL (no error) for w NULL, and *ok false
 * (reported) when w does not broadcast to x */
static ag_tensor *broadcast_weight(const char *op, const char *what, ag_tensor *w, const ag_tensor *x, bool *ok) {
    if (!w) return NULL;
    char b1[128], b2[128];
    bool fits = ag__check_float(op, w) && w->ndim <= x->ndim;
    for (int d = 0; fits && d < w->ndim; d++) {
        int64_t ws = w->shape[w->ndim - 1 - d], xs = x->shape[x->ndim - 1 - d];
        fits = ws == xs || ws == 1;
    }
    if (!fits) {
        ag_error(op, "input %s: %s %s does not broadcast to the input's shape", ag_shape_str(x, b1), what,
                 ag_shape_str(w, b2));
        *ok = false;
        return NULL;
    }
    ag_tensor *c = ag__new(x->dtype, x->ndim, x->shape);
    ag__copy(c, w);
    return c;
}

/* check, forward and record for every pointwise loss; P->kind, beta and log_target set */
static ag_tensor *pointwise(const ag_op *op_def, pw_info *P, ag_tensor *x, ag_tensor *y, const ag_loss_config *cfg) {
    const char *op = op_def->name;
    ag_loss_config dflt;
    bool weights = P->kind == PW_BCE || P->kind == PW_BCE_LOGITS;
    if (!(cfg = ag__loss_config(op, cfg, weights, P->kind == PW_BCE_LOGITS, &dflt))) return NULL;
    if (!ag__check_float(op, x) || !ag__check_float(op, y)) return NULL;
    char b1[128], b2[128];
    ag_reduction red = cfg->reduction;
    bool batchmean = P->kind == PW_KL && red == AG_REDUCTION_BATCHMEAN;
    if (!(red == AG_REDUCTION_NONE || red == AG_REDUCTION_MEAN || red == AG_REDUCTION_SUM || batchmean)) {
        ag_error(op, "reduction %d: expected AG_REDUCTION_NONE, AG_REDUCTION_MEAN or AG_REDUCTION_SUM%s", (int)red,
                 P->kind == PW_KL ? " or AG_REDUCTION_BATCHMEAN" : "");
        return NULL;
    }
    if (!ag__same_shape(x, y) || x->dtype != y->dtype) {
        ag_error(op, "input %s %s and target %s %s: expected the same shape and dtype", ag_shape_str(x, b1),
                 ag_dtype_name(x->dtype), ag_shape_str(y, b2), ag_dtype_name(y->dtype));
        return NULL;
    }
    if (batchmean && x->ndim == 0) {
        ag_error(op, "input (): reduction 'batchmean' needs a batch dimension");
        return NULL;
    }
    if (P->kind == PW_SMOOTH_L1 && !(cfg->beta >= 0)) {
        ag_error(op, "input %s: beta %g, expected a value >= 0", ag_shape_str(x, b1), cfg->beta);
        return NULL;
    }
    bool ok = true;
    ag_tensor *w = broadcast_weight(op, "weight", cfg->weight, x, &ok);
    ag_tensor *pw = ok ? broadcast_weight(op, "pos_weight", cfg->pos_weight, x, &ok) : NULL;
    if (!ok) return NULL;
    ag_tensor *xc = ag__dense(x), *yc = ag__dense(y);
    int64_t count = ag_numel(x);
    if (P->kind == PW_BCE) {
        ag_tensor *xd = ag__new(AG_F64, x->ndim, x->shape);
        ag__copy(xd, xc);
        const double *v = (const double *)ag__ptr(xd);
        for (int64_t i = 0; i < count; i++)
            if (!(v[i] >= 0 && v[i] <= 1)) {
                ag_error(op, "input %s: element %lld is %g; all elements of input should be between 0 and 1",
                         ag_shape_str(x, b1), (long long)i, v[i]);
                return NULL;
            }
    }
    if (P->kind == PW_SMOOTH_L1 && cfg->beta == 0) P->kind = PW_L1; /* as F.smooth_l1_loss dispatches */
    P->beta = cfg->beta;
    P->log_target = cfg->log_target;
    P->reduction = red;
    P->count = count;
    P->batch = x->ndim ? x->shape[0] : 1;
    int64_t nb = (count + BLOCK - 1) / BLOCK;
    double *partial = ag__alloc(op, ag_arena_current(), sizeof(double) * (size_t)max1(nb), "the partial sums");
    ag_tensor *out = NULL;
    if (!partial) return NULL;
    if (red == AG_REDUCTION_NONE && !(out = ag__new_op(op, x->dtype, x->ndim, x->shape))) return NULL;
    (x->dtype == AG_F32 ? pw_forward_f32 : pw_forward_f64)(P, ag__ptr(xc), ag__ptr(yc), w ? ag__ptr(w) : NULL,
                                                           pw ? ag__ptr(pw) : NULL, count, out ? ag__ptr(out) : NULL,
                                                           partial);
    if (!out) {
        double sum = 0;
        for (int64_t k = 0; k < nb; k++) sum += partial[k];
        out = ag_scalar(x->dtype, sum * reduce_scale(P));
    }
    ag_node *n = ag_finish(op_def, out, 2, (ag_tensor *[]){x, y});
    if (n) {
        pw_info *keep = ag__alloc(op, ag_arena_current(), sizeof *keep, "the state backward reads");
        if (!keep) return NULL;
        *keep = *P;
        n->extra = keep;
        n->saved[0] = xc;
        n->saved[1] = yc;
        n->saved[2] = w;
        n->saved[3] = pw;
    }
    return out;
}

ag_tensor *ag_binary_cross_entropy(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg) {
    pw_info P = {.kind = PW_BCE};
    return pointwise(&BCE, &P, input, target, cfg);
}

ag_tensor *ag_binary_cross_entropy_with_logits(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg) {
    pw_info P = {.kind = PW_BCE_LOGITS};
    return pointwise(&BCE_LOGITS, &P, input, target, cfg);
}

ag_tensor *ag_l1_loss(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg) {
    pw_info P = {.kind = PW_L1};
    return pointwise(&L1, &P, input, target, cfg);
}

ag_tensor *ag_smooth_l1_loss(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg) {
    pw_info P = {.kind = PW_SMOOTH_L1};
    return pointwise(&SMOOTH_L1, &P, input, target, cfg);
}

ag_tensor *ag_kl_div(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg) {
    pw_info P = {.kind = PW_KL};
    return pointwise(&KL_DIV, &P, input, target, cfg);
}
