/* The backward engine: collect the nodes reachable from the output, replay them newest first
 * (reverse tape order), calling each op's backward. Also anomaly mode. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/op.h"
#include "autograd.h"

/* Reachable nodes; kept across calls so steady-state backward allocates nothing. A backward
 * run inside an op's backward (ag_recompute) stacks its nodes above the running pass's:
 * order[order_top...]. */
static ag_node **order;
static size_t order_cap, order_top;
static uint32_t passes = 1; /* the last pass number handed out */

static void order_reserve(size_t n) { order = ag__grow(order, &order_cap, n, sizeof *order); }

static int newest_first(const void *a, const void *b) {
    uint64_t x = (*(ag_node *const *)a)->seq, y = (*(ag_node *const *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every node reachable from root, marked with this pass, into order[base...]; returns the
 * count. order[] doubles as the DFS stack: entries [done, top) are discovered but not yet
 * expanded. */
static size_t collect(ag_node *root, uint32_t pass, size_t base) {
    size_t top = base;
    order_reserve(top + 1);
    root->visit = pass;
    order[top++] = root;
    for (size_t done = base; done < top; done++) {
        ag_node *n = order[done];
        for (int i = 0; i < n->nin; i++) {
            ag_tensor *in = n->in[i];
            if (!in || !in->node || in->node->visit == pass) continue;
            order_reserve(top + 1);
            in->node->visit = pass;
            order[top++] = in->node;
        }
    }
    qsort(order + base, top - base, sizeof *order, newest_first);
    return top - base;
}

static bool anomaly;

static void check_backward(ag_node *n);

/* ---- leaf-gradient hooks (ag_set_leaf_grad_hooks): NULL on the plain path ---- */
static ag_leaf_grad_hooks leaf_hooks;
static const ag_leaf_grad_hooks *hooks;

void ag_set_leaf_grad_hooks(const ag_leaf_grad_hooks *h) {
    if (h) leaf_hooks = *h;
    hooks = h ? &leaf_hooks : NULL;
}

/* call fn for every input of n that is a leaf requiring grad, once per use */
static void each_leaf_input(const ag_node *n, void (*fn)(void *, ag_tensor *), void *user) {
    for (int k = 0; k < n->nin; k++) {
        ag_tensor *in = n->in[k];
        if (in && !in->node && in->requires_grad) fn(user, in);
    }
}

/* does op's saves name input k (or, with k == nin, the output)? (tensor/node.h) */
static bool saved(unsigned saves, int k, int nin) {
    if (saves == AG_SAVES_ALL) return true;
    unsigned bit = k == nin ? AG_SAVES_OUTPUT & ~AG_SAVES_NONE : 1u << (k < 29 ? k : 29);
    return saves & bit;
}

/* set when a pass stops at a failed version check, so that the passes it is nested in (an
 * op's backward that runs one: ag_recompute) stop too; cleared when the outermost one ends */
static bool stopped;

/* PyTorch's version check: false (after reporting the first one) when a tensor that n's
 * backward reads was changed in place since n was recorded */
static bool versions_unchanged(const ag_node *n) {
    for (int k = 0; k <= n->nin; k++) {
        const ag_tensor *t = k < n->nin ? n->in[k] : n->out;
        uint32_t now = ag__version(t);
        if (now == n->versions[k] || !saved(n->op->saves, k, n->nin)) continue;
        char b[128], what[320];
        const char *name = t->name ? t->name : "";
        if (k == n->nin)
            snprintf(what, sizeof what, "its output %s %s", ag_shape_str(t, b), ag_dtype_name(t->dtype));
        else
            snprintf(what, sizeof what, "its input %d, %s %s%s%s%s (%s%s)", k, ag_shape_str(t, b),
                     ag_dtype_name(t->dtype), *name ? " '" : "", name, *name ? "'" : "",
                     t->node ? "the output of " : "a leaf", t->node ? t->node->op->name : "");
        ag_error(n->op->name,
                 "a tensor needed for gradient computation has been modified by an in-place operation: %s is at "
                 "version %u; expected version %u instead (as in the forward). Hint: an in-place op (ag_add_, "
                 "ag_mul_scalar_, an in-place dropout, ag_copy_, ag_fill_, ag_set, an optimizer step) changed it "
                 "or a view of its storage after this op ran: give it a copy (ag_clone) or do that op out of place",
                 what, now, n->versions[k]);
        return false;
    }
    return true;
}

void ag_backward(ag_tensor *out, ag_tensor *grad) {
    const char *op = "ag_backward";
    char b1[128], b2[128];
    if (!ag__check_not_null(op, out)) return;
    if (!out->requires_grad) {
        ag_error(op, "output %s does not require grad (no input requires grad, or it was computed with grad "
                     "mode off)", ag_shape_str(out, b1));
        return;
    }
    if (!grad && ag_numel(out) != 1) {
        ag_error(op, "output %s has %lld elements: pass its gradient explicitly (grad may be NULL only for a "
                     "one-element output)", ag_shape_str(out, b1), (long long)ag_numel(out));
        return;
    }
    if (grad && !ag__same_shape(grad, out)) {
        ag_error(op, "gradient %s does not match output %s", ag_shape_str(grad, b1), ag_shape_str(out, b2));
        return;
    }
    /* a pass nested in an op's backward gets its own number and gives the outer one back */
    uint32_t outer = ag__grad_pass, pass = ag__grad_pass = ++passes;
    ag_arena *a = ag_arena_current();
    ag_tensor *g0 = ag_grad_buffer(out);
    ag_arena_mark m0 = ag_arena_get_mark(a);
    if (grad) ag__add_into(g0, grad);
    else ag__add_into(g0, ag_scalar(out->dtype, 1.0));
    ag_arena_rewind(a, m0);
    if (!out->node) { /* a leaf: its gradient is the seed */
        if (order_top) ag__grad_pass = outer;
        return;
    }

    size_t base = order_top, count = collect(out->node, pass, base);
    order_top = base + count;
    /* the outermost pass only: a nested pass (ag_recompute) runs inside a node of the outer one,
     * which lists the parameters it reaches among its inputs */
    const ag_leaf_grad_hooks *h = base == 0 ? hooks : NULL;
    if (h)
        for (size_t i = 0; i < count; i++) each_leaf_input(order[i], h->expect, h->user);
    bool prev = ag_set_grad_enabled(false);
    for (size_t i = 0; i < count; i++) {
        ag_node *n = order[base + i]; /* order may move when a nested pass grows it */
        if (!n->out->grad || ag__state(n->out)->grad_pass != pass) { /* no gradient reached it */
            if (h) each_leaf_input(n, h->done, h->user);
            continue;
        }
        if (n->versions && !versions_unchanged(n)) stopped = true; /* reported: it stops, as torch raises */
        if (stopped) {
            for (; i < count; i++) ag__grad_release(order[base + i]->out);
            break;
        }
        /* leaves' buffers first: they outlive the rewind below */
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] && !n->in[k]->node) ag_grad_buffer(n->in[k]);
        ag_arena_mark m = ag_arena_get_mark(a);
        n->op->backward(n);
        if (anomaly) check_backward(n);
        ag_arena_rewind(a, m);
        ag__grad_release(n->out); /* no later node reads it */
        if (h) each_leaf_input(n, h->done, h->user);
    }
    if (h && h->end) h->end(h->user);
    ag_set_grad_enabled(prev);
    order_top = base;
    if (base) ag__grad_pass = outer;
    else stopped = false;
}

void ag_retain_grad(ag_tensor *t) {
    if (ag__check_not_null("ag_retain_grad", t)) t->retains_grad = true;
}

void ag_requires_grad_(ag_tensor *t, bool on) {
    if (!ag__check_not_null("ag_requires_grad_", t)) return;
    char b[128];
    if (t->node) {
        ag_error("ag_requires_grad_", "%s is the result of op %s, not a leaf: use ag_detach first",
                 ag_shape_str(t, b), t->node->op->name);
        return;
    }
    if (on && t->dtype != AG_F32 && t->dtype != AG_F64) {
        ag_error("ag_requires_grad_", "%s of dtype %s: only f32 and f64 tensors can require grad", ag_shape_str(t, b),
                 ag_dtype_name(t->dtype));
        return;
    }
    t->requires_grad = on;
}

void ag_zero_grad_(ag_tensor *t) {
    if (t && t->grad) ag_fill_(t->grad, 0.0);
}

/* ---- anomaly mode ---- */

/* flat index of the first NaN/Inf in t (any layout), or -1 */
static int64_t first_bad(const ag_tensor *t, double *value) {
    if (!t || (t->dtype != AG_F32 && t->dtype != AG_F64)) return -1;
    int64_t n = ag_numel(t);
    double *v = ag__alloc("ag_set_anomaly_enabled", ag_arena_current(), sizeof(double) * (size_t)(n ? n : 1),
                          "the values the anomaly check reads");
    if (!v) return -1;
    ag_to_buffer(t, AG_F64, v);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) {
            *value = v[i];
            return i;
        }
    return -1;
}

static const char *bad_name(double v) { return isnan(v) ? "NaN" : v > 0 ? "Inf" : "-Inf"; }

static void inputs_str(char *buf, size_t size, int nin, ag_tensor *const *in) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < nin && used < size; i++) {
        char b[128];
        used += (size_t)snprintf(buf + used, size - used, "%s%s %s", i ? ", " : "", ag_shape_str(in[i], b),
                                 in[i] ? ag_dtype_name(in[i]->dtype) : "");
    }
}

static void check_forward(const ag_op *op, const ag_tensor *out, int nin, ag_tensor *const *in) {
    double v;
    int64_t i = first_bad(out, &v);
    if (i < 0) return;
    char b[128], ins[512];
    inputs_str(ins, sizeof ins, nin, in);
    ag_error(op->name, "anomaly in forward: output %s has %s at flat index %lld; inputs: %s", ag_shape_str(out, b),
             bad_name(v), (long long)i, ins);
}

static void check_backward(ag_node *n) {
    for (int k = 0; k < n->nin; k++) {
        ag_tensor *in = n->in[k];
        if (!in || !in->requires_grad || !in->grad) continue;
        double v;
        int64_t i = first_bad(in->grad, &v);
        if (i < 0) continue;
        char b[128], ins[512];
        inputs_str(ins, sizeof ins, n->nin, n->in);
        ag_error(n->op->name, "anomaly in backward: gradient of input %d %s has %s at flat index %lld; inputs: %s",
                 k, ag_shape_str(in, b), bad_name(v), (long long)i, ins);
        return;
    }
}

void ag_set_anomaly_enabled(bool on) {
    anomaly = on;
    ag__anomaly_hook = on ? check_forward : NULL;
}

bool ag_anomaly_enabled(void) { return anomaly; }

__attribute__((constructor)) static void anomaly_from_env(void) {
    const char *e = getenv("AG_ANOMALY");
    if (e && *e && strcmp(e, "0") != 0) ag_set_anomaly_enabled(true);
}
