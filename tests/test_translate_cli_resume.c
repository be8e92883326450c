/* attograd-translate end to end, runs that stop and go on: exact resume (bit for bit with an
 * uninterrupted run), the memory options, SIGINT and SIGTERM, the settings a resumed run takes
 * from its checkpoint, and vocabularies of real size and in the old chunked form. Run as
 * tests/test_translate_cli_runs.c runs the program. */
#define _XOPEN_SOURCE 700
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "test_util.h"
#include "translate_cli_util.h"
#include "translate_run.h"

static void copy_file(const char *from, const char *to) {
    size_t len;
    char *s = tt_read_file(from, &len);
    if (!s) fail_msg("cannot open %s", from);
    tt_write_file(to, s, len);
    free(s);
}

static void sleep_ms(int ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }
/* ---- HDF5: two checkpoints hold the same bits ---- */

/* Compare every dataset below groups a and b (recursively, by name) bit for bit. Returns the
 * number of datasets compared; *differ counts those that differ or exist on one side only, and
 * the first is named in first. */
static int compare_groups(hid_t a, hid_t b, const char *path, int *differ, char *first, size_t firstsz) {
    H5G_info_t ia, ib;
    assert_true(H5Gget_info(a, &ia) >= 0 && H5Gget_info(b, &ib) >= 0);
    if (ia.nlinks != ib.nlinks && (*differ)++ == 0)
        snprintf(first, firstsz, "%s: %llu and %llu entries", path, (unsigned long long)ia.nlinks,
                 (unsigned long long)ib.nlinks);
    int compared = 0;
    for (hsize_t i = 0; i < ia.nlinks; i++) {
        char name[256], sub[512];
        assert_true(H5Lget_name_by_idx(a, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) > 0);
        snprintf(sub, sizeof sub, "%s/%s", path, name);
        hid_t oa = H5Oopen(a, name, H5P_DEFAULT), ob = H5Oopen(b, name, H5P_DEFAULT);
        assert_true(oa >= 0);
        if (ob < 0 || H5Iget_type(oa) != H5Iget_type(ob)) {
            if ((*differ)++ == 0) snprintf(first, firstsz, "%s: only in one file or of another kind", sub);
        } else if (H5Iget_type(oa) == H5I_GROUP) {
            compared += compare_groups(oa, ob, sub, differ, first, firstsz);
        } else if (H5Iget_type(oa) == H5I_DATASET) {
            hid_t ta = H5Dget_type(oa), tb = H5Dget_type(ob), sa = H5Dget_space(oa), sb = H5Dget_space(ob);
            hssize_t na = H5Sget_simple_extent_npoints(sa), nb = H5Sget_simple_extent_npoints(sb);
            bool same = H5Tequal(ta, tb) > 0 && na == nb;
            if (same && na > 0) {
                hid_t mt = H5Tget_native_type(ta, H5T_DIR_ASCEND);
                size_t bytes = (size_t)na * H5Tget_size(mt);
                void *da = malloc(bytes), *db = malloc(bytes);
                assert_true(H5Dread(oa, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, da) >= 0);
                assert_true(H5Dread(ob, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, db) >= 0);
                same = memcmp(da, db, bytes) == 0;
                free(da);
                free(db);
                H5Tclose(mt);
            }
            if (!same && (*differ)++ == 0) snprintf(first, firstsz, "%s differs", sub);
            compared++;
            H5Tclose(ta);
            H5Tclose(tb);
            H5Sclose(sa);
            H5Sclose(sb);
        }
        H5Oclose(oa);
        if (ob >= 0) H5Oclose(ob);
    }
    return compared;
}

/* datasets of group in two files: how many were compared, and how many differ */
static int compare_checkpoints(const char *pa, const char *pb, const char *group, int *differ) {
    hid_t fa = H5Fopen(pa, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(pb, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fa < 0 || fb < 0) fail_msg("cannot open %s or %s", pa, pb);
    hid_t ga = H5Gopen2(fa, group, H5P_DEFAULT), gb = H5Gopen2(fb, group, H5P_DEFAULT);
    if (ga < 0 || gb < 0) fail_msg("%s or %s has no %s", pa, pb, group);
    char first[600] = "";
    *differ = 0;
    int n = compare_groups(ga, gb, group, differ, first, sizeof first);
    if (*differ) print_message("%s vs %s: %d of %d datasets differ, first: %s\n", pa, pb, *differ, n, first);
    H5Gclose(ga);
    H5Gclose(gb);
    H5Fclose(fa);
    H5Fclose(fb);
    return n;
}
/* the "step N: train loss ..., BLEU x, chrF2 y" parts of a log's evaluation lines (not the time
 * taken), one a line, in order */
static char *eval_lines(const char *log) {
    char *out = calloc(strlen(log) + 1, 1);
    for (const char *p = log; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p + 1) : strlen(p);
        const char *loss = strstr(p, ": train loss "), *bleu = strstr(p, ", chrF2 ");
        if (strncmp(p, "step ", 5) == 0 && loss && bleu && bleu < p + len) {
            bleu += strlen(", chrF2 ");
            strncat(out, p, (size_t)(bleu - p) + strspn(bleu, "0123456789."));
            strcat(out, "\n");
        }
        p += len;
    }
    return out;
}

/* ---- exact resume ---- */

/* argv of a resume-test run: train, common, extra, --out out --steps steps [--resume] */
static void train_args(const char **args, const char *const *common, const char *const *extra, const char *out,
                       const char *steps, bool resume) {
    int n = 0;
    args[n++] = "train";
    for (int i = 0; common[i]; i++) args[n++] = common[i];
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n++] = "--out";
    args[n++] = out;
    args[n++] = "--steps";
    args[n++] = steps;
    if (resume) args[n++] = "--resume";
    args[n] = NULL;
}

/* train steps_total in one go, and steps_first then --resume to steps_total in another
 * directory: the same parameters, optimizer state, training state and logged losses */
static void check_exact_resume(const char *name, const char *const *extra, int steps_first, int steps_total,
                               const char *eval_every) {
    char a[512], b[512], total[16], first[16], pa[600], pb[600], copy[600], expect[700];
    snprintf(a, sizeof a, "%s/resume-%s-a", tt.dir, name);
    snprintf(b, sizeof b, "%s/resume-%s-b", tt.dir, name);
    snprintf(pa, sizeof pa, "%s/last.h5", a);
    snprintf(pb, sizeof pb, "%s/last.h5", b);
    snprintf(copy, sizeof copy, "%s/first.h5", b);
    snprintf(total, sizeof total, "%d", steps_total);
    snprintf(first, sizeof first, "%d", steps_first);
    /* warmup 2: the learning rate is not tiny, so the steps change the parameters visibly */
    const char *common[] = {"--train", toy(), TINY, "--eval-every", eval_every, "--save-every", "2",
                            "--warmup", "2", NULL};
    const char *args[64];
    train_args(args, common, extra, a, total, false);
    assert_status(tt_run(NULL, args), 0);
    char *log_a = eval_lines(tt.err);
    train_args(args, common, extra, b, first, false);
    assert_status(tt_run(NULL, args), 0);
    char *log_b = eval_lines(tt.err);
    copy_file(pb, copy);
    train_args(args, common, extra, b, total, true);
    assert_status(tt_run(NULL, args), 0);
    snprintf(expect, sizeof expect, "resuming %s at step %d (epoch ", pb, steps_first);
    assert_contains(tt.err, expect);
    /* the first part ends at an evaluation: the same train loss windows and dev results in both */
    char *log_b2 = eval_lines(tt.err);
    log_b = realloc(log_b, strlen(log_b) + strlen(log_b2) + 1);
    strcat(log_b, log_b2);
    assert_int_equal(tt_count(log_a, "\n"), steps_total / atoi(eval_every));
    assert_string_equal(log_b, log_a);

    int differ;
    assert_true(compare_checkpoints(pa, pb, "/model", &differ) > 10);
    assert_int_equal(differ, 0);
    assert_true(compare_checkpoints(pa, pb, "/optimizer", &differ) > 20);
    assert_int_equal(differ, 0);
    ag_train_state sa = load_state(pa), sb = load_state(pb);
    assert_int_equal(sa.global_step, steps_total);
    tu_assert_same_state(&sa, &sb);
    ag_train_state_clear(&sa);
    ag_train_state_clear(&sb);
    /* the comparison sees a difference where there is one: the checkpoint of the first part */
    int nm = compare_checkpoints(pa, copy, "/model", &differ);
    assert_true(differ > nm / 2);
    free(log_a);
    free(log_b);
    free(log_b2);
}

static void test_resume_transformer_with_dropout_matches_an_uninterrupted_run_bit_for_bit(void **state) {
    /* 38 training pairs in batches of 8: 5 batches an epoch, so step 4 is mid-epoch and
     * step 8 in the second epoch; dropout 0.1 is the default */
    check_exact_resume("transformer", (const char *[]){"--model", "transformer", NULL}, 4, 8, "2");
}

/* recomputing the attention in backward, or keeping the feed-forward activation, changes
 * memory, not results: the same parameters and optimizer state bit for bit as without, dropout
 * on (the tiny batches fit one of ag_feed_forward's row blocks, whose weight gradients then sum
 * as the composed ops' do) */
static void test_memory_options_train_the_same_model_bit_for_bit(void **state) {
    char out[3][512], path[3][600];
    const char *common[] = {"--train", toy(), TINY, "--eval-every", "6", "--save-every", "6", "--warmup", "2", NULL};
    const char *extra[3][2] = {{NULL}, {"--recompute-attention", NULL}, {"--keep-ff-activation", NULL}};
    const char *args[64];
    for (int k = 0; k < 3; k++) {
        snprintf(out[k], sizeof out[k], "%s/memory-option-%d", tt.dir, k);
        snprintf(path[k], sizeof path[k], "%s/last.h5", out[k]);
        train_args(args, common, extra[k], out[k], "6", false);
        assert_status(tt_run(NULL, args), 0);
    }
    for (int k = 1; k < 3; k++) {
        int differ;
        assert_true(compare_checkpoints(path[0], path[k], "/model", &differ) > 10);
        assert_int_equal(differ, 0);
        assert_true(compare_checkpoints(path[0], path[k], "/optimizer", &differ) > 20);
        assert_int_equal(differ, 0);
    }
}

static void test_resume_gru_at_an_epoch_boundary_with_teacher_forcing_draws_matches_bit_for_bit(void **state) {
    /* after step 5 the first epoch is used up; teacher forcing 0.5 draws from the saved rng */
    check_exact_resume("gru", (const char *[]){"--model", "gru", "--teacher-forcing", "0.5", "--dropout", "0.2", NULL},
                       5, 8, "1");
}

/* ---- interruption ---- */

/* kind: the model trained; the resumed run does not say it (the checkpoint does) */
static void check_interrupt(int sig, const char *name, const char *kind) {
    char out[512], last[600];
    snprintf(out, sizeof out, "%s/%s", tt.dir, name);
    snprintf(last, sizeof last, "%s/last.h5", out);
    pid_t pid = tt_start(NULL, (const char *[]){"train", "--train", toy(), "--out", out, "--model", kind, TINY,
                                               "--steps", "1000000", "--eval-every", "5", "--save-every", "2", NULL});
    double t0 = tt_now();
    while (!exists(last) && tt_now() - t0 < 60) sleep_ms(10);
    bool started = exists(last);
    kill(pid, sig);
    int status = tt_finish(pid, 60);
    if (!started) fail_msg("no %s within 60 s; stderr:\n%s", last, tt.err);
    assert_status(status, 130);
    char expect[700];
    snprintf(expect, sizeof expect, "; saved %s (continue with --resume)\n", last);
    assert_contains(tt.err, "attograd-translate: interrupted at step ");
    assert_contains(tt.err, expect);
    long long said = atoll(strstr(tt.err, "interrupted at step ") + strlen("interrupted at step "));
    ag_train_state st = load_state(last);
    assert_true(st.global_step > 0);
    assert_int_equal(st.global_step, said); /* saved at the step it stopped, not an older one */
    assert_true(st.global_step < 1000000);

    char more[32];
    snprintf(more, sizeof more, "%lld", (long long)st.global_step + 3);
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", more, "--eval-every", "5",
                      "--save-every", "2", "--resume"),
                  0);
    snprintf(expect, sizeof expect, "resuming %s at step %lld (epoch %lld)", last, (long long)st.global_step,
             (long long)st.epoch);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "attograd-translate: %s model, ", kind);
    assert_contains(tt.err, expect);
    ag_train_state after = load_state(last);
    assert_int_equal(after.global_step, st.global_step + 3);
    ag_train_state_clear(&st);
    ag_train_state_clear(&after);
}

static void test_sigint_saves_last_checkpoint_exits_130_and_resume_continues(void **state) {
    check_interrupt(SIGINT, "interrupted", "transformer");
}

static void test_sigterm_saves_last_checkpoint_exits_130(void **state) {
    check_interrupt(SIGTERM, "terminated", "gru");
}

/* ---- resume takes the settings it trained with ---- */

/* Trained with non-default learning rate, warmup, label smoothing and clipping, a run resumed
 * without those flags continues exactly as one that never stopped; a flag that differs from the
 * checkpoint is refused by name, and one that agrees is accepted. */
static void test_resume_restores_every_training_setting_and_refuses_conflicting_flags(void **state) {
    const char *a = tt_in_dir("settings-a"), *b = tt_in_dir("settings-b");
    const char *settings[] = {"--lr", "0.003", "--warmup", "3", "--label-smoothing", "0.2", "--clip", "0.5", NULL};
    const char *common[] = {"--train", toy(), TINY, "--eval-every", "4", "--save-every", "4", NULL};
    const char *args[64], *none[] = {NULL};
    train_args(args, common, settings, a, "8", false);
    assert_status(tt_run(NULL, args), 0);
    train_args(args, common, settings, b, "4", false);
    assert_status(tt_run(NULL, args), 0);
    train_args(args, common, none, b, "8", true);
    assert_status(tt_run(NULL, args), 0);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/last.h5", a);
    snprintf(pb, sizeof pb, "%s/last.h5", b);
    int differ;
    assert_true(compare_checkpoints(pa, pb, "/model", &differ) > 10);
    assert_int_equal(differ, 0);
    assert_true(compare_checkpoints(pa, pb, "/optimizer", &differ) > 20);
    assert_int_equal(differ, 0);
    /* conflicting flags, each named; agreeing ones pass (the run above gave TINY again) */
    assert_status(RUN("train", "--train", toy(), "--out", b, TINY, "--steps", "9", "--lr", "0.001", "--resume"), 1);
    assert_contains(tt.err, "attograd-translate: cannot resume: --lr 0.001 differs from the checkpoint's 0.003");
    assert_status(RUN("train", "--train", toy(), "--out", b, TINY, "--steps", "9", "--model", "gru", "--d-model",
                      "32", "--resume"),
                  1);
    assert_contains(tt.err, "--d-model 32 differs from the checkpoint's 16");
    assert_contains(tt.err, "--model gru differs from the checkpoint's transformer");
    ag_train_state st = load_state(pb);
    assert_int_equal(st.global_step, 8);
    ag_train_state_clear(&st);
}

static void test_eval_with_a_missing_data_file_fails_naming_it(void **state) {
    trained_run("gru");
    const char *missing = tt_in_dir("no-such-data.tsv");
    assert_status(RUN("eval", "--checkpoint", ckpt_of("gru", "best"), "--data", missing), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "attograd-translate: %s: cannot open: No such file or directory", missing);
    assert_contains(tt.err, expect);
    assert_string_equal(tt.out, "");
}

/* ---- vocabularies of real size ---- */

enum { BIG_VOCAB = 20000 };

/* BIG_VOCAB pairs "a<i> b<i>" -> "c<i> b<i>": BIG_VOCAB + 1 distinct source words (each 6 to
 * 7 bytes: a 130 KB vocabulary), trained 2 steps into dir/big-vocab (once) */
static const char *big_vocab_run(void) {
    static const char *out;
    if (out) return out;
    size_t cap = (size_t)BIG_VOCAB * 32, at = 0;
    char *text = malloc(cap);
    for (int i = 0; i < BIG_VOCAB; i++)
        at += (size_t)snprintf(text + at, cap - at, "a%05d b%d\tc%05d b%d\n", i, i % 2, i, i % 2);
    tt_write_file(tt_in_dir("big-vocab.tsv"), text, at);
    free(text);
    const char *o = tt_in_dir("big-vocab");
    assert_status(RUN("train", "--train", tt_in_dir("big-vocab.tsv"), "--out", o, TINY, "--steps", "2", "--eval-every",
                      "2", "--save-every", "2"),
                  0);
    /* the 4 special tokens, a00000..a19999 and b0, b1 */
    char expect[200];
    snprintf(expect, sizeof expect, "vocabularies %d and %d tokens", BIG_VOCAB + 6, BIG_VOCAB + 6);
    assert_contains(tt.err, expect);
    return out = o;
}

static void test_a_vocabulary_of_20000_words_is_saved_and_translate_and_resume_use_it(void **state) {
    const char *out = big_vocab_run();
    char last[600], expect[700];
    snprintf(last, sizeof last, "%s/last.h5", out);
    ag_train_state st = load_state(last);
    const char *sv = ag_config_get_string(&st, "src_vocab");
    assert_non_null(sv);
    assert_true(strlen(sv) > 130000);
    assert_int_equal(tt_count(sv, "\n"), BIG_VOCAB + 5);
    assert_contains(sv, "\na12345\n");
    assert_null(ag_config_get_string(&st, "src_vocab.0"));
    assert_status(RUN("translate", "--checkpoint", last, "a12345 b1", "a00007 b0"), 0);
    assert_int_equal(tt_count(tt.out, "\n"), 2);
    assert_status(RUN("train", "--train", tt_in_dir("big-vocab.tsv"), "--out", out, TINY, "--steps", "3",
                      "--eval-every", "3", "--save-every", "3", "--resume"),
                  0);
    snprintf(expect, sizeof expect, "resuming %s at step 2", last);
    assert_contains(tt.err, expect);
    ag_train_state after = load_state(last);
    assert_int_equal(after.global_step, 3);
    assert_string_equal(ag_config_get_string(&after, "src_vocab"), sv);
    ag_train_state_clear(&st);
    ag_train_state_clear(&after);
}

/* a vocabulary in the chunked form of earlier versions: "<name>.0", ... of at most 255 bytes,
 * each ending after a newline, and "<name>.parts" */
static void put_chunked(hid_t g, const char *name, const char *text) {
    size_t n = strlen(text), at = 0;
    int part = 0;
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    while (at < n) {
        size_t take = n - at < 255 ? n - at : 255;
        if (at + take < n)
            while (text[at + take - 1] != '\n') take--;
        char key[64], chunk[256];
        memcpy(chunk, text + at, take);
        chunk[take] = 0;
        snprintf(key, sizeof key, "%s.%d", name, part++);
        const char *c = chunk;
        hid_t a = H5Acreate2(g, key, t, sp, H5P_DEFAULT, H5P_DEFAULT);
        assert_true(H5Awrite(a, t, &c) >= 0);
        H5Aclose(a);
        at += take;
    }
    char key[64];
    snprintf(key, sizeof key, "%s.parts", name);
    int64_t parts = part;
    hid_t a = H5Acreate2(g, key, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &parts);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
}

static void test_a_checkpoint_with_vocabularies_in_the_old_chunked_form_still_loads(void **state) {
    char last[600];
    snprintf(last, sizeof last, "%s/last.h5", big_vocab_run());
    assert_status(RUN("translate", "--checkpoint", last, "a12345 b1", "a00007 b0", "a19999"), 0);
    char *want = strdup(tt.out);
    ag_train_state st = load_state(last);
    const char *old = tt_in_dir("chunked.h5");
    copy_file(last, old);
    hid_t f = H5Fopen(old, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "config", H5P_DEFAULT);
    assert_true(H5Ldelete(g, "src_vocab", H5P_DEFAULT) >= 0 && H5Ldelete(g, "tgt_vocab", H5P_DEFAULT) >= 0);
    put_chunked(g, "src_vocab", ag_config_get_string(&st, "src_vocab"));
    put_chunked(g, "tgt_vocab", ag_config_get_string(&st, "tgt_vocab"));
    H5Gclose(g), H5Fclose(f);
    tu_checkpoint_rehash(old);
    ag_train_state chunked = load_state(old);
    int64_t parts;
    assert_null(ag_config_get_string(&chunked, "src_vocab"));
    assert_true(ag_config_get_int(&chunked, "src_vocab.parts", &parts) && parts > 500);
    assert_status(RUN("translate", "--checkpoint", old, "a12345 b1", "a00007 b0", "a19999"), 0);
    assert_string_equal(tt.out, want);
    free(want);
    ag_train_state_clear(&st);
    ag_train_state_clear(&chunked);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_resume_transformer_with_dropout_matches_an_uninterrupted_run_bit_for_bit),
        TEST(test_memory_options_train_the_same_model_bit_for_bit),
        TEST(test_resume_gru_at_an_epoch_boundary_with_teacher_forcing_draws_matches_bit_for_bit),
        TEST(test_sigint_saves_last_checkpoint_exits_130_and_resume_continues),
        TEST(test_sigterm_saves_last_checkpoint_exits_130),
        TEST(test_resume_restores_every_training_setting_and_refuses_conflicting_flags),
        TEST(test_eval_with_a_missing_data_file_fails_naming_it),
        TEST(test_a_vocabulary_of_20000_words_is_saved_and_translate_and_resume_use_it),
        TEST(test_a_checkpoint_with_vocabularies_in_the_old_chunked_form_still_loads)
    };
    return cmocka_run_group_tests(tests, cli_group_setup, cli_group_teardown);
}
