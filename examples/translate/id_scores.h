/* attograd-translate support: scoring translations given as ids (a model's output) against
 * references: sacreBLEU's BLEU and chrF of the texts, and exact match. */
#ifndef TR_ID_SCORES_H
#define TR_ID_SCORES_H

#include <stdbool.h>

#include "data.h"
#include "metrics.h"

/* sacreBLEU's metrics of translations, their ids read back as text; train's evaluations and eval
 * share it */
typedef struct {
    tr_scores s;
    char *hyp, *ref; /* the last pair's texts */
    size_t hyp_cap, ref_cap;
} tr_id_scores;
bool tr_id_scores_init(tr_id_scores *e);
/* Add hyp (hn ids) against ref_text, or when it is NULL the rn reference ids read back as text.
 * An exact match is the reference's ids, or its text spelt with other pieces ("zwei|tausend" for
 * "zweitausend"); a hypothesis holding <unk> matches by ids only, since its text shows a
 * placeholder (" ⁇ ", "<unk>") where a word was. False when out of memory. */
bool tr_id_scores_add(tr_id_scores *e, const tr_vocab *tgt, tr_tok_mode mode, const int64_t *hyp, int hn,
                      const int64_t *ref, int rn, const char *ref_text);
void tr_id_scores_free(tr_id_scores *e);

#endif
