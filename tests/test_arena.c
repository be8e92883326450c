/* Arena safety: a tensor used after the reset or rewind that forgot it is reported (naming the
 * op, the tensor's shape and both generations), parameters and tensors of other arenas never
 * are, and an arena that grows without a reset warns once. The generations in the messages are
 * read from the stamps (tensor/op.h, tensor/internal.h) the check compares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tensor/internal.h"
#include "test_util.h"

/* the generation t was made in, and its arena's generation now */
static unsigned long long made_in(const ag_tensor *t) { return (unsigned long long)ag__state(t)->generation; }
static unsigned long long arena_now(const ag_tensor *t) {
    return (unsigned long long)ag__arena_gens[ag__state(t)->arena_slot].gen;
}

/* Fails unless exactly one error was reported, naming op, t's shape and dtype, t's generation,
 * the arena's generation now and what forgot it. */
static void assert_dead(const char *op, const char *shape, const ag_tensor *t, unsigned long long made,
                        const char *by) {
    char gen_then[64], gen_now[64];
    snprintf(gen_then, sizeof gen_then, "made in arena generation %llu,", made);
    snprintf(gen_now, sizeof gen_now, "(the arena is at generation %llu)", arena_now(t));
    tu_assert_error(op, shape, gen_then, gen_now, by);
}

static void test_op_given_a_tensor_from_before_a_reset_reports_both_generations(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(2, 3));
    unsigned long long made = made_in(x);
    ag_arena_reset(a);
    ag_tensor *y = ag_full(AG_F32, AG_SHAPE(2, 3), 7.0); /* the memory x's values were in */
    assert_true(arena_now(x) > made);
    assert_null(ag_add(x, y));
    assert_dead("ag_add: (2,3) f32 tensor", "(2,3) f32", x, made, "which ag_arena_reset");
    /* the other operand, an op with one input, and the new tensors themselves */
    assert_null(ag_mul(y, x));
    assert_dead("ag_mul", "(2,3) f32", x, made, "ag_arena_reset");
    assert_null(ag_exp(x));
    assert_dead("ag_exp", "(2,3) f32", x, made, "ag_arena_reset");
    tu_assert_values(ag_add(y, y), 0, 14, 14, 14, 14, 14, 14);
    assert_int_equal(tu_error_count(), 0);
}

static void test_a_tensor_from_the_step_before_is_reported_when_the_step_repeats_its_allocations(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *kept = NULL;
    unsigned long long made = 0;
    for (int step = 0; step < 3; step++) {
        ag_tensor *x = tu_leaf(ag_full(AG_F64, AG_SHAPE(4), step));
        ag_tensor *loss = ag_sum(ag_mul(x, ag_exp(x)), 0, NULL, false);
        ag_backward(loss, NULL); /* a rewind for every node: the step's headers go to both halves */
        tu_assert_values(x->grad, 1e-12, (1 + step) * exp(step), (1 + step) * exp(step), (1 + step) * exp(step),
                         (1 + step) * exp(step));
        if (kept) {
            /* the same allocations as the step that made kept, in the same order */
            assert_null(ag_add(loss, kept));
            assert_dead("ag_add", "() f64", kept, made, "ag_arena_reset");
        }
        kept = loss;
        made = made_in(loss);
        ag_arena_reset(a);
    }
}

static void test_views_of_a_forgotten_tensor_are_reported(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *x = ag_ones(AG_F64, AG_SHAPE(2, 3));
    ag_tensor *v = ag_transpose(x, 0, 1); /* a view made before the reset */
    unsigned long long made_x = made_in(x), made_v = made_in(v);
    ag_arena_reset(a);
    ag_tensor *y = ag_zeros(AG_F64, AG_SHAPE(3, 2));
    assert_null(ag_add(v, y));
    assert_dead("ag_add", "(3,2) f64", v, made_v, "ag_arena_reset");
    /* a view taken now of the forgotten tensor */
    assert_null(ag_transpose(x, 0, 1));
    assert_dead("ag_transpose", "(2,3) f64", x, made_x, "ag_arena_reset");
    assert_null(ag_view(x, AG_SHAPE(6)));
    assert_dead("ag_view", "(2,3) f64", x, made_x, "ag_arena_reset");
}

static void test_tensors_made_after_a_rewound_mark_are_reported_and_those_before_are_not(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *before = ag_full(AG_F32, AG_SHAPE(3), 2.0);
    ag_arena_mark m = ag_arena_get_mark(a);
    ag_tensor *inside = ag_mul(before, before), *inside_view = ag_unsqueeze(inside, 0);
    unsigned long long made = made_in(inside), made_view = made_in(inside_view);
    ag_arena_rewind(a, m);
    tu_assert_values(ag_add(before, before), 0, 4, 4, 4);
    assert_null(ag_add(before, inside));
    assert_dead("ag_add", "(3) f32", inside, made, "which ag_arena_rewind");
    assert_null(ag_squeeze(inside_view, 0));
    assert_dead("ag_squeeze", "(1,3) f32", inside_view, made_view, "ag_arena_rewind");
    /* a decoding loop: each iteration rewinds to the same mark, and what one iteration made is
     * dead in the next; what ag_arena_rewind_keep kept is not */
    ag_tensor *prev = NULL;
    unsigned long long made_prev = 0;
    for (int i = 0; i < 4; i++) {
        ag_arena_mark it = ag_arena_get_mark(a);
        ag_tensor *step = ag_add_scalar(before, i);
        tu_assert_values(step, 0, 2 + i, 2 + i, 2 + i);
        if (prev) {
            assert_null(ag_add(step, prev));
            assert_dead("ag_add", "(3) f32", prev, made_prev, "ag_arena_rewind");
        }
        prev = step;
        made_prev = made_in(step);
        ag_arena_rewind(a, it);
    }
    ag_arena_mark k = ag_arena_get_mark(a);
    ag_tensor *kept = ag_arena_rewind_keep(a, k, ag_mul_scalar(before, 3.0));
    tu_assert_values(ag_add(kept, before), 0, 8, 8, 8);
    assert_int_equal(tu_error_count(), 0);
}

static void test_parameters_and_other_arenas_are_never_stale(void **s) {
    ag_arena *a = ag_arena_current();
    ag_params *p = ag_params_new(AG_F64);
    ag_tensor *w = ag_params_add(p, "w", AG_SHAPE(2));
    ag_fill_(w, 1.5);
    ag_arena *other = ag_arena_new(4096);
    ag_arena_use(other);
    ag_tensor *c = ag_full(AG_F64, AG_SHAPE(2), 2.0);
    ag_arena_use(a);
    ag_tensor row = *w; /* a header on the stack: no arena */
    for (int step = 0; step < 3; step++) {
        ag_arena_mark m = ag_arena_get_mark(a);
        ag_tensor *x = ag_full(AG_F64, AG_SHAPE(2), step);
        ag_tensor *loss = ag_sum(ag_mul(ag_mul(w, x), c), 0, NULL, false);
        ag_backward(loss, NULL);
        assert_true(ag_item(loss) == 2 * 1.5 * step * 2.0);
        tu_assert_values(ag_add(&row, c), 0, 3.5, 3.5);
        ag_arena_rewind(a, m);
        ag_arena_reset(a);
    }
    /* the gradient slab accumulated x * c over the steps: 0 + 2 + 4 */
    tu_assert_values(w->grad, 0, 6, 6);
    assert_int_equal(tu_error_count(), 0);
    ag_arena_free(other);
    ag_params_free(p);
}

/* A tensor of a freed arena is reported as one forgotten by a reset, without touching the
 * freed memory (AddressSanitizer reported a heap-use-after-free in the check itself): the
 * arena's headers stay the library's, for the next ag_arena_new. Also after that new arena
 * has made tensors of its own. */
static void test_a_tensor_of_a_freed_arena_is_reported_without_reading_freed_memory(void **s) {
    ag_arena *a = ag_arena_current(), *b = ag_arena_new(4096);
    ag_arena_use(b);
    ag_tensor *x = ag_full(AG_F32, AG_SHAPE(2, 3), 2.0), *v = ag_transpose(x, 0, 1);
    unsigned long long made = made_in(x);
    ag_arena_use(a);
    ag_arena_free(b);
    ag_tensor *y = ag_ones(AG_F32, AG_SHAPE(2, 3));
    assert_null(ag_add(x, y));
    assert_dead("ag_add", "(2,3) f32", x, made, "ag_arena_reset (or ag_arena_free)");
    assert_null(ag_contiguous(v));
    assert_dead("ag_contiguous", "(3,2) f32", v, made, "ag_arena_free");
    ag_arena *c = ag_arena_new(4096); /* may take b's headers */
    ag_arena_use(c);
    for (int i = 0; i < 4; i++) tu_assert_values(ag_add(ag_ones(AG_F32, AG_SHAPE(1)), ag_ones(AG_F32, AG_SHAPE(1))), 0, 2);
    assert_null(ag_mul(x, x));
    assert_dead("ag_mul", "(2,3) f32", x, made, "ag_arena_free");
    ag_arena_use(a);
    ag_arena_free(c);
    assert_int_equal(tu_error_count(), 0);
}

/* Reading and writing values directly (ag_get, ag_set, ag_item, ag_to_buffer, ag_fprint, the
 * fills) checks the tensor as every op does: a forgotten one is reported, nothing is read or
 * written. */
static void test_element_access_to_a_forgotten_tensor_is_reported(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *x = ag_full(AG_F64, AG_SHAPE(2, 2), 3.0), *one = ag_scalar(AG_F64, 4.0);
    unsigned long long made = made_in(x);
    ag_arena_reset(a);
    ag_tensor *y = ag_full(AG_F64, AG_SHAPE(2, 2), 7.0); /* where x's values were */
    assert_true(isnan(ag_get(x, (int64_t[]){0, 1})));
    assert_dead("ag_get", "(2,2) f64", x, made, "ag_arena_reset");
    ag_set(x, (int64_t[]){0, 1}, 5.0);
    assert_dead("ag_set", "(2,2) f64", x, made, "ag_arena_reset");
    assert_true(isnan(ag_item(one)));
    assert_dead("ag_item", "() f64", one, made, "ag_arena_reset");
    double out[4] = {0};
    ag_to_buffer(x, AG_F64, out);
    assert_dead("ag_to_buffer", "(2,2) f64", x, made, "ag_arena_reset");
    assert_true(out[0] == 0 && out[3] == 0);
    ag_fprint(stderr, x, "x");
    assert_dead("ag_fprint", "(2,2) f64", x, made, "ag_arena_reset");
    ag_fill_(x, 1.0);
    assert_dead("ag_fill_", "(2,2) f64", x, made, "ag_arena_reset");
    ag_uniform_(NULL, x, 0, 1);
    assert_dead("ag_uniform_", "(2,2) f64", x, made, "ag_arena_reset");
    ag_normal_(NULL, x, 0, 1);
    assert_dead("ag_normal_", "(2,2) f64", x, made, "ag_arena_reset");
    assert_null(ag_zeros_like(x));
    assert_dead("ag_zeros_like", "(2,2) f64", x, made, "ag_arena_reset");
    tu_assert_values(y, 0, 7, 7, 7, 7); /* nothing was written */
}

/* an op of this test's own: y = 2x, checked only where every op's inputs pass (ag_finish) */
static void twice_backward(ag_node *n) { ag_accum_grad(n->in[0], ag_mul_scalar(n->out->grad, 2.0)); }
static const ag_op TWICE = {"twice", twice_backward, AG_SAVES_NONE};
static ag_tensor *twice(ag_tensor *x) {
    ag_tensor *y = ag__new(x->dtype, x->ndim, x->shape);
    ag_fill_(y, 0.0);
    ag_finish(&TWICE, y, 1, &x);
    return y;
}

static void test_a_new_op_gets_the_check_from_ag_finish(void **s) {
    ag_arena *a = ag_arena_current();
    ag_tensor *x = tu_leaf(ag_ones(AG_F64, AG_SHAPE(4)));
    assert_non_null(twice(x)->node);
    unsigned long long made = made_in(x);
    ag_arena_reset(a);
    ag_tensor *y = twice(x);
    assert_dead("twice", "(4) f64", x, made, "ag_arena_reset");
    assert_null(y->node); /* nothing recorded */
}

/* stderr into a file while fn runs; returns what it printed (static buffer) */
static const char *stderr_of(void (*fn)(void)) {
    static char out[4096];
    char path[] = "/tmp/ag_arena_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return out;
}

static int count(const char *text, const char *word) {
    int n = 0;
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) n++;
    return n;
}

/* 3 MiB in 64 KiB tensors, twice, without a reset; then the same after a reset */
static void grow_without_reset(void) {
    ag_arena *a = ag_arena_new(1 << 16);
    ag_arena_set_growth_warning(a, (size_t)1 << 20);
    ag_arena *prev = ag_arena_use(a);
    for (int i = 0; i < 96; i++) ag_empty(AG_F64, AG_SHAPE(8192));
    ag_arena_reset(a); /* a reset does not re-arm it: one warning per arena */
    for (int i = 0; i < 96; i++) ag_empty(AG_F64, AG_SHAPE(8192));
    ag_arena_use(prev);
    ag_arena_free(a);
}

static void grow_with_resets(void) {
    ag_arena *a = ag_arena_new(1 << 16);
    ag_arena_set_growth_warning(a, (size_t)1 << 20);
    ag_arena *prev = ag_arena_use(a);
    for (int step = 0; step < 8; step++) {
        for (int i = 0; i < 8; i++) ag_empty(AG_F64, AG_SHAPE(8192)); /* 512 KiB a step */
        ag_arena_reset(a);
    }
    ag_arena_use(prev);
    ag_arena_free(a);
}

static void grow_default_threshold(void) {
    ag_arena *a = ag_arena_new(1 << 16);
    ag_arena *prev = ag_arena_use(a);
    for (int i = 0; i < 512; i++) ag_empty(AG_F64, AG_SHAPE(8192)); /* 32 MiB */
    ag_arena_use(prev);
    ag_arena_free(a);
}

static void test_an_arena_growing_past_its_threshold_without_a_reset_warns_once(void **s) {
    const char *out = stderr_of(grow_without_reset);
    assert_int_equal(count(out, "attograd: warning:"), 1);
    assert_non_null(strstr(out, "ag_arena_reset"));
    assert_non_null(strstr(out, "threshold of 1 MiB (ag_arena_set_growth_warning)"));
    assert_string_equal(stderr_of(grow_with_resets), "");
    assert_string_equal(stderr_of(grow_default_threshold), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
        T(test_op_given_a_tensor_from_before_a_reset_reports_both_generations),
        T(test_a_tensor_from_the_step_before_is_reported_when_the_step_repeats_its_allocations),
        T(test_views_of_a_forgotten_tensor_are_reported),
        T(test_tensors_made_after_a_rewound_mark_are_reported_and_those_before_are_not),
        T(test_parameters_and_other_arenas_are_never_stale),
        T(test_a_tensor_of_a_freed_arena_is_reported_without_reading_freed_memory),
        T(test_element_access_to_a_forgotten_tensor_is_reported),
        T(test_a_new_op_gets_the_check_from_ag_finish),
        T(test_an_arena_growing_past_its_threshold_without_a_reset_warns_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
