/* attograd-translate support: corpus BLEU-4 and exact match.
 *
 * BLEU as in Papineni et al. (2002), one reference per sentence, no smoothing: clipped n-gram
 * matches and hypothesis n-gram counts for n = 1..4 are summed over the whole corpus, the score
 * is BP · exp(¼ Σ log p_n) with p_n = matches_n / total_n and the brevity penalty
 * BP = exp(1 − r/c) when the hypothesis length c ≤ the reference length r (else 1). The score is
 * 0 when any p_n is 0. Scores are fractions in [0, 1] (multiply by 100 to print the usual way).
 * Sentences are passed already trimmed (no <bos>, <eos> or <pad>; see tr_ids_len). */
#ifndef TR_METRICS_H
#define TR_METRICS_H

#include <stdint.h>

typedef struct {
    int64_t match[4], total[4]; /* clipped matches and hypothesis n-grams, n = 1..4 */
    int64_t hyp_len, ref_len;   /* c and r */
    int64_t sentences, exact;   /* pairs added, and those with hypothesis == reference */
} tr_bleu_stats;

/* Add one (hypothesis, reference) pair to s (start from a zeroed struct). */
void tr_bleu_add_ids(tr_bleu_stats *s, const int64_t *hyp, int hyp_len, const int64_t *ref, int ref_len);
void tr_bleu_add_tokens(tr_bleu_stats *s, const char *const *hyp, int hyp_len, const char *const *ref, int ref_len);
/* corpus BLEU-4 of everything added, in [0, 1] */
double tr_bleu_score(const tr_bleu_stats *s);
/* fraction of pairs whose hypothesis equals the reference (0 when none were added) */
double tr_exact_match(const tr_bleu_stats *s);
/* corpus BLEU-4 of n pairs of id sequences */
double tr_corpus_bleu_ids(int n, const int64_t *const *hyp, const int *hyp_len, const int64_t *const *ref,
                          const int *ref_len);

#endif
