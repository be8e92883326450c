/* What the checkpoint tests (tests/test_checkpoint_*.c) share: a temporary directory per test
 * group, small parameter sets, whole-file reads and writes, hand edits with the raw HDF5 API,
 * and assert_load, which checks a load's status, message, silence and (for a failure) that
 * nothing it was given changed. */
#ifndef AG_TEST_CHECKPOINT_UTIL_H
#define AG_TEST_CHECKPOINT_UTIL_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#include "test_util.h"

/* the group's temporary directory (made by ckpt_group_setup, removed with all it holds by
 * ckpt_group_teardown) */
extern char tmpdir[64];
int ckpt_group_setup(void **state);
int ckpt_group_teardown(void **state);
/* "<tmpdir>/<name>" in one of 64 rotating buffers (a test holds a few at a time) */
const char *in_tmp(const char *name);

/* a.weight (4,3), a.bias (4), b.weight (2,4), filled with distinct values base + 0.25 i */
ag_params *small_params(ag_dtype dt, double base);
size_t slab_bytes(const ag_params *p);
/* t's first element */
void *first(const ag_tensor *t);

/* stderr into a file while HDF5 might print; then fail if anything was printed */
void stderr_capture(void);
void stderr_assert_empty(const char *file, int line);

/* the message of assert_load's last load */
extern char last_msg[4096];
/* Load and assert the status, that the message names path and holds every fragment, that
 * nothing was printed, and (for a failure) that params, opt and state are unchanged. */
#define assert_load(want, path, p, o, s, opts, ...)                                                             \
    assert_load_(__FILE__, __LINE__, (want), (path), (p), (o), (s), (opts), (const char *[]){__VA_ARGS__, NULL})
void assert_load_(const char *file, int line, ag_checkpoint_status want, const char *path, ag_params *p, ag_optim *o,
                  ag_train_state *s, const ag_checkpoint_load_opts *opts, const char **fragments);
/* save, failing the test with the message unless it succeeds with an empty one */
void save_ok(const char *path, const ag_params *p, const ag_optim *o, const ag_train_state *s);
/* fill(s), saved with a small model to tmp/name and loaded back into t (zeroed first) */
void config_round_trip(const char *name, void (*fill)(ag_train_state *), ag_train_state *s, ag_train_state *t);

/* whole files: read_all fails the test if path cannot be read; write_bytes says whether it
 * wrote (for forked workers, which must not fail a test), write_all_bytes fails if not */
void copy_file(const char *from, const char *to);
unsigned char *read_all(const char *path, size_t *n);
bool write_bytes(const char *path, const void *d, size_t n);
void write_all_bytes(const char *path, const void *d, size_t n);
/* text written to tmp/name; returns its path */
const char *write_text(const char *name, const char *text);
/* the offset of the first m bytes of d equal to pat; fails the test if there is none */
size_t find_bytes(const unsigned char *d, size_t n, const void *pat, size_t m);

/* copy a good checkpoint to tmp/name and open it with the raw HDF5 API for editing; then
 * close_edit closes it and rewrites its header, as a hand edit must */
hid_t edit_copy(const char *good, const char *name);
void close_edit(hid_t f);
/* a fixed-length string attribute (replacing one of that name), as other writers make them */
void set_fixed_string_attr(hid_t loc, const char *name, const char *value);

#endif
