/* One trainer per --out: attograd-translate train holds an flock on OUT/lock with its pid. A
 * second trainer on the folder is refused naming the first's pid, before it writes anything
 * there; the lock goes with its holder however that ends (a normal exit, Ctrl-C, SIGKILL). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "translate_run.h"

#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "8", "--max-eval", "8", \
             "--threads", "1", "--seed", "1", "--tokenizer", "word", "--eval-every", "3", "--save-every", "3"

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

/* A trainer on out that runs until stopped, its stderr in tt.dir/<name>.err; returns once it
 * holds the lock (OUT/lock says its pid) and has saved OUT/last.h5 */
static pid_t start_holder(const char *out, const char *name) {
    char err[64], lock[600], last[600], want[32];
    snprintf(err, sizeof err, "%s.err", name);
    int fds[3] = {open("/dev/null", O_RDONLY | O_CLOEXEC), open("/dev/null", O_WRONLY | O_CLOEXEC),
                  tt_open_in_dir(err, O_WRONLY | O_CREAT | O_TRUNC)};
    pid_t pid = tt_spawn((const char *[]){"train", "--train", toy(), "--out", out, TINY, "--steps", "1000000", NULL},
                         fds);
    for (int i = 0; i < 3; i++) close(fds[i]);
    snprintf(lock, sizeof lock, "%s/lock", out);
    snprintf(last, sizeof last, "%s/last.h5", out);
    snprintf(want, sizeof want, "%ld\n", (long)pid);
    double t0 = tt_now();
    for (;;) {
        char *text = tt_read_file(lock, NULL);
        bool held = text && strcmp(text, want) == 0 && access(last, F_OK) == 0;
        free(text);
        if (held) return pid;
        if (tt_now() - t0 > 60) {
            kill(pid, SIGKILL);
            tt_wait(pid, 10);
            fail_msg("no %s saying pid %ld and %s within 60 s", lock, (long)pid, last);
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
}

/* every entry of dir but "..", with its inode, size and modification time, one a line */
static char *listing(const char *dir) {
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    s[0] = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        char path[1024];
        struct stat st;
        if (strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0) continue;
        if (len + 1200 > cap) s = realloc(s, cap *= 2);
        len += (size_t)snprintf(s + len, cap - len, "%s %lu %lld %lld.%09ld\n", e->d_name, (unsigned long)st.st_ino,
                                (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    }
    closedir(d);
    return s;
}

/* The first trainer is stopped (SIGSTOP) while the second tries, so that the folder can only
 * change by the second's doing: it must not. */
static void test_a_second_trainer_on_the_same_out_is_refused_naming_the_first_and_writing_nothing(void **state) {
    const char *out = tt_in_dir("shared");
    pid_t first = start_holder(out, "first");
    kill(first, SIGSTOP);
    char *before = listing(out);
    int status = RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "6");
    char *after = listing(out);
    kill(first, SIGCONT);
    kill(first, SIGTERM);
    int first_status = tt_wait(first, 60);
    assert_status(status, 1);
    char want[700];
    snprintf(want, sizeof want, "attograd-translate: %s is in use by another trainer (pid %ld): give another --out, "
             "or stop that one first\n", out, (long)first);
    assert_string_equal(tt.err, want); /* one line, and nothing before it */
    assert_string_equal(before, after);
    free(before);
    free(after);
    /* the first went on undisturbed: stopped by SIGTERM after a step, its checkpoint its own */
    assert_int_equal(first_status, 130);
    char *err = tt_read_file(tt_in_dir("first.err"), NULL);
    assert_contains(err, "interrupted at step ");
    free(err);
    /* released at that exit: the folder is free again */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "3"), 0);
}

/* the kernel drops a killed trainer's flock: no stale lock, though OUT/lock still names it */
static void test_a_killed_trainer_leaves_no_stale_lock(void **state) {
    const char *out = tt_in_dir("killed");
    pid_t first = start_holder(out, "killed");
    kill(first, SIGKILL);
    assert_int_equal(tt_wait(first, 60), 128 + SIGKILL);
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "3"), 0);
    assert_not_contains(tt.err, "in use");
    /* and a run that ended normally left it free for the next, --resume here */
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "6", "--resume"), 0);
    assert_contains(tt.err, "at step 3");
}

/* a folder that cannot hold the lock file is the unwritable folder it is */
static void test_an_out_where_the_lock_cannot_be_made_says_it_cannot_be_written(void **state) {
    const char *out = tt_in_dir("not-a-folder");
    tt_write_text(out, "a file");
    assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "3"), 1);
    char want[600];
    snprintf(want, sizeof want, "attograd-translate: cannot write checkpoints to %s: ", out);
    assert_contains(tt.err, want);
    assert_int_equal(tt_count(tt.err, "\n"), 1);
}

static int group_setup(void **state) { return tt_begin("translate-lock"); }

static int group_teardown(void **state) {
    tt_end();
    return 0;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_a_second_trainer_on_the_same_out_is_refused_naming_the_first_and_writing_nothing),
        TEST(test_a_killed_trainer_leaves_no_stale_lock),
        TEST(test_an_out_where_the_lock_cannot_be_made_says_it_cannot_be_written),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
