/* The softmax row kernel's one summation order (tensor/softmax_rows.inc): ag_softmax and
 * ag_masked_softmax without a mask (or with a mask that masks nothing) give the same bits
 * forward and backward, at any stride and any row length around the lane width, and the
 * order stays accurate on a long row (a double-precision sum is the witness). */
#include <math.h>
#include <string.h>

#include "test_util.h"

static const int64_t LENGTHS[] = {1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 100};

/* Fails unless a and b (contiguous, one dtype and shape) hold the same bytes */
static void assert_same_bits(const ag_tensor *a, const ag_tensor *b) {
    assert_int_equal(ag_numel(a), ag_numel(b));
    assert_int_equal(a->dtype, b->dtype);
    ag_tensor *ca = ag_contiguous((ag_tensor *)a), *cb = ag_contiguous((ag_tensor *)b);
    size_t bytes = (size_t)ag_numel(a) * ag_dtype_size(a->dtype);
    assert_memory_equal(ca->data + ca->offset * ag_dtype_size(a->dtype),
                        cb->data + cb->offset * ag_dtype_size(a->dtype), bytes);
}

/* softmax(x) along dim by f, and the gradient of Σ softmax(x)*w with respect to x */
typedef ag_tensor *(*softmax_fn)(ag_tensor *x, int dim);
static ag_tensor *by_softmax(ag_tensor *x, int dim) { return ag_softmax(x, dim); }
static ag_tensor *by_masked_softmax(ag_tensor *x, int dim) { return ag_masked_softmax(x, NULL, dim); }
static ag_tensor *no_mask_tensor; /* a bool mask with nothing set, broadcast over the rows */
static ag_tensor *by_empty_mask(ag_tensor *x, int dim) { return ag_masked_softmax(x, no_mask_tensor, dim); }

static void run(softmax_fn f, ag_tensor *x0, ag_tensor *w, int dim, ag_tensor **y, ag_tensor **dx) {
    ag_tensor *x = tu_leaf(ag_contiguous(ag_detach(x0)));
    *y = f(x, dim);
    ag_backward(ag_sum(ag_mul(*y, w), 0, NULL, false), NULL);
    *dx = x->grad;
}

static void test_masked_softmax_without_a_mask_is_softmax_bit_for_bit(void **s) {
    (void)s;
    ag_rng rng = ag_rng_new(3);
    for (int d = 0; d < 2; d++) {
        ag_dtype dt = d ? AG_F64 : AG_F32;
        for (size_t i = 0; i < sizeof LENGTHS / sizeof *LENGTHS; i++) {
            int64_t n = LENGTHS[i];
            ag_tensor *x = ag_mul_scalar(ag_randn(&rng, dt, AG_SHAPE(5, n)), 8);
            ag_tensor *w = ag_randn(&rng, dt, AG_SHAPE(5, n));
            no_mask_tensor = ag_zeros(AG_BOOL, AG_SHAPE(1, n));
            ag_tensor *y1, *dx1, *y2, *dx2, *y3, *dx3;
            run(by_softmax, x, w, -1, &y1, &dx1);
            run(by_masked_softmax, x, w, -1, &y2, &dx2);
            run(by_empty_mask, x, w, -1, &y3, &dx3);
            assert_same_bits(y1, y2);
            assert_same_bits(y1, y3);
            assert_same_bits(dx1, dx2);
            assert_same_bits(dx1, dx3);
            ag_arena_reset(ag_arena_current());
        }
    }
}

/* softmax along dim 0 of x (strided rows) = softmax along -1 of xᵀ made contiguous */
static void test_strides_do_not_change_the_bits(void **s) {
    (void)s;
    ag_rng rng = ag_rng_new(4);
    for (int d = 0; d < 2; d++) {
        ag_dtype dt = d ? AG_F64 : AG_F32;
        for (size_t i = 0; i < sizeof LENGTHS / sizeof *LENGTHS; i++) {
            int64_t n = LENGTHS[i];
            ag_tensor *x = ag_mul_scalar(ag_randn(&rng, dt, AG_SHAPE(n, 6)), 5);
            ag_tensor *wt = ag_randn(&rng, dt, AG_SHAPE(6, n));
            ag_tensor *y1, *dx1, *y2, *dx2;
            run(by_softmax, x, ag_transpose(wt, 0, 1), 0, &y1, &dx1);
            run(by_softmax, ag_contiguous(ag_transpose(x, 0, 1)), wt, -1, &y2, &dx2);
            assert_same_bits(ag_transpose(y1, 0, 1), y2);
            assert_same_bits(ag_transpose(dx1, 0, 1), dx2);
            run(by_masked_softmax, x, ag_transpose(wt, 0, 1), 0, &y1, &dx1);
            assert_same_bits(ag_transpose(y1, 0, 1), y2);
            assert_same_bits(ag_transpose(dx1, 0, 1), dx2);
            ag_tensor *l1 = ag_log_softmax(x, 0), *l2 = ag_log_softmax(ag_contiguous(ag_transpose(x, 0, 1)), -1);
            assert_same_bits(ag_transpose(l1, 0, 1), l2);
            ag_arena_reset(ag_arena_current());
        }
    }
}

/* a row of 100 000 f32 logits (98 blocks of lanes): every probability within 2e-6 relative of
 * a double-precision softmax (ag__expf's 2 ulp and a lane's 64 + 98 additions), every
 * log-probability within 2e-7, and the probabilities sum to 1 within 1e-6 */
static void test_the_lanes_order_is_accurate_on_a_long_row(void **s) {
    (void)s;
    enum { N = 100000 };
    ag_rng rng = ag_rng_new(5);
    ag_tensor *x = ag_mul_scalar(ag_randn(&rng, AG_F32, AG_SHAPE(N)), 3);
    ag_tensor *y = ag_softmax(x, 0), *ly = ag_log_softmax(x, 0);
    const float *xv = (const float *)x->data, *yv = (const float *)y->data, *lv = (const float *)ly->data;
    double mx = -INFINITY, sum = 0, total = 0, worst = 0, worst_log = 0;
    for (int j = 0; j < N; j++) mx = xv[j] > mx ? xv[j] : mx;
    for (int j = 0; j < N; j++) sum += exp((double)xv[j] - mx);
    for (int j = 0; j < N; j++) {
        double ref = exp((double)xv[j] - mx) / sum, err = fabs(yv[j] - ref) / ref;
        double lref = (double)xv[j] - mx - log(sum), lerr = fabs(lv[j] - lref) / fmax(1, fabs(lref));
        worst = err > worst ? err : worst;
        worst_log = lerr > worst_log ? lerr : worst_log;
        total += yv[j];
    }
    assert_true(worst < 2e-6);
    assert_true(worst_log < 2e-7);
    assert_true(fabs(total - 1) < 1e-6);
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_masked_softmax_without_a_mask_is_softmax_bit_for_bit),
        T(test_strides_do_not_change_the_bits),
        T(test_the_lanes_order_is_accurate_on_a_long_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
