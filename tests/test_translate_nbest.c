/* attograd-translate translate's n-best lists and scores: Marian's "id ||| text ||| score" lines
 * (ids from 0, best first, as many as the beam found up to N), "text ||| score" with --scores,
 * the plain translation the same as the n-best list's first line, and the new options' usage
 * errors. A tiny word-level model trained in a fraction of a second is the program under test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "translate_run.h"

static const char *model(void) {
    static const char *ck;
    if (!ck) ck = tt_tiny_model("tiny", 777, "word", "8");
    return ck;
}

/* the lines of s (modified in place), at most max; their count */
static int lines(char *s, char **line, int max) {
    int n = 0;
    for (char *p = s; *p && n < max; n++) {
        line[n] = p;
        char *nl = strchr(p, '\n');
        assert_non_null(nl);
        *nl = 0;
        p = nl + 1;
    }
    return n;
}

/* "id ||| text ||| score" into its parts; fails unless the line has that form */
static void nbest_line(char *l, long *id, char **text, double *score) {
    char *a = strstr(l, " ||| "), *b = a ? strstr(a + 5, " ||| ") : NULL;
    assert_non_null(b);
    *a = *b = 0;
    char *end;
    *id = strtol(l, &end, 10);
    assert_true(end != l && *end == 0);
    *text = a + 5;
    *score = strtod(b + 5, &end);
    assert_true(*end == 0 && isfinite(*score) && *score <= 0);
    assert_non_null(strchr(b + 5, '.'));
    assert_int_equal(strlen(strchr(b + 5, '.') + 1), 6); /* six decimals */
}

/* The n-best list of two sentences: ids 0 and 1 in order, at most 3 lines each, scores not
 * increasing, distinct texts; the first text of each is what translate prints with the same
 * beam, and its score what --scores appends. */
static void test_nbest_lines_are_marians(void **s) {
    const char *ck = model();
    const char *src[2] = {"one two three", "four five"};
    assert_status(RUN("translate", "--checkpoint", ck, "--beam", "3", "--n-best", "3", src[0], src[1]), 0);
    char *nb = strdup(tt.out), *line[16];
    int n = lines(nb, line, 16);
    assert_true(n >= 2 && n <= 6);
    long prev_id = -1;
    double prev = 0;
    char *first[2] = {NULL, NULL}, *text[16];
    double best[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        long id;
        double score;
        nbest_line(line[i], &id, &text[i], &score);
        assert_true(id == prev_id || id == prev_id + 1);
        if (id == prev_id) {
            assert_true(score <= prev);
            assert_string_not_equal(text[i], text[i - 1]);
        } else {
            first[id] = text[i];
            best[id] = score;
        }
        assert_true(id <= 1);
        prev_id = id;
        prev = score;
    }
    assert_int_equal(prev_id, 1);
    assert_status(RUN("translate", "--checkpoint", ck, "--beam", "3", src[0], src[1]), 0);
    char *plain = strdup(tt.out), *pl[4];
    assert_int_equal(lines(plain, pl, 4), 2);
    assert_status(RUN("translate", "--checkpoint", ck, "--beam", "3", "--scores", src[0], src[1]), 0);
    char *scored = strdup(tt.out), *sl[4], want[64];
    assert_int_equal(lines(scored, sl, 4), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(pl[i], first[i]);
        char *sep = strstr(sl[i], " ||| ");
        assert_non_null(sep);
        *sep = 0;
        assert_string_equal(sl[i], pl[i]);
        snprintf(want, sizeof want, "%.6f", best[i]);
        assert_string_equal(sep + 5, want);
    }
    free(nb);
    free(plain);
    free(scored);
}

/* Lines of stdin count from 0; an empty line stands as an empty translation of score 0. */
static void test_nbest_ids_count_stdin_lines(void **s) {
    assert_status(RUN_STDIN("one\n\ntwo\n", "translate", "--checkpoint", model(), "--n-best", "2"), 0);
    char *out = strdup(tt.out), *line[16];
    int n = lines(out, line, 16), empty = 0;
    long last = -1;
    for (int i = 0; i < n; i++) {
        if (strcmp(line[i], "1 |||  ||| 0.000000") == 0) {
            empty++;
            last = 1;
            continue;
        }
        long id;
        char *text;
        double score;
        nbest_line(line[i], &id, &text, &score);
        assert_true(id == 0 || id == 2);
        assert_true(id >= last);
        last = id;
    }
    assert_int_equal(empty, 1);
    assert_int_equal(last, 2);
    free(out);
}

/* The new options' bad values are usage errors (status 2) naming them. */
static void test_decode_option_errors(void **s) {
    struct {
        const char *opt, *value, *says;
    } cases[] = {
        {"--n-best", "0", "--n-best expects an integer from 1 to 64"},
        {"--batch", "0", "--batch expects an integer from 1 to 4096"},
        {"--max-len-ratio", "-1", "--max-len-ratio expects a number from 0 to 1000"},
        {"--length-norm", "fair", "--length-norm 'fair': expected gnmt or marian"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_status(RUN("translate", "--checkpoint", "x.h5", cases[i].opt, cases[i].value, "hi"), 2);
        assert_non_null(strstr(tt.err, cases[i].says));
    }
}

static int setup(void **state) { return tt_begin("translate-nbest"); }

static int teardown(void **state) {
    tt_end();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nbest_lines_are_marians),
        cmocka_unit_test(test_nbest_ids_count_stdin_lines),
        cmocka_unit_test(test_decode_option_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
