/* attograd-translate's text in and out: exactly one output line per input line whatever the
 * input (random bytes, NUL, CRLF, empty lines, no final newline) and whatever a barely trained
 * model emits (byte pieces that decode to control characters); a line over --max-input-tokens
 * answered by an empty line and a message while the lines around it translate as when alone; a
 * 20 MiB line read in bounded memory; stdout that cannot be written gives status 1. The text
 * functions and the bounded line reader (textio.h) are checked directly first, on hand-worked
 * examples. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "textio.h"
#include "translate_run.h"

extern char **environ;

/* a tiny subword model trained for 2 steps: nearly random, so it emits byte pieces */
static const char *model(void) {
    static const char *ck;
    if (!ck) ck = tt_tiny_model("run", 12345, "spm", "2");
    return ck;
}

/* the translation of sentence given alone, as an argument (malloc'd, without its newline) */
static char *alone(const char *sentence) {
    static char *said[8][2]; /* sentences translated before, and their translations */
    for (int i = 0; i < 8 && said[i][0]; i++)
        if (strcmp(said[i][0], sentence) == 0) return strdup(said[i][1]);
    assert_status(RUN("translate", "--checkpoint", model(), sentence), 0);
    size_t n = strlen(tt.out);
    assert_true(n > 0 && tt.out[n - 1] == '\n' && memchr(tt.out, '\n', n - 1) == NULL);
    for (int i = 0; i < 8; i++)
        if (!said[i][0]) {
            said[i][0] = strdup(sentence);
            said[i][1] = strndup(tt.out, n - 1);
            break;
        }
    return strndup(tt.out, n - 1);
}

/* the number of lines a reader of text[0..n) sees: newlines, and a last line without one */
static int lines_in(const char *text, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += text[i] == '\n';
    return k + (n > 0 && text[n - 1] != '\n');
}

/* Fails unless s is valid UTF-8 whose only control character is the newline (decoded here,
 * independently of textio.c). */
static void assert_printable_lines(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i];) {
        unsigned c = u[i];
        int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || c == 0xC0 || c == 0xC1 || c > 0xF4) fail_msg("invalid UTF-8 byte 0x%02X at %zu", c, i);
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len; k++) {
            if ((u[i + k] & 0xC0) != 0x80) fail_msg("invalid UTF-8 at byte %zu", i);
            cp = cp << 6 | (u[i + k] & 0x3F);
        }
        if ((cp < 0x20 && cp != '\n') || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029)
            fail_msg("control character U+%04X at byte %zu of the output", cp, i);
        i += (size_t)len;
    }
}

static int group_setup(void **state) { return tt_begin("translate-io"); }

static int group_teardown(void **state) {
    tt_end();
    return 0;
}

/* ---- textio.h ---- */

static void test_text_clean_drops_or_escapes_control_characters_and_replaces_invalid_utf8(void **state) {
    /* tab, LF, CR, FF, ESC, DEL, C1 NEL (C2 85), U+2028 (E2 80 A8), a lone 0xFF, a cut 3-byte
     * sequence (E2 82) at the end; é (C3 A9) and € (E2 82 AC) are kept */
    const char in[] = "a\tb\nc\rd\fe\x1b[1m\x7f\xc2\x85\xc3\xa9\xe2\x80\xa8\xe2\x82\xac\xff!\xe2\x82";
    size_t n = sizeof in - 1;
    char out[200];
    size_t len = tr_text_clean(in, n, TR_TEXT_LINE, out, sizeof out);
    assert_int_equal(len, strlen(out));
    assert_string_equal(out, "abcde[1m\xc3\xa9\xe2\x82\xac" TR_REPLACEMENT "!" TR_REPLACEMENT TR_REPLACEMENT);
    tr_text_clean(in, n, TR_TEXT_ESCAPED, out, sizeof out);
    assert_string_equal(out, "a\\x09b\\x0Ac\\x0Dd\\x0Ce\\x1B[1m\\x7F\\xC2\\x85\xc3\xa9\\xE2\\x80\\xA8\xe2\x82\xac\\xFF!"
                             "\\xE2\\x82");
    /* input: only NUL and invalid bytes change; the tokenizer sees the rest as it is */
    const char nul[] = "a\0b\tc\xff";
    assert_int_equal(tr_text_clean(nul, sizeof nul - 1, TR_TEXT_INPUT, out, sizeof out), 10);
    assert_memory_equal(out, "a" TR_REPLACEMENT "b\tc" TR_REPLACEMENT, 11);
    /* a short buffer holds whole characters only, and the full length is returned */
    assert_int_equal(tr_text_clean("ab\xe2\x82\xac", 5, TR_TEXT_LINE, out, 4), 5);
    assert_string_equal(out, "ab");
    assert_int_equal(tr_text_clean("\x01\x02", 2, TR_TEXT_LINE, NULL, 0), 0);
}

/* r's next line, expected to be want (NULL: a TR_LINE_LONG of want_len bytes) */
static void expect_line(tr_line_reader *r, bool wait, const char *want, size_t want_len) {
    const char *s;
    size_t len;
    char err[TR_ERR_SIZE];
    tr_line_status st = tr_line_next(r, wait, &s, &len, err, sizeof err);
    assert_int_equal(st, want ? TR_LINE_OK : TR_LINE_LONG);
    assert_int_equal(len, want ? strlen(want) : want_len);
    if (want) assert_memory_equal(s, want, len);
}

static void test_line_reader_holds_at_most_its_bound_and_measures_longer_lines(void **state) {
    const char *s;
    size_t len;
    char err[TR_ERR_SIZE];
    /* a file: CRLF, an empty line, a line just at the bound, one over it in the same read, one
     * of 200 000 bytes over several reads, a NUL kept in its line, a last line without newline */
    enum { BIG = 200000 };
    char *text = malloc(BIG + 64);
    size_t n = (size_t)sprintf(text, "ab\r\n\n12345678\n123456789\n");
    memset(text + n, 'x', BIG);
    n += BIG;
    memcpy(text + n, "\nz\0y\nlast", 9);
    n += 9;
    const char *path = tt_in_dir("lines.txt");
    tt_write_file(path, text, n);
    free(text);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    tr_line_reader r;
    tr_line_reader_init(&r, fd, 8);
    expect_line(&r, true, "ab", 0);
    expect_line(&r, false, "", 0);
    expect_line(&r, false, "12345678", 0);
    expect_line(&r, false, NULL, 9);
    expect_line(&r, true, NULL, BIG);
    assert_true(r.cap <= 8 + (1 << 16)); /* the bound and one read, not the 200 000 bytes */
    assert_int_equal(tr_line_next(&r, true, &s, &len, err, sizeof err), TR_LINE_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "z\0y", 3);
    expect_line(&r, true, "last", 0);
    assert_int_equal(r.lineno, 7);
    assert_int_equal(tr_line_next(&r, true, &s, &len, err, sizeof err), TR_LINE_END);
    tr_line_reader_free(&r);
    close(fd);
    /* a pipe: without wait nothing is read; a line is returned once its newline came */
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    tr_line_reader_init(&r, p[0], 8);
    assert_int_equal(write(p[1], "one\ntw", 6), 6);
    assert_int_equal(tr_line_next(&r, false, &s, &len, err, sizeof err), TR_LINE_WAIT);
    expect_line(&r, true, "one", 0);
    assert_int_equal(tr_line_next(&r, false, &s, &len, err, sizeof err), TR_LINE_WAIT);
    assert_int_equal(write(p[1], "o\n", 2), 2);
    close(p[1]);
    expect_line(&r, true, "two", 0);
    assert_int_equal(tr_line_next(&r, true, &s, &len, err, sizeof err), TR_LINE_END);
    tr_line_reader_free(&r);
    close(p[0]);
}

/* ---- the program ---- */

static void test_random_bytes_on_stdin_give_one_printable_line_per_input_line(void **state) {
    const char *ck = model();
    /* 24 KiB from a fixed-seed generator: NUL, CR, form feed, invalid UTF-8, ~95 lines */
    enum { N = 24 << 10 };
    char *in = malloc(N + 1);
    uint32_t x = 20261127u;
    for (int i = 0; i < N; i++) x = x * 1664525u + 1013904223u, in[i] = (char)(x >> 24);
    in[N] = 0;
    const char *path = tt_in_dir("random.bin");
    tt_write_file(path, in, N);
    int fds[3] = {tt_open_in_dir("random.bin", O_RDONLY), tt_open_in_dir("random.out", O_WRONLY | O_CREAT | O_TRUNC),
                  tt_open_in_dir("random.err", O_WRONLY | O_CREAT | O_TRUNC)};
    pid_t pid = tt_spawn((const char *[]){"translate", "--checkpoint", ck, NULL}, fds);
    for (int i = 0; i < 3; i++) close(fds[i]);
    assert_int_equal(tt_wait(pid, 120), 0);
    size_t n;
    char *out = tt_read_file(tt_in_dir("random.out"), &n);
    assert_non_null(out);
    int want = lines_in(in, N);
    assert_true(want > 80);
    assert_int_equal(strlen(out), n); /* no NUL either */
    assert_int_equal(lines_in(out, n), want);
    assert_true(n > 0 && out[n - 1] == '\n');
    assert_printable_lines(out);
    free(out);
    free(in);
}

static void test_crlf_nul_empty_and_unterminated_lines_each_give_one_line(void **state) {
    const char *ck = model();
    char *abc = alone("a b c"), *bc = alone("b c"), *nul = alone("a b" TR_REPLACEMENT "c");
    /* CRLF as LF; an empty and a blank line: an empty line, the model not run; a NUL read as
     * U+FFFD; a last line without newline */
    const char in[] = "a b c\r\n\n  \t \na b\0c\nb c";
    int fds[3] = {-1, tt_open_in_dir("edge.out", O_WRONLY | O_CREAT | O_TRUNC),
                  tt_open_in_dir("edge.err", O_WRONLY | O_CREAT | O_TRUNC)};
    tt_write_file(tt_in_dir("edge.in"), in, sizeof in - 1);
    fds[0] = tt_open_in_dir("edge.in", O_RDONLY);
    pid_t pid = tt_spawn((const char *[]){"translate", "--checkpoint", ck, NULL}, fds);
    for (int i = 0; i < 3; i++) close(fds[i]);
    assert_int_equal(tt_wait(pid, 60), 0);
    char *out = tt_read_file(tt_in_dir("edge.out"), NULL), want[2048];
    snprintf(want, sizeof want, "%s\n\n\n%s\n%s\n", abc, nul, bc);
    assert_string_equal(out, want);
    free(out);
    free(abc);
    free(bc);
    free(nul);
}

static void test_a_line_over_the_limit_gets_an_empty_line_and_its_neighbours_translate_as_alone(void **state) {
    const char *ck = model();
    char *abc = alone("a b c"), *bc = alone("b c");
    /* --max-input-tokens 8: 10 words are more than 8 pieces; 200 bytes more than 8 * 16 */
    char words[] = "a b c d e f a b c d", bytes[201];
    memset(bytes, 'a', 200);
    bytes[200] = 0;
    char in[512], want[1024];
    snprintf(in, sizeof in, "a b c\n%s\n%s\nb c\n", words, bytes);
    snprintf(want, sizeof want, "%s\n\n\n%s\n", abc, bc);
    assert_status(RUN_STDIN(in, "translate", "--checkpoint", ck, "--max-input-tokens", "8"), 0);
    assert_string_equal(tt.out, want);
    const char *pieces = strstr(tt.err, "attograd-translate: stdin:2: ");
    assert_non_null(pieces);
    int count = atoi(pieces + strlen("attograd-translate: stdin:2: "));
    assert_true(count >= 10 && count <= 20); /* a piece or two per one-letter word */
    char msg[1024];
    snprintf(msg, sizeof msg,
             "attograd-translate: stdin:2: %d pieces, more than --max-input-tokens 8: not translated, an empty line "
             "stands for it\n"
             "attograd-translate: stdin:3: 200 bytes, more than the 128 that --max-input-tokens 8 allows (16 a "
             "token): not translated, an empty line stands for it\n",
             count);
    assert_string_equal(tt.err, msg);
    /* the same as arguments */
    assert_status(RUN("translate", "--checkpoint", ck, "--max-input-tokens", "8", "a b c", words, bytes, "b c"), 0);
    assert_string_equal(tt.out, want);
    assert_contains(tt.err, "attograd-translate: argument 2: ");
    assert_contains(tt.err, "attograd-translate: argument 3: 200 bytes, more than the 128");
    /* the default limit takes both */
    assert_status(RUN_STDIN(in, "translate", "--checkpoint", ck), 0);
    assert_int_equal(tt_count(tt.out, "\n"), 4);
    assert_not_contains(tt.err, "--max-input-tokens");
    /* the option's range */
    assert_status(RUN("translate", "--checkpoint", ck, "--max-input-tokens", "0"), 2);
    assert_contains(tt.err, "--max-input-tokens expects an integer from 1 to 65536, got '0'");
    assert_status(RUN("translate", "--checkpoint", ck, "--max-input-tokens", "65537"), 2);
    free(abc);
    free(bc);
}

static void test_a_20_mib_line_is_refused_in_bounded_memory(void **state) {
    const char *ck = model();
    char *abc = alone("a b c"), *bc = alone("b c");
    enum { BIG = 20 << 20 };
    char *in = malloc(BIG + 16);
    memcpy(in, "a b c\n", 6);
    memset(in + 6, 'x', BIG);
    memcpy(in + 6 + BIG, "\nb c\n", 6);
    char want[1024];
    snprintf(want, sizeof want, "%s\n\n%s\n", abc, bc);
    const char *msg = "attograd-translate: stdin:2: 20971520 bytes, more than the 65536 that --max-input-tokens "
                      "4096 allows (16 a token): not translated, an empty line stands for it\n";
    assert_status(RUN_STDIN("a b c\n\nb c\n", "translate", "--checkpoint", ck), 0);
    long short_rss = tt.maxrss_kib;
    assert_status(RUN_STDIN(in, "translate", "--checkpoint", ck), 0);
    assert_string_equal(tt.out, want);
    assert_string_equal(tt.err, msg);
    /* the peak memory of the run with the line grows by far less than the line */
    if (tt.maxrss_kib - short_rss > 4096)
        fail_msg("peak memory %ld KiB with the 20 MiB line, %ld KiB without", tt.maxrss_kib, short_rss);
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer reserves terabytes of address space */
    /* under a 768 MiB address-space limit (holding and tokenizing the line needs gigabytes) */
    tt.as_limit_kib = 768 << 10;
    int status = RUN_STDIN(in, "translate", "--checkpoint", ck);
    tt.as_limit_kib = 0;
    assert_status(status, 0);
    assert_string_equal(tt.out, want);
    assert_string_equal(tt.err, msg);
#endif
    /* eval: the pair is skipped and said to be, its neighbours evaluated, memory as small */
    memcpy(in, "a b\tB A\n", 8);
    memset(in + 8, 'x', BIG);
    memcpy(in + 8 + BIG, "\tX\nc\tC\n", 7);
    const char *tsv = tt_in_dir("long.tsv");
    tt_write_file(tsv, in, BIG + 15);
    assert_status(RUN("eval", "--checkpoint", ck, "--data", tsv), 0);
    char note[1024];
    snprintf(note, sizeof note, "%s: 2 pairs, loss ", tsv);
    assert_true(strncmp(tt.out, note, strlen(note)) == 0);
    snprintf(note, sizeof note, "%s: skipped 1 of 3 lines: 1 too long (first: %s:2: line longer than 4096 bytes", tsv,
             tsv);
    assert_contains(tt.err, note);
    if (tt.maxrss_kib - short_rss > 4096) fail_msg("eval's peak memory %ld KiB with the 20 MiB line", tt.maxrss_kib);
    free(in);
    free(abc);
    free(bc);
}

/* Start the program with stdin from the file stdin_name in the directory (NULL: /dev/null),
 * stdout to out_fd and stderr into io.err; its status, its stderr in tt.err. With sigpipe_default
 * the child gets SIGPIPE's default action back (the harness ignores it, and children inherit that). */
static int run_to(int out_fd, const char *stdin_name, bool sigpipe_default, const char *const *args) {
    const char *argv[16] = {tt.bin};
    int n = 1;
    for (; *args; args++) argv[n++] = *args;
    argv[n] = NULL;
    int in = stdin_name ? tt_open_in_dir(stdin_name, O_RDONLY) : open("/dev/null", O_RDONLY | O_CLOEXEC);
    int err = tt_open_in_dir("io.err", O_WRONLY | O_CREAT | O_TRUNC);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    if (sigpipe_default) sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, tt.bin, &fa, &at, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in);
    close(err);
    int status = tt_wait(pid, 60);
    free(tt.err);
    tt.err = tt_read_file(tt_in_dir("io.err"), NULL);
    return status;
}

static void test_stdout_that_cannot_be_written_gives_status_1_and_a_message(void **state) {
    const char *ck = model(), *full = "attograd-translate: writing stdout: No space left on device\n";
    tt_write_text(tt_in_dir("three.in"), "a b c\nb c\nc\n");
    tt_write_text(tt_in_dir("pairs.tsv"), "a b\tB A\nc\tC\n");
    const char *const runs[][8] = {
        {"translate", "--checkpoint", ck, "a b c", NULL},
        {"translate", "--checkpoint", ck, NULL},
        {"eval", "--checkpoint", ck, "--data", tt_in_dir("pairs.tsv"), NULL},
        {"translate", "--help", NULL},
        {"attention", "--checkpoint", ck, "--out", tt_in_dir("a.svg"), "a b", NULL},
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        int out = open("/dev/full", O_WRONLY | O_CLOEXEC);
        assert_true(out >= 0);
        int status = run_to(out, i == 1 ? "three.in" : NULL, false, runs[i]);
        close(out);
        if (status != 1 || !strstr(tt.err, full))
            fail_msg("%s %s to /dev/full: status %d, stderr:\n%s", runs[i][0], runs[i][1], status, tt.err);
    }
    /* a closed pipe: with SIGPIPE ignored, the write error is said; by default SIGPIPE ends the
     * program silently, as it ends any filter in a pipeline whose reader has gone */
    for (int dflt = 0; dflt < 2; dflt++) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        close(p[0]);
        int status = run_to(p[1], "three.in", dflt, (const char *[]){"translate", "--checkpoint", ck, NULL});
        close(p[1]);
        if (dflt) {
            assert_int_equal(status, 128 + SIGPIPE);
            assert_string_equal(tt.err, "");
        } else {
            assert_int_equal(status, 1);
            assert_string_equal(tt.err, "attograd-translate: writing stdout: Broken pipe\n");
        }
    }
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
int main(void) {
    const struct CMUnitTest tests[] = {
        TEST(test_text_clean_drops_or_escapes_control_characters_and_replaces_invalid_utf8),
        TEST(test_line_reader_holds_at_most_its_bound_and_measures_longer_lines),
        TEST(test_random_bytes_on_stdin_give_one_printable_line_per_input_line),
        TEST(test_crlf_nul_empty_and_unterminated_lines_each_give_one_line),
        TEST(test_a_line_over_the_limit_gets_an_empty_line_and_its_neighbours_translate_as_alone),
        TEST(test_a_20_mib_line_is_refused_in_bounded_memory),
        TEST(test_stdout_that_cannot_be_written_gives_status_1_and_a_message),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
