/* ag_checkpoint_average (nn/checkpoint/checkpoint.h): the element-wise mean of checkpoints'
 * parameters. Witnesses: hand-picked values whose mean is exact, the mean of random values
 * computed here in long double, and copies of one checkpoint, which must come back bit for bit. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

static char dir[64];

static const char *in_dir(const char *name) {
    static char buf[8][128];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int group_setup(void **state) {
    strcpy(dir, "/tmp/ag_avg_XXXXXX");
    return mkdtemp(dir) ? tu_setup(state) : -1;
}

static int group_teardown(void **state) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return -1;
    return tu_teardown(state);
}

/* "w" (2, 3) and "b" (4): 10 values; rows named as a model's would be */
static ag_params *two_params(ag_dtype dt, int64_t b_len) {
    ag_params *p = ag_params_new(dt);
    ag_params_add(p, "layer.weight", AG_SHAPE(2, 3));
    ag_params_add(p, "layer.bias", AG_SHAPE(b_len));
    return p;
}

/* element i of the parameters in order (skipping the slab's alignment padding) */
static double *value_at(ag_params *p, int i, float **f32) {
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        if (i < ag_numel(t)) {
            if (p->dtype == AG_F32) {
                *f32 = (float *)p->data + t->offset + i;
                return NULL;
            }
            *f32 = NULL;
            return (double *)p->data + t->offset + i;
        }
        i -= (int)ag_numel(t);
    }
    fail_msg("element %d is past the parameters", i);
    return NULL;
}

static void set_values(ag_params *p, const double *v, int n) {
    for (int i = 0; i < n; i++) {
        float *f;
        double *d = value_at(p, i, &f);
        if (f) *f = (float)v[i];
        else *d = v[i];
    }
}

static void save(ag_params *p, const char *path) {
    char msg[1024];
    ag_checkpoint_save_opts o = {.no_fsync = true};
    assert_int_equal(ag_checkpoint_save(path, p, NULL, NULL, &o, msg, sizeof msg), AG_CHECKPOINT_OK);
}

static void test_average_of_copies_gives_the_values_back_bit_for_bit(void **state) {
    (void)state;
    /* values a sum-then-divide in float would not keep: 0.1 and 1/3 round, FLT_MAX overflows,
     * the subnormal and -0 have few or no bits to spare */
    const double v[10] = {0.1f, 1.0f / 3.0f, -0.0, FLT_MAX, -FLT_MAX, 1e-40f, FLT_MIN, 3.0f, -2.5e-7f, 12345.678f};
    for (int dt = 0; dt < 2; dt++) {
        ag_params *p = two_params(dt ? AG_F64 : AG_F32, 4);
        set_values(p, v, 10);
        if (dt) { /* f64 values that need all 53 bits */
            double *w = (double *)p->data + p->list[0]->offset;
            w[0] = 0.1, w[1] = 1.0 / 3.0, w[2] = M_PI, w[3] = DBL_MAX, w[4] = -DBL_MIN / 3;
        }
        size_t bytes = (size_t)p->numel * ag_dtype_size(p->dtype);
        char *want = malloc(bytes);
        memcpy(want, p->data, bytes);
        save(p, in_dir("one.h5"));
        memset(p->data, 0x5a, bytes); /* whatever params held before does not matter */
        const char *paths[7];
        for (int k = 0; k < 7; k++) paths[k] = in_dir("one.h5");
        char msg[1024];
        for (int n = 1; n <= 7; n += 3) {
            assert_int_equal(ag_checkpoint_average(paths, n, p, msg, sizeof msg), AG_CHECKPOINT_OK);
            assert_string_equal(msg, "");
            for (int k = 0; k < p->count; k++) { /* the padding between parameters is no file's */
                size_t at = (size_t)p->list[k]->offset * ag_dtype_size(p->dtype);
                assert_memory_equal(p->data + at, want + at, (size_t)ag_numel(p->list[k]) * ag_dtype_size(p->dtype));
            }
        }
        free(want);
        ag_params_free(p);
    }
}

static void test_average_is_the_elementwise_mean(void **state) {
    (void)state;
    ag_params *p = two_params(AG_F32, 4);
    /* three files whose means are exact in float: (1 + 2 + 6) / 3 = 3, (0.5 + 0.25 - 0.75) / 3 = 0, ... */
    const double f[3][10] = {{1, 0.5, -4, 8, 0, 1.5, 100, -1, 0.125, 7},
                             {2, 0.25, -4, 16, 0, 1.5, 200, -2, 0.25, 7},
                             {6, -0.75, -4, 0, 3, 1.5, 300, -3, 0.375, 7}};
    const double mean[10] = {3, 0, -4, 8, 1, 1.5, 200, -2, 0.25, 7};
    const char *paths[3] = {in_dir("f0.h5"), in_dir("f1.h5"), in_dir("f2.h5")};
    for (int k = 0; k < 3; k++) {
        set_values(p, f[k], 10);
        save(p, paths[k]);
    }
    char msg[1024];
    assert_int_equal(ag_checkpoint_average(paths, 3, p, msg, sizeof msg), AG_CHECKPOINT_OK);
    for (int i = 0; i < 10; i++) {
        float *x;
        value_at(p, i, &x);
        assert_true(*x == (float)mean[i]);
    }
    /* random values: the mean in long double, rounded once to float, within one unit of the
     * last place (the running mean in double rounds a few times before that) */
    ag_rng r = ag_rng_new(7);
    long double sum[10] = {0};
    const char *many[5];
    for (int k = 0; k < 5; k++) {
        double u[10];
        ag_rng_normal_f64(&r, 10, u);
        for (int i = 0; i < 10; i++) {
            u[i] = (float)(u[i] * pow(10, i - 5));
            sum[i] += u[i];
        }
        set_values(p, u, 10);
        char name[16];
        snprintf(name, sizeof name, "r%d.h5", k);
        save(p, many[k] = in_dir(name));
    }
    assert_int_equal(ag_checkpoint_average(many, 5, p, msg, sizeof msg), AG_CHECKPOINT_OK);
    for (int i = 0; i < 10; i++) {
        float *x, want = (float)(sum[i] / 5);
        value_at(p, i, &x);
        assert_true(*x == want || *x == nextafterf(want, INFINITY) || *x == nextafterf(want, -INFINITY));
    }
    ag_params_free(p);
}

static void test_average_refuses_another_model_and_changes_nothing(void **state) {
    (void)state;
    ag_params *p = two_params(AG_F32, 4), *other = two_params(AG_F32, 5);
    const double v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    set_values(p, v, 10);
    save(p, in_dir("good.h5"));
    save(other, in_dir("other.h5"));
    size_t bytes = (size_t)p->numel * 4;
    char *before = malloc(bytes), msg[1024];
    memcpy(before, p->data, bytes);
    const char *paths[3] = {in_dir("good.h5"), in_dir("good.h5"), in_dir("other.h5")};
    assert_int_equal(ag_checkpoint_average(paths, 3, p, msg, sizeof msg), AG_CHECKPOINT_EMISMATCH);
    assert_non_null(strstr(msg, "other.h5")); /* the file, the parameter and both shapes */
    assert_non_null(strstr(msg, "layer.bias"));
    assert_non_null(strstr(msg, "(5)"));
    assert_null(strchr(msg, '\n'));
    assert_memory_equal(p->data, before, bytes);
    const char *missing[2] = {in_dir("good.h5"), in_dir("missing.h5")};
    assert_int_equal(ag_checkpoint_average(missing, 2, p, msg, sizeof msg), AG_CHECKPOINT_EIO);
    assert_non_null(strstr(msg, "missing.h5"));
    assert_memory_equal(p->data, before, bytes);
    assert_int_equal(ag_checkpoint_average(paths, 0, p, msg, sizeof msg), AG_CHECKPOINT_EINVAL);
    assert_int_equal(ag_checkpoint_average(NULL, 1, p, msg, sizeof msg), AG_CHECKPOINT_EINVAL);
    assert_memory_equal(p->data, before, bytes);
    free(before);
    ag_params_free(p);
    ag_params_free(other);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_average_of_copies_gives_the_values_back_bit_for_bit),
        cmocka_unit_test(test_average_is_the_elementwise_mean),
        cmocka_unit_test(test_average_refuses_another_model_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
