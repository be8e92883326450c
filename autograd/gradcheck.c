/* Finite-difference gradient checking in f64 with PyTorch's defaults and comparison rule:
 * |numerical - analytic| <= atol + rtol * |numerical|. Full mode builds both Jacobians (one
 * backward per output element, two forwards per input element); fast mode compares vᵀJu for
 * random u, v (per input: one backward, two forwards). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/op.h"
#include "autograd.h"

typedef struct {
    ag_fn f;
    void *ctx;
    int n;
    ag_tensor **in;
    ag_arena *scratch;
    int64_t m; /* output elements */
} problem;

/* f evaluated in the scratch arena; out (m doubles) gets the values. false if f failed. */
static bool eval(problem *p, double *out) {
    ag_arena *prev = ag_arena_use(p->scratch);
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *y = p->f(p->n, p->in, p->ctx);
    bool ok = y && ag_numel(y) == p->m;
    if (ok) ag_to_buffer(y, AG_F64, out);
    ag_set_grad_enabled(grad);
    ag_arena_reset(p->scratch);
    ag_arena_use(prev);
    return ok;
}

/* pointer to flat element k (row-major order) of t, whatever its strides */
static double *elem(ag_tensor *t, int64_t k) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (k % t->shape[d]) * t->stride[d];
        k /= t->shape[d];
    }
    return (double *)t->data + off;
}

static void flat_index_str(const ag_tensor *t, int64_t k, char *buf) {
    int64_t idx[AG_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = k % t->shape[d];
        k /= t->shape[d];
    }
    ag__shape_str(t->ndim, idx, buf);
    buf[0] = '[';
    buf[strlen(buf) - 1] = ']';
}

static bool close_enough(double num, double ana, const ag_gradcheck_opts *o) {
    return fabs(num - ana) <= o->atol + o->rtol * fabs(num);
}

static void fail_at(ag_gradcheck_result *r, const ag_gradcheck_opts *o, problem *p, int i, int64_t k, int64_t j,
                    double num, double ana) {
    char b[128], idx[128] = "";
    r->ok = false;
    r->input = i;
    r->index = k;
    r->out_index = j;
    r->numerical = num;
    r->analytic = ana;
    if (k >= 0) flat_index_str(p->in[i], k, idx);
    snprintf(r->message, sizeof r->message,
             "gradcheck%s: input %d %s%s%s, output element %lld: numerical %.10g, analytic %.10g, |diff| %.3g > "
             "atol + rtol*|numerical| = %.3g",
             o->fast ? " (fast)" : "", i, ag_shape_str(p->in[i], b), k >= 0 ? " element " : "", idx, (long long)j,
             num, ana, fabs(num - ana), o->atol + o->rtol * fabs(num));
}

/* one backward of f with output gradient v (m doubles); grads of inputs land in in[i]->grad */
static bool backward_with(problem *p, const double *v) {
    for (int i = 0; i < p->n; i++) ag_zero_grad_(p->in[i]);
    ag_arena *prev = ag_arena_use(p->scratch);
    bool grad = ag_set_grad_enabled(true);
    ag_tensor *y = p->f(p->n, p->in, p->ctx);
    bool ok = y && y->requires_grad;
    if (ok) {
        ag_tensor *g = ag_wrap(AG_F64, y->ndim, y->shape, (void *)v);
        ag_backward(y, y->dtype == AG_F64 ? g : ag_to(g, y->dtype));
    }
    ag_set_grad_enabled(grad);
    ag_arena_reset(p->scratch);
    ag_arena_use(prev);
    return ok;
}

/* The inputs to check are f64 leaves, and there is at least one; else r says why. Their
 * gradient buffers come from the caller's arena, not the scratch one. */
static bool check_inputs(int n, ag_tensor **inputs, ag_gradcheck_result *r) {
    char b[128];
    int checked = 0;
    for (int i = 0; i < n; i++) {
        if (!inputs[i] || !inputs[i]->requires_grad) continue;
        if (inputs[i]->dtype != AG_F64 || inputs[i]->node) {
            r->ok = false;
            r->input = i;
            snprintf(r->message, sizeof r->message, "gradcheck: input %d %s is %s%s: inputs checked must be f64 leaves",
                     i, ag_shape_str(inputs[i], b), ag_dtype_name(inputs[i]->dtype),
                     inputs[i]->node ? ", not a leaf" : "");
            return false;
        }
        ag_grad_buffer(inputs[i]);
        checked++;
    }
    if (!checked) {
        r->ok = false;
        snprintf(r->message, sizeof r->message, "gradcheck: no input requires grad, nothing would be checked");
    }
    return checked > 0;
}

/* One evaluation without grad: p->m from its output, which must be f64; else r says why. */
static bool probe_output(problem *p, ag_gradcheck_result *r) {
    ag_arena *prev = ag_arena_use(p->scratch);
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *y = p->f(p->n, p->in, p->ctx);
    if (y) p->m = ag_numel(y);
    bool is_f64 = y && y->dtype == AG_F64;
    ag_set_grad_enabled(grad);
    ag_arena_reset(p->scratch);
    ag_arena_use(prev);
    if (!y || !is_f64) {
        r->ok = false;
        snprintf(r->message, sizeof r->message, "gradcheck: the function %s",
                 y ? "must return an f64 tensor" : "returned NULL");
    }
    return y && is_f64;
}

/* Fast mode: vᵀJu against the central difference of vᵀf along u, per input (v random in
 * [-1, 1), m doubles of scratch; plus and minus m doubles each). */
static void check_fast(problem *p, const ag_gradcheck_opts *o, ag_rng *rng, double *v, double *plus, double *minus,
                       ag_gradcheck_result *r) {
    ag_rng_uniform_f64(rng, p->m, v);
    for (int64_t j = 0; j < p->m; j++) v[j] = 2 * v[j] - 1;
    if (!backward_with(p, v)) {
        r->ok = false;
        snprintf(r->message, sizeof r->message, "gradcheck: output does not require grad");
    }
    for (int i = 0; r->ok && i < p->n; i++) {
        ag_tensor *x = p->in[i];
        if (!x || !x->requires_grad) continue;
        int64_t nx = ag_numel(x);
        double *u = malloc(sizeof(double) * (size_t)(nx + 1)), *g = malloc(sizeof(double) * (size_t)(nx + 1));
        ag_rng_uniform_f64(rng, nx, u);
        ag_to_buffer(x->grad, AG_F64, g);
        double ana = 0, num = 0;
        for (int64_t k = 0; k < nx; k++) {
            u[k] = 2 * u[k] - 1;
            ana += g[k] * u[k];
        }
        for (int64_t k = 0; k < nx; k++) *elem(x, k) += o->eps * u[k];
        bool ok1 = eval(p, plus);
        for (int64_t k = 0; k < nx; k++) *elem(x, k) -= 2 * o->eps * u[k];
        bool ok2 = eval(p, minus);
        for (int64_t k = 0; k < nx; k++) *elem(x, k) += o->eps * u[k];
        for (int64_t j = 0; j < p->m; j++) num += v[j] * (plus[j] - minus[j]) / (2 * o->eps);
        if (!ok1 || !ok2) {
            r->ok = false;
            snprintf(r->message, sizeof r->message, "gradcheck: the function failed on perturbed input %d", i);
        } else if (!close_enough(num, ana, o)) {
            fail_at(r, o, p, i, -1, -1, num, ana);
        }
        free(u);
        free(g);
    }
}

/* The analytic Jacobian, one backward per output element: jac[i][k*m + j] (v m doubles of
 * scratch). False (r says why) when the output does not require grad. */
static bool analytic_jacobian(problem *p, double **jac, double *v, ag_gradcheck_result *r) {
    for (int64_t j = 0; j < p->m; j++) {
        memset(v, 0, sizeof(double) * (size_t)p->m);
        v[j] = 1;
        if (!backward_with(p, v)) {
            r->ok = false;
            snprintf(r->message, sizeof r->message, "gradcheck: output does not require grad");
            return false;
        }
        for (int i = 0; i < p->n; i++) {
            if (!jac[i]) continue;
            int64_t nx = ag_numel(p->in[i]);
            double *g = malloc(sizeof(double) * (size_t)(nx + 1));
            ag_to_buffer(p->in[i]->grad, AG_F64, g);
            for (int64_t k = 0; k < nx; k++) jac[i][k * p->m + j] = g[k];
            free(g);
        }
    }
    return true;
}

/* Full mode: every element of the analytic Jacobian against central differences, input element
 * by input element (plus and minus m doubles each; v m doubles of scratch). */
static void check_full(problem *p, const ag_gradcheck_opts *o, double *v, double *plus, double *minus,
                       ag_gradcheck_result *r) {
    double **jac = calloc((size_t)p->n, sizeof *jac);
    for (int i = 0; i < p->n; i++)
        if (p->in[i] && p->in[i]->requires_grad)
            jac[i] = malloc(sizeof(double) * (size_t)(ag_numel(p->in[i]) * p->m + 1));
    bool ok = analytic_jacobian(p, jac, v, r);
    for (int i = 0; ok && r->ok && i < p->n; i++) {
        if (!jac[i]) continue;
        ag_tensor *x = p->in[i];
        for (int64_t k = 0; r->ok && k < ag_numel(x); k++) {
            double *e = elem(x, k), x0 = *e;
            *e = x0 + o->eps;
            bool ok1 = eval(p, plus);
            *e = x0 - o->eps;
            bool ok2 = eval(p, minus);
            *e = x0;
            if (!ok1 || !ok2) {
                r->ok = false;
                snprintf(r->message, sizeof r->message, "gradcheck: the function failed on perturbed input %d", i);
                break;
            }
            for (int64_t j = 0; j < p->m; j++) {
                double num = (plus[j] - minus[j]) / (2 * o->eps), ana = jac[i][k * p->m + j];
                if (!close_enough(num, ana, o)) {
                    fail_at(r, o, p, i, k, j, num, ana);
                    break;
                }
            }
        }
    }
    for (int i = 0; i < p->n; i++) free(jac[i]);
    free(jac);
}

ag_gradcheck_result ag_gradcheck(ag_fn f, void *ctx, int n, ag_tensor **inputs, const ag_gradcheck_opts *opts) {
    ag_gradcheck_opts o = opts ? *opts : (ag_gradcheck_opts){0};
    if (o.eps == 0) o.eps = 1e-6;
    if (o.atol == 0) o.atol = 1e-5;
    if (o.rtol == 0) o.rtol = 1e-3;
    ag_gradcheck_result r = {.ok = true, .input = -1, .index = -1, .out_index = -1};
    problem p = {f, ctx, n, inputs, NULL, 0};
    if (!check_inputs(n, inputs, &r)) return r;

    /* keep the callers' gradients */
    double **saved = calloc((size_t)n, sizeof *saved);
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad) {
            saved[i] = malloc(sizeof(double) * (size_t)(ag_numel(inputs[i]) + 1));
            ag_to_buffer(inputs[i]->grad, AG_F64, saved[i]);
        }
    p.scratch = ag_arena_new(1 << 20);
    if (probe_output(&p, &r)) {
        double *plus = malloc(sizeof(double) * (size_t)(p.m + 1)), *minus = malloc(sizeof(double) * (size_t)(p.m + 1));
        double *v = calloc((size_t)p.m + 1, sizeof(double));
        ag_rng rng = ag_rng_new(o.seed ? o.seed : 0x6772616463686bULL);
        if (o.fast) check_fast(&p, &o, &rng, v, plus, minus, &r);
        else check_full(&p, &o, v, plus, minus, &r);
        free(plus);
        free(minus);
        free(v);
    }
    for (int i = 0; i < n; i++)
        if (saved[i]) {
            ag_tensor *src = ag_wrap(AG_F64, inputs[i]->ndim, inputs[i]->shape, saved[i]);
            ag_copy_(inputs[i]->grad, src);
            free(saved[i]);
        }
    free(saved);
    ag_arena_free(p.scratch);
    return r;
}
