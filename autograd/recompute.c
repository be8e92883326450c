/* Activation recomputation (torch.utils.checkpoint): a function's intermediates are forgotten
 * after its forward and computed again in backward. */
#include <string.h>

#include "../tensor/op.h"
#include "autograd.h"

typedef struct {
    ag_recompute_fn fn;
    void *ctx;      /* the caller's context, copied into the arena */
    ag_rng *rng;    /* the generator fn draws from (dropout), restored for the second run */
    uint64_t counter;
    int nin;        /* the caller's inputs; the node's further inputs are the leaves fn reads */
} recompute_state;

/* Run fn again on leaves standing in for the inputs, with grad on and the generator where it
 * was, then backpropagate n's gradient through that graph (a nested pass of the engine):
 * parameters receive theirs directly, the inputs' go to n's first st->nin inputs. The rest of
 * n's inputs are those parameters, listed so the engine makes their gradient buffers before
 * this backward's temporaries (which it frees afterwards). */
static void recompute_backward(ag_node *n) {
    const recompute_state *st = n->extra;
    ag_tensor **in = ag__alloc("ag_recompute", ag_arena_current(), sizeof(ag_tensor *) * (size_t)(st->nin ? st->nin : 1),
                               "the inputs of the recomputation");
    if (!in) return;
    for (int i = 0; i < st->nin; i++) {
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
    for (int i = 0; i < st->nin; i++)
        if (in[i]->grad) ag_accum_grad(n->in[i], in[i]->grad);
}

/* backward runs fn again on the inputs and the parameters (the node's inputs): their values
 * must be those of the forward; the output's values are not read (it may be changed in place,
 * as the Transformer's residual does) */
static const ag_op RECOMPUTE = {"ag_recompute", recompute_backward, AG_SAVES_INPUTS};

/* The graph fn recorded, walked from its output: the leaves requiring grad that it reads go
 * to scan.leaves (the inputs first, then each parameter once); false when it reaches a tensor
 * recorded before seq0 that is not an input (fn read the graph around it). Its nodes are all
 * new, so a node is marked seen by giving it a visit number no backward pass uses. */
#define SEEN UINT32_MAX
static struct {
    ag_tensor **leaves;
    ag_node **stack;
    size_t nleaves, cap_leaves, cap_stack;
} scan;

static bool scan_graph(ag_tensor *y, uint64_t seq0, int nin, ag_tensor *const *in) {
    scan.leaves = ag__grow(scan.leaves, &scan.cap_leaves, (size_t)nin, sizeof *scan.leaves);
    memcpy(scan.leaves, in, sizeof *in * (size_t)nin);
    scan.nleaves = (size_t)nin;
    size_t top = 0;
    scan.stack = ag__grow(scan.stack, &scan.cap_stack, 1, sizeof *scan.stack);
    scan.stack[top++] = y->node;
    y->node->visit = SEEN;
    while (top) {
        ag_node *n = scan.stack[--top];
        for (int k = 0; k < n->nin; k++) {
            ag_tensor *t = n->in[k];
            if (!t || !t->requires_grad) continue;
            bool known = false;
            for (size_t i = 0; i < scan.nleaves && !known; i++) known = scan.leaves[i] == t;
            if (known) continue;
            if (!t->node) { /* a parameter */
                scan.leaves = ag__grow(scan.leaves, &scan.cap_leaves, scan.nleaves + 1, sizeof *scan.leaves);
                scan.leaves[scan.nleaves++] = t;
            } else if (t->node->seq < seq0) {
                return false;
            } else if (t->node->visit != SEEN) {
                t->node->visit = SEEN;
                scan.stack = ag__grow(scan.stack, &scan.cap_stack, top + 1, sizeof *scan.stack);
                scan.stack[top++] = t->node;
            }
        }
    }
    return true;
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
    if (!y->node || y->node->seq < seq0) return y; /* fn handed back an existing tensor: nothing to forget */
    if (!scan_graph(y, seq0, nin, in)) {
        ag_error(op, "the function reads a tensor that requires grad but is not one of its %d inputs: pass every "
                 "such tensor in the inputs (its gradient would be lost)", nin);
        return NULL;
    }
    /* keep y's values only; the state for backward goes above them */
    ag_tensor *kept = ag_arena_rewind_keep(a, m, ag_detach(y));
    recompute_state *st = ag__alloc(op, a, sizeof *st + ctx_size, "the state backward reads");
    if (!kept || !st) return NULL;
    *st = (recompute_state){fn, ctx_size ? (char *)st + sizeof *st : NULL, r, counter, nin};
    if (ctx_size) memcpy(st->ctx, ctx, ctx_size);
    ag_node *n = ag__record(&RECOMPUTE, kept, (int)scan.nleaves, scan.leaves);
    if (!n) return NULL;
    n->extra = st;
    return kept;
}
