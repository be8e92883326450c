/* sacreBLEU's BLEU (13a tokenizer) and chrF, counted with hash tables in time linear in the
 * text. sacreBLEU works on Python strings: characters are code points and whitespace is what
 * str.split() splits on; the helpers below give UTF-8 bytes those meanings. */
#include "metrics.h"

#include "data_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 and Python's whitespace ---- */

/* The code point at s (n > 0 bytes left) into *cp; returns its length. An invalid byte is one
 * character, 0x110000 + its value, so that it only equals itself. */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    int len = tr__utf8_next(s, n, cp);
    if (len) return len;
    *cp = 0x110000u + s[0];
    return 1;
}

/* str.isspace(): the separators str.split() splits on */
static bool is_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* length of s without its trailing whitespace (str.rstrip()) */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += (size_t)utf8_next((const unsigned char *)s + i, n - i, &c);
        if (!is_space(c)) end = i;
    }
    return end;
}

size_t tr_rstrip_len(const char *s) { return rstrip_len(s, strlen(s)); }

/* ---- scratch memory ---- */

typedef struct {
    char *p;
    size_t n, cap;
} text_buf;

static bool reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}
#define RESERVE(ptr, cap, need) reserve((void **)&(ptr), &(cap), (need), sizeof *(ptr))

/* one n-gram: n symbols from sym[start]; its hypothesis count, the running count in the
 * reference being added (stamp tells which), and the largest count over the references */
typedef struct {
    uint64_t h;
    uint32_t start;
    int32_t n, hyp, cur, stamp, refmax;
} ngram;

/* an interned token: len bytes at off in the token text, with its id */
typedef struct {
    uint64_t h;
    uint32_t off, len, id;
} token;

struct tr_metrics_work {
    text_buf a, b;             /* the tokenizer's passes */
    char *toks;                /* tokenized segment texts (BLEU), one after the other */
    size_t toks_cap;
    uint32_t *sym;             /* symbols: token ids (BLEU) or code points (chrF) */
    size_t sym_cap;
    ngram *tab;                /* open addressing, tab_cap a power of two, n == 0 free */
    size_t tab_cap;
    uint32_t *used;            /* occupied slots of tab, to visit and clear them */
    size_t used_n, used_cap;
    token *ttab;               /* token ids, the same way */
    size_t ttab_cap;
    uint32_t *tused;
    size_t tused_n, tused_cap;
};

tr_metrics_work *tr_metrics_work_new(void) { return calloc(1, sizeof(tr_metrics_work)); }

void tr_metrics_work_free(tr_metrics_work *w) {
    if (!w) return;
    free(w->a.p);
    free(w->b.p);
    free(w->toks);
    free(w->sym);
    free(w->tab);
    free(w->used);
    free(w->ttab);
    free(w->tused);
    free(w);
}

/* Double an open-addressing table of *cap entries of elem bytes, each starting with its
 * uint64_t hash and free when the 4 bytes at busy are 0; used[0..n) lists the occupied slots
 * (updated). False when out of memory (the table unchanged). */
static bool table_grow(void **tab, size_t *cap, size_t elem, size_t busy, uint32_t **used, size_t *used_cap,
                       size_t n) {
    size_t c = *cap ? 2 * *cap : 256;
    char *t = calloc(c, elem), *old = *tab;
    if (!t || !reserve((void **)used, used_cap, c / 2 + 1, sizeof **used)) {
        free(t);
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        const char *e = old + (size_t)(*used)[k] * elem;
        uint64_t h;
        uint32_t b;
        memcpy(&h, e, sizeof h);
        size_t i = h & (c - 1);
        for (;; i = (i + 1) & (c - 1)) {
            memcpy(&b, t + i * elem + busy, sizeof b);
            if (!b) break;
        }
        memcpy(t + i * elem, e, elem);
        (*used)[k] = (uint32_t)i;
    }
    free(old);
    *tab = t;
    *cap = c;
    return true;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}

/* ---- the 13a tokenizer ----
 * mteval-v13a as sacreBLEU's Tokenizer13a applies it: remove "<skipped>", join "-\n" line
 * breaks, other newlines become spaces, unescape &quot; &amp; &lt; &gt; (in that order), pad
 * with a space at each end, then four regular-expression substitutions, each a left-to-right
 * scan over non-overlapping matches, and whitespace collapsed. Every pattern is ASCII, so
 * scanning bytes gives the result scanning code points does. */

/* out = in with every occurrence of from (scanned left to right, not rescanned) replaced */
static void replace(const text_buf *in, text_buf *out, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    out->n = 0;
    for (size_t i = 0; i < in->n;) {
        if (in->n - i >= fl && memcmp(in->p + i, from, fl) == 0) {
            memcpy(out->p + out->n, to, tl);
            out->n += tl;
            i += fl;
        } else {
            out->p[out->n++] = in->p[i++];
        }
    }
}

static bool digit(char c) { return c >= '0' && c <= '9'; }

/* [{-~[-` -&(-+:-@/]: the ASCII punctuation other than ' , - . and the space of its class */
static bool tok13a_punct(char c) {
    unsigned char u = (unsigned char)c;
    return (u >= '{' && u <= '~') || (u >= '[' && u <= '`') || (u >= ' ' && u <= '&') || (u >= '(' && u <= '+') ||
           (u >= ':' && u <= '@') || u == '/';
}

/* one of the three two-character rules: ([^0-9])([.,]) -> "\1 \2 ", ([.,])([^0-9]) -> " \1 \2",
 * ([0-9])(-) -> "\1 \2 " */
static void pair_rule(const text_buf *in, text_buf *out, int rule) {
    out->n = 0;
    char *o = out->p;
    for (size_t i = 0; i < in->n;) {
        char x = in->p[i], y = i + 1 < in->n ? in->p[i + 1] : 0;
        bool m = i + 1 < in->n && (rule == 0   ? !digit(x) && (y == '.' || y == ',')
                                   : rule == 1 ? (x == '.' || x == ',') && !digit(y)
                                               : digit(x) && y == '-');
        if (!m) {
            o[out->n++] = x;
            i++;
            continue;
        }
        if (rule == 1) o[out->n++] = ' ';
        o[out->n++] = x;
        o[out->n++] = ' ';
        o[out->n++] = y;
        if (rule != 1) o[out->n++] = ' ';
        i += 2;
    }
}

const char *tr_tokenize_13a(tr_metrics_work *w, const char *line) {
    size_t n = strlen(line), need = 3 * n + 8; /* no pass more than triples its input */
    if (!RESERVE(w->a.p, w->a.cap, need) || !RESERVE(w->b.p, w->b.cap, need)) return NULL;
    text_buf *x = &w->a, *y = &w->b, *t;
    memcpy(x->p, line, n);
    x->n = n;
    static const char *const from[] = {"<skipped>", "-\n", "\n", "&quot;", "&amp;", "&lt;", "&gt;"};
    static const char *const to[] = {"", "", " ", "\"", "&", "<", ">"};
    for (int k = 0; k < 7; k++) {
        replace(x, y, from[k], to[k]);
        t = x, x = y, y = t;
    }
    /* " " + line + " ", every punctuation character of the class padded with spaces */
    y->n = 0;
    y->p[y->n++] = ' ';
    for (size_t i = 0; i < x->n; i++) {
        char c = x->p[i];
        if (tok13a_punct(c)) {
            y->p[y->n++] = ' ';
            y->p[y->n++] = c;
            y->p[y->n++] = ' ';
        } else {
            y->p[y->n++] = c;
        }
    }
    y->p[y->n++] = ' ';
    t = x, x = y, y = t;
    for (int rule = 0; rule < 3; rule++) {
        pair_rule(x, y, rule);
        t = x, x = y, y = t;
    }
    /* ' '.join(line.split()) */
    y->n = 0;
    for (size_t i = 0; i < x->n;) {
        uint32_t c;
        int len = utf8_next((const unsigned char *)x->p + i, x->n - i, &c);
        if (is_space(c)) {
            if (y->n && y->p[y->n - 1] != ' ') y->p[y->n++] = ' ';
        } else {
            memcpy(y->p + y->n, x->p + i, (size_t)len);
            y->n += (size_t)len;
        }
        i += (size_t)len;
    }
    if (y->n && y->p[y->n - 1] == ' ') y->n--;
    y->p[y->n] = 0;
    return y->p;
}

/* ---- n-gram counting ---- */

/* The slot of the n symbols at sym[start], created with zero counts if absent (the table kept
 * at most half full); NULL when out of memory. */
static ngram *ngram_slot(tr_metrics_work *w, uint64_t h, uint32_t start, int n) {
    if (2 * (w->used_n + 1) > w->tab_cap &&
        !table_grow((void **)&w->tab, &w->tab_cap, sizeof(ngram), offsetof(ngram, n), &w->used, &w->used_cap, w->used_n))
        return NULL;
    size_t mask = w->tab_cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        ngram *g = &w->tab[i];
        if (g->n == 0) {
            *g = (ngram){h, start, n, 0, 0, 0, 0};
            w->used[w->used_n++] = (uint32_t)i;
            return g;
        }
        if (g->h == h && g->n == n && memcmp(w->sym + g->start, w->sym + start, sizeof(uint32_t) * (size_t)n) == 0)
            return g;
    }
}

static void ngrams_clear(tr_metrics_work *w) {
    for (size_t k = 0; k < w->used_n; k++) w->tab[w->used[k]].n = 0;
    w->used_n = 0;
}

/* Count the n-grams (orders 1..order) of sym[at, at + len): as the hypothesis (stamp 0: hyp
 * counts, per-order totals into per_order) or as reference stamp > 0 (running count, the
 * largest count, and in per_order the occurrences within the hypothesis' count: the clipped
 * matches of this reference). False when out of memory. */
static bool count_ngrams(tr_metrics_work *w, size_t at, size_t len, int order, int stamp, int64_t *per_order,
                         int64_t *matches) {
    for (size_t i = 0; i < len; i++) {
        uint64_t h = 0x5EEDull;
        for (int n = 1; n <= order && i + (size_t)n <= len; n++) {
            h = mix(h, w->sym[at + i + (size_t)n - 1]);
            ngram *g = ngram_slot(w, h, (uint32_t)(at + i), n);
            if (!g) return false;
            if (stamp == 0) {
                g->hyp++;
            } else {
                if (g->stamp != stamp) g->stamp = stamp, g->cur = 0;
                g->cur++;
                if (g->cur > g->refmax) g->refmax = g->cur;
                if (matches && g->cur <= g->hyp) matches[n - 1]++;
            }
            per_order[n - 1]++;
        }
    }
    return true;
}

/* ---- BLEU ---- */

/* the number of tokens of text (split on whitespace) */
static size_t count_words(const char *text) {
    size_t n = strlen(text), count = 0;
    bool in = false;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += (size_t)utf8_next((const unsigned char *)text + i, n - i, &c);
        bool sp = is_space(c);
        count += in == false && !sp;
        in = !sp;
    }
    return count;
}

/* The tokens of text (split on whitespace) appended to sym as ids, equal tokens equal ids
 * within the segment; their count, (size_t)-1 when out of memory. */
static size_t intern_tokens(tr_metrics_work *w, const char *text, size_t at, uint32_t *next_id) {
    size_t n = strlen(text), count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        int len = utf8_next((const unsigned char *)text + i, n - i, &c);
        if (is_space(c)) {
            i += (size_t)len;
            continue;
        }
        size_t s = i;
        while (i < n) {
            len = utf8_next((const unsigned char *)text + i, n - i, &c);
            if (is_space(c)) break;
            i += (size_t)len;
        }
        uint64_t h = 0xCBF29CE484222325ull;
        for (size_t k = s; k < i; k++) h = (h ^ (unsigned char)text[k]) * 0x100000001B3ull;
        if (2 * (w->tused_n + 1) > w->ttab_cap && !table_grow((void **)&w->ttab, &w->ttab_cap, sizeof(token),
                                                              offsetof(token, len), &w->tused, &w->tused_cap, w->tused_n))
            return (size_t)-1;
        size_t off = (size_t)(text - w->toks) + s, mask = w->ttab_cap - 1, slot = h & mask;
        while (w->ttab[slot].len &&
               !(w->ttab[slot].h == h && w->ttab[slot].len == i - s &&
                 memcmp(w->toks + w->ttab[slot].off, text + s, i - s) == 0))
            slot = (slot + 1) & mask;
        if (!w->ttab[slot].len) {
            w->ttab[slot] = (token){h, (uint32_t)off, (uint32_t)(i - s), (*next_id)++};
            w->tused[w->tused_n++] = (uint32_t)slot;
        }
        w->sym[at + count++] = w->ttab[slot].id;
    }
    return count;
}

/* the segment's texts tokenized one after the other into w->toks; their offsets into off */
static bool tokenize_segment(tr_metrics_work *w, const tr_bleu_opts *o, const char *hyp, const char *const *refs,
                             int nrefs, size_t *off) {
    size_t total = 0;
    for (int k = 0; k <= nrefs; k++) {
        const char *s = k == 0 ? hyp : refs[k - 1];
        size_t keep = rstrip_len(s, strlen(s));
        /* a copy cut where sacreBLEU's rstrip() cuts; the tokenizer writes into its own buffers */
        if (!RESERVE(w->toks, w->toks_cap, total + keep + 1)) return false;
        memcpy(w->toks + total, s, keep);
        w->toks[total + keep] = 0;
        const char *t = w->toks + total;
        if (o->tok == TR_BLEU_TOK_13A && !(t = tr_tokenize_13a(w, t))) return false;
        size_t tl = strlen(t);
        if (t != w->toks + total) {
            if (!RESERVE(w->toks, w->toks_cap, total + tl + 1)) return false;
            memcpy(w->toks + total, t, tl + 1);
        }
        off[k] = total;
        total += tl + 1;
    }
    return true;
}

int tr_bleu_add(tr_metrics_work *w, tr_bleu_stats *s, const tr_bleu_opts *o, const char *hyp,
                const char *const *refs, int nrefs) {
    enum { MAXREFS = 64 };
    size_t off[MAXREFS + 1], len[MAXREFS + 1], at = 0;
    if (nrefs < 1 || nrefs > MAXREFS || !tokenize_segment(w, o, hyp, refs, nrefs, off)) return -1;
    size_t words = 1;
    for (int k = 0; k <= nrefs; k++) words += count_words(w->toks + off[k]);
    if (!RESERVE(w->sym, w->sym_cap, words)) return -1;
    uint32_t next_id = 1;
    bool ok = true;
    for (int k = 0; ok && k <= nrefs; k++) {
        len[k] = intern_tokens(w, w->toks + off[k], at, &next_id);
        ok = len[k] != (size_t)-1;
        off[k] = at;
        at += len[k];
    }
    int64_t totals[TR_BLEU_ORDER] = {0}, ignore[TR_BLEU_ORDER] = {0};
    ok = ok && count_ngrams(w, off[0], len[0], TR_BLEU_ORDER, 0, totals, NULL);
    for (int k = 1; ok && k <= nrefs; k++) ok = count_ngrams(w, off[k], len[k], TR_BLEU_ORDER, k, ignore, NULL);
    for (size_t k = 0; k < w->tused_n; k++) w->ttab[w->tused[k]].len = 0;
    w->tused_n = 0;
    if (!ok) {
        ngrams_clear(w);
        return -1;
    }
    for (size_t u = 0; u < w->used_n; u++) {
        const ngram *g = &w->tab[w->used[u]];
        s->correct[g->n - 1] += g->hyp < g->refmax ? g->hyp : g->refmax;
    }
    for (int n = 0; n < TR_BLEU_ORDER; n++) s->total[n] += totals[n];
    /* the reference length closest to the hypothesis', the shorter on a tie */
    int64_t hl = (int64_t)len[0], best = -1, best_d = -1;
    for (int k = 1; k <= nrefs; k++) {
        int64_t rl = (int64_t)len[k], d = rl > hl ? rl - hl : hl - rl;
        if (best_d < 0 || d < best_d || (d == best_d && rl < best)) best = rl, best_d = d;
    }
    s->hyp_len += hl;
    s->ref_len += best;
    ngrams_clear(w);
    return 0;
}

/* sacreBLEU's my_log: log, with 0 floored to -9999999999 */
static double floored_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

tr_bleu_result tr_bleu_compute(const tr_bleu_stats *s, const tr_bleu_opts *o) {
    tr_bleu_result r = {0};
    r.hyp_len = s->hyp_len;
    r.ref_len = s->ref_len;
    r.ratio = s->ref_len ? (double)s->hyp_len / (double)s->ref_len : 0.0;
    if (s->hyp_len < s->ref_len) r.bp = s->hyp_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->hyp_len) : 0.0;
    else r.bp = 1.0;
    bool any = false;
    for (int n = 0; n < TR_BLEU_ORDER; n++) any |= s->correct[n] != 0;
    if (!any) return r; /* no match at all: 0, unsmoothed */
    double value = o->smooth_value >= 0 ? o->smooth_value : o->smooth == TR_SMOOTH_FLOOR ? 0.1 : 1.0;
    double mteval = 1.0;
    int eff = TR_BLEU_ORDER;
    for (int n = 0; n < TR_BLEU_ORDER; n++) {
        double correct = (double)s->correct[n], total = (double)s->total[n];
        if (o->smooth == TR_SMOOTH_ADD_K && n > 0) correct += value, total += value;
        if (total == 0) break;
        if (o->effective_order) eff = n + 1;
        if (correct == 0) {
            if (o->smooth == TR_SMOOTH_EXP) mteval *= 2, r.precision[n] = 100.0 / (mteval * total);
            else if (o->smooth == TR_SMOOTH_FLOOR) r.precision[n] = 100.0 * value / total;
        } else {
            r.precision[n] = 100.0 * correct / total;
        }
    }
    double sum = 0;
    for (int n = 0; n < eff; n++) sum += floored_log(r.precision[n]);
    r.score = r.bp * exp(sum / eff);
    return r;
}

/* ---- chrF ---- */

/* the code points of text (without whitespace unless keep_space) appended at sym[at]; their count */
static size_t code_points(tr_metrics_work *w, const char *text, size_t at, bool keep_space) {
    size_t n = strlen(text), count = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += (size_t)utf8_next((const unsigned char *)text + i, n - i, &c);
        if (keep_space || !is_space(c)) w->sym[at + count++] = c;
    }
    return count;
}

/* the statistics of one segment against one reference: hypothesis n-grams (only for orders
 * the reference has n-grams of), reference n-grams, matches */
static double f_score(const int64_t *hyp, const int64_t *ref, const int64_t *match, int order,
                      const tr_chrf_opts *o) {
    const double eps = 1e-16, factor = o->beta * o->beta;
    double score = 0, avg_prec = 0, avg_rec = 0;
    int eff = 0;
    for (int i = 0; i < order; i++) {
        double prec = hyp[i] > 0 ? (double)match[i] / (double)hyp[i] : eps;
        double rec = ref[i] > 0 ? (double)match[i] / (double)ref[i] : eps;
        double denom = factor * prec + rec;
        score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
        if (hyp[i] > 0 && ref[i] > 0) avg_prec += prec, avg_rec += rec, eff++;
    }
    if (o->eps_smoothing) return 100 * score / order;
    if (eff == 0) avg_prec = avg_rec = 0;
    else avg_prec /= eff, avg_rec /= eff;
    if (avg_prec + avg_rec == 0) return 0.0;
    score = (1 + factor) * avg_prec * avg_rec;
    score /= factor * avg_prec + avg_rec;
    return 100 * score;
}

double tr_chrf_compute(const tr_chrf_stats *s, const tr_chrf_opts *o) {
    return f_score(s->hyp, s->ref, s->match, TR_CHRF_ORDER, o);
}

int tr_chrf_add(tr_metrics_work *w, tr_chrf_stats *s, const tr_chrf_opts *o, const char *hyp,
                const char *const *refs, int nrefs) {
    enum { MAXREFS = 64 };
    size_t bytes = strlen(hyp) + 1, at[MAXREFS + 2];
    if (nrefs < 1 || nrefs > MAXREFS) return -1;
    for (int k = 0; k < nrefs; k++) bytes += strlen(refs[k]);
    if (!RESERVE(w->sym, w->sym_cap, bytes)) return -1;
    /* the hypothesis' code points, then each reference's: n-grams point into all of them */
    at[0] = 0;
    for (int k = 0; k <= nrefs; k++) at[k + 1] = at[k] + code_points(w, k ? refs[k - 1] : hyp, at[k], o->whitespace);
    int64_t hyp_n[TR_CHRF_ORDER] = {0};
    bool ok = count_ngrams(w, 0, at[1], TR_CHRF_ORDER, 0, hyp_n, NULL);
    tr_chrf_stats best = {0};
    double best_f = -1;
    for (int k = 1; ok && k <= nrefs; k++) {
        tr_chrf_stats t = {0};
        ok = count_ngrams(w, at[k], at[k + 1] - at[k], TR_CHRF_ORDER, k, t.ref, t.match);
        for (int n = 0; n < TR_CHRF_ORDER; n++) t.hyp[n] = t.ref[n] > 0 ? hyp_n[n] : 0;
        double f = f_score(t.hyp, t.ref, t.match, TR_CHRF_ORDER, o);
        if (f > best_f) best_f = f, best = t;
    }
    ngrams_clear(w);
    if (!ok) return -1;
    for (int n = 0; n < TR_CHRF_ORDER; n++) {
        s->hyp[n] += best.hyp[n];
        s->ref[n] += best.ref[n];
        s->match[n] += best.match[n];
    }
    return 0;
}

/* ---- signatures and sacreBLEU's text lines ---- */

static void nrefs_text(char *b, size_t n, int nrefs) {
    if (nrefs < 0) snprintf(b, n, "var");
    else snprintf(b, n, "%d", nrefs);
}

int tr_bleu_signature(char *buf, size_t n, const tr_bleu_opts *o, int nrefs) {
    char nr[16], smooth[32];
    nrefs_text(nr, sizeof nr, nrefs);
    double v = o->smooth_value >= 0 ? o->smooth_value : o->smooth == TR_SMOOTH_FLOOR ? 0.1 : 1.0;
    switch (o->smooth) {
    case TR_SMOOTH_FLOOR: snprintf(smooth, sizeof smooth, "floor[%.2f]", v); break;
    case TR_SMOOTH_ADD_K: snprintf(smooth, sizeof smooth, "add-k[%.2f]", v); break;
    case TR_SMOOTH_NONE: snprintf(smooth, sizeof smooth, "none"); break;
    default: snprintf(smooth, sizeof smooth, "exp"); break;
    }
    return snprintf(buf, n, "nrefs:%s|case:mixed|eff:%s|tok:%s|smooth:%s|version:%s", nr,
                    o->effective_order ? "yes" : "no", o->tok == TR_BLEU_TOK_NONE ? "none" : "13a", smooth,
                    TR_SACREBLEU_VERSION);
}

int tr_chrf_signature(char *buf, size_t n, const tr_chrf_opts *o, int nrefs) {
    char nr[16];
    nrefs_text(nr, sizeof nr, nrefs);
    return snprintf(buf, n, "nrefs:%s|case:mixed|eff:%s|nc:%d|nw:0|space:%s|version:%s", nr,
                    o->eps_smoothing ? "no" : "yes", TR_CHRF_ORDER, o->whitespace ? "yes" : "no",
                    TR_SACREBLEU_VERSION);
}

int tr_bleu_format(char *buf, size_t n, const tr_bleu_result *r, const tr_bleu_opts *o, int nrefs, int width) {
    char sig[160];
    tr_bleu_signature(sig, sizeof sig, o, nrefs);
    return snprintf(buf, n, "BLEU|%s = %.*f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                    sig, width, r->score, r->precision[0], r->precision[1], r->precision[2], r->precision[3], r->bp,
                    r->ratio, (long long)r->hyp_len, (long long)r->ref_len);
}

int tr_chrf_format(char *buf, size_t n, double score, const tr_chrf_opts *o, int nrefs, int width) {
    char sig[160];
    tr_chrf_signature(sig, sizeof sig, o, nrefs);
    return snprintf(buf, n, "chrF%d|%s = %.*f", (int)o->beta, sig, width, score);
}

/* ---- the program's metrics ---- */

static const tr_bleu_opts BLEU_DEFAULT = {TR_BLEU_TOK_13A, TR_SMOOTH_EXP, -1, false};

int tr_scores_init(tr_scores *s) {
    memset(s, 0, sizeof *s);
    s->work = tr_metrics_work_new();
    return s->work ? 0 : -1;
}

void tr_scores_free(tr_scores *s) {
    tr_metrics_work_free(s->work);
    s->work = NULL;
}

int tr_scores_add(tr_scores *s, const char *hyp, const char *const *refs, int nrefs, int exact) {
    tr_bleu_stats b = s->bleu;
    tr_chrf_opts co = TR_CHRF_DEFAULT;
    if (tr_bleu_add(s->work, &b, &BLEU_DEFAULT, hyp, refs, nrefs) || tr_chrf_add(s->work, &s->chrf, &co, hyp, refs, nrefs))
        return -1;
    s->bleu = b;
    if (exact < 0) {
        size_t hl = rstrip_len(hyp, strlen(hyp));
        exact = 0;
        for (int k = 0; k < nrefs && !exact; k++)
            exact = rstrip_len(refs[k], strlen(refs[k])) == hl && memcmp(refs[k], hyp, hl) == 0;
    }
    s->nrefs = s->sentences == 0 || s->nrefs == nrefs ? nrefs : -1;
    s->sentences++;
    s->exact += exact > 0;
    return 0;
}

double tr_scores_bleu(const tr_scores *s) { return tr_bleu_compute(&s->bleu, &BLEU_DEFAULT).score; }

double tr_scores_chrf(const tr_scores *s) {
    tr_chrf_opts co = TR_CHRF_DEFAULT;
    return tr_chrf_compute(&s->chrf, &co);
}

double tr_scores_exact(const tr_scores *s) { return s->sentences ? (double)s->exact / (double)s->sentences : 0.0; }

void tr_metrics_print(FILE *f, const tr_bleu_stats *b, const tr_chrf_stats *c, int nrefs, int width,
                      const char *extra) {
    tr_chrf_opts co = TR_CHRF_DEFAULT;
    tr_bleu_result r = tr_bleu_compute(b, &BLEU_DEFAULT);
    char bl[512], cl[256];
    tr_bleu_format(bl, sizeof bl, &r, &BLEU_DEFAULT, nrefs, width);
    tr_chrf_format(cl, sizeof cl, tr_chrf_compute(c, &co), &co, nrefs, width);
    /* right-aligned up to the space before '=', as sacreBLEU aligns its lines */
    const char *line[3] = {bl, cl, extra};
    int at[3], w = 0, n = extra ? 3 : 2;
    for (int k = 0; k < n; k++) {
        const char *eq = strchr(line[k], '=');
        at[k] = eq ? (int)(eq - line[k]) : 0;
        w = at[k] > w ? at[k] : w;
    }
    for (int k = 0; k < n; k++) fprintf(f, "%*s%s\n", w - at[k], "", line[k]);
}

const char *tr_metrics_note(void) {
    return "BLEU and chrF2 are sacreBLEU " TR_SACREBLEU_VERSION "'s on detokenized text: "
           "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" TR_SACREBLEU_VERSION ", "
           "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" TR_SACREBLEU_VERSION;
}
