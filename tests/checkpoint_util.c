/* What the checkpoint tests share (tests/checkpoint_util.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_util.h"

char tmpdir[64];
static char stderr_file[128];

/* "<tmpdir>/<name>" in one of 64 rotating buffers (a test holds a few at a time) */
const char *in_tmp(const char *name) {
    static char buf[64][512];
    static int k;
    k = (k + 1) % 64;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    chmod(path, 0700);
    return remove(path);
}

int ckpt_group_setup(void **state) {
    strcpy(tmpdir, "/tmp/ag_ckpt_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(stderr_file, sizeof stderr_file, "%s/stderr.txt", tmpdir);
    return 0;
}

int ckpt_group_teardown(void **state) {
    chmod(tmpdir, 0700);
    return nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* a.weight (4,3), a.bias (4), b.weight (2,4), filled with distinct values base + 0.25 i */
ag_params *small_params(ag_dtype dt, double base) {
    ag_params *p = ag_params_new(dt);
    ag_params_add(p, "a.weight", AG_SHAPE(4, 3));
    ag_params_add(p, "a.bias", AG_SHAPE(4));
    ag_params_add(p, "b.weight", AG_SHAPE(2, 4));
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        for (int64_t i = t->offset; i < t->offset + ag_numel(t); i++) {
            double v = base + 0.25 * (double)i;
            if (dt == AG_F32) ((float *)p->data)[i] = (float)v;
            else ((double *)p->data)[i] = v;
        }
    }
    return p;
}

size_t slab_bytes(const ag_params *p) { return (size_t)p->numel * ag_dtype_size(p->dtype); }

void *first(const ag_tensor *t) { return t->data + (size_t)t->offset * ag_dtype_size(t->dtype); }

/* stderr into a file while HDF5 might print, to prove it does not */
static int saved_stderr = -1;
void stderr_capture(void) {
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(stderr_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}

void stderr_assert_empty(const char *file, int line) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    struct stat st;
    if (stat(stderr_file, &st) == 0 && st.st_size > 0) {
        char buf[512] = {0};
        FILE *f = fopen(stderr_file, "r");
        if (f) fread(buf, 1, sizeof buf - 1, f), fclose(f);
        print_error("%s:%d: something was printed to stderr: %s\n", file, line, buf);
        fail();
    }
}

char last_msg[4096];

void assert_load_(const char *file, int line, ag_checkpoint_status want, const char *path, ag_params *p, ag_optim *o,
                         ag_train_state *s, const ag_checkpoint_load_opts *opts, const char **fragments) {
    size_t bytes = p ? slab_bytes(p) : 0;
    char *before = p ? malloc(bytes + 1) : NULL, *obefore[2] = {NULL, NULL};
    ag_optim ocopy;
    ag_train_state scopy = {0};
    if (p) memcpy(before, p->data, bytes);
    if (o) {
        ocopy = *o;
        for (int k = 0; k < ag_optim_state_count(o); k++) {
            void *slab;
            ag_optim_state(o, k, &slab);
            obefore[k] = malloc(bytes + 1);
            memcpy(obefore[k], slab, bytes);
        }
    }
    if (s) assert_true(ag_train_state_copy(&scopy, s));
    stderr_capture();
    ag_checkpoint_status got = ag_checkpoint_load(path, p, o, s, opts, last_msg, sizeof last_msg);
    stderr_assert_empty(file, line);
    if (got != want) {
        print_error("%s:%d: status %s, expected %s; message: %s\n", file, line, ag_checkpoint_status_name(got),
                    ag_checkpoint_status_name(want), last_msg);
        fail();
    }
    if (want != AG_CHECKPOINT_OK && !strstr(last_msg, path)) {
        print_error("%s:%d: message does not name the file '%s': %s\n", file, line, path, last_msg);
        fail();
    }
    for (const char **f = fragments; *f; f++)
        if (!strstr(last_msg, *f)) {
            print_error("%s:%d: message '%s' does not contain '%s'\n", file, line, last_msg, *f);
            fail();
        }
    if (want != AG_CHECKPOINT_OK && want != AG_CHECKPOINT_PARTIAL) {
        assert_true(!p || memcmp(before, p->data, bytes) == 0);
        if (o) {
            assert_memory_equal(&ocopy, o, sizeof ocopy);
            for (int k = 0; k < ag_optim_state_count(o); k++) {
                void *slab;
                ag_optim_state(o, k, &slab);
                assert_memory_equal(obefore[k], slab, bytes);
            }
        }
        if (s) tu_assert_same_state(&scopy, s);
    }
    free(before);
    free(obefore[0]);
    free(obefore[1]);
    ag_train_state_clear(&scopy);
}

void save_ok(const char *path, const ag_params *p, const ag_optim *o, const ag_train_state *s) {
    char msg[1024];
    ag_checkpoint_status st = ag_checkpoint_save(path, p, o, s, NULL, msg, sizeof msg);
    if (st != AG_CHECKPOINT_OK) fail_msg("save of %s failed: %s", path, msg);
    assert_string_equal(msg, "");
}

void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    assert_non_null(a);
    assert_non_null(b);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a);
    fclose(b);
}

unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc(*n);
    assert_int_equal(fread(d, 1, *n, f), *n);
    fclose(f);
    return d;
}

bool write_bytes(const char *path, const void *d, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    bool ok = fd >= 0 && write(fd, d, n) == (ssize_t)n;
    if (fd >= 0) close(fd);
    return ok;
}

void write_all_bytes(const char *path, const void *d, size_t n) { assert_true(write_bytes(path, d, n)); }

const char *write_text(const char *name, const char *text) {
    const char *path = in_tmp(name);
    write_all_bytes(path, text, strlen(text));
    return path;
}

/* fill(s), saved with a small model to tmp/name and loaded back into t (zeroed first) */
void config_round_trip(const char *name, void (*fill)(ag_train_state *), ag_train_state *s,
                              ag_train_state *t) {
    const char *path = in_tmp(name);
    ag_params *p = small_params(AG_F32, 0);
    fill(s);
    save_ok(path, p, NULL, s);
    *t = (ag_train_state){0};
    assert_load(AG_CHECKPOINT_OK, path, NULL, NULL, t, NULL, "");
    ag_params_free(p);
}

size_t find_bytes(const unsigned char *d, size_t n, const void *pat, size_t m) {
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(d + i, pat, m) == 0) return i;
    fail_msg("pattern not found in the file");
    return 0;
}

/* close a file edited with the raw HDF5 API and rewrite its header, as a hand edit must */
void close_edit(hid_t f) {
    char path[600];
    assert_true(H5Fget_name(f, path, sizeof path) > 0);
    assert_true(H5Fclose(f) >= 0);
    tu_checkpoint_rehash(path);
}

/* copy a good checkpoint and edit it with the raw HDF5 API (then close_edit) */
hid_t edit_copy(const char *good, const char *name) {
    copy_file(good, in_tmp(name));
    hid_t f = H5Fopen(in_tmp(name), H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    return f;
}

void set_fixed_string_attr(hid_t loc, const char *name, const char *value) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, strlen(value));
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, value);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
}
