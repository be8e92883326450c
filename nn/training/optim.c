/* SGD, Adam, AdamW, gradient-norm clipping and learning-rate schedules with PyTorch 1.13's
 * formulas. Every kernel walks the parameter, gradient and state slabs as flat arrays: the
 * alignment gaps between parameters hold zeros in all of them and stay zero under every update,
 * so there is no per-parameter loop. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "optim.h"

#define SQRT_f32 sqrtf
#define SQRT_f64 sqrt
#define FMA_f32 fmaf
#define FMA_f64 fma

/* PyTorch's CPU kernels (the AVX2 build it dispatches to on any x86-64 made since ~2013) fuse
 * add(x, y, alpha=a) = x + a y and addcmul(x, y, z, value=a) = x + (a y) z into one
 * fused multiply-add; an explicit fma() reproduces that rounding exactly (this file is C11, so
 * the compiler contracts nothing else). On x86-64 the kernels are also compiled for the FMA
 * instruction set and picked at load time; elsewhere fma() is libm's, exact but slower. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(__FMA__)
#define FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define FMA_CLONES
#endif

/* ---- kernels: one body per dtype; each mirrors torch.optim's _single_tensor_ functions line
 * by line, with the same rounding of scalars to T and the same operation order. ---- */

/* d_p = g + wd p; buf = d_p on the first step, else buf = momentum buf + (1 - dampening) d_p;
 * d_p = nesterov ? d_p + momentum buf : buf; p -= lr d_p */
#define SGD_KERNEL(T, S, D)                                                                                        \
    FMA_CLONES static void sgd_##S(const ag_optim *o, int64_t n) {                                                 \
        T *p = (T *)o->params->data, *buf = o->momentum_buffer;                                                    \
        const T *g = (const T *)o->params->grad;                                                                   \
        const T wd = (T)o->weight_decay, mom = (T)o->momentum, keep = (T)(1 - o->dampening), neg_lr = (T)-o->lr;   \
        const bool decay = o->weight_decay != 0, use_mom = o->momentum != 0, first = o->step == 0;                 \
        const bool nesterov = o->nesterov;                                                                         \
        _Pragma("omp parallel for simd if (parallel: n > AG_PAR_THRESHOLD) schedule(static)")                      \
        for (int64_t i = 0; i < n; i++) {                                                                          \
            T d = g[i];                                                                                            \
            if (decay) d = FMA_##S(wd, p[i], d);                                                                   \
            if (use_mom) {                                                                                         \
                T b;                                                                                               \
                if (first) {                                                                                       \
                    b = d;                                                                                         \
                } else {                                                                                           \
                    b = buf[i] * mom;                                                                              \
                    b = FMA_##S(keep, d, b);                                                                       \
                }                                                                                                  \
                buf[i] = b;                                                                                        \
                d = nesterov ? FMA_##S(mom, b, d) : b;                                                             \
            }                                                                                                      \
            p[i] = FMA_##S(neg_lr, d, p[i]);                                                                       \
        }                                                                                                          \
    }

/* Adam: g += wd p.  AdamW: p *= 1 - lr wd.  Both: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
 * p += -(lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
#define ADAM_KERNEL(T, S, D)                                                                                       \
    FMA_CLONES static void adam_##S(const ag_optim *o, int64_t n) {                                                \
        T *p = (T *)o->params->data, *m = o->exp_avg, *v = o->exp_avg_sq;                                          \
        const T *g = (const T *)o->params->grad;                                                                   \
        const double t = (double)o->step, b1d = o->betas[0], b2d = o->betas[1];                                    \
        const double bc1 = 1 - pow(b1d, t), bc2 = 1 - pow(b2d, t);                                                 \
        const T b1 = (T)b1d, a1 = (T)(1 - b1d), b2 = (T)b2d, a2 = (T)(1 - b2d), eps = (T)o->eps;                   \
        const T wd = (T)o->weight_decay, shrink = (T)(1 - o->lr * o->weight_decay);                                \
        const T neg_step = (T)(-(o->lr / bc1)), bc2_sqrt = (T)sqrt(bc2);                                           \
        const bool l2 = o->kind == AG_OPTIM_ADAM && o->weight_decay != 0, decoupled = o->kind == AG_OPTIM_ADAMW;   \
        _Pragma("omp parallel for simd if (parallel: n > AG_PAR_THRESHOLD) schedule(static)")                      \
        for (int64_t i = 0; i < n; i++) {                                                                          \
            T gi = g[i], pi = p[i];                                                                                \
            if (l2) gi = FMA_##S(wd, pi, gi);                                                                      \
            if (decoupled) pi = pi * shrink;                                                                       \
            T mi = m[i] * b1;                                                                                      \
            mi = FMA_##S(a1, gi, mi);                                                                              \
            T vi = v[i] * b2;                                                                                      \
            vi = FMA_##S(a2 * gi, gi, vi);                                                                         \
            T denom = SQRT_##S(vi) / bc2_sqrt;                                                                     \
            denom = denom + eps;                                                                                   \
            m[i] = mi;                                                                                             \
            v[i] = vi;                                                                                             \
            p[i] = pi + neg_step * mi / denom;                                                                     \
        }                                                                                                          \
    }

/* Σ g² in double over NCHUNK fixed chunks (boundaries depend on n only), each summed in 8
 * interleaved lanes (so the loop vectorises) combined in order, then the chunks in order: the
 * result depends on n alone, never on the thread count. */
#define NCHUNK 64
#define LANES 8
#define SUMSQ_KERNEL(T, S, D)                                                                                      \
    static double sumsq_##S(const void *gv, int64_t n) {                                                           \
        const T *g = gv;                                                                                           \
        double part[NCHUNK];                                                                                       \
        _Pragma("omp parallel for if (n > AG_PAR_THRESHOLD) schedule(static)") for (int c = 0; c < NCHUNK; c++) {  \
            int64_t i = n * c / NCHUNK, end = n * (c + 1) / NCHUNK;                                                \
            double lane[LANES] = {0}, s = 0;                                                                       \
            for (; i + LANES <= end; i += LANES)                                                                   \
                for (int l = 0; l < LANES; l++) lane[l] += (double)g[i + l] * (double)g[i + l];                    \
            for (int l = 0; l < LANES; l++) s += lane[l];                                                          \
            for (; i < end; i++) s += (double)g[i] * (double)g[i];                                                 \
            part[c] = s;                                                                                           \
        }                                                                                                          \
        double total = 0;                                                                                          \
        for (int c = 0; c < NCHUNK; c++) total += part[c];                                                         \
        return total;                                                                                              \
    }

/* PyTorch computes the coefficient on the f32/f64 norm tensor: max_norm / (norm + 1e-6) is
 * reciprocal(norm + 1e-6) * max_norm (Tensor.__rdiv__), then clamp(max=1) and grads *= coef. */
#define CLIP_KERNEL(T, S, D)                                                                                       \
    static void clip_##S(void *gv, int64_t n, double norm, double max_norm) {                                      \
        T *g = gv;                                                                                                 \
        const T coef = ((T)1 / ((T)norm + (T)1e-6)) * (T)max_norm;                                                 \
        if (coef >= 1) return; /* clamped to 1: multiplying would change nothing */                                \
        _Pragma("omp parallel for if (n > AG_PAR_THRESHOLD) schedule(static)") for (int64_t i = 0; i < n; i++)     \
            g[i] = g[i] * coef;                                                                                    \
    }

AG_FLOAT_TYPES(SGD_KERNEL)
AG_FLOAT_TYPES(ADAM_KERNEL)
AG_FLOAT_TYPES(SUMSQ_KERNEL)
AG_FLOAT_TYPES(CLIP_KERNEL)

/* ---- construction ---- */

/* NaN fails every comparison, so checks are written as !(good) to reject it too */
static bool check_range(const char *op, const char *what, double v, double lo, double hi, bool hi_open) {
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return true;
    if (isinf(hi))
        ag_error(op, "invalid %s %g: must be >= %g", what, v, lo);
    else
        ag_error(op, "invalid %s %g: must be in [%g, %g%c", what, v, lo, hi, hi_open ? ')' : ']');
    return false;
}

static bool check_params(const char *op, const ag_params *params) {
    if (!params) {
        ag_error(op, "params is NULL");
        return false;
    }
    if (params->count == 0) {
        ag_error(op, "empty parameter list: add parameters before creating the optimizer");
        return false;
    }
    return true;
}

static void *zero_slab(const ag_params *params) {
    size_t bytes = (size_t)params->numel * ag_dtype_size(params->dtype);
    void *s = ag_xmalloc(bytes ? bytes : 1);
    memset(s, 0, bytes);
    return s;
}

static ag_optim *optim_new(ag_optim_kind kind, ag_params *params, double lr, double weight_decay) {
    ag_optim *o = ag_xmalloc(sizeof *o);
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->params = params;
    o->numel = params->numel;
    o->lr = lr;
    o->weight_decay = weight_decay;
    return o;
}

ag_optim *ag_sgd_new(ag_params *params, double lr, double momentum, double dampening, double weight_decay,
                     bool nesterov) {
    const char *op = "ag_sgd_new";
    if (!check_params(op, params) || !check_range(op, "learning rate", lr, 0, INFINITY, false) ||
        !check_range(op, "momentum", momentum, 0, INFINITY, false) ||
        !check_range(op, "weight_decay", weight_decay, 0, INFINITY, false))
        return NULL;
    if (!isfinite(dampening)) {
        ag_error(op, "invalid dampening %g: must be finite", dampening);
        return NULL;
    }
    if (nesterov && (momentum <= 0 || dampening != 0)) {
        ag_error(op, "nesterov with momentum %g and dampening %g: Nesterov momentum requires a momentum and zero "
                 "dampening", momentum, dampening);
        return NULL;
    }
    ag_optim *o = optim_new(AG_OPTIM_SGD, params, lr, weight_decay);
    o->momentum = momentum;
    o->dampening = dampening;
    o->nesterov = nesterov;
    if (momentum != 0) o->momentum_buffer = zero_slab(params);
    return o;
}

static ag_optim *adam_new(const char *op, ag_optim_kind kind, ag_params *params, double lr, double beta1,
                          double beta2, double eps, double weight_decay) {
    if (!check_params(op, params) || !check_range(op, "learning rate", lr, 0, INFINITY, false) ||
        !check_range(op, "epsilon", eps, 0, INFINITY, false) || !check_range(op, "beta1", beta1, 0, 1, true) ||
        !check_range(op, "beta2", beta2, 0, 1, true) ||
        !check_range(op, "weight_decay", weight_decay, 0, INFINITY, false))
        return NULL;
    ag_optim *o = optim_new(kind, params, lr, weight_decay);
    o->betas[0] = beta1;
    o->betas[1] = beta2;
    o->eps = eps;
    o->exp_avg = zero_slab(params);
    o->exp_avg_sq = zero_slab(params);
    return o;
}

ag_optim *ag_adam_new(ag_params *params, double lr, double beta1, double beta2, double eps, double weight_decay) {
    return adam_new("ag_adam_new", AG_OPTIM_ADAM, params, lr, beta1, beta2, eps, weight_decay);
}

ag_optim *ag_adamw_new(ag_params *params, double lr, double beta1, double beta2, double eps, double weight_decay) {
    return adam_new("ag_adamw_new", AG_OPTIM_ADAMW, params, lr, beta1, beta2, eps, weight_decay);
}

void ag_optim_free(ag_optim *opt) {
    if (!opt) return;
    ag_xfree(opt->exp_avg);
    ag_xfree(opt->exp_avg_sq);
    ag_xfree(opt->momentum_buffer);
    ag_xfree(opt);
}

/* ---- stepping ---- */

void ag_optim_step(ag_optim *opt) {
    const char *op = "ag_optim_step";
    if (!opt) {
        ag_error(op, "optimizer is NULL");
        return;
    }
    /* lr is checked here, not only at creation, because schedules assign it between steps */
    if (!check_range(op, "learning rate", opt->lr, 0, INFINITY, false)) return;
    if (opt->params->numel != opt->numel) {
        ag_error(op, "the parameters have %lld elements but the optimizer was created for %lld: create the "
                 "optimizer after adding every parameter", (long long)opt->params->numel, (long long)opt->numel);
        return;
    }
    bool f32 = opt->params->dtype == AG_F32;
    if (opt->kind == AG_OPTIM_SGD) {
        (f32 ? sgd_f32 : sgd_f64)(opt, opt->numel);
        opt->step++;
    } else {
        opt->step++; /* PyTorch increments state["step"] before the bias corrections */
        (f32 ? adam_f32 : adam_f64)(opt, opt->numel);
    }
    opt->params->version++; /* every parameter changed in place (ag_version) */
}

/* ---- state access for checkpoints ---- */

int ag_optim_state_count(const ag_optim *opt) {
    if (!opt) return 0;
    return opt->kind == AG_OPTIM_SGD ? (opt->momentum_buffer ? 1 : 0) : 2;
}

const char *ag_optim_state(const ag_optim *opt, int i, void **slab) {
    if (i < 0 || i >= ag_optim_state_count(opt)) return NULL;
    const char *name = opt->kind == AG_OPTIM_SGD ? "momentum_buffer" : i == 0 ? "exp_avg" : "exp_avg_sq";
    if (slab) *slab = opt->kind == AG_OPTIM_SGD ? opt->momentum_buffer : i == 0 ? opt->exp_avg : opt->exp_avg_sq;
    return name;
}

ag_tensor *ag_optim_state_view(const ag_optim *opt, const char *name, const ag_tensor *t) {
    const char *op = "ag_optim_state_view";
    if (!opt || !name) {
        ag_error(op, "needs an optimizer and a state name");
        return NULL;
    }
    if (!ag__check_not_null(op, t)) return NULL;
    void *slab = NULL;
    for (int i = 0; i < ag_optim_state_count(opt); i++) {
        void *s;
        if (strcmp(ag_optim_state(opt, i, &s), name) == 0) slab = s;
    }
    if (!slab) {
        ag_error(op, "'%s': this optimizer keeps no such state", name);
        return NULL;
    }
    bool member = false;
    for (int i = 0; i < opt->params->count; i++) member |= opt->params->list[i] == t;
    if (!member || t->offset + ag_numel(t) > opt->numel) {
        ag_error(op, "'%s' for tensor '%s': not a parameter of this optimizer", name, t->name ? t->name : "(unnamed)");
        return NULL;
    }
    ag_tensor *v = ag_wrap(opt->params->dtype, t->ndim, t->shape, slab);
    v->offset = t->offset;
    return v;
}

/* ---- gradient clipping ---- */

double ag_clip_grad_norm(ag_params *params, double max_norm) {
    const char *op = "ag_clip_grad_norm";
    if (!params) {
        ag_error(op, "params is NULL");
        return NAN;
    }
    if (!check_range(op, "max_norm", max_norm, 0, INFINITY, false)) return NAN;
    bool f32 = params->dtype == AG_F32;
    double norm = sqrt((f32 ? sumsq_f32 : sumsq_f64)(params->grad, params->numel));
    (f32 ? clip_f32 : clip_f64)(params->grad, params->numel, norm, max_norm);
    params->grad_version++; /* scaled in place, as torch's grad.mul_ */
    return norm;
}

/* ---- learning-rate schedules ---- */

static bool check_step(const char *op, int64_t step, int64_t warmup, int64_t min_warmup) {
    if (step < 0) {
        ag_error(op, "invalid step %lld: must be >= 0", (long long)step);
        return false;
    }
    if (warmup < min_warmup) {
        ag_error(op, "invalid warmup_steps %lld: must be >= %lld", (long long)warmup, (long long)min_warmup);
        return false;
    }
    return true;
}

double ag_lr_warmup_inv_sqrt(int64_t step, double base_lr, int64_t warmup_steps) {
    const char *op = "ag_lr_warmup_inv_sqrt";
    if (!check_step(op, step, warmup_steps, 1) || !check_range(op, "base_lr", base_lr, 0, INFINITY, false))
        return NAN;
    if (step <= warmup_steps) return base_lr * (double)step / (double)warmup_steps;
    return base_lr * sqrt((double)warmup_steps / (double)step);
}

double ag_lr_noam(int64_t step, int64_t d_model, int64_t warmup_steps, double factor) {
    const char *op = "ag_lr_noam";
    if (!check_step(op, step, warmup_steps, 1) || !check_range(op, "factor", factor, 0, INFINITY, false))
        return NAN;
    if (d_model < 1) {
        ag_error(op, "invalid d_model %lld: must be >= 1", (long long)d_model);
        return NAN;
    }
    double s = step == 0 ? 1 : (double)step; /* the Annotated Transformer avoids 0^-0.5 this way */
    return factor * pow((double)d_model, -0.5) * fmin(pow(s, -0.5), s * pow((double)warmup_steps, -1.5));
}

double ag_lr_cosine(int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr) {
    const char *op = "ag_lr_cosine";
    if (!check_step(op, step, warmup_steps, 0) || !check_range(op, "base_lr", base_lr, 0, INFINITY, false) ||
        !check_range(op, "min_lr", min_lr, 0, base_lr, false))
        return NAN;
    if (total_steps <= warmup_steps) {
        ag_error(op, "total_steps %lld must exceed warmup_steps %lld", (long long)total_steps,
                 (long long)warmup_steps);
        return NAN;
    }
    if (step < warmup_steps) return base_lr * (double)step / (double)warmup_steps;
    if (step > total_steps) return min_lr;
    double progress = (double)(step - warmup_steps) / (double)(total_steps - warmup_steps);
    return min_lr + (base_lr - min_lr) * 0.5 * (1 + cos(M_PI * progress));
}
