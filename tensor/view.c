/* Views: (storage, offset, shape, strides) rewritten without copying; each is an op whose
 * backward maps the gradient back through the same view. */
#include <string.h>

#include "internal.h"

static ag_tensor *grad_of(ag_node *n) { return n->out->grad; }

/* ---- view / reshape ---- */

/* Strides for viewing t as shape without copying, PyTorch's rule: dims of t are taken in
 * groups that are contiguous among themselves; each group must map onto whole new dims. */
static bool view_strides(const ag_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
    if (ag_numel(t) == 0 || t->ndim == 0) {
        ag__contiguous_strides(ndim, shape, stride);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->stride[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        if (d == 0 || (t->shape[d - 1] != 1 && t->stride[d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                stride[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base_stride = t->stride[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* resolve one -1 and check the element count */
static bool infer_shape(const char *op, const ag_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
    char b1[128], b2[128];
    if (ndim < 0 || ndim > AG_MAX_DIMS) {
        ag_error(op, "%d dims: attograd supports 0 to %d", ndim, AG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        ag_error(op, "shape is NULL for %d dims", ndim);
        return false;
    }
    int infer = -1;
    int64_t known = 1, n = ag_numel(t);
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                ag_error(op, "%s: only one dim can be -1", ag__shape_str(ndim, shape, b1));
                return false;
            }
            infer = i;
        } else if (shape[i] < 0) {
            ag_error(op, "%s: invalid size %lld", ag__shape_str(ndim, shape, b1), (long long)shape[i]);
            return false;
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            goto bad;
        }
    }
    if (infer >= 0) {
        if (known == 0 || n % known != 0) goto bad;
        out[infer] = n / known;
    } else if (known != n) {
        goto bad;
    }
    return true;
bad:
    ag_error(op, "shape %s is invalid for input %s of %lld elements", ag__shape_str(ndim, shape, b1),
             ag_shape_str(t, b2), (long long)n);
    return false;
}

static void reshape_backward(ag_node *n) {
    ag_tensor *in = n->in[0];
    ag_accum_grad(in, ag_reshape(grad_of(n), in->ndim, in->shape));
}
static const ag_op VIEW = {"ag_view", reshape_backward, AG_SAVES_NONE};

static ag_tensor *make_view(const char *op, ag_tensor *t, int ndim, const int64_t *shape, bool copy_ok) {
    if (!ag__check_not_null(op, t)) return NULL;
    int64_t sh[AG_MAX_DIMS], st[AG_MAX_DIMS];
    if (!infer_shape(op, t, ndim, shape, sh)) return NULL;
    if (!view_strides(t, ndim, sh, st)) {
        if (!copy_ok) {
            char b1[128], b2[128];
            ag_error(op, "cannot view %s (strides not compatible) as %s; use ag_reshape or ag_contiguous first",
                     ag_shape_str(t, b1), ag__shape_str(ndim, sh, b2));
            return NULL;
        }
        t = ag_contiguous(t);
        ag__contiguous_strides(ndim, sh, st);
    }
    ag_tensor *y = ag__alias(t);
    y->ndim = ndim;
    memcpy(y->shape, sh, sizeof(int64_t) * (size_t)ndim);
    memcpy(y->stride, st, sizeof(int64_t) * (size_t)ndim);
    ag_finish(&VIEW, y, 1, &t);
    return y;
}

ag_tensor *ag_view(ag_tensor *t, int ndim, const int64_t *shape) { return make_view("ag_view", t, ndim, shape, false); }
ag_tensor *ag_reshape(ag_tensor *t, int ndim, const int64_t *shape) {
    return make_view("ag_reshape", t, ndim, shape, true);
}

/* ---- transpose / permute ---- */

static void permute_backward(ag_node *n) {
    int inv[AG_MAX_DIMS];
    for (int i = 0; i < n->out->ndim; i++) inv[n->ctx.i[i]] = i;
    ag_accum_grad(n->in[0], ag_permute(grad_of(n), inv));
}
static const ag_op PERMUTE = {"ag_permute", permute_backward, AG_SAVES_NONE};

static ag_tensor *permute(const char *op, ag_tensor *t, const int *dims) {
    int seen[AG_MAX_DIMS] = {0}, d[AG_MAX_DIMS];
    if (t->ndim > 0 && !dims) {
        char b[128];
        ag_error(op, "dims is NULL for %s", ag_shape_str(t, b));
        return NULL;
    }
    for (int i = 0; i < t->ndim; i++) {
        d[i] = dims[i] < 0 ? dims[i] + t->ndim : dims[i];
        if (d[i] < 0 || d[i] >= t->ndim || seen[d[i]]++) {
            char b[128];
            ag_error(op, "dims are not a permutation of 0..%d for %s (dim %d given as %d)", t->ndim - 1,
                     ag_shape_str(t, b), i, dims[i]);
            return NULL;
        }
    }
    ag_tensor *y = ag__alias(t);
    for (int i = 0; i < t->ndim; i++) {
        y->shape[i] = t->shape[d[i]];
        y->stride[i] = t->stride[d[i]];
    }
    ag_node *n = ag_finish(&PERMUTE, y, 1, &t);
    if (n)
        for (int i = 0; i < t->ndim; i++) n->ctx.i[i] = d[i];
    return y;
}

ag_tensor *ag_permute(ag_tensor *t, const int *dims) {
    if (!ag__check_not_null("ag_permute", t)) return NULL;
    return permute("ag_permute", t, dims);
}

ag_tensor *ag_transpose(ag_tensor *t, int d0, int d1) {
    if (!ag__check_not_null("ag_transpose", t)) return NULL;
    if (t->ndim == 0) { /* as torch: dims 0 and -1 name the 0-d tensor's one place, nothing to swap */
        int other = d0 == 0 || d0 == -1 ? d1 : d0;
        if (other == 0 || other == -1) return t;
        ag_wrap_dim("ag_transpose", t, other); /* reports it */
        return NULL;
    }
    int a = ag_wrap_dim("ag_transpose", t, d0), b = ag_wrap_dim("ag_transpose", t, d1);
    if (a < 0 || b < 0) return NULL;
    int dims[AG_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = i;
    dims[a] = b;
    dims[b] = a;
    return permute("ag_transpose", t, dims);
}

/* ---- slice / narrow / select ---- */

static void slice_backward(ag_node *n) {
    ag_tensor *gin = ag_grad_buffer(n->in[0]);
    if (!gin) return;
    int dim = (int)n->ctx.i[0];
    ag_tensor *v = ag__alias(gin);
    v->offset += n->ctx.i[1] * v->stride[dim];
    v->shape[dim] = n->out->shape[dim];
    v->stride[dim] *= n->ctx.i[2];
    ag__add_into(v, grad_of(n));
}
static const ag_op SLICE = {"ag_slice", slice_backward, AG_SAVES_NONE};

ag_tensor *ag_slice(ag_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
    if (!ag__check_not_null("ag_slice", t)) return NULL;
    int d = ag_wrap_dim("ag_slice", t, dim);
    if (d < 0) return NULL;
    if (step <= 0) {
        ag_error("ag_slice", "step %lld: must be positive", (long long)step);
        return NULL;
    }
    int64_t size = t->shape[d];
    if (start < 0) start += size;
    if (end < 0) end += size;
    start = start < 0 ? 0 : start > size ? size : start;
    end = end < start ? start : end > size ? size : end;
    ag_tensor *y = ag__alias(t);
    y->offset += start * t->stride[d];
    y->shape[d] = (end - start + step - 1) / step;
    y->stride[d] = t->stride[d] * step;
    ag_node *n = ag_finish(&SLICE, y, 1, &t);
    if (n) {
        n->ctx.i[0] = d;
        n->ctx.i[1] = start;
        n->ctx.i[2] = step;
    }
    return y;
}

ag_tensor *ag_narrow(ag_tensor *t, int dim, int64_t start, int64_t length) {
    if (!ag__check_not_null("ag_narrow", t)) return NULL;
    int d = ag_wrap_dim("ag_narrow", t, dim);
    if (d < 0) return NULL;
    if (start < 0) start += t->shape[d];
    if (start < 0 || length < 0 || start + length > t->shape[d]) {
        char b[128];
        ag_error("ag_narrow", "start %lld, length %lld exceed dim %d of %s", (long long)start, (long long)length, d,
                 ag_shape_str(t, b));
        return NULL;
    }
    return ag_slice(t, d, start, start + length, 1);
}

static void select_backward(ag_node *n) {
    ag_tensor *gin = ag_grad_buffer(n->in[0]);
    if (!gin) return;
    int dim = (int)n->ctx.i[0];
    ag_tensor *v = ag__alias(gin);
    v->offset += n->ctx.i[1] * v->stride[dim];
    for (int i = dim; i < v->ndim - 1; i++) {
        v->shape[i] = v->shape[i + 1];
        v->stride[i] = v->stride[i + 1];
    }
    v->ndim--;
    ag__add_into(v, grad_of(n));
}
static const ag_op SELECT = {"ag_select", select_backward, AG_SAVES_NONE};

ag_tensor *ag_select(ag_tensor *t, int dim, int64_t index) {
    if (!ag__check_not_null("ag_select", t)) return NULL;
    int d = ag_wrap_dim("ag_select", t, dim);
    if (d < 0) return NULL;
    int64_t i = index < 0 ? index + t->shape[d] : index;
    if (i < 0 || i >= t->shape[d]) {
        char b[128];
        ag_error("ag_select", "index %lld out of range for dim %d of %s", (long long)index, d, ag_shape_str(t, b));
        return NULL;
    }
    ag_tensor *y = ag__alias(t);
    y->offset += i * t->stride[d];
    for (int k = d; k < t->ndim - 1; k++) {
        y->shape[k] = t->shape[k + 1];
        y->stride[k] = t->stride[k + 1];
    }
    y->ndim--;
    ag_node *n = ag_finish(&SELECT, y, 1, &t);
    if (n) {
        n->ctx.i[0] = d;
        n->ctx.i[1] = i;
    }
    return y;
}

/* ---- squeeze / unsqueeze (views with the reshape backward) ---- */

ag_tensor *ag_squeeze(ag_tensor *t, int dim) {
    if (!ag__check_not_null("ag_squeeze", t)) return NULL;
    if (t->ndim == 0 && (dim == 0 || dim == -1)) return t; /* as torch: a 0-d tensor has nothing to squeeze */
    int d = ag_wrap_dim("ag_squeeze", t, dim);
    if (d < 0) return NULL;
    ag_tensor *y = ag__alias(t);
    if (t->shape[d] == 1) {
        for (int k = d; k < t->ndim - 1; k++) {
            y->shape[k] = t->shape[k + 1];
            y->stride[k] = t->stride[k + 1];
        }
        y->ndim--;
    }
    ag_finish(&VIEW, y, 1, &t);
    return y;
}

ag_tensor *ag_unsqueeze(ag_tensor *t, int dim) {
    if (!ag__check_not_null("ag_unsqueeze", t)) return NULL;
    int d = dim < 0 ? dim + t->ndim + 1 : dim;
    if (d < 0 || d > t->ndim || t->ndim == AG_MAX_DIMS) {
        char b[128];
        ag_error("ag_unsqueeze", "dim %d out of range for %s (allowed %d..%d)", dim, ag_shape_str(t, b),
                 -t->ndim - 1, t->ndim);
        return NULL;
    }
    ag_tensor *y = ag__alias(t);
    for (int k = t->ndim; k > d; k--) {
        y->shape[k] = t->shape[k - 1];
        y->stride[k] = t->stride[k - 1];
    }
    y->shape[d] = 1;
    y->stride[d] = d < t->ndim ? t->shape[d] * t->stride[d] : 1;
    y->ndim++;
    ag_finish(&VIEW, y, 1, &t);
    return y;
}

/* ---- expand ---- */

static void expand_backward(ag_node *n) { ag_accum_grad(n->in[0], grad_of(n)); }
static const ag_op EXPAND = {"ag_expand", expand_backward, AG_SAVES_NONE};

ag_tensor *ag_expand(ag_tensor *t, int ndim, const int64_t *shape) {
    if (!ag__check_not_null("ag_expand", t)) return NULL;
    char b1[128], b2[128];
    if (ndim > 0 && !shape) {
        ag_error("ag_expand", "shape is NULL for %d dims", ndim);
        return NULL;
    }
    if (ndim < t->ndim || ndim > AG_MAX_DIMS) goto bad;
    ag_tensor *y = ag__alias(t);
    y->ndim = ndim;
    for (int i = ndim - 1; i >= 0; i--) {
        int it = t->ndim - ndim + i;
        int64_t want = shape[i];
        if (it < 0) {
            if (want < 0) goto bad;
            y->shape[i] = want;
            y->stride[i] = 0;
        } else {
            int64_t have = t->shape[it];
            if (want == -1) want = have;
            if (want < 0 || (want != have && have != 1)) goto bad;
            y->shape[i] = want;
            y->stride[i] = want == have ? t->stride[it] : 0;
        }
    }
    if (!ag__numel_fits(ndim, y->shape)) goto bad;
    ag_finish(&EXPAND, y, 1, &t);
    return y;
bad:
    ag_error("ag_expand", "cannot expand %s to %s", ag_shape_str(t, b1), ag__shape_str(ndim, shape, b2));
    return NULL;
}

/* ---- copies: contiguous, clone, dtype conversion ---- */

static void copy_backward(ag_node *n) {
    ag_tensor *g = grad_of(n);
    if (g->dtype != n->in[0]->dtype) g = ag_to(g, n->in[0]->dtype);
    ag_accum_grad(n->in[0], g);
}
static const ag_op CLONE = {"ag_clone", copy_backward, AG_SAVES_NONE};
static const ag_op TO = {"ag_to", copy_backward, AG_SAVES_NONE};

ag_tensor *ag_clone(ag_tensor *t) {
    if (!ag__check_not_null("ag_clone", t)) return NULL;
    ag_tensor *y = ag__new(t->dtype, t->ndim, t->shape);
    ag__copy(y, t);
    ag_finish(&CLONE, y, 1, &t);
    return y;
}

ag_tensor *ag__dense(ag_tensor *t) {
    if (!t || ag_is_contiguous(t)) return t;
    ag_tensor *c = ag__new(t->dtype, t->ndim, t->shape);
    ag__copy(c, t);
    return c;
}

ag_tensor *ag_contiguous(ag_tensor *t) {
    if (!ag__check_not_null("ag_contiguous", t)) return NULL;
    return ag_is_contiguous(t) ? t : ag_clone(t);
}

ag_tensor *ag_to(ag_tensor *t, ag_dtype dt) {
    if (!ag__check_not_null("ag_to", t)) return NULL;
    if (t->dtype == dt) return t;
    ag_tensor *y = ag__new(dt, t->ndim, t->shape);
    ag__copy(y, t);
    bool differentiable = (dt == AG_F32 || dt == AG_F64) && (t->dtype == AG_F32 || t->dtype == AG_F64);
    if (differentiable) ag_finish(&TO, y, 1, &t);
    return y;
}

ag_tensor *ag_detach(ag_tensor *t) {
    if (!ag__check_not_null("ag_detach", t)) return NULL;
    return ag__alias(t);
}
