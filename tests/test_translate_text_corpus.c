/* attograd-translate support code: tokenisation, corpus reading (every defect named with its
 * file and line), and checks of the shipped num-en-fr data set.
 *
 * The data set is found through the environment variable AG_SOURCE_ROOT (the source tree), else
 * two directories above this executable (build/tests), else relative to the working directory.
 * Not finding it is a failure, never a skip. */
#include "test_util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "translate_text_util.h"

/* tokens of text as one string joined by '|', for compact expectations */
static const char *toks(const char *text, tr_tok_mode mode) {
    static char out[1024];
    tr_span sp[128];
    int n = tr_tokenize(text, mode, sp, 128);
    assert_true(n <= 128);
    size_t pos = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++)
        pos += (size_t)snprintf(out + pos, sizeof out - pos, "%s%.*s", i ? "|" : "", sp[i].len, sp[i].s);
    return out;
}

static const char *roundtrip(const char *text, tr_tok_mode mode) {
    static char out[1024];
    tr_span sp[256];
    int n = tr_tokenize(text, mode, sp, 256);
    assert_true(n <= 256);
    assert_true(tr_detokenize(sp, n, mode, out, sizeof out) < sizeof out);
    return out;
}

static const char *source_root(void) {
    static char root[PATH_MAX + 8];
    const char *rel = "examples/translate/data/num-en-fr/train.tsv";
    char p[PATH_MAX * 2];
    const char *env = getenv("AG_SOURCE_ROOT");
    if (env) {
        snprintf(p, sizeof p, "%s/%s", env, rel);
        if (access(p, R_OK) != 0) fail_msg("AG_SOURCE_ROOT=%s but %s is not readable", env, p);
        return env;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(root, sizeof root, "%s/../..", exe);
        snprintf(p, sizeof p, "%s/%s", root, rel);
        if (access(p, R_OK) == 0) return root;
    }
    const char *cands[] = {".", "..", "../..", "../../.."};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", cands[i], rel);
        if (access(p, R_OK) == 0) return cands[i];
    }
    fail_msg("cannot find %s: set AG_SOURCE_ROOT to the source tree", rel);
    return NULL;
}

static void read_shipped(tr_corpus *c, const char *name) {
    char path[PATH_MAX + 64], err[TR_ERR_SIZE];
    snprintf(path, sizeof path, "%s/examples/translate/data/num-en-fr/%s", source_root(), name);
    tr_read_opts strict = {.strict = true};
    if (tr_corpus_read(c, path, &strict, err, sizeof err) != 0) fail_msg("%s", err);
}

/* ---- tokenisation ------------------------------------------------------------------------- */

static void test_word_tokens_split_hyphens_and_punctuation(void **state) {
    (void)state;
    assert_string_equal(toks("seventy-one", TR_WORDS), "seventy|-|one");
    assert_string_equal(toks("quatre-vingt-dix", TR_WORDS), "quatre|-|vingt|-|dix");
    assert_string_equal(toks("hello, world.", TR_WORDS), "hello|,|world|.");
    assert_string_equal(toks("  two\t thousand,  one ", TR_WORDS), "two|thousand|,|one");
    assert_string_equal(toks("(a+b)=c?!", TR_WORDS), "(|a|+|b|)|=|c|?|!");
    assert_string_equal(toks("", TR_WORDS), "");
    assert_string_equal(toks(" \t ", TR_WORDS), "");
}

static void test_word_tokens_keep_accented_letters_and_split_unicode_punctuation(void **state) {
    (void)state;
    assert_string_equal(toks("zéro", TR_WORDS), "zéro");
    assert_string_equal(toks("déjà-vu à l’école", TR_WORDS), "déjà|-|vu|à|l|’|école");
    assert_string_equal(toks("«\xc2\xa0Ça va\xe2\x80\xaf?\xc2\xa0»", TR_WORDS), "«|Ça|va|?|»"); /* NBSP, NNBSP */
    assert_string_equal(toks("Straße…", TR_WORDS), "Straße|…");
}

static void test_char_tokens_are_code_points_with_visible_spaces(void **state) {
    (void)state;
    assert_string_equal(toks("é a€😀", TR_CHARS), "é|▁|a|€|😀");
    tr_span sp[8];
    assert_int_equal(tr_tokenize("é a€😀", TR_CHARS, sp, 8), 5);
    assert_int_equal(sp[0].len, 2);
    assert_int_equal(sp[1].len, 3); /* ▁ U+2581 */
    assert_int_equal(sp[3].len, 3);
    assert_int_equal(sp[4].len, 4);
    assert_string_equal(toks("vingt et un", TR_CHARS), "v|i|n|g|t|▁|e|t|▁|u|n");
    /* a malformed byte is a token of its own instead of swallowing its neighbours */
    assert_string_equal(toks("a\xff"
                             "b",
                             TR_CHARS),
                        "a|\xff|b");
}

static void test_tokenize_counts_beyond_max_and_writes_only_max(void **state) {
    (void)state;
    tr_span sp[3] = {{NULL, -7}, {NULL, -7}, {NULL, -7}};
    assert_int_equal(tr_tokenize("one two three four", TR_WORDS, sp, 2), 4);
    assert_int_equal(sp[1].len, 3);
    assert_int_equal(sp[2].len, -7);
    assert_int_equal(tr_tokenize("one two three four", TR_WORDS, NULL, 0), 4);
}

static void test_detokenize_inverts_conventional_spacing(void **state) {
    (void)state;
    const char *cases[] = {
        "seventy-one",
        "quatre-vingt-dix-neuf mille",
        "hello, world.",
        "He said (quietly): don't go!",
        "nine hundred and ninety-nine thousand, nine hundred and ninety-nine",
        "l’école, c’est fini…",
        "50% of 1/2",
        "zéro",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_string_equal(roundtrip(cases[i], TR_WORDS), cases[i]);
        assert_string_equal(roundtrip(cases[i], TR_CHARS), cases[i]);
    }
    /* spacing that the conventions do not produce is normalised */
    assert_string_equal(roundtrip("a  -  b ,c", TR_WORDS), "a-b, c");
}

static void test_detokenize_truncates_like_snprintf(void **state) {
    (void)state;
    tr_span sp[4];
    int n = tr_tokenize("seventy-one thousand", TR_WORDS, sp, 4);
    char out[8];
    assert_int_equal(tr_detokenize(sp, n, TR_WORDS, out, sizeof out), strlen("seventy-one thousand"));
    assert_string_equal(out, "seventy");
    assert_int_equal(tr_detokenize(sp, n, TR_WORDS, NULL, 0), 20);
}

/* ---- reading corpora: every defect with its file and line ----------------------------------- */

static void test_corpus_missing_and_empty_files_fail_with_path(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/no-such.tsv", tmpdir);
    assert_int_equal(read_corpus(&c, path, false, 0, err), -1);
    assert_contains(err, "no-such.tsv: cannot open: No such file or directory");
    assert_int_equal(read_corpus(&c, WRITE("empty.tsv", ""), false, 0, err), -1);
    assert_contains(err, "empty.tsv: file is empty");
    assert_int_equal(read_corpus(&c, tmpdir, false, 0, err), -1); /* a directory */
    assert_contains(err, tmpdir);
    assert_contains(err, "Is a directory");
    tr_corpus_free(&c);
}

/* One bad line among good ones: lenient mode skips and counts it, strict mode fails on it. */
static void check_bad_line(const char *name, const char *data, size_t len, size_t maxb, int kind, const char *what,
                           int64_t lineno, int64_t good) {
    const char *path = write_file(name, data, len);
    char expect[PATH_MAX + 128], err[TR_ERR_SIZE];
    snprintf(expect, sizeof expect, "%s:%lld: %s", path, (long long)lineno, what);
    tr_corpus c;
    assert_int_equal(read_corpus(&c, path, false, maxb, err), 0);
    assert_int_equal(c.n, good);
    assert_int_equal(c.skipped, 1);
    assert_int_equal(c.bad_count[kind], 1);
    assert_contains(c.first_bad[kind], expect);
    char sum[TR_ERR_SIZE];
    assert_true(tr_corpus_skip_summary(&c, sum, sizeof sum) > 0);
    assert_contains(sum, "skipped 1 of");
    assert_contains(sum, expect);
    tr_corpus_free(&c);
    assert_int_equal(read_corpus(&c, path, true, maxb, err), -1);
    assert_contains(err, expect);
    tr_corpus_free(&c);
}
#define BAD(name, literal, maxb, kind, what, line, good) \
    check_bad_line((name), (literal), sizeof(literal) - 1, (maxb), (kind), (what), (line), (good))

static void test_corpus_bad_lines_are_named_by_file_and_line(void **state) {
    (void)state;
    BAD("notab.tsv", "one\tun\ntwo deux\nthree\ttrois\n", 0, TR_BAD_NO_TAB, "no tab between source and target", 2, 2);
    BAD("tabs.tsv", "one\tun\ntwo\tdeux\nthree\ttrois\tdrei\n", 0, TR_BAD_TABS, "2 tabs, expected one", 3, 2);
    BAD("utf8.tsv", "one\tun\nz\xc3\x28ro\tz\xc3\xa9ro\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 2 (0xC3)", 2, 1);
    BAD("overlong.tsv", "\xc0\xaf\tx\none\tun\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 1 (0xC0)", 1, 1);
    BAD("surrogate.tsv", "one\tun\na\t\xed\xa0\x80\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 3 (0xED)", 2, 1);
    BAD("truncated.tsv", "one\tun\nab\t\xe2\x82\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 4 (0xE2)", 2, 1);
    BAD("nul.tsv", "one\tun\ntw\0o\tdeux\n", 0, TR_BAD_UTF8, "NUL byte at byte 3", 2, 1);
    BAD("long.tsv", "0123\t5678\n0123\t56789\n", 9, TR_BAD_LONG, "line longer than 9 bytes", 2, 1);
    BAD("emptysrc.tsv", "one\tun\n \tdeux\n", 0, TR_BAD_EMPTY, "empty source side", 2, 1);
    BAD("emptytgt.tsv", "one\tun\ntwo\t\xc2\xa0\n", 0, TR_BAD_EMPTY, "empty target side", 2, 1);
    BAD("blank.tsv", "one\tun\n\ntwo\tdeux\n", 0, TR_BAD_BLANK, "empty line", 2, 2);
}

static void test_corpus_long_line_limit_excludes_the_line_ending(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE];
    /* 9 bytes of text + CRLF is within a 9-byte limit; the rest of a too long line is skipped
     * without being mistaken for further lines */
    assert_int_equal(read_corpus(&c, WRITE("limit.tsv", "0123\t5678\r\n0123456789\t0123456789\nab\tcd"), false, 9, err),
                     0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.lines, 3);
    assert_string_equal(c.tgt[0], "5678");
    assert_int_equal(c.line[1], 3);
    assert_int_equal(c.bad_count[TR_BAD_LONG], 1);
    tr_corpus_free(&c);
}

static void test_corpus_accepts_crlf_bom_and_missing_final_newline_with_notes(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], note[TR_ERR_SIZE];
    const char *path = WRITE("crlf.tsv", "\xef\xbb\xbfone\tun\r\ntwo\tdeux\r\nthree\ttrois");
    assert_int_equal(read_corpus(&c, path, true, 0, err), 0);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.src[0], "one"); /* BOM gone */
    assert_string_equal(c.tgt[0], "un");  /* \r gone */
    assert_string_equal(c.tgt[1], "deux");
    assert_string_equal(c.tgt[2], "trois");
    assert_int_equal(c.crlf_lines, 2);
    assert_true(c.no_final_newline);
    assert_true(c.bom);
    assert_int_equal(c.skipped, 0);
    assert_true(tr_corpus_note_summary(&c, note, sizeof note) > 0);
    char expect[3 * PATH_MAX + 256];
    snprintf(expect, sizeof expect,
             "%s:1: byte order mark removed; %s:1: CRLF line ending, 2 lines like it (\\r removed); "
             "%s:3: no newline at the end of the file",
             path, path, path);
    assert_string_equal(note, expect);
    assert_int_equal(tr_corpus_skip_summary(&c, note, sizeof note), 0);
    assert_string_equal(note, "");
    tr_corpus_free(&c);
}

static void test_corpus_with_only_bad_lines_fails_listing_the_defects(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE];
    const char *path = WRITE("allbad.tsv", "one\n\ttwo\nthree\n");
    assert_int_equal(read_corpus(&c, path, false, 0, err), -1);
    assert_contains(err, "no valid pairs");
    assert_contains(err, "skipped 3 of 3 lines: 2 without a tab (first: ");
    assert_contains(err, "allbad.tsv:1: no tab");
    assert_contains(err, "1 with an empty side (first: ");
    assert_contains(err, "allbad.tsv:2: empty source side");
}

static void test_corpus_skip_summary_counts_each_kind(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], sum[TR_ERR_SIZE];
    const char *path = WRITE("mixed.tsv", "a\tb\nno tab\nx\ty\tz\nalso no tab\nc\td\n");
    assert_int_equal(read_corpus(&c, path, false, 0, err), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.line[0], 1);
    assert_int_equal(c.line[1], 5);
    tr_corpus_skip_summary(&c, sum, sizeof sum);
    assert_contains(sum, "skipped 3 of 5 lines: 2 without a tab (first: ");
    assert_contains(sum, "mixed.tsv:2: no tab");
    assert_contains(sum, "; 1 with more than one tab (first: ");
    assert_contains(sum, "mixed.tsv:3: 2 tabs");
    tr_corpus_free(&c);
}

/* ---- the shipped num-en-fr data set ---------------------------------------------------------- */

/* integer value of English or French number words as num2words writes them, -1 if unknown */
static long number_value(const char *text) {
    static const char *const en[] = {"zero",     "one",     "two",     "three",     "four",     "five",    "six",
                                     "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                                     "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
    static const char *const en_tens[] = {"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};
    static const char *const fr[] = {"zéro", "un",  "deux", "trois", "quatre", "cinq",     "six",    "sept", "huit",
                                     "neuf", "dix", "onze", "douze", "treize", "quatorze", "quinze", "seize"};
    static const char *const fr_tens[] = {"vingt", "trente", "quarante", "cinquante", "soixante"};
    tr_span sp[64];
    int n = tr_tokenize(text, TR_WORDS, sp, 64);
    long total = 0, cur = 0;
    char prev[32] = "";
    for (int i = 0; i < n && i < 64; i++) {
        char w[32];
        snprintf(w, sizeof w, "%.*s", sp[i].len, sp[i].s);
        long v = -1;
        for (int k = 0; k < 20 && v < 0; k++)
            if (!strcmp(w, en[k])) v = k;
        for (int k = 0; k < 17 && v < 0; k++)
            if (!strcmp(w, fr[k])) v = k;
        for (int k = 0; k < 8 && v < 0; k++)
            if (!strcmp(w, en_tens[k])) v = 20 + 10 * k;
        for (int k = 0; k < 5 && v < 0; k++)
            if (!strcmp(w, fr_tens[k])) v = 20 + 10 * k;
        if (!strcmp(w, "vingts")) v = 20;
        if (!strcmp(w, "une")) v = 1;
        if (v >= 0) {
            if (v == 20 && !strcmp(prev, "quatre")) v = 80 - 4; /* quatre-vingt = 4 × 20 */
            cur += v;
        } else if (!strcmp(w, "hundred") || !strcmp(w, "cent") || !strcmp(w, "cents")) {
            cur = (cur ? cur : 1) * 100;
        } else if (!strcmp(w, "thousand") || !strcmp(w, "mille")) {
            total += (cur ? cur : 1) * 1000;
            cur = 0;
        } else if (strcmp(w, "and") && strcmp(w, "et") && strcmp(w, "-") && strcmp(w, ",")) {
            return -1;
        }
        if (strcmp(w, "-")) snprintf(prev, sizeof prev, "%s", w);
    }
    return total + cur;
}

static void test_number_parser_witness_reads_both_languages(void **state) {
    (void)state;
    assert_int_equal(number_value("seventy-one"), 71);
    assert_int_equal(number_value("soixante et onze"), 71);
    assert_int_equal(number_value("quatre-vingt-dix-neuf mille neuf cent quatre-vingts"), 99980);
    assert_int_equal(number_value("nine hundred and ninety-nine thousand, nine hundred and ninety-nine"), 999999);
    assert_int_equal(number_value("cent mille"), 100000);
    assert_int_equal(number_value("deux cent vingt et un mille trois"), 221003);
    assert_int_equal(number_value("zéro"), 0);
    assert_int_equal(number_value("eleventy"), -1);
}

static void test_shipped_corpus_reads_strictly_with_the_documented_sizes(void **state) {
    (void)state;
    tr_corpus tr, te;
    read_shipped(&tr, "train.tsv");
    read_shipped(&te, "test.tsv");
    assert_int_equal(tr.n, 20000);
    assert_int_equal(te.n, 2000);
    for (tr_corpus *c = &tr; c; c = c == &tr ? &te : NULL) {
        assert_int_equal(c->skipped, 0);
        assert_int_equal(c->crlf_lines, 0);
        assert_false(c->no_final_newline);
        assert_false(c->bom);
    }
    tr_corpus_free(&tr);
    tr_corpus_free(&te);
}

static void test_shipped_corpus_round_trips_through_both_tokenizers(void **state) {
    (void)state;
    const char *files[] = {"train.tsv", "test.tsv"};
    tr_span sp[512];
    char out[4096];
    int64_t checked = 0;
    for (int fi = 0; fi < 2; fi++) {
        tr_corpus c;
        read_shipped(&c, files[fi]);
        for (int64_t i = 0; i < c.n; i++)
            for (int side = 0; side < 2; side++) {
                const char *s = side ? c.tgt[i] : c.src[i];
                for (int mode = TR_WORDS; mode <= TR_CHARS; mode++) {
                    int n = tr_tokenize(s, (tr_tok_mode)mode, sp, 512);
                    assert_true(n > 0 && n <= 512);
                    tr_detokenize(sp, n, (tr_tok_mode)mode, out, sizeof out);
                    if (strcmp(out, s) != 0)
                        fail_msg("%s:%lld: '%s' detokenises to '%s'", files[fi], (long long)c.line[i], s, out);
                    checked++;
                }
            }
        tr_corpus_free(&c);
    }
    assert_int_equal(checked, 22000 * 2 * 2);
}

static void test_shipped_corpus_is_correct_disjoint_and_spread_over_digit_counts(void **state) {
    (void)state;
    const char *files[] = {"train.tsv", "test.tsv"};
    unsigned char *seen = calloc(1000000, 1); /* bit 1: in train, bit 2: in test */
    int64_t digits[2][7] = {{0}};
    bool has71 = false, has0 = false;
    for (int fi = 0; fi < 2; fi++) {
        tr_corpus c;
        read_shipped(&c, files[fi]);
        for (int64_t i = 0; i < c.n; i++) {
            long en = number_value(c.src[i]), fr = number_value(c.tgt[i]);
            if (en < 0 || en > 999999 || en != fr)
                fail_msg("%s:%lld: '%s' (%ld) and '%s' (%ld)", files[fi], (long long)c.line[i], c.src[i], en, c.tgt[i],
                         fr);
            if (seen[en] & (1 << fi)) fail_msg("%s:%lld: %ld appears twice", files[fi], (long long)c.line[i], en);
            if (seen[en]) fail_msg("%s:%lld: %ld is in both splits", files[fi], (long long)c.line[i], en);
            seen[en] |= (unsigned char)(1 << fi);
            int d = 1;
            for (long v = en; v >= 10; v /= 10) d++;
            digits[fi][d]++;
            has71 |= !strcmp(c.src[i], "seventy-one") && !strcmp(c.tgt[i], "soixante et onze");
            has0 |= !strcmp(c.src[i], "zero") && !strcmp(c.tgt[i], "zéro");
        }
        tr_corpus_free(&c);
    }
    free(seen);
    assert_true(has71);
    assert_true(has0);
    /* every integer with 1-3 digits is used (10, 90, 900 of them), the rest spreads evenly over
     * 4, 5 and 6 digits in each split, and test takes 2000/22000 of every digit count */
    const int64_t small[4] = {0, 10, 90, 900};
    for (int d = 1; d <= 3; d++) assert_int_equal(digits[0][d] + digits[1][d], small[d]);
    const int64_t size[2] = {20000, 2000};
    for (int fi = 0; fi < 2; fi++) {
        double rest = (double)(size[fi] - digits[fi][1] - digits[fi][2] - digits[fi][3]) / 3;
        for (int d = 4; d <= 6; d++)
            if (fabs((double)digits[fi][d] - rest) > 0.1 * rest)
                fail_msg("%s: %lld %d-digit numbers, expected about %.0f", files[fi], (long long)digits[fi][d], d,
                         rest);
    }
    for (int d = 1; d <= 6; d++) {
        double share = (double)(digits[0][d] + digits[1][d]) * 2000 / 22000;
        assert_true(fabs((double)digits[1][d] - share) <= 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_word_tokens_split_hyphens_and_punctuation),
        cmocka_unit_test(test_word_tokens_keep_accented_letters_and_split_unicode_punctuation),
        cmocka_unit_test(test_char_tokens_are_code_points_with_visible_spaces),
        cmocka_unit_test(test_tokenize_counts_beyond_max_and_writes_only_max),
        cmocka_unit_test(test_detokenize_inverts_conventional_spacing),
        cmocka_unit_test(test_detokenize_truncates_like_snprintf),
        cmocka_unit_test(test_corpus_missing_and_empty_files_fail_with_path),
        cmocka_unit_test(test_corpus_bad_lines_are_named_by_file_and_line),
        cmocka_unit_test(test_corpus_long_line_limit_excludes_the_line_ending),
        cmocka_unit_test(test_corpus_accepts_crlf_bom_and_missing_final_newline_with_notes),
        cmocka_unit_test(test_corpus_with_only_bad_lines_fails_listing_the_defects),
        cmocka_unit_test(test_corpus_skip_summary_counts_each_kind),
        cmocka_unit_test(test_number_parser_witness_reads_both_languages),
        cmocka_unit_test(test_shipped_corpus_reads_strictly_with_the_documented_sizes),
        cmocka_unit_test(test_shipped_corpus_round_trips_through_both_tokenizers),
        cmocka_unit_test(test_shipped_corpus_is_correct_disjoint_and_spread_over_digit_counts)
    };
    return cmocka_run_group_tests(tests, text_group_setup, text_group_teardown);
}
