/* LayerNorm: the fused op (statistics in double) and the nn.LayerNorm module. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"
#include "layers_internal.h"

/* x, y, dy, dx: (m, d) contiguous; w, b: (d) contiguous, or NULL; mean, rstd: (m). A row's
 * loops are always-inline helpers called with w (and b) NULL or not, so each variant is
 * compiled with unit strides and no test in the loop, and vectorises. */
#define T float
#define FN(name) name##_f32
#include "layer_norm_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "layer_norm_kernels.inc"
#undef T
#undef FN

static void layer_norm_backward(ag_node *n) {
    ag_tensor *x = n->saved[0], *w = n->in[1], *dy = n->out->grad;
    int64_t d = x->shape[x->ndim - 1], m = d ? ag_numel(x) / d : 0;
    const double *mean = (const double *)ag__ptr(n->saved[1]), *rstd = (const double *)ag__ptr(n->saved[2]);
    bool fresh; /* every element of x's gradient is written: a new buffer is assigned, not added to */
    ag_tensor *gx = ag__grad_buffer_to_write(n->in[0], &fresh);
    char *dx = gx ? ag__ptr(gx) : NULL, *dw = ag__grad_ptr(w), *db = ag__grad_ptr(n->in[2]);
    (x->dtype == AG_F32 ? ln_backward_f32 : ln_backward_f64)(ag__ptr(x), ag__ptr(dy), m, d,
                                                               w ? ag__ptr(ag__dense(w)) : NULL, mean, rstd, dx, !fresh,
                                                               dw, db);
}
static const ag_op LAYER_NORM = {"ag_layer_norm", layer_norm_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *w, ag_tensor *b, double eps) {
    const char *op = "ag_layer_norm";
    if (!ag__check_float(op, x) || (w && !ag__check_float(op, w)) || (b && !ag__check_float(op, b))) return NULL;
    char b1[128], b2[128], b3[128];
    int64_t d = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || (w && (w->ndim != 1 || w->shape[0] != d)) || (b && (b->ndim != 1 || b->shape[0] != d))) {
        ag_error(op, "input %s, weight %s, bias %s: expected input (..., D) with weight and bias (D)",
                 ag_shape_str(x, b1), w ? ag_shape_str(w, b2) : "none", b ? ag_shape_str(b, b3) : "none");
        return NULL;
    }
    if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype) || !(eps >= 0)) {
        ag_error(op, "input %s %s, weight %s, bias %s, eps %g: dtypes must match and eps be >= 0",
                 ag_shape_str(x, b1), ag_dtype_name(x->dtype), w ? ag_dtype_name(w->dtype) : "none",
                 b ? ag_dtype_name(b->dtype) : "none", eps);
        return NULL;
    }
    int64_t m = d ? ag_numel(x) / d : 0;
    ag_tensor *xc = ag__dense(x), *y = ag__new(x->dtype, x->ndim, x->shape);
    ag_tensor *mean = ag__new(AG_F64, 1, &m), *rstd = ag__new(AG_F64, 1, &m);
    (x->dtype == AG_F32 ? ln_forward_f32 : ln_forward_f64)(ag__ptr(xc), m, d, w ? ag__ptr(ag__dense(w)) : NULL,
                                                             b ? ag__ptr(ag__dense(b)) : NULL, eps, ag__ptr(y),
                                                             (double *)ag__ptr(mean), (double *)ag__ptr(rstd));
    ag_node *n = ag_finish(&LAYER_NORM, y, 3, (ag_tensor *[]){x, w, b});
    if (n) {
        n->saved[0] = xc;
        n->saved[1] = mean;
        n->saved[2] = rstd;
    }
    return y;
}

ag_layer_norm_module ag_layer_norm_new(ag_params *p, const char *prefix, int64_t normalized_shape, double eps,
                                  bool elementwise_affine) {
    ag_layer_norm_module m = {NULL, NULL, normalized_shape, eps};
    char name[512];
    if (!p || normalized_shape < 0 || !(eps >= 0)) {
        ag_error("ag_layer_norm_new", "'%s': needs a parameter set, normalized_shape %lld >= 0 and eps %g >= 0",
                 prefix ? prefix : "", (long long)normalized_shape, eps);
        return m;
    }
    if (!elementwise_affine) return m;
    m.weight = ag_params_add(p, ag__param_name(name, sizeof name, "ag_layer_norm_new", prefix, "weight"),
                             AG_SHAPE(normalized_shape));
    m.bias = ag_params_add(p, ag__param_name(name, sizeof name, "ag_layer_norm_new", prefix, "bias"),
                           AG_SHAPE(normalized_shape));
    if (m.weight) ag_fill_(m.weight, 1.0);
    if (m.bias) ag_fill_(m.bias, 0.0);
    return m;
}

ag_tensor *ag_layer_norm_forward(const ag_layer_norm_module *m, ag_tensor *x) {
    if (!m) {
        ag_error("ag_layer_norm_forward", "module is NULL");
        return NULL;
    }
    return ag_layer_norm(x, m->weight, m->bias, m->eps);
}
