/* Joining, splitting and indexing: cat, stack, split, chunk, index_select, gather, the
 * embedding's row gather (ag_embedding without padding_idx), one_hot. Expected values are
 * hand-worked (the gather cases are torch's documented example and were checked against PyTorch
 * 1.13); gradients by hand for repeated indices and by finite differences (ag_gradcheck)
 * otherwise. */
#include <omp.h>
#include <string.h>

#include "test_util.h"

#define tensor_of(dt, dims, ...)                                                                   \
    tu_tensor_((dt), AG_SHAPE dims, (const double[]){__VA_ARGS__},                                 \
               (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))

/* (3,2): [[1,2],[3,4],[5,6]] */
static ag_tensor *t32(ag_dtype dt) { return tensor_of(dt, (3, 2), 1, 2, 3, 4, 5, 6); }

/* L = Σ y ⊙ w, so dL/dy = w */
static void backward_with(ag_tensor *y, ag_tensor *w) { ag_backward(ag_sum(ag_mul(y, w), 0, NULL, false), NULL); }

static void assert_gradcheck(ag_fn f, void *ctx, int n, ag_tensor **in) {
    ag_gradcheck_result res = ag_gradcheck(f, ctx, n, in, NULL);
    if (!res.ok) fail_msg("%s", res.message);
}

static ag_tensor *leaf(ag_rng *r, int ndim, const int64_t *shape) {
    ag_tensor *t = ag_uniform(r, AG_F64, ndim, shape, -1, 1);
    ag_requires_grad_(t, true);
    return t;
}

/* ---- cat ---- */

static void test_cat_joins_along_dim_including_negative_and_strided_inputs(void **s) {
    ag_tensor *a = tensor_of(AG_F32, (2, 2), 1, 2, 3, 4), *b = tensor_of(AG_F32, (2, 1), 5, 6);
    ag_tensor *c = ag_cat(2, (ag_tensor *[]){a, b}, 1);
    tu_assert_shape(c, 2, 3);
    tu_assert_values(c, 0, 1, 2, 5, 3, 4, 6);
    tu_assert_values(ag_cat(2, (ag_tensor *[]){a, b}, -1), 0, 1, 2, 5, 3, 4, 6);
    ag_tensor *d = ag_cat(3, (ag_tensor *[]){a, tensor_of(AG_F32, (1, 2), 7, 8), a}, 0);
    tu_assert_shape(d, 5, 2);
    tu_assert_values(d, 0, 1, 2, 3, 4, 7, 8, 1, 2, 3, 4);
    /* transposed [[1,3],[2,4]] and an expanded column of 9s */
    ag_tensor *e = ag_expand(tensor_of(AG_F32, (1, 1), 9), AG_SHAPE(2, 1));
    ag_tensor *f = ag_cat(3, (ag_tensor *[]){ag_transpose(a, 0, 1), b, e}, 1);
    tu_assert_values(f, 0, 1, 3, 5, 9, 2, 4, 6, 9);
    /* an empty piece contributes nothing */
    tu_assert_values(ag_cat(2, (ag_tensor *[]){b, ag_zeros(AG_F32, AG_SHAPE(2, 0))}, 1), 0, 5, 6);
}

static void test_cat_and_stack_of_ids_and_masks_copy_without_a_node(void **s) {
    ag_tensor *ids = ag_cat(2, (ag_tensor *[]){tensor_of(AG_I64, (2), 7, 8), tensor_of(AG_I64, (1), -3)}, 0);
    assert_int_equal(ids->dtype, AG_I64);
    assert_null(ids->node);
    tu_assert_values(ids, 0, 7, 8, -3);
    ag_tensor *m = ag_stack(2, (ag_tensor *[]){tensor_of(AG_BOOL, (3), 1, 0, 1), tensor_of(AG_BOOL, (3), 0, 0, 1)}, 1);
    assert_int_equal(m->dtype, AG_BOOL);
    tu_assert_shape(m, 3, 2);
    tu_assert_values(m, 0, 1, 0, 0, 0, 1, 1);
    ag_tensor *i32 = ag_cat(2, (ag_tensor *[]){tensor_of(AG_I32, (1, 2), 1, 2), tensor_of(AG_I32, (1, 2), 3, 4)}, -2);
    tu_assert_values(i32, 0, 1, 2, 3, 4);
}

static void test_cat_errors_name_the_tensor_and_shapes(void **s) {
    ag_tensor *a = ag_zeros(AG_F32, AG_SHAPE(2, 2));
    assert_null(ag_cat(2, (ag_tensor *[]){a, ag_zeros(AG_F64, AG_SHAPE(2, 1))}, 1));
    tu_assert_error("ag_cat", "tensor 1 (2,1) is f64", "(2,2) is f32");
    assert_null(ag_cat(2, (ag_tensor *[]){a, ag_zeros(AG_F32, AG_SHAPE(3, 1))}, 1));
    tu_assert_error("ag_cat", "tensor 1 (3,1)", "tensor 0 (2,2)", "except in dim 1");
    assert_null(ag_cat(2, (ag_tensor *[]){a, ag_zeros(AG_F32, AG_SHAPE(2))}, 0));
    tu_assert_error("ag_cat", "tensor 1 (2)");
    assert_null(ag_cat(2, (ag_tensor *[]){a, a}, 2));
    tu_assert_error("ag_cat", "dim 2", "(2,2)");
    assert_null(ag_cat(0, NULL, 0));
    tu_assert_error("ag_cat", "0 tensors");
    assert_null(ag_cat(1, (ag_tensor *[]){ag_scalar(AG_F32, 1)}, 0));
    tu_assert_error("ag_cat", "0-d");
    assert_null(ag_cat(2, (ag_tensor *[]){a, NULL}, 0));
    tu_assert_error("ag_cat", "NULL");
}

static void test_cat_gradient_is_the_matching_slice(void **s) {
    ag_tensor *a = tensor_of(AG_F64, (2, 2), 1, 2, 3, 4), *b = tensor_of(AG_F64, (2, 1), 5, 6);
    ag_requires_grad_(a, true);
    ag_requires_grad_(b, true);
    backward_with(ag_cat(2, (ag_tensor *[]){a, b}, 1), tensor_of(AG_F64, (2, 3), 1, 2, 3, 4, 5, 6));
    tu_assert_values(a->grad, 0, 1, 2, 4, 5);
    tu_assert_values(b->grad, 0, 3, 6);
}

/* ---- stack ---- */

static void test_stack_inserts_the_new_dim(void **s) {
    ag_tensor *x = tensor_of(AG_F32, (2), 1, 2), *y = tensor_of(AG_F32, (2), 3, 4), *z = tensor_of(AG_F32, (2), 5, 6);
    ag_tensor *xyz[3] = {x, y, z};
    ag_tensor *s0 = ag_stack(3, xyz, 0);
    tu_assert_shape(s0, 3, 2);
    tu_assert_values(s0, 0, 1, 2, 3, 4, 5, 6);
    ag_tensor *s1 = ag_stack(3, xyz, 1);
    tu_assert_shape(s1, 2, 3);
    tu_assert_values(s1, 0, 1, 3, 5, 2, 4, 6);
    tu_assert_values(ag_stack(3, xyz, -1), 0, 1, 3, 5, 2, 4, 6);
    /* a transposed 2x2 and the original stacked in the middle: out[i][k] = m_k[i] */
    ag_tensor *m = tensor_of(AG_F32, (2, 2), 1, 2, 3, 4);
    ag_tensor *st = ag_stack(2, (ag_tensor *[]){ag_transpose(m, 0, 1), m}, 1);
    tu_assert_shape(st, 2, 2, 2);
    tu_assert_values(st, 0, 1, 3, 1, 2, 2, 4, 3, 4);
}

static void test_stack_errors(void **s) {
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2));
    assert_null(ag_stack(2, (ag_tensor *[]){x, ag_zeros(AG_F32, AG_SHAPE(3))}, 0));
    tu_assert_error("ag_stack", "tensor 1 (3)", "tensor 0 (2)", "equal");
    assert_null(ag_stack(1, &x, 2));
    tu_assert_error("ag_stack", "dim 2", "-2..1");
    assert_null(ag_stack(2, (ag_tensor *[]){x, ag_zeros(AG_F64, AG_SHAPE(2))}, 0));
    tu_assert_error("ag_stack", "tensor 1 (2) is f64", "tensor 0 (2) is f32");
}

/* ---- split / chunk ---- */

static void test_split_gives_views_with_a_smaller_last_piece(void **s) {
    ag_tensor *t = ag_view(ag_arange(AG_F32, 0, 10, 1), AG_SHAPE(5, 2));
    ag_tensor *p[4] = {NULL, NULL, NULL, NULL};
    assert_int_equal(ag_split(t, 2, 0, p, 4), 3);
    tu_assert_shape(p[0], 2, 2);
    tu_assert_shape(p[1], 2, 2);
    tu_assert_shape(p[2], 1, 2);
    assert_null(p[3]);
    tu_assert_values(p[1], 0, 4, 5, 6, 7);
    tu_assert_values(p[2], 0, 8, 9);
    assert_ptr_equal(p[2]->data, t->data);
    assert_int_equal(p[2]->offset, 8);
    /* along the last dim of a transposed view: columns of (2,5) */
    ag_tensor *tt = ag_transpose(t, 0, 1);
    assert_int_equal(ag_split(tt, 3, -1, p, 4), 2);
    tu_assert_values(p[0], 0, 0, 2, 4, 1, 3, 5);
    tu_assert_values(p[1], 0, 6, 8, 7, 9);
    /* room for fewer pieces than there are: the first ones, and the full count */
    ag_tensor *q[2] = {NULL, NULL}, *sentinel = ag_scalar(AG_F32, 0);
    ag_tensor *r[3] = {NULL, NULL, sentinel};
    assert_int_equal(ag_split(t, 1, 0, q, 2), 5);
    tu_assert_values(q[1], 0, 2, 3);
    assert_int_equal(ag_split(t, 2, 0, r, 2), 3);
    assert_ptr_equal(r[2], sentinel);
    assert_int_equal(ag_split(t, 2, 0, NULL, 0), 3);
}

static void test_chunk_follows_torch_and_may_return_fewer_pieces(void **s) {
    ag_tensor *p[6];
    ag_tensor *five = ag_arange(AG_F64, 0, 5, 1);
    assert_int_equal(ag_chunk(five, 3, 0, p, 6), 3);
    tu_assert_values(p[0], 0, 0, 1);
    tu_assert_values(p[1], 0, 2, 3);
    tu_assert_values(p[2], 0, 4);
    /* 6 in 4 chunks: chunk size 2, so only 3 pieces */
    ag_tensor *six = ag_view(ag_arange(AG_F64, 0, 12, 1), AG_SHAPE(2, 6));
    assert_int_equal(ag_chunk(six, 4, -1, p, 6), 3);
    tu_assert_values(p[2], 0, 4, 5, 10, 11);
    /* an empty dim gives chunks empty pieces, as torch.chunk does */
    assert_int_equal(ag_chunk(ag_zeros(AG_F32, AG_SHAPE(0, 2)), 3, 0, p, 6), 3);
    tu_assert_shape(p[2], 0, 2);
}

static void test_split_and_chunk_errors(void **s) {
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(5, 2)), *p[4];
    assert_int_equal(ag_split(t, 0, 0, p, 4), -1);
    tu_assert_error("ag_split", "split_size 0", "(5,2)");
    assert_int_equal(ag_split(t, 2, 2, p, 4), -1);
    tu_assert_error("ag_split", "dim 2");
    assert_int_equal(ag_chunk(t, 0, 0, p, 4), -1);
    tu_assert_error("ag_chunk", "chunks 0");
    assert_int_equal(ag_chunk(NULL, 2, 0, p, 4), -1);
    tu_assert_error("ag_chunk", "NULL");
}

/* ---- index_select ---- */

static void test_index_select_rows_and_columns(void **s) {
    ag_tensor *t = t32(AG_F32);
    ag_tensor *r = ag_index_select(t, 0, tensor_of(AG_I64, (3), 2, 0, 2));
    tu_assert_shape(r, 3, 2);
    tu_assert_values(r, 0, 5, 6, 1, 2, 5, 6);
    ag_tensor *c = ag_index_select(t, -1, tensor_of(AG_I32, (3), 1, 1, 0));
    tu_assert_shape(c, 3, 3);
    tu_assert_values(c, 0, 2, 2, 1, 4, 4, 3, 6, 6, 5);
    /* a 0-d index selects one slice and keeps the dim */
    ag_tensor *one = ag_index_select(t, 0, ag_scalar(AG_I64, 1));
    tu_assert_shape(one, 1, 2);
    tu_assert_values(one, 0, 3, 4);
    /* an empty index */
    tu_assert_shape(ag_index_select(t, 0, ag_zeros(AG_I64, AG_SHAPE(0))), 0, 2);
}

static void test_index_select_strided_input_and_index(void **s) {
    /* tᵀ = [[1,3,5],[2,4,6]] */
    ag_tensor *tt = ag_transpose(t32(AG_F64), 0, 1);
    tu_assert_values(ag_index_select(tt, 1, tensor_of(AG_I64, (2), 2, 0)), 0, 5, 1, 6, 2);
    /* every other element of [2,9,0,9,1] */
    ag_tensor *idx = ag_slice(tensor_of(AG_I64, (5), 2, 9, 0, 9, 1), 0, 0, 5, 2);
    tu_assert_values(ag_index_select(t32(AG_F64), 0, idx), 0, 5, 6, 1, 2, 3, 4);
    /* masks and ids are copied as they are */
    ag_tensor *mask = ag_index_select(tensor_of(AG_BOOL, (3), 1, 0, 1), 0, tensor_of(AG_I32, (3), 2, 2, 1));
    assert_int_equal(mask->dtype, AG_BOOL);
    tu_assert_values(mask, 0, 1, 1, 0);
    ag_tensor *ids = ag_index_select(tensor_of(AG_I64, (2, 2), 10, 11, 12, 13), 1, tensor_of(AG_I64, (1), 1));
    tu_assert_values(ids, 0, 11, 13);
}

static void test_index_select_gradient_sums_repeated_indices(void **s) {
    ag_tensor *t = t32(AG_F64);
    ag_requires_grad_(t, true);
    ag_tensor *y = ag_index_select(t, 0, tensor_of(AG_I64, (3), 2, 0, 2));
    backward_with(y, tensor_of(AG_F64, (3, 2), 1, 2, 3, 4, 5, 6));
    /* row 0 gets w row 1; row 1 nothing; row 2 w rows 0 and 2 */
    tu_assert_values(t->grad, 0, 3, 4, 0, 0, 6, 8);
    /* along dim 1 of a (2,3) view */
    ag_tensor *u = tensor_of(AG_F64, (2, 3), 1, 2, 3, 4, 5, 6);
    ag_requires_grad_(u, true);
    backward_with(ag_index_select(u, 1, tensor_of(AG_I32, (4), 0, 0, 2, 0)),
                  tensor_of(AG_F64, (2, 4), 1, 2, 3, 4, 5, 6, 7, 8));
    tu_assert_values(u->grad, 0, 7, 0, 3, 19, 0, 7);
}

static void test_index_select_errors_name_value_and_size(void **s) {
    ag_tensor *t = t32(AG_F32);
    assert_null(ag_index_select(t, 0, tensor_of(AG_I64, (2), 0, 3)));
    tu_assert_error("ag_index_select", "index 3", "dim 0", "(3,2)", "size 3");
    assert_null(ag_index_select(t, 1, tensor_of(AG_I32, (1), -1)));
    tu_assert_error("ag_index_select", "index -1", "size 2");
    assert_null(ag_index_select(t, 0, tensor_of(AG_F32, (1), 0)));
    tu_assert_error("ag_index_select", "f32", "i32 or i64");
    assert_null(ag_index_select(t, 0, ag_zeros(AG_I64, AG_SHAPE(1, 1))));
    tu_assert_error("ag_index_select", "(1,1)", "1-d");
    assert_null(ag_index_select(t, 2, tensor_of(AG_I64, (1), 0)));
    tu_assert_error("ag_index_select", "dim 2");
}

/* ---- gather ---- */

static void test_gather_picks_along_dim(void **s) {
    /* torch.gather(torch.tensor([[1,2],[3,4]]), 1, torch.tensor([[0,0],[1,0]])) == [[1,1],[4,3]] */
    ag_tensor *t = tensor_of(AG_F32, (2, 2), 1, 2, 3, 4);
    ag_tensor *g = ag_gather(t, 1, tensor_of(AG_I64, (2, 2), 0, 0, 1, 0));
    tu_assert_shape(g, 2, 2);
    tu_assert_values(g, 0, 1, 1, 4, 3);
    /* dim 0: out[i][j] = t[idx[i][j]][j] */
    tu_assert_values(ag_gather(t32(AG_F64), 0, tensor_of(AG_I32, (2, 2), 2, 0, 1, 2)), 0, 5, 2, 3, 6);
    /* an index smaller than the input off dim; t = [[0,1,2],[3,4,5],[6,7,8]] */
    ag_tensor *sq = ag_view(ag_arange(AG_F64, 0, 9, 1), AG_SHAPE(3, 3));
    ag_tensor *small = ag_gather(sq, -1, tensor_of(AG_I64, (2, 1), 2, 0));
    tu_assert_shape(small, 2, 1);
    tu_assert_values(small, 0, 2, 3);
    /* transposed input [[0,3,6],[1,4,7],[2,5,8]] and a transposed index [[1,0],[2,1]] */
    ag_tensor *idx = ag_transpose(tensor_of(AG_I64, (2, 2), 1, 2, 0, 1), 0, 1);
    tu_assert_values(ag_gather(ag_transpose(sq, 0, 1), 1, idx), 0, 3, 0, 7, 4);
    /* ids */
    tu_assert_values(ag_gather(tensor_of(AG_I64, (1, 3), 7, 8, 9), 1, tensor_of(AG_I64, (1, 2), 2, 2)), 0, 9, 9);
}

static void test_gather_gradient_sums_repeated_indices(void **s) {
    ag_tensor *t = tensor_of(AG_F64, (2, 2), 1, 2, 3, 4);
    ag_requires_grad_(t, true);
    backward_with(ag_gather(t, 1, tensor_of(AG_I64, (2, 2), 0, 0, 1, 0)), tensor_of(AG_F64, (2, 2), 1, 2, 3, 4));
    tu_assert_values(t->grad, 0, 3, 0, 4, 3);
}

static void test_gather_errors(void **s) {
    ag_tensor *t = tensor_of(AG_F32, (2, 2), 1, 2, 3, 4);
    assert_null(ag_gather(t, 1, tensor_of(AG_I64, (2, 2), 0, 2, 1, 0)));
    tu_assert_error("ag_gather", "index 2", "dim 1", "size 2");
    assert_null(ag_gather(t, 0, tensor_of(AG_I64, (2, 2), 0, 0, -1, 0)));
    tu_assert_error("ag_gather", "index -1", "size 2");
    assert_null(ag_gather(t, 1, tensor_of(AG_I64, (2), 0, 0)));
    tu_assert_error("ag_gather", "index (2)", "input (2,2)", "same ndim");
    assert_null(ag_gather(t, 1, ag_zeros(AG_I64, AG_SHAPE(3, 1))));
    tu_assert_error("ag_gather", "index (3,1)", "outside dim 1");
}

/* ---- embedding ---- */

/* rows [0,1,2],[3,4,5],[6,7,8],[9,10,11] */
static ag_tensor *table(ag_dtype dt) { return ag_view(ag_arange(dt, 0, 12, 1), AG_SHAPE(4, 3)); }

static void test_embedding_rows_for_ids_of_any_shape(void **s) {
    ag_tensor *e = ag_embedding(table(AG_F32), tensor_of(AG_I64, (2, 2), 1, 3, 1, 0), -1);
    tu_assert_shape(e, 2, 2, 3);
    tu_assert_values(e, 0, 3, 4, 5, 9, 10, 11, 3, 4, 5, 0, 1, 2);
    ag_tensor *v = ag_embedding(table(AG_F64), ag_scalar(AG_I32, 2), -1);
    tu_assert_shape(v, 3);
    tu_assert_values(v, 0, 6, 7, 8);
    /* a weight stored transposed, and transposed ids [[1,1],[3,0]] */
    ag_tensor *wt = ag_transpose(ag_contiguous(ag_transpose(table(AG_F64), 0, 1)), 0, 1);
    assert_false(ag_is_contiguous(wt));
    ag_tensor *ids = ag_transpose(tensor_of(AG_I32, (2, 2), 1, 3, 1, 0), 0, 1);
    tu_assert_values(ag_embedding(wt, ids, -1), 0, 3, 4, 5, 3, 4, 5, 9, 10, 11, 0, 1, 2);
}

static void test_embedding_gradient_accumulates_repeated_ids(void **s) {
    ag_tensor *w = table(AG_F64);
    ag_requires_grad_(w, true);
    ag_backward(ag_sum(ag_embedding(w, tensor_of(AG_I64, (2, 2), 1, 3, 1, 0), -1), 0, NULL, false), NULL);
    tu_assert_values(w->grad, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1);
}

static void test_embedding_gradient_with_many_repeats_is_exact_across_threads(void **s) {
    /* 1024 columns in 4 chunks, 96 ids: the scatter runs in parallel; f32 sums of small whole
     * numbers are exact, so any lost or doubled update shows */
    ag_tensor *w = ag_zeros(AG_F32, AG_SHAPE(8, 1024));
    ag_requires_grad_(w, true);
    int64_t idv[96];
    for (int i = 0; i < 96; i++) idv[i] = i % 3 == 0 ? 5 : i % 3 == 1 ? 2 : 5;
    ag_tensor *ids = ag_from_buffer(AG_I64, AG_SHAPE(96), idv);
    ag_tensor *g = ag_full(AG_F32, AG_SHAPE(96, 1024), 1.0);
    backward_with(ag_embedding(w, ids, -1), g);
    float *gw = (float *)w->grad->data;
    for (int64_t c = 0; c < 1024; c++) {
        assert_true(gw[5 * 1024 + c] == 64.0f);
        assert_true(gw[2 * 1024 + c] == 32.0f);
        assert_true(gw[0 * 1024 + c] == 0.0f);
    }
    /* the same through index_select along dim 0 */
    ag_tensor *t = ag_zeros(AG_F64, AG_SHAPE(8, 1024));
    ag_requires_grad_(t, true);
    backward_with(ag_index_select(t, 0, ids), ag_full(AG_F64, AG_SHAPE(96, 1024), 0.5));
    double *gt = (double *)t->grad->data;
    for (int64_t c = 0; c < 1024; c++) assert_true(gt[5 * 1024 + c] == 32.0 && gt[2 * 1024 + c] == 16.0);
}

/* embedding gradient of random upstream values, with the given number of threads */
static ag_tensor *embedding_grad(int threads, ag_tensor *ids, ag_tensor *g) {
    ag_tensor *w = ag_zeros(AG_F32, AG_SHAPE(8, 1024));
    ag_requires_grad_(w, true);
    int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    backward_with(ag_embedding(w, ids, -1), g);
    omp_set_num_threads(prev);
    return w->grad;
}

static void test_embedding_gradient_does_not_depend_on_the_thread_count(void **s) {
    ag_rng r = ag_rng_new(33);
    int64_t idv[96];
    for (int i = 0; i < 96; i++) idv[i] = (i * 5) % 3;
    ag_tensor *ids = ag_from_buffer(AG_I64, AG_SHAPE(96), idv);
    ag_tensor *g = ag_uniform(&r, AG_F32, AG_SHAPE(96, 1024), -1, 1);
    ag_tensor *g1 = embedding_grad(1, ids, g), *g2 = embedding_grad(2, ids, g);
    assert_int_equal(memcmp(g1->data, g2->data, 8 * 1024 * sizeof(float)), 0);
}

static void test_embedding_errors(void **s) {
    assert_null(ag_embedding(table(AG_F32), tensor_of(AG_I64, (3), 0, 4, 1), -1));
    tu_assert_error("ag_embedding", "id 4", "weight (4,3)", "size 4");
    assert_null(ag_embedding(table(AG_F32), tensor_of(AG_I32, (1), -2), -1));
    tu_assert_error("ag_embedding", "id -2");
    assert_null(ag_embedding(ag_zeros(AG_F32, AG_SHAPE(4)), tensor_of(AG_I64, (1), 0), -1));
    tu_assert_error("ag_embedding", "weight (4)", "expected weight (num, dim)");
    assert_null(ag_embedding(table(AG_F32), tensor_of(AG_F32, (1), 0), -1));
    tu_assert_error("ag_embedding", "ids (1)", "f32");
}

/* ---- one_hot ---- */

static void test_one_hot(void **s) {
    ag_tensor *h = ag_one_hot(tensor_of(AG_I64, (3), 0, 2, 1), 3);
    assert_int_equal(h->dtype, AG_I64);
    tu_assert_shape(h, 3, 3);
    tu_assert_values(h, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0);
    ag_tensor *h2 = ag_one_hot(tensor_of(AG_I32, (2, 1), 3, 0), 4);
    tu_assert_shape(h2, 2, 1, 4);
    tu_assert_values(h2, 0, 0, 0, 0, 1, 1, 0, 0, 0);
    /* -1 infers max + 1 classes; a strided index [1,3] */
    ag_tensor *h3 = ag_one_hot(ag_slice(tensor_of(AG_I64, (3), 1, 0, 3), 0, 0, 3, 2), -1);
    tu_assert_shape(h3, 2, 4);
    tu_assert_values(h3, 0, 0, 1, 0, 0, 0, 0, 0, 1);
    assert_null(ag_one_hot(tensor_of(AG_I64, (2), 0, 3), 3));
    tu_assert_error("ag_one_hot", "class 3", "size 3");
    assert_null(ag_one_hot(tensor_of(AG_I64, (2), -1, 0), 3));
    tu_assert_error("ag_one_hot", "class -1");
    assert_null(ag_one_hot(tensor_of(AG_F64, (1), 0), 3));
    tu_assert_error("ag_one_hot", "f64");
}

/* ---- gradcheck ---- */

static ag_tensor *f_cat(int n, ag_tensor **in, void *ctx) {
    return ag_cat(3, (ag_tensor *[]){ag_transpose(in[0], 0, 1), in[1], in[0]}, -1);
}
static ag_tensor *f_stack(int n, ag_tensor **in, void *ctx) {
    return ag_stack(3, (ag_tensor *[]){in[0], ag_transpose(in[1], 0, 1), in[0]}, 1);
}
/* pieces reassembled in another order, one of them scaled */
static ag_tensor *f_split(int n, ag_tensor **in, void *ctx) {
    ag_tensor *p[3];
    if (ag_split(in[0], 2, 1, p, 3) != 3) return NULL;
    return ag_cat(3, (ag_tensor *[]){p[2], ag_mul_scalar(p[0], 3), p[0]}, 1);
}
static ag_tensor *f_chunk(int n, ag_tensor **in, void *ctx) {
    ag_tensor *p[2];
    if (ag_chunk(in[0], 2, 0, p, 2) != 2) return NULL;
    return ag_mul(p[0], p[1]);
}
static ag_tensor *f_index_select(int n, ag_tensor **in, void *ctx) { return ag_index_select(in[0], -1, ctx); }
static ag_tensor *f_index_select_t(int n, ag_tensor **in, void *ctx) {
    return ag_index_select(ag_transpose(in[0], 0, 1), 0, ctx);
}
static ag_tensor *f_gather(int n, ag_tensor **in, void *ctx) { return ag_gather(in[0], 0, ctx); }
static ag_tensor *f_embedding(int n, ag_tensor **in, void *ctx) { return ag_embedding(in[0], ctx, -1); }

static void test_joining_and_splitting_pass_gradcheck(void **s) {
    ag_rng r = ag_rng_new(31);
    assert_gradcheck(f_cat, NULL, 2, (ag_tensor *[]){leaf(&r, AG_SHAPE(2, 2)), leaf(&r, AG_SHAPE(2, 3))});
    assert_gradcheck(f_stack, NULL, 2, (ag_tensor *[]){leaf(&r, AG_SHAPE(2, 3)), leaf(&r, AG_SHAPE(3, 2))});
    assert_gradcheck(f_split, NULL, 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(2, 5))});
    assert_gradcheck(f_chunk, NULL, 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(4, 3))});
}

static void test_indexing_ops_pass_gradcheck_with_repeated_indices(void **s) {
    ag_rng r = ag_rng_new(32);
    ag_tensor *idx = tensor_of(AG_I64, (5), 2, 0, 2, 2, 1);
    assert_gradcheck(f_index_select, idx, 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(2, 3))});
    assert_gradcheck(f_index_select_t, tensor_of(AG_I32, (3), 1, 1, 0), 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(3, 2))});
    ag_tensor *gi = tensor_of(AG_I64, (3, 2), 2, 0, 2, 2, 0, 0);
    assert_gradcheck(f_gather, gi, 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(3, 3))});
    ag_tensor *ids = tensor_of(AG_I32, (2, 3), 4, 1, 4, 0, 4, 1);
    assert_gradcheck(f_embedding, ids, 1, (ag_tensor *[]){leaf(&r, AG_SHAPE(5, 2))});
}

#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_cat_joins_along_dim_including_negative_and_strided_inputs),
        T(test_cat_and_stack_of_ids_and_masks_copy_without_a_node),
        T(test_cat_errors_name_the_tensor_and_shapes),
        T(test_cat_gradient_is_the_matching_slice),
        T(test_stack_inserts_the_new_dim),
        T(test_stack_errors),
        T(test_split_gives_views_with_a_smaller_last_piece),
        T(test_chunk_follows_torch_and_may_return_fewer_pieces),
        T(test_split_and_chunk_errors),
        T(test_index_select_rows_and_columns),
        T(test_index_select_strided_input_and_index),
        T(test_index_select_gradient_sums_repeated_indices),
        T(test_index_select_errors_name_value_and_size),
        T(test_gather_picks_along_dim),
        T(test_gather_gradient_sums_repeated_indices),
        T(test_gather_errors),
        T(test_embedding_rows_for_ids_of_any_shape),
        T(test_embedding_gradient_accumulates_repeated_ids),
        T(test_embedding_gradient_with_many_repeats_is_exact_across_threads),
        T(test_embedding_gradient_does_not_depend_on_the_thread_count),
        T(test_embedding_errors),
        T(test_one_hot),
        T(test_joining_and_splitting_pass_gradcheck),
        T(test_indexing_ops_pass_gradcheck_with_repeated_indices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
