/* Optimizers, gradient clipping, learning-rate schedules, with PyTorch 1.13's update formulas
 * (the single-tensor, foreach=False code paths of torch.optim and torch.nn.utils.clip_grad).
 *
 * Each optimizer is made from a config struct whose _defaults() gives torch.optim's defaults
 * (ag_sgd_defaults(lr), ag_adam_defaults(), ag_adamw_defaults()), the convention of every
 * module's config (ag_mha_defaults, ag_gru_defaults, ag_transformer_defaults): start from it
 * and set the fields that differ by name.
 *
 * State lives in slabs parallel to the parameter slab (llm.c's layout): exp_avg, exp_avg_sq,
 * max_exp_avg_sq and momentum_buffer are each one array of params->numel elements in the params' dtype, so a step
 * is one loop over flat memory and allocates nothing. A parameter t's state is the slice
 * [t->offset, t->offset + numel(t)) of each slab, which is what a checkpoint saves per name.
 * Arithmetic is done in the params' dtype with every hyperparameter rounded to it first, as
 * PyTorch's CPU kernels do, so f32 results match PyTorch's scalar kernels element for element.
 * Misuse (bad hyperparameters, a parameter set that grew after the optimizer was made) is
 * reported through ag_error naming the function and the bad value. */
#ifndef AG_NN_OPTIM_H
#define AG_NN_OPTIM_H
#include "../../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AG_OPTIM_SGD, AG_OPTIM_ADAM, AG_OPTIM_ADAMW } ag_optim_kind;

typedef struct ag_optim {
    ag_optim_kind kind;
    ag_params *params;
    int64_t numel;           /* params->numel when created; the state slabs' length */
    /* hyperparameters; lr is read at every step, so a schedule just assigns it */
    double lr;
    double betas[2];         /* Adam, AdamW */
    double eps;              /* Adam, AdamW */
    double weight_decay;     /* SGD, Adam: L2 added to the gradient; AdamW: decoupled */
    double momentum, dampening;
    bool nesterov;           /* SGD */
    bool amsgrad;            /* Adam, AdamW: divide by the running maximum of exp_avg_sq */
    /* Steps taken. Adam's bias corrections use it (PyTorch's state["step"]); SGD treats its
     * momentum buffer as initialised once step > 0, so a loader restoring momentum_buffer
     * must also set step >= 1. */
    int64_t step;
    /* state slabs of numel elements of params->dtype, NULL when the optimizer has none */
    void *exp_avg, *exp_avg_sq, *max_exp_avg_sq, *momentum_buffer;
} ag_optim;

/* torch.optim.SGD's arguments */
typedef struct {
    double lr;           /* required (torch.optim.SGD has no default) */
    double momentum;     /* 0 */
    double dampening;    /* 0 */
    double weight_decay; /* 0 */
    bool nesterov;       /* false */
} ag_sgd_config;
/* SGD(lr) with torch's defaults for the rest */
AG_API ag_sgd_config ag_sgd_defaults(double lr);
/* torch.optim.SGD; state: momentum_buffer if momentum != 0. Each optimizer's state is a slab
 * per moment as large as the parameters'; one that cannot be allocated is reported (naming
 * the bytes) and the constructor returns NULL. */
AG_API ag_optim *ag_sgd_new(ag_params *params, const ag_sgd_config *cfg);

/* torch.optim.Adam's and AdamW's arguments */
typedef struct {
    double lr;           /* 1e-3 */
    double betas[2];     /* (0.9, 0.999) */
    double eps;          /* 1e-8 */
    double weight_decay; /* Adam 0 (L2 added to the gradient), AdamW 1e-2 (decoupled) */
    bool amsgrad;        /* false */
} ag_adam_config;
/* torch.optim.Adam()'s defaults */
AG_API ag_adam_config ag_adam_defaults(void);
/* torch.optim.AdamW()'s defaults (weight_decay 1e-2) */
AG_API ag_adam_config ag_adamw_defaults(void);
/* torch.optim.Adam; state: exp_avg, exp_avg_sq, and max_exp_avg_sq with amsgrad. NULL cfg: the defaults. */
AG_API ag_optim *ag_adam_new(ag_params *params, const ag_adam_config *cfg);
/* torch.optim.AdamW; the same state. NULL cfg: ag_adamw_defaults(). */
AG_API ag_optim *ag_adamw_new(ag_params *params, const ag_adam_config *cfg);
/* One update of every parameter from the gradient slab, with opt->lr. Parallel, thread-count independent. */
AG_API void ag_optim_step(ag_optim *opt);
/* Free the optimizer and its state slabs (not the parameters). */
AG_API void ag_optim_free(ag_optim *opt);

/* Number of state slabs opt keeps: 2 for Adam/AdamW (3 with amsgrad), 1 for SGD with momentum, else 0. */
AG_API int ag_optim_state_count(const ag_optim *opt);
/* The i-th state slab's PyTorch state_dict name ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"),
 * its memory in *slab (numel elements of the params' dtype) when slab is non-NULL; NULL if none. */
AG_API const char *ag_optim_state(const ag_optim *opt, int i, void **slab);
/* The state named name for parameter t, as a tensor of t's shape viewing the slab (header from
 * the current arena); NULL (reported) when opt has no such state or t is not one of its params. */
AG_API ag_tensor *ag_optim_state_view(const ag_optim *opt, const char *name, const ag_tensor *t);

/* torch.nn.utils.clip_grad_norm_(params, max_norm): total 2-norm of all gradients before
 * clipping (sum of squares in double, fixed order), then grads *= max_norm / (norm + 1e-6)
 * when that coefficient is < 1 (or NaN, as PyTorch's clamp propagates it). Returns NAN on misuse. */
AG_API double ag_clip_grad_norm(ag_params *params, double max_norm);

/* ---- learning-rate schedules: pure functions of the step (the update about to be taken,
 * counting from 1: pass opt->step + 1). Misuse reports and returns NAN. ---- */
typedef enum {
    /* Linear warmup then inverse square root:
     *   step <= warmup: base_lr * step / warmup      (0 at step 0, base_lr at step == warmup)
     *   step >  warmup: base_lr * sqrt(warmup / step)
     * warmup_steps >= 1. */
    AG_LR_WARMUP_INV_SQRT,
    /* "Noam" (Vaswani et al. 2017, as in The Annotated Transformer's rate(), base_lr its factor):
     *   base_lr * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 taken as 1.
     * Equals WARMUP_INV_SQRT with base_lr * (d_model * warmup)^-0.5 for step >= 1. */
    AG_LR_NOAM,
    /* Linear warmup then cosine decay to min_lr:
     *   step <  warmup:          base_lr * step / warmup
     *   warmup <= step <= total: min_lr + (base_lr - min_lr) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
     *   step >  total:           min_lr
     * 0 <= warmup_steps < total_steps, 0 <= min_lr <= base_lr. */
    AG_LR_COSINE,
} ag_lr_kind;

typedef struct {
    ag_lr_kind kind;
    double base_lr;       /* the peak rate; NOAM's factor */
    int64_t warmup_steps; /* 4000 (the Transformer paper's); COSINE: 0 */
    int64_t total_steps;  /* COSINE: the step the decay ends at; no default (0), must be set */
    double min_lr;        /* COSINE: 0 */
    int64_t d_model;      /* NOAM: 512 */
} ag_lr_schedule_config;

/* kind with base_lr and the defaults above */
AG_API ag_lr_schedule_config ag_lr_schedule_defaults(ag_lr_kind kind, double base_lr);
/* The rate for the update step (counting from 1), by the formulas above. */
AG_API double ag_lr_schedule_at(const ag_lr_schedule_config *s, int64_t step);

#ifdef __cplusplus
}
#endif
#endif
