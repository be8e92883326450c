/* attograd-translate: text from the outside world into the translate command and out of it.
 * Lines are read within a byte bound (a longer line is measured and dropped as it streams past,
 * never held), and text is made what its destination can take: a C string for the tokenizer,
 * one printable line for stdout, an escaped word for a message. Conventions of data.h. */
#ifndef TR_TEXTIO_H
#define TR_TEXTIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* ---- text ---------------------------------------------------------------------------- */
/* What tr_text_clean makes of s. The control characters are C0 (U+0000-U+001F: tab, newline,
 * carriage return and form feed among them), DEL (U+007F), C1 (U+0080-U+009F) and the line and
 * paragraph separators U+2028 and U+2029: every character that some reader takes as a line end
 * or a terminal as a command. */
typedef enum {
    TR_TEXT_INPUT,   /* NUL bytes and invalid UTF-8 bytes become U+FFFD, the rest stays as it is */
    TR_TEXT_LINE,    /* invalid UTF-8 bytes become U+FFFD, control characters are dropped */
    TR_TEXT_ESCAPED, /* invalid UTF-8 bytes and the bytes of control characters become \xNN */
} tr_text_mode;

/* UTF-8 replacement character U+FFFD */
#define TR_REPLACEMENT "\xef\xbf\xbd"

/* The n bytes at s made valid UTF-8 as mode says, into out: at most outsz-1 bytes, never a
 * partial character, and a NUL (out may be NULL when outsz is 0). Returns the full length. */
size_t tr_text_clean(const char *s, size_t n, tr_text_mode mode, char *out, size_t outsz);
/* The same into a malloc'd string; NULL when out of memory. */
char *tr_text_clean_dup(const char *s, size_t n, tr_text_mode mode);

/* ---- lines ---------------------------------------------------------------------------- */
/* Lines of a file descriptor, each without its "\n" and the "\r"s before it; a last line
 * without a newline is a line. At most max_bytes of a line are held: a longer one is counted
 * as it is read and dropped, so memory stays within max_bytes and a read chunk. */
typedef struct {
    int fd;
    size_t max_bytes;
    int64_t lineno; /* 1-based number of the line last returned */
    /* internal */
    char *buf;
    size_t cap, len, start, scanned, dropped;
    bool eof, over;
} tr_line_reader;

typedef enum {
    TR_LINE_OK,    /* a line: *line, *len */
    TR_LINE_LONG,  /* a line of more than max_bytes bytes: *len its length, *line NULL */
    TR_LINE_WAIT,  /* no complete line is held and wait was false */
    TR_LINE_END,   /* the end of the input, every line returned */
    TR_LINE_ERROR, /* a read failed or memory ran out: the message in err */
} tr_line_status;

void tr_line_reader_init(tr_line_reader *r, int fd, size_t max_bytes);
void tr_line_reader_free(tr_line_reader *r);
/* The next line. With wait false it never reads: a line it returns comes from what is held, and
 * the lines returned since the last call with wait true stay where they are. With wait true it
 * reads (blocking) until a line is complete, and earlier lines' pointers become invalid. */
tr_line_status tr_line_next(tr_line_reader *r, bool wait, const char **line, size_t *len, char *err, size_t errsz);

#endif
