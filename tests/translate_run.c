/* The attograd-translate test programs' harness (translate_run.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "translate_run.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

tt_harness tt;
static char **paths; /* tt_in_dir's strings */
static int npaths;

int tt_begin(const char *name) {
    tt.bin = getenv("AG_TRANSLATE_BIN");
    if (!tt.bin || !*tt.bin) {
        print_error("AG_TRANSLATE_BIN is not set (meson test sets it)\n");
        return -1;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(tt.dir, sizeof tt.dir, "%s/ag-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (!mkdtemp(tt.dir)) {
        print_error("mkdtemp %s: %s\n", tt.dir, strerror(errno));
        return -1;
    }
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void tt_end(void) {
    nftw(tt.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tt.out);
    free(tt.err);
    tt.out = tt.err = NULL;
    for (int i = 0; i < npaths; i++) free(paths[i]);
    free(paths);
    paths = NULL;
    npaths = 0;
}

/* ---- files ---- */

const char *tt_in_dir(const char *name) {
    size_t n = strlen(tt.dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", tt.dir, name);
    paths = realloc(paths, sizeof *paths * (size_t)(npaths + 1));
    return paths[npaths++] = p;
}

void tt_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s: %s", path, strerror(errno));
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

void tt_write_text(const char *path, const char *text) { tt_write_file(path, text, strlen(text)); }

char *tt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, cap = 1 << 16, k;
    char *s = malloc(cap);
    while ((k = fread(s + n, 1, cap - n - 1, f)) > 0)
        if ((n += k) + 1 == cap) s = realloc(s, cap *= 2);
    s[n] = 0;
    fclose(f);
    if (len) *len = n;
    return s;
}

int tt_count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

void tt_polyline(const char *svg, int index, double **x, double **y, int *n) {
    const char *p = svg;
    for (int k = 0; k <= index; k++) {
        p = strstr(p, "<polyline");
        if (!p) fail_msg("no polyline %d", index);
        p++;
    }
    p = strstr(p, "points=\"") + strlen("points=\"");
    const char *end = strchr(p, '"');
    *x = malloc(sizeof(double) * 4096);
    *y = malloc(sizeof(double) * 4096);
    *n = 0;
    while (p < end && *n < 4096) {
        int used;
        if (sscanf(p, "%lf,%lf %n", &(*x)[*n], &(*y)[*n], &used) != 2) break;
        ++*n;
        p += used;
    }
}

double tt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- running the program ---- */

pid_t tt_spawn(const char *const *args, const int fds[3]) {
    const char *argv[64];
    char limit[80];
    int n = 0;
    if (tt.as_limit_kib > 0) { /* a shell sets the limit for the program it then becomes */
        snprintf(limit, sizeof limit, "ulimit -v %ld && exec \"$0\" \"$@\"", tt.as_limit_kib);
        argv[n++] = "sh";
        argv[n++] = "-c";
        argv[n++] = limit;
    }
    argv[n++] = tt.bin;
    for (; *args; args++) {
        assert_true(n < 63);
        argv[n++] = *args;
    }
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; i < 3; i++) posix_spawn_file_actions_adddup2(&fa, fds[i], i);
    pid_t pid;
    int rc = posix_spawn(&pid, tt.as_limit_kib > 0 ? "/bin/sh" : tt.bin, &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) fail_msg("cannot start %s: %s", tt.bin, strerror(rc));
    return pid;
}

int tt_wait(pid_t pid, double timeout) {
    int ws, got;
    struct rusage ru = {0};
    double t0 = tt_now();
    while ((got = wait4(pid, &ws, WNOHANG, &ru)) == 0 && tt_now() - t0 < timeout)
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &ws, 0);
        fail_msg("%s did not finish within %.0f s", tt.bin, timeout);
    }
    tt.maxrss_kib = ru.ru_maxrss;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

int tt_open_in_dir(const char *name, int flags) {
    int fd = open(tt_in_dir(name), flags | O_CLOEXEC, 0644);
    if (fd < 0) fail_msg("cannot open %s/%s: %s", tt.dir, name, strerror(errno));
    return fd;
}

pid_t tt_start(const char *stdin_text, const char *const *args) {
    if (stdin_text) tt_write_text(tt_in_dir("stdin.txt"), stdin_text);
    int fds[3] = {stdin_text ? tt_open_in_dir("stdin.txt", O_RDONLY) : open("/dev/null", O_RDONLY | O_CLOEXEC),
                  tt_open_in_dir("stdout.txt", O_WRONLY | O_CREAT | O_TRUNC),
                  tt_open_in_dir("stderr.txt", O_WRONLY | O_CREAT | O_TRUNC)};
    pid_t pid = tt_spawn(args, fds);
    for (int i = 0; i < 3; i++) close(fds[i]);
    return pid;
}

int tt_finish(pid_t pid, double timeout) {
    int status = tt_wait(pid, timeout);
    free(tt.out);
    free(tt.err);
    tt.out = tt_read_file(tt_in_dir("stdout.txt"), NULL);
    tt.err = tt_read_file(tt_in_dir("stderr.txt"), NULL);
    assert_non_null(tt.out);
    assert_non_null(tt.err);
    if (strstr(tt.err, "runtime error: ") || strstr(tt.err, "Sanitizer"))
        fail_msg("%s reported a sanitizer error:\n%s", tt.bin, tt.err);
    return status;
}

int tt_run(const char *stdin_text, const char *const *args) { return tt_finish(tt_start(stdin_text, args), 120); }

/* ---- checks ---- */

void tt_assert_status_(const char *file, int line, int status, int expected) {
    if (status == expected) return;
    print_error("%s:%d: exit status %d, expected %d\n--- stdout:\n%s\n--- stderr:\n%s\n", file, line, status,
                expected, tt.out ? tt.out : "", tt.err ? tt.err : "");
    fail();
}

void tt_assert_contains_(const char *file, int line, const char *hay, const char *needle, const char *what,
                         bool want) {
    if ((hay && strstr(hay, needle) != NULL) == want) return;
    print_error("%s:%d: %s %s '%s'; it is:\n%s\n", file, line, what, want ? "does not contain" : "contains", needle,
                hay ? hay : "(null)");
    fail();
}

const char *tt_tiny_model(const char *name, unsigned seed, const char *tokenizer, const char *steps) {
    char file[256];
    snprintf(file, sizeof file, "%s.tsv", name);
    const char *corpus = tt_in_dir(file), *out = tt_in_dir(name);
    tu_write_toy_corpus(corpus, 40, seed);
    assert_status(RUN("train", "--train", corpus, "--out", out, "--d-model", "16", "--heads", "2", "--layers", "1",
                      "--ff", "32", "--batch", "8", "--max-eval", "8", "--threads", "1", "--seed", "1", "--tokenizer",
                      tokenizer, "--steps", steps, "--eval-every", steps),
                  0);
    snprintf(file, sizeof file, "%s/best.h5", name);
    return tt_in_dir(file);
}
