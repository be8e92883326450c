/* Seeded shuffling and the length-bucketed batcher (data/data.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

void ag_shuffle(int64_t *a, int64_t n, ag_rng *rng) {
    if (!rng) rng = ag_rng_global();
    for (int64_t i = n - 1; i > 0; i--) {
        double u;
        ag_rng_uniform_f64(rng, 1, &u); /* one at a time: no scratch memory */
        int64_t j = (int64_t)(u * (double)(i + 1));
        if (j > i) j = i;
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...) {
    if (err && errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
    }
    return -1;
}

typedef struct {
    int32_t l0, l1;
    double key;
    int64_t i;
} len_key;

static int by_length(const void *pa, const void *pb) {
    const len_key *a = pa, *b = pb;
    if (a->l0 != b->l0) return a->l0 < b->l0 ? -1 : 1;
    if (a->l1 != b->l1) return a->l1 < b->l1 ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

void ag_batcher_free(ag_batcher *b) {
    free(b->order);
    free(b->start);
    free(b->size);
    free(b->perm);
    memset(b, 0, sizeof *b);
}

int ag_batcher_init(ag_batcher *b, const ag_batcher_config *c, char *err, size_t errsz) {
    memset(b, 0, sizeof *b);
    if (!c || c->n < 1 || !c->len[0]) return fail(err, errsz, "no sequences to make batches of");
    if (c->batch_size < 0 || c->max_tokens < 0 || (c->batch_size == 0 && c->max_tokens == 0))
        return fail(err, errsz, "batch size %d, token budget %lld: give a batch size or a token budget (> 0)",
                    c->batch_size, (long long)c->max_tokens);
    int64_t n = c->n;
    for (int64_t i = 0; i < n; i++)
        if (c->len[0][i] < 0 || (c->len[1] && c->len[1][i] < 0))
            return fail(err, errsz, "sequence %lld has a negative length", (long long)i);
    len_key *lk = malloc((size_t)n * sizeof *lk);
    double *u = malloc((size_t)n * sizeof(double));
    b->order = malloc((size_t)n * sizeof(int64_t));
    b->start = malloc((size_t)n * sizeof(int64_t)); /* at most n batches; trimmed below */
    b->size = malloc((size_t)n * sizeof(int32_t));
    if (!lk || !u || !b->order || !b->start || !b->size) {
        free(lk);
        free(u);
        ag_batcher_free(b);
        return fail(err, errsz, "out of memory bucketing %lld sequences", (long long)n);
    }
    ag_rng r = ag_rng_new(c->seed);
    ag_rng_uniform_f64(&r, n, u);
    for (int64_t i = 0; i < n; i++) lk[i] = (len_key){c->len[0][i], c->len[1] ? c->len[1][i] : 0, u[i], i};
    qsort(lk, (size_t)n, sizeof *lk, by_length);
    int64_t nb = 0, count = 0, longest = 0;
    for (int64_t i = 0; i < n; i++) {
        b->order[i] = lk[i].i;
        if (lk[i].l0 > b->max_len[0]) b->max_len[0] = lk[i].l0;
        if (lk[i].l1 > b->max_len[1]) b->max_len[1] = lk[i].l1;
        int64_t l = lk[i].l0 > lk[i].l1 ? lk[i].l0 : lk[i].l1, grown = l > longest ? l : longest;
        bool full = count > 0 && ((c->batch_size > 0 && count + 1 > c->batch_size) ||
                                  (c->max_tokens > 0 && (count + 1) * grown > c->max_tokens));
        if (count == 0 || full) { /* a new batch starts with sequence i */
            b->start[nb++] = i;
            count = 0;
            grown = l;
        }
        b->size[nb - 1] = (int32_t)++count;
        longest = grown;
        if (count > b->max_batch) b->max_batch = (int)count;
    }
    free(lk);
    free(u);
    b->perm = malloc((size_t)nb * sizeof(int64_t));
    if (!b->perm) {
        ag_batcher_free(b);
        return fail(err, errsz, "out of memory making %lld batches", (long long)nb);
    }
    b->n = n;
    b->nbatches = nb;
    b->seed = c->seed;
    b->shuffle = c->shuffle;
    ag_batcher_set_epoch(b, 0);
    return 0;
}

void ag_batcher_set_epoch(ag_batcher *b, int64_t epoch) {
    for (int64_t k = 0; k < b->nbatches; k++) b->perm[k] = k;
    b->epoch = epoch;
    if (!b->shuffle) return;
    ag_rng r = ag_rng_new(b->seed);
    r.counter = ((uint64_t)epoch + 1) << 32;
    ag_shuffle(b->perm, b->nbatches, &r);
}

int ag_batcher_batch(const ag_batcher *b, int64_t step, const int64_t **rows) {
    if (step < 0 || step >= b->nbatches) return 0;
    int64_t k = b->perm[step];
    if (rows) *rows = b->order + b->start[k];
    return b->size[k];
}
