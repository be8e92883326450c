/* Shared by data.c, batch.c and textio.c. */
#ifndef TR_DATA_INTERNAL_H
#define TR_DATA_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* Format the message into err (errsz bytes, may be 0) and return -1. */
int tr__fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Length of the well-formed UTF-8 sequence at s (n >= 1 bytes left) and its code point in *cp;
 * 0 when malformed (overlong forms, surrogates and values above U+10FFFF are malformed too). */
int tr__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

#endif
