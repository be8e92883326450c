/* SGD, Adam, AdamW, gradient-norm clipping and learning-rate schedules with PyTorch 1.13's
 * formulas. Every kernel walks the parameter, gradient and state slabs as flat arrays: the
 * alignment gaps between parameters hold zeros in all of them and stay zero under every update,
 * so there is no per-parameter loop. */
#include <math.h>
#include <string.h>

#include "../../tensor/op.h"
#include "optim.h"

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

/* ---- kernels (optim_kernels.inc): sgd_f32, adam_f32, sumsq_f32, clip_f32 and the same for f64 ---- */

#define NCHUNK 64 /* fixed chunks of sumsq */
#define LANES 8   /* interleaved lanes per chunk of sumsq */
#define T float
#define FN(name) name##_f32
#define FMA fmaf
#define SQRT sqrtf
#include "optim_kernels.inc"
#undef T
#undef FN
#undef FMA
#undef SQRT
#define T double
#define FN(name) name##_f64
#define FMA fma
#define SQRT sqrt
#include "optim_kernels.inc"
#undef T
#undef FN
#undef FMA
#undef SQRT

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

/* a zeroed slab parallel to the parameters' (state for one value per parameter); NULL after
 * reporting through op */
static void *zero_slab(const char *op, const ag_params *params) {
    size_t bytes = (size_t)params->numel * ag_dtype_size(params->dtype);
    void *s = ag__try_malloc(bytes ? bytes : 1);
    if (!s) {
        ag_error(op, "cannot allocate %zu bytes of optimizer state for %lld parameters: out of memory", bytes,
                 (long long)params->numel);
        return NULL;
    }
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

ag_sgd_config ag_sgd_defaults(double lr) { return (ag_sgd_config){.lr = lr}; }

ag_adam_config ag_adam_defaults(void) { return (ag_adam_config){.lr = 1e-3, .betas = {0.9, 0.999}, .eps = 1e-8}; }

ag_adam_config ag_adamw_defaults(void) {
    ag_adam_config c = ag_adam_defaults();
    c.weight_decay = 1e-2;
    return c;
}

ag_optim *ag_sgd_new(ag_params *params, const ag_sgd_config *cfg) {
    const char *op = "ag_sgd_new";
    if (!cfg) {
        ag_error(op, "cfg is NULL: SGD needs a learning rate (ag_sgd_defaults(lr))");
        return NULL;
    }
    double lr = cfg->lr, momentum = cfg->momentum, dampening = cfg->dampening, weight_decay = cfg->weight_decay;
    bool nesterov = cfg->nesterov;
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
    if (momentum != 0 && !(o->momentum_buffer = zero_slab(op, params))) {
        ag_optim_free(o);
        return NULL;
    }
    return o;
}

static ag_optim *adam_new(const char *op, ag_optim_kind kind, ag_params *params, const ag_adam_config *cfg) {
    double lr = cfg->lr, beta1 = cfg->betas[0], beta2 = cfg->betas[1], eps = cfg->eps, weight_decay = cfg->weight_decay;
    if (!check_params(op, params) || !check_range(op, "learning rate", lr, 0, INFINITY, false) ||
        !check_range(op, "epsilon", eps, 0, INFINITY, false) || !check_range(op, "beta1", beta1, 0, 1, true) ||
        !check_range(op, "beta2", beta2, 0, 1, true) ||
        !check_range(op, "weight_decay", weight_decay, 0, INFINITY, false))
        return NULL;
    ag_optim *o = optim_new(kind, params, lr, weight_decay);
    o->betas[0] = beta1;
    o->betas[1] = beta2;
    o->eps = eps;
    o->amsgrad = cfg->amsgrad;
    if (!(o->exp_avg = zero_slab(op, params)) || !(o->exp_avg_sq = zero_slab(op, params)) ||
        (o->amsgrad && !(o->max_exp_avg_sq = zero_slab(op, params)))) {
        ag_optim_free(o);
        return NULL;
    }
    return o;
}

ag_optim *ag_adam_new(ag_params *params, const ag_adam_config *cfg) {
    ag_adam_config d = ag_adam_defaults();
    return adam_new("ag_adam_new", AG_OPTIM_ADAM, params, cfg ? cfg : &d);
}

ag_optim *ag_adamw_new(ag_params *params, const ag_adam_config *cfg) {
    ag_adam_config d = ag_adamw_defaults();
    return adam_new("ag_adamw_new", AG_OPTIM_ADAMW, params, cfg ? cfg : &d);
}

void ag_optim_free(ag_optim *opt) {
    if (!opt) return;
    ag_xfree(opt->exp_avg);
    ag_xfree(opt->exp_avg_sq);
    ag_xfree(opt->max_exp_avg_sq);
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
    ag__bump_version(opt->params->flat); /* every parameter changed in place (the slab's version) */
}

/* ---- state access for checkpoints ---- */

int ag_optim_state_count(const ag_optim *opt) {
    if (!opt) return 0;
    return opt->kind == AG_OPTIM_SGD ? (opt->momentum_buffer ? 1 : 0) : opt->max_exp_avg_sq ? 3 : 2;
}

const char *ag_optim_state(const ag_optim *opt, int i, void **slab) {
    if (i < 0 || i >= ag_optim_state_count(opt)) return NULL;
    if (opt->kind == AG_OPTIM_SGD) {
        if (slab) *slab = opt->momentum_buffer;
        return "momentum_buffer";
    }
    static const char *const names[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    if (slab) *slab = i == 0 ? opt->exp_avg : i == 1 ? opt->exp_avg_sq : opt->max_exp_avg_sq;
    return names[i];
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
        void *s = NULL;
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
    ag__bump_version(params->flat_grad); /* scaled in place, as torch's grad.mul_ */
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

static double lr_warmup_inv_sqrt(const char *op, int64_t step, double base_lr, int64_t warmup_steps) {
    if (!check_step(op, step, warmup_steps, 1) || !check_range(op, "base_lr", base_lr, 0, INFINITY, false))
        return NAN;
    if (step <= warmup_steps) return base_lr * (double)step / (double)warmup_steps;
    return base_lr * sqrt((double)warmup_steps / (double)step);
}

static double lr_noam(const char *op, int64_t step, int64_t d_model, int64_t warmup_steps, double factor) {
    if (!check_step(op, step, warmup_steps, 1) || !check_range(op, "base_lr", factor, 0, INFINITY, false))
        return NAN;
    if (d_model < 1) {
        ag_error(op, "invalid d_model %lld: must be >= 1", (long long)d_model);
        return NAN;
    }
    double s = step == 0 ? 1 : (double)step; /* the Annotated Transformer avoids 0^-0.5 this way */
    return factor * pow((double)d_model, -0.5) * fmin(pow(s, -0.5), s * pow((double)warmup_steps, -1.5));
}

static double lr_cosine(const char *op, int64_t step, double base_lr, int64_t warmup_steps, int64_t total_steps,
                        double min_lr) {
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

ag_lr_schedule_config ag_lr_schedule_defaults(ag_lr_kind kind, double base_lr) {
    return (ag_lr_schedule_config){
        .kind = kind, .base_lr = base_lr, .warmup_steps = kind == AG_LR_COSINE ? 0 : 4000, .d_model = 512};
}

double ag_lr_schedule_at(const ag_lr_schedule_config *s, int64_t step) {
    const char *op = "ag_lr_schedule_at";
    if (!s) {
        ag_error(op, "schedule is NULL");
        return NAN;
    }
    switch (s->kind) {
    case AG_LR_WARMUP_INV_SQRT:
        return lr_warmup_inv_sqrt("ag_lr_schedule_at (warmup_inv_sqrt)", step, s->base_lr, s->warmup_steps);
    case AG_LR_NOAM:
        return lr_noam("ag_lr_schedule_at (noam)", step, s->d_model, s->warmup_steps, s->base_lr);
    case AG_LR_COSINE:
        return lr_cosine("ag_lr_schedule_at (cosine)", step, s->base_lr, s->warmup_steps, s->total_steps, s->min_lr);
    }
    ag_error(op, "unknown schedule kind %d", (int)s->kind);
    return NAN;
}
