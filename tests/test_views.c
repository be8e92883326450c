/* Views: reshape/transpose/permute/slice/select/squeeze/expand share storage and read the
 * right elements; copies happen only where they must. Expected values are hand-worked (the
 * slicing cases were also checked against PyTorch 1.13 indexing). */
#include <string.h>

#include "test_util.h"

static void assert_strides(const ag_tensor *t, int n, const int64_t *want) {
    assert_int_equal(t->ndim, n);
    for (int i = 0; i < n; i++) assert_int_equal(t->stride[i], want[i]);
}
#define assert_stride(t, ...) assert_strides((t), AG_SHAPE(__VA_ARGS__))

/* Q from the design docs: 3 tokens, model width 4, batch 1 */
static ag_tensor *design_q(ag_dtype dt) {
    return ag_view(ag_arange(dt, 1, 13, 1), AG_SHAPE(1, 3, 4));
}

/* ---- the multi-head split ---- */

static void test_multihead_split_view_then_transpose_gives_heads(void **state) {
    (void)state;
    ag_tensor *q = design_q(AG_F32);
    ag_tensor *heads = ag_transpose(ag_view(q, AG_SHAPE(1, 3, 2, 2)), 1, 2);
    tu_assert_shape(heads, 1, 2, 3, 2);
    ag_tensor *h0 = ag_select(ag_select(heads, 0, 0), 0, 0);
    ag_tensor *h1 = ag_select(ag_select(heads, 0, 0), 0, 1);
    tu_assert_shape(h0, 3, 2);
    tu_assert_values(h0, 0, 1, 2, 5, 6, 9, 10);
    tu_assert_values(h1, 0, 3, 4, 7, 8, 11, 12);
    tu_assert_values(heads, 0, 1, 2, 5, 6, 9, 10, 3, 4, 7, 8, 11, 12);
    assert_false(ag_is_contiguous(heads));
}

static void test_multihead_split_shares_storage_and_contiguous_copies(void **state) {
    (void)state;
    ag_tensor *q = design_q(AG_F64);
    ag_tensor *heads = ag_transpose(ag_view(q, AG_SHAPE(1, 3, 2, 2)), 1, 2);
    assert_ptr_equal(heads->data, q->data);
    assert_stride(heads, 12, 2, 4, 1);
    ag_tensor *packed = ag_contiguous(heads);
    assert_ptr_not_equal(packed->data, q->data);
    assert_true(ag_is_contiguous(packed));
    assert_stride(packed, 12, 6, 2, 1);
    /* writing through Q shows in the view, not in the copy */
    ag_set(q, (int64_t[]){0, 1, 2}, 70); /* the 7: head 1, token 1, col 0 */
    assert_true(ag_get(heads, (int64_t[]){0, 1, 1, 0}) == 70);
    assert_true(ag_get(packed, (int64_t[]){0, 1, 1, 0}) == 7);
    /* contiguous of a contiguous tensor is the tensor itself */
    assert_ptr_equal(ag_contiguous(packed), packed);
}

static void test_multihead_merge_restores_q_exactly(void **state) {
    (void)state;
    ag_tensor *q = design_q(AG_F32);
    ag_tensor *heads = ag_transpose(ag_view(q, AG_SHAPE(1, 3, 2, 2)), 1, 2);
    /* attention produces per-head outputs as a packed (1,2,3,2) tensor: merge that */
    ag_tensor *per_head = ag_contiguous(heads);
    ag_tensor *back = ag_transpose(per_head, 1, 2); /* (1,3,2,2), not contiguous */
    tu_assert_shape(back, 1, 3, 2, 2);
    assert_false(ag_is_contiguous(back));
    assert_null(ag_view(back, AG_SHAPE(1, 3, 4)));
    tu_assert_error("ag_view", "(1,3,2,2)", "(1,3,4)");
    ag_tensor *merged = ag_view(ag_contiguous(back), AG_SHAPE(1, 3, 4));
    tu_assert_shape(merged, 1, 3, 4);
    assert_int_equal(memcmp(merged->data, q->data, 12 * sizeof(float)), 0);
    /* transposing the view straight back is the original layout again: no copy at all */
    ag_tensor *undone = ag_transpose(heads, 1, 2);
    assert_true(ag_is_contiguous(undone));
    ag_tensor *q2 = ag_view(ag_contiguous(undone), AG_SHAPE(1, 3, 4));
    assert_ptr_equal(q2->data, q->data);
    tu_assert_values(q2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
}

/* ---- view / reshape ---- */

static void test_view_of_transposed_tensor_fails_with_message(void **state) {
    (void)state;
    ag_tensor *t = ag_transpose(tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), 0, 1);
    assert_null(ag_view(t, AG_SHAPE(6)));
    tu_assert_error("ag_view", "cannot view (3,2)", "as (6)", "ag_reshape");
}

static void test_reshape_copies_when_a_view_is_impossible(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ag_tensor *t = ag_transpose(x, 0, 1);
    ag_tensor *r = ag_reshape(t, AG_SHAPE(6));
    tu_assert_shape(r, 6);
    tu_assert_values(r, 0, 1, 4, 2, 5, 3, 6);
    assert_ptr_not_equal(r->data, x->data);
    /* and stays a view when one is possible */
    ag_tensor *v = ag_reshape(x, AG_SHAPE(3, 2));
    assert_ptr_equal(v->data, x->data);
    tu_assert_values(v, 0, 1, 2, 3, 4, 5, 6);
}

static void test_view_keeps_offset_and_splits_a_strided_dim(void **state) {
    (void)state;
    /* rows 1..2 of a (4,6): offset 6, and the (2,6) block is contiguous */
    ag_tensor *x = ag_view(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(4, 6));
    ag_tensor *v = ag_view(ag_narrow(x, 0, 1, 2), AG_SHAPE(3, 2, 2));
    assert_int_equal(v->offset, 6);
    tu_assert_values(v, 0, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17);
    /* the columns 0..3 of each row: rows stay separate, the 4 columns may be split */
    ag_tensor *c = ag_view(ag_narrow(x, 1, 0, 4), AG_SHAPE(4, 2, 2));
    assert_ptr_equal(c->data, x->data);
    assert_stride(c, 6, 2, 1);
    tu_assert_values(ag_select(c, 0, 3), 0, 18, 19, 20, 21);
    /* but rows cannot be merged across the gap */
    assert_null(ag_view(ag_narrow(x, 1, 0, 4), AG_SHAPE(16)));
    tu_assert_error("ag_view", "(4,4)", "(16)");
}

static void test_view_infers_minus_one(void **state) {
    (void)state;
    ag_tensor *x = ag_arange(AG_F32, 0, 12, 1);
    tu_assert_shape(ag_view(x, AG_SHAPE(-1, 4)), 3, 4);
    tu_assert_shape(ag_view(x, AG_SHAPE(2, -1, 3)), 2, 2, 3);
    tu_assert_shape(ag_view(x, AG_SHAPE(-1)), 12);
    tu_assert_shape(ag_reshape(ag_zeros(AG_F32, AG_SHAPE(0, 4)), AG_SHAPE(-1, 2)), 0, 2);
    tu_assert_shape(ag_view(ag_scalar(AG_F32, 3), AG_SHAPE(1, -1)), 1, 1);
    ag_tensor *s = ag_view(ag_full(AG_F32, AG_SHAPE(1, 1), 5), 0, NULL);
    assert_int_equal(s->ndim, 0);
    assert_true(ag_item(s) == 5);
}

static void test_view_shape_errors_are_reported(void **state) {
    (void)state;
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_view(x, AG_SHAPE(-1, -1)));
    tu_assert_error("ag_view", "(-1,-1)", "only one dim can be -1");
    assert_null(ag_view(x, AG_SHAPE(-1, 4)));
    tu_assert_error("ag_view", "(-1,4)", "(2,3)", "6 elements");
    assert_null(ag_view(x, AG_SHAPE(7)));
    tu_assert_error("ag_view", "(7)", "(2,3)");
    assert_null(ag_view(x, AG_SHAPE(-2, -3)));
    tu_assert_error("ag_view", "invalid size -2");
    assert_null(ag_reshape(ag_zeros(AG_F32, AG_SHAPE(0, 4)), AG_SHAPE(0, -1)));
    tu_assert_error("ag_reshape", "(0,-1)");
    assert_null(ag_view(NULL, AG_SHAPE(1)));
    tu_assert_error("ag_view", "NULL");
}

/* ---- transpose / permute ---- */

static void test_permute_reorders_shape_and_strides(void **state) {
    (void)state;
    ag_tensor *x = ag_view(ag_arange(AG_F32, 0, 24, 1), AG_SHAPE(2, 3, 4));
    ag_tensor *p = ag_permute(x, (int[]){2, 0, 1});
    tu_assert_shape(p, 4, 2, 3);
    assert_stride(p, 1, 12, 4);
    assert_ptr_equal(p->data, x->data);
    /* torch.arange(24.).view(2,3,4).permute(2,0,1).reshape(-1)[:8] */
    ag_tensor *flat = ag_reshape(p, AG_SHAPE(-1));
    tu_assert_values(ag_narrow(flat, 0, 0, 8), 0, 0, 4, 8, 12, 16, 20, 1, 5);
    tu_assert_shape(ag_permute(x, (int[]){-1, 0, -2}), 4, 2, 3);
    tu_assert_shape(ag_transpose(x, -1, 0), 4, 3, 2);
}

static void test_permute_and_transpose_errors(void **state) {
    (void)state;
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 3, 4));
    assert_null(ag_permute(x, (int[]){0, 0, 1}));
    tu_assert_error("ag_permute", "not a permutation", "(2,3,4)");
    assert_null(ag_permute(x, (int[]){0, 1, 3}));
    tu_assert_error("ag_permute", "(2,3,4)", "3");
    assert_null(ag_transpose(x, 0, 3));
    tu_assert_error("ag_transpose", "dim 3", "(2,3,4)");
}

/* ---- narrow / slice / select ---- */

static void test_narrow_takes_a_window_and_accepts_negative_start(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2, 4), 1, 2, 3, 4, 5, 6, 7, 8);
    ag_tensor *n = ag_narrow(x, 1, 1, 2);
    tu_assert_shape(n, 2, 2);
    tu_assert_values(n, 0, 2, 3, 6, 7);
    assert_ptr_equal(n->data, x->data);
    tu_assert_values(ag_narrow(x, -1, -2, 2), 0, 3, 4, 7, 8);
    tu_assert_shape(ag_narrow(x, 0, 2, 0), 0, 4);
    assert_null(ag_narrow(x, 1, 3, 2));
    tu_assert_error("ag_narrow", "start 3", "length 2", "(2,4)");
}

static void test_slice_with_negative_indices_step_and_clamping(void **state) {
    (void)state;
    ag_tensor *x = ag_view(ag_arange(AG_F32, 1, 13, 1), AG_SHAPE(2, 6));
    /* PyTorch: x[:, -5:-1:2] = [[2,4],[8,10]] */
    ag_tensor *s = ag_slice(x, 1, -5, -1, 2);
    tu_assert_shape(s, 2, 2);
    assert_stride(s, 6, 2);
    tu_assert_values(s, 0, 2, 4, 8, 10);
    /* x[:, 4:100] and x[:, -100:2] clamp to the dim */
    tu_assert_values(ag_slice(x, 1, 4, 100, 1), 0, 5, 6, 11, 12);
    tu_assert_values(ag_slice(x, -1, -100, 2, 1), 0, 1, 2, 7, 8);
    /* x[:, 5:3] is empty */
    tu_assert_shape(ag_slice(x, 1, 5, 3, 1), 2, 0);
    /* step not dividing the length: x[0, 0:6:4] = [1, 5] */
    tu_assert_values(ag_slice(ag_select(x, 0, 0), 0, 0, 6, 4), 0, 1, 5);
    /* slice of a slice: x[:, 1::2][:, 1:] = [[4,6],[10,12]] */
    tu_assert_values(ag_slice(ag_slice(x, 1, 1, 6, 2), 1, 1, 3, 1), 0, 4, 6, 10, 12);
    assert_null(ag_slice(x, 1, 0, 6, 0));
    tu_assert_error("ag_slice", "step 0");
    assert_null(ag_slice(x, 2, 0, 6, 1));
    tu_assert_error("ag_slice", "dim 2", "(2,6)");
}

static void test_select_drops_the_dim_and_accepts_negative_index(void **state) {
    (void)state;
    ag_tensor *x = ag_view(ag_arange(AG_I64, 0, 24, 1), AG_SHAPE(2, 3, 4));
    ag_tensor *s = ag_select(x, 1, -1); /* x[:, 2, :] */
    tu_assert_shape(s, 2, 4);
    assert_stride(s, 12, 1);
    tu_assert_values(s, 0, 8, 9, 10, 11, 20, 21, 22, 23);
    ag_tensor *e = ag_select(ag_select(ag_select(x, 0, 1), 0, 2), 0, 3);
    assert_int_equal(e->ndim, 0);
    assert_true(ag_item(e) == 23);
    assert_null(ag_select(x, 2, 4));
    tu_assert_error("ag_select", "index 4", "(2,3,4)");
    assert_null(ag_select(x, 0, -3));
    tu_assert_error("ag_select", "index -3");
}

/* ---- squeeze / unsqueeze ---- */

static void test_squeeze_removes_only_size_one_dims(void **state) {
    (void)state;
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 1, 3));
    tu_assert_shape(ag_squeeze(x, 1), 2, 3);
    tu_assert_shape(ag_squeeze(x, -2), 2, 3);
    tu_assert_shape(ag_squeeze(x, 0), 2, 1, 3); /* not size 1: unchanged, like torch */
    assert_stride(ag_squeeze(x, -2), 3, 1);
    assert_null(ag_squeeze(x, 3));
    tu_assert_error("ag_squeeze", "dim 3", "(2,1,3)");
}

/* torch.tensor(3.).squeeze(0), .squeeze(-1), .transpose(0, -1) are the 0-d tensor; dim 1 is an error */
static void test_squeeze_and_transpose_of_a_0d_tensor_accept_dims_0_and_minus_1(void **state) {
    (void)state;
    ag_tensor *s = ag_scalar(AG_F64, 3);
    ag_tensor *views[3] = {ag_squeeze(s, 0), ag_squeeze(s, -1), ag_transpose(s, 0, -1)};
    for (int i = 0; i < 3; i++) {
        assert_non_null(views[i]);
        assert_int_equal(views[i]->ndim, 0);
        assert_true(views[i]->data == s->data && views[i]->offset == s->offset);
    }
    assert_int_equal(tu_error_count(), 0);
    assert_null(ag_squeeze(s, 1));
    tu_assert_error("ag_squeeze", "dim 1", "0-d");
    assert_null(ag_transpose(s, 0, 1));
    tu_assert_error("ag_transpose", "dim 1", "0-d");
    /* gradients flow through them as through the tensor itself */
    ag_tensor *x = tu_leaf(ag_scalar(AG_F64, 2));
    ag_backward(ag_mul(ag_transpose(ag_squeeze(x, 0), 0, 0), ag_scalar(AG_F64, 5)), NULL);
    tu_assert_values(x->grad, 0, 5);
}

static void test_unsqueeze_inserts_dims_with_negative_positions(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    tu_assert_shape(ag_unsqueeze(x, 0), 1, 2, 3);
    tu_assert_shape(ag_unsqueeze(x, -1), 2, 3, 1);
    tu_assert_shape(ag_unsqueeze(x, -3), 1, 2, 3);
    /* strides as torch: unsqueeze(1) -> (3,3,1), unsqueeze(2) -> (3,1,1) */
    assert_stride(ag_unsqueeze(x, 1), 3, 3, 1);
    assert_stride(ag_unsqueeze(x, 2), 3, 1, 1);
    ag_tensor *u = ag_unsqueeze(ag_transpose(x, 0, 1), 1); /* (3,1,2) */
    tu_assert_values(u, 0, 1, 4, 2, 5, 3, 6);
    /* a size-1 dim with any stride can be viewed away again */
    tu_assert_values(ag_view(u, AG_SHAPE(3, 2)), 0, 1, 4, 2, 5, 3, 6);
    assert_null(ag_unsqueeze(x, 3));
    tu_assert_error("ag_unsqueeze", "dim 3", "(2,3)");
    assert_null(ag_unsqueeze(x, -4));
    tu_assert_error("ag_unsqueeze", "dim -4");
    tu_assert_shape(ag_unsqueeze(ag_scalar(AG_F32, 1), -1), 1);
}

/* ---- expand ---- */

static void test_expand_uses_stride_zero_and_minus_one_keeps_a_dim(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(3, 1), 1, 2, 3);
    ag_tensor *e = ag_expand(x, AG_SHAPE(-1, 4));
    tu_assert_shape(e, 3, 4);
    assert_stride(e, 1, 0);
    assert_ptr_equal(e->data, x->data);
    tu_assert_values(e, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    /* new leading dims get stride 0 too */
    ag_tensor *l = ag_expand(x, AG_SHAPE(2, 3, 2));
    tu_assert_shape(l, 2, 3, 2);
    assert_stride(l, 0, 1, 0);
    tu_assert_values(l, 0, 1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3);
    /* a scalar expands to anything; to size 0 as well */
    tu_assert_values(ag_expand(ag_scalar(AG_F64, 7), AG_SHAPE(2)), 0, 7, 7);
    tu_assert_shape(ag_expand(x, AG_SHAPE(3, 0)), 3, 0);
    /* writing through the source shows in every expanded copy */
    ag_set(x, (int64_t[]){1, 0}, 20);
    tu_assert_values(ag_select(e, 0, 1), 0, 20, 20, 20, 20);
}

static void test_expand_errors_name_both_shapes(void **state) {
    (void)state;
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(3, 2));
    assert_null(ag_expand(x, AG_SHAPE(3, 4)));
    tu_assert_error("ag_expand", "(3,2)", "(3,4)");
    assert_null(ag_expand(x, AG_SHAPE(2)));
    tu_assert_error("ag_expand", "(3,2)", "(2)");
    assert_null(ag_expand(x, AG_SHAPE(-1, 3, 2))); /* -1 cannot be a new dim */
    tu_assert_error("ag_expand", "(-1,3,2)");
    assert_null(ag_expand(ag_zeros(AG_F32, AG_SHAPE(1)), AG_SHAPE(-2)));
    tu_assert_error("ag_expand", "(-2)");
}

/* ---- detach, views of views, clone, to ---- */

static void test_detach_shares_data_and_has_no_node(void **state) {
    (void)state;
    ag_tensor *x = tu_tensor(AG_F32, AG_SHAPE(2), 1, 2);
    x->requires_grad = true;
    ag_tensor *y = ag_mul_scalar(x, 3);
    assert_non_null(y->node);
    ag_tensor *d = ag_detach(y);
    assert_ptr_equal(d->data, y->data);
    assert_null(d->node);
    assert_false(d->requires_grad);
    assert_null(d->grad);
    ag_set(d, (int64_t[]){0}, -5);
    assert_true(ag_get(y, (int64_t[]){0}) == -5);
    /* ops on the detached tensor record nothing */
    assert_null(ag_add(d, d)->node);
}

static void test_views_record_nodes_only_when_grad_is_needed(void **state) {
    (void)state;
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_transpose(x, 0, 1)->node);
    x->requires_grad = true;
    ag_tensor *t = ag_transpose(x, 0, 1);
    assert_non_null(t->node);
    assert_true(t->requires_grad);
    assert_ptr_equal(t->node->in[0], x);
    bool prev = ag_set_grad_enabled(false);
    assert_null(ag_view(x, AG_SHAPE(6))->node);
    ag_set_grad_enabled(prev);
}

static void test_views_of_views_compose(void **state) {
    (void)state;
    ag_tensor *x = ag_view(ag_arange(AG_F64, 0, 24, 1), AG_SHAPE(2, 3, 4));
    /* x.permute(1,0,2)[1:, :, ::3].transpose(0,2) */
    ag_tensor *v = ag_transpose(ag_slice(ag_slice(ag_permute(x, (int[]){1, 0, 2}), 0, 1, 3, 1), 2, 0, 4, 3), 0, 2);
    tu_assert_shape(v, 2, 2, 2);
    assert_ptr_equal(v->data, x->data);
    /* v[a][b][c] = x[b][1+c][3a] */
    tu_assert_values(v, 0, 4, 8, 16, 20, 7, 11, 19, 23);
    ag_tensor *c = ag_contiguous(v);
    tu_assert_values(ag_view(c, AG_SHAPE(8)), 0, 4, 8, 16, 20, 7, 11, 19, 23);
    /* expand a selected column, then view a contiguous block of the result */
    ag_tensor *col = ag_unsqueeze(ag_select(ag_select(x, 0, 0), 1, 1), 0); /* (1,3): 1,5,9 */
    ag_tensor *ex = ag_expand(col, AG_SHAPE(2, 3));
    tu_assert_values(ex, 0, 1, 5, 9, 1, 5, 9);
    tu_assert_values(ag_reshape(ex, AG_SHAPE(3, 2)), 0, 1, 5, 9, 1, 5, 9);
}

static void test_clone_copies_and_to_converts(void **state) {
    (void)state;
    ag_tensor *x = ag_transpose(tu_tensor(AG_F32, AG_SHAPE(2, 2), 1.5, 2, -3.5, 4), 0, 1);
    ag_tensor *c = ag_clone(x);
    assert_ptr_not_equal(c->data, x->data);
    assert_true(ag_is_contiguous(c));
    tu_assert_values(c, 0, 1.5, -3.5, 2, 4);
    ag_tensor *d = ag_to(x, AG_F64);
    assert_int_equal(d->dtype, AG_F64);
    tu_assert_values(d, 0, 1.5, -3.5, 2, 4);
    ag_tensor *i = ag_to(x, AG_I64);
    assert_int_equal(i->dtype, AG_I64);
    tu_assert_values(i, 0, 1, -3, 2, 4);
    assert_ptr_equal(ag_to(x, AG_F32), x);
    /* only float <-> float conversions are differentiable */
    x->requires_grad = true;
    assert_non_null(ag_to(x, AG_F64)->node);
    assert_null(ag_to(x, AG_I64)->node);
    assert_non_null(ag_clone(x)->node);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_multihead_split_view_then_transpose_gives_heads),
        T(test_multihead_split_shares_storage_and_contiguous_copies),
        T(test_multihead_merge_restores_q_exactly),
        T(test_view_of_transposed_tensor_fails_with_message),
        T(test_reshape_copies_when_a_view_is_impossible),
        T(test_view_keeps_offset_and_splits_a_strided_dim),
        T(test_view_infers_minus_one),
        T(test_view_shape_errors_are_reported),
        T(test_permute_reorders_shape_and_strides),
        T(test_permute_and_transpose_errors),
        T(test_narrow_takes_a_window_and_accepts_negative_start),
        T(test_slice_with_negative_indices_step_and_clamping),
        T(test_select_drops_the_dim_and_accepts_negative_index),
        T(test_squeeze_removes_only_size_one_dims),
        T(test_squeeze_and_transpose_of_a_0d_tensor_accept_dims_0_and_minus_1),
        T(test_unsqueeze_inserts_dims_with_negative_positions),
        T(test_expand_uses_stride_zero_and_minus_one_keeps_a_dim),
        T(test_expand_errors_name_both_shapes),
        T(test_detach_shares_data_and_has_no_node),
        T(test_views_record_nodes_only_when_grad_is_needed),
        T(test_views_of_views_compose),
        T(test_clone_copies_and_to_converts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
