/* attograd-translate train as a run: early stopping with --patience, the JSON Lines log
 * OUT/log.jsonl (read by Python's json module, an independent parser), curves.svg's panels and
 * its point at step 0, and --resume taking back every setting of the run. The program runs as a
 * child process on tiny corpora with tiny models (a fraction of a second a run). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "translate_run.h"

#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--threads", "1", "--seed", "1", \
             "--tokenizer", "word"

static int group_setup(void **state) { return tt_begin("translate-train-run"); }
static int group_teardown(void **state) {
    tt_end();
    return 0;
}

/* a toy corpus (tu_write_toy_corpus) in the run's directory, written on first use into p */
static const char *toy_file(char *p, size_t size, const char *name, int lines, uint32_t seed) {
    if (!p[0]) {
        tu_write_toy_corpus(tt_in_dir(name), lines, seed);
        snprintf(p, size, "%s", tt_in_dir(name));
    }
    return p;
}

static const char *toy(void) {
    static char p[512];
    return toy_file(p, sizeof p, "toy.tsv", 40, 12345);
}

/* 10 dev pairs of the same kind */
static const char *dev(void) {
    static char p[512];
    return toy_file(p, sizeof p, "dev.tsv", 10, 777);
}

/* four pairs a tiny model learns by heart within a few dozen steps (its dev file too) */
static const char *memo(void) {
    static char p[512];
    if (!p[0]) {
        tt_write_text(tt_in_dir("memo.tsv"), "a b\tB A\nb c\tC B\nc a\tA C\na a\tA A\n");
        snprintf(p, sizeof p, "%s", tt_in_dir("memo.tsv"));
    }
    return p;
}
#define MEMO "--train", memo(), "--dev", memo(), TINY, "--batch", "4", "--dropout", "0", "--samples", "0", \
             "--eval-every", "10", "--warmup", "10", "--lr", "0.01"

static char *path_in(const char *dir, const char *name) {
    static char p[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static ag_train_state load_state(const char *path) {
    ag_train_state st = {0};
    char msg[512];
    if (ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK)
        fail_msg("%s: %s", path, msg);
    return st;
}

/* python3 running script on the arguments; its stdout (malloc'd), failing on a non-zero exit */
static char *python(const char *script, const char *a, const char *b) {
    char cmd[4096];
    FILE *f = fopen(tt_in_dir("check.py"), "w");
    assert_non_null(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s' 2>&1", tt_in_dir("check.py"), a, b ? b : "");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, len = 0, n;
    char *out = malloc(cap);
    while ((n = fread(out + len, 1, cap - len - 1, p)) > 0) len += n;
    out[len] = 0;
    int status = pclose(p);
    if (status != 0) fail_msg("python3 %s: exit %d: %s", a, status, out);
    return out;
}

/* ---- early stopping ---- */

/* The step of the first evaluation in dir's log.jsonl with every dev pair exact, and the last
 * evaluation's step, read by Python's json module */
static void log_steps(const char *dir, long *first_perfect, long *last_eval) {
    char *out = python("import json, sys\n"
                       "ev = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)['kind'] == 'eval']\n"
                       "print(min(e['step'] for e in ev if e['exact_match'] == 100), ev[-1]['step'])\n",
                       path_in(dir, "log.jsonl"), NULL);
    assert_int_equal(sscanf(out, "%ld %ld", first_perfect, last_eval), 2);
    free(out);
}

/* patience 3 evaluations of 10 steps: the run stops 30 steps after its first 100 %, says why,
 * saves last.h5 there; the same run with --patience 0 goes on to --steps; resumed, the count goes
 * on from where it stopped */
static void test_patience_stops_a_run_that_has_learned_the_dev_pairs(void **state) {
    const char *a = tt_in_dir("stop-a"), *b = tt_in_dir("stop-b");
    assert_status(RUN("train", MEMO, "--out", a, "--steps", "400", "--patience", "3"), 0);
    long s, last;
    log_steps(a, &s, &last);
    assert_true(s > 0 && s <= 300);
    char expect[256];
    snprintf(expect, sizeof expect,
             "\nstopped: no better dev exact match in 3 evaluations (best 100.00 %% at step %ld)\n", s);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "attograd-translate: %ld steps in ", s + 30);
    assert_contains(tt.err, expect);
    assert_int_equal(last, s + 30);
    ag_train_state st = load_state(path_in(a, "last.h5"));
    assert_int_equal(st.global_step, s + 30);
    ag_train_state_clear(&st);
    st = load_state(path_in(a, "best.h5"));
    assert_int_equal(st.global_step, s); /* the first 100 %: the later ties are not better */
    ag_train_state_clear(&st);

    /* resumed with the same patience: nothing to train; with 5, two more evaluations */
    assert_status(RUN("train", "--out", a, "--resume"), 0);
    assert_contains(tt.err, "not training on: the run stopped: no better dev exact match in 3 evaluations");
    assert_contains(tt.err, "attograd-translate: 0 steps in ");
    assert_status(RUN("train", "--out", a, "--resume", "--patience", "5"), 0);
    snprintf(expect, sizeof expect, "stopped: no better dev exact match in 5 evaluations (best 100.00 %% at step %ld)",
             s);
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "20 steps in ");
    assert_contains(tt.err, expect);
    snprintf(expect, sizeof expect, "(resumed at step %ld, now at %ld)\n", s + 30, s + 50);
    assert_contains(tt.err, expect);

    char steps[32];
    snprintf(steps, sizeof steps, "%ld", s + 50);
    assert_status(RUN("train", MEMO, "--out", b, "--steps", steps, "--patience", "0"), 0);
    assert_not_contains(tt.err, "stopped:");
    snprintf(expect, sizeof expect, "attograd-translate: %ld steps in ", s + 50);
    assert_contains(tt.err, expect);
}

/* ---- the JSON Lines log ---- */

/* Checks two logs (argv 1, 2) with Python's json: each line one object with exactly the fields
 * of its kind; steps increasing within a kind, without repeats; an evaluation at step 0 and at
 * every second step, a train entry at every step; elapsed_s not decreasing; and the two equal but
 * for the times (a resumed run and one that never stopped) */
static const char *CHECK_LOG =
    "import json, sys\n"
    "def load(path):\n"
    "    text = open(path).read()\n"
    "    assert text.endswith('\\n'), 'a line cut short'\n"
    "    return [json.loads(l) for l in text.splitlines()]\n"
    "a, b = load(sys.argv[1]), load(sys.argv[2])\n"
    "keys = {'train': {'kind', 'step', 'loss', 'lr', 'tokens_per_s', 'elapsed_s'},\n"
    "        'eval': {'kind', 'step', 'dev_loss', 'exact_match', 'bleu', 'chrf', 'dev_pairs', 'elapsed_s'}}\n"
    "for e in a:\n"
    "    assert set(e) == keys[e['kind']], e\n"
    "    assert all(isinstance(e[k], (int, float)) for k in e if k != 'kind'), e\n"
    "for kind, want in (('train', list(range(1, 9))), ('eval', [0, 2, 4, 6, 8])):\n"
    "    steps = [e['step'] for e in a if e['kind'] == kind]\n"
    "    assert steps == want, (kind, steps)\n"
    "times = [e['elapsed_s'] for e in a]\n"
    "assert times == sorted(times) and times[0] >= 0, times\n"
    "assert all(e['tokens_per_s'] > 0 and 0 < e['lr'] < 1 for e in a if e['kind'] == 'train')\n"
    "assert all(e['dev_pairs'] == 8 and 0 <= e['exact_match'] <= 100 for e in a if e['kind'] == 'eval')\n"
    "strip = lambda log: [{k: v for k, v in e.items() if k not in ('elapsed_s', 'tokens_per_s')} for e in log]\n"
    "assert strip(a) == strip(b), 'the logs differ'\n"
    "print(len(a), sum(e['loss'] for e in a if e['kind'] == 'train' and e['step'] in (3, 4)) / 2)\n";

/* An 8-step run logs every step (about 100 points a run) and each evaluation. The same run made
 * in three parts, the last resumed from a checkpoint older than the log (a crash after the log
 * was written): the entries past the checkpoint are dropped, none is repeated, and the log is the
 * uninterrupted run's, number for number, but for the times. */
static void test_log_jsonl_holds_every_logged_step_and_evaluation_once_after_a_resume(void **state) {
    const char *a = tt_in_dir("log-a"), *b = tt_in_dir("log-b");
#define LOGRUN(dir, steps, ...)                                                                                      \
    RUN("train", "--train", toy(), "--dev", dev(), TINY, "--batch", "8", "--max-eval", "8", "--eval-every", "2",     \
        "--save-every", "4", "--warmup", "2", "--patience", "0", "--out", dir, "--steps", steps, ##__VA_ARGS__)
    assert_status(LOGRUN(a, "8"), 0);
    char *err_a = strdup(tt.err);
    assert_status(LOGRUN(b, "4"), 0);
    size_t four_len;
    char *four = tt_read_file(path_in(b, "last.h5"), &four_len);
    assert_status(LOGRUN(b, "8", "--resume"), 0);
    tt_write_file(path_in(b, "last.h5"), four, four_len); /* back to step 4: steps 5 to 8 are lost */
    free(four);
    assert_status(LOGRUN(b, "8", "--resume"), 0);
    assert_contains(tt.err, "4 steps in ");
    assert_contains(tt.err, "(resumed at step 4, now at 8)\n");
    char *out = python(CHECK_LOG, path_in(b, "log.jsonl"), path_in(a, "log.jsonl"));
    int lines;
    double loss34;
    assert_int_equal(sscanf(out, "%d %lf", &lines, &loss34), 2);
    assert_int_equal(lines, 8 + 5);
    /* the progress line's train loss at step 4 is the mean of steps 3 and 4, the log's losses */
    const char *line = strstr(err_a, "step 4: train loss ");
    assert_non_null(line);
    double printed;
    assert_int_equal(sscanf(line, "step 4: train loss %lf", &printed), 1);
    assert_true(fabs(printed - loss34) <= 0.00005 + 1e-12);
    free(out);
    free(err_a);
}

/* ---- curves.svg ---- */

/* Four panels (losses, exact match in percent, BLEU and chrF2, learning rate), each series of an
 * evaluation starting at step 0 (the plot's left edge, x = 78), and exact match drawn on a 0 to
 * 100 axis: 0 % at the bottom of its panel, 100 % at the top (panels of 190 pixels, 56 apart,
 * below a 44-pixel title: the second spans y = 290 to 480) */
static void test_curves_have_four_panels_and_start_at_step_0(void **state) {
    const char *a = tt_in_dir("curves");
    assert_status(RUN("train", MEMO, "--out", a, "--steps", "60", "--patience", "0"), 0);
    char *svg = tt_read_file(path_in(a, "curves.svg"), NULL);
    assert_non_null(svg);
    const char *labels[] = {">loss</text>", ">exact match (%)</text>", ">BLEU, chrF2</text>", ">learning rate</text>"};
    for (int k = 0; k < 4; k++) assert_contains(svg, labels[k]);
    assert_contains(svg, ">dev BLEU</text>");
    assert_contains(svg, ">dev chrF2</text>");
    assert_int_equal(tt_count(svg, "<polyline"), 6);
    int n;
    double *x, *y;
    for (int k = 1; k <= 4; k++) { /* dev loss, exact match, BLEU, chrF2: 7 evaluations from step 0 */
        tt_polyline(svg, k, &x, &y, &n);
        assert_int_equal(n, 7);
        assert_true(fabs(x[0] - 78.0) < 1e-9);
        if (k == 2) {
            assert_true(fabs(y[0] - 480.0) < 1e-9);     /* the untrained model: 0 % */
            assert_true(fabs(y[n - 1] - 290.0) < 1e-9); /* learnt by heart: 100 % */
        }
        free(x);
        free(y);
    }
    free(svg);
    assert_contains(tt.err, "\nthe untrained model (step 0): dev loss ");
}

/* ---- resume ---- */

/* A run resumed with nothing but --out and --resume keeps its corpora (--train, --dev, --test), model,
 * evaluation (--eval-every, --max-eval), patience and --steps; a safe setting given again
 * replaces the recorded one, a conflicting one is refused by name */
static void test_resume_needs_only_out_and_keeps_every_setting(void **state) {
    const char *a = tt_in_dir("keep");
    assert_status(RUN("train", "--train", toy(), "--dev", dev(), "--test", toy(), TINY, "--batch", "8", "--out", a,
                      "--steps", "6", "--eval-every", "3", "--save-every", "3", "--max-eval", "5", "--patience", "7",
                      "--warmup", "3"),
                  0);
    assert_contains(tt.err, "; 1 process \xc3\x97 1 thread\n");
    ag_train_state st = load_state(path_in(a, "last.h5"));
    int64_t v;
    assert_true(ag_config_get_int(&st, "patience", &v) && v == 7);
    assert_true(ag_config_get_int(&st, "eval_every", &v) && v == 3);
    assert_string_equal(ag_config_get_string(&st, "test_file"), toy());
    ag_train_state_clear(&st);

    assert_status(RUN("train", "--out", a, "--resume", "--max-eval", "6"), 1);
    assert_contains(tt.err, "attograd-translate: cannot resume: --max-eval 6 differs from the checkpoint's 5");
    assert_status(RUN("train", "--out", a, "--resume", "--steps", "12"), 0);
    char expect[700];
    snprintf(expect, sizeof expect, "resuming %s at step 6 (epoch ", path_in(a, "last.h5"));
    assert_contains(tt.err, expect);
    assert_contains(tt.err, "step 9: evaluating on 5 dev pairs");
    assert_contains(tt.err, "step 12: evaluating on 5 dev pairs");
    assert_int_equal(tt_count(tt.err, ": evaluating on "), 2);
    assert_contains(tt.err, "attograd-translate: 6 steps in ");
    assert_contains(tt.err, " (resumed at step 6, now at 12)\n");
    snprintf(expect, sizeof expect, "test (%s, 40 pairs), best checkpoint:\n", toy());
    assert_contains(tt.out, expect);
    assert_status(RUN("train", "--out", a, "--resume", "--steps", "16", "--eval-every", "4", "--threads", "2"), 0);
    assert_contains(tt.err, "attograd-translate: note: --eval-every 4 replaces the run's 3\n");
    assert_contains(tt.err, "; 1 process \xc3\x97 2 threads\n");
    assert_int_equal(tt_count(tt.err, ": evaluating on "), 1); /* step 16 */
    st = load_state(path_in(a, "last.h5"));
    assert_int_equal(st.global_step, 16);
    assert_true(ag_config_get_int(&st, "eval_every", &v) && v == 4);
    assert_true(ag_config_get_int(&st, "steps", &v) && v == 16);
    ag_train_state_clear(&st);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_patience_stops_a_run_that_has_learned_the_dev_pairs),
        TEST(test_log_jsonl_holds_every_logged_step_and_evaluation_once_after_a_resume),
        TEST(test_curves_have_four_panels_and_start_at_step_0),
        TEST(test_resume_needs_only_out_and_keeps_every_setting),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
