/* attograd-translate support: translations as ids scored against references (id_scores.h). */
#include <stdlib.h>
#include <string.h>

#include "id_scores.h"

bool tr_id_scores_init(tr_id_scores *e) {
    memset(e, 0, sizeof *e);
    return tr_scores_init(&e->s) == 0;
}

void tr_id_scores_free(tr_id_scores *e) {
    tr_scores_free(&e->s);
    free(e->hyp);
    free(e->ref);
    memset(e, 0, sizeof *e);
}

/* the text of n ids into *buf (grown as needed); false when out of memory */
static bool decode_into(const tr_vocab *v, const int64_t *ids, int n, tr_tok_mode mode, char **buf, size_t *cap) {
    size_t need = tr_vocab_decode(v, ids, n, mode, NULL, 0) + 1;
    if (need > *cap) {
        char *b = realloc(*buf, need);
        if (!b) return false;
        *buf = b;
        *cap = need;
    }
    tr_vocab_decode(v, ids, n, mode, *buf, *cap);
    return true;
}

bool tr_id_scores_add(tr_id_scores *e, const tr_vocab *tgt, tr_tok_mode mode, const int64_t *hyp, int hn,
                      const int64_t *ref, int rn, const char *ref_text) {
    if (!decode_into(tgt, hyp, hn, mode, &e->hyp, &e->hyp_cap)) return false;
    if (!ref_text) {
        if (!decode_into(tgt, ref, rn, mode, &e->ref, &e->ref_cap)) return false;
    } else {
        size_t len = strlen(ref_text) + 1;
        if (len > e->ref_cap) {
            char *b = realloc(e->ref, len);
            if (!b) return false;
            e->ref = b;
            e->ref_cap = len;
        }
        memcpy(e->ref, ref_text, len);
    }
    int exact = hn == rn && memcmp(hyp, ref, sizeof(int64_t) * (size_t)hn) == 0 ? 1 : -1;
    for (int i = 0; i < hn && exact < 0; i++)
        if (hyp[i] == TR_UNK) exact = 0;
    const char *refs[1] = {e->ref};
    return tr_scores_add(&e->s, e->hyp, refs, 1, exact) == 0;
}
