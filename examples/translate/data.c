/* TSV corpora, tokenisation and vocabularies (encoded pairs and batches: batch.c).
 * Everything here reports failures as a status plus a message; nothing aborts. */
#include "data.h"
#include "data_internal.h"
#include "spm_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/tensor.h"

/* the message into err; returns -1 (declared in data_internal.h) */
int tr__fail(char *err, size_t errsz, const char *fmt, ...) {
    if (err && errsz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsz, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* grow *p (of *cap elements of size el) to hold at least need; false when out of memory */
static bool grow(void **p, int64_t *cap, int64_t need, size_t el) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * el);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* the UTF-8 sequence at s and its code point, 0 when malformed (declared in data_internal.h) */
int tr__utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}


static bool is_space(uint32_t c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static bool is_punct(uint32_t c) {
    if (c < 0x80)
        return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
    return c == 0xA1 || c == 0xAB || c == 0xBB || c == 0xBF || (c >= 0x2010 && c <= 0x201F) || c == 0x2026 ||
           c == 0x2039 || c == 0x203A;
}

/* ---- corpus ---------------------------------------------------------------------------- */

static const char *const bad_name[TR_NUM_BAD] = {
    "empty", "without a tab", "with more than one tab", "with invalid UTF-8", "too long", "with an empty side",
};

/* why line buf[0..len) is bad, or -1 if it is a good pair */
static int check_line(const char *buf, size_t len, char *why, size_t whysz) {
    if (len == 0) return snprintf(why, whysz, "empty line"), TR_BAD_BLANK;
    const unsigned char *u = (const unsigned char *)buf;
    int tabs = 0;
    size_t tab = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int l = tr__utf8_next(u + i, len - i, &cp);
        if (l == 0) return snprintf(why, whysz, "invalid UTF-8 at byte %zu (0x%02X)", i + 1, u[i]), TR_BAD_UTF8;
        if (cp == 0) return snprintf(why, whysz, "NUL byte at byte %zu", i + 1), TR_BAD_UTF8;
        if (cp == '\t' && tabs++ == 0) tab = i;
        i += (size_t)l;
    }
    if (tabs == 0) return snprintf(why, whysz, "no tab between source and target"), TR_BAD_NO_TAB;
    if (tabs > 1) return snprintf(why, whysz, "%d tabs, expected one between source and target", tabs), TR_BAD_TABS;
    for (int side = 0; side < 2; side++) {
        size_t i = side ? tab + 1 : 0, end = side ? len : tab;
        bool blank = true;
        while (blank && i < end) {
            uint32_t cp;
            i += (size_t)tr__utf8_next(u + i, end - i, &cp);
            blank = is_space(cp);
        }
        if (blank) return snprintf(why, whysz, "empty %s side", side ? "target" : "source"), TR_BAD_EMPTY;
    }
    return -1;
}

/* keep buf[0..len) (one tab) as pair n */
static bool add_pair(tr_corpus *c, int64_t **off, const char *buf, size_t len, int64_t lineno) {
    if (c->n + 1 > c->cap) {
        int64_t cap = c->cap;
        if (!grow((void **)&c->line, &cap, c->n + 1, sizeof(int64_t))) return false;
        int64_t *o = realloc(*off, 2 * (size_t)cap * sizeof(int64_t)); /* two offsets per pair */
        if (!o) return false;
        *off = o;
        c->cap = cap;
    }
    int64_t tcap = (int64_t)c->text_cap;
    if (!grow((void **)&c->text, &tcap, (int64_t)(c->text_len + len + 1), 1)) return false;
    c->text_cap = (size_t)tcap;
    char *t = c->text + c->text_len;
    memcpy(t, buf, len);
    t[len] = 0;
    char *tab = memchr(t, '\t', len);
    *tab = 0;
    (*off)[2 * c->n] = (int64_t)c->text_len;
    (*off)[2 * c->n + 1] = (int64_t)(c->text_len + (size_t)(tab - t) + 1);
    c->line[c->n++] = lineno;
    c->text_len += len + 1;
    return true;
}

/* The next line of f without its \n into buf (up to maxb + 1 bytes, room for a \r after maxb;
 * *longer when it had more), counting its bytes into *total; returns '\n' or EOF. */
static int read_line(FILE *f, char *buf, size_t maxb, size_t *len, bool *longer, size_t *total) {
    int ch;
    while ((ch = getc(f)) != EOF && ch != '\n') {
        ++*total;
        if (*len < maxb + 1) buf[(*len)++] = (char)ch;
        else *longer = true;
    }
    if (ch == '\n') ++*total;
    return ch;
}

/* A CRLF line's \r and the first line's UTF-8 byte order mark go, counted in c. */
static void strip_line_ends(tr_corpus *c, char *buf, size_t *len, bool longer, int64_t lineno) {
    if (*len > 0 && buf[*len - 1] == '\r' && !longer) {
        --*len;
        if (c->crlf_lines++ == 0) c->first_crlf_line = lineno;
    }
    if (lineno == 1 && *len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        memmove(buf, buf + 3, *len - 3);
        *len -= 3;
        c->bom = true;
    }
}

int tr_corpus_read(tr_corpus *c, const char *path, const tr_read_opts *opts, char *err, size_t errsz) {
    memset(c, 0, sizeof *c);
    c->path = path;
    size_t maxb = opts && opts->max_line_bytes ? opts->max_line_bytes : 4096;
    bool strict = opts && opts->strict;
    FILE *f = fopen(path, "rb");
    if (!f) return tr__fail(err, errsz, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(maxb + 2);
    int64_t *off = NULL;
    int rc = -1;
    if (!buf) {
        tr__fail(err, errsz, "%s: out of memory", path);
        goto done;
    }
    size_t total = 0;
    for (;;) {
        size_t len = 0;
        bool longer = false;
        int ch = read_line(f, buf, maxb, &len, &longer, &total);
        if (ferror(f)) {
            tr__fail(err, errsz, "%s: read error: %s", path, strerror(errno));
            goto done;
        }
        if (ch == EOF && len == 0 && !longer) break;
        int64_t lineno = ++c->lines;
        if (ch == EOF) c->no_final_newline = true;
        strip_line_ends(c, buf, &len, longer, lineno);
        char why[96];
        int kind;
        if (longer || len > maxb) {
            snprintf(why, sizeof why, "line longer than %zu bytes (raise the line length limit)", maxb);
            kind = TR_BAD_LONG;
        } else {
            kind = check_line(buf, len, why, sizeof why);
        }
        if (kind >= 0) {
            if (strict) {
                tr__fail(err, errsz, "%s:%lld: %s", path, (long long)lineno, why);
                goto done;
            }
            if (c->bad_count[kind]++ == 0)
                snprintf(c->first_bad[kind], sizeof c->first_bad[kind], "%s:%lld: %s", path, (long long)lineno, why);
            c->skipped++;
        } else if (!add_pair(c, &off, buf, len, lineno)) {
            tr__fail(err, errsz, "%s:%lld: out of memory", path, (long long)lineno);
            goto done;
        }
        if (ch == EOF) break;
    }
    if (total == 0) {
        tr__fail(err, errsz, "%s: file is empty", path);
        goto done;
    }
    if (c->n == 0) {
        char s[TR_ERR_SIZE];
        tr_corpus_skip_summary(c, s, sizeof s);
        tr__fail(err, errsz, "%s: no valid pairs (%s)", path, s);
        goto done;
    }
    c->src = malloc((size_t)c->n * sizeof(char *));
    c->tgt = malloc((size_t)c->n * sizeof(char *));
    if (!c->src || !c->tgt) {
        tr__fail(err, errsz, "%s: out of memory", path);
        goto done;
    }
    for (int64_t i = 0; i < c->n; i++) c->src[i] = c->text + off[2 * i], c->tgt[i] = c->text + off[2 * i + 1];
    rc = 0;
done:
    fclose(f);
    free(buf);
    free(off);
    if (rc) {
        tr_corpus_free(c);
        c->path = path;
    }
    return rc;
}

void tr_corpus_free(tr_corpus *c) {
    free(c->src);
    free(c->tgt);
    free(c->line);
    free(c->text);
    memset(c, 0, sizeof *c);
}

int tr_corpus_skip_summary(const tr_corpus *c, char *buf, size_t n) {
    if (n) buf[0] = 0;
    if (c->skipped == 0) return 0;
    size_t pos = (size_t)snprintf(buf, n, "skipped %lld of %lld lines", (long long)c->skipped, (long long)c->lines);
    const char *sep = ": ";
    for (int k = 0; k < TR_NUM_BAD; k++) {
        if (!c->bad_count[k]) continue;
        pos += (size_t)snprintf(pos < n ? buf + pos : NULL, pos < n ? n - pos : 0, "%s%lld %s (first: %s)", sep,
                                (long long)c->bad_count[k], bad_name[k], c->first_bad[k]);
        sep = "; ";
    }
    return (int)pos;
}

int tr_corpus_note_summary(const tr_corpus *c, char *buf, size_t n) {
    if (n) buf[0] = 0;
    const char *path = c->path ? c->path : "corpus", *sep = "";
    size_t pos = 0;
#define NOTE(...) (pos += (size_t)snprintf(pos < n ? buf + pos : NULL, pos < n ? n - pos : 0, __VA_ARGS__), sep = "; ")
    if (c->bom) NOTE("%s%s:1: byte order mark removed", sep, path);
    if (c->crlf_lines)
        NOTE("%s%s:%lld: CRLF line ending, %lld lines like it (\\r removed)", sep, path, (long long)c->first_crlf_line,
             (long long)c->crlf_lines);
    if (c->no_final_newline) NOTE("%s%s:%lld: no newline at the end of the file", sep, path, (long long)c->lines);
#undef NOTE
    return (int)pos;
}

/* ---- tokens ---------------------------------------------------------------------------- */

/* The token starting at or after *pos in s[0..n), advancing *pos past it; false at the end. */
static bool next_token(const char *s, size_t n, size_t *pos, tr_tok_mode mode, tr_span *tok) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = *pos;
    uint32_t cp = 0;
    int l = 0;
    for (; i < n; i += (size_t)l) { /* skip whitespace (in TR_CHARS it is a token) */
        l = tr__utf8_next(u + i, n - i, &cp);
        if (l == 0 || !is_space(cp) || mode == TR_CHARS) break;
    }
    if (i >= n) return *pos = n, false;
    size_t start = i;
    if (l == 0 || mode == TR_CHARS || is_punct(cp)) {
        i += l ? (size_t)l : 1;
        if (l && mode == TR_CHARS && is_space(cp)) {
            *tok = (tr_span){TR_SPACE_TOKEN, (int)sizeof TR_SPACE_TOKEN - 1};
            return *pos = i, true;
        }
    } else {
        while (i < n && (l = tr__utf8_next(u + i, n - i, &cp)) && !is_space(cp) && !is_punct(cp)) i += (size_t)l;
    }
    *tok = (tr_span){s + start, (int)(i - start)};
    *pos = i;
    return true;
}

int tr_tokenize(const char *text, tr_tok_mode mode, tr_span *out, int max) {
    size_t n = strlen(text), pos = 0;
    int count = 0;
    tr_span t;
    while (next_token(text, n, &pos, mode, &t)) {
        if (count < max) out[count] = t;
        count++;
    }
    return count;
}

static bool span_is(tr_span t, const char *const *set) {
    for (; *set; set++)
        if ((size_t)t.len == strlen(*set) && memcmp(t.s, *set, (size_t)t.len) == 0) return true;
    return false;
}

static const char *const joiners[] = {"-", "'", "\xe2\x80\x99", "/", NULL};
static const char *const closers[] = {
    ",", ".", ";", ":", "!", "?", ")", "]", "}", "%", "\xe2\x80\xa6", "\xc2\xbb", "\xe2\x80\x9d", NULL};
static const char *const openers[] = {"(", "[", "{", "\xc2\xab", "\xe2\x80\x9c", "\xc2\xbf", "\xc2\xa1", NULL};

/* detokenising writer: counts everything, stores what fits */
typedef struct {
    char *out;
    size_t size, pos;
    tr_tok_mode mode;
    tr_span prev;
    bool has_prev;
} writer;

static void put(writer *w, const char *s, size_t len) {
    if (w->pos < w->size) {
        size_t k = w->size - 1 - w->pos < len ? w->size - 1 - w->pos : len;
        memcpy(w->out + w->pos, s, k);
    }
    w->pos += len;
}

static void emit(writer *w, tr_span t) {
    if (w->mode == TR_CHARS) {
        if (span_is(t, (const char *const[]){TR_SPACE_TOKEN, NULL})) put(w, " ", 1);
        else put(w, t.s, (size_t)t.len);
        return;
    }
    if (w->has_prev && !span_is(w->prev, joiners) && !span_is(w->prev, openers) && !span_is(t, joiners) &&
        !span_is(t, closers))
        put(w, " ", 1);
    put(w, t.s, (size_t)t.len);
    w->prev = t;
    w->has_prev = true;
}

static size_t finish(writer *w) {
    if (w->size) w->out[w->pos < w->size ? w->pos : w->size - 1] = 0;
    return w->pos;
}

size_t tr_detokenize(const tr_span *toks, int n, tr_tok_mode mode, char *out, size_t outsz) {
    writer w = {out, outsz, 0, mode, {0}, false};
    for (int i = 0; i < n; i++) emit(&w, toks[i]);
    return finish(&w);
}

/* ---- vocabularies ------------------------------------------------------------------------ */

static const char *const specials[TR_NUM_SPECIALS] = {"<pad>", "<bos>", "<eos>", "<unk>"};

static uint64_t hash(const char *s, int len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* slot of (s,len) in v's table: holding its id, or empty (-1) where it would go */
static int32_t *vocab_slot(const tr_vocab *v, const char *s, int len) {
    for (uint64_t i = hash(s, len);; i++) {
        int32_t *slot = &v->slot[i & (uint64_t)(v->nslot - 1)];
        if (*slot < 0) return slot;
        const char *t = v->token[*slot];
        if (strncmp(t, s, (size_t)len) == 0 && t[len] == 0) return slot; /* memcmp would read past a shorter t */
    }
}

int tr_vocab_id(const tr_vocab *v, const char *tok, int len) {
    if (!v->nslot) return TR_UNK;
    int32_t id = *vocab_slot(v, tok, len);
    return id < 0 ? TR_UNK : id;
}

/* Make v from n tokens; names messages with name and reports a duplicate by its line. */
static int vocab_make(tr_vocab *v, int n, const tr_span *toks, const char *name, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += (size_t)toks[i].len + 1;
    v->nslot = 16;
    while (v->nslot < 2 * n) v->nslot *= 2;
    v->text = malloc(bytes ? bytes : 1);
    v->token = malloc((size_t)n * sizeof(char *));
    v->slot = malloc((size_t)v->nslot * sizeof(int32_t));
    if (!v->text || !v->token || !v->slot) {
        tr_vocab_free(v);
        return tr__fail(err, errsz, "%s: out of memory", name);
    }
    memset(v->slot, 0xff, (size_t)v->nslot * sizeof(int32_t));
    char *p = v->text;
    for (int i = 0; i < n; i++) {
        memcpy(p, toks[i].s, (size_t)toks[i].len);
        p[toks[i].len] = 0;
        v->token[i] = p;
        p += toks[i].len + 1;
        int32_t *slot = vocab_slot(v, toks[i].s, toks[i].len);
        if (*slot >= 0) {
            int prev = *slot;
            tr_vocab_free(v);
            return tr__fail(err, errsz, "%s:%d: duplicate token '%.*s' (also line %d)", name, i + 1,
                        toks[i].len > 60 ? 60 : toks[i].len, toks[i].s, prev + 1);
        }
        *slot = i;
        v->size = i + 1;
    }
    return 0;
}

typedef struct {
    const char *s;
    int len;
    int64_t count;
} tok_count;

static int by_count_then_bytes(const void *pa, const void *pb) {
    const tok_count *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    int c = memcmp(a->s, b->s, (size_t)(a->len < b->len ? a->len : b->len));
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

int tr_vocab_build(tr_vocab *v, const tr_corpus *c, int sides, tr_tok_mode mode, int min_count, char *err,
                   size_t errsz) {
    memset(v, 0, sizeof *v);
    const char *name = c->path ? c->path : "corpus";
    tok_count *tc = NULL;
    int32_t *slot = NULL;
    tr_span *list = NULL;
    int64_t n = 0, cap = 0, nslot = 0;
    int rc = -1;
    for (int64_t i = 0; i < c->n; i++)
        for (int side = 0; side < 2; side++) {
            if (!(sides & (side ? TR_SIDE_TGT : TR_SIDE_SRC))) continue;
            const char *s = side ? c->tgt[i] : c->src[i];
            size_t len = strlen(s), pos = 0;
            tr_span t;
            while (next_token(s, len, &pos, mode, &t)) {
                if (2 * (n + 1) > nslot) { /* rehash into a table twice as big */
                    int64_t ns = nslot ? 2 * nslot : 1024;
                    int32_t *s2 = malloc((size_t)ns * sizeof(int32_t));
                    if (!s2) goto oom;
                    memset(s2, 0xff, (size_t)ns * sizeof(int32_t));
                    for (int64_t k = 0; k < n; k++) {
                        uint64_t h = hash(tc[k].s, tc[k].len);
                        while (s2[h & (uint64_t)(ns - 1)] >= 0) h++;
                        s2[h & (uint64_t)(ns - 1)] = (int32_t)k;
                    }
                    free(slot);
                    slot = s2;
                    nslot = ns;
                }
                uint64_t h = hash(t.s, t.len);
                int32_t *sl;
                for (;; h++) {
                    sl = &slot[h & (uint64_t)(nslot - 1)];
                    if (*sl < 0 || (tc[*sl].len == t.len && memcmp(tc[*sl].s, t.s, (size_t)t.len) == 0)) break;
                }
                if (*sl >= 0) {
                    tc[*sl].count++;
                    continue;
                }
                if (!grow((void **)&tc, &cap, n + 1, sizeof *tc)) goto oom;
                tc[n] = (tok_count){t.s, t.len, 1};
                *sl = (int32_t)n++;
            }
        }
    qsort(tc, (size_t)n, sizeof *tc, by_count_then_bytes);
    list = malloc((size_t)(n + TR_NUM_SPECIALS) * sizeof *list);
    if (!list) goto oom;
    int k = 0;
    for (; k < TR_NUM_SPECIALS; k++) list[k] = (tr_span){specials[k], (int)strlen(specials[k])};
    for (int64_t i = 0; i < n && tc[i].count >= (min_count > 1 ? min_count : 1); i++)
        list[k++] = (tr_span){tc[i].s, tc[i].len};
    rc = vocab_make(v, k, list, name, err, errsz);
    goto done;
oom:
    tr__fail(err, errsz, "%s: out of memory building the vocabulary", name);
done:
    free(tc);
    free(slot);
    free(list);
    return rc;
}

void tr_vocab_free(tr_vocab *v) {
    tr_spm_free(v->spm);
    free(v->spm_model);
    free(v->token);
    free(v->slot);
    free(v->text);
    memset(v, 0, sizeof *v);
}

char *tr_vocab_to_string(const tr_vocab *v) {
    size_t bytes = 1;
    for (int i = 0; i < v->size; i++) bytes += strlen(v->token[i]) + 1;
    char *s = malloc(bytes), *p = s;
    if (!s) return NULL;
    for (int i = 0; i < v->size; i++) {
        size_t l = strlen(v->token[i]);
        memcpy(p, v->token[i], l);
        p += l;
        *p++ = '\n';
    }
    if (p > s) p--; /* joined: no newline after the last token */
    *p = 0;
    return s;
}

int tr_vocab_from_string(tr_vocab *v, const char *s, const char *name, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') n--;
    if (n == 0) return tr__fail(err, errsz, "%s: empty vocabulary", name);
    int count = 1;
    for (size_t i = 0; i < n; i++) count += s[i] == '\n';
    tr_span *list = malloc((size_t)count * sizeof *list);
    if (!list) return tr__fail(err, errsz, "%s: out of memory", name);
    int k = 0;
    for (size_t i = 0; i <= n; k++) {
        const char *e = memchr(s + i, '\n', n - i);
        size_t len = e ? (size_t)(e - (s + i)) : n - i;
        list[k] = (tr_span){s + i, (int)len};
        i += len + 1;
    }
    for (k = 0; k < count; k++) {
        const unsigned char *u = (const unsigned char *)list[k].s;
        const char *bad = NULL;
        uint32_t cp = 0;
        for (int i = 0; i < list[k].len && !bad;) {
            int l = tr__utf8_next(u + i, (size_t)(list[k].len - i), &cp);
            if (!l) bad = "invalid UTF-8";
            else if (cp == '\r' || cp == '\t' || cp == 0) bad = "a tab or carriage return in a token";
            i += l;
        }
        if (list[k].len == 0) bad = "empty token";
        int rc = 0;
        if (bad) rc = tr__fail(err, errsz, "%s:%d: %s", name, k + 1, bad);
        else if (k < TR_NUM_SPECIALS && !span_is(list[k], (const char *const[]){specials[k], NULL}))
            rc = tr__fail(err, errsz, "%s:%d: expected the special token %s as id %d, found '%.*s'", name, k + 1,
                      specials[k], k, list[k].len > 60 ? 60 : list[k].len, list[k].s);
        if (rc) {
            free(list);
            return rc;
        }
    }
    if (count < TR_NUM_SPECIALS) {
        free(list);
        return tr__fail(err, errsz, "%s: %d lines, expected at least the %d special tokens", name, count, TR_NUM_SPECIALS);
    }
    int rc = vocab_make(v, count, list, name, err, errsz);
    free(list);
    return rc;
}

int tr_vocab_save(const tr_vocab *v, const char *path, char *err, size_t errsz) {
    char *s = tr_vocab_to_string(v);
    if (!s) return tr__fail(err, errsz, "%s: out of memory", path);
    size_t n = strlen(s);
    s[n] = '\n'; /* the terminator's byte becomes the final newline */
    int rc = tr_write_atomic(path, s, n + 1, err, errsz);
    free(s);
    return rc;
}

int tr_vocab_load(tr_vocab *v, const char *path, char *err, size_t errsz) {
    memset(v, 0, sizeof *v);
    FILE *f = fopen(path, "rb");
    if (!f) return tr__fail(err, errsz, "%s: cannot open: %s", path, strerror(errno));
    char *s = NULL;
    int64_t cap = 0, n = 0;
    size_t got;
    do {
        if (!grow((void **)&s, &cap, n + 65536 + 1, 1)) {
            fclose(f);
            free(s);
            return tr__fail(err, errsz, "%s: out of memory", path);
        }
        got = fread(s + n, 1, 65536, f);
        n += (int64_t)got;
    } while (got > 0);
    int rc;
    if (ferror(f)) rc = tr__fail(err, errsz, "%s: read error: %s", path, strerror(errno));
    else if (memchr(s, 0, (size_t)n)) rc = tr__fail(err, errsz, "%s: NUL byte in a vocabulary file", path);
    else if (n == 0) rc = tr__fail(err, errsz, "%s: file is empty", path);
    else s[n] = 0, rc = tr_vocab_from_string(v, s, path, err, errsz);
    fclose(f);
    free(s);
    return rc;
}

int tr_vocab_encode(const tr_vocab *v, const char *text, tr_tok_mode mode, int64_t *ids, int max) {
    if (v->spm) {
        int k = tr_spm_encode(v->spm, text, ids, max);
        if (k >= 0) return k;
        if (max > 0) ids[0] = TR_UNK; /* SentencePiece refused the text (not UTF-8) */
        return 1;
    }
    size_t n = strlen(text), pos = 0;
    int count = 0;
    tr_span t;
    while (next_token(text, n, &pos, mode, &t)) {
        if (count < max) ids[count] = tr_vocab_id(v, t.s, t.len);
        count++;
    }
    return count;
}

size_t tr_vocab_decode(const tr_vocab *v, const int64_t *ids, int n, tr_tok_mode mode, char *out, size_t outsz) {
    if (v->spm) { /* the sentence's ids without <pad> and <bos>, up to <eos> */
        int k = 0;
        for (int i = 0; i < n && ids[i] != TR_EOS; i++) k += ids[i] != TR_PAD && ids[i] != TR_BOS;
        int64_t *sent = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
        if (!sent) {
            if (outsz) *out = 0;
            return 0;
        }
        k = 0;
        for (int i = 0; i < n && ids[i] != TR_EOS; i++)
            if (ids[i] != TR_PAD && ids[i] != TR_BOS) sent[k++] = ids[i];
        size_t len = tr_spm_decode(v->spm, sent, k, out, outsz);
        free(sent);
        return len;
    }
    writer w = {out, outsz, 0, mode, {0}, false};
    for (int i = 0; i < n && ids[i] != TR_EOS; i++) {
        if (ids[i] == TR_PAD || ids[i] == TR_BOS) continue;
        const char *t = ids[i] >= 0 && ids[i] < v->size ? v->token[ids[i]] : specials[TR_UNK];
        emit(&w, (tr_span){t, (int)strlen(t)});
    }
    return finish(&w);
}

int tr_ids_len(const int64_t *ids, int n) {
    int i = 0;
    while (i < n && ids[i] != TR_EOS && ids[i] != TR_PAD) i++;
    return i;
}
