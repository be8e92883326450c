/* attograd-translate: SentencePiece subword vocabularies over spm_shim.h, and the base64 form
 * their models take inside a checkpoint's configuration. */
#include "subword.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "spm_shim.h"

/* the distinct characters SentencePiece sees on a side of c: a space reads as U+2581 "▁",
 * which also starts every sentence (its dummy prefix) */
static int side_characters(const tr_corpus *c, int side) {
    enum { SPACE = 0x2581 };
    uint8_t *seen = calloc(0x110000 / 8, 1);
    if (!seen) return 0;
    seen[SPACE / 8] |= 1u << SPACE % 8;
    int n = 1;
    for (int64_t i = 0; i < c->n; i++) {
        const unsigned char *s = (const unsigned char *)(side == TR_SIDE_SRC ? c->src[i] : c->tgt[i]);
        size_t len = strlen((const char *)s);
        for (size_t at = 0; at < len;) {
            uint32_t cp = s[at];
            int l = tr__utf8_next(s + at, len - at, &cp);
            at += l > 0 ? (size_t)l : 1; /* the reader lets no malformed byte through */
            if (cp == ' ') cp = SPACE;
            if (!(seen[cp / 8] >> cp % 8 & 1)) seen[cp / 8] |= (uint8_t)(1u << cp % 8), n++;
        }
    }
    free(seen);
    return n;
}

int tr_subword_least_size(const tr_corpus *c, int side) { return TR_NUM_SPECIALS + 256 + side_characters(c, side); }

int tr_subword_default_size(const tr_corpus *c, int side) {
    char err[TR_ERR_SIZE];
    tr_vocab words;
    int w = 0;
    if (tr_vocab_build(&words, c, side, TR_WORDS, 1, err, sizeof err) == 0) w = words.size - TR_NUM_SPECIALS;
    tr_vocab_free(&words);
    int64_t more = c->n / 20 < 2 * w ? c->n / 20 : 2 * w;
    return tr_subword_least_size(c, side) + (int)more;
}

int tr_vocab_train_spm(tr_vocab *v, const tr_corpus *c, int side, const tr_subword_opts *o, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    const char *name = c->path ? c->path : "corpus", *what = side == TR_SIDE_SRC ? "source" : "target";
    tr_spm_train_opts so = {o->type ? o->type : "unigram",
                            o->vocab_size > 0 ? o->vocab_size : tr_subword_default_size(c, side)};
    int least = o->vocab_size > 0 ? tr_subword_least_size(c, side) : 0;
    if (o->vocab_size > 0 && o->vocab_size < least)
        return tr__fail(err, errsz, "%s: %s side, vocabulary size %d: too small: it needs at least %d pieces (the 4 "
                        "special tokens, 256 bytes and the side's %d distinct characters)", name, what, o->vocab_size,
                        least, least - TR_NUM_SPECIALS - 256);
    char *model = NULL, msg[TR_ERR_SIZE];
    size_t len = 0;
    if (tr_spm_train((const char *const *)(side == TR_SIDE_SRC ? c->src : c->tgt), c->n, &so, &model, &len, msg,
                     sizeof msg) != 0)
        return tr__fail(err, errsz, "%s: %s side, vocabulary size %d: %s", name, what, so.vocab_size, msg);
    char label[64];
    snprintf(label, sizeof label, "%s SentencePiece model", what);
    int rc = tr_vocab_from_spm(v, model, len, label, err, errsz);
    free(model);
    return rc;
}

int tr_vocab_from_spm(tr_vocab *v, const void *model, size_t len, const char *name, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    char msg[TR_ERR_SIZE];
    tr_spm *p = tr_spm_load(model, len, msg, sizeof msg);
    if (!p) return tr__fail(err, errsz, "%s: %s", name, msg);
    int n = tr_spm_size(p);
    size_t bytes = 1;
    for (int i = 0; i < n; i++) bytes += strlen(tr_spm_piece(p, i)) + 1;
    char *list = malloc(bytes), *at = list;
    if (!list) {
        tr_spm_free(p);
        return tr__fail(err, errsz, "%s: out of memory", name);
    }
    for (int i = 0; i < n; i++) at += sprintf(at, "%s%s", i ? "\n" : "", tr_spm_piece(p, i));
    /* the piece list is checked as any vocabulary is: the specials at their ids, no duplicate */
    int rc = tr_vocab_from_string(v, list, name, err, errsz);
    free(list);
    if (rc == 0 && !(v->spm_model = malloc(len ? len : 1))) rc = tr__fail(err, errsz, "%s: out of memory", name);
    if (rc != 0) {
        tr_spm_free(p);
        tr_vocab_free(v);
        if (strstr(err, "special token"))
            tr__fail(err + strlen(err), errsz - strlen(err), " (train it with --pad_id=0 --bos_id=1 --eos_id=2 "
                     "--unk_id=3 --pad_piece=<pad> --bos_piece=<bos> --eos_piece=<eos>)");
        return -1;
    }
    memcpy(v->spm_model, model, len);
    v->spm_len = len;
    v->spm = p;
    return 0;
}

int tr_vocab_load_spm(tr_vocab *v, const char *path, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    FILE *f = fopen(path, "rb");
    if (!f) return tr__fail(err, errsz, "%s: cannot open the SentencePiece model", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *more = realloc(buf, cap *= 2);
        if (!more) free(buf);
        buf = more;
    }
    bool bad = !buf || ferror(f);
    fclose(f);
    int rc = bad ? tr__fail(err, errsz, "%s: cannot read the SentencePiece model", path)
                 : tr_vocab_from_spm(v, buf, len, path, err, errsz);
    free(buf);
    return rc;
}

int tr_vocab_copy(tr_vocab *dst, const tr_vocab *v, char *err, size_t errsz) {
    if (v->spm) return tr_vocab_from_spm(dst, v->spm_model, v->spm_len, "vocabulary", err, errsz);
    char *s = tr_vocab_to_string(v);
    if (!s) {
        memset(dst, 0, sizeof *dst);
        return tr__fail(err, errsz, "vocabulary: out of memory");
    }
    int rc = tr_vocab_from_string(dst, s, "vocabulary", err, errsz);
    free(s);
    return rc;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *tr_base64_encode(const void *data, size_t len) {
    const unsigned char *d = data;
    char *s = malloc(4 * ((len + 2) / 3) + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t x = (uint32_t)d[i] << 16 | (i + 1 < len ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < len ? d[i + 2] : 0);
        *o++ = B64[x >> 18 & 63];
        *o++ = B64[x >> 12 & 63];
        *o++ = i + 1 < len ? B64[x >> 6 & 63] : '=';
        *o++ = i + 2 < len ? B64[x & 63] : '=';
    }
    *o = 0;
    return s;
}

int tr_base64_decode(const char *s, char **out, size_t *len) {
    size_t n = strlen(s);
    *out = NULL;
    *len = 0;
    if (n % 4) return -1;
    unsigned char *b = malloc(n / 4 * 3 + 1);
    if (!b) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t x = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            const char *p = s[i + j] ? strchr(B64, s[i + j]) : NULL;
            if (s[i + j] == '=' && i + 4 == n && j >= 2 && (j == 3 || s[i + 3] == '=')) pad++;
            else if (!p || pad) {
                free(b);
                return -1;
            }
            x = x << 6 | (p ? (uint32_t)(p - B64) : 0);
        }
        b[k++] = (unsigned char)(x >> 16);
        if (pad < 2) b[k++] = (unsigned char)(x >> 8);
        if (pad < 1) b[k++] = (unsigned char)x;
    }
    *out = (char *)b;
    *len = k;
    return 0;
}
