/* max / min with indices, sort, topk, cumsum, norm, any and all: values and indices from PyTorch
 * 1.13 at ties, NaN and empty dims, keepdim and negative dims, transposed inputs, gradients,
 * thread-count independence, errors, and an f64 gradcheck of every differentiable op. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define NAN_ (0.0 / 0.0)

/* torch's example row pair: ties, a NaN, a repeated maximum */
static ag_tensor *tied(ag_dtype dt) { return tu_tensor(dt, AG_SHAPE(2, 5), 1, 3, 3, NAN_, 2, 0, -1, -1, 5, 5); }

/* ---- max / min with indices ---- */

/* torch.max(x, 1) = ([nan, 5], [3, 3]); torch.min(x, 1) = ([nan, -1], [3, 1]) */
static void test_max_and_min_dim_give_the_first_extreme_and_nan_first(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *i, *v = ag_max_dim(tied(dt), 1, false, &i);
        tu_assert_shape(v, 2);
        assert_int_equal(i->dtype, AG_I64);
        tu_assert_values(v, 0, NAN_, 5);
        tu_assert_values(i, 0, 3, 3);
        v = ag_min_dim(tied(dt), -1, true, &i);
        tu_assert_shape(v, 2, 1);
        tu_assert_shape(i, 2, 1);
        tu_assert_values(v, 0, NAN_, -1);
        tu_assert_values(i, 0, 3, 1);
    }
    /* the 8-lane path: rows longer than 8, the minimum late and tied */
    ag_tensor *l = tu_tensor(AG_F64, AG_SHAPE(2, 10), 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, /**/
                             5, 5, 5, 5, 5, 5, 5, 5, NAN_, 0);
    ag_tensor *i, *v = ag_min_dim(l, 1, false, &i);
    tu_assert_values(v, 0, 1, NAN_);
    tu_assert_values(i, 0, 8, 8);
    /* values only, as ag_max */
    tu_assert_values(ag_min_dim(l, 0, false, NULL), 0, 5, 5, 5, 5, 5, 4, 3, 2, NAN_, 0);
    tu_assert_values(ag_max_dim(l, 0, false, NULL), 0, 9, 8, 7, 6, 5, 5, 5, 5, NAN_, 1);
}

static void test_max_and_min_dim_of_transposed_and_integer_inputs(void **s) {
    ag_tensor *t = ag_transpose(tu_tensor(AG_I32, AG_SHAPE(2, 3), 3, 1, 3, 0, 5, 5), 0, 1); /* [[3,0],[1,5],[3,5]] */
    ag_tensor *i, *v = ag_max_dim(t, 0, false, &i);
    assert_int_equal(v->dtype, AG_I32);
    tu_assert_values(v, 0, 3, 5);
    tu_assert_values(i, 0, 0, 1);
    v = ag_min_dim(t, 1, true, &i);
    tu_assert_shape(v, 3, 1);
    tu_assert_values(v, 0, 0, 1, 3);
    tu_assert_values(i, 0, 1, 0, 0);
    /* a 0-d tensor accepts dim 0 and -1 */
    v = ag_max_dim(ag_scalar(AG_F32, 4), -1, false, &i);
    assert_int_equal(v->ndim, 0);
    tu_assert_values(v, 0, 4);
    tu_assert_values(i, 0, 0);
}

/* the gradient goes to the returned index only; the caller's indices are its own to change */
static void test_min_dim_gradient_goes_to_the_returned_index(void **s) {
    ag_tensor *x = tu_leaf(tied(AG_F64)), *i;
    ag_tensor *v = ag_min_dim(x, 1, false, &i);
    ag_fill_(i, 0); /* the node keeps its own copy of the positions */
    ag_backward(v, tu_tensor(AG_F64, AG_SHAPE(2), 10, 100));
    tu_assert_values(x->grad, 0, 0, 0, 0, 10, 0, /**/ 0, 100, 0, 0, 0);
    ag_tensor *y = tu_leaf(tied(AG_F64));
    ag_backward(ag_max_dim(y, 0, true, NULL), ag_ones(AG_F64, AG_SHAPE(1, 5)));
    tu_assert_values(y->grad, 0, 1, 1, 1, 1, 0, /**/ 0, 0, 0, 0, 1);
}

/* ---- sort ---- */

/* torch.sort(x, dim=1, stable=True) and descending: NaN greatest, ties in order */
static void test_sort_is_stable_and_puts_nan_last_ascending_first_descending(void **s) {
    for (ag_dtype dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *i, *v = ag_sort(tied(dt), 1, false, &i);
        tu_assert_values(v, 0, 1, 2, 3, 3, NAN_, /**/ -1, -1, 0, 5, 5);
        tu_assert_values(i, 0, 0, 4, 1, 2, 3, /**/ 1, 2, 0, 3, 4);
        v = ag_sort(tied(dt), -1, true, &i);
        tu_assert_values(v, 0, NAN_, 3, 3, 2, 1, /**/ 5, 5, 0, -1, -1);
        tu_assert_values(i, 0, 3, 1, 2, 4, 0, /**/ 3, 4, 0, 1, 2);
    }
}

static void test_sort_of_integers_bools_transposed_0d_and_empty_inputs(void **s) {
    ag_tensor *i, *v = ag_sort(tu_tensor(AG_I32, AG_SHAPE(3), 3, 1, 2), 0, false, &i);
    assert_int_equal(v->dtype, AG_I32);
    tu_assert_values(v, 0, 1, 2, 3);
    tu_assert_values(i, 0, 1, 2, 0);
    v = ag_sort(tu_tensor(AG_BOOL, AG_SHAPE(3), 1, 0, 1), 0, false, &i); /* torch: [F,T,T], [1,0,2] */
    tu_assert_values(v, 0, 0, 1, 1);
    tu_assert_values(i, 0, 1, 0, 2);
    /* dim 0 of a transposed (2,3): columns of [[3,0],[1,5],[3,5]] */
    ag_tensor *t = ag_transpose(tu_tensor(AG_F32, AG_SHAPE(2, 3), 3, 1, 3, 0, 5, 5), 0, 1);
    v = ag_sort(t, 0, false, &i);
    tu_assert_shape(v, 3, 2);
    tu_assert_values(v, 0, 1, 0, 3, 5, 3, 5);
    tu_assert_values(i, 0, 1, 0, 0, 1, 2, 2);
    v = ag_sort(ag_scalar(AG_F64, 3), 0, false, &i);
    assert_int_equal(v->ndim, 0);
    tu_assert_values(i, 0, 0);
    v = ag_sort(ag_zeros(AG_F32, AG_SHAPE(2, 0)), 1, false, &i);
    tu_assert_shape(v, 2, 0);
    tu_assert_shape(i, 2, 0);
}

/* rows longer than the insertion runs, with many ties: sorted, a permutation, stable */
static void test_sort_of_long_rows_with_ties_is_a_stable_permutation(void **s) {
    enum { N = 1000 };
    double v[2 * N];
    for (int k = 0; k < 2 * N; k++) v[k] = (double)((k * 7919) % 37) - 18; /* 37 values, each many times */
    ag_tensor *x = ag_from_buffer(AG_F64, AG_SHAPE(2, N), v);
    for (int desc = 0; desc < 2; desc++) {
        ag_tensor *i, *y = ag_sort(x, 1, desc, &i);
        double got[2 * N];
        int64_t idx[2 * N];
        ag_to_buffer(y, AG_F64, got);
        ag_to_buffer(i, AG_I64, idx);
        for (int r = 0; r < 2; r++) {
            bool seen[N] = {0};
            for (int j = 0; j < N; j++) {
                int64_t p = idx[r * N + j];
                assert_true(p >= 0 && p < N && !seen[p]);
                seen[p] = true;
                assert_true(got[r * N + j] == v[r * N + p]);
                if (j) {
                    double a = got[r * N + j - 1], b = got[r * N + j];
                    assert_true(desc ? a >= b : a <= b);
                    if (a == b) assert_true(idx[r * N + j - 1] < p); /* stable */
                }
            }
        }
    }
}

static void test_sort_gradient_follows_the_permutation(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 3, 1, 2, 0, 5, 4));
    ag_tensor *y = ag_sort(x, 1, true, NULL); /* [[3,2,1],[5,4,0]] */
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 3), 10, 20, 30, 40, 50, 60));
    tu_assert_values(x->grad, 0, 10, 30, 20, 60, 40, 50);
}

/* ---- topk ---- */

/* torch.topk([[1,4,2,8,5],[7,3,9,0,6]], 3, 1) and largest=False */
static void test_topk_largest_and_smallest(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 5), 1, 4, 2, 8, 5, 7, 3, 9, 0, 6);
    ag_tensor *i, *v = ag_topk(x, 3, 1, true, true, &i);
    tu_assert_shape(v, 2, 3);
    tu_assert_values(v, 0, 8, 5, 4, 9, 7, 6);
    tu_assert_values(i, 0, 3, 4, 1, 2, 0, 4);
    v = ag_topk(x, 2, -1, false, true, &i);
    tu_assert_values(v, 0, 1, 2, 0, 3);
    tu_assert_values(i, 0, 0, 2, 3, 1);
    /* along dim 0 of the transpose: the same rows */
    v = ag_topk(ag_transpose(x, 0, 1), 1, 0, true, false, &i);
    tu_assert_shape(v, 1, 2);
    tu_assert_values(v, 0, 8, 9);
    tu_assert_values(i, 0, 3, 2);
    /* ties in index order; NaN the largest */
    v = ag_topk(tied(AG_F64), 3, 1, true, true, &i);
    tu_assert_values(v, 0, NAN_, 3, 3, 5, 5, 0);
    tu_assert_values(i, 0, 3, 1, 2, 3, 4, 0);
}

/* topk of a few (kept by insertion) and of many (a sort) give the first k of the stable sort,
 * values and indices, on long rows full of ties, NaN and a transposed layout */
static void test_topk_equals_the_first_k_of_the_stable_sort(void **s) {
    enum { N = 300 };
    double v[3 * N];
    for (int k = 0; k < 3 * N; k++) v[k] = k % 97 == 5 ? NAN_ : (double)((k * 7919) % 23);
    ag_tensor *x = ag_transpose(ag_from_buffer(AG_F32, AG_SHAPE(N, 3), v), 0, 1); /* (3,N), strided rows */
    for (int largest = 0; largest < 2; largest++) {
        ag_tensor *si, *sv = ag_sort(x, 1, largest, &si);
        for (int64_t k = 1; k <= 40; k += 13) {
            ag_tensor *ti, *tv = ag_topk(x, k, 1, largest, true, &ti);
            float a[3 * 40], b[3 * 40];
            int64_t ia[3 * 40], ib[3 * 40];
            ag_to_buffer(tv, AG_F32, a);
            ag_to_buffer(ag_narrow(sv, 1, 0, k), AG_F32, b);
            ag_to_buffer(ti, AG_I64, ia);
            ag_to_buffer(ag_narrow(si, 1, 0, k), AG_I64, ib);
            assert_memory_equal(a, b, sizeof(float) * (size_t)(3 * k)); /* NaN bits included */
            assert_memory_equal(ia, ib, sizeof(int64_t) * (size_t)(3 * k));
        }
    }
}

static void test_topk_edge_sizes_and_gradient(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 3, 1, 2, 0, 5, 4));
    ag_tensor *i, *v = ag_topk(x, 0, 1, true, true, &i);
    tu_assert_shape(v, 2, 0);
    tu_assert_shape(i, 2, 0);
    v = ag_topk(ag_scalar(AG_F32, 3), 1, -1, true, true, &i); /* torch: (3., 0) */
    assert_int_equal(v->ndim, 0);
    tu_assert_values(v, 0, 3);
    v = ag_topk(x, 2, 1, false, true, NULL); /* [[1,2],[0,4]] */
    ag_backward(v, tu_tensor(AG_F64, AG_SHAPE(2, 2), 10, 20, 30, 40));
    tu_assert_values(x->grad, 0, 0, 10, 20, 30, 0, 40);
}

/* ---- cumsum ---- */

static void test_cumsum_values_dtypes_and_dims(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    tu_assert_values(ag_cumsum(x, 1), 0, 1, 3, 6, 4, 9, 15);
    tu_assert_values(ag_cumsum(x, -2), 0, 1, 2, 3, 5, 7, 9);
    ag_tensor *t = ag_cumsum(ag_transpose(x, 0, 1), 1); /* [[1,4],[2,5],[3,6]] */
    tu_assert_shape(t, 3, 2);
    tu_assert_values(t, 0, 1, 5, 2, 7, 3, 9);
    ag_tensor *i = ag_cumsum(tu_tensor(AG_I32, AG_SHAPE(3), 2000000000, 2000000000, 1), 0);
    assert_int_equal(i->dtype, AG_I64); /* torch: int64, no overflow */
    tu_assert_values(i, 0, 2000000000, 4000000000.0, 4000000001.0);
    i = ag_cumsum(tu_tensor(AG_BOOL, AG_SHAPE(3), 1, 0, 1), 0);
    assert_int_equal(i->dtype, AG_I64);
    tu_assert_values(i, 0, 1, 1, 2);
    tu_assert_values(ag_cumsum(ag_scalar(AG_F64, 3), 0), 0, 3);
    tu_assert_shape(ag_cumsum(ag_zeros(AG_F32, AG_SHAPE(0, 2)), 0), 0, 2);
}

/* torch.cumsum([1e8, 1, 1, -1e8]) in f32 is [1e8, 1e8, 1e8, 2]: summed in double */
static void test_cumsum_of_f32_sums_in_double_as_torch(void **s) {
    ag_tensor *y = ag_cumsum(tu_tensor(AG_F32, AG_SHAPE(4), 1e8, 1, 1, -1e8), 0);
    tu_assert_values(y, 0, 1e8, 1e8, 1e8, 2);
}

static void test_cumsum_gradient_sums_from_the_end(void **s) {
    ag_tensor *x = tu_leaf(ag_zeros(AG_F64, AG_SHAPE(2, 3)));
    ag_backward(ag_cumsum(x, 1), tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6));
    tu_assert_values(x->grad, 0, 6, 5, 3, 15, 11, 6);
}

/* ---- norm ---- */

/* torch.linalg.vector_norm([[0,0,0],[3,-3,1]], p, dim=1) and its gradient for ones */
static void test_norm_values_and_gradients_match_pytorch_for_every_p(void **s) {
    const struct {
        double p, norm, g[3];
    } cs[] = {
        {0, 3, {0, 0, 0}},
        {1, 7, {1, -1, 1}},
        {2, 4.358898943540674, {0.6882472016116852, -0.6882472016116852, 0.22941573387056174}},
        {3, 3.802952460761391, {0.6223013117609552, -0.6223013117609552, 0.06914459019566169}},
        {0.5, 19.928203230275507, {2.577350269189626, -2.577350269189626, 4.464101615137754}},
        {1.5, 5.06299771974117, {0.7697625202443363, -0.7697625202443363, 0.44442259827515235}},
        {INFINITY, 3, {0.5, -0.5, 0}},
        {-INFINITY, 1, {0, 0, 1}},
        {-1, 0.6000000000000001, {0.04000000000000001, -0.04000000000000001, 0.3600000000000001}},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 0, 0, 0, 3, -3, 1));
        ag_tensor *y = ag_norm(x, cs[k].p, 1, (int[]){1}, false);
        tu_assert_shape(y, 2);
        tu_assert_values(y, 1e-14, 0, cs[k].norm);
        ag_backward(y, ag_ones_like(y));
        /* the zero row's gradient is zero for every p */
        tu_assert_values(x->grad, 1e-14, 0, 0, 0, cs[k].g[0], cs[k].g[1], cs[k].g[2]);
        ag_tensor *f = ag_norm(tu_tensor(AG_F32, AG_SHAPE(2, 3), 0, 0, 0, 3, -3, 1), cs[k].p, 1, (int[]){-1}, true);
        tu_assert_shape(f, 2, 1);
        tu_assert_values(f, 1e-5, 0, cs[k].norm);
    }
}

static void test_norm_over_several_and_all_dims_of_transposed_inputs(void **s) {
    ag_tensor *x = ag_reshape(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 3, 4));
    /* over dims 0 and 2 of x[a][b][c] = 12a + 4b + c: Σ = 60 + 32b (all non-negative) */
    tu_assert_values(ag_norm(x, 1, 2, (int[]){0, -1}, false), 1e-12, 60, 92, 124);
    ag_tensor *p = ag_permute(x, (int[]){2, 0, 1}); /* (4,2,3), not contiguous */
    tu_assert_shape(ag_norm(p, 1, 2, (int[]){0, 2}, true), 1, 2, 1);
    tu_assert_values(ag_norm(p, 1, 2, (int[]){0, 2}, true), 1e-12, 66, 210);
    double ss = 0;
    for (int k = 0; k < 24; k++) ss += (double)k * k;
    ag_tensor *all = ag_norm(p, 2, 0, NULL, false);
    assert_int_equal(all->ndim, 0);
    tu_assert_values(all, 1e-12, sqrt(ss));
    tu_assert_values(ag_norm(x, INFINITY, 0, NULL, false), 0, 23);
}

/* torch: the inf norm of [0, nan, 0] is nan with gradient 0 (sgn(nan) = 0); of nothing, an
 * error; the 2-norm of nothing is 0 */
static void test_norm_with_nan_and_empty_dims(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), 0, NAN_, 0, 3, -3, 1));
    ag_tensor *y = ag_norm(x, INFINITY, 1, (int[]){1}, false);
    tu_assert_values(y, 0, NAN_, 3);
    ag_backward(y, ag_ones_like(y));
    tu_assert_values(x->grad, 0, 0, 0, 0, 0.5, -0.5, 0);
    tu_assert_values(ag_norm(tu_tensor(AG_F32, AG_SHAPE(2), 1, NAN_), 2, 0, NULL, false), 0, NAN_);
    ag_tensor *e = ag_zeros(AG_F32, AG_SHAPE(2, 0));
    tu_assert_values(ag_norm(e, 2, 1, (int[]){1}, false), 0, 0, 0);
    assert_null(ag_norm(e, INFINITY, 1, (int[]){1}, false));
    tu_assert_error("ag_norm", "inf norm", "(2,0)", "size 0");
}

/* ---- any, all ---- */

static void test_any_and_all_count_nan_as_true_and_handle_empty_dims(void **s) {
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 2), 0, NAN_, 0, 0);
    ag_tensor *y = ag_any(x, 1, (int[]){1}, false);
    assert_int_equal(y->dtype, AG_BOOL);
    tu_assert_values(y, 0, 1, 0);
    tu_assert_values(ag_all(tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, NAN_, 0, 1), 1, (int[]){-1}, false), 0, 1, 0);
    ag_tensor *e = ag_zeros(AG_F32, AG_SHAPE(2, 0));
    tu_assert_values(ag_any(e, 1, (int[]){1}, false), 0, 0, 0);
    tu_assert_values(ag_all(e, 1, (int[]){1}, false), 0, 1, 1);
    ag_tensor *z = ag_any(ag_scalar(AG_F32, 0), 0, NULL, false);
    assert_int_equal(z->ndim, 0);
    tu_assert_values(z, 0, 0);
}

static void test_any_and_all_of_integers_bools_several_dims_and_transposes(void **s) {
    ag_tensor *i = tu_tensor(AG_I64, AG_SHAPE(2, 3), 0, 0, 5, 0, 0, 0);
    tu_assert_values(ag_any(i, 1, (int[]){0}, true), 0, 0, 0, 1);
    tu_assert_shape(ag_any(i, 1, (int[]){0}, true), 1, 3);
    tu_assert_values(ag_any(i, 0, NULL, false), 0, 1);
    tu_assert_values(ag_all(ag_ones(AG_I32, AG_SHAPE(2, 2)), 0, NULL, false), 0, 1);
    ag_tensor *b = ag_transpose(tu_tensor(AG_BOOL, AG_SHAPE(2, 3), 1, 1, 0, 1, 1, 1), 0, 1); /* [[1,1],[1,1],[0,1]] */
    tu_assert_values(ag_all(b, 1, (int[]){1}, false), 0, 1, 1, 0);
    tu_assert_values(ag_any(b, 1, (int[]){0}, false), 0, 1, 1);
    ag_tensor *x = ag_reshape(ag_arange(AG_F32, 0, 24, 1), AG_SHAPE(2, 3, 4)); /* one zero, at [0][0][0] */
    tu_assert_values(ag_all(x, 2, (int[]){0, 2}, false), 0, 0, 1, 1);
}

/* ---- errors ---- */

static void test_errors_name_the_op_and_the_shapes(void **s) {
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_topk(x, 4, 1, true, true, NULL));
    tu_assert_error("ag_topk", "k 4", "(2,3)", "size 3");
    assert_null(ag_sort(x, 2, false, NULL));
    tu_assert_error("ag_sort", "dim 2", "(2,3)");
    assert_null(ag_cumsum(x, -3));
    tu_assert_error("ag_cumsum", "dim -3", "(2,3)");
    assert_null(ag_min_dim(ag_zeros(AG_F32, AG_SHAPE(2, 0)), 1, false, NULL));
    tu_assert_error("ag_min_dim", "(2,0)", "minimum");
    assert_null(ag_max_dim(tu_tensor(AG_BOOL, AG_SHAPE(2), 1, 0), 0, false, NULL));
    tu_assert_error("ag_max_dim", "(2)", "bool");
    assert_null(ag_norm(ag_zeros(AG_I64, AG_SHAPE(2)), 2, 0, NULL, false));
    tu_assert_error("ag_norm", "(2)", "i64");
    assert_null(ag_norm(x, NAN_, 0, NULL, false));
    tu_assert_error("ag_norm", "(2,3)", "nan");
    assert_null(ag_any(x, 2, (int[]){1, -1}, false));
    tu_assert_error("ag_any", "dim -1", "more than once", "(2,3)");
    assert_null(ag_all(NULL, 0, NULL, false));
    tu_assert_error("ag_all", "NULL");
}

/* ---- thread-count independence ---- */

static void test_results_are_bitwise_identical_with_1_and_2_threads(void **s) {
    ag_tensor *x = tu_seq(AG_F32, AG_SHAPE(64, 1500), 0.37, 0.1), *out[2][6];
    int prev = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k + 1);
        out[k][0] = ag_sort(x, 1, false, &out[k][1]);
        out[k][2] = ag_topk(x, 7, 1, true, true, &out[k][3]);
        out[k][4] = ag_cumsum(x, 1);
        out[k][5] = ag_norm(x, 3, 1, (int[]){1}, false);
    }
    omp_set_num_threads(prev);
    for (int j = 0; j < 6; j++) {
        size_t bytes = (size_t)ag_numel(out[0][j]) * ag_dtype_size(out[0][j]->dtype);
        assert_memory_equal(out[0][j]->data, out[1][j]->data, bytes);
    }
}

/* ---- gradchecks (f64, PyTorch's tolerances) ---- */

enum { G_MAX_DIM, G_MIN_DIM, G_SORT, G_SORT_DESC, G_TOPK, G_TOPK_SMALL, G_CUMSUM, G_NORM };
typedef struct {
    int op;
    bool transpose;
    double p;
} gc_ctx;

static ag_tensor *gc_fn(int n, ag_tensor **in, void *vctx) {
    const gc_ctx *c = vctx;
    ag_tensor *x = c->transpose ? ag_transpose(in[0], 0, 2) : in[0]; /* (3,4,5) or (5,4,3) */
    switch (c->op) {
    case G_MAX_DIM: return ag_max_dim(x, 1, false, NULL);
    case G_MIN_DIM: return ag_min_dim(x, -1, true, NULL);
    case G_SORT: return ag_sort(x, 0, false, NULL);
    case G_SORT_DESC: return ag_sort(x, -1, true, NULL);
    case G_TOPK: return ag_topk(x, 2, 1, true, true, NULL);
    case G_TOPK_SMALL: return ag_topk(x, 3, 2, false, true, NULL);
    case G_CUMSUM: return ag_cumsum(x, 1);
    case G_NORM: return ag_norm(x, c->p, 2, (int[]){0, 2}, false);
    }
    return NULL;
}

static void test_gradcheck_max_min_sort_topk_cumsum(void **s) {
    for (int op = G_MAX_DIM; op <= G_CUMSUM; op++)
        for (int tr = 0; tr < 2; tr++) {
            gc_ctx c = {op, tr, 0};
            ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4, 5), 0.83, 0.3)); /* no ties */
            tu_assert_gradcheck(gc_fn, &c, 1, &x);
        }
}

static void test_gradcheck_norm(void **s) {
    const double ps[] = {1, 2, 3, 0.5, 1.5, -1, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++)
        for (int tr = 0; tr < 2; tr++) {
            gc_ctx c = {G_NORM, tr, ps[k]};
            ag_tensor *x = tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4, 5), 0.83, 0.3));
            tu_assert_gradcheck(gc_fn, &c, 1, &x);
        }
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_max_and_min_dim_give_the_first_extreme_and_nan_first),
        T(test_max_and_min_dim_of_transposed_and_integer_inputs),
        T(test_min_dim_gradient_goes_to_the_returned_index),
        T(test_sort_is_stable_and_puts_nan_last_ascending_first_descending),
        T(test_sort_of_integers_bools_transposed_0d_and_empty_inputs),
        T(test_sort_of_long_rows_with_ties_is_a_stable_permutation),
        T(test_sort_gradient_follows_the_permutation),
        T(test_topk_largest_and_smallest),
        T(test_topk_equals_the_first_k_of_the_stable_sort),
        T(test_topk_edge_sizes_and_gradient),
        T(test_cumsum_values_dtypes_and_dims),
        T(test_cumsum_of_f32_sums_in_double_as_torch),
        T(test_cumsum_gradient_sums_from_the_end),
        T(test_norm_values_and_gradients_match_pytorch_for_every_p),
        T(test_norm_over_several_and_all_dims_of_transposed_inputs),
        T(test_norm_with_nan_and_empty_dims),
        T(test_any_and_all_count_nan_as_true_and_handle_empty_dims),
        T(test_any_and_all_of_integers_bools_several_dims_and_transposes),
        T(test_errors_name_the_op_and_the_shapes),
        T(test_results_are_bitwise_identical_with_1_and_2_threads),
        T(test_gradcheck_max_min_sort_topk_cumsum),
        T(test_gradcheck_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
