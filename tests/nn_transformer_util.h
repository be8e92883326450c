/* What the Transformer tests (tests/test_nn_transformer_*.c) share: deterministic parameters
 * and inputs (the same formulas their torch scripts used), a bool mask from a string, and
 * comparisons. */
#ifndef AG_TESTS_NN_TRANSFORMER_UTIL_H
#define AG_TESTS_NN_TRANSFORMER_UTIL_H
#include <math.h>

#include "test_util.h"

/* Every parameter, in registration order, set to 0.3 sin(0.7 i + 1) with i counting elements
 * across all of them: torch's side fills its state_dict the same way. */
static inline void fill_params(ag_params *p) {
    int64_t i = 0;
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        int64_t idx[AG_MAX_DIMS] = {0};
        for (int64_t e = 0; e < ag_numel(t); e++, i++) {
            int64_t r = e;
            for (int d = t->ndim - 1; d >= 0; d--) {
                idx[d] = r % t->shape[d];
                r /= t->shape[d];
            }
            ag_set(t, idx, 0.3 * sin(0.7 * (double)i + 1));
        }
    }
}

/* row-major tensor of cos(0.5 i + phase) */
static inline ag_tensor *wave(ag_dtype dt, int ndim, const int64_t *shape, double phase) {
    ag_tensor *t = ag_empty(dt, ndim, shape);
    int64_t n = ag_numel(t);
    double v[256];
    assert_true(n <= 256);
    for (int64_t i = 0; i < n; i++) v[i] = cos(0.5 * (double)i + phase);
    ag_copy_(t, ag_wrap(AG_F64, ndim, shape, v));
    return t;
}

/* a bool tensor of shape whose element i is bits[i] == '1' */
static inline ag_tensor *bools(int ndim, const int64_t *shape, const char *bits) {
    ag_tensor *t = ag_empty(AG_BOOL, ndim, shape);
    for (int64_t i = 0; i < ag_numel(t); i++) ((uint8_t *)t->data)[i] = bits[i] == '1';
    return t;
}

/* fails unless a and b have as many elements and those are within tol (row-major order) */
static inline void assert_close(const ag_tensor *a, const ag_tensor *b, double tol) {
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(ag_numel(a), ag_numel(b));
    static double va[4096], vb[4096];
    assert_true(ag_numel(a) <= 4096);
    ag_to_buffer(a, AG_F64, va);
    ag_to_buffer(b, AG_F64, vb);
    for (int64_t i = 0; i < ag_numel(a); i++)
        if (fabs(va[i] - vb[i]) > tol) fail_msg("element %lld: %.17g vs %.17g", (long long)i, va[i], vb[i]);
}

/* d_model 4, 2 heads, feed-forward 6 */
static inline ag_transformer_config small_config(bool norm_first, ag_activation act, bool batch_first) {
    ag_transformer_config c = ag_transformer_defaults(4, 2);
    c.dim_feedforward = 6;
    c.norm_first = norm_first;
    c.activation = act;
    c.batch_first = batch_first;
    return c;
}

/* *mx = the largest |element| of t */
static inline void max_abs(const ag_tensor *t, double *mx) {
    static double v[4096];
    ag_to_buffer(t, AG_F64, v);
    *mx = 0;
    for (int64_t i = 0; i < ag_numel(t); i++) *mx = fmax(*mx, fabs(v[i]));
}

#endif
