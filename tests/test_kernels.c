/* The hand-written kernels under the ops. ag__expf (tensor/fastmath.h) against libm's expf.
 * ag__sgemm (tensor/gemm.h), attograd's own AVX-512 kernel where the CPU has it: every
 * transpose combination, sizes around the kernel's tile and block edges, padded leading
 * dimensions, alpha and beta (beta 0 must ignore NaN in C), checked element by element
 * against a double-precision triple loop (the witness) with a bound from Σ|a||b|. Also the
 * thread-count independence the library promises: 1 and 2 OpenMP threads give the same bits. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/fastmath.h"
#include "../tensor/gemm.h"
#include "test_util.h"

/* distance in units in the last place, for finite floats of one sign */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static void test_expf_within_two_ulp_of_libm_and_zero_below_the_normal_range(void **s) {
    int64_t worst = 0;
    float at = 0;
    for (int i = 0; i <= 1 << 22; i++) { /* 4M points evenly over the range, in double then rounded */
        float x = (float)(-87.33 + (88.37 + 87.33) * i / (double)(1 << 22));
        int64_t u = ulps(ag__expf(x), expf(x));
        if (u > worst) worst = u, at = x;
    }
    if (worst > 2) fail_msg("ag__expf is %lld ulp from expf at %.9g", (long long)worst, at);
    assert_true(ag__expf(-INFINITY) == 0.0f);
    assert_true(ag__expf(-88.0f) == 0.0f);
    assert_true(ag__expf(0.0f) == 1.0f);
    assert_true(isnan(ag__expf(NAN)));
}

static float val(uint32_t *s) { /* xorshift: the test's own numbers in [-1, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)((*s >> 8) * (2.0 / 16777216.0) - 1.0);
}

/* returns the number of elements outside the bound */
static int check_one(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta, uint32_t seed) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    int64_t ar = ta ? k : m, br = tb ? n : k;
    float *a = malloc(sizeof(float) * (size_t)(ar * lda)), *b = malloc(sizeof(float) * (size_t)(br * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    for (int64_t i = 0; i < ar * lda; i++) a[i] = val(&seed);
    for (int64_t i = 0; i < br * ldb; i++) b[i] = val(&seed);
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = c[i] = beta == 0 ? NAN : val(&seed);
    ag__sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p], y = tb ? b[j * ldb + p] : b[p * ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            double old = beta == 0 ? 0 : beta * (double)c0[i * ldc + j], want = alpha * s + old;
            double tol = 1e-6 * (fabs(alpha) * mag + fabs(old)) + 1e-7 * (double)k + 1e-30;
            if (!(fabs(c[i * ldc + j] - want) <= tol)) bad++;
        }
        for (int64_t j = n; j < ldc; j++) /* padding past n untouched */
            if (!(c[i * ldc + j] == c0[i * ldc + j] || (isnan(c[i * ldc + j]) && isnan(c0[i * ldc + j])))) bad++;
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    return bad;
}

static void test_sgemm_matches_double_reference_for_every_transpose_and_edge_size(void **s) {
    const int64_t sizes[] = {1, 7, 8, 9, 31, 32, 33, 63, 65, 100};
    uint32_t seed = 12345;
    for (int t = 0; t < 4; t++)
        for (int im = 0; im < 10; im++)
            for (int in = 0; in < 10; in += 3)
                for (int ik = 0; ik < 10; ik += 4) {
                    int bad = check_one(t & 1, t & 2, sizes[im], sizes[in], sizes[ik], 1.0f, 0.0f, seed++);
                    if (bad) fail_msg("ta=%d tb=%d m=%lld n=%lld k=%lld: %d elements off", t & 1, !!(t & 2),
                                      (long long)sizes[im], (long long)sizes[in], (long long)sizes[ik], bad);
                }
}

static void test_sgemm_spans_several_k_slices_and_row_blocks_with_alpha_and_beta(void **s) {
    const float ab[][2] = {{1, 1}, {0.375f, 0}, {-2, 0.5f}};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 3; i++) {
            int bad = check_one(t & 1, t & 2, 150, 290, 800, ab[i][0], ab[i][1], 99u + (uint32_t)(t * 3 + i));
            if (bad)
                fail_msg("ta=%d tb=%d alpha=%g beta=%g: %d elements off", t & 1, !!(t & 2), ab[i][0], ab[i][1], bad);
        }
}

/* ag_linear's forward: the bias row added in the kernel equals bias + the plain product, bit for bit */
static void test_sgemm_bias_adds_the_row_to_the_plain_product(void **s) {
    const int64_t dims[][3] = {{5, 7, 9}, {40, 33, 64}, {300, 70, 130}};
    uint32_t seed = 3;
    for (int d = 0; d < 3; d++) {
        int64_t m = dims[d][0], n = dims[d][1], k = dims[d][2];
        float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(n * k));
        float *bias = malloc(sizeof(float) * (size_t)n), *c1 = malloc(sizeof(float) * (size_t)(m * n));
        float *c2 = malloc(sizeof(float) * (size_t)(m * n));
        for (int64_t i = 0; i < m * k; i++) a[i] = val(&seed);
        for (int64_t i = 0; i < n * k; i++) b[i] = val(&seed);
        for (int64_t j = 0; j < n; j++) bias[j] = val(&seed);
        ag__sgemm_bias(false, true, m, n, k, a, k, b, k, bias, c1, n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c2[i * n + j] = bias[j];
        ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 1.0f, c2, n);
        assert_memory_equal(c1, c2, sizeof(float) * (size_t)(m * n));
        free(a);
        free(b);
        free(bias);
        free(c1);
        free(c2);
    }
}

static void test_sgemm_results_do_not_depend_on_thread_count(void **s) {
    int64_t m = 300, n = 260, k = 700;
    uint32_t seed = 7;
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *b = malloc(sizeof(float) * (size_t)(k * n));
    float *c1 = malloc(sizeof(float) * (size_t)(m * n)), *c2 = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) a[i] = val(&seed);
    for (int64_t i = 0; i < k * n; i++) b[i] = val(&seed);
    int prev = omp_get_max_threads();
    omp_set_num_threads(1);
    ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c1, n);
    omp_set_num_threads(2);
    ag__sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c2, n);
    omp_set_num_threads(prev);
    assert_memory_equal(c1, c2, sizeof(float) * (size_t)(m * n));
    free(a);
    free(b);
    free(c1);
    free(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_within_two_ulp_of_libm_and_zero_below_the_normal_range),
        cmocka_unit_test(test_sgemm_matches_double_reference_for_every_transpose_and_edge_size),
        cmocka_unit_test(test_sgemm_spans_several_k_slices_and_row_blocks_with_alpha_and_beta),
        cmocka_unit_test(test_sgemm_bias_adds_the_row_to_the_plain_product),
        cmocka_unit_test(test_sgemm_results_do_not_depend_on_thread_count),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
