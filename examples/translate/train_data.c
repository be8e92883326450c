/* attograd-translate train: the corpora a run trains and evaluates on, their vocabularies
 * (built, or the checkpoint's when resuming), and what a checkpoint records of them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "subword.h"
#include "train_internal.h"

double train_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void corpora_free(corpora *c) {
    tr_corpus_free(&c->train_c);
    tr_corpus_free(&c->dev_c);
    tr_vocab_free(&c->src);
    tr_vocab_free(&c->tgt);
    tr_dataset_free(&c->all);
    tr_dataset_free(&c->train);
    tr_dataset_free(&c->dev);
    tr_dataset_free(&c->dev_eval);
    tr_dataset_free(&c->dev_rest);
}

bool read_corpus(tr_corpus *c, const char *path, const train_opts *o) {
    char err[TR_ERR_SIZE], note[1024];
    tr_read_opts ro = {.strict = o->strict};
    if (tr_corpus_read(c, path, &ro, err, sizeof err) != 0) {
        fprintf(stderr, "attograd-translate: %s\n", err);
        return false;
    }
    if (tr_corpus_skip_summary(c, note, sizeof note) > 0) fprintf(stderr, "attograd-translate: %s: %s\n", path, note);
    if (tr_corpus_note_summary(c, note, sizeof note) > 0) fprintf(stderr, "attograd-translate: note: %s\n", note);
    return true;
}

tr_tok_mode tok_mode(const train_opts *o) {
    if (o->chars || strcmp(o->tokenizer, "char") == 0) return TR_CHARS;
    return strcmp(o->tokenizer, "word") == 0 ? TR_WORDS : TR_SPM;
}

/* The longest side of c's pairs in tokens, counting the <eos> */
static int longest_pair(const tr_corpus *c, const tr_vocab *src, const tr_vocab *tgt, tr_tok_mode mode) {
    int longest = 0;
    for (int64_t i = 0; i < c->n; i++) {
        int ls = tr_vocab_encode(src, c->src[i], mode, NULL, 0) + 1;
        int lt = tr_vocab_encode(tgt, c->tgt[i], mode, NULL, 0) + 1;
        if (ls > longest) longest = ls;
        if (lt > longest) longest = lt;
    }
    return longest;
}

int eval_limit(const train_opts *o) { return (int)(2 * o->max_len + 8); }

/* SentencePiece vocabularies: --spm-model FILE (both sides) or SRC,TGT (one per side), else one
 * trained on each side of the training corpus. */
static bool subword_vocabs(corpora *c, const train_opts *o, char *err, size_t errsz) {
    double t0 = train_clock();
    if (o->spm_model) {
        char both[4096];
        snprintf(both, sizeof both, "%s", o->spm_model);
        struct stat sb;
        char *comma = stat(both, &sb) != 0 ? strchr(both, ',') : NULL; /* a file named a,b is one file */
        if (comma) *comma = 0;
        if (tr_vocab_load_spm(&c->src, both, err, errsz) ||
            tr_vocab_load_spm(&c->tgt, comma ? comma + 1 : both, err, errsz))
            return false;
        fprintf(stderr, "attograd-translate: SentencePiece models %s: %d and %d pieces\n", o->spm_model, c->src.size,
                c->tgt.size);
        return true;
    }
    tr_subword_opts so = {o->spm_type, (int)o->vocab_size};
    if (tr_vocab_train_spm(&c->src, &c->train_c, TR_SIDE_SRC, &so, err, errsz) ||
        tr_vocab_train_spm(&c->tgt, &c->train_c, TR_SIDE_TGT, &so, err, errsz))
        return false;
    fprintf(stderr, "attograd-translate: SentencePiece %s vocabularies of %d and %d pieces trained on %s in %.1f s\n",
            o->spm_type, c->src.size, c->tgt.size, o->train, train_clock() - t0);
    if (o->vocab_size > c->src.size || o->vocab_size > c->tgt.size) /* SentencePiece stops where the corpus does */
        fprintf(stderr, "attograd-translate: note: --vocab-size %lld is capped: %s has material for only %d source "
                        "and %d target pieces\n", (long long)o->vocab_size, o->train, c->src.size, c->tgt.size);
    return true;
}

/* Warns when a vocabulary looks wrong for the corpus: most of its types seen once in training
 * (nothing to generalise from), or many unknown tokens in the dev pairs. */
static void vocab_warnings(const corpora *c, const train_opts *o) {
    static const char *unit[] = {"words", "characters", "pieces"};
    for (int side = 0; side < 2; side++) {
        const tr_vocab *v = side ? &c->tgt : &c->src;
        int64_t *count = calloc((size_t)v->size, sizeof *count), types = 0, once = 0, unk = 0, total = 0;
        if (!count) return;
        for (int64_t i = 0; i < c->all.n; i++) {
            const int64_t *ids = c->all.ids + (side ? c->all.tgt_start[i] : c->all.src_start[i]);
            for (int32_t k = 0, n = side ? c->all.tgt_len[i] - 1 : c->all.src_len[i] - 1; k < n; k++)
                if (ids[k] >= TR_NUM_SPECIALS && ids[k] < v->size) count[ids[k]]++;
        }
        for (int t = TR_NUM_SPECIALS; t < v->size; t++) types += count[t] > 0, once += count[t] == 1;
        free(count);
        for (int64_t i = 0; i < c->dev.n; i++) {
            const int64_t *ids = c->dev.ids + (side ? c->dev.tgt_start[i] : c->dev.src_start[i]);
            for (int32_t k = 0, n = side ? c->dev.tgt_len[i] - 1 : c->dev.src_len[i] - 1; k < n; k++)
                unk += ids[k] == TR_UNK, total++;
        }
        const char *what = side ? "target" : "source";
        const char *fix = c->mode == TR_SPM ? "a smaller --vocab-size makes fewer, more frequent pieces"
                                            : "--tokenizer spm splits them into subwords seen often";
        if (types >= 50 && 2 * once > types)
            fprintf(stderr, "attograd-translate: warning: %lld of the %lld %s %s (%.0f%%) occur once in %s: the "
                            "model cannot learn them (likely cause: %s written as one rarely repeated word, such as "
                            "numbers or compounds, or a small corpus); %s\n",
                    (long long)once, (long long)types, what, unit[c->mode], 100.0 * (double)once / (double)types,
                    o->train, c->mode == TR_SPM ? "pieces too long for the corpus" : "text", fix);
        if (total && 20 * unk > total)
            fprintf(stderr, "attograd-translate: warning: %lld of the %lld %s tokens (%.0f%%) of the dev pairs are "
                            "unknown to the vocabulary (likely cause: %s that the training file lacks%s); "
                            "--tokenizer spm has no unknown tokens\n",
                    (long long)unk, (long long)total, what, 100.0 * (double)unk / (double)total, unit[c->mode],
                    o->min_count > 1 ? ", or --min-count too high" : "");
    }
}

bool load_corpora(corpora *c, const train_opts *o, const trained *resumed) {
    char err[TR_ERR_SIZE];
    c->mode = resumed ? resumed->mode : tok_mode(o);
    if (!read_corpus(&c->train_c, o->train, o)) return false;
    if (o->dev && !read_corpus(&c->dev_c, o->dev, o)) return false;
    if (resumed) {
        if (tr_vocab_copy(&c->src, &resumed->src, err, sizeof err) ||
            tr_vocab_copy(&c->tgt, &resumed->tgt, err, sizeof err))
            goto fail;
    } else if (c->mode == TR_SPM) {
        if (!subword_vocabs(c, o, err, sizeof err)) goto fail;
    } else if (tr_vocab_build(&c->src, &c->train_c, TR_SIDE_SRC, c->mode, (int)o->min_count, err, sizeof err) ||
               tr_vocab_build(&c->tgt, &c->train_c, TR_SIDE_TGT, c->mode, (int)o->min_count, err, sizeof err)) {
        goto fail;
    }
    if (tr_dataset_build(&c->all, &c->train_c, &c->src, &c->tgt, c->mode, (int)o->max_len, err, sizeof err)) goto fail;
    if (c->all.dropped) {
        int longest = longest_pair(&c->train_c, &c->src, &c->tgt, c->mode);
        fprintf(stderr, "attograd-translate: warning: %s: %lld of %lld pairs (%.1f%%) have a side longer than "
                        "--max-len %lld tokens and are left out of training; --max-len %d keeps them all\n",
                o->train, (long long)c->all.dropped, (long long)c->train_c.n,
                100.0 * (double)c->all.dropped / (double)c->train_c.n, (long long)o->max_len, longest);
    }
    if (o->dev) { /* evaluation keeps every pair the model's positions hold (eval_limit) */
        if (tr_dataset_build(&c->dev, &c->dev_c, &c->src, &c->tgt, c->mode, eval_limit(o), err, sizeof err) ||
            tr_dataset_split(&c->all, 0.0, 0, &c->train, NULL, err, sizeof err))
            goto fail;
        if (c->dev.dropped)
            fprintf(stderr, "attograd-translate: warning: %s: %lld pairs longer than %d tokens, beyond the model's "
                            "positions, cannot be evaluated (raise --max-len)\n", o->dev, (long long)c->dev.dropped,
                    eval_limit(o));
    } else if (tr_dataset_split(&c->all, o->heldout, (uint64_t)o->seed, &c->train, &c->dev, err, sizeof err)) {
        goto fail;
    } else if (c->dev.n == 0) { /* best.h5 is chosen on the dev pairs: there must be some */
        snprintf(err, sizeof err,
                 "%s: --heldout %s of %lld pairs holds out none for development: raise it or give --dev FILE", o->train,
                 tr_num_text(o->heldout).s, (long long)c->all.n);
        goto fail;
    }
    if (c->train.n == 0) {
        snprintf(err, sizeof err, "%s: no training pairs left", o->train);
        goto fail;
    }
    /* batches come in length order: a prefix of them would be the shortest sentences */
    double frac = o->max_eval > 0 && o->max_eval < c->dev.n ? (double)o->max_eval / (double)c->dev.n : 0.0;
    if (tr_dataset_split(&c->dev, frac, (uint64_t)o->seed + 7, &c->dev_rest, &c->dev_eval, err, sizeof err)) goto fail;
    if (frac == 0.0) {
        tr_dataset_free(&c->dev_eval);
        c->dev_eval = c->dev_rest; /* all of dev */
        memset(&c->dev_rest, 0, sizeof c->dev_rest);
    }
    if (!resumed) vocab_warnings(c, o);
    /* training reads token ids only: the text and the copies the splits were made from go */
    tr_corpus_free(&c->train_c);
    tr_corpus_free(&c->dev_c);
    tr_dataset_free(&c->all);
    tr_dataset_free(&c->dev_rest);
    return true;
fail:
    fprintf(stderr, "attograd-translate: %s\n", err);
    return false;
}

int64_t corpora_longest(const corpora *c) {
    int64_t longest = 0;
    for (int64_t i = 0; i < c->train.n; i++) {
        if (c->train.src_len[i] > longest) longest = c->train.src_len[i];
        if (c->train.tgt_len[i] > longest) longest = c->train.tgt_len[i];
    }
    return longest;
}

/* ---- what a checkpoint records of its corpora ---- */

/* FNV-1a of a split's pairs: each side's length, then its ids, byte by byte */
static uint64_t split_hash(const tr_dataset *d) {
    uint64_t h = 14695981039346656037ull;
    for (int64_t i = 0; i < d->n; i++)
        for (int side = 0; side < 2; side++) {
            int64_t start = side ? d->tgt_start[i] : d->src_start[i], len = side ? d->tgt_len[i] : d->src_len[i];
            for (int64_t k = -1; k < len; k++) {
                uint64_t v = (uint64_t)(k < 0 ? len : d->ids[start + k]);
                for (int b = 0; b < 8; b++, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
            }
        }
    return h;
}

/* one split as the checkpoint records it: "<name>_pairs", "<name>_hash" and, for the training
 * file and a --dev file, "<name>_file" (dev pairs held out of the training file have none) */
typedef struct {
    int64_t pairs;
    char hash[17];
    const char *file;
} split_record;

static split_record split_of(const tr_dataset *d, const char *file) {
    split_record s = {d->n, "", file};
    snprintf(s.hash, sizeof s.hash, "%016llx", (unsigned long long)split_hash(d));
    return s;
}

static bool split_get(const ag_train_state *st, const char *name, split_record *s) {
    char key[64];
    snprintf(key, sizeof key, "%s_hash", name);
    const char *hash = ag_config_get_string(st, key);
    snprintf(key, sizeof key, "%s_pairs", name);
    if (!hash || strlen(hash) != 16 || !ag_config_get_int(st, key, &s->pairs)) return false;
    memcpy(s->hash, hash, 17);
    snprintf(key, sizeof key, "%s_file", name);
    s->file = ag_config_get_string(st, key);
    return true;
}

static bool split_set(ag_train_state *st, const char *name, const split_record *s) {
    char key[3][64];
    snprintf(key[0], sizeof key[0], "%s_pairs", name);
    snprintf(key[1], sizeof key[1], "%s_hash", name);
    snprintf(key[2], sizeof key[2], "%s_file", name);
    if (!s->file) ag_config_remove(st, key[2]);
    return ag_config_set_int(st, key[0], s->pairs) && ag_config_set_string(st, key[1], s->hash) &&
           (!s->file || ag_config_set_string(st, key[2], s->file));
}

/* "of data.tsv", "held out of data.tsv" */
static void split_source(const split_record *s, const char *train_file, char *buf, size_t n) {
    if (s->file) snprintf(buf, n, "of %s", s->file);
    else snprintf(buf, n, "held out of %s", train_file ? train_file : "the training file");
}

bool corpora_record(ag_train_state *st, const corpora *c, const train_opts *o, bool resuming) {
    split_record now[2] = {split_of(&c->train, o->train), split_of(&c->dev, o->dev)}, was[2];
    const char *names[2] = {"train", "dev"};
    bool known = resuming && split_get(st, "train", &was[0]) && split_get(st, "dev", &was[1]);
    if (resuming && !known)
        fprintf(stderr, "attograd-translate: note: the checkpoint does not record the pairs it was trained on (an "
                        "earlier attograd-translate): whether --train or --dev changed cannot be told\n");
    for (int k = 0; known && k < 2; k++) {
        if (now[k].pairs == was[k].pairs && strcmp(now[k].hash, was[k].hash) == 0) continue;
        char then[4200], given[4200];
        split_source(&was[k], was[0].file, then, sizeof then);
        if (k == 0) snprintf(given, sizeof given, "--train %s", o->train);
        else if (o->dev) snprintf(given, sizeof given, "--dev %s", o->dev);
        else snprintf(given, sizeof given, "dev pairs held out of %s", o->train);
        fprintf(stderr, "attograd-translate: note: %s: %lld pairs, the checkpoint was %s on %lld pairs %s%s; "
                        "continuing on the new %s\n", given, (long long)now[k].pairs, k ? "evaluated" : "trained",
                (long long)was[k].pairs, then, " (hash differs)",
                k ? "dev pairs" : "data");
    }
    if (split_set(st, names[0], &now[0]) && split_set(st, names[1], &now[1])) return true;
    fprintf(stderr, "attograd-translate: out of memory recording the corpora in the checkpoint's configuration\n");
    return false;
}
