/* Shared by the cmocka tests: an error handler that records instead of aborting, and tensor
 * comparisons against expected values. */
#ifndef AG_TEST_UTIL_H
#define AG_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "attograd.h"
#include "tensor/node.h" /* tests look into the recorded nodes (op authors' view, op.h) */

/* Install the recording handler (call in setup); errors are then counted, not fatal. */
void tu_record_errors(void);
/* Errors recorded since the last tu_record_errors / tu_take_error. */
int tu_error_count(void);
/* The last recorded message, and reset the count. Fails the test if none was recorded. */
const char *tu_take_error(void);
/* Fails unless exactly one error was recorded whose message contains every fragment. */
#define tu_assert_error(...) tu_assert_error_(__FILE__, __LINE__, (const char *[]){__VA_ARGS__, NULL})
void tu_assert_error_(const char *file, int line, const char **fragments);

/* cmocka group setup/teardown: records errors, fresh arena per test. */
int tu_setup(void **state);
int tu_teardown(void **state);

/* Fails unless t has this shape. */
#define tu_assert_shape(t, ...) tu_assert_shape_(__FILE__, __LINE__, (t), AG_SHAPE(__VA_ARGS__))
void tu_assert_shape_(const char *file, int line, const ag_tensor *t, int ndim, const int64_t *shape);
/* Fails unless every element of t (any dtype, read in row-major order through its strides)
 * is within tol of expected. */
void tu_assert_values_(const char *file, int line, const ag_tensor *t, const double *expected, int64_t n,
                       double tol);
#define tu_assert_values(t, tol, ...)                                                                   \
    tu_assert_values_(__FILE__, __LINE__, (t), (const double[]){__VA_ARGS__},                         \
                      (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)), (tol))
/* Tensor from a list of values: tu_tensor(AG_F32, AG_SHAPE(2,2), 1,2,3,4) */
#define tu_tensor(dt, shape, ...)                                                                        \
    tu_tensor_((dt), shape, (const double[]){__VA_ARGS__},                                             \
               (int64_t)(sizeof((const double[]){__VA_ARGS__}) / sizeof(double)))
ag_tensor *tu_tensor_(ag_dtype dt, int ndim, const int64_t *shape, const double *v, int64_t n);

/* Fails unless t's elements are within tol of the array arr (its length from sizeof). */
#define tu_assert_array(t, arr, tol)                                                               \
    tu_assert_values_(__FILE__, __LINE__, (t), (arr), (int64_t)(sizeof(arr) / sizeof(*(arr))), (tol))
/* A tensor of the given shape whose element i is sin(a*i + c): deterministic, non-trivial. */
ag_tensor *tu_seq(ag_dtype dt, int ndim, const int64_t *shape, double a, double c);

/* t's first element: its data at its offset */
static inline const void *tu_raw(const ag_tensor *t) {
    return t->data + t->offset * (int64_t)ag_dtype_size(t->dtype);
}
/* t, marked as requiring grad */
ag_tensor *tu_leaf(ag_tensor *t);
/* Parameter k of p (in its order) := tu_seq(its shape, 0.3 + 0.1k, 0.1k) * 0.5, what
 * `for k, (n, p) in enumerate(m.named_parameters()): p.copy_(tu_seq(p.shape, ...) * 0.5)` gives
 * a torch module: the recurrent tests' witness values use it. */
void tu_fill_params(ag_params *p);
/* Fails unless a and b have as many elements and those are within tol, in row-major order. */
#define tu_assert_same(a, b, tol) tu_assert_same_(__FILE__, __LINE__, (a), (b), (tol))
void tu_assert_same_(const char *file, int line, const ag_tensor *a, const ag_tensor *b, double tol);
/* Fails with gradcheck's message unless ag_gradcheck (PyTorch's defaults) passes. */
#define tu_assert_gradcheck(f, ctx, n, in) tu_assert_gradcheck_(__FILE__, __LINE__, (f), (ctx), (n), (in))
void tu_assert_gradcheck_(const char *file, int line, ag_fn f, void *ctx, int n, ag_tensor **in);

/* Fails unless a and b hold the same training state: position, rngs, and config entries in
 * the same order with the same keys, types and values (doubles bit for bit, strings by bytes). */
void tu_assert_same_state(const ag_train_state *a, const ag_train_state *b);

/* What docs/checkpoint.md asks of a checkpoint edited by hand: its header (the first 512 bytes)
 * rewritten with the file's length and the CRC-32 of every byte after it. zlib's crc32 computes
 * it here, a witness independent of the library's own. */
void tu_checkpoint_rehash(const char *path);

/* The translation programs' toy task, `lines` pairs drawn from seed: 2-4 letters of a-f to the
 * same letters in capitals, reversed ("a b c" -> "C B A"), so every word of a translation must
 * come from the target vocabulary. Written to path as TSV; fails the test if it cannot be. */
void tu_write_toy_corpus(const char *path, int lines, uint32_t seed);

#endif
