/* attograd-translate support code: progress output (plain and terminal modes, no allocation
 * per update) and the SVG files (well-formed, escaped, written atomically). */
#include "test_util.h"

#include <dirent.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "progress.h"
#include "svg.h"
#include "translate_text_util.h"

/* ---- progress ------------------------------------------------------------------------------- */

static double fake_t;
static double fake_now(void) { return fake_t; }

/* all of f's text */
static char *slurp(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static void test_progress_plain_mode_prints_a_line_every_n_steps(void **state) {
    (void)state;
    FILE *f = tmpfile();
    tr_progress p;
    tr_progress_init(&p, f, 36);
    p.tty = false;
    p.log_every_steps = 10;
    p.log_every_seconds = 0;
    p.now = fake_now;
    /* 0.5 s and 100 tokens per step, loss = step: every window runs at 200 tok/s; the clock
     * starts at step 1, so at step 10 ETA = 26 steps · (4.5 s / 9 steps) = 13 s */
    for (int step = 1; step <= 36; step++) {
        fake_t = 0.5 * step;
        tr_progress_update(&p, (step - 1) / 12, step, step, 100, 1e-3);
    }
    tr_progress_finish(&p);
    char *s = slurp(f);
    assert_string_equal(s, "epoch 0 step 10/36  28% loss 5.5000 200 tok/s lr 1.00e-03 ETA 0:13\n"
                           "epoch 1 step 20/36  56% loss 15.5000 200 tok/s lr 1.00e-03 ETA 0:08\n"
                           "epoch 2 step 30/36  83% loss 25.5000 200 tok/s lr 1.00e-03 ETA 0:03\n"
                           "epoch 2 step 36/36 100% loss 33.5000 200 tok/s lr 1.00e-03 ETA 0:00\n");
    free(s);
    fclose(f);
}

static void test_progress_plain_mode_prints_by_time_and_ignores_nan_loss(void **state) {
    (void)state;
    FILE *f = tmpfile();
    tr_progress p;
    tr_progress_init(&p, f, 12);
    p.tty = false;
    p.log_every_steps = 0;
    p.log_every_seconds = 2;
    p.now = fake_now;
    for (int step = 1; step <= 12; step++) {
        fake_t = 0.5 * step;
        tr_progress_update(&p, 0, step, step == 3 ? NAN : step, 10, 0.5);
    }
    tr_progress_finish(&p);
    char *s = slurp(f);
    /* lines when 2 s have passed since the last: steps 5 (t 2.5) and 9 (t 4.5), then the end;
     * the first window's loss is the mean of 1, 2, 4, 5 */
    assert_string_equal(s, "epoch 0 step 5/12  42% loss 3.0000 20 tok/s lr 5.00e-01 ETA 0:04\n"
                           "epoch 0 step 9/12  75% loss 7.5000 20 tok/s lr 5.00e-01 ETA 0:02\n"
                           "epoch 0 step 12/12 100% loss 11.0000 20 tok/s lr 5.00e-01 ETA 0:00\n");
    free(s);
    fclose(f);
}

static void test_progress_terminal_mode_redraws_one_line(void **state) {
    (void)state;
    FILE *f = tmpfile();
    tr_progress p;
    tr_progress_init(&p, f, 6);
    p.tty = true;
    p.redraw_seconds = 1;
    p.now = fake_now;
    for (int step = 1; step <= 6; step++) {
        fake_t = 0.5 * step;
        tr_progress_update(&p, 0, step, 2.0, 50, 1e-4);
        if (step == 4) tr_progress_message(&p, "valid BLEU %.1f", 12.5);
    }
    tr_progress_finish(&p);
    char *s = slurp(f);
    /* drawn at step 1, 3 (1 s later), 5 (the message cleared it) and 6 (the last), then ended
     * (six carriage returns: the message's own and the last step's twice) */
    assert_memory_equal(
        s, "\repoch 0 step 1/6 [###.................]  17% loss 2.0000 0 tok/s lr 1.00e-04 ETA ?\033[K",
        strlen("\repoch 0 step 1/6 [###.................]  17% loss 2.0000 0 tok/s lr 1.00e-04 ETA ?\033[K"));
    assert_contains(s, "\r\033[Kvalid BLEU 12.5\n\repoch 0 step 5/6 [################....]  83%");
    const char *end =
        "\repoch 0 step 6/6 [####################] 100% loss 2.0000 100 tok/s lr 1.00e-04 ETA 0:00\033[K\n";
    assert_string_equal(s + strlen(s) - strlen(end), end);
    int nl = 0, cr = 0;
    for (char *c = s; *c; c++) nl += *c == '\n', cr += *c == '\r';
    assert_int_equal(nl, 2);
    assert_int_equal(cr, 6);
    free(s);
    fclose(f);
}

static void test_progress_updates_allocate_nothing(void **state) {
    (void)state;
    FILE *f = tmpfile();
    tr_progress a, b;
    tr_progress_init(&a, f, 4000);
    tr_progress_init(&b, f, 4000);
    a.tty = false;
    a.log_every_steps = 1;
    b.tty = true;
    b.redraw_seconds = 0;
    tr_progress_update(&a, 0, 1, 1.0, 10, 1e-3); /* the stream allocates its buffer once */
    tr_progress_update(&b, 0, 1, 1.0, 10, 1e-3);
    struct mallinfo2 before = mallinfo2();
    for (int step = 2; step <= 2000; step++) {
        tr_progress_update(&a, 0, step, 1.0 / step, 10, 1e-3);
        tr_progress_update(&b, 0, step, 1.0 / step, 10, 1e-3);
    }
    struct mallinfo2 after = mallinfo2();
    assert_int_equal(after.uordblks, before.uordblks);
    fclose(f);
}

static void test_durations_format_as_minutes_or_hours(void **state) {
    (void)state;
    char b[32];
    assert_string_equal(tr_format_duration(0, b, sizeof b), "0:00");
    assert_string_equal(tr_format_duration(65.4, b, sizeof b), "1:05");
    assert_string_equal(tr_format_duration(3725, b, sizeof b), "1:02:05");
    assert_string_equal(tr_format_duration(-1, b, sizeof b), "?");
    assert_string_equal(tr_format_duration(NAN, b, sizeof b), "?");
}

/* ---- SVG -------------------------------------------------------------------------------------- */

/* Minimal XML well-formedness check: balanced tags, quoted attributes, known entities, no raw
 * '<' or '&' in text, one root element named root. Fails the test with the offset on error. */
static void assert_well_formed(const char *s, const char *root) {
    const char *stack[64];
    int depth = 0, roots = 0;
    size_t lens[64];
    for (const char *p = s; *p;) {
        if (*p == '&') {
            const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
            bool ok = false;
            for (int i = 0; i < 5; i++) ok |= strncmp(p, ents[i], strlen(ents[i])) == 0;
            if (!ok) fail_msg("bad entity at offset %ld: %.20s", (long)(p - s), p);
            p++;
            continue;
        }
        if (*p != '<') {
            p++;
            continue;
        }
        if (strncmp(p, "<?", 2) == 0) {
            p = strstr(p, "?>");
            assert_non_null(p);
            p += 2;
            continue;
        }
        bool closing = p[1] == '/';
        const char *name = p + 1 + closing;
        size_t nl = strcspn(name, " \t\n/>");
        if (nl == 0) fail_msg("empty tag name at offset %ld", (long)(p - s));
        p = name + nl;
        if (closing) {
            if (*p != '>') fail_msg("junk in closing tag at offset %ld", (long)(p - s));
            if (depth == 0 || lens[depth - 1] != nl || strncmp(stack[depth - 1], name, nl) != 0)
                fail_msg("closing </%.*s> does not match at offset %ld", (int)nl, name, (long)(p - s));
            depth--;
            p++;
            continue;
        }
        for (;;) { /* attributes */
            while (*p == ' ' || *p == '\n' || *p == '\t') p++;
            if (*p == '>' || strncmp(p, "/>", 2) == 0) break;
            size_t an = strcspn(p, "= \t\n/>");
            if (an == 0 || p[an] != '=' || (p[an + 1] != '"' && p[an + 1] != '\''))
                fail_msg("bad attribute at offset %ld: %.30s", (long)(p - s), p);
            char q = p[an + 1];
            const char *v = p + an + 2, *e = strchr(v, q);
            assert_non_null(e);
            for (const char *c = v; c < e; c++)
                if (*c == '<') fail_msg("'<' in an attribute at offset %ld", (long)(c - s));
            p = e + 1;
        }
        if (depth == 0) {
            roots++;
            if (strncmp(name, root, nl) != 0 || strlen(root) != nl) fail_msg("root element is not <%s>", root);
        }
        if (*p == '/') {
            p += 2;
            continue;
        }
        assert_true(depth < 64);
        stack[depth] = name;
        lens[depth++] = nl;
        p++;
    }
    if (depth != 0) fail_msg("%d unclosed elements, innermost <%.*s>", depth, (int)lens[depth - 1], stack[depth - 1]);
    assert_int_equal(roots, 1);
}

static int count(const char *s, const char *frag) {
    int n = 0;
    for (const char *p = strstr(s, frag); p; p = strstr(p + 1, frag)) n++;
    return n;
}

static bool leftover_temp_files(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) found = true;
    closedir(d);
    return found;
}

static void test_attention_svg_is_well_formed_and_escapes_tokens(void **state) {
    (void)state;
    char path[PATH_MAX], err[TR_ERR_SIZE];
    snprintf(path, sizeof path, "%s/attn.svg", tmpdir);
    const char *src[] = {"<b>", "&", "\"q\"", "l'", "zéro", "\x01"};
    const char *tgt[] = {"<eos>", "a&b", "é"};
    enum { L = 2, Hh = 3, T = 3, S = 6 };
    double w[L * Hh * T * S];
    for (int i = 0; i < L * Hh * T * S; i++) w[i] = (i % 7) / 6.0;
    w[5] = NAN;
    w[6] = 1.5; /* clamped */
    assert_int_equal(
        tr_svg_attention(path, "seventy-one → soixante et onze", L, Hh, T, S, w, src, tgt, err, sizeof err), 0);
    char *s = read_all(path);
    assert_well_formed(s, "svg");
    assert_contains(s, "&lt;b&gt;");
    assert_contains(s, "&amp;");
    assert_contains(s, "&quot;q&quot;");
    assert_contains(s, "l&apos;");
    assert_contains(s, "&lt;eos&gt;");
    assert_contains(s, "a&amp;b");
    assert_contains(s, "zéro");
    assert_contains(s, ">?</text>"); /* the control character */
    assert_contains(s, "layer 0 head 0");
    assert_contains(s, "layer 1 head 2");
    assert_false(strstr(s, "layer 2") != NULL);
    assert_contains(s, "seventy-one → soixante et onze");
    assert_int_equal(count(s, "<title>"), L * Hh * T * S); /* one hover text per cell */
    assert_contains(s, "fill=\"#08306b\"");                /* weight 1 (and the clamped 1.5) */
    assert_contains(s, "fill=\"#ffffff\"");                /* weight 0 */
    assert_contains(s, "fill=\"#bbbbbb\"><title>&lt;eos&gt; \xe2\x86\x90 \x3f: nan"); /* NaN cell */
    assert_false(leftover_temp_files());
    free(s);
}

static void test_svg_writers_report_bad_arguments_and_unwritable_paths(void **state) {
    (void)state;
    char path[PATH_MAX], err[TR_ERR_SIZE];
    const char *tok[] = {"a"};
    double w = 0.5;
    snprintf(path, sizeof path, "%s/attn0.svg", tmpdir);
    assert_int_equal(tr_svg_attention(path, NULL, 0, 1, 1, 1, &w, tok, tok, err, sizeof err), -1);
    assert_contains(err, "attn0.svg: attention of 0 layers");
    snprintf(path, sizeof path, "%s/no-such-dir/attn.svg", tmpdir);
    assert_int_equal(tr_svg_attention(path, NULL, 1, 1, 1, 1, &w, tok, tok, err, sizeof err), -1);
    assert_contains(err, "no-such-dir/attn.svg: cannot create a temporary file next to it: No such file or directory");
    tr_svg_series bad = {"loss", &w, &w, 1, 2};
    assert_int_equal(tr_svg_curves(path, NULL, NULL, NULL, NULL, 1, &bad, err, sizeof err), -1);
    assert_contains(err, "series 0 ('loss'): bad point count, arrays or panel 2");
    double nan = NAN;
    tr_svg_series none = {"loss", &w, &nan, 1, 0};
    assert_int_equal(tr_svg_curves(path, NULL, NULL, NULL, NULL, 1, &none, err, sizeof err), -1);
    assert_contains(err, "no finite points to plot");
}

static void test_curves_svg_has_two_panels_ticks_and_broken_lines(void **state) {
    (void)state;
    char path[PATH_MAX], err[TR_ERR_SIZE];
    snprintf(path, sizeof path, "%s/curves.svg", tmpdir);
    enum { N = 200 };
    double x[N], loss[N], acc[N], vx[5] = {400, 800, 1200, 1600, 2000}, vacc[5] = {0.2, 0.45, 0.6, 0.7, 0.74};
    for (int i = 0; i < N; i++) {
        x[i] = 10.0 * (i + 1);
        loss[i] = 4.5 * exp(-x[i] / 500) + 0.3;
        acc[i] = 0.8 * (1 - exp(-x[i] / 600));
    }
    loss[100] = NAN; /* a diverged step breaks the line in two */
    tr_svg_series s[] = {
        {"train loss", x, loss, N, 0},
        {"train accuracy", x, acc, N, 1},
        {"valid accuracy <tok>", vx, vacc, 5, 1},
    };
    assert_int_equal(tr_svg_curves(path, "num-en-fr & GRU", "step", "loss", "accuracy", 3, s, err, sizeof err), 0);
    char *svg = read_all(path);
    assert_well_formed(svg, "svg");
    assert_int_equal(count(svg, "<polyline"), 2 + 1 + 1);
    assert_int_equal(count(svg, "<circle"), 5); /* the sparse validation series */
    assert_contains(svg, "num-en-fr &amp; GRU");
    assert_contains(svg, "valid accuracy &lt;tok&gt;");
    assert_contains(svg, ">step</text>");
    assert_contains(svg, ">2000</text>"); /* x ticks 0, 500, …, 2000 */
    assert_contains(svg, ">500</text>");
    assert_contains(svg, ">0.8</text>"); /* accuracy ticks 0, 0.2, …, 0.8 */
    assert_contains(svg, ">0.2</text>");
    assert_contains(svg, ">5</text>"); /* loss ticks 0 … 5 */
    assert_false(leftover_temp_files());
    free(svg);
}

static void test_write_atomic_replaces_the_file(void **state) {
    (void)state;
    char path[PATH_MAX], err[TR_ERR_SIZE];
    snprintf(path, sizeof path, "%s/atomic.txt", tmpdir);
    assert_int_equal(tr_write_atomic(path, "old contents", 12, err, sizeof err), 0);
    assert_int_equal(tr_write_atomic(path, "new", 3, err, sizeof err), 0);
    char *s = read_all(path);
    assert_string_equal(s, "new");
    free(s);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_mode & S_IRUSR);
    assert_false(leftover_temp_files());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_plain_mode_prints_a_line_every_n_steps),
        cmocka_unit_test(test_progress_plain_mode_prints_by_time_and_ignores_nan_loss),
        cmocka_unit_test(test_progress_terminal_mode_redraws_one_line),
        cmocka_unit_test(test_progress_updates_allocate_nothing),
        cmocka_unit_test(test_durations_format_as_minutes_or_hours),
        cmocka_unit_test(test_attention_svg_is_well_formed_and_escapes_tokens),
        cmocka_unit_test(test_svg_writers_report_bad_arguments_and_unwritable_paths),
        cmocka_unit_test(test_curves_svg_has_two_panels_ticks_and_broken_lines),
        cmocka_unit_test(test_write_atomic_replaces_the_file)
    };
    return cmocka_run_group_tests(tests, text_group_setup, text_group_teardown);
}
