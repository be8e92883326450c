/* Corpus BLEU-4 and exact match over id or string sequences. */
#include "metrics.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* a sentence of ids or of strings, so one counting routine serves both */
typedef struct {
    const int64_t *ids;
    const char *const *toks;
    int len;
} seq;

static bool gram_eq(seq a, int i, seq b, int j, int n) {
    for (int k = 0; k < n; k++)
        if (a.ids ? a.ids[i + k] != b.ids[j + k] : strcmp(a.toks[i + k], b.toks[j + k]) != 0) return false;
    return true;
}

static int occurrences(seq a, int i, seq in, int n) {
    int c = 0;
    for (int j = 0; j + n <= in.len; j++) c += gram_eq(a, i, in, j, n);
    return c;
}

/* Quadratic in the sentence length, which is fine for sentences (tens of tokens) and needs no
 * memory; each distinct hypothesis n-gram is counted at its first occurrence. */
static void add(tr_bleu_stats *s, seq h, seq r) {
    for (int n = 1; n <= 4; n++) {
        for (int i = 0; i + n <= h.len; i++) {
            bool first = true;
            for (int j = 0; j < i && first; j++) first = !gram_eq(h, i, h, j, n);
            if (!first) continue;
            int ch = occurrences(h, i, h, n), cr = occurrences(h, i, r, n);
            s->match[n - 1] += ch < cr ? ch : cr;
        }
        if (h.len >= n) s->total[n - 1] += h.len - n + 1;
    }
    s->hyp_len += h.len;
    s->ref_len += r.len;
    s->sentences++;
    s->exact += h.len == r.len && (h.len == 0 || gram_eq(h, 0, r, 0, h.len));
}

void tr_bleu_add_ids(tr_bleu_stats *s, const int64_t *hyp, int hyp_len, const int64_t *ref, int ref_len) {
    add(s, (seq){hyp, NULL, hyp_len}, (seq){ref, NULL, ref_len});
}

void tr_bleu_add_tokens(tr_bleu_stats *s, const char *const *hyp, int hyp_len, const char *const *ref, int ref_len) {
    add(s, (seq){NULL, hyp, hyp_len}, (seq){NULL, ref, ref_len});
}

double tr_bleu_score(const tr_bleu_stats *s) {
    double log_p = 0;
    for (int n = 0; n < 4; n++) {
        if (s->match[n] == 0 || s->total[n] == 0) return 0;
        log_p += log((double)s->match[n] / (double)s->total[n]) / 4;
    }
    double bp = s->hyp_len > s->ref_len ? 1 : exp(1 - (double)s->ref_len / (double)s->hyp_len);
    return bp * exp(log_p);
}

double tr_exact_match(const tr_bleu_stats *s) { return s->sentences ? (double)s->exact / (double)s->sentences : 0; }

double tr_corpus_bleu_ids(int n, const int64_t *const *hyp, const int *hyp_len, const int64_t *const *ref,
                          const int *ref_len) {
    tr_bleu_stats s = {0};
    for (int i = 0; i < n; i++) tr_bleu_add_ids(&s, hyp[i], hyp_len[i], ref[i], ref_len[i]);
    return tr_bleu_score(&s);
}
