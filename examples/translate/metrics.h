/* attograd-translate support: sacreBLEU's corpus BLEU and chrF on detokenized text, and exact
 * match.
 *
 * The numbers are those of sacreBLEU 2.x (Post, 2018), the version of TR_SACREBLEU_VERSION,
 * with its defaults, so that they compare with published scores:
 * - BLEU: each line is stripped of trailing whitespace and tokenized by mteval-v13a's rules
 *   (sacreBLEU's "13a" tokenizer: tr_tokenize_13a), then word n-grams up to 4 are counted and
 *   clipped by the reference counts (the largest over several references), summed over the
 *   corpus; the brevity penalty is exp(1 − r/c) for c < r (0 when c = 0), r being the
 *   reference length closest to the hypothesis' (the shorter on a tie). Smoothing 'exp' (NIST,
 *   mteval-v13a): the k-th order without a match gets precision 1 / (2^k · total). No match at
 *   all gives 0; an order without any hypothesis n-gram gives 0 unless effective_order.
 * - chrF2: character n-grams up to 6 of each line with all whitespace removed, no word
 *   n-grams, β = 2; sacreBLEU's default averaging: precision and recall are averaged over the
 *   orders where both the hypothesis and the reference have n-grams ("eff:yes"), or with
 *   eps_smoothing, the F-scores of all orders are averaged with 1e-16 standing in for an
 *   undefined ratio (chrF++.py's way). Characters are Unicode code points.
 * Scores are in [0, 100] like sacreBLEU's. Every count is linear in the text length (hash
 * tables, no pairwise comparison). Texts are UTF-8; an invalid byte counts as a character of
 * its own. */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* the sacreBLEU release whose BLEU and chrF these reproduce, as its signatures name it */
#define TR_SACREBLEU_VERSION "2.6.0"
#define TR_BLEU_ORDER 4
#define TR_CHRF_ORDER 6

typedef enum { TR_BLEU_TOK_13A, TR_BLEU_TOK_NONE } tr_bleu_tok;
typedef enum { TR_SMOOTH_EXP, TR_SMOOTH_FLOOR, TR_SMOOTH_ADD_K, TR_SMOOTH_NONE } tr_bleu_smooth;

/* BLEU's settings; all-zero is sacreBLEU's default (13a, exp, corpus-level order 4) */
typedef struct {
    tr_bleu_tok tok;
    tr_bleu_smooth smooth;
    double smooth_value;  /* floor's and add-k's value; < 0: sacreBLEU's default (0.1, 1) */
    bool effective_order; /* average only the orders the hypotheses have n-grams of (sentence BLEU) */
} tr_bleu_opts;

/* chrF's settings; TR_CHRF_DEFAULT is sacreBLEU's chrF2 */
typedef struct {
    double beta;
    bool whitespace;    /* keep whitespace characters in the n-grams */
    bool eps_smoothing; /* average F-scores over all orders instead of the effective order */
} tr_chrf_opts;
#define TR_CHRF_DEFAULT ((tr_chrf_opts){2.0, false, false})

/* sufficient statistics, summed over a corpus (start from a zeroed struct) */
typedef struct {
    int64_t correct[TR_BLEU_ORDER], total[TR_BLEU_ORDER]; /* clipped matches, hypothesis n-grams */
    int64_t hyp_len, ref_len;                              /* words (closest reference length) */
} tr_bleu_stats;
typedef struct {
    int64_t hyp[TR_CHRF_ORDER], ref[TR_CHRF_ORDER], match[TR_CHRF_ORDER];
} tr_chrf_stats;

typedef struct {
    double score;                    /* 0..100 */
    double precision[TR_BLEU_ORDER]; /* percent, smoothed */
    double bp, ratio;                /* brevity penalty; hyp_len / ref_len (0 without a reference word) */
    int64_t hyp_len, ref_len;
} tr_bleu_result;

/* Scratch memory for counting (hash tables, token buffers), reused from line to line. */
typedef struct tr_metrics_work tr_metrics_work;
tr_metrics_work *tr_metrics_work_new(void); /* NULL when out of memory */
void tr_metrics_work_free(tr_metrics_work *w);

/* the length of s without its trailing whitespace (Python's str.rstrip(): Unicode whitespace) */
size_t tr_rstrip_len(const char *s);

/* line as sacreBLEU's 13a tokenizer writes it (tokens joined by single spaces, no space at
 * either end); points into w, valid until w's next use; NULL when out of memory */
const char *tr_tokenize_13a(tr_metrics_work *w, const char *line);

/* Add one segment: hypothesis hyp against nrefs >= 1 references. -1 when out of memory (s
 * unchanged), else 0. */
int tr_bleu_add(tr_metrics_work *w, tr_bleu_stats *s, const tr_bleu_opts *o, const char *hyp,
                const char *const *refs, int nrefs);
/* chrF keeps, of several references, the statistics of the one with the best F-score */
int tr_chrf_add(tr_metrics_work *w, tr_chrf_stats *s, const tr_chrf_opts *o, const char *hyp,
                const char *const *refs, int nrefs);
tr_bleu_result tr_bleu_compute(const tr_bleu_stats *s, const tr_bleu_opts *o);
double tr_chrf_compute(const tr_chrf_stats *s, const tr_chrf_opts *o);

/* sacreBLEU's signatures, "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0" and
 * "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0" (nrefs < 0: "var");
 * snprintf's return */
int tr_bleu_signature(char *buf, size_t n, const tr_bleu_opts *o, int nrefs);
int tr_chrf_signature(char *buf, size_t n, const tr_chrf_opts *o, int nrefs);
/* sacreBLEU's text lines, scores with width decimals:
 * "BLEU|<signature> = 35.1 66.7/41.2/28.6/18.2 (BP = 1.000 ratio = 1.000 hyp_len = 12 ref_len = 12)"
 * and "chrF2|<signature> = 52.3" */
int tr_bleu_format(char *buf, size_t n, const tr_bleu_result *r, const tr_bleu_opts *o, int nrefs, int width);
int tr_chrf_format(char *buf, size_t n, double score, const tr_chrf_opts *o, int nrefs, int width);

/* ---- the program's metrics: default BLEU and chrF2 with exact match ---- */
typedef struct {
    tr_bleu_stats bleu;
    tr_chrf_stats chrf;
    int64_t sentences, exact;
    int nrefs; /* references per segment (-1: it varied) */
    tr_metrics_work *work;
} tr_scores;

/* -1 when out of memory */
int tr_scores_init(tr_scores *s);
/* Add a segment. exact: whether it counts as an exact match as the caller decides (1 or 0), or
 * -1 to compare the texts (trailing whitespace ignored, equal to any reference). -1 when out of
 * memory (nothing added). */
int tr_scores_add(tr_scores *s, const char *hyp, const char *const *refs, int nrefs, int exact);
double tr_scores_bleu(const tr_scores *s);  /* 0..100 */
double tr_scores_chrf(const tr_scores *s);  /* 0..100 */
double tr_scores_exact(const tr_scores *s); /* fraction of segments, 0 when none */
void tr_scores_free(tr_scores *s);
/* the BLEU and chrF2 lines of the counts (and extra, if not NULL, a line "name = value ..."),
 * aligned on '=' as sacreBLEU aligns them */
void tr_metrics_print(FILE *f, const tr_bleu_stats *b, const tr_chrf_stats *c, int nrefs, int width,
                      const char *extra);
/* "BLEU and chrF2 are sacreBLEU 2.6.0's on detokenized text (13a, exp smoothing; ...)" */
const char *tr_metrics_note(void);

#endif
