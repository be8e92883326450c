/* What the tests run under mpirun share: CHECK, which on failure prints "rank R: file:line:
 * check failed: ..." and exits 1 (mpirun then stops the other ranks). The including file
 * defines `static int rank`. */
#ifndef AG_TESTS_DIST_CHECK_H
#define AG_TESTS_DIST_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank, __FILE__, __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                                             \
            fprintf(stderr, "\n");                                                                                    \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

#endif
