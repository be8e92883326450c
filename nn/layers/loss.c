/* Losses as fused ops: cross entropy (log-softmax inside, never log of probabilities), NLL and
 * MSE, and the options every loss takes (ag_loss_config). Per-position work runs in parallel;
 * the reduction over positions is one serial sum in double, so results do not depend on the
 * thread count. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "layers_internal.h"

/* elements per partial sum in mse (fixed, so the summation order is fixed) */
#define BLOCK 8192

/* n doubles from the arena, a failure reported through op */
static double *scratch(const char *op, int64_t n) {
    return ag__alloc(op, ag_arena_current(), sizeof(double) * (size_t)max1(n), "the per-position losses");
}

static bool check_reduction(const char *op, ag_reduction r) {
    if (r == AG_REDUCTION_NONE || r == AG_REDUCTION_MEAN || r == AG_REDUCTION_SUM) return true;
    ag_error(op, "reduction %d: expected AG_REDUCTION_NONE, AG_REDUCTION_MEAN or AG_REDUCTION_SUM", (int)r);
    return false;
}

ag_loss_config ag_loss_defaults(void) {
    return (ag_loss_config){.reduction = AG_REDUCTION_MEAN, .ignore_index = -100, .beta = 1.0};
}

const ag_loss_config *ag__loss_config(const char *op, const ag_loss_config *cfg, bool weight, bool pos_weight,
                                      ag_loss_config *defaults) {
    if (!cfg) {
        *defaults = ag_loss_defaults();
        cfg = defaults;
    }
    if ((cfg->weight && !weight) || (cfg->pos_weight && !pos_weight)) {
        ag_error(op, "%s given, but this loss has no such option", cfg->weight && !weight ? "weight" : "pos_weight");
        return NULL;
    }
    return cfg;
}

/* ==== class-index losses: logits/log-probs viewed as (N, C, S), targets as (N, S) ========== */

typedef struct {
    int64_t n, c, s;       /* positions are r = i·s + k, class j of r at x[i·c·s + j·s + k] */
    int64_t ignore, valid; /* valid: targets not equal to ignore */
    double smoothing;
    const double *cw;      /* (C) class weights, or NULL for all 1 */
    double wsum;           /* Σ_c cw[c] (C without weights) */
    double denom;          /* MEAN's divisor: Σ cw[t] over the valid targets (valid without weights) */
    ag_reduction reduction;
} cls_info;

/* Check shapes, targets and options; contiguous logits into *xc and i64 targets into *tc. */
static bool class_layout(const char *op, ag_tensor *x, ag_tensor *t, const ag_loss_config *cfg, cls_info *L,
                         ag_tensor **xc, ag_tensor **tc) {
    if (!ag__check_float(op, x) || !ag__check_not_null(op, t) || !check_reduction(op, cfg->reduction)) return false;
    char b1[128], b2[128];
    bool ok = (t->dtype == AG_I64 || t->dtype == AG_I32) && x->ndim >= 1 && t->ndim == x->ndim - 1;
    if (ok && x->ndim >= 2) {
        ok = t->shape[0] == x->shape[0];
        for (int d = 2; ok && d < x->ndim; d++) ok = t->shape[d - 1] == x->shape[d];
    }
    if (!ok) {
        ag_error(op, "input %s and target %s %s: expected input (N,C,d1,...) with integer target (N,d1,...), or "
                     "input (C) with target ()",
                 ag_shape_str(x, b1), ag_shape_str(t, b2), ag_dtype_name(t->dtype));
        return false;
    }
    memset(L, 0, sizeof *L);
    L->n = x->ndim >= 2 ? x->shape[0] : 1;
    L->c = x->ndim >= 2 ? x->shape[1] : x->shape[0];
    L->s = ag__shape_numel(x->ndim > 2 ? x->ndim - 2 : 0, x->shape + 2);
    L->ignore = cfg->ignore_index;
    L->reduction = cfg->reduction;
    L->wsum = (double)L->c;
    if (cfg->weight) {
        ag_tensor *w = cfg->weight;
        if (!ag__check_float(op, w)) return false;
        if (w->ndim != 1 || w->shape[0] != L->c) {
            ag_error(op, "input %s: weight %s, expected (%lld): one weight per class", ag_shape_str(x, b1),
                     ag_shape_str(w, b2), (long long)L->c);
            return false;
        }
        ag_tensor *wd = ag__new(AG_F64, 1, &L->c);
        ag__copy(wd, w);
        L->cw = (const double *)ag__ptr(wd);
        L->wsum = 0;
        for (int64_t j = 0; j < L->c; j++) L->wsum += L->cw[j];
    }
    int64_t ignore = L->ignore;
    *xc = ag__dense(x);
    *tc = ag__new(AG_I64, t->ndim, t->shape);
    ag__copy(*tc, t);
    const int64_t *tv = (const int64_t *)ag__ptr(*tc);
    for (int64_t r = 0; r < L->n * L->s; r++) {
        if (tv[r] == ignore) continue;
        if (tv[r] < 0 || tv[r] >= L->c) {
            ag_error(op, "input %s, target %s: target %lld at flat position %lld is outside [0, %lld) and not "
                         "ignore_index %lld",
                     ag_shape_str(x, b1), ag_shape_str(t, b2), (long long)tv[r], (long long)r, (long long)L->c,
                     (long long)ignore);
            return false;
        }
        L->valid++;
        L->denom += L->cw ? L->cw[tv[r]] : 1.0;
    }
    return true;
}

/* Forward: lse[r] = log Σ_j exp x_j and loss[r] = (1-ε)(lse - x_t) + ε(lse - Σ_j x_j / C) (0 if ignored).
 * Backward: dx_j += w_r (softmax_j - ε/C - (1-ε)[j = t]), w_r = g[r·gs]·scale. Sums and lse in
 * double; the exponentials in the input's precision (f32: ag__expf, as accurate as torch's
 * float log-softmax), in row helpers inlined with ns = 1 (classes along the last dim, the usual
 * (N, C)) so those loops vectorise. */
#define T float
#define FN(name) name##_f32
#define EXP ag__expf
#include "cross_entropy_kernels.inc"
#undef T
#undef FN
#undef EXP
#define T double
#define FN(name) name##_f64
#define EXP exp
#include "cross_entropy_kernels.inc"
#undef T
#undef FN
#undef EXP

/* The loss tensor from per-position losses: targets' shape for NONE, else a 0-d sum or mean
 * (mean over valid targets; 0 when there are none). */
static ag_tensor *reduce_positions(ag_dtype dt, const ag_tensor *t, const cls_info *L, const double *loss) {
    int64_t npos = L->n * L->s;
    if (L->reduction == AG_REDUCTION_NONE) {
        ag_tensor *y = ag__new(dt, t->ndim, t->shape);
        ag__copy(y, ag_wrap(AG_F64, t->ndim, t->shape, (void *)loss));
        return y;
    }
    double sum = 0;
    for (int64_t r = 0; r < npos; r++) sum += loss[r];
    if (L->reduction == AG_REDUCTION_MEAN) sum = L->valid ? sum / L->denom : 0.0;
    return ag_scalar(dt, sum);
}

/* upstream grad per position: g[r·gs]·scale */
static void position_weights(const cls_info *L, int64_t *gs, double *scale) {
    *gs = L->reduction == AG_REDUCTION_NONE ? 1 : 0;
    *scale = L->reduction == AG_REDUCTION_MEAN ? (L->valid ? 1.0 / L->denom : 0.0) : 1.0;
}

static void cross_entropy_backward(ag_node *n) {
    ag_tensor *dx = ag_grad_buffer(n->in[0]);
    const cls_info *L = n->extra;
    if (!dx || (L->reduction == AG_REDUCTION_MEAN && L->valid == 0)) return;
    int64_t gs;
    double scale;
    position_weights(L, &gs, &scale);
    if (L->cw)
        (dx->dtype == AG_F32 ? ce_weighted_backward_f32 : ce_weighted_backward_f64)(
            ag__ptr(n->saved[0]), (const int64_t *)ag__ptr(n->saved[1]), L, (const double *)ag__ptr(n->saved[2]),
            ag__ptr(n->out->grad), gs, scale, ag__ptr(dx));
    else
        (dx->dtype == AG_F32 ? ce_backward_f32 : ce_backward_f64)(
            ag__ptr(n->saved[0]), (const int64_t *)ag__ptr(n->saved[1]), L, (const double *)ag__ptr(n->saved[2]),
            ag__ptr(n->out->grad), gs, scale, ag__ptr(dx));
}
/* saved[0] is the logits themselves when contiguous */
static const ag_op CROSS_ENTROPY = {"ag_cross_entropy", cross_entropy_backward, AG_SAVES_INPUT(0)};

ag_tensor *ag_cross_entropy(ag_tensor *logits, ag_tensor *targets, const ag_loss_config *cfg) {
    const char *op = "ag_cross_entropy";
    ag_loss_config dflt;
    if (!(cfg = ag__loss_config(op, cfg, true, false, &dflt))) return NULL;
    double label_smoothing = cfg->label_smoothing;
    cls_info L;
    ag_tensor *xc, *tc;
    if (!class_layout(op, logits, targets, cfg, &L, &xc, &tc)) return NULL;
    if (!(label_smoothing >= 0 && label_smoothing <= 1)) {
        char b[128];
        ag_error(op, "input %s: label_smoothing %g, expected a value in [0, 1]", ag_shape_str(logits, b),
                 label_smoothing);
        return NULL;
    }
    L.smoothing = label_smoothing;
    int64_t npos = L.n * L.s;
    ag_tensor *lse = ag__new_op(op, AG_F64, 1, &npos);
    double *loss = lse ? scratch(op, npos) : NULL;
    if (!loss) return NULL;
    if (L.cw)
        (logits->dtype == AG_F32 ? ce_weighted_forward_f32 : ce_weighted_forward_f64)(
            ag__ptr(xc), (const int64_t *)ag__ptr(tc), &L, (double *)ag__ptr(lse), loss);
    else
        (logits->dtype == AG_F32 ? ce_forward_f32 : ce_forward_f64)(ag__ptr(xc), (const int64_t *)ag__ptr(tc), &L,
                                                                     (double *)ag__ptr(lse), loss);
    ag_tensor *y = reduce_positions(logits->dtype, targets, &L, loss);
    ag_node *n = y ? ag_finish(&CROSS_ENTROPY, y, 1, &logits) : NULL;
    if (n) {
        cls_info *keep = ag__alloc(op, ag_arena_current(), sizeof *keep, "the state backward reads");
        if (!keep) return NULL;
        *keep = L;
        n->extra = keep;
        n->saved[0] = xc;
        n->saved[1] = tc;
        n->saved[2] = lse;
    }
    return y;
}

static void nll_backward(ag_node *n) {
    ag_tensor *dx = ag_grad_buffer(n->in[0]);
    const cls_info *L = n->extra;
    if (!dx || (L->reduction == AG_REDUCTION_MEAN && L->valid == 0)) return;
    int64_t gs;
    double scale;
    position_weights(L, &gs, &scale);
    (dx->dtype == AG_F32 ? nll_backward_f32 : nll_backward_f64)((const int64_t *)ag__ptr(n->saved[0]), L,
                                                                 ag__ptr(n->out->grad), gs, scale, ag__ptr(dx));
}
static const ag_op NLL_LOSS = {"ag_nll_loss", nll_backward, AG_SAVES_NONE}; /* its own targets */

ag_tensor *ag_nll_loss(ag_tensor *log_probs, ag_tensor *targets, const ag_loss_config *cfg) {
    const char *op = "ag_nll_loss";
    ag_loss_config dflt;
    if (!(cfg = ag__loss_config(op, cfg, true, false, &dflt))) return NULL;
    cls_info L;
    ag_tensor *xc, *tc;
    if (!class_layout(op, log_probs, targets, cfg, &L, &xc, &tc)) return NULL;
    double *loss = scratch(op, L.n * L.s);
    if (!loss) return NULL;
    (log_probs->dtype == AG_F32 ? nll_forward_f32 : nll_forward_f64)(ag__ptr(xc), (const int64_t *)ag__ptr(tc), &L,
                                                                      loss);
    ag_tensor *y = reduce_positions(log_probs->dtype, targets, &L, loss);
    ag_node *n = y ? ag_finish(&NLL_LOSS, y, 1, &log_probs) : NULL;
    if (n) {
        cls_info *keep = ag__alloc(op, ag_arena_current(), sizeof *keep, "the state backward reads");
        if (!keep) return NULL;
        *keep = L;
        n->extra = keep;
        n->saved[0] = tc;
    }
    return y;
}

/* ==== MSE =================================================================================== */

/* a, b, out, da, db: n contiguous elements. Forward writes (a-b)² to out (NONE) or per-BLOCK
 * partial sums; backward da += 2(a-b)·g[i·gs]·scale and db -= the same. */
#define T float
#define FN(name) name##_f32
#include "mse_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "mse_kernels.inc"
#undef T
#undef FN

static void mse_backward(ag_node *n) {
    ag_tensor *da = ag_grad_buffer(n->in[0]), *db = ag_grad_buffer(n->in[1]), *a = n->saved[0];
    ag_reduction red = (ag_reduction)n->ctx.i[0];
    int64_t count = ag_numel(a);
    double scale = red == AG_REDUCTION_MEAN ? 1.0 / (double)max1(count) : 1.0;
    (a->dtype == AG_F32 ? mse_backward_f32 : mse_backward_f64)(
        ag__ptr(a), ag__ptr(n->saved[1]), count, ag__ptr(n->out->grad), red == AG_REDUCTION_NONE ? 1 : 0, scale,
        da ? ag__ptr(da) : NULL, db ? ag__ptr(db) : NULL);
}
static const ag_op MSE_LOSS = {"ag_mse_loss", mse_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

ag_tensor *ag_mse_loss(ag_tensor *a, ag_tensor *b, const ag_loss_config *cfg) {
    const char *op = "ag_mse_loss";
    ag_loss_config dflt;
    if (!(cfg = ag__loss_config(op, cfg, false, false, &dflt))) return NULL;
    ag_reduction reduction = cfg->reduction;
    if (!ag__check_float(op, a) || !ag__check_float(op, b) || !check_reduction(op, reduction)) return NULL;
    if (!ag__same_shape(a, b) || a->dtype != b->dtype) {
        char b1[128], b2[128];
        ag_error(op, "input %s %s and target %s %s: expected the same shape and dtype", ag_shape_str(a, b1),
                 ag_dtype_name(a->dtype), ag_shape_str(b, b2), ag_dtype_name(b->dtype));
        return NULL;
    }
    ag_tensor *ac = ag__dense(a), *bc = ag__dense(b), *y = NULL;
    int64_t count = ag_numel(a);
    double *partial = scratch(op, (count + BLOCK - 1) / BLOCK);
    char *out = NULL;
    if (!ac || !bc || !partial) return NULL;
    if (reduction == AG_REDUCTION_NONE) {
        if (!(y = ag__new_op(op, a->dtype, a->ndim, a->shape))) return NULL;
        out = ag__ptr(y);
    }
    (a->dtype == AG_F32 ? mse_forward_f32 : mse_forward_f64)(ag__ptr(ac), ag__ptr(bc), count, out, partial);
    if (reduction != AG_REDUCTION_NONE) {
        double sum = 0;
        for (int64_t k = 0; k < (count + BLOCK - 1) / BLOCK; k++) sum += partial[k];
        /* mean of nothing is NaN, as in PyTorch */
        y = ag_scalar(a->dtype, reduction == AG_REDUCTION_MEAN ? sum / (double)count : sum);
    }
    ag_node *n = ag_finish(&MSE_LOSS, y, 2, (ag_tensor *[]){a, b});
    if (n) {
        n->saved[0] = ac;
        n->saved[1] = bc;
        n->ctx.i[0] = reduction;
    }
    return y;
}
