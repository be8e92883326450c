/* The recording half of autograd, for op authors (tensor/, nn/ and user extensions).
 *
 * An op is one public function that checks shapes, computes the forward result and ends with
 * ag_finish(); its backward is a static function beside it, named in a const ag_op with the
 * tensors that backward reads:
 *
 *     static void scale_backward(ag_node *n) {            // dx += dy * s
 *         ag_tensor *dy = n->out->grad;
 *         ag_accum_grad(n->in[0], ag_mul_scalar(dy, n->ctx.d[0]));
 *     }
 *     static const ag_op SCALE = {"scale", scale_backward, AG_SAVES_NONE}; // reads no values
 *     ag_tensor *scale(ag_tensor *x, double s) {
 *         ag_tensor *y = ...forward...;
 *         ag_node *n = ag_finish(&SCALE, y, 1, &x);
 *         if (n) n->ctx.d[0] = s;                         // saved for backward
 *         return y;
 *     }
 *
 * Backward runs with grad mode off, so ops called inside it record nothing (no double
 * backward). autograd/ walks the recorded nodes in reverse (ag_backward). The helpers an op's
 * forward and backward need (new tensors, element pointers, write-only gradient buffers, GEMM,
 * dtype templates) are in op.h, which includes this header.
 *
 * Version checks (PyTorch's): every tensor's storage has a version (ag_version) that each
 * in-place write moves on. ag_finish notes the versions of the tensors the op declares in
 * ag_op.saves, and ag_backward, before it calls the op's backward, compares them with the
 * versions then: if one of those tensors (or a view of its storage) was changed in place in
 * between, backward would read the wrong values, so it reports through the error handler
 * (naming the op, which input or the output, its shape, dtype and both versions) and stops.
 * So an op author states exactly which of the inputs and the output backward reads the
 * *values* of (shapes and strides do not count; what the op keeps in n->saved[] or n->extra is
 * its own unless it may be one of the inputs, e.g. t itself when contiguous):
 *     AG_SAVES_INPUT(k) | AG_SAVES_OUTPUT  some of them (input 29 stands for 29 and later)
 *     AG_SAVES_INPUTS                      every input, not the output (ag_recompute)
 *     AG_SAVES_NONE                        none (add, sum, views, a saved mask of its own...)
 *     0, or the field left out             all inputs and the output: the safe default, so an
 *                                          op that does not say is checked conservatively
 * (-Wextra warns about a field left out of a positional initializer: write AG_SAVES_ALL). */
#ifndef AG_NODE_H
#define AG_NODE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ag_op {
    const char *name;
    void (*backward)(ag_node *n);  /* accumulate into the inputs' grads from n->out->grad */
    unsigned saves;                /* the tensors backward reads (AG_SAVES_*); 0: all of them */
} ag_op;

#define AG_SAVES_ALL 0u
#define AG_SAVES_NONE (1u << 31) /* the bit that says "declared" */
#define AG_SAVES_OUTPUT (AG_SAVES_NONE | 1u << 30)
#define AG_SAVES_INPUT(k) (AG_SAVES_NONE | 1u << (k)) /* k <= 29; 29 stands for 29 and later */
#define AG_SAVES_INPUTS (AG_SAVES_NONE | ((1u << 30) - 1)) /* every input, not the output */

struct ag_node {
    const ag_op *op;
    ag_tensor *out;
    ag_tensor **in;      /* nin inputs, in the op's order (NULL entries allowed) */
    int nin;
    uint64_t seq;        /* creation order: the tape order */
    uint32_t visit;      /* engine bookkeeping */
    union {              /* small saved state */
        double d[4];
        int64_t i[8];
    } ctx;
    ag_tensor *saved[4]; /* saved tensors (e.g. softmax probabilities) */
    void *extra;         /* larger op-specific state, arena-allocated */
    uint32_t *versions;  /* ag_version of in[k] at versions[k], of out at versions[nin], when
                            recorded; NULL for an op that saves nothing (engine bookkeeping) */
};

/* Does an op with these inputs need to record? (grad mode on and some input requires grad) */
AG_API bool ag_any_requires_grad(int nin, ag_tensor *const *in);

/* End of every op's forward: reports an input that its arena has forgotten (made before the
 * last ag_arena_reset, or after a mark since rewound: tensor.h) and then records nothing,
 * runs the anomaly check if enabled and records a node when needed (copying the input
 * pointers and noting their and out's versions). Returns the node, or NULL when nothing was
 * recorded. An op that calls ag__check_not_null or ag__check_float (op.h) on an input gets the
 * same check there, before it reads the input's data. An in-place op has changed its tensor (and moved its
 * version on) before it calls this. */
AG_API ag_node *ag_finish(const ag_op *op, ag_tensor *out, int nin, ag_tensor *const *in);

/* Gradient buffer of t for the current backward pass, zeroed on first use. NULL if t does not
 * require grad (callers then skip the work). A leaf's buffer comes from the current arena and
 * accumulates across passes. A non-leaf's comes from the gradient pool (below) and is new in
 * every pass. */
AG_API ag_tensor *ag_grad_buffer(ag_tensor *t);

/* The gradient pool: buffers for non-leaf gradients in size classes (4 per power of two),
 * recycled rather than bump-allocated, so a backward pass holds only the gradients not yet
 * consumed and steady-state training reuses the same memory: once an op's backward has run,
 * the engine gives its output's gradient back (op.h's ag__grad_release). */
/* Bytes the pool holds (in use or free), for tests and benchmarks. */
AG_API size_t ag_grad_pool_bytes(void);
/* t->grad += g, where g has t's shape or a shape t broadcasts to (summed back down). Skips
 * NULL t and t that do not require grad. */
AG_API void ag_accum_grad(ag_tensor *t, ag_tensor *g);

#ifdef __cplusplus
}
#endif
#endif
