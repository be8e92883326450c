/* ag_decode: the step loop. Each step feeds only the live hypotheses (not finished, within their
 * sentence's limit) as the model's rows, reads their log-probabilities, lets the search choose
 * every sentence's next slots (search.c), then reorders the model's rows to the slots that are
 * still live and rewinds the arena. A hypothesis' tokens are kept as (token, parent) per step and
 * read back once at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../tensor/op.h"
#include "decode_internal.h"

ag_decode_config ag_decode_defaults(void) {
    return (ag_decode_config){.method = AG_DECODE_GREEDY, .beam_size = 4, .n_best = 1, .length_penalty = 0.6,
                              .length_norm = AG_LENGTH_GNMT, .max_len_a = 2, .max_len_b = 8, .max_len = 256,
                              .pad_id = 0, .bos_id = 1, .eos_id = 2, .temperature = 1, .top_k = 0, .rng = NULL};
}

double ag_decode_length_penalty(ag_length_norm norm, double alpha, int64_t len) {
    if (alpha == 0) return 1.0;
    double n = (double)(len > 0 ? len : 1);
    return norm == AG_LENGTH_MARIAN ? pow(n, alpha) : pow((5.0 + n) / 6.0, alpha);
}

void ag_decode_result_free(ag_decode_result *r) {
    if (!r) return;
    free(r->tokens);
    free(r->lengths);
    free(r->scores);
    free(r->norm_scores);
    memset(r, 0, sizeof *r);
}

static bool check_config(const char *op, const ag_decode_config *c) {
    const char *bad = NULL;
    if ((unsigned)c->method > AG_DECODE_SAMPLE) bad = "method is not greedy, beam or sample";
    else if (c->beam_size < 1 || c->beam_size > 1024) bad = "beam_size must be 1 to 1024";
    else if (c->n_best < 1 || c->n_best > (c->method == AG_DECODE_BEAM ? c->beam_size : 1))
        bad = "n_best must be 1 to beam_size (1 for greedy and sampling)";
    else if (!(c->length_penalty >= 0) || isinf(c->length_penalty)) bad = "length_penalty must be finite and >= 0";
    else if ((unsigned)c->length_norm > AG_LENGTH_MARIAN) bad = "length_norm is not AG_LENGTH_GNMT or AG_LENGTH_MARIAN";
    else if (!(c->max_len_a >= 0) || !isfinite(c->max_len_a) || !isfinite(c->max_len_b))
        bad = "max_len_a must be finite and >= 0, max_len_b finite";
    else if (c->max_len < 1 || c->max_len > (1 << 24)) bad = "max_len must be 1 to 16777216";
    else if (c->pad_id < 0 || c->bos_id < 0 || c->eos_id < 0 || c->eos_id == c->pad_id || c->eos_id == c->bos_id)
        bad = "pad_id, bos_id and eos_id must be >= 0, eos_id neither of the others";
    else if (!(c->temperature >= 0) || isinf(c->temperature)) bad = "temperature must be finite and >= 0";
    else if (c->top_k < 0) bad = "top_k must be >= 0";
    if (bad) ag_error(op, "%s", bad);
    return !bad;
}

/* each sentence's limit: floor(a·n + b) for its n ids that are not padding, within the caps */
static bool sentence_limits(ag_tensor *src, const ag_decode_config *c, int64_t model_max, int64_t *limit) {
    int64_t B = src->shape[0], S = src->shape[1];
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * S));
    if (!ids) return false;
    ag_to_buffer(src, AG_I64, ids);
    int64_t cap = model_max > 0 && model_max < c->max_len ? model_max : c->max_len;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = 0;
        for (int64_t i = 0; i < S; i++) n += ids[b * S + i] != c->pad_id;
        double l = floor(c->max_len_a * (double)n + c->max_len_b);
        limit[b] = l < 0 ? 0 : l > (double)cap ? cap : (int64_t)l;
    }
    free(ids);
    return true;
}

static void search_free(ag__search *s) {
    free(s->limit);
    free(s->h);
    free(s->nh);
    free(s->row);
    free(s->nrow);
    free(s->tok);
    free(s->par);
    free(s->scratch);
}

static bool search_init(ag__search *s, const ag_decode_model *m, ag_tensor *src, const ag_decode_config *c) {
    int64_t B = src->shape[0], K = c->method == AG_DECODE_BEAM ? c->beam_size : 1, n = B * K;
    *s = (ag__search){.cfg = c, .B = B, .K = K};
    s->limit = malloc(sizeof(int64_t) * (size_t)B);
    if (!s->limit || !sentence_limits(src, c, m->max_len, s->limit)) return false;
    for (int64_t b = 0; b < B; b++)
        if (s->limit[b] > s->steps) s->steps = s->limit[b];
    size_t hist = sizeof(int64_t) * (size_t)((s->steps + 2) * n);
    s->h = malloc(sizeof(ag__hyp) * (size_t)n);
    s->nh = malloc(sizeof(ag__hyp) * (size_t)n);
    s->row = malloc(sizeof(int64_t) * (size_t)n);
    s->nrow = malloc(sizeof(int64_t) * (size_t)n);
    s->tok = malloc(hist);
    s->par = malloc(hist);
    if (!s->h || !s->nh || !s->row || !s->nrow || !s->tok || !s->par) return false;
    for (int64_t j = 0; j < n; j++) { /* identical beams at the start: keep one */
        bool first = j % K == 0;
        s->h[j] = (ag__hyp){first ? 0.0 : -INFINITY, 0, !first};
        s->row[j] = first ? j / K : -1;
        s->tok[j] = c->bos_id;
        s->par[j] = j;
    }
    if (c->method == AG_DECODE_SAMPLE) s->rng = c->rng ? *c->rng : *ag_rng_global();
    return true;
}

static bool fed(const ag__search *s, int64_t j, int64_t t) {
    const ag__hyp *h = &s->h[j];
    return !h->done && h->score > -INFINITY && t <= s->limit[j / s->K];
}

/* The model's rows for step t: a row for each slot live then, continuing the row of the last
 * step its hypothesis came from. A slot stays in that row when no other has taken it and it
 * is within the new count, so a beam that continues itself costs no move; the other slots
 * fill the rows left free. The model is reordered unless every row stays; s->row then holds
 * each live slot's row. Returns the count. */
static int64_t set_rows(ag__search *s, const ag_decode_model *m, int64_t t, int64_t nrows, int64_t *rows, bool *taken) {
    int64_t N = s->B * s->K, n = 0;
    for (int64_t j = 0; j < N; j++) n += fed(s, j, t);
    if (n == 0) return 0;
    memset(taken, 0, sizeof(bool) * (size_t)N);
    for (int64_t j = 0; j < N; j++) { /* slots that keep their row */
        int64_t p = s->row[j];
        bool keep = fed(s, j, t) && p < n && !taken[p];
        if (keep) taken[p] = true, rows[p] = p;
        s->nrow[j] = keep ? p : -1;
    }
    bool same = n == nrows;
    for (int64_t j = 0, i = 0; j < N; j++) { /* the others, into the rows left */
        if (!fed(s, j, t)) s->row[j] = -1;
        if (!fed(s, j, t) || s->nrow[j] >= 0) continue;
        while (taken[i]) i++;
        taken[i] = true;
        rows[i] = s->row[j];
        s->nrow[j] = i;
        same = false;
    }
    for (int64_t j = 0; j < N; j++)
        if (fed(s, j, t)) s->row[j] = s->nrow[j];
    if (!same) m->reorder(m->self, ag_from_buffer(AG_I64, AG_SHAPE(n), rows));
    return n;
}

/* one step's scores (n,V) as log-probabilities into *lp (grown as needed); false on a bad step */
static bool read_scores(const char *op, ag__search *s, ag_tensor *scores, int64_t n, double **lp, size_t *cap) {
    char b[128];
    if (!scores) return false;
    if (scores->ndim != 2 || scores->shape[0] != n || (s->V && scores->shape[1] != s->V) || scores->shape[1] < 1 ||
        (scores->dtype != AG_F32 && scores->dtype != AG_F64)) {
        ag_error(op, "the model's step gave %s %s scores for %lld rows: expected (%lld,V) float", ag_shape_str(scores, b),
                 ag_dtype_name(scores->dtype), (long long)n, (long long)n);
        return false;
    }
    s->V = scores->shape[1];
    size_t need = (size_t)(n * s->V);
    if (need > *cap) {
        free(*lp);
        *lp = malloc(sizeof(double) * need);
        *cap = *lp ? need : 0;
        if (!*lp) {
            ag_error(op, "out of memory for %lld x %lld scores", (long long)n, (long long)s->V);
            return false;
        }
    }
    if (!s->scratch) { /* beam candidates, or sampling's probabilities and its top k */
        int64_t k = s->cfg->top_k < s->V ? s->cfg->top_k : s->V;
        s->scratch = malloc(sizeof(double) * (size_t)s->V + 32 * (size_t)((k > s->K ? k : s->K) + 1));
        if (!s->scratch) {
            ag_error(op, "out of memory for a vocabulary of %lld", (long long)s->V);
            return false;
        }
    }
    ag_to_buffer(ag_log_softmax(scores, -1), AG_F64, *lp);
    return true;
}

typedef void (*search_fn)(ag__search *, int64_t, int64_t, bool, const double *);

/* The steps; *last the last step taken. False when a model step failed (reported). */
static bool run(ag__search *s, const ag_decode_model *m, int64_t *last) {
    const char *op = "ag_decode";
    search_fn choose = s->cfg->method == AG_DECODE_BEAM     ? ag__search_beam
                       : s->cfg->method == AG_DECODE_SAMPLE ? ag__search_sample
                                                            : ag__search_greedy;
    int64_t N = s->B * s->K, nrows = s->B, n = 0;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)N), *ids = malloc(sizeof(int64_t) * (size_t)N);
    bool *taken = malloc(sizeof(bool) * (size_t)N);
    double *lp = NULL;
    size_t cap = 0;
    bool ok = rows && ids && taken;
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena);
    *last = 0;
    for (int64_t t = 1; ok && t <= s->steps + 1; t++) {
        bool any = false;
        for (int64_t j = 0; j < N; j++) any |= !s->h[j].done && s->h[j].score > -INFINITY;
        if (!any) break;
        n = set_rows(s, m, t, nrows, rows, taken);
        if (n > 0) {
            nrows = n;
            for (int64_t j = 0; j < N; j++)
                if (s->row[j] >= 0) ids[s->row[j]] = s->tok[(t - 1) * N + j];
            ok = read_scores(op, s, m->step(m->self, ag_from_buffer(AG_I64, AG_SHAPE(n), ids)), n, &lp, &cap);
        }
        for (int64_t b = 0; ok && b < s->B; b++) choose(s, b, t, t > s->limit[b], lp);
        if (ok) {
            ag__hyp *h = s->h;
            s->h = s->nh;
            s->nh = h;
            int64_t *r = s->row;
            s->row = s->nrow;
            s->nrow = r;
            *last = t;
        }
        ag_arena_rewind(arena, mark);
    }
    free(rows);
    free(ids);
    free(taken);
    free(lp);
    return ok;
}

/* slot j's tokens after the last step into out (its len of them) */
static void read_back(const ag__search *s, int64_t j, int64_t last, int64_t *out) {
    int64_t N = s->B * s->K, len = s->h[j].len;
    for (int64_t t = last; t >= 1; t--) {
        if (t <= len) out[t - 1] = s->tok[t * N + j];
        j = s->par[t * N + j];
    }
}

static bool results(const ag__search *s, int64_t last, ag_decode_result *r) {
    const ag_decode_config *c = s->cfg;
    int64_t K = s->K, n = s->B * c->n_best, W = s->steps > 0 ? s->steps : 1;
    *r = (ag_decode_result){.sentences = s->B, .n_best = c->n_best, .width = W};
    r->tokens = malloc(sizeof(int64_t) * (size_t)(n * W));
    r->lengths = malloc(sizeof(int64_t) * (size_t)n);
    r->scores = malloc(sizeof(double) * (size_t)n);
    r->norm_scores = malloc(sizeof(double) * (size_t)n);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)K);
    double *norm = malloc(sizeof(double) * (size_t)K);
    bool ok = r->tokens && r->lengths && r->scores && r->norm_scores && order && norm;
    for (int64_t b = 0; ok && b < s->B; b++) {
        /* the slots by normalised score, the first of equals first */
        for (int64_t k = 0; k < K; k++) {
            const ag__hyp *h = &s->h[b * K + k];
            norm[k] = h->score > -INFINITY ? h->score / ag_decode_length_penalty(c->length_norm, c->length_penalty, h->len)
                                           : -INFINITY;
            int64_t i = k;
            for (; i > 0 && norm[k] > norm[order[i - 1]]; i--) order[i] = order[i - 1];
            order[i] = k;
        }
        for (int64_t k = 0; k < c->n_best; k++) {
            int64_t o = b * c->n_best + k, j = b * K + order[k];
            const ag__hyp *h = &s->h[j];
            int64_t *toks = r->tokens + o * W;
            for (int64_t i = 0; i < W; i++) toks[i] = c->pad_id;
            bool real = h->score > -INFINITY;
            r->lengths[o] = real ? h->len : 0;
            r->scores[o] = real ? h->score : -INFINITY;
            r->norm_scores[o] = norm[order[k]];
            if (real) read_back(s, j, last, toks);
        }
    }
    free(order);
    free(norm);
    if (!ok) ag_decode_result_free(r);
    return ok;
}

static bool check_call(const char *op, const ag_decode_model *m, ag_tensor *src, const ag_decode_config *cfg) {
    char b[128];
    if (!m || !m->start || !m->step || !m->reorder || !cfg) {
        ag_error(op, "a model with start, step and reorder, and a config, are required");
        return false;
    }
    if (!ag__check_not_null(op, src)) return false;
    if (src->ndim != 2 || src->dtype != AG_I64 || src->shape[0] < 1 || src->shape[1] < 1) {
        ag_error(op, "src %s %s: expected (B,S) i64 ids, B and S >= 1", ag_shape_str(src, b), ag_dtype_name(src->dtype));
        return false;
    }
    return check_config(op, cfg);
}

bool ag_decode(const ag_decode_model *m, ag_tensor *src, const ag_decode_config *cfg, ag_decode_result *out) {
    const char *op = "ag_decode";
    if (out) memset(out, 0, sizeof *out);
    if (!out) {
        ag_error(op, "out is NULL");
        return false;
    }
    if (!check_call(op, m, src, cfg)) return false;
    bool grad = ag_set_grad_enabled(false);
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena);
    ag__search s;
    bool ok = search_init(&s, m, src, cfg);
    if (!ok) ag_error(op, "out of memory for the hypotheses of %lld sentences", (long long)src->shape[0]);
    bool started = ok;
    ok = ok && m->start(m->self, src, s.B * s.K, s.steps > 0 ? s.steps : 1);
    int64_t last = 0;
    ok = ok && run(&s, m, &last);
    if (started && m->end) m->end(m->self);
    ok = ok && results(&s, last, out);
    if (ok && cfg->method == AG_DECODE_SAMPLE) { /* the call's draws are used up */
        ag_rng *r = cfg->rng ? cfg->rng : ag_rng_global();
        r->counter += (uint64_t)(s.B * cfg->max_len);
    }
    search_free(&s);
    ag_arena_rewind(arena, mark);
    ag_set_grad_enabled(grad);
    return ok;
}
