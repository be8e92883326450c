/* HDF5 checkpoints of the trainer tests/checkpoint_child.c shares: the file layout (state_dict
 * names, shapes, documented attributes), its config loaded without a model, exact resume in a
 * new process, and SIGKILL during saves.
 *
 * Witnesses: the layout is read back with the raw HDF5 API; resume compares with an
 * uninterrupted run of the same code in this process; the kill test checks every value
 * against the two versions the child alternates between. */
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint_util.h"
#define CHECKPOINT_CHILD_NO_MAIN
#include "checkpoint_child.c"

extern char **environ;

/* ---- the layout, read with the raw HDF5 API ---- */

static int64_t h5_attr_i64(hid_t loc, const char *name) {
    int64_t v = -999;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Aread(a, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(a);
    return v;
}

static void test_file_layout_uses_state_dict_names_shapes_and_documented_attributes(void **state) {
    const char *path = in_tmp("layout.h5");
    ag_params *p = version_params(AG_F32);
    ag_optim *o = ag_adam_new(p, NULL);
    ag_train_state s = {0};
    version_fill(2, p, o, &s);
    save_ok(path, p, o, &s);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    char fmt[64] = {0};
    hid_t a = H5Aopen(f, "format", H5P_DEFAULT), st = H5Aget_type(a);
    /* fixed-length: no string in the global heap, which has no checksum */
    assert_int_equal(H5Tis_variable_str(st), 0);
    assert_int_equal(H5Tget_size(st), strlen("attograd-checkpoint"));
    H5Aread(a, st, fmt);
    H5Tclose(st);
    H5Aclose(a);
    assert_string_equal(fmt, "attograd-checkpoint");
    assert_int_equal(h5_attr_i64(f, "format_version"), 2);
    /* dots stay in the dataset name; shape as PyTorch's; little-endian IEEE f32 */
    hid_t d = H5Dopen2(f, "/model/encoder.layers.0.linear1.weight", H5P_DEFAULT);
    assert_true(d >= 0);
    hsize_t dims[4];
    hid_t sp = H5Dget_space(d), ty = H5Dget_type(d);
    assert_int_equal(H5Sget_simple_extent_dims(sp, dims, NULL), 2);
    assert_int_equal(dims[0], 256);
    assert_int_equal(dims[1], 96);
    assert_true(H5Tequal(ty, H5T_IEEE_F32LE) > 0);
    /* contiguous, with its crc32 attribute (its value: tests/test_checkpoint_flips.c) */
    hid_t dcpl = H5Dget_create_plist(d);
    assert_int_equal(H5Pget_layout(dcpl), H5D_CONTIGUOUS);
    assert_true(H5Aexists(d, "crc32") > 0);
    H5Pclose(dcpl);
    float w[3];
    hsize_t start[2] = {0, 0}, count[2] = {1, 3}, three = 3;
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(1, &three, NULL);
    assert_true(H5Dread(d, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, w) >= 0);
    assert_true(w[0] == -1.0f && w[1] == -(1.0f + 1.0f / 1024) && w[2] == -(1.0f + 2.0f / 1024));
    H5Sclose(ms), H5Sclose(sp), H5Tclose(ty), H5Dclose(d);
    d = H5Dopen2(f, "/model/temperature", H5P_DEFAULT);
    sp = H5Dget_space(d);
    assert_int_equal(H5Sget_simple_extent_type(sp), H5S_SCALAR); /* 0-d stays 0-d */
    H5Sclose(sp), H5Dclose(d);
    assert_true(H5Lexists(f, "/optimizer/exp_avg/decoder.out.weight", H5P_DEFAULT) > 0);
    assert_true(H5Lexists(f, "/optimizer/exp_avg_sq/temperature", H5P_DEFAULT) > 0);
    hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    const char *attrs[] = {"kind", "lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "step"};
    for (int i = 0; i < 9; i++) assert_true(H5Aexists(g, attrs[i]) > 0);
    assert_int_equal(h5_attr_i64(g, "step"), 20);
    H5Gclose(g);
    g = H5Gopen2(f, "training", H5P_DEFAULT);
    assert_int_equal(h5_attr_i64(g, "global_step"), 200);
    assert_int_equal(h5_attr_i64(g, "epoch"), 2);
    assert_int_equal(h5_attr_i64(g, "data_position"), 16);
    H5Gclose(g);
    uint64_t rng[2];
    a = H5Aopen_by_name(f, "training/rng", "shuffle", H5P_DEFAULT, H5P_DEFAULT);
    assert_true(H5Aread(a, H5T_NATIVE_UINT64, rng) >= 0);
    H5Aclose(a);
    assert_true(rng[0] == 2 && rng[1] == 2000);
    g = H5Gopen2(f, "config", H5P_DEFAULT);
    assert_int_equal(h5_attr_i64(g, "version"), 2);
    H5Gclose(g);
    H5Fclose(f);
    ag_train_state_clear(&s);
    ag_optim_free(o);
    ag_params_free(p);
}

static void test_config_alone_loads_without_a_model(void **state) {
    ag_train_state s = {0}, t;
    config_round_trip("config.h5", trainer_config, &s, &t);
    int64_t hidden;
    double dropout;
    assert_true(ag_config_get_int(&t, "hidden", &hidden) && hidden == 16);
    assert_true(ag_config_get_double(&t, "dropout", &dropout) && dropout == 0.25);
    assert_string_equal(ag_config_get_string(&t, "activation"), "relu");
    assert_false(ag_config_get_int(&t, "dropout", &hidden)); /* a double is not an int */
    ag_train_state_clear(&s);
    ag_train_state_clear(&t);
}

/* ---- a second process ---- */

static const char *child_path(void) {
    const char *c = getenv("AG_CHECKPOINT_CHILD");
    return c && *c ? c : NULL;
}

/* start the child with argv; its stdout is *out_fd */
static pid_t spawn_child(char *const *argv, int *out_fd) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) fail_msg("cannot start %s: %s", argv[0], strerror(rc));
    *out_fd = fds[0];
    return pid;
}

/* run the child to completion; its output as malloc'd text */
static char *run_child(char *const *argv) {
    int fd;
    pid_t pid = spawn_child(argv, &fd);
    size_t len = 0, cap = 4096;
    char *out = malloc(cap);
    ssize_t n;
    while ((n = read(fd, out + len, cap - len - 1)) > 0)
        if ((len += (size_t)n) + 1 == cap) out = realloc(out, cap *= 2);
    out[len] = 0;
    close(fd);
    int ws;
    waitpid(pid, &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) fail_msg("%s %s failed (status %d)", argv[0], argv[1], ws);
    return out;
}

static int parse_losses(const char *text, double *out, int max) {
    int n = 0;
    for (char *end; n < max && *text; text = end) {
        out[n] = strtod(text, &end);
        if (end == text) break;
        n++;
    }
    return n;
}

enum { RESUME_N = 10, RESUME_K = 4 };

static trainer *resumed_run(const char *ckpt, const char *forget, double *losses) {
    char steps[16], *out_path = strdup(in_tmp(forget ? "resume_forget.h5" : "resume_out.h5"));
    snprintf(steps, sizeof steps, "%d", RESUME_N - RESUME_K);
    char *argv[] = {(char *)child_path(), "resume", (char *)ckpt, steps, out_path, (char *)forget, NULL};
    char *text = run_child(argv);
    assert_int_equal(parse_losses(text, losses, RESUME_N), RESUME_N - RESUME_K);
    free(text);
    /* the child's final state, into a trainer initialised differently again */
    ag_train_state cfg = {0};
    trainer_config(&cfg);
    trainer *t = trainer_new(&cfg, 4242, 0.1, 0.2, 0.3);
    ag_train_state st = {0};
    assert_load(AG_CHECKPOINT_OK, out_path, t->p, t->opt, &st, NULL, "");
    trainer_restore_state(t, &st);
    ag_train_state_clear(&cfg);
    ag_train_state_clear(&st);
    free(out_path);
    return t;
}

static void test_resume_in_a_new_process_matches_uninterrupted_training_bit_for_bit(void **state) {
    if (!child_path()) skip();
    ag_train_state cfg = {0};
    trainer_config(&cfg);
    trainer *full = trainer_new(&cfg, 5, 0.9, 0.98, 1e-9), *part = trainer_new(&cfg, 5, 0.9, 0.98, 1e-9);
    double lf[RESUME_N], lr[RESUME_N];
    for (int i = 0; i < RESUME_N; i++) lf[i] = trainer_step(full);
    for (int i = 0; i < RESUME_K; i++) {
        double l = trainer_step(part);
        assert_memory_equal(&l, &lf[i], sizeof l);
    }
    assert_true(part->pos != 0); /* saved mid-epoch: the data position matters */
    ag_train_state st = {0};
    assert_true(ag_train_state_copy(&st, &cfg));
    trainer_save_state(part, &st);
    const char *ckpt = strdup(in_tmp("resume.h5"));
    save_ok(ckpt, part->p, part->opt, &st);
    trainer *t = resumed_run(ckpt, NULL, lr);
    assert_memory_equal(lr, lf + RESUME_K, sizeof(double) * (RESUME_N - RESUME_K));
    assert_memory_equal(t->p->data, full->p->data, slab_bytes(full->p));
    for (int k = 0; k < 2; k++) {
        void *a, *b;
        ag_optim_state(t->opt, k, &a);
        ag_optim_state(full->opt, k, &b);
        assert_memory_equal(a, b, slab_bytes(full->p));
    }
    assert_int_equal(t->opt->step, RESUME_N);
    assert_true(t->epoch == full->epoch && t->pos == full->pos);
    assert_memory_equal(&t->epoch_rng, &full->epoch_rng, sizeof(ag_rng));
    assert_memory_equal(&t->drop_rng, &full->drop_rng, sizeof(ag_rng));
    trainer_free(t);
    /* negative controls: without the optimizer state, or without the rngs, the runs differ */
    const char *forget[] = {"forget-optim", "forget-rng"};
    for (int i = 0; i < 2; i++) {
        t = resumed_run(ckpt, forget[i], lr);
        assert_true(memcmp(lr, lf + RESUME_K, sizeof(double) * (RESUME_N - RESUME_K)) != 0);
        trainer_free(t);
    }
    trainer_free(full);
    trainer_free(part);
    ag_train_state_clear(&cfg);
    ag_train_state_clear(&st);
    free((void *)ckpt);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_sigkill_during_saves_always_leaves_one_complete_version(void **state) {
    if (!child_path()) skip();
    char *path = strdup(in_tmp("killed.h5")), tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ag_params *p = version_params(AG_F32), *q = version_params(AG_F32);
    ag_optim *o = ag_adam_new(p, NULL), *oq = ag_adam_new(q, NULL);
    ag_train_state s = {0}, t = {0};
    version_fill(1, p, o, &s);
    save_ok(path, p, o, &s);
    /* how long a save takes in the child: it writes one byte per completed save */
    char *argv[] = {(char *)child_path(), "save-loop", path, "2", NULL};
    int fd;
    pid_t pid = spawn_child(argv, &fd);
    char byte;
    assert_int_equal(read(fd, &byte, 1), 1);
    double t0 = now();
    for (int i = 0; i < 5; i++) assert_int_equal(read(fd, &byte, 1), 1);
    double save_time = (now() - t0) / 5;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    enum { KILLS = 60 };
    int mid_save = 0, seen[3] = {0, 0, 0};
    unsigned seed = 12345;
    for (int i = 0; i < KILLS; i++) {
        argv[3] = i % 2 ? "1" : "2";
        pid = spawn_child(argv, &fd);
        assert_int_equal(read(fd, &byte, 1), 1); /* warmed up; saving to path starts now */
        double delay = save_time * 3 * (double)(rand_r(&seed) % 1000) / 1000;
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int ws;
        waitpid(pid, &ws, 0);
        close(fd);
        assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL); /* it was saving, not failing */
        if (access(tmp, F_OK) == 0) mid_save++;
        memset(q->data, 0, slab_bytes(q));
        oq->step = 0;
        assert_load(AG_CHECKPOINT_OK, path, q, oq, &t, NULL, "");
        int v = version_of(q, oq, &t);
        if (!v) fail_msg("kill %d: the checkpoint is neither version 1 nor version 2", i);
        seen[v]++;
    }
    print_message("%d kills (save takes %.2f ms): %d during a save, versions 1/2 seen %d/%d times\n", KILLS,
                  1e3 * save_time, mid_save, seen[1], seen[2]);
    assert_true(mid_save >= 5);  /* the kills did land inside saves */
    assert_true(seen[1] > 0 && seen[2] > 0);
    save_ok(path, p, o, &s); /* a save after a crash replaces the stale temporary file */
    assert_int_equal(access(tmp, F_OK), -1);
    ag_train_state_clear(&s);
    ag_train_state_clear(&t);
    ag_optim_free(o);
    ag_optim_free(oq);
    ag_params_free(p);
    ag_params_free(q);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file_layout_uses_state_dict_names_shapes_and_documented_attributes,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_config_alone_loads_without_a_model, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_resume_in_a_new_process_matches_uninterrupted_training_bit_for_bit,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_sigkill_during_saves_always_leaves_one_complete_version, tu_setup,
                                        tu_teardown)
    };
    return cmocka_run_group_tests(tests, ckpt_group_setup, ckpt_group_teardown);
}
