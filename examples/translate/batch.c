/* Encoded pairs, length-bucketed batches and atomic file writes (corpora and vocabularies:
 * data.c). Failures are a status plus a message; nothing aborts. */
#include "data.h"
#include "data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/tensor.h"

/* ---- encoded pairs ----------------------------------------------------------------------- */

void tr_dataset_free(tr_dataset *d) {
    free(d->ids);
    free(d->src_start);
    free(d->tgt_start);
    free(d->src_len);
    free(d->tgt_len);
    free(d->line);
    memset(d, 0, sizeof *d);
}

static bool dataset_alloc(tr_dataset *d, int64_t n, int64_t nids) {
    size_t m = n ? (size_t)n : 1;
    d->n = n;
    d->ids = malloc((nids ? (size_t)nids : 1) * sizeof(int64_t));
    d->src_start = malloc(m * sizeof(int64_t));
    d->tgt_start = malloc(m * sizeof(int64_t));
    d->src_len = malloc(m * sizeof(int32_t));
    d->tgt_len = malloc(m * sizeof(int32_t));
    d->line = malloc(m * sizeof(int64_t));
    return d->ids && d->src_start && d->tgt_start && d->src_len && d->tgt_len && d->line;
}

int tr_dataset_build(tr_dataset *d, const tr_corpus *c, const tr_vocab *src_vocab, const tr_vocab *tgt_vocab,
                     tr_tok_mode mode, int max_len, char *err, size_t errsz) {
    memset(d, 0, sizeof *d);
    const char *name = c->path ? c->path : "corpus";
    int64_t keep = 0, nids = 0;
    for (int64_t i = 0; i < c->n; i++) { /* first pass: sizes */
        int64_t ls = (int64_t)tr_vocab_encode(src_vocab, c->src[i], mode, NULL, 0) + 1;
        int64_t lt = (int64_t)tr_vocab_encode(tgt_vocab, c->tgt[i], mode, NULL, 0) + 1;
        if (max_len > 0 && (ls > max_len || lt > max_len)) continue;
        keep++;
        nids += ls + lt;
    }
    if (keep == 0)
        return tr__fail(err, errsz,
                    "%s: none of the %lld pairs has at most %d tokens on both sides (raise the length limit)", name,
                    (long long)c->n, max_len);
    if (!dataset_alloc(d, keep, nids)) {
        tr_dataset_free(d);
        return tr__fail(err, errsz, "%s: out of memory encoding the corpus", name);
    }
    int64_t k = 0, at = 0;
    for (int64_t i = 0; i < c->n; i++) {
        int ls = tr_vocab_encode(src_vocab, c->src[i], mode, NULL, 0) + 1;
        int lt = tr_vocab_encode(tgt_vocab, c->tgt[i], mode, NULL, 0) + 1;
        if (max_len > 0 && (ls > max_len || lt > max_len)) {
            d->dropped++;
            continue;
        }
        d->src_start[k] = at;
        tr_vocab_encode(src_vocab, c->src[i], mode, d->ids + at, ls);
        d->ids[at + ls - 1] = TR_EOS;
        at += ls;
        d->tgt_start[k] = at;
        tr_vocab_encode(tgt_vocab, c->tgt[i], mode, d->ids + at, lt);
        d->ids[at + lt - 1] = TR_EOS;
        at += lt;
        d->src_len[k] = ls;
        d->tgt_len[k] = lt;
        d->line[k++] = c->line[i];
    }
    return 0;
}

/* out = the pairs of d flagged (or not) in pick, in d's order */
static bool dataset_pick(const tr_dataset *d, const bool *pick, bool want, tr_dataset *out) {
    int64_t n = 0, nids = 0;
    for (int64_t i = 0; i < d->n; i++)
        if (pick[i] == want) n++, nids += d->src_len[i] + d->tgt_len[i];
    memset(out, 0, sizeof *out);
    if (!dataset_alloc(out, n, nids)) return false;
    int64_t k = 0, at = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (pick[i] != want) continue;
        memcpy(out->ids + at, d->ids + d->src_start[i], (size_t)d->src_len[i] * sizeof(int64_t));
        out->src_start[k] = at;
        at += d->src_len[i];
        memcpy(out->ids + at, d->ids + d->tgt_start[i], (size_t)d->tgt_len[i] * sizeof(int64_t));
        out->tgt_start[k] = at;
        at += d->tgt_len[i];
        out->src_len[k] = d->src_len[i];
        out->tgt_len[k] = d->tgt_len[i];
        out->line[k++] = d->line[i];
    }
    return true;
}

/* Fisher-Yates shuffle of a[0..n) with uniforms drawn from r (n-1 of them, one at a time so the
 * caller needs no scratch memory) */
static void shuffle(int64_t *a, int64_t n, ag_rng *r) {
    for (int64_t i = n - 1; i > 0; i--) {
        double u;
        ag_rng_uniform_f64(r, 1, &u);
        int64_t j = (int64_t)(u * (double)(i + 1));
        if (j > i) j = i;
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

int tr_dataset_split(const tr_dataset *all, double fraction, uint64_t seed, tr_dataset *train, tr_dataset *held,
                     char *err, size_t errsz) {
    tr_dataset unused;
    if (!held) held = &unused; /* the caller only wants the training part */
    memset(train, 0, sizeof *train);
    memset(held, 0, sizeof *held);
    if (!(fraction >= 0 && fraction < 1)) return tr__fail(err, errsz, "held-out fraction %g is not in [0, 1)", fraction);
    int64_t nh = (int64_t)(fraction * (double)all->n + 0.5);
    if (nh >= all->n)
        return tr__fail(err, errsz, "holding out %lld of %lld pairs leaves none to train on", (long long)nh,
                    (long long)all->n);
    int64_t *idx = malloc((size_t)all->n * sizeof(int64_t));
    bool *pick = calloc((size_t)all->n, 1);
    int rc = -1;
    if (idx && pick) {
        for (int64_t i = 0; i < all->n; i++) idx[i] = i;
        ag_rng r = ag_rng_new(seed ^ 0x5be1d5eedull); /* not the batcher's stream for the same seed */
        shuffle(idx, all->n, &r);
        for (int64_t i = 0; i < nh; i++) pick[idx[i]] = true;
        if (dataset_pick(all, pick, false, train) && dataset_pick(all, pick, true, held)) rc = 0;
    }
    free(idx);
    free(pick);
    if (rc) {
        tr_dataset_free(train);
        tr_dataset_free(held);
        return tr__fail(err, errsz, "out of memory splitting %lld pairs", (long long)all->n);
    }
    train->dropped = all->dropped;
    if (held == &unused) tr_dataset_free(&unused);
    return 0;
}

/* ---- batches ----------------------------------------------------------------------------- */

typedef struct {
    int32_t ls, lt;
    double key;
    int64_t i;
} len_key;

static int by_length(const void *pa, const void *pb) {
    const len_key *a = pa, *b = pb;
    if (a->ls != b->ls) return a->ls < b->ls ? -1 : 1;
    if (a->lt != b->lt) return a->lt < b->lt ? -1 : 1;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

void tr_batcher_free(tr_batcher *b) {
    free(b->order);
    free(b->start);
    free(b->size);
    free(b->perm);
    memset(b, 0, sizeof *b);
}

int tr_batcher_init(tr_batcher *b, const tr_dataset *d, int batch_size, uint64_t seed, bool shuffle_, char *err,
                    size_t errsz) {
    memset(b, 0, sizeof *b);
    if (batch_size < 1) return tr__fail(err, errsz, "batch size %d: must be at least 1", batch_size);
    if (d->n < 1) return tr__fail(err, errsz, "no pairs to make batches of");
    int64_t n = d->n, nb = (n + batch_size - 1) / batch_size;
    len_key *lk = malloc((size_t)n * sizeof *lk);
    double *u = malloc((size_t)n * sizeof(double));
    b->order = malloc((size_t)n * sizeof(int64_t));
    b->start = malloc((size_t)nb * sizeof(int64_t));
    b->size = malloc((size_t)nb * sizeof(int32_t));
    b->perm = malloc((size_t)nb * sizeof(int64_t));
    if (!lk || !u || !b->order || !b->start || !b->size || !b->perm) {
        free(lk);
        free(u);
        tr_batcher_free(b);
        return tr__fail(err, errsz, "out of memory making %lld batches", (long long)nb);
    }
    /* tie keys use counters [0, n) of the seed's stream; epoch orders use [(e+1)·2^32, ...) */
    ag_rng r = ag_rng_new(seed);
    ag_rng_uniform_f64(&r, n, u);
    for (int64_t i = 0; i < n; i++) lk[i] = (len_key){d->src_len[i], d->tgt_len[i], u[i], i};
    qsort(lk, (size_t)n, sizeof *lk, by_length);
    for (int64_t i = 0; i < n; i++) {
        b->order[i] = lk[i].i;
        if (lk[i].ls > b->max_src_len) b->max_src_len = lk[i].ls;
        if (lk[i].lt > b->max_tgt_len) b->max_tgt_len = lk[i].lt;
    }
    for (int64_t k = 0; k < nb; k++) {
        b->start[k] = k * batch_size;
        b->size[k] = (int32_t)(n - b->start[k] < batch_size ? n - b->start[k] : batch_size);
    }
    free(lk);
    free(u);
    b->nbatches = nb;
    b->batch_size = batch_size;
    b->seed = seed;
    b->shuffle = shuffle_;
    tr_batcher_set_epoch(b, 0);
    return 0;
}

void tr_batcher_set_epoch(tr_batcher *b, int64_t epoch) {
    for (int64_t k = 0; k < b->nbatches; k++) b->perm[k] = k;
    b->epoch = epoch;
    if (!b->shuffle) return;
    ag_rng r = ag_rng_new(b->seed);
    r.counter = ((uint64_t)epoch + 1) << 32;
    shuffle(b->perm, b->nbatches, &r);
}

void tr_batch_free(tr_batch *bt) {
    free(bt->src);
    free(bt->tgt_in);
    free(bt->tgt_out);
    free(bt->src_len);
    free(bt->tgt_len);
    free(bt->index);
    memset(bt, 0, sizeof *bt);
}

int tr_batch_alloc(tr_batch *bt, const tr_batcher *b, char *err, size_t errsz) {
    memset(bt, 0, sizeof *bt);
    size_t B = (size_t)b->batch_size;
    bt->src = malloc(B * (size_t)b->max_src_len * sizeof(int64_t));
    bt->tgt_in = malloc(B * (size_t)b->max_tgt_len * sizeof(int64_t));
    bt->tgt_out = malloc(B * (size_t)b->max_tgt_len * sizeof(int64_t));
    bt->src_len = malloc(B * sizeof(int32_t));
    bt->tgt_len = malloc(B * sizeof(int32_t));
    bt->index = malloc(B * sizeof(int64_t));
    if (!bt->src || !bt->tgt_in || !bt->tgt_out || !bt->src_len || !bt->tgt_len || !bt->index) {
        tr_batch_free(bt);
        return tr__fail(err, errsz, "out of memory for a batch of %d", b->batch_size);
    }
    bt->cap_B = b->batch_size;
    bt->cap_Ls = b->max_src_len;
    bt->cap_Lt = b->max_tgt_len;
    return 0;
}

int tr_batcher_get(const tr_batcher *b, const tr_dataset *d, int64_t step, tr_batch *bt) {
    bt->B = bt->Ls = bt->Lt = 0;
    bt->ntokens = 0;
    if (step < 0 || step >= b->nbatches) return -1;
    int64_t k = b->perm[step];
    const int64_t *pairs = b->order + b->start[k];
    int B = b->size[k], Ls = 0, Lt = 0;
    for (int r = 0; r < B; r++) {
        if (d->src_len[pairs[r]] > Ls) Ls = d->src_len[pairs[r]];
        if (d->tgt_len[pairs[r]] > Lt) Lt = d->tgt_len[pairs[r]];
    }
    if (B > bt->cap_B || Ls > bt->cap_Ls || Lt > bt->cap_Lt) return -1;
    for (int r = 0; r < B; r++) {
        int64_t p = pairs[r];
        int ls = d->src_len[p], lt = d->tgt_len[p];
        const int64_t *s = d->ids + d->src_start[p], *t = d->ids + d->tgt_start[p];
        int64_t *src = bt->src + (size_t)r * Ls, *in = bt->tgt_in + (size_t)r * Lt, *out = bt->tgt_out + (size_t)r * Lt;
        for (int j = 0; j < Ls; j++) src[j] = j < ls ? s[j] : TR_PAD;
        for (int j = 0; j < Lt; j++) {
            in[j] = j == 0 ? TR_BOS : j < lt ? t[j - 1] : TR_PAD;
            out[j] = j < lt ? t[j] : TR_PAD;
        }
        bt->src_len[r] = ls;
        bt->tgt_len[r] = lt;
        bt->index[r] = p;
        bt->ntokens += lt;
    }
    bt->B = B;
    bt->Ls = Ls;
    bt->Lt = Lt;
    return 0;
}

/* ---- files ------------------------------------------------------------------------------- */

int tr_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errsz) {
    size_t pl = strlen(path);
    char *tmp = malloc(pl + 16);
    if (!tmp) return tr__fail(err, errsz, "%s: out of memory", path);
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return tr__fail(err, errsz, "%s: cannot create a temporary file next to it: %s", path, strerror(e));
    }
    mode_t mask = umask(0); /* mkstemp makes 0600; give the file the usual permissions */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    const char *p = data;
    size_t left = len;
    int e = 0;
    while (left > 0 && !e) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno != EINTR) e = errno;
        else if (w > 0) p += w, left -= (size_t)w;
    }
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) {
        unlink(tmp);
        free(tmp);
        return tr__fail(err, errsz, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    /* make the rename itself durable */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + 1) : 1, slash ? path : ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}
