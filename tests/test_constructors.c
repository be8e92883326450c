/* Constructors given what no tensor can be (a NULL shape with dims, negative or overflowing
 * sizes, a dtype attograd lacks, an arange that never ends) and element access on NULL
 * arguments: the error handler names the constructor and the arguments, and the call returns
 * NULL (NaN for ag_get), never a crash or an empty tensor. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
/* malloc's NULL for memory no machine has, instead of AddressSanitizer's report */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

static const float data[6] = {1, 2, 3, 4, 5, 6};

static void test_a_null_shape_with_dims_is_reported_by_every_constructor_and_view(void **s) {
    ag_rng rng = ag_rng_new(1);
    assert_null(ag_from_buffer(AG_F32, 2, NULL, data));
    tu_assert_error("ag_from_buffer", "shape is NULL for 2 dims");
    assert_null(ag_empty(AG_F32, 1, NULL));
    tu_assert_error("ag_empty", "shape is NULL for 1 dims");
    assert_null(ag_zeros(AG_F64, 3, NULL));
    tu_assert_error("ag_zeros", "shape is NULL for 3 dims");
    assert_null(ag_ones(AG_I64, 2, NULL));
    tu_assert_error("ag_full", "shape is NULL");
    assert_null(ag_full(AG_BOOL, 2, NULL, 1.0));
    tu_assert_error("ag_full", "shape is NULL");
    assert_null(ag_wrap(AG_F32, 2, NULL, (void *)data));
    tu_assert_error("ag_wrap", "shape is NULL");
    assert_null(ag_rand(&rng, AG_F32, 2, NULL));
    tu_assert_error("ag_uniform", "shape is NULL");
    assert_null(ag_randn(&rng, AG_F64, 2, NULL));
    tu_assert_error("ag_randn", "shape is NULL");
    /* views given a NULL shape or permutation */
    ag_tensor *x = ag_from_buffer(AG_F32, AG_SHAPE(2, 3), data);
    assert_null(ag_view(x, 2, NULL));
    tu_assert_error("ag_view", "shape is NULL for 2 dims");
    assert_null(ag_reshape(x, 1, NULL));
    tu_assert_error("ag_reshape", "shape is NULL for 1 dims");
    assert_null(ag_expand(x, 2, NULL));
    tu_assert_error("ag_expand", "shape is NULL for 2 dims");
    assert_null(ag_permute(x, NULL));
    tu_assert_error("ag_permute", "dims is NULL for (2,3)");
    /* no dims need no shape: a 0-d tensor */
    ag_tensor *t = ag_from_buffer(AG_F32, 0, NULL, data);
    assert_non_null(t);
    assert_true(ag_item(t) == 1.0f);
    assert_int_equal(tu_error_count(), 0);
}

static void test_negative_overflowing_and_unknown_arguments_are_reported(void **s) {
    const int64_t big = (int64_t)1 << 62;
    assert_null(ag_ones(AG_F32, AG_SHAPE(3, -1)));
    tu_assert_error("ag_full", "negative size", "(3,-1)");
    assert_null(ag_empty(AG_F32, AG_SHAPE(big, 4)));
    tu_assert_error("ag_empty", "(4611686018427387904,4)", "more elements than any tensor can hold");
    assert_null(ag_from_buffer(AG_I32, AG_SHAPE(big, big), data));
    tu_assert_error("ag_from_buffer", "more elements");
    assert_null(ag_zeros(AG_F32, -1, (int64_t[]){1}));
    tu_assert_error("ag_zeros", "-1 dims");
    assert_null(ag_zeros((ag_dtype)7, AG_SHAPE(2)));
    tu_assert_error("ag_zeros", "dtype 7");
    assert_null(ag_from_buffer((ag_dtype)-1, AG_SHAPE(2), data));
    tu_assert_error("ag_from_buffer", "dtype -1");
    assert_null(ag_empty_like(NULL));
    tu_assert_error("ag_empty_like", "NULL");
    assert_null(ag_zeros_like(NULL));
    tu_assert_error("ag_zeros_like", "NULL");
}

static void test_arange_that_never_ends_or_cannot_fit_is_reported(void **s) {
    assert_null(ag_arange(AG_F64, 0, 1e300, 1e-300)); /* 1e600 elements */
    tu_assert_error("ag_arange", "start 0, end 1e+300, step 1e-300", "inf elements", "more than any tensor can hold");
    assert_null(ag_arange(AG_F64, 0, NAN, 1));
    tu_assert_error("ag_arange", "end nan", "finite");
    assert_null(ag_arange(AG_F32, -INFINITY, 0, 1));
    tu_assert_error("ag_arange", "start -inf");
    assert_null(ag_arange(AG_F32, 0, 1, INFINITY));
    tu_assert_error("ag_arange", "step inf");
    assert_null(ag_arange(AG_I64, 0, 5, 0));
    tu_assert_error("ag_arange", "step 0", "non-zero");
    assert_null(ag_arange(AG_I64, 0, 5, -1));
    tu_assert_error("ag_arange", "point from start to end");
    assert_null(ag_arange(AG_F64, -1e308, 1e308, 1)); /* end - start overflows to inf */
    tu_assert_error("ag_arange", "more than any tensor can hold");
    assert_null(ag_arange(AG_F64, 0, 0x1p61, 1)); /* 2^61 elements of 8 bytes overflow 63 bits */
    tu_assert_error("ag_arange", "more than any tensor can hold");
    /* 2^40 elements fit the count but not any memory here: named by ag_arange with its bytes */
    assert_null(ag_arange(AG_F32, 0, 0x1p40, 1));
    tu_assert_error("ag_arange", "cannot allocate 4398046511104 bytes", "(1099511627776)", "out of memory");
    assert_null(ag_arange((ag_dtype)9, 0, 3, 1));
    tu_assert_error("ag_arange", "dtype 9");
    /* what stays valid, as torch.arange: an empty range, a descending one, a fractional step */
    tu_assert_shape(ag_arange(AG_F32, 2, 2, 1), 0);
    tu_assert_shape(ag_arange(AG_F32, 2, 2, -1), 0);
    tu_assert_values(ag_arange(AG_I64, 5, 0, -2), 0, 5, 3, 1);
    tu_assert_values(ag_arange(AG_F64, 0, 1, 0.25), 0, 0, 0.25, 0.5, 0.75);
    assert_int_equal(tu_error_count(), 0);
}

static void test_element_access_with_null_arguments_is_reported(void **s) {
    ag_tensor *t = ag_from_buffer(AG_F32, AG_SHAPE(2, 3), data);
    assert_true(isnan(ag_get(NULL, (int64_t[]){0, 0})));
    tu_assert_error("ag_get", "NULL");
    assert_true(isnan(ag_get(t, NULL)));
    tu_assert_error("ag_get", "index is NULL for (2,3)");
    ag_set(t, NULL, 9.0);
    tu_assert_error("ag_set", "index is NULL for (2,3)");
    ag_set(NULL, (int64_t[]){0, 0}, 9.0);
    tu_assert_error("ag_set", "NULL");
    float out[6];
    ag_to_buffer(NULL, AG_F32, out);
    tu_assert_error("ag_to_buffer", "NULL");
    ag_to_buffer(t, AG_F32, NULL);
    tu_assert_error("ag_wrap", "data is NULL", "(2,3)");
    /* the tensor is untouched, and a 0-d tensor takes a NULL index */
    tu_assert_values(t, 0, 1, 2, 3, 4, 5, 6);
    assert_true(ag_get(ag_scalar(AG_F64, 2.5), NULL) == 2.5);
    assert_int_equal(tu_error_count(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
        T(test_a_null_shape_with_dims_is_reported_by_every_constructor_and_view),
        T(test_negative_overflowing_and_unknown_arguments_are_reported),
        T(test_arange_that_never_ends_or_cannot_fit_is_reported),
        T(test_element_access_with_null_arguments_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
