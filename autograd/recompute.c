/* Activation recomputation (torch.utils.checkpoint): a function's intermediates are forgotten
 * after its forward and computed again in backward. */
#include <string.h>

#include "../tensor/internal.h"
#include "autograd.h"

typedef struct {
    ag_recompute_fn fn;
    void *ctx;      /* the caller's context, copied into the arena */
    ag_rng *rng;    /* the generator fn draws from (dropout), restored for the second run */
    uint64_t counter;
} recompute_state;

/* Run fn again on leaves standing in for the inputs, with grad on and the generator where it
 * was, then backpropagate n's gradient through that graph (a nested pass of the engine):
 * parameters receive theirs directly, the inputs' go to n's inputs. */
static void recompute_backward(ag_node *n) {
    const recompute_state *st = n->extra;
    ag_tensor **in = ag_arena_alloc(ag_arena_current(), sizeof(ag_tensor *) * (size_t)n->nin);
    for (int i = 0; i < n->nin; i++) {
        in[i] = ag_detach(n->in[i]);
        if (n->in[i]->requires_grad) ag_requires_grad_(in[i], true);
    }
    uint64_t now = st->rng->counter;
    st->rng->counter = st->counter;
    bool prev = ag_set_grad_enabled(true);
    ag_tensor *y = st->fn(st->ctx, in);
    ag_set_grad_enabled(prev);
    st->rng->counter = now;
    if (!y || !y->requires_grad || !ag__same_shape(y, n->out)) {
        char b1[128], b2[128];
        ag_error("ag_recompute", "the second run of the function gave %s%s, the first %s: it must compute the "
                 "same thing from the same inputs", y ? ag_shape_str(y, b1) : "NULL",
                 y && !y->requires_grad ? " without grad" : "", ag_shape_str(n->out, b2));
        return;
    }
    ag_backward(y, n->out->grad);
    for (int i = 0; i < n->nin; i++)
        if (in[i]->grad) ag_accum_grad(n->in[i], in[i]->grad);
}

static const ag_op RECOMPUTE = {"ag_recompute", recompute_backward};

/* true when the graph below y reaches a tensor recorded before seq0 other than the inputs */
static bool reads_outside(ag_tensor *y, uint64_t seq0, int nin, ag_tensor *const *in) {
    ag_arena *a = ag_arena_current();
    ag_arena_mark m = ag_arena_get_mark(a);
    size_t cap = 64, top = 0;
    ag_node **stack = ag_arena_alloc(a, cap * sizeof *stack);
    bool outside = false;
    stack[top++] = y->node;
    while (top && !outside) {
        ag_node *n = stack[--top];
        for (int k = 0; k < n->nin && !outside; k++) {
            ag_tensor *t = n->in[k];
            if (!t || !t->node) continue;
            bool input = false;
            for (int i = 0; i < nin; i++) input |= t == in[i];
            if (input) continue;
            if (t->node->seq < seq0) {
                outside = true;
            } else {
                if (top == cap) { /* rare: grow within the arena (the old stack is left behind) */
                    ag_node **bigger = ag_arena_alloc(a, 2 * cap * sizeof *bigger);
                    memcpy(bigger, stack, cap * sizeof *stack);
                    stack = bigger;
                    cap *= 2;
                }
                stack[top++] = t->node;
            }
        }
    }
    ag_arena_rewind(a, m);
    return outside;
}

ag_tensor *ag_recompute(ag_recompute_fn fn, const void *ctx, size_t ctx_size, int nin, ag_tensor *const *in,
                        ag_rng *rng) {
    const char *op = "ag_recompute";
    if (!fn || nin < 0 || (nin && !in)) {
        ag_error(op, "no function, or %d inputs given without an array", nin);
        return NULL;
    }
    for (int i = 0; i < nin; i++)
        if (!ag__check_not_null(op, in[i])) return NULL;
    if (!ag_grad_enabled()) return fn((void *)ctx, in); /* nothing to keep: a plain call */
    ag_arena *a = ag_arena_current();
    ag_rng *r = rng ? rng : ag_rng_global();
    uint64_t counter = r->counter, seq0 = ag__next_seq();
    ag_arena_mark m = ag_arena_get_mark(a);
    ag_tensor *y = fn((void *)ctx, in);
    if (!y) return NULL;
    if (!y->requires_grad) return ag_arena_rewind_keep(a, m, y); /* no gradient will be asked for */
    if (y->node->seq < seq0) return y; /* fn handed back an existing tensor: nothing to forget */
    if (reads_outside(y, seq0, nin, in)) {
        ag_error(op, "the function reads a tensor that requires grad but is not one of its %d inputs: pass every "
                 "such tensor in the inputs (its gradient would be lost)", nin);
        return NULL;
    }
    /* keep y's values only; the state for backward goes above them */
    ag_tensor *kept = ag_arena_rewind_keep(a, m, ag_detach(y));
    recompute_state *st = ag_arena_alloc(a, sizeof *st + ctx_size);
    *st = (recompute_state){fn, ctx_size ? (char *)st + sizeof *st : NULL, r, counter};
    if (ctx_size) memcpy(st->ctx, ctx, ctx_size);
    ag_node *n = ag__record(&RECOMPUTE, kept, nin, in);
    n->extra = st;
    return kept;
}
