/* Recording: grad mode, ag_finish, gradient buffers. The engine that replays the nodes is in
 * autograd/. */
#include <string.h>

#include "internal.h"

static bool grad_enabled = true;
static uint64_t next_seq = 1;
uint32_t ag__grad_pass = 1;
void (*ag__anomaly_hook)(const ag_op *op, const ag_tensor *out, int nin, ag_tensor *const *in);

bool ag_set_grad_enabled(bool on) {
    bool prev = grad_enabled;
    grad_enabled = on;
    return prev;
}

bool ag_grad_enabled(void) { return grad_enabled; }

bool ag_any_requires_grad(int nin, ag_tensor *const *in) {
    if (!grad_enabled) return false;
    for (int i = 0; i < nin; i++)
        if (in[i] && in[i]->requires_grad) return true;
    return false;
}

ag_node *ag_finish(const ag_op *op, ag_tensor *out, int nin, ag_tensor *const *in) {
    if (!out) return NULL;
    if (ag__anomaly_hook) ag__anomaly_hook(op, out, nin, in);
    if (!ag_any_requires_grad(nin, in)) return NULL;
    ag_arena *a = ag_arena_current();
    ag_node *n = ag_arena_alloc(a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->op = op;
    n->out = out;
    n->nin = nin;
    n->in = ag_arena_alloc(a, sizeof(ag_tensor *) * (size_t)(nin ? nin : 1));
    memcpy(n->in, in, sizeof(ag_tensor *) * (size_t)nin);
    n->seq = next_seq++;
    out->node = n;
    out->requires_grad = true;
    return n;
}

ag_tensor *ag_grad_buffer(ag_tensor *t) {
    if (!t || !t->requires_grad) return NULL;
    bool leaf = t->node == NULL;
    if (!t->grad) {
        t->grad = ag_zeros(t->dtype, t->ndim, t->shape);
    } else if (!leaf && t->grad_pass != ag__grad_pass) {
        ag_fill_(t->grad, 0.0);
    }
    t->grad_pass = ag__grad_pass;
    return t->grad;
}

ag_tensor *ag__grad_buffer_to_write(ag_tensor *t, bool *fresh) {
    *fresh = false;
    if (!t || !t->requires_grad) return NULL;
    if (!t->grad) {
        t->grad = ag__new(t->dtype, t->ndim, t->shape);
        *fresh = true;
    } else if (t->node && t->grad_pass != ag__grad_pass) {
        *fresh = true;
    }
    t->grad_pass = ag__grad_pass;
    return t->grad;
}

void ag_accum_grad(ag_tensor *t, ag_tensor *g) {
    ag_tensor *buf = ag_grad_buffer(t);
    if (!buf || !g) return;
    ag__add_into(buf, g);
}
