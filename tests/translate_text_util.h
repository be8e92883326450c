/* What the tests of attograd-translate's support code (tests/test_translate_text_*.c) share: a
 * temporary directory per test group and whole-file writes and reads in it. */
#ifndef AG_TESTS_TRANSLATE_TEXT_UTIL_H
#define AG_TESTS_TRANSLATE_TEXT_UTIL_H
#include <stdbool.h>
#include <stddef.h>

#include "data.h"

/* the group's directory: made by text_group_setup (with tu_setup), emptied and removed by
 * text_group_teardown */
extern char tmpdir[64];
int text_group_setup(void **state);
int text_group_teardown(void **state);

/* write len bytes to a fresh file in tmpdir named name; returns its path (static buffer) */
const char *write_file(const char *name, const char *data, size_t len);
#define WRITE(name, literal) write_file((name), (literal), sizeof(literal) - 1)
/* fails unless s contains frag */
void assert_contains(const char *s, const char *frag);
/* a whole file as a string (malloc'd); fails the test if it cannot be read */
char *read_all(const char *path);
/* tr_corpus_read of path (strict or not, lines up to maxb bytes) with err cleared first */
int read_corpus(tr_corpus *c, const char *path, bool strict, size_t maxb, char *err);
#endif
