/* Checkpoints meeting the world: a disk that fills up and damaged bytes. A save either writes
 * a file that reads back exactly what was saved, or reports the I/O error and leaves the
 * previous file as it was; a process whose save failed exits normally; a dataset whose data
 * never reached the file is an error, never a tensor of zeros; a damaged byte anywhere in a
 * file gives one clear error before libhdf5 parses it, or (in bytes that do not matter) the
 * identical model, never a crash or a hang; counts and hyperparameters out of the library's
 * range are refused by name, at save and at load.
 *
 * Witnesses: a tmpfs of a few hundred KiB (mounted here; those tests skip where mounting is not
 * permitted, and CI runs as root), filled to every level from full to room for the file; the
 * values read back are compared with both versions bit for bit. A file whose chunk was never
 * written is made with the raw HDF5 API. Every 97th byte of a checkpoint is damaged in turn,
 * and each load is compared with what was saved. */
#define _GNU_SOURCE /* fallocate */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

enum { N = 60000 }; /* floats: a file of ~240 KiB */

static char tmpdir[64], disk[96];
static bool mounted;

static int group_setup(void **state) {
    strcpy(tmpdir, "/tmp/ag_disk_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    snprintf(disk, sizeof disk, "%s/disk", tmpdir);
    if (mkdir(disk, 0700) != 0) return -1;
    /* room for two files of N floats and a filler */
    mounted = mount("tmpfs", disk, "tmpfs", 0, "size=768k") == 0;
    return 0;
}

static int group_teardown(void **state) {
    if (mounted) umount(disk);
    rmdir(disk);
    return rmdir(tmpdir);
}

static void need_disk(void) {
    if (!mounted) {
        print_message("cannot mount a tmpfs here (%s): needs root\n", strerror(errno));
        skip();
    }
}

/* one parameter "w" of N floats, w[i] = base + i */
static ag_params *params(float base) {
    ag_params *p = ag_params_new(AG_F32);
    ag_params_add(p, "w", AG_SHAPE(N));
    for (int i = 0; i < N; i++) ((float *)p->data)[i] = base + (float)i;
    return p;
}

/* w[0] of the checkpoint at path (its values checked to be base + i for one base), or -1 if
 * it does not load */
static float load_base(const char *path) {
    ag_params *q = params(-7);
    char msg[1024];
    float base = -1;
    if (ag_checkpoint_load(path, q, NULL, NULL, NULL, msg, sizeof msg) == AG_CHECKPOINT_OK) {
        const float *w = (const float *)q->data;
        base = w[0];
        for (int i = 0; i < N; i++)
            if (w[i] != base + (float)i) fail_msg("%s: w[%d] = %g, not %g", path, i, w[i], base + (float)i);
    }
    ag_params_free(q);
    return base;
}

/* A file that takes all but free_bytes of the disk (as far as whole pages allow). */
static void fill_disk(const char *filler, long long free_bytes) {
    unlink(filler);
    struct statvfs vs;
    assert_int_equal(statvfs(disk, &vs), 0);
    long long avail = (long long)vs.f_bavail * (long long)vs.f_frsize, take = avail - free_bytes;
    if (take <= 0) return;
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fallocate(fd, 0, 0, take), 0);
    close(fd);
}

static void test_a_save_to_a_full_disk_reports_it_and_keeps_the_previous_checkpoint(void **state) {
    need_disk();
    char path[160], tmp[170], filler[160], msg[1024];
    snprintf(path, sizeof path, "%s/ckpt.h5", disk);
    snprintf(filler, sizeof filler, "%s/filler", disk);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ag_params *p = params(1);
    assert_int_equal(ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    assert_true(load_base(path) == 1);
    for (int i = 0; i < N; i++) ((float *)p->data)[i] = 2 + (float)i;
    /* the new file does not fit beside the old one */
    fill_disk(filler, 100 * 1024);
    assert_int_equal(ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_EIO);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, "No space left on device"));
    assert_int_equal(access(tmp, F_OK), -1);
    assert_true(load_base(path) == 1);
    unlink(filler);
    unlink(path);
    ag_params_free(p);
}

/* At every level of free space from none to room for the file, a save in a child process that
 * then exits through its exit handlers (HDF5's among them): the child exits normally, and
 * the file holds either the new values (the save said OK) or the previous ones (it said EIO,
 * naming the full disk). */
static void test_saves_at_every_level_of_free_space_keep_one_whole_version_and_exit_cleanly(void **state) {
    need_disk();
    char path[160], filler[160], msg[1024];
    snprintf(path, sizeof path, "%s/ckpt.h5", disk);
    snprintf(filler, sizeof filler, "%s/filler", disk);
    ag_params *p = params(0);
    float current = -1;
    int saved = 0, refused = 0;
    for (long long free_kib = 0; free_kib <= 288; free_kib += 8) {
        fill_disk(filler, free_kib * 1024);
        float base = 100 + (float)free_kib;
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            for (int i = 0; i < N; i++) ((float *)p->data)[i] = base + (float)i;
            int st = ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg);
            if (write(fds[1], msg, strlen(msg) + 1) < 0) _exit(3);
            exit(st == AG_CHECKPOINT_OK ? 0 : st == AG_CHECKPOINT_EIO ? 1 : 2); /* through the exit handlers */
        }
        close(fds[1]);
        ssize_t n = read(fds[0], msg, sizeof msg - 1);
        msg[n > 0 ? n : 0] = 0;
        close(fds[0]);
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        if (!WIFEXITED(ws)) fail_msg("%lld KiB free: the child died of signal %d", free_kib, WTERMSIG(ws));
        if (WEXITSTATUS(ws) == 0) {
            current = base;
            saved++;
        } else {
            if (WEXITSTATUS(ws) != 1 || !strstr(msg, "No space left on device"))
                fail_msg("%lld KiB free: status %d, message: %s", free_kib, WEXITSTATUS(ws), msg);
            refused++;
        }
        float got = load_base(path);
        if (got != current) fail_msg("%lld KiB free: the file holds version %g, expected %g", free_kib, got, current);
    }
    print_message("%d saves refused for want of space, %d written\n", refused, saved);
    assert_true(refused > 0 && saved > 0);
    unlink(filler);
    unlink(path);
    ag_params_free(p);
}

/* A chunked dataset of 'model' created and never written: HDF5 reads it as fill values. */
static void write_file_with_an_unwritten_dataset(const char *path) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1), scalar = H5Screate(H5S_SCALAR);
    const char *name = "attograd-checkpoint";
    H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(f, "format", t, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, t, &name);
    H5Aclose(a);
    int64_t version = 1;
    a = H5Acreate2(f, "format_version", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &version);
    H5Aclose(a);
    hid_t g = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims = N;
    hid_t sp = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &dims);
    H5Pset_fletcher32(dcpl);
    hid_t ds = H5Dcreate2(g, "w", H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Gclose(g);
    H5Sclose(scalar);
    H5Tclose(t);
    assert_true(H5Fclose(f) >= 0);
}

static void test_a_dataset_with_no_stored_data_is_a_format_error_not_zeros(void **state) {
    char path[160], msg[1024];
    snprintf(path, sizeof path, "%s/unwritten.h5", tmpdir);
    write_file_with_an_unwritten_dataset(path);
    ag_params *p = params(5);
    assert_int_equal(ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg), AG_CHECKPOINT_EFORMAT);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, "dataset 'w' has no stored data"));
    for (int i = 0; i < N; i++) assert_true(((float *)p->data)[i] == 5 + (float)i);
    unlink(path);
    ag_params_free(p);
}

/* A checkpoint of everything a save writes: parameters, Adam's state after two steps, the
 * training position, rngs, and config entries of each type, with a vocabulary long enough to
 * be a dataset. */
typedef struct {
    ag_params *p;
    ag_optim *o;
    ag_train_state s;
} model;

static model model_new(float base) {
    model m = {ag_params_new(AG_F32), NULL, {0}};
    ag_params_add(m.p, "enc.weight", AG_SHAPE(8, 5));
    ag_params_add(m.p, "enc.bias", AG_SHAPE(8));
    ag_params_add(m.p, "out.weight", AG_SHAPE(3, 8));
    for (int k = 0; k < m.p->count; k++)
        for (int64_t i = 0; i < ag_numel(m.p->list[k]); i++)
            ((float *)m.p->data)[m.p->list[k]->offset + i] = base + 0.5f * (float)(k * 100 + i);
    m.o = ag_adam_new(m.p, &(ag_adam_config){.lr = 0.01, .betas = {0.9, 0.999}, .eps = 1e-8});
    return m;
}

static void model_free(model *m) {
    ag_optim_free(m->o);
    ag_params_free(m->p);
    ag_train_state_clear(&m->s);
}

static bool same_slab(const ag_params *p, const void *a, const void *b) {
    for (int k = 0; k < p->count; k++) {
        size_t at = (size_t)p->list[k]->offset * 4;
        if (memcmp((const char *)a + at, (const char *)b + at, (size_t)ag_numel(p->list[k]) * 4) != 0) return false;
    }
    return true;
}

static bool same_model(const model *a, const model *b) {
    for (int k = 0; k < ag_optim_state_count(a->o); k++) {
        void *sa, *sb;
        ag_optim_state(a->o, k, &sa);
        ag_optim_state(b->o, k, &sb);
        if (!same_slab(a->p, sa, sb)) return false;
    }
    return same_slab(a->p, a->p->data, b->p->data) && a->o->step == b->o->step && a->o->lr == b->o->lr;
}

static void test_a_damaged_byte_anywhere_is_an_error_or_the_identical_model(void **state) {
    char path[160], bad[160], msg[2048];
    snprintf(path, sizeof path, "%s/good.h5", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.h5", tmpdir);
    model m = model_new(1);
    for (int step = 0; step < 2; step++) { /* optimizer state that is not all zeros */
        for (int64_t i = 0; i < m.p->numel; i++) ((float *)m.p->grad)[i] = 0.01f * (float)(i % 7) - 0.02f;
        ag_optim_step(m.o);
    }
    m.s.global_step = 2;
    m.s.epoch = 1;
    m.s.data_position = 40;
    ag_rng r = ag_rng_new(9);
    ag_state_set_rng(&m.s, "dropout", &r);
    ag_config_set_int(&m.s, "d_model", 8);
    ag_config_set_double(&m.s, "dropout", 0.1);
    ag_config_set_string(&m.s, "activation", "relu");
    char vocab[4000] = "";
    for (int w = 0; w < 400; w++) snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "w%d ", w);
    ag_config_set_string(&m.s, "src_vocab", vocab);
    assert_int_equal(ag_checkpoint_save(path, m.p, m.o, &m.s, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char d[1 << 16];
    size_t n = fread(d, 1, sizeof d, f);
    fclose(f);
    assert_true(n > 1024 && n < sizeof d);
    int errors = 0, identical = 0;
    for (size_t at = 0; at < n; at += 97) {
        d[at] ^= 0xFF;
        f = fopen(bad, "wb");
        assert_int_equal(fwrite(d, 1, n, f), n);
        fclose(f);
        d[at] ^= 0xFF;
        model l = model_new(-3), before = model_new(-3);
        ag_checkpoint_status st = ag_checkpoint_load(bad, l.p, l.o, &l.s, NULL, msg, sizeof msg);
        if (st == AG_CHECKPOINT_OK) {
            if (!same_model(&m, &l)) fail_msg("byte %zu damaged: the load said OK with another model", at);
            tu_assert_same_state(&m.s, &l.s);
            identical++;
        } else {
            if (st != AG_CHECKPOINT_EFORMAT || !strstr(msg, bad) || strchr(msg, '\n'))
                fail_msg("byte %zu damaged: status %s, message: %s", at, ag_checkpoint_status_name(st), msg);
            if (!same_model(&before, &l)) fail_msg("byte %zu damaged: a failed load changed the model", at);
            errors++;
        }
        model_free(&l);
        model_free(&before);
    }
    print_message("%zu-byte checkpoint, every 97th byte damaged: %d errors, %d identical models\n", n, errors,
                  identical);
    assert_true(errors > 0);
    unlink(bad);
    unlink(path);
    model_free(&m);
}

static void set_attr_i64(hid_t loc, const char *name, int64_t v) {
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    assert_true(a >= 0 && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(a);
}

static void set_attr_f64(hid_t loc, const char *name, const double *v) {
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    assert_true(a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, v) >= 0);
    H5Aclose(a);
}

/* Values a file can hold but the library does not accept: a save refuses to write them, and a
 * load of a file edited to hold them names each field, its value and the accepted range. */
static void test_counts_and_hyperparameters_out_of_range_are_refused_by_name(void **state) {
    char path[160], msg[2048];
    snprintf(path, sizeof path, "%s/ranges.h5", tmpdir);
    model m = model_new(1);
    m.s.epoch = -7;
    m.s.global_step = (int64_t)1 << 62;
    assert_int_equal(ag_checkpoint_save(path, m.p, m.o, &m.s, NULL, msg, sizeof msg), AG_CHECKPOINT_EINVAL);
    assert_non_null(strstr(msg, "epoch = -7, expected 0 to 9007199254740992"));
    assert_non_null(strstr(msg, "global_step = 4611686018427387904"));
    assert_int_equal(access(path, F_OK), -1);
    m.s.epoch = 2;
    m.s.global_step = 10;
    assert_int_equal(ag_checkpoint_save(path, m.p, m.o, &m.s, NULL, msg, sizeof msg), AG_CHECKPOINT_OK);
    /* edited by hand, header rewritten: HDF5 and the CRC-32 find nothing wrong */
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "training", H5P_DEFAULT);
    set_attr_i64(g, "data_position", -3);
    H5Gclose(g);
    g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    double nan = NAN, betas[2] = {0.9, 1.5};
    set_attr_f64(g, "lr", &nan);
    set_attr_f64(g, "betas", betas);
    set_attr_i64(g, "step", -1);
    H5Gclose(g);
    assert_true(H5Fclose(f) >= 0);
    tu_checkpoint_rehash(path);
    model l = model_new(-3);
    assert_int_equal(ag_checkpoint_load(path, l.p, l.o, &l.s, NULL, msg, sizeof msg), AG_CHECKPOINT_EFORMAT);
    const char *want[] = {"/training has data_position = -3, expected 0 to 9007199254740992",
                          "/optimizer has lr = nan, expected 0 to inf", "/optimizer has betas[1] = 1.5, expected 0 to 1",
                          "/optimizer has step = -1"};
    for (int i = 0; i < 4; i++)
        if (!strstr(msg, want[i])) fail_msg("message '%s' does not contain '%s'", msg, want[i]);
    assert_true(l.o->lr == 0.01 && l.s.epoch == 0); /* nothing changed */
    model_free(&l);
    model_free(&m);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_save_to_a_full_disk_reports_it_and_keeps_the_previous_checkpoint,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(
            test_saves_at_every_level_of_free_space_keep_one_whole_version_and_exit_cleanly, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_a_dataset_with_no_stored_data_is_a_format_error_not_zeros, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_a_damaged_byte_anywhere_is_an_error_or_the_identical_model, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_counts_and_hyperparameters_out_of_range_are_refused_by_name, tu_setup,
                                        tu_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
