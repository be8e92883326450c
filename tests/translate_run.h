/* What the attograd-translate test programs share (test_translate_cli_*, _tool and _spm): the
 * program under test, a temporary directory for the files of their runs, running the program as
 * a user does (a child process with its stdout and stderr kept) and checks on what it printed.
 * A cmocka group setup calls tt_begin, its teardown tt_end. */
#ifndef AG_TESTS_TRANSLATE_RUN_H
#define AG_TESTS_TRANSLATE_RUN_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct {
    const char *bin;    /* AG_TRANSLATE_BIN */
    char dir[256];      /* the temporary directory */
    char *out, *err;    /* stdout and stderr of the last finished run */
    long as_limit_kib;  /* > 0: runs start under `ulimit -v` of this many KiB (RLIMIT_AS) */
    long maxrss_kib;    /* peak resident memory of the last run tt_wait waited for */
} tt_harness;
extern tt_harness tt;

/* tt.bin from the environment and a new directory $TMPDIR/ag-<name>-XXXXXX; -1 after saying
 * why either failed. SIGPIPE is ignored: a child that died early must fail a write, not end the
 * test. */
int tt_begin(const char *name);
/* the directory removed, and what the harness holds freed */
void tt_end(void);

/* tt.dir/name, kept until tt_end */
const char *tt_in_dir(const char *name);
void tt_write_file(const char *path, const void *data, size_t len);
void tt_write_text(const char *path, const char *text);
/* open(tt.dir/name, flags | O_CLOEXEC, 0644), failing the test when it cannot */
int tt_open_in_dir(const char *name, int flags);
/* the whole file as a malloc'd string (NULL if it cannot be read); its length in *len when len
 * is not NULL */
char *tt_read_file(const char *path, size_t *len);
/* occurrences of needle in hay */
int tt_count(const char *hay, const char *needle);
/* the points of svg's index-th <polyline> (up to 4096): *n x and y coordinates, malloc'd;
 * fails the test when there is no such polyline */
void tt_polyline(const char *svg, int index, double **x, double **y, int *n);
/* seconds on the monotonic clock */
double tt_now(void);

/* Start tt.bin with args (NULL-terminated); fds[0..2] become its stdin, stdout and stderr (the
 * caller closes its own copies). */
pid_t tt_spawn(const char *const *args, const int fds[3]);
/* pid's exit status, or 128 + the signal that ended it (as a shell reports it), and its peak
 * memory in tt.maxrss_kib; killed, and the test failed, after timeout seconds */
int tt_wait(pid_t pid, double timeout);
/* Start tt.bin with args, stdin from stdin_text (NULL: /dev/null), stdout and stderr into
 * tt.dir/stdout.txt and tt.dir/stderr.txt. */
pid_t tt_start(const char *stdin_text, const char *const *args);
/* tt_wait, then the output into tt.out and tt.err; fails on a sanitizer's report (undefined
 * behaviour in a sanitized build does not change the exit status) */
int tt_finish(pid_t pid, double timeout);
/* a run to its end (at most 120 s) */
int tt_run(const char *stdin_text, const char *const *args);
#define RUN(...) tt_run(NULL, (const char *[]){__VA_ARGS__, NULL})
#define RUN_STDIN(text, ...) tt_run((text), (const char *[]){__VA_ARGS__, NULL})

/* A tiny Transformer (d_model 16, 1 layer, batches of 8, 1 thread) trained by the program for
 * steps steps on a toy corpus of 40 pairs drawn with seed, cut by tokenizer ("word", "spm"), in
 * tt.dir/name (the corpus in tt.dir/name.tsv); its best.h5, kept until tt_end. Fails the test when
 * the run fails. */
const char *tt_tiny_model(const char *name, unsigned seed, const char *tokenizer, const char *steps);

/* fails showing the last run's output unless status is expected */
#define assert_status(status, expected) tt_assert_status_(__FILE__, __LINE__, (status), (expected))
void tt_assert_status_(const char *file, int line, int status, int expected);
/* fails showing hay unless it contains needle (or, not_contains, unless it does not) */
#define assert_contains(hay, needle) tt_assert_contains_(__FILE__, __LINE__, (hay), (needle), #hay, true)
#define assert_not_contains(hay, needle) tt_assert_contains_(__FILE__, __LINE__, (hay), (needle), #hay, false)
void tt_assert_contains_(const char *file, int line, const char *hay, const char *needle, const char *what,
                         bool want);
#endif
