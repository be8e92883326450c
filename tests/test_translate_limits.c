/* attograd-translate train at its limits: option values the parser accepts but the machine
 * cannot run, a model too big for memory, a loss that goes to NaN, corpora too small for a
 * SentencePiece vocabulary, files that cannot be written, and a resumed run on other data.
 * Each run is the program as a user runs it, judged by its exit status, its message and the
 * files it leaves. */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "translate_run.h"

/* a model small enough that a run takes a fraction of a second (word tokens: no SentencePiece
 * training) */
#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--hidden", "16", "--batch", "8", \
             "--max-eval", "8", "--threads", "1", "--heldout", "0.1", "--seed", "1", "--tokenizer", "word"

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int group_setup(void **state) { return tt_begin("translate-limits"); }

static int group_teardown(void **state) {
    tt_end();
    return 0;
}

/* ---- options the parser used to accept ---- */

/* "attograd-translate train: OPT expects ..., got 'V'" with status 2, and nothing trained */
static void assert_refused_option(const char *opt, const char *value, const char *expects) {
    const char *out = tt_in_dir("refused");
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", opt, value), 2);
    char expect[300];
    snprintf(expect, sizeof expect, "attograd-translate train: %s expects %s, got '%s'\n", opt, expects, value);
    assert_contains(tt.err, expect);
    assert_false(exists(out));
}

static void test_values_beyond_what_the_program_can_run_are_usage_errors(void **state) {
    /* libgomp's team of 100000 threads overflowed its stack */
    assert_refused_option("--threads", "100000", "an integer from 0 to 1024 (0: the free cores)");
    /* kept in an int: 4294967297 trained with batch 1, 2147483648 samples printed none */
    assert_refused_option("--batch", "4294967297", "an integer from 1 to 1048576");
    assert_refused_option("--samples", "2147483648", "an integer from 0 to 2147483647");
    assert_refused_option("--min-count", "2147483648", "an integer from 1 to 2147483647");
    /* the positional table holds 2 max_len + 8 <= 2^21 positions, what a checkpoint load accepts */
    assert_refused_option("--max-len", "1048573", "an integer from 2 to 1048572");
    assert_refused_option("--vocab-size", "10000000", "an integer from 0 to 1048576 (0: chosen from the corpus)");
    assert_refused_option("--vocab-size", "-1", "an integer from 0 to 1048576 (0: chosen from the corpus)");
}

/* ---- memory, counted before anything is allocated ---- */

/* parameters of the translation models, counted from their PyTorch modules: nn.Transformer
 * (in_proj 3d x d and 3d, out_proj d x d and d per attention; linear1, linear2; two norms per
 * encoder layer, three per decoder layer, and the two final norms) or a bidirectional nn.GRU
 * encoder with a bridge, additive attention (W1, W2, v without bias), a GRUCell decoder; the
 * embeddings and the generator around either */
static double transformer_params(double d, double ff, double layers, double vs, double vt) {
    double mha = 3 * d * d + 3 * d + d * d + d, ffn = ff * d + ff + d * ff + d;
    return (vs + vt) * d + layers * (mha + ffn + 4 * d) + layers * (2 * mha + ffn + 6 * d) + 4 * d + d * vt + vt;
}

static double gru_params(double e, double h, double vs, double vt) {
    double encoder = 2 * (3 * h * e + 3 * h * h + 6 * h), bridge = 2 * h * h + h, attention = 2 * h * h + h * h + h;
    double decoder = 3 * h * (e + 2 * h) + 3 * h * h + 6 * h;
    return (vs + vt) * e + encoder + bridge + attention + decoder + 3 * h * vt + vt;
}

/* the two numbers after `key` in text ("vocabularies 14 and 14 tokens") */
static void two_numbers(const char *text, const char *key, long long *a, long long *b) {
    const char *p = strstr(text, key);
    if (!p || sscanf(p + strlen(key), "%lld and %lld", a, b) != 2) fail_msg("no '%s' N and M in: %s", key, text);
}

static void test_the_parameter_count_is_the_built_models(void **state) {
    /* what the built models report (ag_params numel) is what the PyTorch modules hold */
    const char *out = tt_in_dir("count");
    long long vs, vt, n;
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1"), 0);
    two_numbers(tt.err, "vocabularies ", &vs, &vt);
    assert_int_equal(sscanf(strstr(tt.err, "transformer model, ") + 19, "%lld", &n), 1);
    assert_true((double)n == transformer_params(16, 32, 1, (double)vs, (double)vt));
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", "--model", "gru"), 0);
    assert_int_equal(sscanf(strstr(tt.err, "gru model, ") + 11, "%lld", &n), 1);
    assert_true((double)n == gru_params(16, 16, (double)vs, (double)vt));
}

/* "this machine has 23.4 GiB" when neither RLIMIT_AS nor a cgroup limits the process */
static void assert_machine_memory(const char *msg) {
    struct rlimit rl;
    FILE *cg = fopen("/sys/fs/cgroup/memory.max", "r");
    char line[64] = "max";
    if (cg && !fgets(line, sizeof line, cg)) line[0] = 0;
    if (cg) fclose(cg);
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur != RLIM_INFINITY || strncmp(line, "max", 3) != 0) {
        assert_contains(msg, " is "); /* "the address-space limit (ulimit -v) is 3.0 GiB" */
        return;
    }
    char expect[64];
    snprintf(expect, sizeof expect, "; this machine has %.1f GiB\n",
             (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE) / 1073741824.0);
    assert_contains(msg, expect);
}

static void test_a_model_too_big_for_memory_is_refused_before_it_is_allocated(void **state) {
    const char *out = tt_in_dir("too-big");
    /* 2^20 wide: about 2^44 parameters; it aborted in ag_params_add */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", "--d-model", "1048576"), 1);
    assert_contains(tt.err, "attograd-translate: the model is too big: --d-model 1048576 --heads 2 --ff 32 "
                            "--layers 1+1 with vocabularies of ");
    long long vs, vt;
    two_numbers(tt.err, "with vocabularies of ", &vs, &vt);
    double n = transformer_params(1048576, 32, 1, (double)vs, (double)vt);
    char expect[200];
    snprintf(expect, sizeof expect, " tokens: %.0f parameters need %.1f TiB for the parameters alone, %.1f TiB with "
             "their gradients and Adam's two moments; ", n, 4 * n / 1099511627776.0, 16 * n / 1099511627776.0);
    assert_contains(tt.err, expect);
    assert_machine_memory(tt.err);
    assert_false(exists(tt_in_dir("too-big/last.h5")));
    /* 2^20 feed-forward units (it crashed in the feed-forward's packing), in 32+32 layers of
     * 1024: 2^37 parameters and more. The activations are those of every training pair in one
     * batch (--batch asks for more than there are). */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", "--d-model", "1024", "--ff",
                      "1048576", "--layers", "32", "--batch", "1048576"), 1);
    assert_contains(tt.err, "attograd-translate: the model is too big: --d-model 1024 --heads 2 --ff 1048576 "
                            "--layers 32+32 with vocabularies of ");
    assert_contains(tt.err, "of activations for batches of 36 pairs of up to "); /* 40 pairs, 4 held out */
    assert_machine_memory(tt.err);
    /* the recurrent kinds are counted too */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", "--model", "gru", "--hidden",
                      "1048576"), 1);
    two_numbers(tt.err, "with vocabularies of ", &vs, &vt);
    snprintf(expect, sizeof expect, "the model is too big: --model gru --d-model 16 --hidden 1048576 --layers 1 with "
             "vocabularies of %lld and %lld tokens: %.0f parameters need ", vs, vt, gru_params(16, 1048576, vs, vt));
    assert_contains(tt.err, expect);
}

static void test_a_checkpoint_with_a_damaged_size_is_refused_at_once(void **state) {
    const char *out = tt_in_dir("damaged");
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every", "2"), 0);
    char msg[512], path[600];
    snprintf(path, sizeof path, "%s/last.h5", out);
    ag_train_state st = {0};
    ag_params *p = ag_params_new(AG_F32);
    ag_rng r = ag_rng_new(3);
    ag_linear_new(p, "fc", 3, 2, true, &r);
    if (ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) fail_msg("%s", msg);
    /* dim_feedforward = 2^20 took 25 s and 0.5 GB of initialising before the parameters were
     * found not to match */
    assert_true(ag_config_set_int(&st, "dim_feedforward", 1 << 20));
    const char *bad = tt_in_dir("ff-2-20.h5");
    if (ag_checkpoint_save(bad, p, NULL, &st, &(ag_checkpoint_save_opts){.no_fsync = true}, msg, sizeof msg) != AG_CHECKPOINT_OK)
        fail_msg("%s", msg);
    ag_train_state_clear(&st);
    ag_params_free(p);
    double t0 = tt_now();
    assert_status(RUN("translate", "--checkpoint", bad, "a b"), 1);
    assert_true(tt_now() - t0 < 20); /* a fraction of a second; it was 25 s on an idle machine */
    snprintf(msg, sizeof msg, "attograd-translate: %s: damaged model configuration: d_model 16, dim_feedforward "
             "1048576, hidden 16, 1+1 layers", bad);
    assert_contains(tt.err, msg);
    assert_contains(tt.err, "bytes of parameters, more than the file's ");
    assert_string_equal(tt.out, "");
}

/* ---- a loss that becomes NaN ---- */

/* path's bytes, and the loss eval reports for it on the toy corpus (the weights load and are
 * finite) */
static char *finite_checkpoint(const char *path) {
    char *bytes = tt_read_file(path, NULL);
    if (!bytes) fail_msg("%s cannot be read", path);
    assert_status(RUN("eval", "--checkpoint", path, "--data", toy()), 0);
    double loss = NAN;
    const char *l = strstr(tt.out, " pairs, loss ");
    assert_non_null(l);
    assert_int_equal(sscanf(l + strlen(" pairs, loss "), "%lf", &loss), 1);
    assert_true(isfinite(loss) && loss > 0);
    return bytes;
}

static void assert_unchanged(const char *path, const char *before, size_t len) {
    size_t n;
    char *now = tt_read_file(path, &n);
    assert_non_null(now);
    assert_true(n == len && memcmp(now, before, len) == 0);
    free(now);
}

static void test_a_nan_loss_stops_training_with_status_1_and_keeps_the_checkpoints(void **state) {
    const char *out = tt_in_dir("nan");
    char best[600], last[600];
    snprintf(best, sizeof best, "%s/best.h5", out);
    snprintf(last, sizeof last, "%s/last.h5", out);
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every", "2"), 0);
    size_t nb, nl;
    free(tt_read_file(best, &nb));
    free(tt_read_file(last, &nl));
    char *b = finite_checkpoint(best), *l = finite_checkpoint(last);
    /* a run on the same folder whose first update sends the weights to ~1e30: its next loss is
     * NaN. It wrote NaN weights to both checkpoints and exited 0. */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "6", "--lr", "1e30", "--warmup", "1",
                      "--eval-every", "100", "--save-every", "100"), 1);
    assert_contains(tt.err, "\nstep 2: the loss is nan; stopping (lower --lr?)\n");
    assert_contains(tt.err, "attograd-translate: stopped at step 2: training diverged; no checkpoint holds its weights");
    assert_unchanged(best, b, nb);
    assert_unchanged(last, l, nl);
    /* evaluated after its first update, the dev loss is the first to go */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "6", "--lr", "1e30", "--warmup", "1",
                      "--eval-every", "1"), 1);
    assert_contains(tt.err, "\nstep 1: the dev loss is nan; stopping (lower --lr?)\n");
    assert_unchanged(best, b, nb);
    assert_unchanged(last, l, nl);
    free(finite_checkpoint(best));
    free(finite_checkpoint(last));
    free(b);
    free(l);
}

/* ---- the longest --max-len trains and its checkpoint loads ---- */

static void test_the_largest_max_len_trains_and_its_checkpoint_loads(void **state) {
    /* 1048576 trained, then best.h5 was refused at the end (2^21 + 8 positions); the run's end
     * loads best.h5 as eval and translate do, and reports from it */
    const char *out = tt_in_dir("longest");
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "1", "--d-model", "2", "--heads", "1",
                      "--max-len", "1048572"),
                  0);
    assert_contains(tt.out, "checkpoints: ");
    assert_contains(tt.out, "attention of \"");
}

/* ---- SentencePiece on tiny corpora ---- */

static void test_tiny_corpora_get_a_vocabulary_that_fits_or_a_plain_message(void **state) {
    /* no space anywhere: SentencePiece still needs "▁" (its dummy prefix) besides the 4 specials,
     * 256 bytes and the 13 letters of each side (o n e t w h r f u i v s x; u n d e x t r o i s q a c) */
    const char *words = tt_in_dir("words.tsv"), *out = tt_in_dir("words");
    tt_write_text(words, "one\tun\ntwo\tdeux\nthree\ttrois\nfour\tquatre\nfive\tcinq\nsix\tsix\n");
    const char *spm[] = {"--tokenizer", "spm", "--heldout", "0.5"};
#define SPM_TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "8", "--steps", "1"
    assert_status(RUN("train", "--train", words, "--out", out, SPM_TINY, spm[0], spm[1], spm[2], spm[3]), 0);
    assert_contains(tt.err, "SentencePiece unigram vocabularies of 274 and 274 pieces trained on ");
    assert_status(RUN("train", "--train", words, "--out", out, SPM_TINY, spm[0], spm[1], spm[2], spm[3], "--spm-type",
                      "bpe"), 0);
    assert_contains(tt.err, "SentencePiece bpe vocabularies of 274 and 274 pieces trained on ");
    /* fewer pieces than that: said plainly (it was "Vocabulary size is smaller than
     * required_chars. 273 vs 274") */
    assert_status(RUN("train", "--train", words, "--out", out, SPM_TINY, spm[0], spm[1], spm[2], spm[3],
                      "--vocab-size", "273"), 1);
    char expect[600];
    snprintf(expect, sizeof expect, "attograd-translate: %s: source side, vocabulary size 273: too small: it needs at "
             "least 274 pieces (the 4 special tokens, 256 bytes and the side's 14 distinct characters)\n", words);
    assert_string_equal(tt.err, expect);
    /* more than the corpus has: capped, and said in one line */
    assert_status(RUN("train", "--train", words, "--out", out, SPM_TINY, spm[0], spm[1], spm[2], spm[3],
                      "--vocab-size", "5000"), 0);
    snprintf(expect, sizeof expect, "attograd-translate: note: --vocab-size 5000 is capped: %s has material for only ",
             words);
    assert_contains(tt.err, expect);
    assert_int_equal(tt_count(tt.err, "capped"), 1);
    /* a header line alone is one pair: trained, then refused for holding out no dev pair */
    const char *header = tt_in_dir("header.tsv");
    tt_write_text(header, "source\ttarget\n");
    assert_status(RUN("train", "--train", header, "--out", out, SPM_TINY, spm[0], spm[1]), 1);
    assert_contains(tt.err, "holds out none for development: raise it or give --dev FILE\n");
    assert_not_contains(tt.err, "SentencePiece training failed");
}

/* ---- files that cannot be written ---- */

static void test_a_failed_write_of_curves_or_attention_svg_gives_status_1(void **state) {
    const char *names[] = {"curves.svg", "attention.svg"};
    for (int i = 0; i < 2; i++) {
        char out[600], dir[700], expect[800];
        snprintf(out, sizeof out, "%s/svg-%d", tt.dir, i);
        snprintf(dir, sizeof dir, "%s/%s", out, names[i]);
        assert_int_equal(mkdir(out, 0700), 0);
        assert_int_equal(mkdir(dir, 0700), 0); /* a directory where the picture goes: its rename fails */
        assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every", "2"), 1);
        snprintf(expect, sizeof expect, "attograd-translate: %s: write failed: Is a directory\n", dir);
        assert_contains(tt.err, expect);
        assert_true(exists(tt_in_dir(i ? "svg-1/best.h5" : "svg-0/best.h5")));
    }
}

/* ---- --resume on other data ---- */

static void test_resume_says_when_the_training_or_dev_pairs_changed(void **state) {
    const char *out = tt_in_dir("resume"), *more = tt_in_dir("toy-more.tsv"), *dev = tt_in_dir("dev.tsv");
    tu_write_toy_corpus(more, 50, 12345); /* the 40 pairs of toy() and 10 more */
    tu_write_toy_corpus(dev, 12, 777);
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every", "2"), 0);
    /* the same data: nothing to say */
    assert_status(RUN("train", "--train", toy(), "--out", out, "--resume", "--steps", "3"), 0);
    assert_not_contains(tt.err, "note:");
    /* another training file: 45 of its 50 pairs train (--heldout 0.1), 36 of the 40 did */
    assert_status(RUN("train", "--train", more, "--out", out, "--resume", "--steps", "4"), 0);
    char expect[1200];
    snprintf(expect, sizeof expect, "attograd-translate: note: --train %s: 45 pairs, the checkpoint was trained on 36 "
             "pairs of %s (hash differs); continuing on the new data\n", more, toy());
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "attograd-translate: note: dev pairs held out of %s: 5 pairs, the checkpoint was "
             "evaluated on 4 pairs held out of %s (hash differs); continuing on the new dev pairs\n", more, toy());
    assert_contains(tt.err, expect);
    /* a --dev file added: every pair of the training file trains now */
    assert_status(RUN("train", "--train", more, "--dev", dev, "--out", out, "--resume", "--steps", "5"), 0);
    snprintf(expect, sizeof expect, "attograd-translate: note: --train %s: 50 pairs, the checkpoint was trained on 45 "
             "pairs of %s (hash differs); continuing on the new data\n", more, more);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "attograd-translate: note: --dev %s: 12 pairs, the checkpoint was evaluated on 5 "
             "pairs held out of %s (hash differs); continuing on the new dev pairs\n", dev, more);
    assert_contains(tt.err, expect);
    /* the same files again: recorded by the last run, nothing to say */
    assert_status(RUN("train", "--train", more, "--dev", dev, "--out", out, "--resume", "--steps", "6"), 0);
    assert_not_contains(tt.err, "note:");
    /* a flag that differs in the last bits of a double (the default --lr, 0.001) prints differently */
    assert_status(RUN("train", "--train", more, "--dev", dev, "--out", out, "--resume", "--steps", "7", "--lr",
                      "0.0010000000000000002"), 1);
    assert_contains(tt.err, "attograd-translate: cannot resume: --lr 0.0010000000000000002 differs from the "
                            "checkpoint's 0.001 (");
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_values_beyond_what_the_program_can_run_are_usage_errors),
        TEST(test_the_parameter_count_is_the_built_models),
        TEST(test_a_model_too_big_for_memory_is_refused_before_it_is_allocated),
        TEST(test_a_checkpoint_with_a_damaged_size_is_refused_at_once),
        TEST(test_a_nan_loss_stops_training_with_status_1_and_keeps_the_checkpoints),
        TEST(test_the_largest_max_len_trains_and_its_checkpoint_loads),
        TEST(test_tiny_corpora_get_a_vocabulary_that_fits_or_a_plain_message),
        TEST(test_a_failed_write_of_curves_or_attention_svg_gives_status_1),
        TEST(test_resume_says_when_the_training_or_dev_pairs_changed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
