/* attograd-translate: sentences decoded with nn/decode into text, and the lines translate prints
 * for them (the translation; with --scores its score; with --n-best Marian's n-best lines). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "textio.h"
#include "translate.h"

ag_arena *translate_arena(void) {
    static ag_arena *arena;
    if (!arena) arena = ag_arena_new(1 << 20);
    return arena;
}

ag_tensor *translate_source(const trained *t, const char *const *in, int B) {
    /* the longest sentence as the model reads it (at most max_len - 1 ids and <eos>) sizes the
     * batch, not max_len: a model of a large --max-len reads short sentences cheaply */
    int64_t L = t->max_len, S = 1;
    for (int b = 0; b < B; b++) {
        int64_t len = tr_vocab_encode(&t->src, in[b], t->mode, NULL, 0);
        if (len > L - 1) len = L - 1;
        if (len + 1 > S) S = len + 1;
    }
    ag_tensor *s = ag_zeros(AG_I64, AG_SHAPE(B, S));
    for (int b = 0; b < B; b++) {
        int64_t *row = (int64_t *)s->data + b * S;
        int len = tr_vocab_encode(&t->src, in[b], t->mode, row, (int)S - 1);
        row[len < S - 1 ? len : S - 1] = TR_EOS;
    }
    return s;
}

/* n ids as translate prints them: one printable line, malloc'd (NULL: out of memory) */
static char *ids_text(const trained *t, const int64_t *ids, int n) {
    /* the text may hold any byte a byte piece decodes to, NUL too: its length counts */
    size_t len = tr_vocab_decode(&t->tgt, ids, n, t->mode, NULL, 0);
    char *raw = malloc(len + 1), *out = NULL;
    if (raw) tr_vocab_decode(&t->tgt, ids, n, t->mode, raw, len + 1);
    if (raw) out = tr_text_clean_dup(raw, len, TR_TEXT_LINE);
    free(raw);
    return out;
}

bool translate_texts(trained *t, const char *const *in, int n, const ag_decode_config *dc, int batch, char **text,
                     double *score) {
    int64_t nb = dc->n_best;
    bool ok = true;
    ag_arena *arena = translate_arena(), *prev = ag_arena_use(arena);
    for (int at = 0; ok && at < n; at += batch) {
        int B = n - at < batch ? n - at : batch;
        ag_decode_result r;
        ok = model_decode(t->m, translate_source(t, in + at, B), dc, &r);
        for (int64_t o = 0; ok && o < B * nb; o++) {
            int64_t i = (int64_t)at * nb + o;
            text[i] = ids_text(t, r.tokens + o * r.width, (int)r.lengths[o]);
            if (score) score[i] = r.norm_scores[o];
            ok = text[i] != NULL;
        }
        ag_decode_result_free(&r);
        ag_arena_reset(arena);
    }
    ag_arena_use(prev);
    return ok;
}

void translate_print_hyp(FILE *f, const char *text, double score, int64_t id, bool nbest, bool scores) {
    if (nbest) fprintf(f, "%lld ||| %s ||| %.6f\n", (long long)id, text, score);
    else if (scores) fprintf(f, "%s ||| %.6f\n", text, score);
    else fprintf(f, "%s\n", text);
}

bool translate_decode_config(ag_decode_config *dc, int64_t beam, double alpha, const char *norm, int64_t n_best,
                             double ratio, char *msg, size_t msgsize) {
    /* an n-best list of N needs N beams */
    *dc = model_decode_config(n_best > beam ? n_best : beam, alpha);
    dc->max_len_a = ratio;
    dc->n_best = n_best > 0 ? n_best : 1;
    if (norm && strcmp(norm, "gnmt") != 0 && strcmp(norm, "marian") != 0) {
        snprintf(msg, msgsize, "--length-norm '%s': expected gnmt or marian", norm);
        return false;
    }
    dc->length_norm = norm && strcmp(norm, "marian") == 0 ? AG_LENGTH_MARIAN : AG_LENGTH_GNMT;
    return true;
}
