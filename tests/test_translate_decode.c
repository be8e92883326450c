/* attograd-translate's greedy and beam search against PyTorch's: tests/parity/gen_decode.py
 * decoded 50 test sentences with each committed checkpoint (tests/parity/decode/KIND.h5, tiny
 * models trained by attograd-translate) in PyTorch (bench/torch_translate.py: the same model,
 * the same search, incremental) and wrote the translations to tests/parity/decode/expected.tsv;
 * `attograd-translate translate` must print the same, line for line, greedy and with beam 4. A
 * difference at a sentence whose fixture margin (the least gap between two scores the search
 * ordered) is below TIE is named as a near tie in the failure: float rounding, not the
 * algorithm, decides those. PyTorch is not needed: the fixture is committed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "translate_run.h"

enum { SENTENCES = 50, MAXROWS = 1024 };
static const double TIE = 1e-4; /* gen_decode.py's TIE */

typedef struct {
    const char *kind, *src, *want;
    int beam;
    double margin;
} row;

static char *fixture; /* expected.tsv, cut into rows in place */
static row rows[MAXROWS];
static int nrows;

static char root_path[1024];
static const char *in_root(const char *rel) {
    const char *root = getenv("AG_SOURCE_ROOT");
    snprintf(root_path, sizeof root_path, "%s/%s", root ? root : ".", rel);
    return root_path;
}

/* expected.tsv's rows: kind, beam, margin, source, translation (lines starting '#' skipped) */
static int load_fixture(void) {
    fixture = tt_read_file(in_root("tests/parity/decode/expected.tsv"), NULL);
    if (!fixture) {
        fprintf(stderr, "cannot read %s\n", root_path);
        return -1;
    }
    for (char *line = fixture, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (*line == '#' || !*line) continue;
        char *f[5];
        int n = 0;
        for (char *p = line; n < 5; n++) {
            f[n] = p;
            p = strchr(p, '\t');
            if (!p) break;
            *p++ = 0;
        }
        if (n != 4 || nrows == MAXROWS) {
            fprintf(stderr, "expected.tsv: a row without 5 fields, or more than %d rows\n", MAXROWS);
            return -1;
        }
        rows[nrows++] = (row){f[0], f[3], f[4], atoi(f[1]), strtod(f[2], NULL)};
    }
    return 0;
}

static int group_setup(void **state) {
    (void)state;
    if (tt_begin("translate-decode") != 0) return -1;
    return load_fixture();
}

static int group_teardown(void **state) {
    (void)state;
    free(fixture);
    tt_end();
    return 0;
}

/* kind's sentences translated with beam: every line equals PyTorch's */
static void check(const char *kind, int beam) {
    const row *r[SENTENCES];
    int n = 0;
    size_t len = 1;
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i].kind, kind) == 0 && rows[i].beam == beam && n < SENTENCES) {
            r[n++] = &rows[i];
            len += strlen(rows[i].src) + 1;
        }
    assert_int_equal(n, SENTENCES);
    char *input = malloc(len), *at = input;
    for (int i = 0; i < n; i++) at += sprintf(at, "%s\n", r[i]->src);
    char ckpt[1100], b[16];
    snprintf(ckpt, sizeof ckpt, "%s", in_root("tests/parity/decode/"));
    snprintf(ckpt + strlen(ckpt), sizeof ckpt - strlen(ckpt), "%s.h5", kind);
    snprintf(b, sizeof b, "%d", beam);
    assert_status(RUN_STDIN(input, "translate", "--checkpoint", ckpt, "--beam", b, "--length-penalty", "0.6"), 0);
    free(input);
    int differ = 0, lines = 0;
    for (char *line = tt.out, *next; line && *line && lines < n; line = next, lines++) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (strcmp(line, r[lines]->want) == 0) continue;
        differ++;
        fprintf(stderr, "%s beam %d, '%s': attograd '%s', PyTorch '%s'%s (margin %.3g)\n", kind, beam, r[lines]->src,
                line, r[lines]->want, r[lines]->margin < TIE ? ": a near tie, decided by float rounding" : "",
                r[lines]->margin);
    }
    assert_int_equal(lines, n);
    assert_int_equal(differ, 0);
}

/* the fixture tests beam search beyond greedy: some sentences differ between the two */
static void assert_beam_differs_from_greedy(const char *kind) {
    int differ = 0;
    for (int i = 0; i < nrows; i++)
        for (int j = 0; j < nrows; j++)
            differ += strcmp(rows[i].kind, kind) == 0 && strcmp(rows[j].kind, kind) == 0 && rows[i].beam == 1 &&
                      rows[j].beam == 4 && strcmp(rows[i].src, rows[j].src) == 0 &&
                      strcmp(rows[i].want, rows[j].want) != 0;
    assert_true(differ > 0);
}

static void test_transformer_greedy_and_beam_4_equal_pytorchs(void **state) {
    (void)state;
    assert_beam_differs_from_greedy("transformer");
    check("transformer", 1);
    check("transformer", 4);
}

static void test_gru_greedy_and_beam_4_equal_pytorchs(void **state) {
    (void)state;
    assert_beam_differs_from_greedy("gru");
    check("gru", 1);
    check("gru", 4);
}

static void test_lstm_greedy_and_beam_4_equal_pytorchs(void **state) {
    (void)state;
    assert_beam_differs_from_greedy("lstm");
    check("lstm", 1);
    check("lstm", 4);
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_transformer_greedy_and_beam_4_equal_pytorchs),
        TEST(test_gru_greedy_and_beam_4_equal_pytorchs),
        TEST(test_lstm_greedy_and_beam_4_equal_pytorchs),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
