/* attograd-translate train's evaluation and curves (train_eval.c), for train.c. */
#ifndef TRANSLATE_TRAIN_INTERNAL_H
#define TRANSLATE_TRAIN_INTERNAL_H
#include <stdio.h>

#include "translate.h"

typedef struct {
    double loss, exact, bleu;
    int64_t sentences;
} eval_result;

/* Teacher-forced loss, greedy (beam <= 1) or beam exact match and BLEU of m on up to max_pairs
 * pairs of d (0: all), in the current arena (rewound after); prints `samples` translations to
 * f. */
eval_result evaluate(model *m, const tr_dataset *d, const tr_vocab *src_v, const tr_vocab *tgt_v, tr_tok_mode mode,
                     int beam, int64_t max_pairs, int samples, FILE *f);

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
