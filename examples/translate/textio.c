/* Text into and out of the translate command (textio.h). */
#include "textio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"

/* ---- text ---------------------------------------------------------------------------- */

static bool is_control(uint32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0x2028 || c == 0x2029; }

/* a writer that counts everything and stores whole pieces while they fit */
typedef struct {
    char *out;
    size_t size, pos, kept; /* kept: the bytes stored */
    bool full;
} sink;

static void put(sink *w, const void *s, size_t n) {
    if (!w->full && w->pos + n < w->size) memcpy(w->out + w->pos, s, n), w->kept = w->pos + n;
    else w->full = true;
    w->pos += n;
}

static void put_hex(sink *w, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char x[5] = {'\\', 'x', "0123456789ABCDEF"[s[i] >> 4], "0123456789ABCDEF"[s[i] & 15], 0};
        put(w, x, 4);
    }
}

size_t tr_text_clean(const char *s, size_t n, tr_text_mode mode, char *out, size_t outsz) {
    sink w = {out, outsz, 0, 0, false};
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        int l = tr__utf8_next(u + i, n - i, &cp);
        bool bad = l == 0 || (mode == TR_TEXT_INPUT && cp == 0);
        size_t k = l ? (size_t)l : 1;
        if (bad && mode == TR_TEXT_ESCAPED) put_hex(&w, u + i, 1), k = 1;
        else if (bad) put(&w, TR_REPLACEMENT, sizeof TR_REPLACEMENT - 1), k = 1;
        else if (mode == TR_TEXT_INPUT || !is_control(cp)) put(&w, u + i, k);
        else if (mode == TR_TEXT_ESCAPED) put_hex(&w, u + i, k);
        i += k;
    }
    if (outsz) out[w.kept] = 0;
    return w.pos;
}

char *tr_text_clean_dup(const char *s, size_t n, tr_text_mode mode) {
    size_t len = tr_text_clean(s, n, mode, NULL, 0);
    char *t = malloc(len + 1);
    if (t) tr_text_clean(s, n, mode, t, len + 1);
    return t;
}

/* ---- lines ---------------------------------------------------------------------------- */

enum { CHUNK = 1 << 16 }; /* bytes a read asks for */

void tr_line_reader_init(tr_line_reader *r, int fd, size_t max_bytes) {
    memset(r, 0, sizeof *r);
    r->fd = fd;
    r->max_bytes = max_bytes;
}

void tr_line_reader_free(tr_line_reader *r) {
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* the line r->buf[r->start..end) returned, r->start moved past it and the newline at end */
static tr_line_status take(tr_line_reader *r, size_t end, const char **line, size_t *len) {
    size_t n = end - r->start;
    const char *s = r->buf + r->start;
    tr_line_status st = TR_LINE_OK;
    r->lineno++;
    if (r->over || n > r->max_bytes) {
        *line = NULL;
        *len = r->dropped + n;
        st = TR_LINE_LONG;
    } else {
        while (n > 0 && s[n - 1] == '\r') n--;
        *line = s;
        *len = n;
    }
    r->start = r->scanned = end < r->len ? end + 1 : end;
    r->over = false;
    r->dropped = 0;
    return st;
}

tr_line_status tr_line_next(tr_line_reader *r, bool wait, const char **line, size_t *len, char *err, size_t errsz) {
    *line = NULL;
    *len = 0;
    for (;;) {
        char *nl = r->scanned < r->len ? memchr(r->buf + r->scanned, '\n', r->len - r->scanned) : NULL;
        if (nl) return take(r, (size_t)(nl - r->buf), line, len);
        r->scanned = r->len;
        if (r->len - r->start > r->max_bytes) { /* over the bound: count the bytes, hold none */
            r->dropped += r->len - r->start;
            r->len = r->scanned = r->start;
            r->over = true;
        }
        if (r->eof) return r->len > r->start || r->over ? take(r, r->len, line, len) : TR_LINE_END;
        if (!wait) return TR_LINE_WAIT;
        /* the partial line to the front, and room for a chunk after it */
        if (r->start) memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->scanned = r->len;
        r->start = 0;
        if (r->cap - r->len < CHUNK) {
            char *more = realloc(r->buf, r->len + CHUNK);
            if (!more) return tr__fail(err, errsz, "out of memory reading a line"), TR_LINE_ERROR;
            r->buf = more;
            r->cap = r->len + CHUNK;
        }
        ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return tr__fail(err, errsz, "%s", strerror(errno)), TR_LINE_ERROR;
        if (got == 0) r->eof = true;
        r->len += (size_t)got;
    }
}
