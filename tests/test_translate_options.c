/* attograd-translate's command-line conventions, in every subcommand: -h and --help print the
 * usage with each option's default and range on stdout (status 0); a short name means its long
 * option (-b 4 is --beam 4, -b4 too), and --name=value is --name value; "--" ends the options,
 * so "-h" after it is a sentence, and "-" alone is stdin; an unknown option, long or short, is
 * one line naming it (and the option it is a near miss of) then the pointer to --help, status
 * 2; a value is the next argument even when it begins with '-'. The witness of "the same
 * meaning" is the output of the long spelling, and of "a sentence" the same text given on
 * stdin, which no option parsing touches. Each run takes a fraction of a second on a tiny model. */
#define _GNU_SOURCE /* strndup */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"
#include "translate_run.h"

static const char *const COMMANDS[] = {"train", "eval", "translate", "attention", "score", "average"};
enum { NCOMMANDS = 6 };

/* ---- fixtures ---- */

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 777);
    return p;
}

#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "8", "--max-eval", "8", \
             "--threads", "1", "--seed", "3", "--tokenizer", "word"

/* a 30-step Transformer: enough that beam 4 and greedy can differ, a second of training */
static const char *tiny(void) {
    static char ck[600];
    if (ck[0]) return ck;
    char o[512];
    snprintf(o, sizeof o, "%s", tt_in_dir("tiny"));
    assert_status(RUN("train", "--train", toy(), "--out", o, TINY, "--steps", "30", "--eval-every", "30"), 0);
    snprintf(ck, sizeof ck, "%s/best.h5", o);
    return ck;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* help has a line "  -b, --beam   K  beam size ... [an integer from 1 to 64]": it begins with
 * names (the short name and the long one, or four spaces and the long one) and holds text */
static void assert_option_line(const char *help, const char *names, const char *text) {
    char head[64];
    snprintf(head, sizeof head, "\n  %s ", names);
    const char *line = strstr(help, head);
    if (!line) fail_msg("no line for %s in: %s", names, help);
    const char *end = strchr(line + 1, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char *row = strndup(line + 1, len - 1);
    if (!strstr(row, text)) fail_msg("the line of %s does not hold '%s': %s", names, text, row);
    free(row);
}

/* the last run's stdout, kept (the next run replaces tt.out) */
static char *kept(void) { return strdup(tt.out); }

/* stderr is exactly "attograd-translate CMD: <problem>\nRun 'attograd-translate CMD --help' for
 * the options.\n" with nothing on stdout, and the status 2 */
static void assert_one_line_error(int status, const char *cmd, const char *problem) {
    char expect[512];
    snprintf(expect, sizeof expect, "attograd-translate %s: %s\nRun 'attograd-translate %s --help' for the options.\n",
             cmd, problem, cmd);
    assert_status(status, 2);
    assert_string_equal(tt.err, expect);
    assert_string_equal(tt.out, "");
}

static int group_setup(void **state) { return tt_begin("translate-options"); }

static int group_teardown(void **state) {
    tt_end();
    return 0;
}

/* ---- -h and --help ---- */

static void test_h_and_help_print_the_usage_with_defaults_and_ranges_on_stdout(void **state) {
    char *help[NCOMMANDS];
    for (int i = 0; i < NCOMMANDS; i++) {
        char usage[64];
        snprintf(usage, sizeof usage, "usage: attograd-translate %s ", COMMANDS[i]);
        assert_status(RUN(COMMANDS[i], "--help"), 0);
        assert_string_equal(tt.err, "");
        assert_true(strncmp(tt.out, usage, strlen(usage)) == 0);
        assert_contains(tt.out, "\noptions:\n");
        assert_contains(tt.out, "\n  -h, --help ");
        help[i] = kept();
        assert_status(RUN(COMMANDS[i], "-h"), 0);
        assert_string_equal(tt.err, "");
        assert_string_equal(tt.out, help[i]);
    }
    /* each option with its short name, default and range */
    assert_option_line(help[0], "-t, --train", "FILE  training corpus (TSV)");
    assert_option_line(help[0], "-o, --out", "DIR ");
    assert_option_line(help[0], "    --steps", "N     optimizer steps at most (8000) [an integer >= 1]");
    assert_option_line(help[0], "    --dropout", "P     dropout (0.1) [a probability from 0 to 1 (1 excluded)]");
    assert_option_line(help[0], "    --chars", "the same as --tokenizer char");
    assert_option_line(help[1], "-m, --checkpoint", "FILE  a checkpoint written by train");
    assert_option_line(help[1], "-b, --beam", "K     beam size (1, the default: greedy) [an integer from 1 to 64]");
    assert_option_line(help[1], "    --data", "FILE  TSV corpus to evaluate on");
    assert_option_line(help[2], "-m, --checkpoint", "FILE ");
    assert_option_line(help[2], "-b, --beam", "[an integer from 1 to 64]");
    assert_option_line(help[2], "-n, --length-penalty", "(0.6) [a number >= 0]");
    assert_option_line(help[2], "    --max-input-tokens", "(4096); 16 bytes a token at most [an integer from 1 to 65536]");
    assert_option_line(help[3], "-m, --checkpoint", "FILE ");
    assert_option_line(help[3], "-o, --out", "FILE  the SVG to write (attention.svg)");
    assert_option_line(help[4], "-i, --hyp", "FILE  hypotheses");
    assert_option_line(help[4], "-r, --ref", "FILE  references");
    assert_option_line(help[4], "-w, --width", "(1, sacreBLEU's default) [an integer from 0 to 10]");
    for (int i = 0; i < NCOMMANDS; i++) free(help[i]);
    /* the top level */
    assert_status(RUN("-h"), 0);
    char *top = kept();
    assert_status(RUN("--help"), 0);
    assert_string_equal(tt.out, top);
    assert_contains(top, "usage: attograd-translate COMMAND");
    assert_contains(top, "\n  -h, --help ");
    assert_contains(top, "\n      --version ");
    free(top);
}

/* -h among other options is the help: the checkpoint (which does not exist) is never loaded
 * and "-h" is not translated; the help stops the parse, so a bad option after it is not seen */
static void test_h_after_other_options_is_the_help_not_a_sentence(void **state) {
    const char *missing = tt_in_dir("missing.h5");
    assert_status(RUN("translate", "-m", missing, "-b", "4", "-h"), 0);
    assert_contains(tt.out, "usage: attograd-translate translate ");
    assert_string_equal(tt.err, "");
    assert_status(RUN("translate", "--checkpoint", missing, "hello", "-h", "--bogus"), 0);
    assert_contains(tt.out, "usage: attograd-translate translate ");
    assert_status(RUN("score", "-r", missing, "-h"), 0);
    assert_contains(tt.out, "usage: attograd-translate score ");
}

/* ---- short names and --name=value mean the long options ---- */

/* translate's output for "--checkpoint ck" followed by opts (NULL-terminated) and SENTENCES */
#define SENTENCES "a b c", "d e f a", "b a", "c c d e", "f", "a a a a", "e d", "b b c"
static char *translation(const char *ck, const char *const *opts) {
    const char *args[24] = {"translate", "--checkpoint", ck}, *sentences[] = {SENTENCES};
    int n = 3;
    for (int k = 0; opts[k]; k++) args[n++] = opts[k];
    for (size_t k = 0; k < sizeof sentences / sizeof *sentences; k++) args[n++] = sentences[k];
    assert_status(tt_run(NULL, args), 0);
    assert_int_equal(tt_count(tt.out, "\n"), (int)(sizeof sentences / sizeof *sentences));
    return kept();
}

static void test_short_names_and_equals_values_translate_as_the_long_options(void **state) {
    const char *ck = tiny();
    /* a length penalty whose beam-4 output differs both from greedy's and from the default
     * penalty's: a spelling that lost -b or -n would then show in the output */
    char *greedy = translation(ck, (const char *[]){NULL});
    char *beam4 = translation(ck, (const char *[]){"--beam", "4", NULL});
    const char *alphas[] = {"1.5", "2", "3", "0", "5", "0.1", "1"}, *alpha = NULL;
    char *expect = NULL;
    for (size_t k = 0; k < sizeof alphas / sizeof *alphas && !alpha; k++) {
        free(expect);
        expect = translation(ck, (const char *[]){"--beam", "4", "--length-penalty", alphas[k], NULL});
        if (strcmp(expect, greedy) != 0 && strcmp(expect, beam4) != 0) alpha = alphas[k];
    }
    if (!alpha) fail_msg("no length penalty makes beam 4 differ from greedy and from the default penalty");
    char n_attached[16], n_equals[40];
    snprintf(n_attached, sizeof n_attached, "-n%s", alpha);
    snprintf(n_equals, sizeof n_equals, "--length-penalty=%s", alpha);
    const char *const spellings[][6] = {
        {"-b", "4", "-n", alpha},
        {"-b4", n_attached},
        {"--beam=4", n_equals},
        {"-n", alpha, "--beam", "4"},
    };
    for (size_t s = 0; s < sizeof spellings / sizeof *spellings; s++) {
        char *got = translation(ck, spellings[s]);
        assert_string_equal(got, expect);
        free(got);
    }
    /* -m and --checkpoint=FILE are --checkpoint */
    char eq_ck[700];
    snprintf(eq_ck, sizeof eq_ck, "--checkpoint=%s", ck);
    assert_status(RUN("translate", "-m", ck, "-b", "4", "-n", alpha, SENTENCES), 0);
    assert_string_equal(tt.out, expect);
    assert_status(RUN("translate", eq_ck, "-b", "4", "-n", alpha, SENTENCES), 0);
    assert_string_equal(tt.out, expect);
    free(greedy);
    free(beam4);
    free(expect);
    /* eval says which search it used: -b 2 is a beam */
    assert_status(RUN("eval", "--checkpoint", ck, "--data", toy(), "--beam", "2"), 0);
    char *eval_long = kept();
    assert_contains(eval_long, "beam exact match");
    char eq_data[600];
    snprintf(eq_data, sizeof eq_data, "--data=%s", toy());
    assert_status(RUN("eval", "-m", ck, "--data", toy(), "-b", "2"), 0);
    assert_string_equal(tt.out, eval_long);
    assert_status(RUN("eval", "-b2", eq_data, "-m", ck), 0);
    assert_string_equal(tt.out, eval_long);
    free(eval_long);
}

static void test_short_names_of_train_attention_and_score(void **state) {
    const char *ck = tiny();
    /* train: -t and -o */
    char o[512];
    snprintf(o, sizeof o, "%s", tt_in_dir("short-run"));
    assert_status(RUN("train", "-t", toy(), "-o", o, TINY, "--steps", "2", "--eval-every", "2"), 0);
    char last[600];
    snprintf(last, sizeof last, "%s/last.h5", o);
    assert_true(exists(last));
    /* attention: -m and -o (the picture's path is printed) */
    const char *svg = tt_in_dir("short.svg");
    assert_status(RUN("attention", "-m", ck, "-o", svg, "a b c"), 0);
    char expect[600];
    snprintf(expect, sizeof expect, "%s\n", svg);
    assert_string_equal(tt.out, expect);
    assert_true(exists(svg));
    /* score: -r, -i and -w are --ref, --hyp and --width */
    const char *ref = tt_in_dir("ref.txt"), *hyp = tt_in_dir("hyp.txt");
    tt_write_text(ref, "the cat sat on the mat\na b c d\n");
    tt_write_text(hyp, "the cat sat on a mat\na b c d\n");
    assert_status(RUN("score", "--ref", ref, "--hyp", hyp, "--width", "3"), 0);
    char *width3 = kept();
    assert_contains(width3, "exact match = 50.000 (1 of 2 lines)");
    assert_status(RUN("score", "-r", ref, "-i", hyp, "-w", "3"), 0);
    assert_string_equal(tt.out, width3);
    assert_status(RUN("score", "-r", ref, "-w3", "-i", hyp), 0);
    assert_string_equal(tt.out, width3);
    free(width3);
}

/* ---- "--" and "-" ---- */

static void test_arguments_after_double_dash_are_sentences(void **state) {
    const char *ck = tiny();
    const char *dashed[] = {"-h", "--beam", "-b 4", "--"};
    for (size_t i = 0; i < sizeof dashed / sizeof *dashed; i++) {
        /* the witness: the same text on stdin, where nothing is parsed as an option */
        char line[64];
        snprintf(line, sizeof line, "%s\n", dashed[i]);
        assert_status(RUN_STDIN(line, "translate", "-m", ck), 0);
        char *from_stdin = kept();
        assert_int_equal(tt_count(from_stdin, "\n"), 1);
        assert_status(RUN("translate", "-m", ck, "--", dashed[i]), 0);
        assert_string_equal(tt.out, from_stdin);
        assert_not_contains(tt.out, "usage:");
        free(from_stdin);
    }
    /* options before "--" still count; both sentences after it are translated */
    assert_status(RUN_STDIN("-x\n--y\n", "translate", "-m", ck, "-b", "2"), 0);
    char *two = kept();
    assert_status(RUN("translate", "-b", "2", "-m", ck, "--", "-x", "--y"), 0);
    assert_string_equal(tt.out, two);
    free(two);
    /* attention draws a sentence that begins with '-' */
    const char *svg = tt_in_dir("dash.svg");
    assert_status(RUN("attention", "-m", ck, "-o", svg, "--", "-a b"), 0);
    assert_true(exists(svg));
}

static void test_a_lone_dash_is_stdin(void **state) {
    const char *ck = tiny();
    assert_status(RUN_STDIN("a b\nc d e\n", "translate", "-m", ck), 0);
    char *plain = kept();
    assert_int_equal(tt_count(plain, "\n"), 2);
    assert_status(RUN_STDIN("a b\nc d e\n", "translate", "-m", ck, "-"), 0);
    assert_string_equal(tt.out, plain);
    free(plain);
    /* score's --hyp - is stdin as before */
    const char *ref = tt_in_dir("ref1.txt");
    tt_write_text(ref, "a b\n");
    assert_status(RUN_STDIN("a b\n", "score", "-r", ref, "-i", "-"), 0);
    assert_contains(tt.out, "exact match = 100.0 (1 of 1 lines)");
}

/* ---- unknown options ---- */

static void test_unknown_options_are_one_line_errors_in_every_command(void **state) {
    const char *T = toy(), *never = tt_in_dir("never"), *missing = tt_in_dir("missing.h5");
    for (int i = 0; i < NCOMMANDS; i++) {
        const char *cmd = COMMANDS[i];
        bool positionals = strcmp(cmd, "translate") == 0 || strcmp(cmd, "attention") == 0 || strcmp(cmd, "average") == 0;
        const char *hint = positionals ? " (an argument that begins with '-' goes after '--')" : "";
        char problem[256];
        snprintf(problem, sizeof problem, "unknown option '-q'%s", hint);
        assert_one_line_error(RUN(cmd, "-q"), cmd, problem);
        snprintf(problem, sizeof problem, "unknown option '--frobnicate'%s", hint);
        assert_one_line_error(RUN(cmd, "--frobnicate=1"), cmd, problem);
        assert_one_line_error(RUN(cmd, "--hepl"), cmd, "unknown option '--hepl' (did you mean --help?)");
        assert_one_line_error(RUN(cmd, "-help"), cmd, "unknown option '-help' (did you mean --help?)");
    }
    /* train does nothing before the error: no run directory */
    assert_one_line_error(RUN("train", "-t", T, "-o", never, "-q"), "train", "unknown option '-q'");
    assert_false(exists(never));
    /* near misses name the option meant, long or with one dash */
    assert_one_line_error(RUN("translate", "-m", missing, "--bema", "4", "hi"), "translate",
                          "unknown option '--bema' (did you mean --beam?)");
    assert_one_line_error(RUN("translate", "-m", missing, "-beam", "4", "hi"), "translate",
                          "unknown option '-beam' (did you mean --beam?)");
    assert_one_line_error(RUN("eval", "-checkpint", missing), "eval",
                          "unknown option '-checkpint' (did you mean --checkpoint?)");
    assert_one_line_error(RUN("attention", "-out", "x.svg"), "attention", "unknown option '-out' (did you mean --out?)");
    /* an abbreviation is refused: it would change meaning when a longer option shares it */
    assert_one_line_error(RUN("translate", "-m", missing, "--max-in", "9", "hi"), "translate",
                          "unknown option '--max-in' (did you mean --max-input-tokens?)");
    /* a sentence that looks like an option is refused with the way to give it */
    assert_one_line_error(RUN("translate", "-m", missing, "-5 degrees"), "translate",
                          "unknown option '-5 degrees' (an argument that begins with '-' goes after '--')");
    /* short flags group as getopt's do: -h first is the help, whatever follows it */
    assert_status(RUN("score", "-r", missing, "-hq"), 0);
    assert_contains(tt.out, "usage: attograd-translate score ");
    /* the top level */
    assert_status(RUN("-q"), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown option '-q'\nRun 'attograd-translate --help' for the commands.\n");
    assert_status(RUN("--verison"), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown option '--verison' (did you mean --version?)\n"
                                "Run 'attograd-translate --help' for the commands.\n");
}

/* ---- values ---- */

static void test_values_missing_bad_or_beginning_with_a_dash(void **state) {
    const char *ck = tiny(), *missing = tt_in_dir("missing.h5");
    assert_one_line_error(RUN("translate", "-m", missing, "-b"), "translate",
                          "-b (--beam) needs a value: an integer from 1 to 64");
    assert_one_line_error(RUN("translate", "-m", missing, "-b", "x"), "translate",
                          "-b (--beam) expects an integer from 1 to 64, got 'x'");
    assert_one_line_error(RUN("translate", "-m", missing, "-bema"), "translate",
                          "-b (--beam) expects an integer from 1 to 64, got 'ema'");
    assert_one_line_error(RUN("translate", "-m", missing, "--beam=65"), "translate",
                          "--beam expects an integer from 1 to 64, got '65'");
    assert_one_line_error(RUN("translate", "-m"), "translate",
                          "-m (--checkpoint) needs a value: FILE, a checkpoint written by train");
    assert_one_line_error(RUN("translate", "-m", missing, "--help=yes"), "translate", "--help takes no value, got 'yes'");
    assert_one_line_error(RUN("score", "-r", missing, "-w", "11"), "score",
                          "-w (--width) expects an integer from 0 to 10, got '11'");
    /* a value is the next argument, whatever it begins with: a negative number is read as one
     * (and refused by its range here, naming it), not taken for an option */
    assert_one_line_error(RUN("translate", "-m", missing, "--length-penalty", "-0.5", "hi"), "translate",
                          "--length-penalty expects a number >= 0, got '-0.5'");
    assert_one_line_error(RUN("translate", "-m", missing, "-n", "-1e-3", "hi"), "translate",
                          "-n (--length-penalty) expects a number >= 0, got '-1e-3'");
    assert_one_line_error(RUN("train", "-t", toy(), "--seed", "-3"), "train", "--seed expects an integer >= 0, got '-3'");
    /* "-0" is in range: the run goes on, as with 0 */
    assert_status(RUN("translate", "-m", ck, "-b", "3", "--length-penalty", "0", "a b"), 0);
    char *zero = kept();
    assert_status(RUN("translate", "-m", ck, "-b", "3", "--length-penalty", "-0", "a b"), 0);
    assert_string_equal(tt.out, zero);
    free(zero);
    /* a string's value may begin with '-' too: the SVG named "-x.svg" */
    char svg[600];
    snprintf(svg, sizeof svg, "%s/-x.svg", tt.dir);
    assert_status(RUN("attention", "--out", svg, "-m", ck, "a"), 0);
    assert_true(exists(svg));
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_h_and_help_print_the_usage_with_defaults_and_ranges_on_stdout),
        TEST(test_h_after_other_options_is_the_help_not_a_sentence),
        TEST(test_short_names_and_equals_values_translate_as_the_long_options),
        TEST(test_short_names_of_train_attention_and_score),
        TEST(test_arguments_after_double_dash_are_sentences),
        TEST(test_a_lone_dash_is_stdin),
        TEST(test_unknown_options_are_one_line_errors_in_every_command),
        TEST(test_values_missing_bad_or_beginning_with_a_dash),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
