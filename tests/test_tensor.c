/* Tensor core: creation, element access, dtypes, copy/fill with broadcast and conversion,
 * printing, arenas and error reporting. Expected values are hand-worked unless stated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_util.h"

/* ag_fprint into a string (caller frees) */
static char *print_to_string(const ag_tensor *t, const char *name) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    ag_fprint(f, t, name);
    fclose(f);
    return buf;
}

/* ---- creation ---- */

static void test_empty_has_contiguous_strides_and_requested_shape(void **state) {
    (void)state;
    ag_tensor *t = ag_empty(AG_F64, AG_SHAPE(2, 3, 4));
    tu_assert_shape(t, 2, 3, 4);
    assert_int_equal(t->stride[0], 12);
    assert_int_equal(t->stride[1], 4);
    assert_int_equal(t->stride[2], 1);
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->dtype, AG_F64);
    assert_false(t->requires_grad);
    assert_null(t->node);
    assert_null(t->grad);
    assert_true(ag_is_contiguous(t));
    assert_int_equal(ag_numel(t), 24);
}

static void test_zeros_ones_full_fill_every_dtype(void **state) {
    (void)state;
    ag_dtype dts[] = {AG_F32, AG_F64, AG_I32, AG_I64, AG_BOOL};
    for (int k = 0; k < 5; k++) {
        tu_assert_values(ag_zeros(dts[k], AG_SHAPE(2, 2)), 0, 0, 0, 0, 0);
        tu_assert_values(ag_ones(dts[k], AG_SHAPE(3)), 0, 1, 1, 1);
    }
    tu_assert_values(ag_full(AG_F32, AG_SHAPE(2), -2.5), 0, -2.5, -2.5);
    tu_assert_values(ag_full(AG_I64, AG_SHAPE(2), -7), 0, -7, -7);
    tu_assert_values(ag_full(AG_BOOL, AG_SHAPE(2), 0.25), 0, 1, 1); /* nonzero is true */
    ag_tensor *z = ag_zeros_like(ag_full(AG_F64, AG_SHAPE(1, 3), 9));
    tu_assert_shape(z, 1, 3);
    tu_assert_values(z, 0, 0, 0, 0);
    ag_tensor *e = ag_empty_like(z);
    tu_assert_shape(e, 1, 3);
    assert_int_equal(e->dtype, AG_F64);
    assert_ptr_not_equal(e->data, z->data);
}

static void test_zero_size_dims_are_allowed(void **state) {
    (void)state;
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(0, 3));
    tu_assert_shape(t, 0, 3);
    assert_int_equal(ag_numel(t), 0);
    ag_fill_(t, 1); /* nothing to fill; must not crash */
    tu_assert_shape(ag_from_buffer(AG_F64, AG_SHAPE(0, 3), NULL), 0, 3); /* no data to read */
}

static void test_arange_counts_up_down_and_fractional(void **state) {
    (void)state;
    tu_assert_values(ag_arange(AG_F32, 0, 5, 1), 0, 0, 1, 2, 3, 4);
    tu_assert_values(ag_arange(AG_I64, 5, 0, -1), 0, 5, 4, 3, 2, 1);
    tu_assert_values(ag_arange(AG_F64, 1, 0, -0.25), 0, 1, 0.75, 0.5, 0.25);
    /* ceil((5.5 - 0) / 2) = 3 elements */
    tu_assert_values(ag_arange(AG_F64, 0, 5.5, 2), 0, 0, 2, 4);
    ag_tensor *t = ag_arange(AG_I64, -3, 3, 2);
    assert_int_equal(t->dtype, AG_I64);
    tu_assert_values(t, 0, -3, -1, 1);
}

static void test_arange_empty_range_gives_zero_elements(void **state) {
    (void)state;
    tu_assert_shape(ag_arange(AG_F32, 0, 0, 1), 0);
    tu_assert_shape(ag_arange(AG_F32, 3, 3, -1), 0);
}

static void test_arange_rejects_zero_step_and_step_pointing_away(void **state) {
    (void)state;
    assert_null(ag_arange(AG_F32, 0, 5, 0));
    tu_assert_error("ag_arange", "step 0");
    assert_null(ag_arange(AG_F32, 0, 5, -1));
    tu_assert_error("ag_arange", "start 0", "end 5", "step -1");
}

static void test_from_buffer_copies_the_data(void **state) {
    (void)state;
    float buf[6] = {1, 2, 3, 4, 5, 6};
    ag_tensor *t = ag_from_buffer(AG_F32, AG_SHAPE(2, 3), buf);
    buf[0] = 100;
    tu_assert_values(t, 0, 1, 2, 3, 4, 5, 6);
    assert_ptr_not_equal(t->data, (char *)buf);
}

static void test_wrap_shares_caller_memory_both_ways(void **state) {
    (void)state;
    int64_t buf[4] = {1, 2, 3, 4};
    ag_tensor *t = ag_wrap(AG_I64, AG_SHAPE(2, 2), buf);
    assert_ptr_equal(t->data, (char *)buf);
    buf[3] = 40;
    assert_true(ag_get(t, (int64_t[]){1, 1}) == 40);
    ag_set(t, (int64_t[]){0, 1}, -20);
    assert_int_equal(buf[1], -20);
}

static void test_scalar_is_0d_with_one_element(void **state) {
    (void)state;
    ag_tensor *s = ag_scalar(AG_F64, 2.5);
    assert_int_equal(s->ndim, 0);
    assert_int_equal(ag_numel(s), 1);
    assert_true(ag_is_contiguous(s));
    assert_true(ag_item(s) == 2.5);
    assert_true(ag_get(s, NULL) == 2.5);
    ag_set(s, NULL, -1);
    assert_true(ag_item(s) == -1);
    ag_tensor *i = ag_scalar(AG_I32, 7.9); /* truncates toward zero like a C cast */
    assert_true(ag_item(i) == 7);
    double v = 4;
    ag_tensor *w = ag_wrap(AG_F64, 0, NULL, &v);
    assert_int_equal(w->ndim, 0);
    assert_true(ag_item(w) == 4);
}

/* ---- element access ---- */

static void test_get_set_follow_strides_and_offset(void **state) {
    (void)state;
    ag_tensor *t = tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ag_tensor *tt = ag_transpose(t, 0, 1); /* (3,2) */
    assert_true(ag_get(tt, (int64_t[]){2, 0}) == 3);
    assert_true(ag_get(tt, (int64_t[]){0, 1}) == 4);
    ag_set(tt, (int64_t[]){1, 1}, 50);
    assert_true(ag_get(t, (int64_t[]){1, 1}) == 50);
    ag_tensor *row = ag_select(t, 0, 1); /* offset 3 */
    assert_int_equal(row->offset, 3);
    assert_true(ag_get(row, (int64_t[]){2}) == 6);
}

static void test_item_reads_single_element_of_any_rank_and_dtype(void **state) {
    (void)state;
    assert_true(ag_item(ag_full(AG_F32, AG_SHAPE(1, 1, 1), 0.5)) == 0.5);
    assert_true(ag_item(ag_full(AG_I64, AG_SHAPE(1), -3)) == -3);
    assert_true(ag_item(ag_full(AG_BOOL, AG_SHAPE(1), 1)) == 1);
    ag_tensor *t = tu_tensor(AG_F64, AG_SHAPE(3), 7, 8, 9);
    assert_true(ag_item(ag_narrow(t, 0, 2, 1)) == 9); /* through an offset */
}

static void test_dtype_sizes_and_names(void **state) {
    (void)state;
    assert_int_equal(ag_dtype_size(AG_F32), 4);
    assert_int_equal(ag_dtype_size(AG_F64), 8);
    assert_int_equal(ag_dtype_size(AG_I32), 4);
    assert_int_equal(ag_dtype_size(AG_I64), 8);
    assert_int_equal(ag_dtype_size(AG_BOOL), 1);
    assert_string_equal(ag_dtype_name(AG_F32), "f32");
    assert_string_equal(ag_dtype_name(AG_F64), "f64");
    assert_string_equal(ag_dtype_name(AG_I32), "i32");
    assert_string_equal(ag_dtype_name(AG_I64), "i64");
    assert_string_equal(ag_dtype_name(AG_BOOL), "bool");
}

static void test_shape_str_formats_shapes(void **state) {
    (void)state;
    char b[128];
    assert_string_equal(ag_shape_str(ag_zeros(AG_F32, AG_SHAPE(2, 3)), b), "(2,3)");
    assert_string_equal(ag_shape_str(ag_scalar(AG_F32, 0), b), "()");
    assert_string_equal(ag_shape_str(NULL, b), "(null)");
}

/* ---- copy and fill ---- */

static void test_copy_broadcasts_row_column_and_scalar(void **state) {
    (void)state;
    ag_tensor *dst = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    ag_copy_(dst, tu_tensor(AG_F32, AG_SHAPE(3), 1, 2, 3));
    tu_assert_values(dst, 0, 1, 2, 3, 1, 2, 3);
    ag_copy_(dst, tu_tensor(AG_F32, AG_SHAPE(2, 1), 7, 8));
    tu_assert_values(dst, 0, 7, 7, 7, 8, 8, 8);
    ag_copy_(dst, ag_scalar(AG_F32, -1));
    tu_assert_values(dst, 0, -1, -1, -1, -1, -1, -1);
    ag_copy_(dst, tu_tensor(AG_F32, AG_SHAPE(1, 3, 1), 4, 5, 6)); /* (1,3,1): middle dim broadcast */
    tu_assert_error("ag_copy_", "(1,3,1)", "(2,3)"); /* more dims than dst: torch rejects it too */
    tu_assert_values(dst, 0, -1, -1, -1, -1, -1, -1);
}

static void test_copy_into_transposed_destination_writes_through_strides(void **state) {
    (void)state;
    ag_tensor *base = ag_zeros(AG_F64, AG_SHAPE(2, 3));
    ag_tensor *dst = ag_transpose(base, 0, 1); /* (3,2) */
    ag_copy_(dst, tu_tensor(AG_F64, AG_SHAPE(3, 2), 1, 2, 3, 4, 5, 6));
    tu_assert_values(base, 0, 1, 3, 5, 2, 4, 6);
}

/* torch's overlap rules (see test_elementwise's add_ case): strided views whose ranges meet are
 * copied from the old values; dense views sharing elements in another layout, and expanded
 * destinations, are errors that leave the destination as it was */
static void test_copy_between_overlapping_views_reads_the_old_values_or_reports_the_overlap(void **state) {
    (void)state;
    ag_tensor *m = tu_tensor(AG_F32, AG_SHAPE(4, 3), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    ag_tensor *cols = ag_slice(m, 1, 0, 2, 1);
    ag_copy_(ag_slice(cols, 0, 1, 4, 1), ag_slice(cols, 0, 0, 3, 1)); /* m[1:, :2] = m[:-1, :2] */
    assert_int_equal(tu_error_count(), 0);
    /* a loop in order would copy row 0's first two values into every row */
    tu_assert_values(m, 0, 0, 1, 2, 0, 1, 5, 3, 4, 8, 6, 7, 11);
    ag_tensor *a = tu_tensor(AG_F32, AG_SHAPE(2, 4), 0, 0, 1, 2, 4, 4, 5, 6);
    ag_copy_(ag_slice(a, 1, 0, 4, 2), ag_slice(a, 1, 1, 4, 2)); /* a[:, ::2] = a[:, 1::2]: disjoint elements */
    tu_assert_values(a, 0, 0, 0, 2, 2, 4, 4, 6, 6);
    ag_copy_(a, a);
    assert_int_equal(tu_error_count(), 0);
    tu_assert_values(a, 0, 0, 0, 2, 2, 4, 4, 6, 6);
    ag_tensor *sq = tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 2, 3, 4);
    ag_copy_(sq, ag_transpose(sq, 0, 1));
    tu_assert_error("ag_copy_", "(2,2)", "share some memory", "clone the source");
    tu_assert_values(sq, 0, 1, 2, 3, 4);
    ag_tensor *v = tu_tensor(AG_F32, AG_SHAPE(4), 1, 2, 3, 4);
    ag_copy_(ag_slice(v, 0, 0, 3, 1), ag_slice(v, 0, 1, 4, 1));
    tu_assert_error("ag_copy_", "(3)", "share some memory");
    tu_assert_values(v, 0, 1, 2, 3, 4);
    ag_tensor *row = tu_tensor(AG_F32, AG_SHAPE(1, 3), 1, 2, 3);
    ag_copy_(ag_expand(row, AG_SHAPE(2, 3)), ag_zeros(AG_F32, AG_SHAPE(2, 3)));
    tu_assert_error("ag_copy_", "(2,3)", "expanded view");
    ag_fill_(ag_expand(row, AG_SHAPE(2, 3)), 0);
    tu_assert_error("ag_fill_", "(2,3)", "expanded view");
    tu_assert_values(row, 0, 1, 2, 3);
}

static void test_copy_converts_between_float_int_and_bool(void **state) {
    (void)state;
    ag_tensor *f64 = tu_tensor(AG_F64, AG_SHAPE(5), -2.7, -0.5, 0, 1.5, 2.9);
    /* to integer truncates toward zero (torch .to(int64) gives -2, 0, 0, 1, 2) */
    ag_tensor *i64 = ag_empty(AG_I64, AG_SHAPE(5));
    ag_copy_(i64, f64);
    int64_t iv[5];
    memcpy(iv, i64->data, sizeof iv);
    assert_int_equal(iv[0], -2);
    assert_int_equal(iv[1], 0);
    assert_int_equal(iv[2], 0);
    assert_int_equal(iv[3], 1);
    assert_int_equal(iv[4], 2);
    /* to bool: nonzero is true */
    ag_tensor *b = ag_empty(AG_BOOL, AG_SHAPE(5));
    ag_copy_(b, f64);
    const uint8_t *bv = (const uint8_t *)b->data;
    assert_int_equal(bv[0], 1);
    assert_int_equal(bv[1], 1);
    assert_int_equal(bv[2], 0);
    assert_int_equal(bv[3], 1);
    ag_copy_(b, i64); /* -2, 0, 0, 1, 2 */
    tu_assert_values(b, 0, 1, 0, 0, 1, 1);
    /* bool to float */
    ag_tensor *f32 = ag_empty(AG_F32, AG_SHAPE(5));
    ag_copy_(f32, b);
    tu_assert_values(f32, 0, 1, 0, 0, 1, 1);
    /* f64 -> f32 rounds to nearest float; f32 -> f64 is exact */
    ag_tensor *tenth = ag_full(AG_F64, AG_SHAPE(1), 0.1);
    ag_tensor *tenth32 = ag_empty(AG_F32, AG_SHAPE(1));
    ag_copy_(tenth32, tenth);
    assert_true(*(float *)tenth32->data == 0.1f);
    ag_copy_(tenth, tenth32);
    assert_true(*(double *)tenth->data == (double)0.1f);
    /* i64 2^24+1 is not a float: becomes 2^24 in f32, stays exact in f64 */
    ag_tensor *big = ag_full(AG_I64, AG_SHAPE(1), 16777217);
    ag_copy_(tenth32, big);
    assert_true(*(float *)tenth32->data == 16777216.0f);
    ag_copy_(tenth, big);
    assert_true(*(double *)tenth->data == 16777217.0);
    /* i32 <-> i64 */
    ag_tensor *i32 = ag_empty(AG_I32, AG_SHAPE(5));
    ag_copy_(i32, i64);
    tu_assert_values(i32, 0, -2, 0, 0, 1, 2);
}

static void test_copy_rejects_non_broadcastable_source(void **state) {
    (void)state;
    ag_copy_(ag_zeros(AG_F32, AG_SHAPE(2, 2)), ag_zeros(AG_F32, AG_SHAPE(3)));
    tu_assert_error("ag_copy_", "(3)", "(2,2)");
    ag_copy_(ag_zeros(AG_F32, AG_SHAPE(3)), ag_zeros(AG_F32, AG_SHAPE(2, 3)));
    tu_assert_error("ag_copy_", "(2,3)", "(3)");
}

static void test_fill_writes_only_the_elements_of_a_strided_view(void **state) {
    (void)state;
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(2, 4));
    ag_fill_(ag_slice(t, 1, 1, 4, 2), 9); /* columns 1 and 3 */
    tu_assert_values(t, 0, 0, 9, 0, 9, 0, 9, 0, 9);
    ag_tensor *i = ag_zeros(AG_I32, AG_SHAPE(3));
    ag_fill_(i, -4);
    tu_assert_values(i, 0, -4, -4, -4);
}

static void test_to_buffer_converts_in_row_major_order(void **state) {
    (void)state;
    ag_tensor *t = ag_transpose(tu_tensor(AG_F32, AG_SHAPE(2, 2), 1, 2, 3, 4), 0, 1);
    int64_t out[4];
    ag_to_buffer(t, AG_I64, out);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 2);
    assert_int_equal(out[3], 4);
}

/* ---- printing ---- */

static void test_print_2x3_f32_exact_format(void **state) {
    (void)state;
    ag_tensor *t = tu_tensor(AG_F32, AG_SHAPE(2, 3), 1, 2.5, -3, 4, 0.125, 6);
    char *s = print_to_string(t, NULL);
    assert_string_equal(s, "tensor([[    1.0000,     2.5000,    -3.0000],\n"
                           "        [    4.0000,     0.1250,     6.0000]], shape=(2,3), dtype=f32)\n");
    free(s);
    s = print_to_string(t, "x");
    assert_string_equal(s, "x = tensor([[    1.0000,     2.5000,    -3.0000],\n"
                           "            [    4.0000,     0.1250,     6.0000]], shape=(2,3), dtype=f32)\n");
    free(s);
}

static void test_print_of_transposed_view_shows_logical_order(void **state) {
    (void)state;
    ag_tensor *t = ag_transpose(tu_tensor(AG_I64, AG_SHAPE(2, 2), 1, 2, 3, 4), 0, 1);
    char *s = print_to_string(t, NULL);
    assert_string_equal(s, "tensor([[     1,      3],\n"
                           "        [     2,      4]], shape=(2,2), dtype=i64)\n");
    free(s);
    s = print_to_string(ag_scalar(AG_BOOL, 1), NULL);
    assert_string_equal(s, "tensor( True, shape=(), dtype=bool)\n");
    free(s);
}

static void test_print_summarises_large_tensor_to_three_edge_items(void **state) {
    (void)state;
    char *s = print_to_string(ag_arange(AG_F64, 0, 2000, 1), NULL);
    assert_string_equal(s, "tensor([    0.0000,     1.0000,     2.0000,     ...,  1997.0000,  1998.0000,  1999.0000], "
                           "shape=(2000), dtype=f64)\n");
    free(s);
    /* 2-d: three rows, an ellipsis row, three rows: 7 lines */
    s = print_to_string(ag_view(ag_arange(AG_F64, 0, 2000, 1), AG_SHAPE(40, 50)), NULL);
    int lines = 0;
    for (char *p = s; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 7);
    assert_non_null(strstr(s, "\n        ...,\n        [ 1850.0000,"));
    assert_null(strstr(s, " 1000.0000"));
    free(s);
}

static void test_print_of_small_tensor_is_not_summarised(void **state) {
    (void)state;
    char *s = print_to_string(ag_arange(AG_I32, 0, 8, 1), NULL);
    assert_string_equal(s, "tensor([     0,      1,      2,      3,      4,      5,      6,      7], shape=(8), dtype=i32)\n");
    free(s);
}

/* ---- arenas ---- */

static void test_arena_allocations_are_64_byte_aligned(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(0);
    size_t sizes[] = {1, 3, 63, 64, 65, 100, 5000, 1, 70000};
    for (int i = 0; i < 9; i++) {
        void *p = ag_arena_alloc(a, sizes[i]);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, sizes[i]); /* the whole request is usable */
    }
    ag_arena_free(a);
    /* tensor data of odd sizes, from the test's current arena */
    for (int i = 1; i < 6; i++) {
        ag_tensor *t = ag_empty(AG_BOOL, AG_SHAPE(i));
        assert_int_equal((uintptr_t)t->data % 64, 0);
    }
}

static void test_arena_reset_keeps_memory_for_reuse(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(4096);
    void *p1 = ag_arena_alloc(a, 1000);
    ag_arena_alloc(a, 500);
    assert_int_equal(ag_arena_used(a), 1024 + 512);
    uint64_t before = ag_alloc_count();
    ag_arena_reset(a);
    assert_int_equal(ag_arena_used(a), 0);
    assert_int_equal(ag_alloc_count(), before); /* a single block is kept as is */
    assert_ptr_equal(ag_arena_alloc(a, 1000), p1);
    ag_arena_free(a);
}

/* one "training step": raw allocations and tensor ops of fixed sizes, growing past the first block */
static void arena_step(ag_arena *a) {
    ag_arena_alloc(a, 3000);
    ag_arena_alloc(a, 5000);
    ag_arena *prev = ag_arena_use(a);
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(64, 64));
    ag_tensor *y = ag_add(ag_mul_scalar(x, 2), ag_transpose(x, 0, 1));
    assert_non_null(ag_contiguous(ag_transpose(y, 0, 1)));
    ag_arena_use(prev);
    ag_arena_alloc(a, 100000);
    ag_arena_alloc(a, 7);
}

static void test_arena_repeated_step_after_one_reset_does_no_heap_allocation(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(4096);
    uint64_t c0 = ag_alloc_count();
    arena_step(a);
    uint64_t c1 = ag_alloc_count();
    assert_true(c1 > c0); /* the first step had to grow the arena */
    size_t used = ag_arena_used(a);
    ag_arena_reset(a);
    uint64_t c2 = ag_alloc_count();
    for (int step = 0; step < 3; step++) {
        arena_step(a);
        assert_int_equal(ag_arena_used(a), used);
        assert_int_equal(ag_alloc_count(), c2);
        ag_arena_reset(a);
        assert_int_equal(ag_alloc_count(), c2);
    }
    ag_arena_free(a);
}

/* trim hands the free space's pages back (mincore: not resident) and keeps the blocks: the
 * memory is used again with no heap allocation, and what is still allocated keeps its values */
static void test_arena_trim_releases_free_pages_and_keeps_the_blocks(void **state) {
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)64 * (size_t)page;
    ag_arena *a = ag_arena_new(2 * bytes);
    unsigned char *keep = ag_arena_alloc(a, 100);
    memset(keep, 7, 100);
    ag_arena_mark m = ag_arena_get_mark(a);
    unsigned char *p = ag_arena_alloc(a, bytes);
    memset(p, 1, bytes); /* resident */
    ag_arena_rewind(a, m);
    uint64_t count = ag_alloc_count();
    ag_arena_trim(a);
    /* the pages wholly inside p's span are free space now */
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    size_t npages = (size_t)(((uintptr_t)p + bytes - lo) / (uintptr_t)page) - 1;
    unsigned char vec[64];
    assert_true(npages >= 32 && npages <= 64);
    assert_int_equal(mincore((void *)lo, npages * (size_t)page, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < npages; i++) resident += vec[i] & 1;
    assert_int_equal(resident, 0);
    for (int i = 0; i < 100; i++) assert_int_equal(keep[i], 7); /* still allocated: untouched */
    unsigned char *q = ag_arena_alloc(a, bytes);
    assert_ptr_equal(q, p); /* the same block */
    memset(q, 2, bytes);
    assert_int_equal(q[bytes - 1], 2);
    assert_int_equal(ag_alloc_count(), count);
    ag_arena_free(a);
}

static void test_arena_use_switches_where_tensors_live(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(4096);
    ag_arena *prev = ag_arena_use(a);
    assert_ptr_equal(ag_arena_current(), a);
    ag_zeros(AG_F64, AG_SHAPE(10));
    assert_true(ag_arena_used(a) >= 80);
    assert_ptr_equal(ag_arena_use(prev), a);
    assert_ptr_equal(ag_arena_current(), prev);
    ag_arena_free(a);
}

/* ---- error reporting ---- */

static void test_bad_shape_is_reported_with_the_shape(void **state) {
    (void)state;
    assert_null(ag_zeros(AG_F32, AG_SHAPE(2, -3)));
    tu_assert_error("ag_zeros", "negative size", "(2,-3)");
    assert_null(ag_empty(AG_F32, AG_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1)));
    tu_assert_error("ag_empty", "9 dims");
    assert_null(ag_from_buffer(AG_F32, AG_SHAPE(-1), NULL));
    tu_assert_error("ag_from_buffer", "(-1)");
    assert_null(ag_randn(NULL, AG_I64, AG_SHAPE(2)));
    tu_assert_error("ag_randn", "i64");
}

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer's allocator aborts past its size limit unless told to return NULL as malloc
 * does; the out-of-memory checks below need malloc's behaviour. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* Sizes no tensor can have, memory the system cannot give, and NULL data: the error handler
 * names the op and the shape, and the call returns NULL (no overflow, no abort). */
static void test_impossible_sizes_and_null_data_are_reported_not_crashes(void **state) {
    const int64_t g = (int64_t)1 << 32;
    assert_null(ag_zeros(AG_F32, AG_SHAPE(g, g)));
    tu_assert_error("ag_zeros", "(4294967296,4294967296)", "more elements than any tensor can hold");
    assert_null(ag_full(AG_F64, AG_SHAPE(g, g, 2), 1.0));
    tu_assert_error("ag_full", "more elements");
    /* 2^41 floats (8 TiB): a count that fits, memory that no machine here has */
    assert_null(ag_zeros(AG_F32, AG_SHAPE(g, 512)));
    tu_assert_error("ag_zeros", "cannot allocate 8796093022208 bytes", "f32", "(4294967296,512)", "out of memory");
    ag_params *p = ag_params_new(AG_F32);
    assert_null(ag_params_add(p, "huge.weight", AG_SHAPE(g, g)));
    tu_assert_error("ag_params_add", "'huge.weight'", "more elements than a tensor can hold");
    assert_null(ag_params_add(p, "big.weight", AG_SHAPE(g, 512)));
    tu_assert_error("ag_params_add", "'big.weight'", "out of memory");
    assert_non_null(ag_params_add(p, "small.weight", AG_SHAPE(2, 3))); /* the set is still usable */
    assert_int_equal(p->count, 1);
    ag_params_free(p);
    /* views that would overflow */
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(1, 1));
    assert_null(ag_expand(t, AG_SHAPE(g, g)));
    tu_assert_error("ag_expand", "cannot expand (1,1) to (4294967296,4294967296)");
    assert_null(ag_view(t, AG_SHAPE(g, g, 0, g)));
    tu_assert_error("ag_view", "is invalid for input (1,1)");
    /* NULL data for elements; none is needed for an empty tensor */
    assert_null(ag_wrap(AG_F32, AG_SHAPE(2, 3), NULL));
    tu_assert_error("ag_wrap", "data is NULL", "(2,3)");
    assert_null(ag_from_buffer(AG_F32, AG_SHAPE(2), NULL));
    tu_assert_error("ag_from_buffer", "data is NULL", "(2)");
    assert_non_null(ag_wrap(AG_F32, AG_SHAPE(0, 3), NULL));
    assert_int_equal(tu_error_count(), 0);
}

static void test_error_messages_stay_in_bounds_for_huge_shapes_and_long_names(void **state) {
    (void)state;
    /* 8 dims of 20 characters each do not fit the 128-byte shape buffer: cut, not overflowed */
    const int64_t m = -INT64_MAX;
    assert_null(ag_zeros(AG_F32, AG_SHAPE(m, m, m, m, m, m, m, m)));
    tu_assert_error("ag_zeros", "negative size", "(-9223372036854775807,", "...)");
    char b[128];
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(1, 1, 1, 1, 1, 1, 1, 1));
    for (int i = 0; i < 8; i++) t->shape[i] = INT64_MAX; /* header only, never read as data */
    assert_true(strlen(ag_shape_str(t, b)) < 128);
    /* an op name longer than the message buffer is cut too */
    char op[2000];
    memset(op, 'x', sizeof op - 1);
    op[sizeof op - 1] = 0;
    ag_error(op, "value %d", 1);
    assert_true(strlen(tu_take_error()) < 2000);
}

static void test_item_on_multi_element_tensor_is_reported(void **state) {
    (void)state;
    assert_true(isnan(ag_item(ag_zeros(AG_F32, AG_SHAPE(2, 3)))));
    tu_assert_error("ag_item", "(2,3)", "6 elements");
    assert_true(isnan(ag_item(ag_zeros(AG_F32, AG_SHAPE(0)))));
    tu_assert_error("ag_item", "(0)", "0 elements");
    assert_true(isnan(ag_item(NULL)));
    tu_assert_error("ag_item", "NULL");
}

static void test_index_out_of_range_is_reported(void **state) {
    (void)state;
    ag_tensor *t = ag_zeros(AG_F32, AG_SHAPE(2, 3));
    assert_true(isnan(ag_get(t, (int64_t[]){0, 3})));
    tu_assert_error("ag_get", "index 3", "dim 1", "(2,3)");
    assert_true(isnan(ag_get(t, (int64_t[]){-1, 0})));
    tu_assert_error("ag_get", "index -1", "dim 0");
    ag_set(t, (int64_t[]){2, 0}, 5);
    tu_assert_error("ag_set", "index 2", "(2,3)");
    tu_assert_values(t, 0, 0, 0, 0, 0, 0, 0); /* nothing written */
}

static void count_error(const char *message, void *user) {
    (void)message;
    *(int *)user += 1;
}

static void test_error_handler_is_replaceable_and_last_error_is_kept(void **state) {
    (void)state;
    int mine = 0;
    ag_error_fn prev = ag_set_error_handler(count_error, &mine);
    assert_non_null(prev); /* the test's recording handler */
    ag_error("ag_demo", "value %d is bad", 42);
    assert_int_equal(mine, 1);
    assert_string_equal(ag_last_error(), "ag_demo: value 42 is bad");
    ag_clear_error();
    assert_string_equal(ag_last_error(), "");
    assert_ptr_equal(ag_set_error_handler(prev, NULL), count_error);
    assert_int_equal(tu_error_count(), 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

/* Rewinding to a mark forgets what came after it and reuses the same memory, including blocks
 * that had to be added past the first, with no new heap allocation. */
static void test_arena_rewind_reuses_memory_after_the_mark(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(4096);
    void *keep = ag_arena_alloc(a, 1000);
    ag_arena_mark m = ag_arena_get_mark(a);
    size_t used = ag_arena_used(a);
    void *first = ag_arena_alloc(a, 3000);
    ag_arena_alloc(a, 20000); /* past the first block */
    uint64_t allocs = ag_alloc_count();
    for (int i = 0; i < 5; i++) {
        ag_arena_rewind(a, m);
        assert_int_equal(ag_arena_used(a), used);
        assert_ptr_equal(ag_arena_alloc(a, 3000), first);
        ag_arena_alloc(a, 20000);
    }
    assert_int_equal(ag_alloc_count(), allocs);
    assert_non_null(keep);
    ag_arena_free(a);
}

/* Rewind-keep moves one result down to the mark, through the overlapping cases: the result
 * right after the mark, after other allocations, in a later block, and as a strided view. */
static void test_arena_rewind_keep_moves_the_result_to_the_mark(void **state) {
    (void)state;
    ag_arena *a = ag_arena_new(4096), *prev = ag_arena_use(a);
    ag_tensor *before = ag_arange(AG_F32, 0, 4, 1);
    for (int k = 0; k < 4; k++) {
        ag_arena_mark m = ag_arena_get_mark(a);
        size_t used = ag_arena_used(a);
        if (k >= 1) ag_zeros(AG_F64, AG_SHAPE(100)); /* intermediates below the result */
        if (k >= 2) ag_zeros(AG_F64, AG_SHAPE(2000)); /* the result lands in a later block */
        ag_tensor *t = ag_arange(AG_F64, 0, 600, 1), *r = ag_reshape(t, AG_SHAPE(20, 30));
        if (k == 3) r = ag_transpose(r, 0, 1); /* kept as a contiguous (30,20) */
        ag_tensor *kept = ag_arena_rewind_keep(a, m, r);
        tu_assert_shape(kept, k == 3 ? 30 : 20, k == 3 ? 20 : 30);
        for (int64_t i = 0; i < 600; i++) {
            int64_t row = i / (k == 3 ? 20 : 30), col = i % (k == 3 ? 20 : 30);
            double want = k == 3 ? (double)(col * 30 + row) : (double)i;
            assert_true(((const double *)kept->data)[i] == want);
        }
        /* the values and a header (arena allocations are whole 64-byte lines) */
        assert_true(ag_arena_used(a) - used <= 600 * sizeof(double) + (sizeof(ag_tensor) + 63) / 64 * 64);
        ag_arena_rewind(a, m);
    }
    tu_assert_values(before, 0, 0, 1, 2, 3);
    ag_tensor *g = tu_leaf(ag_ones(AG_F32, AG_SHAPE(2)));
    assert_null(ag_arena_rewind_keep(a, ag_arena_get_mark(a), g));
    tu_assert_error("ag_arena_rewind_keep", "(2)", "requires grad");
    ag_arena_use(prev);
    ag_arena_free(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_arena_rewind_keep_moves_the_result_to_the_mark),
        T(test_empty_has_contiguous_strides_and_requested_shape),
        T(test_zeros_ones_full_fill_every_dtype),
        T(test_zero_size_dims_are_allowed),
        T(test_arange_counts_up_down_and_fractional),
        T(test_arange_empty_range_gives_zero_elements),
        T(test_arange_rejects_zero_step_and_step_pointing_away),
        T(test_from_buffer_copies_the_data),
        T(test_wrap_shares_caller_memory_both_ways),
        T(test_scalar_is_0d_with_one_element),
        T(test_get_set_follow_strides_and_offset),
        T(test_item_reads_single_element_of_any_rank_and_dtype),
        T(test_dtype_sizes_and_names),
        T(test_shape_str_formats_shapes),
        T(test_copy_broadcasts_row_column_and_scalar),
        T(test_copy_into_transposed_destination_writes_through_strides),
        T(test_copy_between_overlapping_views_reads_the_old_values_or_reports_the_overlap),
        T(test_copy_converts_between_float_int_and_bool),
        T(test_copy_rejects_non_broadcastable_source),
        T(test_fill_writes_only_the_elements_of_a_strided_view),
        T(test_to_buffer_converts_in_row_major_order),
        T(test_print_2x3_f32_exact_format),
        T(test_print_of_transposed_view_shows_logical_order),
        T(test_print_summarises_large_tensor_to_three_edge_items),
        T(test_print_of_small_tensor_is_not_summarised),
        T(test_arena_allocations_are_64_byte_aligned),
        T(test_arena_reset_keeps_memory_for_reuse),
        T(test_arena_repeated_step_after_one_reset_does_no_heap_allocation),
        T(test_arena_use_switches_where_tensors_live),
        T(test_bad_shape_is_reported_with_the_shape),
        T(test_impossible_sizes_and_null_data_are_reported_not_crashes),
        T(test_error_messages_stay_in_bounds_for_huge_shapes_and_long_names),
        T(test_item_on_multi_element_tensor_is_reported),
        T(test_index_out_of_range_is_reported),
        T(test_error_handler_is_replaceable_and_last_error_is_kept),
            cmocka_unit_test(test_arena_rewind_reuses_memory_after_the_mark),
            cmocka_unit_test(test_arena_trim_releases_free_pages_and_keeps_the_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
