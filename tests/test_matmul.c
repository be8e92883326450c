/* ag_matmul: every layout BLAS can take directly (and the ones it cannot), the 1-d and batched
 * broadcast cases of torch.matmul, errors, and gradients. The witness for values is
 * naive_matmul below: the definition as a triple loop in double over ag_get, with torch's
 * promotion and broadcasting rules written out independently of the library's. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "test_util.h"

#define tensor_of(dt, dims, ...)                                                                   \
    tu_tensor_((dt), AG_SHAPE dims, (const double[]){__VA_ARGS__},                                 \
               (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))

/* ---- the witness ---- */

/* a @ b by definition into out (row-major, numel of the result). A 1-d a is the row (1,k), a
 * 1-d b the column (k,1); batch dims align right, size 1 repeats. */
static int64_t naive_matmul(const ag_tensor *a, const ag_tensor *b, double *out) {
    int64_t ash[AG_MAX_DIMS + 1], bsh[AG_MAX_DIMS + 1];
    int na = a->ndim, nb = b->ndim;
    memcpy(ash, a->shape, sizeof(int64_t) * (size_t)na);
    memcpy(bsh, b->shape, sizeof(int64_t) * (size_t)nb);
    if (na == 1) { ash[1] = ash[0]; ash[0] = 1; na = 2; }
    if (nb == 1) { bsh[1] = 1; nb = 2; }
    int64_t m = ash[na - 2], k = ash[na - 1], n = bsh[nb - 1];
    assert_int_equal(k, bsh[nb - 2]);
    int nba = na - 2, nbb = nb - 2, nbt = nba > nbb ? nba : nbb;
    int64_t bt[AG_MAX_DIMS], nbatch = 1;
    for (int d = 0; d < nbt; d++) {
        int ia = d - (nbt - nba), ib = d - (nbt - nbb);
        int64_t sa = ia >= 0 ? ash[ia] : 1, sb = ib >= 0 ? bsh[ib] : 1;
        bt[d] = sa > sb ? sa : sb;
        nbatch *= bt[d];
    }
    int64_t e = 0;
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t bidx[AG_MAX_DIMS], rem = bi;
        for (int d = nbt - 1; d >= 0; d--) {
            bidx[d] = rem % bt[d];
            rem /= bt[d];
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    int64_t ia[AG_MAX_DIMS], ib[AG_MAX_DIMS];
                    for (int d = 0; d < nba; d++) ia[d] = ash[d] == 1 ? 0 : bidx[d + nbt - nba];
                    for (int d = 0; d < nbb; d++) ib[d] = bsh[d] == 1 ? 0 : bidx[d + nbt - nbb];
                    if (a->ndim == 1) {
                        ia[0] = kk;
                    } else {
                        ia[nba] = i;
                        ia[nba + 1] = kk;
                    }
                    if (b->ndim == 1) {
                        ib[0] = kk;
                    } else {
                        ib[nbb] = kk;
                        ib[nbb + 1] = j;
                    }
                    s += ag_get(a, ia) * ag_get(b, ib);
                }
                out[e++] = s;
            }
    }
    return e;
}

static double tol_of(ag_dtype dt) { return dt == AG_F32 ? 2e-5 : 1e-12; }

/* c == naive a @ b */
#define assert_matches_naive(c, a, b)                                                              \
    do {                                                                                           \
        double ref_[4096];                                                                         \
        int64_t n_ = naive_matmul((a), (b), ref_);                                                 \
        tu_assert_values_(__FILE__, __LINE__, (c), ref_, n_, tol_of((a)->dtype));                  \
    } while (0)

static ag_tensor *rnd(ag_rng *r, ag_dtype dt, int ndim, const int64_t *shape) {
    return ag_uniform(r, dt, ndim, shape, -1, 1);
}

/* (rows, cols) as it lies, or as the transpose view of a (cols, rows) tensor */
static ag_tensor *matrix(ag_rng *r, ag_dtype dt, int64_t rows, int64_t cols, bool transposed) {
    if (!transposed) return rnd(r, dt, AG_SHAPE(rows, cols));
    return ag_transpose(rnd(r, dt, AG_SHAPE(cols, rows)), 0, 1);
}

/* ---- hand-worked ---- */

static void test_matmul_2x2_hand_worked(void **s) {
    ag_tensor *a = tensor_of(AG_F64, (2, 3), 1, 2, 3, 4, 5, 6);
    ag_tensor *b = tensor_of(AG_F64, (3, 2), 7, 8, 9, 10, 11, 12);
    ag_tensor *c = ag_matmul(a, b);
    tu_assert_shape(c, 2, 2);
    /* [1·7+2·9+3·11, 1·8+2·10+3·12; 4·7+5·9+6·11, 4·8+5·10+6·12] */
    tu_assert_values(c, 0, 58, 64, 139, 154);
}

static void test_dot_of_two_vectors_is_0d(void **s) {
    ag_tensor *a = tensor_of(AG_F32, (3), 1, 2, 3), *b = tensor_of(AG_F32, (3), 4, -5, 6);
    ag_tensor *c = ag_matmul(a, b);
    assert_non_null(c);
    assert_int_equal(c->ndim, 0);
    tu_assert_values(c, 0, 12); /* 4 - 10 + 18 */
}

static void test_vector_matrix_and_matrix_vector_drop_the_inserted_dim(void **s) {
    ag_tensor *v = tensor_of(AG_F64, (2), 1, -1);
    ag_tensor *m = tensor_of(AG_F64, (2, 3), 1, 2, 3, 4, 5, 6);
    ag_tensor *vm = ag_matmul(v, m);
    tu_assert_shape(vm, 3);
    tu_assert_values(vm, 0, -3, -3, -3);
    ag_tensor *w = tensor_of(AG_F64, (3), 1, 0, 2);
    ag_tensor *mw = ag_matmul(m, w);
    tu_assert_shape(mw, 2);
    tu_assert_values(mw, 0, 7, 16);
}

/* torch.matmul(torch.arange(24.).view(2,1,3,4), torch.arange(120.).view(5,4,6))[1,3] and [0,0],
 * computed with PyTorch 1.13 */
static void test_batch_broadcast_matches_pytorch(void **s) {
    ag_tensor *a = ag_view(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 1, 3, 4));
    ag_tensor *b = ag_view(ag_arange(AG_F64, 0, 120, 1), AG_SHAPE(5, 4, 6));
    ag_tensor *c = ag_matmul(a, b);
    tu_assert_shape(c, 2, 5, 3, 6);
    tu_assert_values(ag_select(ag_select(c, 0, 1), 0, 3), 0, 4404, 4458, 4512, 4566, 4620, 4674, 5700, 5770,
                     5840, 5910, 5980, 6050, 6996, 7082, 7168, 7254, 7340, 7426);
    tu_assert_values(ag_select(ag_select(c, 0, 0), 0, 0), 0, 84, 90, 96, 102, 108, 114, 228, 250, 272, 294, 316,
                     338, 372, 410, 448, 486, 524, 562);
}

/* ---- every transpose combination against the witness ---- */

static void check_transpose_combinations(ag_dtype dt) {
    ag_rng r = ag_rng_new(11);
    const int64_t sizes[][3] = {{3, 4, 5}, {1, 4, 5}, {3, 4, 1}, {3, 1, 5}, {7, 9, 2}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t m = sizes[s][0], k = sizes[s][1], n = sizes[s][2];
                ag_tensor *a = matrix(&r, dt, m, k, ta), *b = matrix(&r, dt, k, n, tb);
                ag_tensor *c = ag_matmul(a, b);
                tu_assert_shape(c, m, n);
                assert_true(ag_is_contiguous(c));
                assert_matches_naive(c, a, b);
            }
}

static void test_all_transpose_combinations_f32(void **s) { check_transpose_combinations(AG_F32); }
static void test_all_transpose_combinations_f64(void **s) { check_transpose_combinations(AG_F64); }

static void test_batched_transposed_and_head_permuted_operands(void **s) {
    ag_rng r = ag_rng_new(12);
    for (int dt = AG_F32; dt <= AG_F64; dt++) {
        /* per-batch transposes: (3,5,4) stored, used as (3,4,5) */
        ag_tensor *a = ag_transpose(rnd(&r, dt, AG_SHAPE(3, 5, 4)), 1, 2);
        ag_tensor *b = ag_transpose(rnd(&r, dt, AG_SHAPE(3, 6, 5)), -1, -2);
        ag_tensor *c = ag_matmul(a, b);
        tu_assert_shape(c, 3, 4, 6);
        assert_matches_naive(c, a, b);
        /* attention's head split: (T=4, H=2, D=3) permuted to (H, T, D), and K^T (H, D, T) */
        ag_tensor *q = ag_permute(rnd(&r, dt, AG_SHAPE(4, 2, 3)), (int[]){1, 0, 2});
        ag_tensor *kt = ag_permute(rnd(&r, dt, AG_SHAPE(4, 2, 3)), (int[]){1, 2, 0});
        ag_tensor *sc = ag_matmul(q, kt);
        tu_assert_shape(sc, 2, 4, 4);
        assert_matches_naive(sc, q, kt);
    }
}

/* ---- 1-d and batched shapes ---- */

static void test_one_d_and_batched_shapes_match_the_witness(void **s) {
    ag_rng r = ag_rng_new(13);
    struct { int na; int64_t a[4]; int nb; int64_t b[4]; int nc; int64_t c[4]; } cases[] = {
        {1, {4}, 1, {4}, 0, {0}},
        {1, {4}, 2, {4, 3}, 1, {3}},
        {2, {2, 4}, 1, {4}, 1, {2}},
        {1, {4}, 3, {2, 4, 3}, 2, {2, 3}},
        {3, {2, 5, 4}, 1, {4}, 2, {2, 5}},
        {2, {3, 4}, 3, {2, 4, 5}, 3, {2, 3, 5}},
        {3, {2, 3, 4}, 2, {4, 5}, 3, {2, 3, 5}},
        {4, {2, 1, 3, 4}, 3, {5, 4, 6}, 4, {2, 5, 3, 6}},
        {4, {2, 3, 1, 4}, 3, {1, 4, 2}, 4, {2, 3, 1, 2}},
        {3, {1, 3, 4}, 4, {2, 2, 4, 1}, 4, {2, 2, 3, 1}},
    };
    for (int dt = AG_F32; dt <= AG_F64; dt++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ag_tensor *a = rnd(&r, dt, cases[i].na, cases[i].a), *b = rnd(&r, dt, cases[i].nb, cases[i].b);
            ag_tensor *c = ag_matmul(a, b);
            tu_assert_shape_(__FILE__, __LINE__, c, cases[i].nc, cases[i].c);
            assert_matches_naive(c, a, b);
        }
}

static void test_many_small_batches_match_the_witness(void **s) {
    /* 128 batches of 8x8x8: above the threshold where batches are spread over threads */
    ag_rng r = ag_rng_new(14);
    ag_tensor *a = rnd(&r, AG_F64, AG_SHAPE(128, 8, 8)), *b = rnd(&r, AG_F64, AG_SHAPE(128, 8, 8));
    ag_tensor *c = ag_matmul(a, b);
    double *ref = ag_arena_alloc(ag_arena_current(), sizeof(double) * 128 * 64);
    int64_t n = naive_matmul(a, b, ref);
    tu_assert_values_(__FILE__, __LINE__, c, ref, n, 1e-12);
}

static void test_batched_result_does_not_depend_on_the_thread_count(void **s) {
    ag_rng r = ag_rng_new(17);
    ag_tensor *a = rnd(&r, AG_F32, AG_SHAPE(256, 8, 16)), *b = rnd(&r, AG_F32, AG_SHAPE(256, 16, 8));
    int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    ag_tensor *c1 = ag_matmul(a, b);
    omp_set_num_threads(2);
    ag_tensor *c2 = ag_matmul(a, b);
    omp_set_num_threads(prev);
    assert_int_equal(memcmp(c1->data, c2->data, 256 * 8 * 8 * sizeof(float)), 0);
}

static void test_large_products_do_not_depend_on_the_thread_count_even_if_blas_was_threaded(void **s) {
    /* big enough to be cut into blocks over the threads (tensor/gemm.c), in both dtypes; the
     * program has asked OpenBLAS for 2 threads, which attograd must undo: a threaded OpenBLAS
     * inside its blocks gave results that changed with the thread count */
    ag_rng r = ag_rng_new(18);
    int prev = omp_get_max_threads();
    for (int dt = AG_F32; dt <= AG_F64; dt++) {
        ag_tensor *a = rnd(&r, dt, AG_SHAPE(300, 200)), *b = rnd(&r, dt, AG_SHAPE(200, 400));
        openblas_set_num_threads(2);
        omp_set_num_threads(1);
        ag_tensor *c1 = ag_matmul(a, b);
        assert_int_equal(openblas_get_num_threads(), 1);
        openblas_set_num_threads(2);
        omp_set_num_threads(2);
        ag_tensor *c2 = ag_matmul(a, b);
        assert_int_equal(openblas_get_num_threads(), 1);
        assert_int_equal(memcmp(c1->data, c2->data, 300 * 400 * ag_dtype_size(dt)), 0);
        double *ref = ag_arena_alloc(ag_arena_current(), sizeof(double) * 300 * 400);
        int64_t n = naive_matmul(a, b, ref);
        tu_assert_values_(__FILE__, __LINE__, c2, ref, n, dt == AG_F32 ? 1e-4 : 1e-12);
    }
    omp_set_num_threads(prev);
}

static void test_empty_inner_dim_gives_zeros_and_empty_outer_dims_give_empty(void **s) {
    ag_tensor *c = ag_matmul(ag_ones(AG_F32, AG_SHAPE(2, 0)), ag_ones(AG_F32, AG_SHAPE(0, 3)));
    tu_assert_shape(c, 2, 3);
    tu_assert_values(c, 0, 0, 0, 0, 0, 0, 0);
    ag_tensor *e = ag_matmul(ag_ones(AG_F64, AG_SHAPE(0, 3)), ag_ones(AG_F64, AG_SHAPE(3, 2)));
    tu_assert_shape(e, 0, 2);
    ag_tensor *z = ag_matmul(ag_ones(AG_F64, AG_SHAPE(0, 2, 3)), ag_ones(AG_F64, AG_SHAPE(3, 2)));
    tu_assert_shape(z, 0, 2, 2);
}

/* ---- copies: only where BLAS cannot read the layout ---- */

static void test_layouts_blas_cannot_read_are_copied_and_still_right(void **s) {
    ag_rng r = ag_rng_new(15);
    for (int dt = AG_F32; dt <= AG_F64; dt++) {
        /* every other column: inner stride 2 */
        ag_tensor *a = ag_slice(rnd(&r, dt, AG_SHAPE(3, 8)), 1, 0, 8, 2);
        ag_tensor *b = ag_slice(rnd(&r, dt, AG_SHAPE(8, 5)), 0, 1, 8, 2);
        assert_int_equal(a->stride[1], 2);
        ag_tensor *c = ag_matmul(a, b);
        tu_assert_shape(c, 3, 5);
        assert_matches_naive(c, a, b);
        /* stride-0 inner dims: a column expanded across, a row expanded down */
        ag_tensor *col = ag_expand(rnd(&r, dt, AG_SHAPE(3, 1)), AG_SHAPE(3, 4));
        ag_tensor *row = ag_expand(rnd(&r, dt, AG_SHAPE(1, 5)), AG_SHAPE(4, 5));
        ag_tensor *d = ag_matmul(col, row);
        assert_matches_naive(d, col, row);
        /* batches whose rows do not follow on from each other (rows 0..2 of 6) against a shared
         * weight, and a shared left operand against sliced batches */
        ag_tensor *xs = ag_narrow(rnd(&r, dt, AG_SHAPE(2, 6, 4)), 1, 0, 3), *w = rnd(&r, dt, AG_SHAPE(4, 5));
        ag_tensor *xw = ag_matmul(xs, w);
        tu_assert_shape(xw, 2, 3, 5);
        assert_matches_naive(xw, xs, w);
        ag_tensor *ws = ag_narrow(rnd(&r, dt, AG_SHAPE(3, 4, 7)), 2, 1, 5);
        ag_tensor *vs = ag_narrow(ag_transpose(w, 0, 1), 0, 1, 3);
        ag_tensor *vw = ag_matmul(vs, ws);
        assert_matches_naive(vw, vs, ws);
        /* an expanded batch dim needs no copy and is still right */
        ag_tensor *eb = ag_expand(rnd(&r, dt, AG_SHAPE(1, 3, 4)), AG_SHAPE(5, 3, 4));
        ag_tensor *fb = rnd(&r, dt, AG_SHAPE(5, 4, 2)), *f = ag_matmul(eb, fb);
        tu_assert_shape(f, 5, 3, 2);
        assert_matches_naive(f, eb, fb);
    }
}

/* arena bytes taken by one matmul */
static size_t bytes_used_by(ag_tensor *a, ag_tensor *b) {
    size_t before = ag_arena_used(ag_arena_current());
    ag_tensor *c = ag_matmul(a, b);
    assert_non_null(c);
    return ag_arena_used(ag_arena_current()) - before;
}

static void test_transposed_operands_are_not_copied(void **s) {
    ag_rng r = ag_rng_new(16);
    /* a 512x256 f32 operand is 512 KiB; the (256,2) result and headers are a few KiB */
    ag_tensor *at = ag_transpose(rnd(&r, AG_F32, AG_SHAPE(512, 256)), 0, 1);
    ag_tensor *b = rnd(&r, AG_F32, AG_SHAPE(512, 2));
    assert_true(bytes_used_by(at, b) < 16384);
    ag_tensor *bt = ag_transpose(rnd(&r, AG_F32, AG_SHAPE(2, 256)), 0, 1);
    assert_true(bytes_used_by(ag_transpose(at, 0, 1), bt) < 16384);
    /* head-permuted batched operands are not copied either */
    ag_tensor *q = ag_permute(rnd(&r, AG_F32, AG_SHAPE(256, 4, 64)), (int[]){1, 0, 2});
    ag_tensor *kt = ag_permute(rnd(&r, AG_F32, AG_SHAPE(256, 4, 64)), (int[]){1, 2, 0});
    size_t scores = 4 * 256 * 256 * sizeof(float);
    assert_true(bytes_used_by(q, kt) < scores + 16384);
    /* the measurement does see a copy: a strided operand costs its full size */
    ag_tensor *strided = ag_slice(rnd(&r, AG_F32, AG_SHAPE(256, 1024)), 1, 0, 1024, 2);
    assert_true(bytes_used_by(strided, b) >= 512 * 256 * sizeof(float));
}

/* ---- errors ---- */

static void test_matmul_errors_name_the_shapes(void **s) {
    ag_tensor *a = ag_zeros(AG_F32, AG_SHAPE(2, 3)), *b = ag_zeros(AG_F32, AG_SHAPE(4, 5));
    assert_null(ag_matmul(a, b));
    tu_assert_error("ag_matmul: (2,3) @ (4,5): inner dims 3 and 4 differ");
    assert_null(ag_matmul(ag_zeros(AG_F32, AG_SHAPE(3)), ag_zeros(AG_F32, AG_SHAPE(4))));
    tu_assert_error("ag_matmul: (3) @ (4): inner dims 3 and 4 differ");
    assert_null(ag_matmul(ag_zeros(AG_F32, AG_SHAPE(2, 3)), ag_zeros(AG_F32, AG_SHAPE(2))));
    tu_assert_error("ag_matmul: (2,3) @ (2): inner dims 3 and 2 differ");
    assert_null(ag_matmul(ag_scalar(AG_F32, 2), b));
    tu_assert_error("ag_matmul: () @ (4,5)", "at least 1 dim");
    assert_null(ag_matmul(a, ag_zeros(AG_F64, AG_SHAPE(3, 5))));
    tu_assert_error("ag_matmul: (2,3) f32 @ (3,5) f64", "dtypes differ");
    assert_null(ag_matmul(ag_zeros(AG_I64, AG_SHAPE(2, 3)), ag_zeros(AG_I64, AG_SHAPE(3, 5))));
    tu_assert_error("ag_matmul: (2,3) @ (3,5)", "i64", "not supported");
    assert_null(ag_matmul(ag_zeros(AG_F32, AG_SHAPE(2, 3, 4)), ag_zeros(AG_F32, AG_SHAPE(5, 4, 6))));
    tu_assert_error("ag_matmul: (2,3,4) @ (5,4,6): batch dims (2) and (5) cannot be broadcast");
    assert_null(ag_matmul(NULL, b));
    tu_assert_error("ag_matmul", "NULL");
}

/* ---- gradients ---- */

static void test_gradients_hand_worked_and_accumulated(void **s) {
    /* C = A B, L = sum(C): dA = 1 Bᵀ (row sums of B in every row), dB = Aᵀ 1 (column sums of A) */
    ag_tensor *a = tensor_of(AG_F64, (2, 3), 1, 2, 3, 4, 5, 6);
    ag_tensor *b = tensor_of(AG_F64, (3, 2), 7, 8, 9, 10, 11, 12);
    ag_requires_grad_(a, true);
    ag_requires_grad_(b, true);
    ag_backward(ag_sum(ag_matmul(a, b), 0, NULL, false), NULL);
    tu_assert_values(a->grad, 0, 15, 19, 23, 15, 19, 23);
    tu_assert_values(b->grad, 0, 5, 5, 7, 7, 9, 9);
    /* a second pass adds onto the leaves' gradients */
    ag_backward(ag_sum(ag_matmul(a, b), 0, NULL, false), NULL);
    tu_assert_values(a->grad, 0, 30, 38, 46, 30, 38, 46);
    tu_assert_values(b->grad, 0, 10, 10, 14, 14, 18, 18);
}

static void test_broadcast_weight_gradient_sums_over_the_batch(void **s) {
    /* x (2,1,2) @ w (2,1): dw = Σ_b x[b]ᵀ · 1 = column sums of all rows of x */
    ag_tensor *x = tensor_of(AG_F32, (2, 1, 2), 1, 2, 3, 4);
    ag_tensor *w = tensor_of(AG_F32, (2, 1), 5, 6);
    ag_requires_grad_(w, true);
    ag_backward(ag_sum(ag_matmul(x, w), 0, NULL, false), NULL);
    tu_assert_values(w->grad, 0, 4, 6);
    assert_null(x->grad);
}

typedef struct { int ta, tb; } tr_ctx;

static ag_tensor *f_matmul(int n, ag_tensor **in, void *ctx) { return ag_matmul(in[0], in[1]); }

/* inputs[i] transposed back in f, so the leaf's layout is the transpose the op sees */
static ag_tensor *f_matmul_transposed(int n, ag_tensor **in, void *ctx) {
    const tr_ctx *c = ctx;
    ag_tensor *a = c->ta ? ag_transpose(in[0], -1, -2) : in[0];
    ag_tensor *b = c->tb ? ag_transpose(in[1], -1, -2) : in[1];
    return ag_matmul(a, b);
}

static ag_tensor *leaf(ag_rng *r, int ndim, const int64_t *shape) {
    ag_tensor *t = ag_uniform(r, AG_F64, ndim, shape, -1, 1);
    ag_requires_grad_(t, true);
    return t;
}

static void assert_gradcheck(ag_fn f, void *ctx, int n, ag_tensor **in) {
    ag_gradcheck_result res = ag_gradcheck(f, ctx, n, in, NULL);
    if (!res.ok) fail_msg("%s", res.message);
}

static void test_matmul_gradcheck_every_transpose_combination(void **s) {
    ag_rng r = ag_rng_new(21);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            tr_ctx c = {ta, tb};
            ag_tensor *in[2] = {ta ? leaf(&r, AG_SHAPE(4, 3)) : leaf(&r, AG_SHAPE(3, 4)),
                                tb ? leaf(&r, AG_SHAPE(2, 4)) : leaf(&r, AG_SHAPE(4, 2))};
            assert_gradcheck(f_matmul_transposed, &c, 2, in);
            /* batched, with per-batch transposes */
            ag_tensor *bin[2] = {ta ? leaf(&r, AG_SHAPE(2, 4, 3)) : leaf(&r, AG_SHAPE(2, 3, 4)),
                                 tb ? leaf(&r, AG_SHAPE(2, 2, 4)) : leaf(&r, AG_SHAPE(2, 4, 2))};
            assert_gradcheck(f_matmul_transposed, &c, 2, bin);
        }
}

static void test_matmul_gradcheck_strided_leaves(void **s) {
    /* leaves whose own layout is transposed or strided (gradient buffers are contiguous) */
    ag_rng r = ag_rng_new(22);
    ag_tensor *at = ag_detach(ag_transpose(ag_uniform(&r, AG_F64, AG_SHAPE(4, 3), -1, 1), 0, 1));
    ag_tensor *bs = ag_detach(ag_slice(ag_uniform(&r, AG_F64, AG_SHAPE(4, 6), -1, 1), 1, 0, 6, 3));
    ag_requires_grad_(at, true);
    ag_requires_grad_(bs, true);
    assert_gradcheck(f_matmul, NULL, 2, (ag_tensor *[]){at, bs});
}

static void test_matmul_gradcheck_one_d_and_batch_broadcast(void **s) {
    ag_rng r = ag_rng_new(23);
    struct { int na; int64_t a[4]; int nb; int64_t b[4]; } cases[] = {
        {1, {4}, 1, {4}},             {1, {4}, 2, {4, 3}},       {2, {2, 4}, 1, {4}},
        {1, {3}, 3, {2, 3, 2}},       {3, {2, 2, 3}, 1, {3}},    {2, {3, 4}, 3, {2, 4, 2}},
        {3, {2, 3, 4}, 2, {4, 2}},    {4, {2, 1, 3, 4}, 3, {3, 4, 2}}, {3, {1, 2, 3}, 4, {2, 2, 3, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ag_tensor *in[2] = {leaf(&r, cases[i].na, cases[i].a), leaf(&r, cases[i].nb, cases[i].b)};
        assert_gradcheck(f_matmul, NULL, 2, in);
    }
    /* the weight shared over a batch whose rows cannot be merged (transposed per batch) */
    tr_ctx c = {1, 0};
    ag_tensor *xt = leaf(&r, AG_SHAPE(2, 4, 3)), *wt = leaf(&r, AG_SHAPE(4, 2));
    assert_gradcheck(f_matmul_transposed, &c, 2, (ag_tensor *[]){xt, wt});
    /* a shared weight against batches whose rows do not follow on from each other */
    ag_tensor *xs = ag_detach(ag_narrow(ag_uniform(&r, AG_F64, AG_SHAPE(2, 6, 4), -1, 1), 1, 1, 3));
    ag_requires_grad_(xs, true);
    assert_gradcheck(f_matmul, NULL, 2, (ag_tensor *[]){xs, leaf(&r, AG_SHAPE(4, 2))});
    /* an expanded batch operand */
    ag_tensor *e = leaf(&r, AG_SHAPE(1, 3, 4));
    ag_tensor *w = leaf(&r, AG_SHAPE(2, 4, 2));
    assert_gradcheck(f_matmul, NULL, 2, (ag_tensor *[]){e, w});
}

/* ag_gemm_flops grows by 2·m·n·k a product: once in forward, and twice in backward (dA and
 * dB), whatever the batch folding; an empty inner dim multiplies nothing */
static void test_gemm_flops_count_every_product(void **state) {
    (void)state;
    ag_rng rng = ag_rng_new(9);
    for (int d = 0; d < 2; d++) {
        ag_dtype dt = d ? AG_F64 : AG_F32;
        ag_tensor *a = ag_randn(&rng, dt, AG_SHAPE(2, 3, 4)), *b = ag_randn(&rng, dt, AG_SHAPE(4, 5));
        ag_requires_grad_(a, true);
        ag_requires_grad_(b, true);
        uint64_t f0 = ag_gemm_flops();
        ag_tensor *y = ag_matmul(a, b);
        assert_int_equal(ag_gemm_flops() - f0, 2 * 6 * 5 * 4);
        ag_backward(ag_sum(y, 0, NULL, false), NULL);
        assert_int_equal(ag_gemm_flops() - f0, 3 * (2 * 6 * 5 * 4));
    }
    uint64_t f0 = ag_gemm_flops();
    ag_matmul(ag_zeros(AG_F32, AG_SHAPE(3, 0)), ag_zeros(AG_F32, AG_SHAPE(0, 5)));
    assert_int_equal(ag_gemm_flops() - f0, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_matmul_2x2_hand_worked, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_dot_of_two_vectors_is_0d, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_vector_matrix_and_matrix_vector_drop_the_inserted_dim, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_batch_broadcast_matches_pytorch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_all_transpose_combinations_f32, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_all_transpose_combinations_f64, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_batched_transposed_and_head_permuted_operands, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_one_d_and_batched_shapes_match_the_witness, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_many_small_batches_match_the_witness, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_batched_result_does_not_depend_on_the_thread_count, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_large_products_do_not_depend_on_the_thread_count_even_if_blas_was_threaded,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_empty_inner_dim_gives_zeros_and_empty_outer_dims_give_empty, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_layouts_blas_cannot_read_are_copied_and_still_right, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_transposed_operands_are_not_copied, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_matmul_errors_name_the_shapes, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gemm_flops_count_every_product, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gradients_hand_worked_and_accumulated, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_weight_gradient_sums_over_the_batch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_matmul_gradcheck_every_transpose_combination, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_matmul_gradcheck_strided_leaves, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_matmul_gradcheck_one_d_and_batch_broadcast, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
