/* attograd autograd: the engine that replays recorded ops backward, parameters in one slab,
 * anomaly detection, and finite-difference gradient checking.
 *
 * Ops record themselves (tensor/node.h). ag_backward walks the nodes reachable from the output
 * in reverse creation order (the tape order) and calls each op's backward. Gradients of leaves
 * accumulate across calls until zeroed; gradients of intermediate tensors are valid for the
 * last pass only. Double backward (gradients of gradients) is not supported: backward runs
 * with grad mode off. */
#ifndef AG_AUTOGRAD_H
#define AG_AUTOGRAD_H

#include "../tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backpropagate from out. grad is dL/d(out) with out's shape; NULL means 1 and then out must
 * have one element. Reports through the error handler (and returns) on misuse, and when a
 * tensor that a recorded op's backward reads was changed in place after that op ran (the
 * version check, tensor/node.h): the pass stops before that op, and leaves keep what the ops
 * whose backward already ran in it accumulated.
 * As in PyTorch, only leaves keep their gradients: a non-leaf's ->grad is NULL afterwards
 * unless ag_retain_grad was called on it. Temporaries of each op's backward are freed (the
 * current arena is rewound) as soon as that op is done, and a non-leaf's gradient buffer goes
 * back to a pool once its producing op has consumed it: a pass holds only the live gradients.
 * What the forward saved stays until the arena is reset, so the graph can be backpropagated
 * again, as PyTorch's retain_graph=True allows (PyTorch refuses without it): a second
 * ag_backward over it gives the same gradients again, and leaves accumulate them. */
AG_API void ag_backward(ag_tensor *out, ag_tensor *grad);

/* Grad mode (on by default): off, ops record nothing (evaluation, and every op's backward).
 * Returns the previous setting, so scopes nest:
 *     bool prev = ag_set_grad_enabled(false); ...; ag_set_grad_enabled(prev); */
AG_API bool ag_set_grad_enabled(bool on);
AG_API bool ag_grad_enabled(void);

/* Leaf-gradient hooks, what data-parallel training (nn/dist/dist.h) hangs its gradient
 * reduction on, as PyTorch's DistributedDataParallel hangs it on the AccumulateGrad nodes. In an
 * outermost ag_backward pass, before any op's backward runs, expect(user, leaf) is called once
 * for every use of a leaf requiring grad by a node the pass will visit; then done(user, leaf)
 * once for each of those uses after the node's backward ran (or was skipped, no gradient having
 * reached it). When a leaf has had as many done as expect calls, no later op of the pass writes
 * its gradient: it is final. end(user) (may be NULL) follows the pass, also when it stopped at a
 * failed version check (some done calls then never come). A nested pass (ag_recompute's) calls
 * nothing: its node lists the parameters it reaches among its inputs. NULL removes the hooks;
 * without them the engine does no extra work. */
typedef struct {
    void (*expect)(void *user, ag_tensor *leaf);
    void (*done)(void *user, ag_tensor *leaf);
    void (*end)(void *user);
    void *user;
} ag_leaf_grad_hooks;
AG_API void ag_set_leaf_grad_hooks(const ag_leaf_grad_hooks *h);

/* Activation recomputation, as torch.utils.checkpoint.checkpoint: y = fn(ctx, in) whose
 * intermediates are not kept. The forward runs fn once and keeps only y; backward runs fn
 * again (grad on, the generator rng put back where it was, so dropout draws the same masks)
 * and backpropagates through that second graph. Trades a second forward of fn for the memory
 * of its intermediates. ctx (ctx_size bytes) is copied and handed to both runs; fn must
 * compute the same thing both times from in and what ctx points to, and every tensor it reads
 * that requires grad, other than parameters (leaves), must be one of the nin inputs (checked).
 * rng is the generator fn draws from (NULL: the global one); it must live until backward, as
 * must what ctx points to. Without grad mode it is fn(ctx, in). Reports through the error
 * handler and returns NULL on misuse. The version check (tensor/node.h) covers the inputs and
 * the parameters fn reads, which backward reads again, not y, which it does not (y may be
 * changed in place). */
typedef ag_tensor *(*ag_recompute_fn)(void *ctx, ag_tensor *const *in);
AG_API ag_tensor *ag_recompute(ag_recompute_fn fn, const void *ctx, size_t ctx_size, int nin, ag_tensor *const *in,
                               ag_rng *rng);

/* torch.Tensor.retain_grad: keep t->grad after backward although t is not a leaf (the copy is
 * made in the arena current during backward). No effect on leaves, which always keep it. */
AG_API void ag_retain_grad(ag_tensor *t);

/* Mark a leaf as requiring grad (or not). Its gradient buffer is allocated on first use from
 * the arena current at that time. */
AG_API void ag_requires_grad_(ag_tensor *t, bool on);
/* Zero t->grad if present. */
AG_API void ag_zero_grad_(ag_tensor *t);

/* Anomaly mode: after each op's forward and each node's backward, check the results for
 * NaN/Inf and report the first one through the error handler, naming the op and the shapes of
 * its inputs. Also switched on by the environment variable AG_ANOMALY=1. */
AG_API void ag_set_anomaly_enabled(bool on);
AG_API bool ag_anomaly_enabled(void);

/* ---- parameters: one slab for values, one parallel slab for gradients ------------------- */
typedef struct ag_params {
    ag_dtype dtype;
    int count;               /* number of parameter tensors */
    int64_t numel;           /* total elements */
    ag_tensor **list;        /* in the order added */
    ag_tensor *flat;         /* 1-d view of all values (valid after the last add) */
    ag_tensor *flat_grad;    /* 1-d view of all gradients */
    char *data, *grad;       /* the two slabs (numel elements of dtype each); moved by an add */
} ag_params;

AG_API ag_params *ag_params_new(ag_dtype dt);
AG_API void ag_params_free(ag_params *p);
/* Add a zero-initialised parameter named name (copied; PyTorch state_dict style, e.g.
 * "encoder.layers.0.linear1.weight"). Adding may move the slab: tensors keep their headers,
 * but views made of parameters before the last add are invalid. Duplicate names are misuse.
 * The parameters are views of one storage, the slab, and share its version counter (as views
 * of one buffer do in PyTorch): an in-place change to any of them (an optimizer step, a
 * checkpoint load, ag_fill_ on one) moves all their versions on, and a recorded graph that
 * saved one of them reports it at backward (tensor/node.h). Gradients share the other slab's.
 * Slabs that cannot be allocated are reported (naming the parameter and the bytes of each
 * slab) and give NULL; the set stays as it was. */
AG_API ag_tensor *ag_params_add(ag_params *p, const char *name, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_params_find(const ag_params *p, const char *name);
/* one memset of the gradient slab (the gradients' version moves on) */
AG_API void ag_params_zero_grad(ag_params *p);

/* ---- gradient checking ------------------------------------------------------------------- */
/* The function under test: builds its output from the inputs (and anything reachable through
 * ctx, e.g. a model's parameters) with differentiable ops. */
typedef ag_tensor *(*ag_fn)(int n, ag_tensor **inputs, void *ctx);

typedef struct {
    double eps;   /* 0 → 1e-6 (PyTorch's default) */
    double atol;  /* 0 → 1e-5 */
    double rtol;  /* 0 → 1e-3 */
    bool fast;    /* compare vᵀJu for random u, v (one backward, two forwards per input) */
    uint64_t seed;
} ag_gradcheck_opts;

typedef struct {
    bool ok;
    int input;          /* failing input, -1 if none */
    int64_t index;      /* flat element of that input (-1 in fast mode) */
    int64_t out_index;  /* flat element of the output (-1 in fast mode) */
    double numerical, analytic;
    char message[512];  /* what failed, where, both values and the error; empty when ok */
} ag_gradcheck_result;

/* Compare analytic gradients with central finite differences for every input that requires
 * grad. Inputs must be f64 (report otherwise). Inputs' data are perturbed and restored. The
 * same check with |numerical - analytic| <= atol + rtol * |numerical| as PyTorch's gradcheck.
 * opts may be NULL. */
AG_API ag_gradcheck_result ag_gradcheck(ag_fn f, void *ctx, int n, ag_tensor **inputs, const ag_gradcheck_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
