/* Parity adapters for sin, cos, clamp, the activations with parameters, minimum / maximum,
 * max / min with indices, topk, sort, cumsum, norm, any / all, full_like / ones_like and the
 * comparisons with a number (cases: gen_ops_math_select.py). Attribute transpose = 1: in0 is used
 * through transpose(-2, -1), a non-contiguous view. */
#include <math.h>
#include <string.h>

#include "parity.h"

static ag_tensor *in0(parity_case *c) {
    ag_tensor *x = pc_in(c, 0);
    return x && pc_bool(c, "transpose", false) ? ag_transpose(x, -2, -1) : x;
}

/* the dataset "dims" as ints (none: every dim) */
static int dims_of(parity_case *c, int *dims) {
    ag_tensor *d = pc_dataset(c, "dims", AG_I64);
    int n = 0;
    for (int64_t i = 0; d && i < ag_numel(d) && i < AG_MAX_DIMS; i++) dims[n++] = (int)((int64_t *)d->data)[i];
    return n;
}

static int sin_(parity_case *c, ag_tensor **out) {
    out[0] = ag_sin(in0(c));
    return 1;
}

static int cos_(parity_case *c, ag_tensor **out) {
    out[0] = ag_cos(in0(c));
    return 1;
}

/* attrs min, max: absent is no bound */
static int clamp(parity_case *c, ag_tensor **out) {
    out[0] = ag_clamp(in0(c), pc_double(c, "min", -INFINITY), pc_double(c, "max", INFINITY));
    return 1;
}

static int leaky_relu(parity_case *c, ag_tensor **out) {
    out[0] = ag_leaky_relu(in0(c), pc_double(c, "negative_slope", 0.01));
    return 1;
}

static int silu(parity_case *c, ag_tensor **out) {
    out[0] = ag_silu(in0(c));
    return 1;
}

static int softplus(parity_case *c, ag_tensor **out) {
    out[0] = ag_softplus(in0(c), pc_double(c, "beta", 1), pc_double(c, "threshold", 20));
    return 1;
}

static int elu(parity_case *c, ag_tensor **out) {
    out[0] = ag_elu(in0(c), pc_double(c, "alpha", 1));
    return 1;
}

static int maximum(parity_case *c, ag_tensor **out) {
    out[0] = ag_maximum(in0(c), pc_in(c, 1));
    return 1;
}

static int minimum(parity_case *c, ag_tensor **out) {
    out[0] = ag_minimum(in0(c), pc_in(c, 1));
    return 1;
}

/* outputs: values, indices */
static int max_dim(parity_case *c, ag_tensor **out) {
    out[0] = ag_max_dim(in0(c), (int)pc_int(c, "dim", -1), pc_bool(c, "keepdim", false), &out[1]);
    return 2;
}

static int min_dim(parity_case *c, ag_tensor **out) {
    out[0] = ag_min_dim(in0(c), (int)pc_int(c, "dim", -1), pc_bool(c, "keepdim", false), &out[1]);
    return 2;
}

static int topk(parity_case *c, ag_tensor **out) {
    out[0] = ag_topk(in0(c), pc_int(c, "k", 1), (int)pc_int(c, "dim", -1), pc_bool(c, "largest", true), true,
                     &out[1]);
    return 2;
}

static int sort(parity_case *c, ag_tensor **out) {
    out[0] = ag_sort(in0(c), (int)pc_int(c, "dim", -1), pc_bool(c, "descending", false), &out[1]);
    return 2;
}

static int cumsum(parity_case *c, ag_tensor **out) {
    out[0] = ag_cumsum(in0(c), (int)pc_int(c, "dim", 0));
    return 1;
}

static int norm(parity_case *c, ag_tensor **out) {
    int dims[AG_MAX_DIMS], nd = dims_of(c, dims);
    out[0] = ag_norm(in0(c), pc_double(c, "p", 2), nd, dims, pc_bool(c, "keepdim", false));
    return 1;
}

static int any(parity_case *c, ag_tensor **out) {
    int dims[AG_MAX_DIMS], nd = dims_of(c, dims);
    out[0] = ag_any(in0(c), nd, dims, pc_bool(c, "keepdim", false));
    return 1;
}

static int all(parity_case *c, ag_tensor **out) {
    int dims[AG_MAX_DIMS], nd = dims_of(c, dims);
    out[0] = ag_all(in0(c), nd, dims, pc_bool(c, "keepdim", false));
    return 1;
}

static int full_like(parity_case *c, ag_tensor **out) {
    out[0] = ag_full_like(in0(c), pc_double(c, "value", 0));
    return 1;
}

static int ones_like(parity_case *c, ag_tensor **out) {
    out[0] = ag_ones_like(in0(c));
    return 1;
}

/* attr fn: lt, le, gt, ge, ne or eq; attr scalar */
static int compare_scalar(parity_case *c, ag_tensor **out) {
    static const struct {
        const char *name;
        ag_tensor *(*fn)(ag_tensor *, double);
    } fns[] = {{"lt", ag_lt_scalar}, {"le", ag_le_scalar}, {"gt", ag_gt_scalar},
               {"ge", ag_ge_scalar}, {"ne", ag_ne_scalar}, {"eq", ag_eq_scalar}};
    char fn[16];
    pc_str(c, "fn", fn, sizeof fn, "");
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (strcmp(fns[i].name, fn) == 0) {
            out[0] = fns[i].fn(in0(c), pc_double(c, "scalar", 0));
            return 1;
        }
    snprintf(c->msg, sizeof c->msg, "compare_scalar: unknown fn '%s'", fn);
    return -1;
}

const parity_op parity_math_select_ops[] = {
    {"sin", sin_},
    {"cos", cos_},
    {"clamp", clamp},
    {"leaky_relu", leaky_relu},
    {"silu", silu},
    {"softplus", softplus},
    {"elu", elu},
    {"maximum", maximum},
    {"minimum", minimum},
    {"max_dim", max_dim},
    {"min_dim", min_dim},
    {"topk", topk},
    {"sort", sort},
    {"cumsum", cumsum},
    {"norm", norm},
    {"any", any},
    {"all", all},
    {"full_like", full_like},
    {"ones_like", ones_like},
    {"compare_scalar", compare_scalar},
    {NULL, NULL},
};
