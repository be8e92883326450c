/* Parameters in one slab and their gradients in a parallel slab (llm.c's layout), so zeroing,
 * clipping, optimizer steps and checkpoints are single loops over flat memory. */
#include <string.h>

#include "../tensor/op.h"
#include "autograd.h"

/* An ag_params and what only this file uses: the ag_params * handed out points at pub. */
typedef struct {
    ag_params pub;
    int64_t capacity;               /* elements each slab has room for */
    int cap_list;                   /* entries pub.list has room for */
    ag_arena *meta;                 /* the parameters' headers and names (never reset) */
    uint32_t version, grad_version; /* the slabs' version counters (ag_version), one per slab */
} params_impl;

static params_impl *impl(const ag_params *p) { return (params_impl *)p; }

ag_params *ag_params_new(ag_dtype dt) {
    if (dt != AG_F32 && dt != AG_F64) {
        ag_error("ag_params_new", "dtype %s: parameters are f32 or f64", ag_dtype_name(dt));
        return NULL;
    }
    params_impl *q = ag_xmalloc(sizeof *q);
    memset(q, 0, sizeof *q);
    q->pub.dtype = dt;
    q->meta = ag_arena_new(1 << 16);
    return &q->pub;
}

void ag_params_free(ag_params *p) {
    if (!p) return;
    ag_xfree(p->data);
    ag_xfree(p->grad);
    ag_xfree(p->list);
    ag_arena_free(impl(p)->meta);
    ag_xfree(impl(p));
}

/* a view of a slab, sharing the slab's version counter */
static ag_tensor *slab_tensor(ag_params *p, char *base, uint32_t *version, int64_t offset, int ndim,
                              const int64_t *shape) {
    ag_arena *prev = ag_arena_use(impl(p)->meta);
    ag_tensor *t = ag_wrap(p->dtype, ndim, shape, base);
    ag_arena_use(prev);
    t->offset = offset;
    ag__state(t)->version = version;
    return t;
}

/* point every tensor (and the flat views) at the current slabs */
static void repoint(ag_params *p) {
    for (int i = 0; i < p->count; i++) {
        p->list[i]->data = p->data;
        p->list[i]->grad->data = p->grad;
    }
    p->flat = slab_tensor(p, p->data, &impl(p)->version, 0, 1, &p->numel);
    p->flat_grad = slab_tensor(p, p->grad, &impl(p)->grad_version, 0, 1, &p->numel);
}

ag_tensor *ag_params_find(const ag_params *p, const char *name) {
    for (int i = 0; i < p->count; i++)
        if (strcmp(p->list[i]->name, name) == 0) return p->list[i];
    return NULL;
}

/* room for need elements in both slabs (the capacity doubled, or need itself when doubling asks
 * too much), the values kept; false (the slabs as they were) when the memory cannot be had */
static bool grow_slabs(ag_params *p, int64_t need) {
    int64_t es = (int64_t)ag_dtype_size(p->dtype), cap = impl(p)->capacity ? impl(p)->capacity : 1024;
    while (cap < need) cap *= 2;
    char *data = ag__try_malloc((size_t)(cap * es)), *grad = data ? ag__try_malloc((size_t)(cap * es)) : NULL;
    if (!grad && cap > need) {
        ag_xfree(data);
        cap = need;
        data = ag__try_malloc((size_t)(cap * es));
        grad = data ? ag__try_malloc((size_t)(cap * es)) : NULL;
    }
    if (!grad) {
        ag_xfree(data);
        return false;
    }
    ag__zero(data, (size_t)(cap * es));
    ag__zero(grad, (size_t)(cap * es));
    if (p->data) {
        memcpy(data, p->data, (size_t)(p->numel * es));
        memcpy(grad, p->grad, (size_t)(p->numel * es));
    }
    ag_xfree(p->data);
    ag_xfree(p->grad);
    p->data = data;
    p->grad = grad;
    impl(p)->capacity = cap;
    return true;
}

ag_tensor *ag_params_add(ag_params *p, const char *name, int ndim, const int64_t *shape) {
    char b[128];
    if (!p || !name || ndim < 0 || ndim > AG_MAX_DIMS) {
        ag_error("ag_params_add", "'%s': needs a parameter set, a name and 0 to %d dims", name ? name : "(null)",
                 AG_MAX_DIMS);
        return NULL;
    }
    if (ag_params_find(p, name)) {
        ag_error("ag_params_add", "'%s' %s: a parameter of that name already exists", name,
                 ag__shape_str(ndim, shape, b));
        return NULL;
    }
    if (!ag__numel_fits(ndim, shape)) {
        ag_error("ag_params_add", "'%s': shape %s has a negative size or more elements than a tensor can hold", name,
                 ag__shape_str(ndim, shape, b));
        return NULL;
    }
    int64_t n = ag__shape_numel(ndim, shape);
    /* keep every parameter 64-byte aligned */
    int64_t es = (int64_t)ag_dtype_size(p->dtype), align = 64 / es;
    int64_t offset = (p->numel + align - 1) / align * align;
    if (offset + n > impl(p)->capacity && !grow_slabs(p, offset + n)) {
        ag_error("ag_params_add", "'%s' %s: cannot allocate a parameter slab and a gradient slab of %lld bytes each "
                 "for %lld parameters: out of memory", name, ag__shape_str(ndim, shape, b),
                 (long long)((offset + n) * es), (long long)(offset + n));
        return NULL;
    }
    if (p->count == impl(p)->cap_list) {
        int cap = impl(p)->cap_list ? 2 * impl(p)->cap_list : 64;
        ag_tensor **list = ag_xmalloc(sizeof *list * (size_t)cap);
        if (p->list) memcpy(list, p->list, sizeof *list * (size_t)p->count);
        ag_xfree(p->list);
        p->list = list;
        impl(p)->cap_list = cap;
    }
    ag_tensor *t = slab_tensor(p, p->data, &impl(p)->version, offset, ndim, shape);
    t->grad = slab_tensor(p, p->grad, &impl(p)->grad_version, offset, ndim, shape);
    t->requires_grad = true;
    size_t len = strlen(name) + 1;
    char *copy = ag__alloc("ag_params_add", impl(p)->meta, len, "the parameter's name");
    if (!t || !t->grad || !copy) return NULL;
    memcpy(copy, name, len);
    t->name = copy;
    p->list[p->count++] = t;
    p->numel = offset + n;
    repoint(p);
    return t;
}

void ag_params_zero_grad(ag_params *p) {
    if (p->grad) ag__zero(p->grad, (size_t)p->numel * ag_dtype_size(p->dtype));
    impl(p)->grad_version++;
}
