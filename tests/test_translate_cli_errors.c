/* attograd-translate end to end, input it refuses: missing, empty and bad corpora (skipped or
 * fatal with file and line), bad options (usage errors, status 2), missing, foreign and
 * unbuildable checkpoints, and outputs it cannot write (found before training; a lost save
 * stops the run with status 1). Run as tests/test_translate_cli_runs.c runs the program. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "test_util.h"
#include "translate_cli_util.h"
#include "translate_run.h"

/* The text of stderr (usage errors): one line "attograd-translate CMD: ..." with the problem,
 * then the pointer to CMD's --help (CMD from usage_start, "usage: attograd-translate CMD "),
 * and not the whole usage. */
static void assert_usage_error(int status, const char *problem, const char *usage_start) {
    assert_status(status, 2);
    char cmd[64], head[128], pointer[160];
    assert_int_equal(sscanf(usage_start, "usage: attograd-translate %63s", cmd), 1);
    snprintf(head, sizeof head, "attograd-translate %s: ", cmd);
    snprintf(pointer, sizeof pointer, "\nRun 'attograd-translate %s --help' for the options.\n", cmd);
    if (strncmp(tt.err, head, strlen(head)) != 0) fail_msg("stderr does not start with '%s': %s", head, tt.err);
    assert_contains(tt.err, problem);
    size_t n = strlen(tt.err), p = strlen(pointer);
    if (n < p || strcmp(tt.err + n - p, pointer) != 0 || tt_count(tt.err, "\n") != 2)
        fail_msg("stderr is not one line and the pointer to --help: %s", tt.err);
    assert_not_contains(tt.err, "options:");
    assert_string_equal(tt.out, "");
}

/* ---- bad input ---- */

static void test_missing_and_empty_training_files_fail_naming_the_file(void **state) {
    const char *missing = tt_in_dir("no-such.tsv");
    assert_status(RUN("train", "--train", missing, "--out", tt_in_dir("run-missing"), TINY, "--steps", "2"), 1);
    char expect[600];
    snprintf(expect, sizeof expect, "%s: cannot open: No such file or directory", missing);
    assert_contains(tt.err, expect);
    tt_write_text(tt_in_dir("empty.tsv"), "");
    assert_status(
        RUN("train", "--train", tt_in_dir("empty.tsv"), "--out", tt_in_dir("run-empty"), TINY, "--steps", "2"), 1);
    snprintf(expect, sizeof expect, "%s: file is empty", tt_in_dir("empty.tsv"));
    assert_contains(tt.err, expect);
    assert_false(exists(tt_in_dir("run-empty/last.h5")));
}

/* 40 good lines, then bad lines 41..48: one of each kind, and a second invalid UTF-8 and
 * empty side */
static const char *write_bad_corpus(void) {
    char *good = tt_read_file(toy(), NULL), *long_line = malloc(5000);
    memset(long_line, 'a', 4999);
    long_line[4999] = 0;
    long_line[2000] = '\t';
    size_t n = strlen(good) + 6000;
    char *text = malloc(n);
    snprintf(text, n, "%sno tab here\na\tB\tC\na \xC3\x28 b\tB A\n%s\n \t A\n\na b\xFF\tB A\na b\t  \n", good,
             long_line);
    const char *p = tt_in_dir("bad.tsv");
    tt_write_text(p, text);
    free(text);
    free(good);
    free(long_line);
    return p;
}

static void test_bad_lines_are_skipped_and_counted_with_file_and_line(void **state) {
    const char *bad = write_bad_corpus();
    assert_status(RUN("train", "--train", bad, "--out", tt_in_dir("run-bad"), TINY, "--steps", "2"), 0);
    char expect[1200];
    snprintf(expect, sizeof expect,
             "attograd-translate: %s: skipped 8 of 48 lines: 1 empty (first: %s:46: empty line); "
             "1 without a tab (first: %s:41: no tab between source and target); "
             "1 with more than one tab (first: %s:42: 2 tabs, expected one between source and target); "
             "2 with invalid UTF-8 (first: %s:43: invalid UTF-8 at byte 3 (0xC3)); "
             "1 too long (first: %s:44: line longer than 4096 bytes",
             bad, bad, bad, bad, bad, bad);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "2 with an empty side (first: %s:45: empty source side)\n", bad);
    assert_contains(tt.err, expect);
    assert_contains(tt.err, "38 training pairs, 2 dev pairs"); /* the 40 good lines */
    assert_true(exists(tt_in_dir("run-bad/last.h5")));
}

static void test_each_bad_line_is_fatal_with_strict_naming_file_and_line(void **state) {
    char long_line[5001];
    memset(long_line, 'b', 5000);
    long_line[5000] = 0;
    long_line[10] = '\t';
    const struct {
        const char *line, *why;
    } cases[] = {
        {"no tab here", "no tab between source and target"},
        {"a\tB\tC", "2 tabs, expected one between source and target"},
        {"a \xC3\x28 b\tB A", "invalid UTF-8 at byte 3 (0xC3)"},
        {"a b\xFF\tB A", "invalid UTF-8 at byte 4 (0xFF)"},
        {long_line, "line longer than 4096 bytes"},
        {" \tA", "empty source side"},
        {"a b\t  ", "empty target side"},
        {"", "empty line"},
    };
    const char *path = tt_in_dir("strict.tsv");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[5200], expect[700];
        snprintf(text, sizeof text, "a b\tB A\nc\tC\nd e f\tF E D\n%s\ne\tE\n", cases[i].line);
        tt_write_text(path, text);
        assert_status(RUN("train", "--train", path, "--out", tt_in_dir("run-strict"), TINY, "--steps", "2", "--strict"),
                      1);
        snprintf(expect, sizeof expect, "attograd-translate: %s:4: %s", path, cases[i].why);
        assert_contains(tt.err, expect);
        assert_false(exists(tt_in_dir("run-strict/last.h5")));
    }
    /* eval --strict too */
    trained_run("transformer");
    assert_status(RUN("eval", "--checkpoint", ckpt_of("transformer", "best"), "--data", path, "--strict"), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "%s:4: empty line", path);
    assert_contains(tt.err, expect);
    assert_status(RUN("eval", "--checkpoint", ckpt_of("transformer", "best"), "--data", path), 0);
    check_eval_output(path, 4, "greedy");
    snprintf(expect, sizeof expect, "%s: skipped 1 of 5 lines", path);
    assert_contains(tt.err, expect);
}

static void test_corpus_without_a_good_line_fails(void **state) {
    const char *path = tt_in_dir("nogood.tsv");
    tt_write_text(path, "no tab\n\na\tb\tc\n");
    assert_status(RUN("train", "--train", path, "--out", tt_in_dir("run-nogood"), TINY, "--steps", "2"), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "%s: no valid pairs (skipped 3 of 3 lines: ", path);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "first: %s:1: no tab between source and target", path);
    assert_contains(tt.err, expect);
}

static void test_training_without_development_pairs_fails_saying_how_to_get_some(void **state) {
    const char *four = tt_in_dir("four.tsv");
    tt_write_text(four, "a b\tB A\nc\tC\nd e f\tF E D\ne\tE\n");
    char expect[700];
    /* 5% of 4 pairs rounds to none */
    assert_status(RUN("train", "--train", four, "--out", tt_in_dir("run-four"), TINY, "--steps", "2"), 1);
    snprintf(expect, sizeof expect,
             "%s: --heldout 0.05 of 4 pairs holds out none for development: raise it or give --dev FILE", four);
    assert_contains(tt.err, expect);
    assert_status(
        RUN("train", "--train", toy(), "--out", tt_in_dir("run-four"), TINY, "--steps", "2", "--heldout", "0"), 1);
    snprintf(expect, sizeof expect, "%s: --heldout 0 of 40 pairs holds out none", toy());
    assert_contains(tt.err, expect);
    /* a dev pair longer than --max-len is evaluated all the same; one longer than the model's
     * positions (2 * 6 + 8 tokens) cannot be */
    const char *long_dev = tt_in_dir("long-dev.tsv");
    tt_write_text(long_dev, "a b c d e f a b\tB A F E D C B A\n");
    assert_status(RUN("train", "--train", toy(), "--dev", long_dev, "--out", tt_in_dir("run-long"), TINY, "--max-len",
                      "6", "--steps", "2"),
                  0);
    assert_contains(tt.err, "evaluating on 1 dev pairs");
    tt_write_text(long_dev, "a b c d e f a b a b c d e f a b a b c d e\tB A\n");
    assert_status(RUN("train", "--train", toy(), "--dev", long_dev, "--out", tt_in_dir("run-four"), TINY, "--max-len",
                      "6", "--steps", "2"),
                  1);
    snprintf(expect, sizeof expect, "%s: none of the 1 pairs has at most 20 tokens on both sides", long_dev);
    assert_contains(tt.err, expect);
    assert_false(exists(tt_in_dir("run-four/last.h5")));
}

static void test_bad_options_are_usage_errors_with_status_2(void **state) {
    const char *T = toy(), *O = tt_in_dir("run-usage"), *U = "usage: attograd-translate train ";
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--bogus"), "unknown option '--bogus'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--steps"), "--steps needs a value: an integer >= 1",
                       U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--steps", "ten"),
                       "--steps expects an integer >= 1, got 'ten'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--steps", "12abc"),
                       "--steps expects an integer >= 1, got '12abc'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--lr", "fast"),
                       "--lr expects a number > 0, got 'fast'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--model", "lstm2"),
                       "--model expects transformer, gru, lstm or rnn, got 'lstm2'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--d-model", "15", "--heads", "2"),
                       "--d-model 15 is not a multiple of --heads 2", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--steps", "0"),
                       "--steps expects an integer >= 1, got '0'", U);
    assert_usage_error(RUN("train", "--train", T, "--out", O, "--dropout", "1"),
                       "--dropout expects a probability from 0 to 1 (1 excluded), got '1'", U);
    assert_usage_error(RUN("train", "--out", O), "--train FILE is required", U);
    assert_usage_error(RUN("train", "--train", T, "stray"), "unexpected argument 'stray'", U);
    assert_usage_error(RUN("train", "--train", T, "--resume=yes"), "--resume takes no value, got 'yes'", U);
    assert_false(exists(O));
    assert_usage_error(RUN("eval", "--data", T), "--checkpoint FILE is required",
                       "usage: attograd-translate eval ");
    assert_usage_error(RUN("eval", "--checkpoint", "x.h5", "--data", T, "--beam", "0"),
                       "--beam expects an integer from 1 to 64, got '0'", "usage: attograd-translate eval ");
    assert_usage_error(RUN("translate", "a b"), "--checkpoint FILE is required",
                       "usage: attograd-translate translate ");
    assert_usage_error(RUN("translate", "--checkpoint", "x.h5", "--beam", "2x"),
                       "--beam expects an integer from 1 to 64, got '2x'", "usage: attograd-translate translate ");
    assert_usage_error(RUN("attention", "--checkpoint", "x.h5"), "one SENTENCE is required",
                       "usage: attograd-translate attention ");
    assert_usage_error(RUN("attention", "--checkpoint", "x.h5", "a", "b"), "unexpected argument 'b'",
                       "usage: attograd-translate attention ");
    assert_status(tt_run(NULL, (const char *[]){NULL}), 2);
    assert_contains(tt.err, "usage: attograd-translate COMMAND");
}

/* A checkpoint that is not from attograd-translate, written with the library: params only, or
 * with a configuration the program did not write. */
static void write_foreign_checkpoint(const char *path, const ag_train_state *st) {
    ag_params *p = ag_params_new(AG_F32);
    ag_rng r = ag_rng_new(3);
    ag_linear_new(p, "fc", 3, 2, true, &r);
    char msg[512];
    ag_checkpoint_status s = ag_checkpoint_save(path, p, NULL, st, &(ag_checkpoint_save_opts){.no_fsync = true}, msg, sizeof msg);
    if (s != AG_CHECKPOINT_OK) fail_msg("saving %s: %s", path, msg);
    ag_params_free(p);
}

/* eval, translate and attention (which: 0, 1 or 2; -1: all three) fail on path with status 1 and
 * a message with fragment. They load a checkpoint with one function: the cases after the first
 * few take turns. */
static void assert_rejected(const char *path, const char *fragment, int which) {
    char expect[700];
    snprintf(expect, sizeof expect, "attograd-translate: %s", path);
    const char *svg = tt_in_dir("rejected.svg");
    remove(svg);
    const char *runs[3][8] = {
        {"eval", "--checkpoint", path, "--data", toy(), NULL},
        {"translate", "--checkpoint", path, "a b", NULL},
        {"attention", "--checkpoint", path, "--out", svg, "a b", NULL},
    };
    for (int i = 0; i < 3; i++) {
        if (which >= 0 && i != which % 3) continue;
        assert_status(tt_run(NULL, runs[i]), 1);
        assert_contains(tt.err, expect);
        assert_contains(tt.err, fragment);
        assert_string_equal(tt.out, "");
    }
    assert_false(exists(svg));
}

static void test_commands_reject_missing_non_hdf5_and_foreign_checkpoints(void **state) {
    assert_rejected(tt_in_dir("no-such.h5"), "cannot open: No such file or directory", -1);
    assert_rejected(toy(), "not an HDF5 file", -1);
    /* a real checkpoint cut short */
    trained_run("transformer");
    char *whole = tt_read_file(ckpt_of("transformer", "last"), NULL);
    tt_write_file(tt_in_dir("truncated.h5"), whole, 3000);
    free(whole);
    assert_rejected(tt_in_dir("truncated.h5"), "truncated.h5", 0);

    /* parameters only */
    write_foreign_checkpoint(tt_in_dir("params-only.h5"), NULL);
    assert_rejected(tt_in_dir("params-only.h5"), "no training state in the file", -1);
    /* a configuration of another program */
    ag_train_state other = {0};
    ag_config_set_string(&other, "activation", "relu");
    ag_config_set_int(&other, "hidden", 2);
    write_foreign_checkpoint(tt_in_dir("other-config.h5"), &other);
    assert_rejected(tt_in_dir("other-config.h5"), "not a checkpoint of attograd-translate", 1);
    /* the configuration of a real run without its vocabularies */
    ag_train_state real = load_state(ckpt_of("transformer", "last")), novocab = {0};
    assert_true(ag_train_state_copy(&novocab, &real));
    assert_true(ag_config_remove(&novocab, "src_vocab") && ag_config_remove(&novocab, "tgt_vocab"));
    write_foreign_checkpoint(tt_in_dir("no-vocab.h5"), &novocab);
    assert_rejected(tt_in_dir("no-vocab.h5"), "vocabularies in the checkpoint are missing or damaged", 2);
    /* a real run's configuration and vocabularies over parameters of another model, fewer than
     * the configuration makes: refused before the model is built */
    write_foreign_checkpoint(tt_in_dir("other-params.h5"), &real);
    assert_rejected(tt_in_dir("other-params.h5"), "bytes of parameters, more than the file's", 0);
    ag_train_state_clear(&other);
    ag_train_state_clear(&real);
    ag_train_state_clear(&novocab);
}

static void test_configuration_the_model_cannot_be_built_from_is_rejected_not_a_crash(void **state) {
    trained_run("transformer");
    ag_train_state real = load_state(ckpt_of("transformer", "last"));
    const struct {
        const char *key;
        int64_t value;
    } bad[] = {{"nhead", 3}, {"nhead", 0}, {"d_model", -16}, {"dim_feedforward", 0}, {"positions", 0},
               {"max_len", 0}, {"encoder_layers", -1}, {"hidden", 1LL << 40},
               /* in the program's ranges but beyond the library's (32 layers) or the file's size */
               {"encoder_layers", 1024}, {"decoder_layers", 33}, {"d_model", 1LL << 20}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ag_train_state st = {0};
        assert_true(ag_train_state_copy(&st, &real));
        ag_config_set_int(&st, bad[i].key, bad[i].value);
        write_foreign_checkpoint(tt_in_dir("bad-config.h5"), &st);
        assert_rejected(tt_in_dir("bad-config.h5"), bad[i].key, (int)i);
        ag_train_state_clear(&st);
    }
    ag_train_state_clear(&real);
}

static void test_resume_without_a_previous_run_fails_naming_the_checkpoint(void **state) {
    const char *out = tt_in_dir("never-ran");
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--resume"), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "attograd-translate: cannot resume: %s/last.h5: cannot open: No such file", out);
    assert_contains(tt.err, expect);
    assert_not_contains(tt.err, "training pairs");
}

/* ---- where checkpoints go: found unwritable before training, and a lost save stops the run ---- */

static void test_an_unwritable_out_or_unreadable_test_stops_before_the_first_step(void **state) {
    const char *file = tt_in_dir("out-is-a-file");
    FILE *f = fopen(file, "w");
    fclose(f);
    assert_status(RUN("train", "--train", toy(), "--out", file, TINY, "--steps", "4"), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "attograd-translate: cannot write checkpoints to %s: Not a directory", file);
    assert_contains(tt.err, expect);
    assert_not_contains(tt.err, "parameters"); /* before the model is built */
    const char *missing = tt_in_dir("no-such-test.tsv");
    assert_status(RUN("train", "--train", toy(), "--test", missing, "--out", tt_in_dir("run-no-test"), TINY, "--steps",
                      "4"),
                  1);
    snprintf(expect, sizeof expect, "attograd-translate: cannot read the test file %s: No such file", missing);
    assert_contains(tt.err, expect);
    assert_not_contains(tt.err, "parameters");
}

/* a tmpfs of size (mounted at a new directory of tt.dir), or NULL where mounting is refused */
static const char *mounted_tmpfs(const char *name, const char *size) {
    const char *at = tt_in_dir(name);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s", size);
    mkdir(at, 0755);
    return mount("tmpfs", at, "tmpfs", 0, opts) == 0 ? at : NULL;
}

/* A read-only mount: refused at the start, fresh or resumed (a resume used to train its steps,
 * fail every save and exit 0). A disk too small for a checkpoint: the run stops at the first
 * save that fails, with status 1, and says the steps since the last save are lost. */
static void test_a_read_only_or_full_out_fails_with_status_1_never_0(void **state) {
    const char *ro = mounted_tmpfs("ro-mount", "4m");
    if (!ro) {
        print_message("cannot mount a tmpfs here (%s): needs root\n", strerror(errno));
        skip();
    }
    assert_status(RUN("train", "--train", toy(), "--out", ro, TINY, "--steps", "2", "--eval-every", "2"), 0);
    assert_int_equal(mount(NULL, ro, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
    assert_status(RUN("train", "--train", toy(), "--out", ro, TINY, "--steps", "20", "--resume"), 1);
    char expect[700];
    snprintf(expect, sizeof expect, "attograd-translate: cannot write checkpoints to %s: Read-only file system", ro);
    assert_contains(tt.err, expect);
    ag_train_state st = load_state(tt_in_dir("ro-mount/last.h5"));
    assert_int_equal(st.global_step, 2);
    ag_train_state_clear(&st);
    umount(ro);

    const char *full = mounted_tmpfs("full-mount", "16k");
    assert_non_null(full);
    assert_status(RUN("train", "--train", toy(), "--out", full, TINY, "--steps", "20", "--eval-every", "3",
                      "--save-every", "3"),
                  1);
    assert_contains(tt.err, "No space left on device");
    assert_contains(tt.err, "attograd-translate: stopped at step 3: a checkpoint could not be saved (above); the "
                              "steps since the last save are lost");
    assert_not_contains(tt.err, "step 6:");
    umount(full);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_missing_and_empty_training_files_fail_naming_the_file),
        TEST(test_bad_lines_are_skipped_and_counted_with_file_and_line),
        TEST(test_each_bad_line_is_fatal_with_strict_naming_file_and_line),
        TEST(test_corpus_without_a_good_line_fails),
        TEST(test_training_without_development_pairs_fails_saying_how_to_get_some),
        TEST(test_bad_options_are_usage_errors_with_status_2),
        TEST(test_commands_reject_missing_non_hdf5_and_foreign_checkpoints),
        TEST(test_configuration_the_model_cannot_be_built_from_is_rejected_not_a_crash),
        TEST(test_resume_without_a_previous_run_fails_naming_the_checkpoint),
        TEST(test_an_unwritable_out_or_unreadable_test_stops_before_the_first_step),
        TEST(test_a_read_only_or_full_out_fails_with_status_1_never_0)
    };
    return cmocka_run_group_tests(tests, cli_group_setup, cli_group_teardown);
}
