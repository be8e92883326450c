/* attograd-translate end to end, the runs that succeed: training of each model kind writes its
 * checkpoints, curves and attention maps; eval, translate and attention on what it wrote; --help.
 * The program is run as a user runs it (a child process with its stdout and stderr in files),
 * on a tiny corpus in a temporary directory with tiny models, and judged by its exit status, its
 * messages and the files it writes. */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "test_util.h"
#include "translate_cli_util.h"
#include "translate_run.h"

static char *unk_run_stdout; /* what the run of unk_run() printed */

/* ---- checking what the program wrote ---- */

/* Well-formed XML in the small form the SVG writer uses: one root element, tags that nest and
 * close in order, quoted attributes, and no raw '<' or stray '&' in text. NULL if well-formed,
 * else what is wrong. */
static const char *xml_problem(const char *s) {
    static char why[160];
    const char *stack[64];
    size_t stack_len[64];
    int depth = 0, roots = 0;
    if (strncmp(s, "<?xml", 5) == 0) {
        s = strstr(s, "?>");
        if (!s) return "unterminated XML declaration";
        s += 2;
    }
    while (*s) {
        if (*s == '&') {
            const char *e = strchr(s, ';');
            if (!e || e - s > 8 || e == s + 1) return "'&' that does not start an entity";
            s = e + 1;
        } else if (*s != '<') {
            if (depth == 0 && !strchr(" \t\r\n", *s)) return "text outside the root element";
            s++;
        } else if (s[1] == '/') {
            const char *name = s + 2;
            size_t len = strcspn(name, " \t\r\n>");
            if (depth == 0 || len != stack_len[depth - 1] || strncmp(name, stack[depth - 1], len) != 0) {
                snprintf(why, sizeof why, "closing tag '%.*s' does not match '%.*s'", (int)len, name,
                         depth ? (int)stack_len[depth - 1] : 0, depth ? stack[depth - 1] : "");
                return why;
            }
            depth--;
            s = strchr(name, '>');
            if (!s) return "unterminated closing tag";
            s++;
        } else if (strncmp(s, "<!--", 4) == 0) {
            s = strstr(s, "-->");
            if (!s) return "unterminated comment";
            s += 3;
        } else {
            const char *name = s + 1;
            size_t len = strcspn(name, " \t\r\n/>");
            if (len == 0) return "'<' that does not start a tag";
            const char *p = name + len;
            for (;;) { /* attributes: name="value" */
                while (*p == ' ' || *p == '\n' || *p == '\t') p++;
                if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
                size_t an = strcspn(p, "= \t\n>");
                if (an == 0 || p[an] != '=' || (p[an + 1] != '"' && p[an + 1] != '\'')) return "malformed attribute";
                const char *close = strchr(p + an + 2, p[an + 1]);
                if (!close) return "unterminated attribute value";
                for (const char *q = p + an + 2; q < close; q++)
                    if (*q == '<') return "'<' inside an attribute value";
                p = close + 1;
            }
            if (depth == 0) roots++;
            if (*p == '/') {
                s = p + 2;
            } else {
                if (depth == 64) return "nesting too deep";
                stack[depth] = name;
                stack_len[depth++] = len;
                s = p + 1;
            }
        }
    }
    if (depth) return "unclosed element";
    if (roots != 1) return "not exactly one root element";
    return NULL;
}

static void assert_svg_file(const char *path) {
    char *s = tt_read_file(path, NULL);
    if (!s) fail_msg("%s was not written", path);
    const char *why = xml_problem(s);
    if (why) fail_msg("%s is not well-formed XML: %s", path, why);
    assert_contains(s, "<svg xmlns=\"http://www.w3.org/2000/svg\"");
    free(s);
}

/* ---- end to end ---- */

static void check_training_run(const char *kind) {
    const char *out = trained_run(kind);
    const char *stdout_text = trained_log[kind_slot(kind)][0];
    const char *stderr_text = trained_log[kind_slot(kind)][1];
    char p[600];
    const char *files[] = {"last.h5", "best.h5", "curves.svg", "attention.svg"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", out, files[i]);
        if (!exists(p)) fail_msg("%s was not written", p);
    }
    snprintf(p, sizeof p, "%s/curves.svg", out);
    assert_svg_file(p);
    snprintf(p, sizeof p, "%s/attention.svg", out);
    assert_svg_file(p);
    char expect[700];
    snprintf(expect, sizeof expect, "%s model, ", kind);
    assert_contains(stderr_text, expect);
    /* vocabularies: 6 letters and the 4 specials */
    assert_contains(stderr_text, "38 training pairs, 2 dev pairs; vocabularies 10 and 10 tokens");
    assert_contains(stderr_text, "step 3: train loss ");
    assert_contains(stderr_text, "step 6: train loss ");
    assert_contains(stderr_text, "6 steps in ");
    snprintf(expect, sizeof expect, "checkpoints: %s/best.h5 (best dev exact match ", out);
    assert_contains(stdout_text, expect);
    snprintf(expect, sizeof expect, "curves: %s/curves.svg\n", out);
    assert_contains(stdout_text, expect);
    ag_train_state st = load_state(ckpt_of(kind, "last"));
    assert_int_equal(st.global_step, 6);
    assert_string_equal(ag_config_get_string(&st, "model"), kind);
    ag_train_state_clear(&st);
}

static void test_train_transformer_writes_checkpoints_curves_and_attention(void **state) {
    check_training_run("transformer");
}

static void test_train_gru_writes_checkpoints_curves_and_attention(void **state) { check_training_run("gru"); }

static void test_train_lstm_and_rnn_write_checkpoints_curves_and_attention(void **state) {
    check_training_run("lstm");
    check_training_run("rnn");
}

static void test_train_with_dev_and_test_files_evaluates_the_best_checkpoint_on_test(void **state) {
    tu_write_toy_corpus(tt_in_dir("dev.tsv"), 6, 777);
    tu_write_toy_corpus(tt_in_dir("test.tsv"), 5, 999);
    const char *out = tt_in_dir("run-dev-test");
    int st = RUN("train", "--train", toy(), "--dev", tt_in_dir("dev.tsv"), "--test", tt_in_dir("test.tsv"), "--out",
                 out, TINY, "--steps", "4", "--eval-every", "2", "--save-every", "2");
    assert_status(st, 0);
    assert_contains(tt.err, "40 training pairs, 6 dev pairs");
    assert_contains(tt.err, "step 2: evaluating on 6 dev pairs");
    char expect[600];
    snprintf(expect, sizeof expect, "test (%s, 5 pairs), best checkpoint:\n", tt_in_dir("test.tsv"));
    assert_contains(tt.out, expect);
    double loss, exact, bleu;
    const char *line = strstr(tt.out, "test loss ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "test loss %lf, greedy exact match %lf%%, BLEU %lf", &loss, &exact, &bleu), 3);
    assert_true(loss > 0 && exact >= 0 && exact <= 100 && bleu >= 0 && bleu <= 100);
}

static void test_eval_prints_exact_match_and_bleu_greedy_and_beam(void **state) {
    const char *kinds[] = {"transformer", "gru", "lstm"}, *few = tt_in_dir("few.tsv");
    tu_write_toy_corpus(few, 8, 4242);
    for (int k = 0; k < 3; k++) {
        trained_run(kinds[k]);
        assert_status(RUN("eval", "--checkpoint", ckpt_of(kinds[k], "best"), "--data", toy()), 0);
        check_eval_output(toy(), 40, "greedy");
        assert_status(RUN("eval", "--checkpoint", ckpt_of(kinds[k], "last"), "--data", few, "--beam", "3"), 0);
        check_eval_output(few, 8, "beam");
    }
}

static void test_eval_on_words_the_model_never_saw_still_reports(void **state) {
    /* real sentences with punctuation, every word unknown to the toy model */
    const char *root = getenv("AG_SOURCE_ROOT");
    if (!root) skip();
    char src[600];
    snprintf(src, sizeof src, "%s/examples/translate/data/num-en-fr/train.tsv", root);
    char *all = tt_read_file(src, NULL);
    if (!all) fail_msg("cannot read %s", src);
    char *p = all;
    for (int i = 0; i < 10 && p; i++) p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL;
    assert_non_null(p);
    *p = 0;
    tt_write_text(tt_in_dir("numbers.tsv"), all);
    free(all);
    trained_run("transformer");
    assert_status(RUN("eval", "--checkpoint", ckpt_of("transformer", "best"), "--data", tt_in_dir("numbers.tsv")), 0);
    check_eval_output(tt_in_dir("numbers.tsv"), 10, "greedy");
}

/* every word of a translation is a target token (capital letter) or <unk> */
static void assert_target_words(const char *line) {
    char *copy = strdup(line);
    for (char *w = strtok(copy, " "); w; w = strtok(NULL, " "))
        if (!(strlen(w) == 1 && w[0] >= 'A' && w[0] <= 'F') && strcmp(w, "<unk>") != 0)
            fail_msg("translation '%s' has the word '%s', not from the target vocabulary", line, w);
    free(copy);
}

/* stdout split into lines (n of them, the last ended by a newline) */
static int split_lines(char *text, char **lines, int max) {
    int n = 0;
    for (char *p = text; *p && n < max;) {
        char *e = strchr(p, '\n');
        if (!e) fail_msg("output does not end with a newline: '%s'", p);
        *e = 0;
        lines[n++] = p;
        p = e + 1;
    }
    return n;
}

static void test_translate_from_arguments_and_stdin_gives_one_line_per_sentence(void **state) {
    const char *kinds[] = {"transformer", "gru", "lstm"}, *beams[] = {"1", "3"};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2; b++) {
            trained_run(kinds[k]);
            const char *ck = ckpt_of(kinds[k], "best");
            assert_status(RUN("translate", "--checkpoint", ck, "--beam", beams[b], "a b c", "f", "e e d a"), 0);
            char *args_out = strdup(tt.out), *al[8] = {0};
            assert_int_equal(split_lines(args_out, al, 8), 3);
            for (int i = 0; i < 3; i++) assert_target_words(al[i]);
            /* the same sentences, one per line on stdin (the last without a newline, one CRLF),
             * with an empty line between: one output line each, the same translations */
            assert_status(RUN_STDIN("a b c\r\n\nf\ne e d a", "translate", "--checkpoint", ck, "--beam", beams[b]), 0);
            char *sl[8] = {0};
            assert_int_equal(split_lines(tt.out, sl, 8), 4);
            assert_string_equal(sl[0], al[0]);
            assert_string_equal(sl[2], al[1]);
            assert_string_equal(sl[3], al[2]);
            assert_target_words(sl[1]);
            free(args_out);
        }
    /* no input: no output */
    assert_status(RUN_STDIN("", "translate", "--checkpoint", ckpt_of("transformer", "best")), 0);
    assert_string_equal(tt.out, "");
}

/* the i-th row label (target token) of the first heatmap */
static char *row_label(const char *svg, int i) {
    const char *key = "text-anchor=\"end\" dominant-baseline=\"central\">", *p = svg;
    for (int k = 0; k <= i; k++) {
        p = strstr(p, key);
        if (!p) return NULL;
        p += strlen(key);
    }
    const char *e = strstr(p, "</text>");
    return strndup(p, (size_t)(e - p));
}

/* sentence: one-letter words; known: the model's source vocabulary has them (else <unk>) */
static void check_attention(const char *ck, const char *sentence, int maps, bool known) {
    const char *svg_path = tt_in_dir("attention-test.svg");
    assert_status(RUN("translate", "--checkpoint", ck, sentence), 0);
    char *translation = strdup(tt.out);
    translation[strlen(translation) - 1] = 0;
    remove(svg_path);
    assert_status(RUN("attention", "--checkpoint", ck, "--out", svg_path, sentence), 0);
    char expect[600];
    snprintf(expect, sizeof expect, "%s\n", svg_path);
    assert_string_equal(tt.out, expect);
    assert_svg_file(svg_path);
    char *svg = tt_read_file(svg_path, NULL);
    /* one heatmap per layer and head, each labelled with the source tokens and <eos> */
    assert_int_equal(tt_count(svg, "<g>"), maps);
    assert_contains(svg, maps == 2 ? "layer 0 head 1" : "layer 0 head 0");
    int words = 1;
    for (const char *c = sentence; *c; c++) words += *c == ' ';
    assert_int_equal(tt_count(svg, "transform=\"rotate(-55"), maps * (words + 1));
    char col[16];
    for (size_t i = 0; known && i < strlen(sentence); i += 2) {
        snprintf(col, sizeof col, ")\">%c</text>", sentence[i]);
        assert_true(tt_count(svg, col) >= maps);
    }
    if (!known) assert_int_equal(tt_count(svg, ")\">&lt;unk&gt;</text>"), maps * words);
    assert_int_equal(tt_count(svg, ")\">&lt;eos&gt;</text>"), maps);
    /* rows: the translation's tokens as translate printed them, then <eos> (a <bos> the model
     * produced is a row of its own that the printed text leaves out) */
    char *copy = strdup(translation), *toks[300];
    int t = 0;
    for (char *w = strtok(copy, " "); w && t < 300; w = strtok(NULL, " ")) toks[t++] = w;
    int rows = tt_count(svg, "text-anchor=\"end\" dominant-baseline=\"central\">") / maps, k = 0;
    for (int i = 0; i < rows; i++) {
        char *label = row_label(svg, i);
        assert_non_null(label);
        if (strcmp(label, "&lt;bos&gt;") != 0) {
            const char *want = k < t ? toks[k] : "&lt;eos&gt;";
            if (k < t && strcmp(toks[k], "<unk>") == 0) want = "&lt;unk&gt;";
            if (strcmp(label, want) != 0)
                fail_msg("row %d of the heatmap of '%s' is '%s', expected '%s' (translation '%s')", i, sentence, label,
                         want, translation);
            k++;
        }
        free(label);
    }
    assert_int_equal(k, t + 1);
    snprintf(expect, sizeof expect, ">%s  -&gt;  ", sentence);
    assert_contains(svg, expect);
    free(copy);
    free(svg);
    free(translation);
}

static void test_a_translation_does_not_depend_on_the_sentences_translated_with_it(void **state) {
    /* the short sentence is padded to the long one's length in a batch; the 6-step
     * Transformer does not stop by itself, so this checks where it is cut off too */
    const char *kinds[] = {"transformer", "transformer", "gru", "lstm"}, *beams[] = {"1", "3", "1", "3"};
    const char *shorter = "f", *longer = "c d e f a b c";
    for (int k = 0; k < 4; k++) {
        trained_run(kinds[k]);
        const char *ck = ckpt_of(kinds[k], "best");
        assert_status(RUN("translate", "--checkpoint", ck, "--beam", beams[k], shorter, longer), 0);
        char *together = strdup(tt.out), *lines[4] = {0};
        assert_int_equal(split_lines(together, lines, 4), 2);
        assert_status(RUN("translate", "--checkpoint", ck, "--beam", beams[k], shorter), 0);
        char alone[1024];
        snprintf(alone, sizeof alone, "%s\n", lines[0]);
        if (strcmp(tt.out, alone) != 0)
            fail_msg("%s, beam %s: '%s' alone is '%.*s', with '%s' '%s'", kinds[k], beams[k], shorter,
                     (int)strlen(tt.out) - 1, tt.out, longer, lines[0]);
        free(together);
    }
}

static void test_attention_writes_well_formed_svg_labelled_with_source_and_translation(void **state) {
    trained_run("transformer");
    check_attention(ckpt_of("transformer", "best"), "a b c", 2, true); /* 1 layer, 2 heads */
    trained_run("gru");
    check_attention(ckpt_of("gru", "best"), "d a f e", 1, true);
    trained_run("lstm");
    check_attention(ckpt_of("lstm", "best"), "d a f e", 1, true);
}

/* A model that writes <unk>: with --min-count 1000 the target vocabulary is the 4 specials, so
 * every reference word is <unk> and the model learns to write as many <unk> as there are words.
 * The hyperparameters that matter are given, so the run does not follow the defaults. */
static const char *unk_test(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("unk-test.tsv"), 70, 99); /* more than one batch of 64 */
    return p;
}

static const char *unk_run(void) {
    static const char *out;
    if (out) return out;
    const char *o = tt_in_dir("run-unk"); /* out is set once the run succeeded, so a failed run fails each caller */
    assert_status(RUN("train", "--train", toy(), "--test", unk_test(), "--out", o, TINY, "--min-count", "1000",
                      "--steps", "40", "--lr", "0.01", "--warmup", "5", "--dropout", "0.1", "--label-smoothing", "0.1",
                      "--clip", "1", "--seed", "1", "--eval-every", "40", "--save-every", "40"),
                  0);
    assert_contains(tt.err, "vocabularies 4 and 4 tokens");
    unk_run_stdout = strdup(tt.out);
    return out = o;
}

static void test_attention_rows_are_the_words_the_model_wrote_even_unknown_ones(void **state) {
    char ck[600];
    snprintf(ck, sizeof ck, "%s/best.h5", unk_run());
    assert_status(RUN("translate", "--checkpoint", ck, "a b c"), 0);
    if (!strstr(tt.out, "<unk>")) fail_msg("precondition: the model should write <unk>, it wrote '%s'", tt.out);
    check_attention(ck, "a b c", 2, false);
}

static void test_eval_reports_what_training_reports_on_the_same_test_file(void **state) {
    /* train --test scores the best checkpoint on ids; eval must agree, <unk> included */
    const char *out = unk_run();
    char *line = strstr(unk_run_stdout, "test loss ");
    assert_non_null(line);
    double loss, exact_train, bleu_train, exact_eval, bleu_eval;
    assert_int_equal(
        sscanf(line, "test loss %lf, greedy exact match %lf%%, BLEU %lf", &loss, &exact_train, &bleu_train), 3);
    if (!(exact_train > 0))
        fail_msg("precondition: the <unk> model should get some sentences right:\n%s", unk_run_stdout);
    char ck[600], head[600];
    snprintf(ck, sizeof ck, "%s/best.h5", out);
    assert_status(RUN("eval", "--checkpoint", ck, "--data", unk_test()), 0);
    check_eval_output(unk_test(), 70, "greedy");
    double loss_eval;
    snprintf(head, sizeof head, "%s: 70 pairs, loss %%lf, greedy exact match %%lf%%%%, BLEU %%lf", unk_test());
    assert_int_equal(sscanf(tt.out, head, &loss_eval, &exact_eval, &bleu_eval), 3);
    if (loss_eval != loss || exact_eval != exact_train || bleu_eval != bleu_train)
        fail_msg("train reported loss %.4f, exact match %.2f%%, BLEU %.2f; eval %.4f, %.2f%%, BLEU %.2f", loss,
                 exact_train, bleu_train, loss_eval, exact_eval, bleu_eval);
}

static void test_attention_of_a_sentence_longer_than_the_model_was_built_for_does_not_crash(void **state) {
    /* 300 words: longer than the positional table (2 * 64 + 8) and the sentence length
     * translate reads (63 words). The <unk> model stops by itself, which keeps this quick. */
    char sentence[700] = "", ck[600];
    for (int i = 0; i < 300; i++) strcat(sentence, i ? " a" : "a");
    snprintf(ck, sizeof ck, "%s/best.h5", unk_run());
    const char *svg_path = tt_in_dir("long.svg");
    assert_status(RUN("attention", "--checkpoint", ck, "--out", svg_path, sentence), 0);
    assert_svg_file(svg_path);
    char *svg = tt_read_file(svg_path, NULL);
    assert_int_equal(tt_count(svg, "transform=\"rotate(-55"), 2 * 64); /* 2 heads of 63 words and <eos> */
    free(svg);
    assert_status(RUN("translate", "--checkpoint", ck, sentence), 0);
    assert_int_equal(tt_count(tt.out, "\n"), 1);
}

static void test_help_of_every_command_goes_to_stdout_with_status_0(void **state) {
    const char *cmds[] = {"train", "eval", "translate", "attention"};
    for (int i = 0; i < 4; i++) {
        assert_status(RUN(cmds[i], "--help"), 0);
        char expect[64];
        snprintf(expect, sizeof expect, "usage: attograd-translate %s ", cmds[i]);
        assert_contains(tt.out, expect);
        assert_contains(tt.out, "--help");
        assert_string_equal(tt.err, "");
    }
    assert_status(RUN("--help"), 0);
    assert_contains(tt.out, "usage: attograd-translate COMMAND");
    assert_contains(tt.out, "commands:");
    assert_status(RUN("frobnicate"), 2);
    assert_string_equal(tt.err, "attograd-translate: unknown command 'frobnicate'\n"
                                  "Run 'attograd-translate --help' for the commands.\n");
}

static int runs_teardown(void **state) {
    free(unk_run_stdout);
    return cli_group_teardown(state);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_train_transformer_writes_checkpoints_curves_and_attention),
        TEST(test_train_gru_writes_checkpoints_curves_and_attention),
        TEST(test_train_lstm_and_rnn_write_checkpoints_curves_and_attention),
        TEST(test_train_with_dev_and_test_files_evaluates_the_best_checkpoint_on_test),
        TEST(test_eval_prints_exact_match_and_bleu_greedy_and_beam),
        TEST(test_eval_on_words_the_model_never_saw_still_reports),
        TEST(test_translate_from_arguments_and_stdin_gives_one_line_per_sentence),
        TEST(test_a_translation_does_not_depend_on_the_sentences_translated_with_it),
        TEST(test_attention_writes_well_formed_svg_labelled_with_source_and_translation),
        TEST(test_attention_rows_are_the_words_the_model_wrote_even_unknown_ones),
        TEST(test_eval_reports_what_training_reports_on_the_same_test_file),
        TEST(test_attention_of_a_sentence_longer_than_the_model_was_built_for_does_not_crash),
        TEST(test_help_of_every_command_goes_to_stdout_with_status_0)
    };
    return cmocka_run_group_tests(tests, cli_group_setup, runs_teardown);
}
