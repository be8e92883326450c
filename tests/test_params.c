/* The parameter slab: one block of values, one parallel block of gradients. */
#include <string.h>

#include "test_util.h"

static void test_parameters_live_in_one_slab_with_parallel_gradients(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_tensor *w = ag_params_add(p, "linear.weight", AG_SHAPE(3, 2));
    ag_tensor *b = ag_params_add(p, "linear.bias", AG_SHAPE(3));
    assert_int_equal(p->count, 2);
    assert_string_equal(w->name, "linear.weight");
    assert_ptr_equal(ag_params_find(p, "linear.bias"), b);
    assert_null(ag_params_find(p, "linear.other"));
    /* both views of the same slab, 64-byte aligned, zero-initialised, requiring grad */
    assert_ptr_equal(w->data, p->data);
    assert_ptr_equal(b->data, p->data);
    assert_int_equal((uintptr_t)(b->data + b->offset * 4) % 64, 0);
    assert_ptr_equal(w->grad->data, p->grad);
    assert_int_equal(w->grad->offset, w->offset);
    assert_true(w->requires_grad && b->requires_grad);
    tu_assert_values(b, 0, 0, 0, 0);
    assert_int_equal(p->flat->shape[0], p->numel);
    assert_true(p->numel >= 6 + 3);
    ag_params_free(p);
}

static void test_values_survive_the_slab_growing(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_tensor *first = ag_params_add(p, "first", AG_SHAPE(4));
    ag_copy_(first, tu_tensor(AG_F64, AG_SHAPE(4), 1, 2, 3, 4));
    ag_fill_(first->grad, 0.5);
    char name[32];
    for (int i = 0; i < 40; i++) { /* far past the initial capacity */
        snprintf(name, sizeof name, "layer.%d.weight", i);
        assert_non_null(ag_params_add(p, name, AG_SHAPE(16, 16)));
    }
    tu_assert_values(first, 0, 1, 2, 3, 4);
    tu_assert_values(first->grad, 0, 0.5, 0.5, 0.5, 0.5);
    assert_ptr_equal(first->data, p->data);
    ag_params_zero_grad(p);
    tu_assert_values(first->grad, 0, 0, 0, 0, 0);
    ag_params_free(p);
}

static void test_gradients_of_a_parameter_land_in_the_gradient_slab(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(2));
    ag_copy_(w, tu_tensor(AG_F64, AG_SHAPE(2), 3, -1));
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2), 2, 5);
    ag_backward(ag_sum(ag_mul(ag_mul(w, w), x), 0, NULL, false), NULL); /* d/dw = 2 w x */
    const double *g = (const double *)p->grad + w->offset;
    assert_true(g[0] == 12 && g[1] == -10);
    ag_params_free(p);
}

static void test_duplicate_names_and_bad_dtype_are_misuse(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_params_add(p, "w", AG_SHAPE(2));
    assert_null(ag_params_add(p, "w", AG_SHAPE(3)));
    tu_assert_error("ag_params_add", "'w'", "already exists");
    assert_null(ag_params_new(AG_I64));
    tu_assert_error("ag_params_new", "i64");
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parameters_live_in_one_slab_with_parallel_gradients, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_values_survive_the_slab_growing, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gradients_of_a_parameter_land_in_the_gradient_slab, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_names_and_bad_dtype_are_misuse, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
