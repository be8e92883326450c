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

/* The training curves: train and dev loss and dev exact match per evaluation. */
typedef struct {
    int n, cap;
    double *step, *train_loss, *dev_loss, *dev_exact;
} curves;

void curves_add(curves *c, double step, double tl, double dl, double acc);
/* as an SVG at path (a failure is reported on stderr: the run goes on) */
void curves_write(const curves *c, const char *path);
void curves_free(curves *c);

#endif
