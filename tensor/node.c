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
    /* every op's inputs pass here: one made before its arena's last reset (or after a mark since
     * rewound) is reported, and nothing is recorded */
    for (int i = 0; i < nin; i++)
        if (in[i] && !ag__alive(in[i])) {
            ag__report_dead(op->name, in[i]);
            return NULL;
        }
    if (ag__anomaly_hook) ag__anomaly_hook(op, out, nin, in);
    if (!ag_any_requires_grad(nin, in)) return NULL;
    return ag__record(op, out, nin, in);
}

uint64_t ag__next_seq(void) { return next_seq; }

ag_node *ag__record(const ag_op *op, ag_tensor *out, int nin, ag_tensor *const *in) {
    ag_arena *a = ag_arena_current();
    ag_node *n = ag__alloc(op->name, a, sizeof *n, "its graph node");
    if (!n) return NULL;
    memset(n, 0, sizeof *n);
    n->op = op;
    n->out = out;
    n->nin = nin;
    /* the input pointers, then (unless the op saves nothing) the versions: one allocation */
    bool versions = op->saves != AG_SAVES_NONE;
    size_t ptrs = sizeof(ag_tensor *) * (size_t)(nin ? nin : 1);
    n->in = ag__alloc(op->name, a, ptrs + (versions ? sizeof(uint32_t) * (size_t)(nin + 1) : 0), "its graph node");
    if (!n->in) return NULL;
    memcpy(n->in, in, sizeof(ag_tensor *) * (size_t)nin);
    if (versions) {
        n->versions = (uint32_t *)((char *)n->in + ptrs);
        for (int k = 0; k < nin; k++) n->versions[k] = ag__version(in[k]);
        n->versions[nin] = ag__version(out);
    }
    n->seq = next_seq++;
    out->node = n;
    out->requires_grad = true;
    return n;
}

/* ---- gradient pool ---- */

enum { POOL_CLASSES = 4 * 64 };
static ag_arena *pool_arena;           /* never reset: chunks live on in the free lists */
static void *pool_free[POOL_CLASSES];  /* singly linked through each free chunk's first word */
static size_t pool_bytes;
/* a chunk is the tensor header and the chunk's class (padded to 64 bytes), then the data */
#define POOL_HEADER ((sizeof(ag_tensor) + sizeof(int) + 63) & ~(size_t)63)
#define CHUNK_CLASS(chunk) (*(int *)((char *)(chunk) + sizeof(ag_tensor)))
/* an empty class borrows a free chunk up to this many classes larger (2 octaves): fewer chunks
 * in all, since the sizes live at any moment of a backward pass change from op to op */
#define POOL_BORROW 8

/* Class c holds 2^(c/4)·(1 + (c%4)/4) data bytes: 4 classes per power of two, ≤ 25 % slack. */
static size_t class_bytes(int c) {
    size_t base = (size_t)1 << (c / 4);
    return base + (size_t)(c % 4) * (base >> 2);
}

/* the smallest class that holds bytes */
static int pool_class(size_t bytes) {
    if (bytes < 64) bytes = 64;
    int k = 63 - __builtin_clzll((unsigned long long)bytes);
    size_t base = (size_t)1 << k, step = base >> 2;
    return 4 * k + (int)((bytes - base + step - 1) / step); /* sub-class 4 is the next power's 0 */
}

/* a chunk holding a gradient buffer shaped like like: zeroed, or left as it is */
static ag_tensor *pool_get(const ag_tensor *like, bool zero) {
    size_t elsize = ag_dtype_size(like->dtype), need = (size_t)ag_numel(like) * elsize;
    int c = pool_class(need), from = c;
    while (from < POOL_CLASSES - 1 && from - c < POOL_BORROW && !pool_free[from]) from++;
    char *chunk = pool_free[from];
    if (chunk) {
        pool_free[from] = *(void **)chunk;
    } else {
        if (!pool_arena) pool_arena = ag_arena_new((size_t)1 << 20);
        chunk = ag__alloc("ag_backward", pool_arena, POOL_HEADER + class_bytes(c), "a gradient buffer");
        if (!chunk) return NULL;
        CHUNK_CLASS(chunk) = c;
        pool_bytes += POOL_HEADER + class_bytes(c);
    }
    AG_POISON(chunk + POOL_HEADER, class_bytes(CHUNK_CLASS(chunk))); /* the slack past need too */
    AG_UNPOISON(chunk + POOL_HEADER, need);
    ag_tensor *g = (ag_tensor *)chunk;
    memset(g, 0, sizeof *g);
    ag__state(g)->version = &ag__state(g)->own_version;
    g->dtype = like->dtype;
    g->ndim = like->ndim;
    memcpy(g->shape, like->shape, sizeof g->shape);
    ag__contiguous_strides(g->ndim, g->shape, g->stride);
    g->data = chunk + POOL_HEADER;
    if (zero) ag__zero(g->data, need);
    return g;
}

static void pool_put(ag_tensor *g) {
    int c = CHUNK_CLASS(g);
    AG_POISON((char *)g + POOL_HEADER, class_bytes(c));
    *(void **)g = pool_free[c];
    pool_free[c] = g;
}

size_t ag_grad_pool_bytes(void) { return pool_bytes; }

ag_tensor *ag_grad_buffer(ag_tensor *t) {
    if (!t || !t->requires_grad) return NULL;
    if (!t->node) {
        if (!t->grad) t->grad = ag_zeros(t->dtype, t->ndim, t->shape);
    } else if (!t->grad || ag__state(t)->grad_pass != ag__grad_pass) {
        t->grad = pool_get(t, true); /* an earlier pass's buffer was released or belongs to the arena */
    }
    ag__state(t)->grad_pass = ag__grad_pass;
    return t->grad;
}

ag_tensor *ag__grad_buffer_to_write(ag_tensor *t, bool *fresh) {
    *fresh = false;
    if (!t || !t->requires_grad) return NULL;
    if (!t->node && !t->grad) {
        t->grad = ag__new(t->dtype, t->ndim, t->shape);
        *fresh = true;
    } else if (t->node && (!t->grad || ag__state(t)->grad_pass != ag__grad_pass)) {
        t->grad = pool_get(t, false);
        *fresh = true;
    }
    ag__state(t)->grad_pass = ag__grad_pass;
    return t->grad;
}

void ag__grad_release(ag_tensor *t) {
    if (!t || !t->node || !t->grad || ag__state(t)->grad_pass != ag__grad_pass) return;
    ag_tensor *g = t->grad;
    t->grad = NULL;
    if (t->retains_grad) {
        t->grad = ag__new(g->dtype, g->ndim, g->shape);
        memcpy(t->grad->data, g->data, (size_t)ag_numel(g) * ag_dtype_size(g->dtype));
    }
    pool_put(g);
}

void ag_accum_grad(ag_tensor *t, ag_tensor *g) {
    if (!g) {
        ag_grad_buffer(t);
        return;
    }
    bool fresh; /* the first gradient of this pass is copied into a new buffer, later ones added */
    ag_tensor *buf = ag__grad_buffer_to_write(t, &fresh);
    if (!buf) return;
    if (!fresh) ag__add_into(buf, g);
    else if (!ag__set_into(buf, g)) ag__zero(ag__ptr(buf), (size_t)ag_numel(buf) * ag_dtype_size(buf->dtype));
}
