#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int errors;
static char last[1024];

static void record(const char *message, void *user) {
    (void)user;
    errors++;
    snprintf(last, sizeof last, "%s", message);
}

void tu_record_errors(void) {
    ag_set_error_handler(record, NULL);
    errors = 0;
    last[0] = 0;
}

int tu_error_count(void) { return errors; }

const char *tu_take_error(void) {
    if (errors == 0) fail_msg("expected an error to be reported, none was");
    errors = 0;
    return last;
}

void tu_assert_error_(const char *file, int line, const char **fragments) {
    if (errors != 1) {
        print_error("%s:%d: expected exactly one error, got %d (last: '%s')\n", file, line, errors, last);
        fail();
    }
    for (const char **f = fragments; *f; f++)
        if (!strstr(last, *f)) {
            print_error("%s:%d: error message '%s' does not contain '%s'\n", file, line, last, *f);
            fail();
        }
    errors = 0;
}

static ag_arena *test_arena;

int tu_setup(void **state) {
    (void)state;
    tu_record_errors();
    test_arena = ag_arena_new(1 << 20);
    ag_arena_use(test_arena);
    ag_set_grad_enabled(true);
    return 0;
}

int tu_teardown(void **state) {
    (void)state;
    if (errors) {
        print_error("unexpected error reported: %s\n", last);
        errors = 0;
        ag_arena_use(NULL);
        ag_arena_free(test_arena);
        return -1;
    }
    ag_arena_use(NULL);
    ag_arena_free(test_arena);
    return 0;
}

void tu_assert_shape_(const char *file, int line, const ag_tensor *t, int ndim, const int64_t *shape) {
    char b1[128];
    if (!t) {
        print_error("%s:%d: tensor is NULL (last error: %s)\n", file, line, last);
        fail();
    }
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        ag_shape_str(t, b1);
        print_error("%s:%d: shape %s, expected (", file, line, b1);
        for (int i = 0; i < ndim; i++) print_error(i ? ",%lld" : "%lld", (long long)shape[i]);
        print_error(")\n");
        fail();
    }
}

void tu_assert_values_(const char *file, int line, const ag_tensor *t, const double *expected, int64_t n,
                       double tol) {
    if (!t) {
        print_error("%s:%d: tensor is NULL (last error: %s)\n", file, line, last);
        fail();
    }
    if (ag_numel(t) != n) {
        print_error("%s:%d: %lld elements, expected %lld\n", file, line, (long long)ag_numel(t), (long long)n);
        fail();
    }
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ag_to_buffer(t, AG_F64, v);
    for (int64_t i = 0; i < n; i++) {
        bool same = (isnan(expected[i]) && isnan(v[i])) || (isinf(expected[i]) && v[i] == expected[i]) ||
                    fabs(v[i] - expected[i]) <= tol;
        if (!same) {
            print_error("%s:%d: element %lld is %.9g, expected %.9g (tol %g)\n", file, line, (long long)i, v[i],
                           expected[i], tol);
            free(v);
            fail();
        }
    }
    free(v);
}

ag_tensor *tu_tensor_(ag_dtype dt, int ndim, const int64_t *shape, const double *v, int64_t n) {
    assert_int_equal(ag_numel(ag_wrap(AG_F64, ndim, shape, (void *)v)), n);
    return ag_to(ag_from_buffer(AG_F64, ndim, shape, v), dt); /* a new tensor: version 0 */
}

ag_tensor *tu_leaf(ag_tensor *t) {
    ag_requires_grad_(t, true);
    return t;
}

void tu_fill_params(ag_params *p) {
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        ag_copy_(t, ag_mul_scalar(tu_seq(t->dtype, t->ndim, t->shape, 0.3 + 0.1 * k, 0.1 * k), 0.5));
    }
}

void tu_assert_same_(const char *file, int line, const ag_tensor *a, const ag_tensor *b, double tol) {
    if (ag_numel(a) != ag_numel(b)) {
        print_error("%s:%d: %lld elements, expected %lld\n", file, line, (long long)ag_numel(a), (long long)ag_numel(b));
        fail();
    }
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(ag_numel(b) + 1));
    ag_to_buffer(b, AG_F64, v);
    tu_assert_values_(file, line, a, v, ag_numel(b), tol);
}

void tu_assert_gradcheck_(const char *file, int line, ag_fn f, void *ctx, int n, ag_tensor **in) {
    ag_gradcheck_result r = ag_gradcheck(f, ctx, n, in, NULL);
    if (!r.ok) {
        print_error("%s:%d: %s\n", file, line, r.message);
        fail();
    }
}

ag_tensor *tu_seq(ag_dtype dt, int ndim, const int64_t *shape, double a, double c) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) v[i] = sin(a * (double)i + c);
    return ag_to(ag_from_buffer(AG_F64, ndim, shape, v), dt); /* a new tensor: version 0 */
}

void tu_assert_same_state(const ag_train_state *a, const ag_train_state *b) {
    assert_int_equal(a->global_step, b->global_step);
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->data_position, b->data_position);
    assert_int_equal(a->nrng, b->nrng);
    for (int i = 0; i < a->nrng; i++) {
        assert_string_equal(a->rng[i].name, b->rng[i].name);
        assert_int_equal(a->rng[i].rng.seed, b->rng[i].rng.seed);
        assert_int_equal(a->rng[i].rng.counter, b->rng[i].rng.counter);
    }
    assert_int_equal(a->nconfig, b->nconfig);
    for (int i = 0; i < a->nconfig; i++) {
        const ag_config_entry *x = &a->config[i], *y = &b->config[i];
        assert_string_equal(x->key, y->key);
        assert_int_equal(x->type, y->type);
        if (x->type == AG_CONFIG_INT) assert_int_equal(x->i, y->i);
        else if (x->type == AG_CONFIG_DOUBLE) assert_memory_equal(&x->d, &y->d, sizeof x->d);
        else {
            assert_int_equal(strlen(x->s), strlen(y->s));
            assert_memory_equal(x->s, y->s, strlen(x->s) + 1);
        }
    }
}

void tu_checkpoint_rehash(const char *path) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 512);
    unsigned char *d = malloc((size_t)n);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fread(d, 1, (size_t)n, f), (size_t)n);
    char head[512] = {0};
    snprintf(head, sizeof head, "attograd-checkpoint\nlength %ld\ncrc32 %08lx\n", n,
             crc32(0, d + 512, (uInt)(n - 512)));
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(head, 1, sizeof head, f), sizeof head);
    assert_int_equal(fclose(f), 0);
    free(d);
}

void tu_write_toy_corpus(const char *path, int lines, uint32_t seed) {
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    uint32_t x = seed;
    for (int i = 0; i < lines; i++) {
        char w[4];
        x = x * 1664525u + 1013904223u;
        int n = 2 + (int)(x >> 30) % 3;
        for (int k = 0; k < n; k++) x = x * 1664525u + 1013904223u, w[k] = (char)('a' + (x >> 24) % 6);
        for (int k = 0; k < n; k++) fprintf(f, k ? " %c" : "%c", w[k]);
        fputc('\t', f);
        for (int k = n - 1; k >= 0; k--) fprintf(f, k < n - 1 ? " %c" : "%c", w[k] - 'a' + 'A');
        fputc('\n', f);
    }
    if (fclose(f) != 0) fail_msg("cannot write %s", path);
}
