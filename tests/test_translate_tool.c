/* attograd-translate as a command-line tool: stdin answered line by line while it stays open,
 * unknown words named, one-line option errors with a pointer to --help, --version, eval's loss,
 * a progress bar on a terminal that nothing prints over, curves.svg, the warmup warning. The
 * program runs as a child process on a toy corpus with tiny models (a fraction of a second a
 * run); every wait has a timeout, so a hang fails the test instead of blocking it. */
#define _GNU_SOURCE /* pipe2, posix_openpt, nftw */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "translate_run.h"
#include "translate_version.h"

#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "8", "--max-eval", "8", \
             "--threads", "1", "--seed", "1", "--tokenizer", "word"

/* ---- fixtures ---- */

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

/* a 6-step Transformer with the default --warmup (100, longer than the run), tested on the
 * training file; its stdout and stderr */
static char *tiny_log[2];
static const char *tiny(void) {
    static char ck[600];
    if (ck[0]) return ck;
    const char *out = tt_in_dir("tiny");
    char o[512];
    snprintf(o, sizeof o, "%s", out);
    assert_status(RUN("train", "--train", toy(), "--test", toy(), "--out", o, TINY, "--steps", "6", "--eval-every",
                      "3", "--save-every", "3"),
                  0);
    tiny_log[0] = strdup(tt.out);
    tiny_log[1] = strdup(tt.err);
    snprintf(ck, sizeof ck, "%s/best.h5", o);
    return ck;
}

static int group_setup(void **state) { return tt_begin("translate-tool"); }

static int group_teardown(void **state) {
    free(tiny_log[0]);
    free(tiny_log[1]);
    tt_end();
    return 0;
}

/* ---- stdin: each line answered while stdin stays open ---- */

/* Read from fd until buf holds a complete line (or timeout seconds pass); the line's length
 * with its newline, or 0 after the timeout or at the end of the output. */
static size_t read_line(int fd, char *buf, size_t cap, size_t *len, double timeout) {
    double t0 = tt_now();
    for (;;) {
        char *nl = memchr(buf, '\n', *len);
        if (nl) return (size_t)(nl - buf) + 1;
        double left = timeout - (tt_now() - t0);
        if (left <= 0 || *len + 1 >= cap) return 0;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        ssize_t got = read(fd, buf + *len, cap - *len - 1);
        if (got <= 0) return 0;
        *len += (size_t)got;
    }
}

static void test_translate_answers_each_stdin_line_before_stdin_is_closed(void **state) {
    const char *ck = tiny();
    assert_status(RUN("translate", "--checkpoint", ck, "a b c", "f e"), 0);
    char *want = strdup(tt.out);
    char *second = strchr(want, '\n') + 1;
    int in[2], out[2];
    assert_int_equal(pipe2(in, O_CLOEXEC), 0); /* the child keeps only its ends (dup2 to 0 and 1) */
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    int fds[3] = {in[0], out[1], tt_open_in_dir("stream-stderr.txt", O_WRONLY | O_CREAT | O_TRUNC)};
    pid_t pid = tt_spawn((const char *[]){"translate", "--checkpoint", ck, NULL}, fds);
    close(in[0]);
    close(out[1]);
    close(fds[2]);
    char buf[4096];
    size_t len = 0, n;
    /* one line in, its answer out, stdin still open: a reader that waits for EOF, or a stdout
     * that is only flushed at exit, gives nothing here and fails after the timeout */
    assert_int_equal(write(in[1], "a b c\n", 6), 6);
    n = read_line(out[0], buf, sizeof buf, &len, 60);
    if (!n) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("no answer to the first line within 60 s while stdin stayed open (got '%.*s')", (int)len, buf);
    }
    assert_int_equal(n, (size_t)(second - want));
    assert_memory_equal(buf, want, n);
    memmove(buf, buf + n, len -= n);
    /* a second line, written in two parts: answered once it is complete */
    assert_int_equal(write(in[1], "f ", 2), 2);
    assert_int_equal(read_line(out[0], buf, sizeof buf, &len, 0.3), 0);
    assert_int_equal(write(in[1], "e\n", 2), 2);
    n = read_line(out[0], buf, sizeof buf, &len, 60);
    if (!n) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("no answer to the second line within 60 s while stdin stayed open");
    }
    assert_int_equal(n, strlen(second));
    assert_memory_equal(buf, second, n);
    close(in[1]);
    assert_int_equal(tt_wait(pid, 60), 0);
    close(out[0]);
    free(want);
}

static void test_unknown_words_are_named_on_stderr_and_the_line_still_answered(void **state) {
    const char *ck = tiny();
    /* "zz" twice on line 2 is named once; line 3's unknown word is the whole line */
    assert_status(RUN_STDIN("a b c\na zz b zz q\nhello\n", "translate", "--checkpoint", ck), 0);
    assert_string_equal(tt.err,
                        "attograd-translate: stdin:2: unknown words 'zz', 'q' (not in the source vocabulary)\n"
                        "attograd-translate: stdin:3: unknown word 'hello' (not in the source vocabulary)\n");
    assert_int_equal(tt_count(tt.out, "\n"), 3);
    char *from_stdin = strdup(tt.out);
    /* the same sentences as arguments: numbered when there are several, the same translations
     * (the unknown words read as <unk>) */
    assert_status(RUN("translate", "--checkpoint", ck, "a b c", "a zz b zz q", "hello"), 0);
    assert_string_equal(tt.out, from_stdin);
    assert_string_equal(tt.err,
                        "attograd-translate: argument 2: unknown words 'zz', 'q' (not in the source vocabulary)\n"
                        "attograd-translate: argument 3: unknown word 'hello' (not in the source vocabulary)\n");
    assert_status(RUN("translate", "--checkpoint", ck, "a xyz"), 0);
    assert_string_equal(tt.err, "attograd-translate: unknown word 'xyz' (not in the source vocabulary)\n");
    assert_status(RUN("translate", "--checkpoint", ck, "a b c"), 0);
    assert_string_equal(tt.err, "");
    /* 70 known words and an unknown one past what the model reads (max_len 64, <eos> included):
     * the cut is said, the word never read is not named */
    char longer[300] = "";
    for (int i = 0; i < 70; i++) strcat(longer, "a ");
    strcat(longer, "zz");
    assert_status(RUN("translate", "--checkpoint", ck, longer), 0);
    assert_string_equal(tt.err, "attograd-translate: 71 words: the model reads the first 63 (it was trained with "
                                  "--max-len 64)\n");
    assert_int_equal(tt_count(tt.out, "\n"), 1);
    free(from_stdin);
}

/* ---- option errors ---- */

static void test_each_option_error_is_one_line_and_a_pointer_to_help(void **state) {
    const char *T = toy(), *O = tt_in_dir("never"), *ck = tiny();
    char out_dir[512];
    snprintf(out_dir, sizeof out_dir, "%s", O);
    const struct {
        const char *args[12], *problem;
    } cases[] = {
        {{"train", "--train", T, "--stesp", "4"}, "unknown option '--stesp' (did you mean --steps?)"},
        {{"train", "--train", T, "--d-mod", "4"}, "unknown option '--d-mod' (did you mean --d-model?)"},
        {{"train", "--train", T, "--warmpu=4"}, "unknown option '--warmpu' (did you mean --warmup?)"},
        {{"train", "--train", T, "--frobnicate"}, "unknown option '--frobnicate'"},
        {{"train", "--train", T, "--steps", "12abc"}, "--steps expects an integer >= 1, got '12abc'"},
        {{"train", "--train", T, "--steps", "-5"}, "--steps expects an integer >= 1, got '-5'"},
        {{"train", "--train", T, "--steps", "0"}, "--steps expects an integer >= 1, got '0'"},
        {{"train", "--train", T, "--steps", "1e3"}, "--steps expects an integer >= 1, got '1e3'"},
        {{"train", "--train", T, "--steps", "99999999999999999999"},
         "--steps expects an integer >= 1, got '99999999999999999999'"},
        {{"train", "--train", T, "--steps"}, "--steps needs a value: an integer >= 1"},
        {{"train", "--train", T, "--out"},
         "--out needs a value: DIR, where checkpoints and pictures go (runs/translate)"},
        {{"train", "--train", T, "--batch", "0"}, "--batch expects an integer from 1 to 1048576, got '0'"},
        {{"train", "--train", T, "--lr", "0"}, "--lr expects a number > 0, got '0'"},
        {{"train", "--train", T, "--lr", "1e-3x"}, "--lr expects a number > 0, got '1e-3x'"},
        {{"train", "--train", T, "--lr", "nan"}, "--lr expects a number > 0, got 'nan'"},
        {{"train", "--train", T, "--warmup", "-1"}, "--warmup expects an integer >= 1, got '-1'"},
        {{"train", "--train", T, "--d-model", "2000000"},
         "--d-model expects an integer from 1 to 1048576, got '2000000'"},
        {{"train", "--train", T, "--layers", "33"}, "--layers expects an integer from 0 to 32, got '33'"},
        {{"train", "--train", T, "--model", "gru", "--layers", "9"},
         "--layers expects an integer from 0 to 8 for --model gru, got '9'"},
        {{"train", "--train", T, "--dropout", "1"},
         "--dropout expects a probability from 0 to 1 (1 excluded), got '1'"},
        {{"train", "--train", T, "--label-smoothing", "1.5"},
         "--label-smoothing expects a number from 0 to 1, got '1.5'"},
        {{"train", "--train", T, "--clip", "-1"}, "--clip expects a number >= 0 (0: off), got '-1'"},
        {{"train", "--train", T, "--teacher-forcing", "2"},
         "--teacher-forcing expects a probability from 0 to 1, got '2'"},
        {{"train", "--train", T, "--heldout", "1"}, "--heldout expects a fraction from 0 to 1 (1 excluded), got '1'"},
        {{"train", "--train", T, "--max-len", "1"}, "--max-len expects an integer from 2 to 1048572, got '1'"},
        {{"train", "--train", T, "--min-count", "0"}, "--min-count expects an integer from 1 to 2147483647, got '0'"},
        {{"train", "--train", T, "--eval-every", "0"}, "--eval-every expects an integer >= 1, got '0'"},
        {{"train", "--train", T, "--max-eval", "-1"}, "--max-eval expects an integer >= 0 (0: all), got '-1'"},
        {{"train", "--train", T, "--save-every", "0"}, "--save-every expects an integer >= 1, got '0'"},
        {{"train", "--train", T, "--samples", "-2"}, "--samples expects an integer from 0 to 2147483647, got '-2'"},
        {{"train", "--train", T, "--stop-at", "99"},
         "--stop-at expects an exact match fraction from 0 to 1 (0: off), got '99'"},
        {{"train", "--train", T, "--seed", "-1"}, "--seed expects an integer >= 0, got '-1'"},
        {{"train", "--train", T, "--threads", "-1"}, "--threads expects an integer from 0 to 1024 (0: the free cores), got '-1'"},
        {{"train", "--train", T, "--resume=yes"}, "--resume takes no value, got 'yes'"},
        {{"train", "--train", T, "stray"}, "unexpected argument 'stray'"},
        {{"train", "--out", out_dir}, "--train FILE is required (the training corpus)"},
        {{"train", "--train", T, "--model", "lstm2"},
         "--model expects transformer, gru, lstm or rnn, got 'lstm2'"},
        {{"train", "--train", T, "--d-model", "15", "--heads", "2"}, "--d-model 15 is not a multiple of --heads 2"},
        {{"eval", "--checkpoint", ck, "--data", T, "--beam", "0"}, "--beam expects an integer from 1 to 64, got '0'"},
        {{"eval", "--checkpoint", ck, "--data", T, "--beam", "65"}, "--beam expects an integer from 1 to 64, got '65'"},
        {{"eval", "--checkpoint", ck}, "--data FILE is required (the TSV corpus to evaluate on)"},
        {{"eval", "--data", T}, "--checkpoint FILE is required (a checkpoint written by train)"},
        {{"eval", "--checkpoint", ck, "--dat", T}, "unknown option '--dat' (did you mean --data?)"},
        {{"translate", "--checkpoint", ck, "--beam", "0", "a"}, "--beam expects an integer from 1 to 64, got '0'"},
        {{"translate", "--checkpoint", ck, "--beam", "2x", "a"}, "--beam expects an integer from 1 to 64, got '2x'"},
        {{"translate", "--checkpoint", ck, "--length-penalty", "-1", "a"},
         "--length-penalty expects a number >= 0, got '-1'"},
        {{"translate", "--chekpoint", ck, "a"}, "unknown option '--chekpoint' (did you mean --checkpoint?)"},
        {{"translate", "a b"}, "--checkpoint FILE is required (a checkpoint written by train)"},
        {{"attention", "--checkpoint", ck}, "one SENTENCE is required (the sentence to draw)"},
        {{"attention", "--checkpoint", ck, "a", "b"}, "unexpected argument 'b'"},
        {{"attention", "--checkpoint", ck, "--out"}, "--out needs a value: FILE, the SVG to write (attention.svg)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int status = tt_run(NULL, cases[i].args);
        char want[1024];
        snprintf(want, sizeof want,
                 "attograd-translate %s: %s\nRun 'attograd-translate %s --help' for the options.\n", cases[i].args[0],
                 cases[i].problem, cases[i].args[0]);
        if (status != 2 || strcmp(tt.err, want) != 0 || *tt.out)
            fail_msg("case %zu (%s %s ...): status %d, stderr:\n%s\nexpected status 2 and:\n%s", i, cases[i].args[0],
                     cases[i].args[1] ? cases[i].args[1] : "", status, tt.err, want);
    }
    struct stat st;
    assert_int_equal(stat(out_dir, &st), -1); /* train stopped before making --out */
    /* a command: the same form, pointing to the main --help */
    assert_status(RUN("trian", "--train", T), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown command 'trian' (did you mean train?)\n"
                                  "Run 'attograd-translate --help' for the commands.\n");
    assert_status(RUN("--verison"), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown option '--verison' (did you mean --version?)\n"
                                  "Run 'attograd-translate --help' for the commands.\n");
    assert_status(RUN("frobnicate"), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown command 'frobnicate'\n"
                                  "Run 'attograd-translate --help' for the commands.\n");
}

static void test_version_prints_the_project_version(void **state) {
    assert_status(RUN("--version"), 0);
    assert_string_equal(tt.out, "attograd-translate " AG_TRANSLATE_VERSION "\n");
    assert_string_equal(tt.err, "");
    assert_true(strlen(AG_TRANSLATE_VERSION) >= 5); /* "0.1.0": a real version, not an empty define */
    assert_status(RUN("--help"), 0);
    assert_contains(tt.out, "--version");
}

/* ---- eval's loss ---- */

static void test_eval_prints_the_loss_its_help_promises_as_train_computes_it(void **state) {
    const char *ck = tiny();
    assert_status(RUN("eval", "--help"), 0);
    assert_contains(tt.out, "Loss (teacher-forced cross entropy per target token)");
    /* train --test evaluated best.h5 on the same file: the same loss, exact match, BLEU and chrF,
     * and the same sacreBLEU lines after it */
    const char *line = strstr(tiny_log[0], "test loss ");
    assert_non_null(line);
    double train_loss, train_exact, train_bleu, train_chrf;
    assert_int_equal(sscanf(line, "test loss %lf, greedy exact match %lf%%, BLEU %lf, chrF2 %lf", &train_loss,
                            &train_exact, &train_bleu, &train_chrf),
                     4);
    assert_status(RUN("eval", "--checkpoint", ck, "--data", toy()), 0);
    char want[2048];
    const char *sacre = strchr(line, '\n') + 1, *end = strchr(strchr(sacre, '\n') + 1, '\n') + 1;
    snprintf(want, sizeof want, "%s: 40 pairs, loss %.4f, greedy exact match %.2f%%, BLEU %.2f, chrF2 %.2f\n%.*s", toy(),
             train_loss, train_exact, train_bleu, train_chrf, (int)(end - sacre), sacre);
    assert_string_equal(tt.out, want);
    assert_int_equal(tt_count(want, "|nrefs:1|case:mixed|"), 2);
    const char *bleu_head = "  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:";
    assert_true(strncmp(sacre, bleu_head, strlen(bleu_head)) == 0);
    /* training says once, at its first evaluation (the untrained model's), whose BLEU its lines print */
    assert_int_equal(tt_count(tiny_log[1], "step 0: evaluating on 2 dev pairs; BLEU and chrF2 are sacreBLEU "), 1);
    assert_int_equal(tt_count(tiny_log[1], "sacreBLEU"), 1);
    assert_true(train_loss > 0.5 && train_loss < 5); /* 6 steps: far from ln(10) = 2.3 is not learnt yet */
    /* the loss changes with the data: one pair alone */
    tt_write_text(tt_in_dir("one.tsv"), "a b\tB A\n");
    assert_status(RUN("eval", "--checkpoint", ck, "--data", tt_in_dir("one.tsv")), 0);
    double one;
    snprintf(want, sizeof want, "%s: 1 pairs, loss %%lf, ", tt_in_dir("one.tsv"));
    assert_int_equal(sscanf(tt.out, want, &one), 1);
    assert_true(one > 0 && one != train_loss);
}

/* ---- the progress bar on a terminal ---- */

/* The screen a terminal shows for text (\r, \n and ESC [ K, the controls the bar uses; other
 * bytes written at the cursor): its lines, malloc'd, *n of them. */
static char **render_terminal(const char *text, int *n) {
    int cap = 64, rows = 1;
    char **line = calloc((size_t)cap, sizeof *line);
    line[0] = calloc(4096, 1);
    size_t col = 0;
    for (const char *c = text; *c; c++) {
        if (*c == '\r') col = 0;
        else if (*c == '\n') {
            if (rows == cap) line = realloc(line, sizeof *line * (size_t)(cap *= 2));
            line[rows++] = calloc(4096, 1);
            col = 0; /* the pty adds \r to \n (onlcr) */
        } else if (c[0] == '\033' && c[1] == '[' && c[2] == 'K') {
            line[rows - 1][col] = 0;
            c += 2;
        } else if (col < 4095) {
            char *l = line[rows - 1];
            size_t len = strlen(l);
            l[col++] = *c;
            if (col > len) l[col] = 0;
        }
    }
    *n = rows;
    return line;
}

static void test_the_progress_bar_is_cleared_before_evaluation_lines(void **state) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
        print_message("no pseudo-terminal here: %s\n", strerror(errno));
        skip();
    }
    fcntl(master, F_SETFD, FD_CLOEXEC);
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    assert_true(slave >= 0);
    struct winsize ws = {.ws_row = 50, .ws_col = 200};
    ioctl(slave, TIOCSWINSZ, &ws);
    int fds[3] = {open("/dev/null", O_RDONLY | O_CLOEXEC),
                  tt_open_in_dir("bar-stdout.txt", O_WRONLY | O_CREAT | O_TRUNC), slave};
    char out[512];
    snprintf(out, sizeof out, "%s", tt_in_dir("run-bar"));
    pid_t pid = tt_spawn((const char *[]){"train", "--train", toy(), "--out", out, TINY, "--steps", "9",
                                            "--eval-every", "3", "--save-every", "3", "--warmup", "2", NULL},
                           fds);
    close(fds[0]);
    close(fds[1]);
    close(slave);
    /* read the terminal while the run goes on (a full pty would block it) */
    size_t len = 0, cap = 1 << 16;
    char *text = malloc(cap);
    double t0 = tt_now();
    for (;;) {
        struct pollfd p = {master, POLLIN, 0};
        if (tt_now() - t0 > 120) break;
        if (poll(&p, 1, 100) <= 0) {
            if (waitpid(pid, NULL, WNOHANG) == pid) { pid = 0; break; }
            continue;
        }
        if (len + 4096 > cap) text = realloc(text, cap *= 2);
        ssize_t got = read(master, text + len, cap - len - 1);
        if (got <= 0) break; /* EIO: the child closed its end */
        len += (size_t)got;
    }
    text[len] = 0;
    close(master);
    if (pid) assert_int_equal(tt_wait(pid, 60), 0);
    int n;
    char **screen = render_terminal(text, &n);
    /* every evaluation line, sample and result is on a line of its own, and the bar (drawn
     * with '[', '#' and '.') shares a line with nothing */
    int evals = 0, samples = 0, bars = 0;
    for (int i = 0; i < n; i++) {
        const char *l = screen[i];
        bool bar = strstr(l, "epoch ") && strstr(l, " tok/s ");
        if (bar) {
            bars++;
            if (strncmp(l, "epoch ", 6) != 0 || tt_count(l, "epoch ") != 1 || strstr(l, "step 3:") || strstr(l, "->"))
                fail_msg("screen line %d has the bar and more: '%s'\nscreen text:\n%s", i, l, text);
        }
        if (strstr(l, ": evaluating on ")) {
            evals++;
            if (strncmp(l, "step ", 5) != 0) fail_msg("screen line %d: '%s'", i, l);
        }
        if (strstr(l, "  ->  ")) {
            samples++;
            if (strncmp(l, "  ", 2) != 0) fail_msg("screen line %d: '%s'", i, l);
        }
    }
    assert_int_equal(evals, 4); /* steps 0, 3, 6 and 9 */
    assert_true(samples >= 3);
    assert_int_equal(bars, 1); /* the final status line, once the run is over */
    assert_contains(text, "\033[K"); /* the bar was redrawn in place: the terminal mode */
    for (int i = 0; i < n; i++) free(screen[i]);
    free(screen);
    free(text);
}

/* ---- curves.svg and the warmup warning ---- */

/* the points of the index-th <polyline> of svg as x coordinates (*n of them, malloc'd) */
static double *polyline_x(const char *svg, int index, int *n) {
    double *x, *y;
    tt_polyline(svg, index, &x, &y, n);
    free(y);
    return x;
}

static void test_curves_plot_the_train_loss_at_every_logged_step_from_step_0(void **state) {
    char out[512], path[600];
    snprintf(out, sizeof out, "%s", tt_in_dir("run-curves"));
    /* 250 steps: the train loss is logged every 250 / 100 = 2 steps, and at the evaluation at
     * step 125 (the mean of step 125 alone) */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "250", "--eval-every", "125",
                      "--save-every", "250", "--warmup", "20"),
                  0);
    assert_true(strstr(tt.err, "warning: --warmup") == NULL);
    snprintf(path, sizeof path, "%s/curves.svg", out);
    char *svg = tt_read_file(path, NULL);
    assert_non_null(svg);
    /* the plot area: x from 78 (left) over 658 pixels, the axis from 0 to 250 */
    int n;
    double *x = polyline_x(svg, 0, &n), want[200];
    int m = 0;
    for (int s = 2; s <= 250; s += 2) {
        if (s == 126) want[m++] = 125;
        want[m++] = s;
    }
    assert_int_equal(n, m);
    for (int i = 0; i < n; i++) {
        double px = 78 + want[i] / 250 * 658;
        if (fabs(x[i] - px) > 0.051)
            fail_msg("train loss point %d is at x = %.1f, expected step %.0f at %.1f", i, x[i], want[i], px);
    }
    free(x);
    /* the dev loss: the untrained model's at step 0 and the two evaluations */
    x = polyline_x(svg, 1, &n);
    assert_int_equal(n, 3);
    assert_true(fabs(x[0] - 78) < 0.051);
    assert_true(fabs(x[1] - (78 + 125.0 / 250 * 658)) < 0.051);
    free(x);
    /* the axis starts at 0, at the plot's left edge */
    assert_contains(svg, "<text x=\"78.0\" y=\"");
    const char *tick = strstr(svg, "<text x=\"78.0\" y=\"");
    bool zero = false;
    for (; tick; tick = strstr(tick + 1, "<text x=\"78.0\" y=\""))
        zero |= strncmp(strchr(tick, '>'), ">0</text>", 9) == 0;
    assert_true(zero);
    free(svg);
}

static void test_a_warmup_longer_than_the_run_is_warned_about(void **state) {
    tiny(); /* 6 steps, the default --warmup 100 and --lr 0.001 */
    assert_contains(tiny_log[1], "attograd-translate: warning: --warmup 100 is longer than the run (--steps 6): the "
                                 "learning rate only rises to 6e-05 of --lr 0.001 and never decays; a --warmup of 1 "
                                 "(a fifth of the steps) would reach it\n");
    assert_status(RUN("train", "--train", toy(), "--out", tt_in_dir("run-warm"), TINY, "--steps", "10", "--warmup",
                      "10", "--eval-every", "10"),
                  0);
    assert_true(strstr(tt.err, "warning") == NULL); /* equal: the peak is reached at the last step */
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_translate_answers_each_stdin_line_before_stdin_is_closed),
        TEST(test_unknown_words_are_named_on_stderr_and_the_line_still_answered),
        TEST(test_each_option_error_is_one_line_and_a_pointer_to_help),
        TEST(test_version_prints_the_project_version),
        TEST(test_eval_prints_the_loss_its_help_promises_as_train_computes_it),
        TEST(test_the_progress_bar_is_cleared_before_evaluation_lines),
        TEST(test_curves_plot_the_train_loss_at_every_logged_step_from_step_0),
        TEST(test_a_warmup_longer_than_the_run_is_warned_about),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
