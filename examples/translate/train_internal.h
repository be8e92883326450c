/* attograd-translate train's evaluation and curves (train_eval.c), for train.c. */
#ifndef TRANSLATE_TRAIN_INTERNAL_H
#define TRANSLATE_TRAIN_INTERNAL_H
#include <stdio.h>

#include "metrics.h"
#include "translate.h"

typedef struct {
    double loss, exact; /* exact: the fraction of translations whose ids are the reference's */
    double bleu, chrf;  /* sacreBLEU's BLEU and chrF2 on the detokenized text, 0..100 */
    int64_t sentences;
    tr_bleu_stats bleu_stats; /* their counts, for tr_metrics_print */
    tr_chrf_stats chrf_stats;
} eval_result;

/* Teacher-forced loss, greedy (beam <= 1) or beam exact match, BLEU and chrF of m on up to
 * max_pairs pairs of d (0: all), in the current arena (rewound after); prints `samples`
 * translations to f. The references are text's target sentences, the corpus d was built from
 * (matched by line), or when text is NULL, d's target ids read back as text. */
eval_result evaluate(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                     const tr_vocab *tgt_v, tr_tok_mode mode, int beam, int64_t max_pairs, int samples, FILE *f);

/* train --test's report on stdout: evaluate on d, the pairs of text (the test corpus) the
 * model's positions hold (limit tokens); the others count as wrong translations (not exact,
 * empty hypotheses for BLEU and chrF) */
void eval_report_test(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                      const tr_vocab *tgt_v, tr_tok_mode mode, int samples, int limit);

/* sacreBLEU's metrics of translations, their ids read back as text (evaluate and eval share it) */
typedef struct {
    tr_scores s;
    char *hyp, *ref; /* the last pair's texts */
    size_t hyp_cap, ref_cap;
} eval_scorer;
bool eval_scorer_init(eval_scorer *e);
/* Add hyp (hn ids) against ref_text, or when it is NULL the rn reference ids read back as text;
 * exact match compares the ids ("<unk>" as text would read back as three tokens). False when
 * out of memory. */
bool eval_scorer_add(eval_scorer *e, const tr_vocab *tgt, tr_tok_mode mode, const int64_t *hyp, int hn,
                     const int64_t *ref, int rn, const char *ref_text);
void eval_scorer_free(eval_scorer *e);

/* The teacher-forced cross entropy per target token (no label smoothing) of m on d, as
 * evaluate computes it, alone; in the current arena (rewound after). NaN without tokens. */
double evaluate_loss(model *m, const tr_dataset *d);

/* The training curves: the train loss at every logged step (train_step, n_train points), dev
 * loss and dev exact match per evaluation (step, n points). */
typedef struct {
    int n, cap, n_train, cap_train;
    double *step, *dev_loss, *dev_exact, *train_step, *train_loss;
} curves;

/* the steps of a run of total steps at which the train loss is logged: every curves_every(total)
 * steps (about 100 points a run, at most every 100 steps, the progress log's interval), and at
 * each evaluation */
int64_t curves_every(int64_t total);
void curves_add_train(curves *c, double step, double loss);
void curves_add(curves *c, double step, double dl, double acc);
/* as an SVG at path (a failure is reported on stderr: the run goes on) */
void curves_write(const curves *c, const char *path);
void curves_free(curves *c);

#endif
