/* attograd-translate's metrics: sacreBLEU's BLEU (13a tokenizer) and chrF, their signatures and
 * text lines, and the `score` command.
 *
 * Witnesses: the expected scores of sacreBLEU's own test suite (github.com/mjpost/sacrebleu,
 * test/test_bleu.py, test/test_sentence_bleu.py and test/test_chrf.py, the 2.x versions),
 * transcribed case by case with the tolerance each asserts (1e-8, 1e-3, 1e-4 on scores in
 * [0, 100]); the 13a tokenizer's regular expressions (sacrebleu/tokenizers/tokenizer_re.py)
 * applied by hand; and worked examples whose counts are written out in the comments. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "test_util.h"
#include "translate_run.h"

static tr_metrics_work *W;

static int work_setup(void **state) {
    (void)state;
    W = tr_metrics_work_new();
    return W ? 0 : -1;
}

static int work_teardown(void **state) {
    (void)state;
    tr_metrics_work_free(W);
    return 0;
}

/* corpus BLEU of n segments with nrefs references each (refs[k][i]: reference k of segment i) */
static tr_bleu_result bleu_of(const tr_bleu_opts *o, int n, const char *const *hyps, int nrefs,
                              const char *const refs[][8], tr_bleu_stats *out) {
    tr_bleu_stats s = {0};
    for (int i = 0; i < n; i++) {
        const char *r[8];
        for (int k = 0; k < nrefs; k++) r[k] = refs[k][i];
        assert_int_equal(tr_bleu_add(W, &s, o, hyps[i], r, nrefs), 0);
    }
    if (out) *out = s;
    return tr_bleu_compute(&s, o);
}

static double chrf_of(const tr_chrf_opts *o, int n, const char *const *hyps, const char *const *refs) {
    tr_chrf_stats s = {0};
    for (int i = 0; i < n; i++) assert_int_equal(tr_chrf_add(W, &s, o, hyps[i], &refs[i], 1), 0);
    return tr_chrf_compute(&s, o);
}

#define assert_near(x, want, tol) tt_assert_near_(__FILE__, __LINE__, (x), (want), (tol))
static void tt_assert_near_(const char *file, int line, double x, double want, double tol) {
    if (!(fabs(x - want) < tol)) {
        print_error("%s:%d: %.12f, expected %.12f (within %g)\n", file, line, x, want, tol);
        _fail(file, line);
    }
}

/* ---- the 13a tokenizer ---- */

/* Each by the rules of tokenizer_13a.py / tokenizer_re.py: the line padded with spaces; every
 * character of [{-~[-` -&(-+:-@/] padded with spaces; "." and "," split from a non-digit before
 * them and from a non-digit after them; "-" split after a digit; whitespace collapsed. */
static void test_13a_tokenizer_applies_mteval_rules(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"Hello, world!", "Hello , world !"},
        {"It wasn't surprising.", "It wasn't surprising ."},    /* ' is not in the class */
        {"3.14 and 1,000.5", "3.14 and 1,000.5"},             /* digits on both sides */
        {"U.S.A.", "U . S . A ."},
        {"1990-2000 well-known", "1990 - 2000 well-known"},   /* - only after a digit */
        {"&quot;Hi&quot; &amp; &lt;b&gt;", "\" Hi \" & < b >"},
        {"&amp;lt;", "<"},                                    /* &amp; first, then &lt; */
        {"a <skipped> b", "a b"},
        {"$5 (approx.)", "$ 5 ( approx . )"},
        {"x.,y", "x . , y"},                                  /* "x." is one match: "," then splits from y */
        {"1.5.", "1.5 ."},
        {"  many   spaces\t\there ", "many spaces here"},
        {"naïve café.", "naïve café ."},                      /* é is a non-digit before "." */
        {"a\xc2\xa0" "b\xe3\x80\x80" "c", "a b c"},           /* U+00A0 and U+3000 are whitespace to str.split() */
        {"line-\nbreak\nhere", "linebreak here"},
        {"", ""},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const char *t = tr_tokenize_13a(W, cases[k][0]);
        assert_non_null(t);
        assert_string_equal(t, cases[k][1]);
    }
}

/* ---- BLEU: sacreBLEU's test cases ---- */

/* test_bleu.py, test_corpus_bleu_cases: the README example, two references per segment */
static const char *const README_HYPS[3] = {"The dog bit the man.", "It wasn't surprising.",
                                           "The man had just bitten him."};
static const char *const README_REFS[2][8] = {
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."},
};

static void test_bleu_matches_sacrebleu_corpus_cases(void **state) {
    (void)state;
    tr_bleu_opts o = {0}; /* the default: 13a, exp */
    assert_near(bleu_of(&o, 3, README_HYPS, 2, README_REFS, NULL).score, 48.530827, 1e-8);
    const char *const empty[3] = {"", "", ""}; /* empty hypotheses are kept, and score 0 */
    tr_bleu_result e = bleu_of(&o, 3, empty, 2, README_REFS, NULL);
    assert_true(e.score == 0.0);
    assert_true(e.bp == 0.0);
    o.tok = TR_BLEU_TOK_NONE;
    assert_near(bleu_of(&o, 3, README_HYPS, 2, README_REFS, NULL).score, 49.1919566, 1e-8);
    o = (tr_bleu_opts){.smooth = TR_SMOOTH_NONE};
    assert_near(bleu_of(&o, 3, README_HYPS, 2, README_REFS, NULL).score, 48.530827, 1e-8);
}

/* sacreBLEU's raw_corpus_bleu: no tokenization, 'floor' smoothing, effective order */
static double raw_bleu(int n, const char *const *hyps, const char *const *refs, double floor_value) {
    tr_bleu_opts o = {TR_BLEU_TOK_NONE, TR_SMOOTH_FLOOR, floor_value, true};
    const char *r[1][8];
    for (int i = 0; i < n; i++) r[0][i] = refs[i];
    return bleu_of(&o, n, hyps, 1, (const char *const(*)[8])r, NULL).score / 100;
}

static void test_bleu_matches_sacrebleu_raw_and_effective_order_cases(void **state) {
    (void)state;
    /* test_raw_bleu_cases (floor .01) */
    assert_near(raw_bleu(2, (const char *[]){"this is a test", "another test"}, (const char *[]){"ref1", "ref2"}, .01),
                0.0, 1e-8);
    assert_near(raw_bleu(1, (const char *[]){"this is a test"}, (const char *[]){"this is a test"}, .01), 1.0, 1e-8);
    assert_near(raw_bleu(1, (const char *[]){"this is a fest"}, (const char *[]){"this is a test"}, .01),
                0.223606797749979, 1e-8);
    /* test_case_effective_order */
    assert_near(raw_bleu(1, (const char *[]){"test"}, (const char *[]){"a test"}, .01), 0.3678794411714425, 1e-8);
    assert_near(raw_bleu(1, (const char *[]){"a test"}, (const char *[]){"a test"}, .01), 1.0, 1e-8);
    assert_near(raw_bleu(1, (const char *[]){"a little test"}, (const char *[]){"a test"}, .01), 0.03218297948685433,
                1e-8);
    /* test_case_offset: floor 0 and the default floor (0.1) */
    const char *h[] = {"am I am a character sequence"}, *r[] = {"I am a symbol string sequence a a"};
    assert_near(raw_bleu(1, h, r, 0.0), 0.0, 1e-8);
    assert_near(raw_bleu(1, h, r, -1), 0.1555722182, 1e-8);
}

static void test_bleu_counts_match_sacrebleu_statistics_case(void **state) {
    (void)state;
    /* test_case_statistics: common [4, 2, 1, 0], total [6, 5, 4, 3] */
    tr_bleu_opts o = {TR_BLEU_TOK_NONE, TR_SMOOTH_FLOOR, .01, true};
    const char *h[] = {"am I am a character sequence"};
    const char *const r[1][8] = {{"I am a symbol string sequence a a"}};
    tr_bleu_stats s;
    bleu_of(&o, 1, h, 1, r, &s);
    const int64_t correct[4] = {4, 2, 1, 0}, total[4] = {6, 5, 4, 3};
    assert_memory_equal(s.correct, correct, sizeof correct);
    assert_memory_equal(s.total, total, sizeof total);
    assert_int_equal(s.hyp_len, 6);
    assert_int_equal(s.ref_len, 8);
}

static void test_bleu_from_statistics_matches_sacrebleu_scoring_cases(void **state) {
    (void)state;
    /* test_case_scoring: compute_bleu([9, 7, 5, 3], [10, 8, 6, 4], 11, 11), smoothing 'none' */
    tr_bleu_stats s = {{9, 7, 5, 3}, {10, 8, 6, 4}, 11, 11};
    tr_bleu_opts none = {.smooth = TR_SMOOTH_NONE};
    assert_near(tr_bleu_compute(&s, &none).score / 100, 0.8375922397, 1e-8);
    /* test_case_degenerate_stats: 'floor' smoothing with these values gives exactly 0 */
    const struct {
        tr_bleu_stats s;
        double v;
    } degenerate[] = {
        {{{0, 0, 0, 0}, {4, 4, 2, 1}, 0, 1}, 0.0},  {{{0, 0, 0, 0}, {10, 11, 12, 0}, 14, 10}, 0.0},
        {{{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0}, 0.0},  {{{6, 5, 4, 0}, {6, 5, 4, 3}, 6, 6}, 0.0},
        {{{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0}, 0.1},  {{{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 5}, 0.01},
    };
    for (size_t k = 0; k < sizeof degenerate / sizeof *degenerate; k++) {
        tr_bleu_opts floor = {.smooth = TR_SMOOTH_FLOOR, .smooth_value = degenerate[k].v};
        assert_true(tr_bleu_compute(&degenerate[k].s, &floor).score == 0.0);
    }
}

/* test_sentence_bleu.py: a sentence (effective order) under each smoothing; #98's example */
static void test_sentence_bleu_matches_sacrebleu_smoothing_cases(void **state) {
    (void)state;
    const char *sys[] = {"Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;"};
    const char *const ref[1][8] = {{"producţia de zahăr brut se exprimă în zahăr alb;"}};
    const struct {
        tr_bleu_smooth m;
        double v;
        tr_bleu_tok tok;
        double want;
    } cases[] = {
        {TR_SMOOTH_EXP, -1, TR_BLEU_TOK_13A, 8.493},     {TR_SMOOTH_NONE, -1, TR_BLEU_TOK_13A, 0.0},
        {TR_SMOOTH_FLOOR, -1, TR_BLEU_TOK_13A, 4.51688}, {TR_SMOOTH_FLOOR, 0.1, TR_BLEU_TOK_13A, 4.51688},
        {TR_SMOOTH_FLOOR, 0.5, TR_BLEU_TOK_13A, 10.10},  {TR_SMOOTH_ADD_K, -1, TR_BLEU_TOK_13A, 14.882},
        {TR_SMOOTH_ADD_K, 1, TR_BLEU_TOK_13A, 14.882},   {TR_SMOOTH_ADD_K, 2, TR_BLEU_TOK_13A, 21.389},
        {TR_SMOOTH_EXP, -1, TR_BLEU_TOK_NONE, 7.347},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        tr_bleu_opts o = {cases[k].tok, cases[k].m, cases[k].v, true};
        assert_near(bleu_of(&o, 1, sys, 1, ref, NULL).score, cases[k].want, 1e-3);
    }
    /* #141: no n-gram in common is 0 whatever the smoothing */
    const char *sys0[] = {"this is a cat"};
    const char *const ref0[1][8] = {{"okay thanks"}};
    const tr_bleu_smooth all[] = {TR_SMOOTH_EXP, TR_SMOOTH_NONE, TR_SMOOTH_FLOOR, TR_SMOOTH_ADD_K};
    for (int k = 0; k < 4; k++) {
        tr_bleu_opts o = {TR_BLEU_TOK_13A, all[k], -1, true};
        assert_true(bleu_of(&o, 1, sys0, 1, ref0, NULL).score == 0.0);
    }
}

/* ---- BLEU: worked examples (default settings: 13a, exp, order 4) ---- */

static void test_bleu_worked_examples(void **state) {
    (void)state;
    tr_bleu_opts o = {0};
    tr_bleu_stats s;
    /* "The cat sat on the mat." vs "The cat is on the mat.": 13a splits the final "." so both
     * have 7 tokens (BP = 1). 1-grams: all but "sat" match, 6/7; 2-grams: The cat, on the, the
     * mat, mat . of 6; 3-grams: on the mat, the mat . of 5; 4-grams: on the mat . of 4.
     * BLEU = 100 (6/7 · 4/6 · 2/5 · 1/4)^¼ = 100 · (2/35)^¼ = 48.892302243 */
    const char *h1[] = {"The cat sat on the mat."};
    const char *const r1[1][8] = {{"The cat is on the mat."}};
    tr_bleu_result b = bleu_of(&o, 1, h1, 1, r1, &s);
    assert_near(b.score, 48.892302243490, 1e-9);
    const int64_t c1[4] = {6, 4, 2, 1}, t1[4] = {7, 6, 5, 4};
    assert_memory_equal(s.correct, c1, sizeof c1);
    assert_memory_equal(s.total, t1, sizeof t1);
    /* "the the the the" vs "the cat": "the" clipped to the reference's 1, p1 = 1/4; no 2-, 3- or
     * 4-gram matches, so exp smoothing gives them 1/(2·3), 1/(4·2), 1/(8·1); BP = 1 (4 > 2).
     * BLEU = (25 · 16.6667 · 12.5 · 12.5)^¼ = 15.973577606 */
    const char *h2[] = {"the the the the"};
    const char *const r2[1][8] = {{"the cat"}};
    b = bleu_of(&o, 1, h2, 1, r2, &s);
    assert_near(b.score, 15.97357760615681, 1e-9);
    assert_near(b.precision[1], 100.0 / 6, 1e-12);
    assert_near(b.precision[3], 12.5, 1e-12);
    /* "a b c d e" vs "a b c d f g": p = 4/5, 3/4, 2/3, 1/2; c = 5 < r = 6, BP = exp(1 − 6/5).
     * BLEU = 100 · e^−0.2 · (1/5)^¼ = 54.751825351 */
    const char *h3[] = {"a b c d e", "x y z w"};
    const char *const r3[1][8] = {{"a b c d f g", "x y z w"}};
    b = bleu_of(&o, 1, h3, 1, r3, NULL);
    assert_near(b.score, 54.751825350694524, 1e-9);
    assert_near(b.bp, exp(-0.2), 1e-15);
    /* with the exact pair "x y z w" added, the counts are summed, not the scores averaged:
     * p = 8/9, 6/7, 4/5, 2/3, c = 9, r = 10: 100 · e^(1 − 10/9) · (8/9 · 6/7 · 4/5 · 2/3)^¼ = 71.444682658 */
    b = bleu_of(&o, 2, h3, 1, r3, NULL);
    assert_near(b.score, 71.44468265841446, 1e-9);
    assert_near(b.ratio, 0.9, 1e-15);
    /* the reference length is the closest one, the shorter on a tie: 4 words against 3 and 5 */
    const char *h4[] = {"w x y z"};
    const char *const r4[2][8] = {{"a b c d e"}, {"a b c"}};
    bleu_of(&o, 1, h4, 2, r4, &s);
    assert_int_equal(s.ref_len, 3);
}

/* ---- chrF ---- */

static void test_chrf_matches_sacrebleu_cases(void **state) {
    (void)state;
    /* test_chrf.py, test_cases: beta 3, eps smoothing */
    tr_chrf_opts eps = {3, false, true};
    const struct {
        const char *h[2], *r[2];
        int n;
        double want;
    } ec[] = {
        {{"abcdefg"}, {"hijklmnop"}, 1, 0.0},
        {{"a"}, {"b"}, 1, 0.0},
        {{""}, {"b"}, 1, 0.0},
        {{""}, {"ref"}, 1, 0.0},
        {{""}, {"reference"}, 1, 0.0},
        {{"aa"}, {"ab"}, 1, 8.3333},
        {{"a", "b"}, {"a", "c"}, 2, 8.3333},
        {{"a"}, {"a"}, 1, 16.6667},
        {{"a b c"}, {"a b c"}, 1, 50.0},
        {{"a b c"}, {"abc"}, 1, 50.0},
        {{" risk assessment must be made of those who are qualified and expertise in the sector - these are the "
          "scientists ."},
         {"risk assessment has to be undertaken by those who are qualified and expert in that area - that is the "
          "scientists ."},
         1, 63.361730},
        {{" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. "},
         {"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."}, 1, 64.1302698},
        {{"Niemand hat die Absicht, eine Mauer zu errichten"}, {"Niemand hat die Absicht, eine Mauer zu errichten"}, 1,
         100.0},
    };
    for (size_t k = 0; k < sizeof ec / sizeof *ec; k++) assert_near(chrf_of(&eps, ec[k].n, ec[k].h, ec[k].r), ec[k].want, 1e-4);
    /* test_cases_effective_order: beta 3, sacreBLEU's default averaging */
    tr_chrf_opts eff = {3, false, false};
    const struct {
        const char *h[2], *r[2];
        int n;
        double want;
    } fc[] = {
        {{"a"}, {"a"}, 1, 100.0},     {{""}, {"reference"}, 1, 0.0},   {{"a b c"}, {"a b c"}, 1, 100.0},
        {{"a b c"}, {"abc"}, 1, 100.0}, {{""}, {"c"}, 1, 0.0},         {{"a", "b"}, {"a", "c"}, 2, 50.0},
        {{"aa"}, {"ab"}, 1, 25.0},
    };
    for (size_t k = 0; k < sizeof fc / sizeof *fc; k++) assert_near(chrf_of(&eff, fc[k].n, fc[k].h, fc[k].r), fc[k].want, 1e-4);
    /* test_cases_keep_whitespace: beta 3, whitespace kept */
    tr_chrf_opts ws = {3, true, false};
    assert_near(chrf_of(&ws, 1, (const char *[]){"Die Beziehung zwischen Obama und Netanjahu ist nicht gerade freundlich."},
                        (const char *[]){"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich."}),
                67.3481606, 1e-4);
    assert_near(chrf_of(&ws, 1,
                        (const char *[]){"risk assessment must be made of those who are qualified and expertise in the "
                                         "sector - these are the scientists ."},
                        (const char *[]){"risk assessment has to be undertaken by those who are qualified and expert in "
                                         "that area - that is the scientists ."}),
                65.2414427, 1e-4);
    /* test_sentence_level_chrf: chrF2 with eps smoothing, Czech */
    tr_chrf_opts s2 = {2, false, true};
    assert_near(chrf_of(&s2, 1, (const char *[]){"Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře."},
                        (const char *[]){"Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře."}),
                39.14078509, 1e-4);
    assert_near(chrf_of(&s2, 1, (const char *[]){"Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři."},
                        (const char *[]){"A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři."}),
                31.22557079, 1e-4);
    assert_near(chrf_of(&s2, 1, (const char *[]){"Lapali po dechu, jejich životy skončily dřív, než skutečně začaly."},
                        (const char *[]){"Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, "
                                         "připomněli."}),
                57.15704367, 1e-4);
}

static void test_chrf_worked_examples(void **state) {
    (void)state;
    tr_chrf_opts d = TR_CHRF_DEFAULT;
    /* "abc" vs "abd": 1-grams a b c / a b d, 2 match (P = R = 2/3); 2-grams ab bc / ab bd, 1 (1/2);
     * 3-grams abc / abd, 0; no 4- to 6-grams on either side, so 3 effective orders:
     * P = R = (2/3 + 1/2 + 0)/3 = 7/18 and F2 = 5PR / (4P + R) = 7/18 = 38.888... */
    assert_near(chrf_of(&d, 1, (const char *[]){"abc"}, (const char *[]){"abd"}), 100.0 * 7 / 18, 1e-12);
    /* with eps smoothing the six F-scores are averaged: (2/3 + 1/2 + 0 + 3 · 1e-16)/6 = 7/36 */
    tr_chrf_opts e = {2, false, true};
    assert_near(chrf_of(&e, 1, (const char *[]){"abc"}, (const char *[]){"abd"}), 100.0 * 7 / 36, 1e-12);
    /* whitespace is removed, any kind: "a\tb c" is "abc" */
    assert_near(chrf_of(&d, 1, (const char *[]){"a\tb c"}, (const char *[]){"a b\xc2\xa0" "d"}), 100.0 * 7 / 18, 1e-12);
    /* characters are code points: "é" (2 bytes) vs "e" shares nothing, "éa" vs "éb" shares é */
    assert_near(chrf_of(&d, 1, (const char *[]){"é"}, (const char *[]){"e"}), 0.0, 1e-12);
    assert_near(chrf_of(&d, 1, (const char *[]){"éa"}, (const char *[]){"éb"}), 25.0, 1e-12);
    /* corpus level: "a b c d e" / "a b c d f g" and "x y z w" / itself, counts summed per order:
     * hyp 9 7 5 3 1 0, ref 10 8 6 4 2 1, match 8 6 4 2 0 0; orders 1-5 effective:
     * P = (8/9 + 6/7 + 4/5 + 2/3 + 0)/5, R = (8/10 + 6/8 + 4/6 + 2/4 + 0)/5, F2 = 56.064576430 */
    assert_near(chrf_of(&d, 2, (const char *[]){"a b c d e", "x y z w"}, (const char *[]){"a b c d f g", "x y z w"}),
                56.06457642960319, 1e-9);
    /* several references: the one with the best F-score counts */
    tr_chrf_stats s = {0};
    const char *refs[2] = {"xyz", "abd"};
    assert_int_equal(tr_chrf_add(W, &s, &d, "abc", refs, 2), 0);
    assert_near(tr_chrf_compute(&s, &d), 100.0 * 7 / 18, 1e-12);
}

/* ---- signatures and lines ---- */

static void test_signatures_and_lines_are_sacrebleus(void **state) {
    (void)state;
    char buf[512];
    tr_bleu_opts o = {0};
    tr_bleu_signature(buf, sizeof buf, &o, 1);
    assert_string_equal(buf, "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" TR_SACREBLEU_VERSION);
    tr_bleu_opts f = {TR_BLEU_TOK_NONE, TR_SMOOTH_FLOOR, -1, true};
    tr_bleu_signature(buf, sizeof buf, &f, -1);
    assert_string_equal(buf, "nrefs:var|case:mixed|eff:yes|tok:none|smooth:floor[0.10]|version:" TR_SACREBLEU_VERSION);
    tr_chrf_opts c = TR_CHRF_DEFAULT;
    tr_chrf_signature(buf, sizeof buf, &c, 1);
    assert_string_equal(buf, "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" TR_SACREBLEU_VERSION);
    /* the text format: score with width decimals, precisions .1f, BP and ratio .3f */
    tr_bleu_stats s = {{8, 6, 4, 2}, {9, 7, 5, 3}, 9, 10};
    tr_bleu_result r = tr_bleu_compute(&s, &o);
    tr_bleu_format(buf, sizeof buf, &r, &o, 1, 1);
    assert_string_equal(buf, "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" TR_SACREBLEU_VERSION
                             " = 71.4 88.9/85.7/80.0/66.7 (BP = 0.895 ratio = 0.900 hyp_len = 9 ref_len = 10)");
    tr_chrf_format(buf, sizeof buf, 56.06457642960319, &c, 1, 2);
    assert_string_equal(buf, "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" TR_SACREBLEU_VERSION
                             " = 56.06");
}

/* ---- the score command ---- */

static int cli_setup(void **state) {
    (void)state;
    return work_setup(state) || tt_begin("translate-metrics");
}

static int cli_teardown(void **state) {
    tt_end();
    return work_teardown(state);
}

/* the worked examples' corpus: BLEU 71.44468 (above), chrF2 56.06458, one exact line of two */
static const char *SCORE_OUT =
    "  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" TR_SACREBLEU_VERSION
    " = 71.4 88.9/85.7/80.0/66.7 (BP = 0.895 ratio = 0.900 hyp_len = 9 ref_len = 10)\n"
    "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" TR_SACREBLEU_VERSION " = 56.1\n"
    "                                                      exact match = 50.0 (1 of 2 lines)\n";

static void test_score_prints_sacrebleu_lines_for_a_file_or_stdin(void **state) {
    (void)state;
    char hyp[300], ref[300];
    snprintf(hyp, sizeof hyp, "%s", tt_in_dir("hyp.txt"));
    snprintf(ref, sizeof ref, "%s", tt_in_dir("ref.txt"));
    /* trailing whitespace and a CRLF ending are stripped, as sacreBLEU strips them */
    tt_write_text(hyp, "a b c d e  \nx y z w\r\n");
    tt_write_text(ref, "a b c d f g\nx y z w"); /* no final newline: still two lines */
    assert_status(RUN("score", "--hyp", hyp, "--ref", ref), 0);
    assert_string_equal(tt.out, SCORE_OUT);
    assert_string_equal(tt.err, "");
    assert_status(RUN_STDIN("a b c d e\nx y z w\n", "score", "--ref", ref), 0);
    assert_string_equal(tt.out, SCORE_OUT);
    assert_status(RUN_STDIN("a b c d e\nx y z w\n", "score", "--ref", ref, "--hyp", "-", "--width", "4"), 0);
    assert_contains(tt.out, " = 71.4447 88.9/85.7/80.0/66.7 (BP = 0.895");
    assert_contains(tt.out, " = 56.0646\n");
    assert_contains(tt.out, "exact match = 50.0000 (1 of 2 lines)\n");
}

static void test_score_refuses_what_sacrebleu_refuses(void **state) {
    (void)state;
    char ref[300], three[300], bad[300], blank[300];
    snprintf(ref, sizeof ref, "%s", tt_in_dir("ref2.txt"));
    snprintf(three, sizeof three, "%s", tt_in_dir("three.txt"));
    snprintf(bad, sizeof bad, "%s", tt_in_dir("bad.txt"));
    snprintf(blank, sizeof blank, "%s", tt_in_dir("blank.txt"));
    tt_write_text(ref, "one\ntwo\n");
    tt_write_text(three, "one\ntwo\nthree\n");
    tt_write_text(bad, "one\nt\xffo\n");
    tt_write_text(blank, "one\n \t\n");
    assert_status(RUN("score", "--hyp", three, "--ref", ref), 1);
    assert_contains(tt.err, "has 3 lines and");
    assert_contains(tt.err, "has 2: they must pair line by line");
    assert_string_equal(tt.out, "");
    assert_status(RUN("score", "--hyp", tt_in_dir("missing.txt"), "--ref", ref), 1);
    assert_contains(tt.err, "cannot open hypothesis file");
    assert_contains(tt.err, "No such file or directory");
    assert_status(RUN("score", "--hyp", bad, "--ref", ref), 1);
    assert_contains(tt.err, "bad.txt:2: invalid UTF-8 at byte 2 (0xFF)");
    tt_write_file(bad, "one\nt\0o\n", 7);
    assert_status(RUN("score", "--hyp", bad, "--ref", ref), 1);
    assert_contains(tt.err, "bad.txt:2: invalid UTF-8 at byte 2 (0x00), a NUL byte");
    assert_status(RUN("score", "--hyp", ref, "--ref", blank), 1);
    assert_contains(tt.err, "blank.txt:2: empty reference");
    /* usage errors: exit 2 and a pointer to --help */
    assert_status(RUN("score", "--hyp", ref), 2);
    assert_contains(tt.err, "--ref FILE is required");
    assert_status(RUN("score", "--ref", ref, "--width", "-1"), 2);
    assert_status(RUN("score", "--ref", ref, "--hpy", ref), 2);
    assert_contains(tt.err, "did you mean --hyp?");
    assert_status(RUN("score", "--ref", ref, "extra"), 2);
    assert_contains(tt.err, "unexpected argument 'extra'");
    for (int k = 0; k < 2; k++) {
        assert_status(k ? RUN("score", "-h") : RUN("score", "--help"), 0);
        assert_contains(tt.out, "usage: attograd-translate score --ref FILE [--hyp FILE]");
        assert_contains(tt.out, "sacreBLEU " TR_SACREBLEU_VERSION);
    }
    assert_status(RUN("--help"), 0);
    assert_contains(tt.out, "  score ");
}

/* A hypothesis of words words, "the" but every 7th "cat", against "the" repeated (the worst
 * case for a table keyed on n-grams: few distinct ones, many occurrences); the least of three
 * timings of scoring it. */
static double score_time(size_t words) {
    char *h = malloc(words * 4 + 1), *r = malloc(words * 4 + 1);
    for (size_t i = 0; i < words; i++) {
        memcpy(h + 4 * i, i % 7 ? "the " : "cat ", 4);
        memcpy(r + 4 * i, "the ", 4);
    }
    h[words * 4] = r[words * 4] = 0;
    double best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        tr_scores s;
        assert_int_equal(tr_scores_init(&s), 0);
        const char *refs[1] = {r};
        double t0 = tt_now();
        assert_int_equal(tr_scores_add(&s, h, refs, 1, -1), 0);
        double dt = tt_now() - t0;
        best = dt < best ? dt : best;
        /* every hypothesis "the" matches (the reference has as many), no "cat" does */
        int64_t cats = (int64_t)((words + 6) / 7);
        assert_int_equal(s.bleu.correct[0], (int64_t)words - cats);
        assert_int_equal(s.bleu.total[0], (int64_t)words);
        assert_int_equal(s.chrf.hyp[0], 3 * (int64_t)words);
        tr_scores_free(&s);
    }
    free(h);
    free(r);
    return best;
}

/* Counting is linear in the text: ten times the words take about ten times as long (a
 * pairwise count would take a hundred times, over a second), with room for a busy machine and
 * the sanitizers. */
static void test_long_segments_cost_linear_time(void **state) {
    (void)state;
    double short_t = score_time(1000), long_t = score_time(10000);
    if (!(long_t < 30 * short_t + 0.5))
        fail_msg("1000 words in %.4f s, 10000 in %.4f s: not linear", short_t, long_t);
}

int main(void) {
    const struct CMUnitTest metrics[] = {
        cmocka_unit_test(test_13a_tokenizer_applies_mteval_rules),
        cmocka_unit_test(test_bleu_matches_sacrebleu_corpus_cases),
        cmocka_unit_test(test_bleu_matches_sacrebleu_raw_and_effective_order_cases),
        cmocka_unit_test(test_bleu_counts_match_sacrebleu_statistics_case),
        cmocka_unit_test(test_bleu_from_statistics_matches_sacrebleu_scoring_cases),
        cmocka_unit_test(test_sentence_bleu_matches_sacrebleu_smoothing_cases),
        cmocka_unit_test(test_bleu_worked_examples),
        cmocka_unit_test(test_chrf_matches_sacrebleu_cases),
        cmocka_unit_test(test_chrf_worked_examples),
        cmocka_unit_test(test_signatures_and_lines_are_sacrebleus),
        cmocka_unit_test(test_long_segments_cost_linear_time),
    };
    const struct CMUnitTest cli[] = {
        cmocka_unit_test(test_score_prints_sacrebleu_lines_for_a_file_or_stdin),
        cmocka_unit_test(test_score_refuses_what_sacrebleu_refuses),
    };
    int failed = cmocka_run_group_tests_name("metrics", metrics, work_setup, work_teardown);
    return failed + cmocka_run_group_tests_name("score", cli, cli_setup, cli_teardown);
}
