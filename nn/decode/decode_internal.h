/* What decode.c (the step loop) and search.c (choosing each sentence's next tokens) share. */
#ifndef AG_NN_DECODE_INTERNAL_H
#define AG_NN_DECODE_INTERNAL_H
#include "decode.h"

/* a hypothesis: its log-probability, tokens generated (<eos> included), finished */
typedef struct {
    double score;
    int64_t len;
    bool done;
} ag__hyp;

/* The hypotheses of a batch: K slots per sentence, slot b·K + k; each step t writes, for every
 * slot j, the token it appended (pad_id once finished) and the slot of the step before it
 * continues, so the tokens are read back by following parents from the last step. */
typedef struct {
    const ag_decode_config *cfg;
    int64_t B, K, V, steps; /* steps: the most any sentence takes, so history rows 0..steps */
    int64_t *limit;         /* (B) tokens a sentence may take */
    ag__hyp *h, *nh;        /* (B·K) this step's and the next */
    int64_t *row;           /* (B·K) the row of the last step's scores a slot continues, -1: none */
    int64_t *nrow;
    int64_t *tok, *par;     /* ((steps+1)·B·K) per step: token appended and parent slot */
    ag_rng rng;             /* sampling: the stream at the call's start */
    void *scratch;          /* the search's own (beam candidates) */
} ag__search;

/* Sentence b's slots at step t into s->nh, s->nrow and the step's tok/par rows, from lp ((R,V)
 * log-probabilities; row s->row[slot] is the slot's) or, when over (past its limit) or none
 * of its slots is live, carrying every hypothesis on as finished. */
void ag__search_greedy(ag__search *s, int64_t b, int64_t t, bool over, const double *lp);
void ag__search_beam(ag__search *s, int64_t b, int64_t t, bool over, const double *lp);
void ag__search_sample(ag__search *s, int64_t b, int64_t t, bool over, const double *lp);

#endif
