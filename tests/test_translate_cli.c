/* attograd-translate end to end: the program is run as a user runs it (a child process with its
 * stdout and stderr in files), on a tiny corpus in a temporary directory with tiny models, and
 * judged by its exit status, its messages and the files it writes. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "metrics.h"
#include "test_util.h"
#include "translate_run.h"

static char *unk_run_stdout;      /* what the run of unk_run() printed */
static char *trained_log[4][2];   /* stdout and stderr of trained_run(kind), by kind_slot */

/* a model small enough that a run takes a fraction of a second, and the data options the
 * assertions count on (not the defaults, which may change; word tokens: test_translate_spm
 * covers subwords) */
#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--hidden", "16", "--batch", "8", \
             "--max-eval", "8", "--threads", "1", "--heldout", "0.05", "--max-len", "64", "--min-count", "1", \
             "--seed", "1", "--tokenizer", "word"

/* ---- files ---- */

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void copy_file(const char *from, const char *to) {
    size_t len;
    char *s = tt_read_file(from, &len);
    if (!s) fail_msg("cannot open %s", from);
    tt_write_file(to, s, len);
    free(s);
}

static void sleep_ms(int ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }

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

/* ---- fixtures: a corpus and two trained runs, made on first use ---- */

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

/* "transformer", "gru", "lstm", "rnn" -> 0..3 */
static int kind_slot(const char *kind) {
    const char *kinds[] = {"transformer", "gru", "lstm", "rnn"};
    int k = 0;
    while (k < 3 && strcmp(kind, kinds[k]) != 0) k++;
    return k;
}

/* out dir of a finished 6-step run of kind ("transformer", "gru", "lstm" or "rnn") */
static const char *trained_run(const char *kind) {
    static char paths[4][512];
    char *p = paths[kind_slot(kind)];
    if (p[0]) return p;
    snprintf(p, sizeof paths[0], "%s/run-%s", tt.dir, kind);
    int st = RUN("train", "--train", toy(), "--out", p, "--model", kind, TINY, "--steps", "6", "--eval-every", "3",
                 "--save-every", "3");
    assert_status(st, 0);
    trained_log[kind_slot(kind)][0] = strdup(tt.out);
    trained_log[kind_slot(kind)][1] = strdup(tt.err);
    return p;
}

static const char *ckpt_of(const char *kind, const char *which) {
    char name[64];
    snprintf(name, sizeof name, "run-%s/%s.h5", kind, which);
    return tt_in_dir(name);
}

static int group_setup(void **state) {
    if (tt_begin("translate-cli") != 0) return -1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* a missing dataset is a test failure, not a stack dump */
    return 0;
}

static int group_teardown(void **state) {
    tt_end();
    free(unk_run_stdout);
    for (int i = 0; i < 4; i++) free(trained_log[i / 2][i % 2]);
    H5close();
    return 0;
}

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

static ag_train_state load_state(const char *path) {
    ag_train_state st = {0};
    char msg[1024];
    ag_checkpoint_status s = ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg);
    if (s != AG_CHECKPOINT_OK) fail_msg("%s does not load: %s", path, msg);
    return st;
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

/* the lines eval prints: "<data>: N pairs, loss L, greedy|beam exact match X%, BLEU Y, chrF2 Z",
 * then sacreBLEU's BLEU and chrF2 lines with their signatures */
static void check_eval_output(const char *data, int pairs, const char *search) {
    char head[600], mode[16];
    snprintf(head, sizeof head, "%s: ", data);
    if (strncmp(tt.out, head, strlen(head)) != 0)
        fail_msg("eval printed '%s', expected it to start with '%s'", tt.out, head);
    int n;
    double loss, exact, bleu, chrf;
    char end;
    int got = sscanf(tt.out + strlen(head), "%d pairs, loss %lf, %15s exact match %lf%%, BLEU %lf, chrF2 %lf%c", &n,
                     &loss, mode, &exact, &bleu, &chrf, &end);
    if (got != 7 || end != '\n') fail_msg("eval printed '%s'", tt.out);
    assert_int_equal(n, pairs);
    assert_string_equal(mode, search);
    assert_true(loss > 0 && isfinite(loss));
    assert_true(exact >= 0 && exact <= 100);
    assert_true(bleu >= 0 && bleu <= 100);
    assert_true(chrf >= 0 && chrf <= 100);
    assert_int_equal(tt_count(tt.out, "\n"), 3);
    /* sacreBLEU's lines say the same numbers */
    char b[64], c[64];
    snprintf(b, sizeof b, "|version:%s = %.2f ", TR_SACREBLEU_VERSION, bleu);
    snprintf(c, sizeof c, "|version:%s = %.2f\n", TR_SACREBLEU_VERSION, chrf);
    assert_contains(tt.out, "\n  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|");
    assert_contains(tt.out, b);
    assert_contains(tt.out, "\nchrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|");
    assert_contains(tt.out, c);
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
        TEST(test_help_of_every_command_goes_to_stdout_with_status_0),
        TEST(test_resume_transformer_with_dropout_matches_an_uninterrupted_run_bit_for_bit),
        TEST(test_memory_options_train_the_same_model_bit_for_bit),
        TEST(test_resume_gru_at_an_epoch_boundary_with_teacher_forcing_draws_matches_bit_for_bit),
        TEST(test_sigint_saves_last_checkpoint_exits_130_and_resume_continues),
        TEST(test_sigterm_saves_last_checkpoint_exits_130),
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
        TEST(test_a_read_only_or_full_out_fails_with_status_1_never_0),
        TEST(test_resume_restores_every_training_setting_and_refuses_conflicting_flags),
        TEST(test_eval_with_a_missing_data_file_fails_naming_it),
        TEST(test_a_vocabulary_of_20000_words_is_saved_and_translate_and_resume_use_it),
        TEST(test_a_checkpoint_with_vocabularies_in_the_old_chunked_form_still_loads),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
