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
        ag_shuffle(idx, all->n, &r);
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

int tr_batcher_init(tr_batcher *b, const tr_dataset *d, int batch_size, uint64_t seed, bool shuffle, char *err,
                    size_t errsz) {
    memset(b, 0, sizeof *b);
    if (batch_size < 1) return tr__fail(err, errsz, "batch size %d: must be at least 1", batch_size);
    if (d->n < 1) return tr__fail(err, errsz, "no pairs to make batches of");
    ag_batcher_config c = {.n = d->n, .len = {d->src_len, d->tgt_len}, .batch_size = batch_size, .seed = seed,
                           .shuffle = shuffle};
    return ag_batcher_init(b, &c, err, errsz);
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
    size_t B = (size_t)b->max_batch;
    bt->src = malloc(B * (size_t)b->max_len[0] * sizeof(int64_t));
    bt->tgt_in = malloc(B * (size_t)b->max_len[1] * sizeof(int64_t));
    bt->tgt_out = malloc(B * (size_t)b->max_len[1] * sizeof(int64_t));
    bt->src_len = malloc(B * sizeof(int32_t));
    bt->tgt_len = malloc(B * sizeof(int32_t));
    bt->index = malloc(B * sizeof(int64_t));
    if (!bt->src || !bt->tgt_in || !bt->tgt_out || !bt->src_len || !bt->tgt_len || !bt->index) {
        tr_batch_free(bt);
        return tr__fail(err, errsz, "out of memory for a batch of %d", b->max_batch);
    }
    bt->cap_B = b->max_batch;
    bt->cap_Ls = b->max_len[0];
    bt->cap_Lt = b->max_len[1];
    return 0;
}

int tr_batcher_get(const tr_batcher *b, const tr_dataset *d, int64_t step, tr_batch *bt) {
    bt->B = bt->Ls = bt->Lt = 0;
    bt->ntokens = 0;
    const int64_t *pairs;
    int B = ag_batcher_batch(b, step, &pairs), Ls = 0, Lt = 0;
    if (B == 0) return -1;
    for (int r = 0; r < B; r++) {
        if (d->src_len[pairs[r]] > Ls) Ls = d->src_len[pairs[r]];
        if (d->tgt_len[pairs[r]] > Lt) Lt = d->tgt_len[pairs[r]];
    }
    if (B > bt->cap_B || Ls > bt->cap_Ls || Lt > bt->cap_Lt) return -1;
    for (int r = 0; r < B; r++) {
        int64_t p = pairs[r];
        int ls = d->src_len[p], lt = d->tgt_len[p];
        const int64_t *s = d->ids + d->src_start[p], *t = d->ids + d->tgt_start[p];
        ag_pad_row(s, ls, Ls, TR_PAD, bt->src + (size_t)r * Ls);
        /* t ends in its EOS: the decoder reads BOS + t[:-1] and predicts t */
        ag_teacher_forcing_row(t, lt - 1, Lt, TR_BOS, t[lt - 1], TR_PAD, bt->tgt_in + (size_t)r * Lt,
                               bt->tgt_out + (size_t)r * Lt);
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
