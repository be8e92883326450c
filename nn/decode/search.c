/* Choosing each sentence's next tokens: greedy, beam search and sampling. Candidates are ordered
 * by score, then slot, then token id: the first of equals wins, so a result never depends on
 * how the work is split. */
#include <math.h>
#include <string.h>

#include "decode_internal.h"

static bool live(const ag__hyp *h) { return !h->done && h->score > -INFINITY; }

/* the step's token and parent of slot j */
static void record(ag__search *s, int64_t t, int64_t j, int64_t token, int64_t parent) {
    int64_t n = s->B * s->K;
    s->tok[t * n + j] = token;
    s->par[t * n + j] = parent;
}

/* slot j carries its hypothesis on unchanged, as finished */
static void carry(ag__search *s, int64_t t, int64_t j) {
    ag__hyp h = s->h[j];
    s->nh[j] = (ag__hyp){h.score, h.len, true};
    s->nrow[j] = -1;
    record(s, t, j, s->cfg->pad_id, j);
}

/* slot j continues slot from with token v, its score now score */
static void extend(ag__search *s, int64_t t, int64_t j, int64_t from, int64_t v, double score) {
    s->nh[j] = (ag__hyp){score, s->h[from].len + 1, v == s->cfg->eos_id};
    s->nrow[j] = s->row[from];
    record(s, t, j, v, from);
}

static bool generated(const ag_decode_config *c, int64_t v) { return v != c->pad_id && v != c->bos_id; }

/* the first token of highest score + lp[v] among those generated: -1 when every one is -inf */
static int64_t best_token(const ag_decode_config *c, double score, const double *lp, int64_t V, double *best) {
    int64_t arg = -1;
    double bs = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        double x = score + lp[v];
        if (x > bs && generated(c, v)) bs = x, arg = v;
    }
    *best = bs;
    return arg;
}

void ag__search_greedy(ag__search *s, int64_t b, int64_t t, bool over, const double *lp) {
    int64_t j = b; /* K = 1 */
    if (over || !live(&s->h[j])) return carry(s, t, j);
    double best;
    int64_t v = best_token(s->cfg, s->h[j].score, lp + s->row[j] * s->V, s->V, &best);
    if (v < 0) {
        s->nh[j] = (ag__hyp){-INFINITY, 0, true};
        s->nrow[j] = -1;
        return record(s, t, j, s->cfg->pad_id, j);
    }
    extend(s, t, j, j, v, best);
}

/* ---- beam search ---- */
typedef struct {
    double score;
    int64_t slot, token;
} cand;

/* a before b: higher score, then lower slot, then lower token */
static bool before(const cand *a, const cand *b) {
    if (a->score != b->score) return a->score > b->score;
    if (a->slot != b->slot) return a->slot < b->slot;
    return a->token < b->token;
}

/* x into top (n of at most K, in order), keeping the K first */
static void insert(cand *top, int64_t *n, int64_t K, cand x) {
    if (*n == K && !before(&x, &top[K - 1])) return;
    int64_t i = *n < K ? (*n)++ : K - 1;
    for (; i > 0 && before(&x, &top[i - 1]); i--) top[i] = top[i - 1];
    top[i] = x;
}

void ag__search_beam(ag__search *s, int64_t b, int64_t t, bool over, const double *lp) {
    int64_t K = s->K, V = s->V, n = 0;
    const ag_decode_config *c = s->cfg;
    cand *top = s->scratch;
    /* the K best of every slot's candidates: a finished one is its own candidate; a live one's
     * are its K best tokens, found in one pass over its row (a candidate not among its own
     * slot's K best is not among the sentence's) */
    for (int64_t r = b * K; r < b * K + K; r++) {
        const ag__hyp *h = &s->h[r];
        if (!(h->score > -INFINITY)) continue;
        if (h->done || over) {
            insert(top, &n, K, (cand){h->score, r, c->pad_id});
            continue;
        }
        const double *row = lp + s->row[r] * V;
        for (int64_t v = 0; v < V; v++) {
            double x = h->score + row[v];
            /* cheap reject first: most tokens are far below the K-th best */
            if (!(x > -INFINITY) || (n == K && x < top[K - 1].score) || !generated(c, v)) continue;
            insert(top, &n, K, (cand){x, r, v});
        }
    }
    for (int64_t k = 0; k < K; k++) {
        int64_t j = b * K + k;
        if (k >= n) { /* fewer candidates than beams */
            s->nh[j] = (ag__hyp){-INFINITY, 0, true};
            s->nrow[j] = -1;
            record(s, t, j, c->pad_id, j);
            continue;
        }
        const ag__hyp *from = &s->h[top[k].slot];
        if (from->done || over) {
            s->nh[j] = (ag__hyp){from->score, from->len, true};
            s->nrow[j] = -1;
            record(s, t, j, c->pad_id, top[k].slot);
        } else {
            extend(s, t, j, top[k].slot, top[k].token, top[k].score);
        }
    }
}

/* ---- sampling ---- */

/* v drawn from softmax(lp / temperature) over the top_k best generated tokens, u in [0,1);
 * -1 when none has a finite log-probability. p (V) is scratch. */
static int64_t draw(const ag_decode_config *c, const double *lp, int64_t V, double u, double *p) {
    double best;
    int64_t arg = best_token(c, 0.0, lp, V, &best);
    if (arg < 0 || c->temperature == 0) return arg;
    int64_t k = c->top_k > 0 && c->top_k < V ? c->top_k : 0, n = 0;
    double total = 0;
    if (k) { /* the k best, in order of log-probability then id; the rest out */
        cand *top = (cand *)(p + V);
        for (int64_t v = 0; v < V; v++)
            if (generated(c, v) && lp[v] > -INFINITY) insert(top, &n, k, (cand){lp[v], 0, v});
        memset(p, 0, sizeof(double) * (size_t)V);
        for (int64_t i = 0; i < n; i++) p[top[i].token] = exp((top[i].score - best) / c->temperature);
    } else {
        for (int64_t v = 0; v < V; v++)
            p[v] = generated(c, v) && lp[v] > -INFINITY ? exp((lp[v] - best) / c->temperature) : 0.0;
    }
    for (int64_t v = 0; v < V; v++) total += p[v];
    int64_t taken = arg;
    double at = u * total, sum = 0;
    for (int64_t v = 0; v < V; v++) {
        if (p[v] == 0) continue;
        sum += p[v];
        taken = v;
        if (sum > at) return v;
    }
    return taken; /* rounding: the last one in */
}

void ag__search_sample(ag__search *s, int64_t b, int64_t t, bool over, const double *lp) {
    int64_t j = b;
    if (over || !live(&s->h[j])) return carry(s, t, j);
    const double *row = lp + s->row[j] * s->V;
    ag_rng r = s->rng; /* sentence b's draw of step t */
    r.counter += (uint64_t)(b * s->cfg->max_len + t - 1);
    double u;
    ag_rng_uniform_f64(&r, 1, &u);
    int64_t v = draw(s->cfg, row, s->V, u, s->scratch);
    if (v < 0) {
        s->nh[j] = (ag__hyp){-INFINITY, 0, true};
        s->nrow[j] = -1;
        return record(s, t, j, s->cfg->pad_id, j);
    }
    extend(s, t, j, j, v, s->h[j].score + row[v]);
}
