/* Shared by data.c and batch.c. */
#ifndef TR_DATA_INTERNAL_H
#define TR_DATA_INTERNAL_H
#include <stddef.h>

/* Format the message into err (errsz bytes, may be 0) and return -1. */
int tr__fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
