/* attograd-translate support code: corpus reading, tokenisation, vocabularies, batching,
 * progress output, SVG files, and checks of the shipped num-en-fr data set.
 *
 * The data set is found through the environment variable AG_SOURCE_ROOT (the source tree), else
 * two directories above this executable (build/tests), else relative to the working directory.
 * Not finding it is a failure, never a skip. */
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

#include "data.h"
#include "progress.h"
#include "svg.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static char tmpdir[64];

static int group_setup(void **state) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tr_text_XXXXXX");
    if (!mkdtemp(tmpdir)) return -1;
    return tu_setup(state);
}

static int group_teardown(void **state) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[PATH_MAX];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name), unlink(p);
    if (d) closedir(d);
    rmdir(tmpdir);
    return tu_teardown(state);
}

/* write len bytes to a fresh file in tmpdir named name; returns its path (static buffer) */
static const char *write_file(const char *name, const char *data, size_t len) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}
#define WRITE(name, literal) write_file((name), (literal), sizeof(literal) - 1)

static void assert_contains(const char *s, const char *frag) {
    if (!strstr(s, frag)) fail_msg("'%s' does not contain '%s'", s, frag);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* tokens of text as one string joined by '|', for compact expectations */
static const char *toks(const char *text, tr_tok_mode mode) {
    static char out[1024];
    tr_span sp[128];
    int n = tr_tokenize(text, mode, sp, 128);
    assert_true(n <= 128);
    size_t pos = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++)
        pos += (size_t)snprintf(out + pos, sizeof out - pos, "%s%.*s", i ? "|" : "", sp[i].len, sp[i].s);
    return out;
}

static const char *roundtrip(const char *text, tr_tok_mode mode) {
    static char out[1024];
    tr_span sp[256];
    int n = tr_tokenize(text, mode, sp, 256);
    assert_true(n <= 256);
    assert_true(tr_detokenize(sp, n, mode, out, sizeof out) < sizeof out);
    return out;
}

static const char *source_root(void) {
    static char root[PATH_MAX + 8];
    const char *rel = "examples/translate/data/num-en-fr/train.tsv";
    char p[PATH_MAX * 2];
    const char *env = getenv("AG_SOURCE_ROOT");
    if (env) {
        snprintf(p, sizeof p, "%s/%s", env, rel);
        if (access(p, R_OK) != 0) fail_msg("AG_SOURCE_ROOT=%s but %s is not readable", env, p);
        return env;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        *strrchr(exe, '/') = 0;
        snprintf(root, sizeof root, "%s/../..", exe);
        snprintf(p, sizeof p, "%s/%s", root, rel);
        if (access(p, R_OK) == 0) return root;
    }
    const char *cands[] = {".", "..", "../..", "../../.."};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", cands[i], rel);
        if (access(p, R_OK) == 0) return cands[i];
    }
    fail_msg("cannot find %s: set AG_SOURCE_ROOT to the source tree", rel);
    return NULL;
}

static void read_shipped(tr_corpus *c, const char *name) {
    char path[PATH_MAX + 64], err[TR_ERR_SIZE];
    snprintf(path, sizeof path, "%s/examples/translate/data/num-en-fr/%s", source_root(), name);
    tr_read_opts strict = {.strict = true};
    if (tr_corpus_read(c, path, &strict, err, sizeof err) != 0) fail_msg("%s", err);
}

/* ---- tokenisation ------------------------------------------------------------------------- */

static void test_word_tokens_split_hyphens_and_punctuation(void **state) {
    (void)state;
    assert_string_equal(toks("seventy-one", TR_WORDS), "seventy|-|one");
    assert_string_equal(toks("quatre-vingt-dix", TR_WORDS), "quatre|-|vingt|-|dix");
    assert_string_equal(toks("hello, world.", TR_WORDS), "hello|,|world|.");
    assert_string_equal(toks("  two\t thousand,  one ", TR_WORDS), "two|thousand|,|one");
    assert_string_equal(toks("(a+b)=c?!", TR_WORDS), "(|a|+|b|)|=|c|?|!");
    assert_string_equal(toks("", TR_WORDS), "");
    assert_string_equal(toks(" \t ", TR_WORDS), "");
}

static void test_word_tokens_keep_accented_letters_and_split_unicode_punctuation(void **state) {
    (void)state;
    assert_string_equal(toks("zéro", TR_WORDS), "zéro");
    assert_string_equal(toks("déjà-vu à l’école", TR_WORDS), "déjà|-|vu|à|l|’|école");
    assert_string_equal(toks("«\xc2\xa0Ça va\xe2\x80\xaf?\xc2\xa0»", TR_WORDS), "«|Ça|va|?|»"); /* NBSP, NNBSP */
    assert_string_equal(toks("Straße…", TR_WORDS), "Straße|…");
}

static void test_char_tokens_are_code_points_with_visible_spaces(void **state) {
    (void)state;
    assert_string_equal(toks("é a€😀", TR_CHARS), "é|▁|a|€|😀");
    tr_span sp[8];
    assert_int_equal(tr_tokenize("é a€😀", TR_CHARS, sp, 8), 5);
    assert_int_equal(sp[0].len, 2);
    assert_int_equal(sp[1].len, 3); /* ▁ U+2581 */
    assert_int_equal(sp[3].len, 3);
    assert_int_equal(sp[4].len, 4);
    assert_string_equal(toks("vingt et un", TR_CHARS), "v|i|n|g|t|▁|e|t|▁|u|n");
    /* a malformed byte is a token of its own instead of swallowing its neighbours */
    assert_string_equal(toks("a\xff"
                             "b",
                             TR_CHARS),
                        "a|\xff|b");
}

static void test_tokenize_counts_beyond_max_and_writes_only_max(void **state) {
    (void)state;
    tr_span sp[3] = {{NULL, -7}, {NULL, -7}, {NULL, -7}};
    assert_int_equal(tr_tokenize("one two three four", TR_WORDS, sp, 2), 4);
    assert_int_equal(sp[1].len, 3);
    assert_int_equal(sp[2].len, -7);
    assert_int_equal(tr_tokenize("one two three four", TR_WORDS, NULL, 0), 4);
}

static void test_detokenize_inverts_conventional_spacing(void **state) {
    (void)state;
    const char *cases[] = {
        "seventy-one",
        "quatre-vingt-dix-neuf mille",
        "hello, world.",
        "He said (quietly): don't go!",
        "nine hundred and ninety-nine thousand, nine hundred and ninety-nine",
        "l’école, c’est fini…",
        "50% of 1/2",
        "zéro",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        assert_string_equal(roundtrip(cases[i], TR_WORDS), cases[i]);
        assert_string_equal(roundtrip(cases[i], TR_CHARS), cases[i]);
    }
    /* spacing that the conventions do not produce is normalised */
    assert_string_equal(roundtrip("a  -  b ,c", TR_WORDS), "a-b, c");
}

static void test_detokenize_truncates_like_snprintf(void **state) {
    (void)state;
    tr_span sp[4];
    int n = tr_tokenize("seventy-one thousand", TR_WORDS, sp, 4);
    char out[8];
    assert_int_equal(tr_detokenize(sp, n, TR_WORDS, out, sizeof out), strlen("seventy-one thousand"));
    assert_string_equal(out, "seventy");
    assert_int_equal(tr_detokenize(sp, n, TR_WORDS, NULL, 0), 20);
}

/* ---- reading corpora: every defect with its file and line ----------------------------------- */

static int read_corpus(tr_corpus *c, const char *path, bool strict, size_t maxb, char *err) {
    tr_read_opts o = {.strict = strict, .max_line_bytes = maxb};
    err[0] = 0;
    return tr_corpus_read(c, path, &o, err, TR_ERR_SIZE);
}

static void test_corpus_missing_and_empty_files_fail_with_path(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], path[PATH_MAX];
    snprintf(path, sizeof path, "%s/no-such.tsv", tmpdir);
    assert_int_equal(read_corpus(&c, path, false, 0, err), -1);
    assert_contains(err, "no-such.tsv: cannot open: No such file or directory");
    assert_int_equal(read_corpus(&c, WRITE("empty.tsv", ""), false, 0, err), -1);
    assert_contains(err, "empty.tsv: file is empty");
    assert_int_equal(read_corpus(&c, tmpdir, false, 0, err), -1); /* a directory */
    assert_contains(err, tmpdir);
    assert_contains(err, "Is a directory");
    tr_corpus_free(&c);
}

/* One bad line among good ones: lenient mode skips and counts it, strict mode fails on it. */
static void check_bad_line(const char *name, const char *data, size_t len, size_t maxb, int kind, const char *what,
                           int64_t lineno, int64_t good) {
    const char *path = write_file(name, data, len);
    char expect[PATH_MAX + 128], err[TR_ERR_SIZE];
    snprintf(expect, sizeof expect, "%s:%lld: %s", path, (long long)lineno, what);
    tr_corpus c;
    assert_int_equal(read_corpus(&c, path, false, maxb, err), 0);
    assert_int_equal(c.n, good);
    assert_int_equal(c.skipped, 1);
    assert_int_equal(c.bad_count[kind], 1);
    assert_contains(c.first_bad[kind], expect);
    char sum[TR_ERR_SIZE];
    assert_true(tr_corpus_skip_summary(&c, sum, sizeof sum) > 0);
    assert_contains(sum, "skipped 1 of");
    assert_contains(sum, expect);
    tr_corpus_free(&c);
    assert_int_equal(read_corpus(&c, path, true, maxb, err), -1);
    assert_contains(err, expect);
    tr_corpus_free(&c);
}
#define BAD(name, literal, maxb, kind, what, line, good) \
    check_bad_line((name), (literal), sizeof(literal) - 1, (maxb), (kind), (what), (line), (good))

static void test_corpus_bad_lines_are_named_by_file_and_line(void **state) {
    (void)state;
    BAD("notab.tsv", "one\tun\ntwo deux\nthree\ttrois\n", 0, TR_BAD_NO_TAB, "no tab between source and target", 2, 2);
    BAD("tabs.tsv", "one\tun\ntwo\tdeux\nthree\ttrois\tdrei\n", 0, TR_BAD_TABS, "2 tabs, expected one", 3, 2);
    BAD("utf8.tsv", "one\tun\nz\xc3\x28ro\tz\xc3\xa9ro\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 2 (0xC3)", 2, 1);
    BAD("overlong.tsv", "\xc0\xaf\tx\none\tun\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 1 (0xC0)", 1, 1);
    BAD("surrogate.tsv", "one\tun\na\t\xed\xa0\x80\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 3 (0xED)", 2, 1);
    BAD("truncated.tsv", "one\tun\nab\t\xe2\x82\n", 0, TR_BAD_UTF8, "invalid UTF-8 at byte 4 (0xE2)", 2, 1);
    BAD("nul.tsv", "one\tun\ntw\0o\tdeux\n", 0, TR_BAD_UTF8, "NUL byte at byte 3", 2, 1);
    BAD("long.tsv", "0123\t5678\n0123\t56789\n", 9, TR_BAD_LONG, "line longer than 9 bytes", 2, 1);
    BAD("emptysrc.tsv", "one\tun\n \tdeux\n", 0, TR_BAD_EMPTY, "empty source side", 2, 1);
    BAD("emptytgt.tsv", "one\tun\ntwo\t\xc2\xa0\n", 0, TR_BAD_EMPTY, "empty target side", 2, 1);
    BAD("blank.tsv", "one\tun\n\ntwo\tdeux\n", 0, TR_BAD_BLANK, "empty line", 2, 2);
}

static void test_corpus_long_line_limit_excludes_the_line_ending(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE];
    /* 9 bytes of text + CRLF is within a 9-byte limit; the rest of a too long line is skipped
     * without being mistaken for further lines */
    assert_int_equal(read_corpus(&c, WRITE("limit.tsv", "0123\t5678\r\n0123456789\t0123456789\nab\tcd"), false, 9, err),
                     0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.lines, 3);
    assert_string_equal(c.tgt[0], "5678");
    assert_int_equal(c.line[1], 3);
    assert_int_equal(c.bad_count[TR_BAD_LONG], 1);
    tr_corpus_free(&c);
}

static void test_corpus_accepts_crlf_bom_and_missing_final_newline_with_notes(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], note[TR_ERR_SIZE];
    const char *path = WRITE("crlf.tsv", "\xef\xbb\xbfone\tun\r\ntwo\tdeux\r\nthree\ttrois");
    assert_int_equal(read_corpus(&c, path, true, 0, err), 0);
    assert_int_equal(c.n, 3);
    assert_string_equal(c.src[0], "one"); /* BOM gone */
    assert_string_equal(c.tgt[0], "un");  /* \r gone */
    assert_string_equal(c.tgt[1], "deux");
    assert_string_equal(c.tgt[2], "trois");
    assert_int_equal(c.crlf_lines, 2);
    assert_true(c.no_final_newline);
    assert_true(c.bom);
    assert_int_equal(c.skipped, 0);
    assert_true(tr_corpus_note_summary(&c, note, sizeof note) > 0);
    char expect[3 * PATH_MAX + 256];
    snprintf(expect, sizeof expect,
             "%s:1: byte order mark removed; %s:1: CRLF line ending, 2 lines like it (\\r removed); "
             "%s:3: no newline at the end of the file",
             path, path, path);
    assert_string_equal(note, expect);
    assert_int_equal(tr_corpus_skip_summary(&c, note, sizeof note), 0);
    assert_string_equal(note, "");
    tr_corpus_free(&c);
}

static void test_corpus_with_only_bad_lines_fails_listing_the_defects(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE];
    const char *path = WRITE("allbad.tsv", "one\n\ttwo\nthree\n");
    assert_int_equal(read_corpus(&c, path, false, 0, err), -1);
    assert_contains(err, "no valid pairs");
    assert_contains(err, "skipped 3 of 3 lines: 2 without a tab (first: ");
    assert_contains(err, "allbad.tsv:1: no tab");
    assert_contains(err, "1 with an empty side (first: ");
    assert_contains(err, "allbad.tsv:2: empty source side");
}

static void test_corpus_skip_summary_counts_each_kind(void **state) {
    (void)state;
    tr_corpus c;
    char err[TR_ERR_SIZE], sum[TR_ERR_SIZE];
    const char *path = WRITE("mixed.tsv", "a\tb\nno tab\nx\ty\tz\nalso no tab\nc\td\n");
    assert_int_equal(read_corpus(&c, path, false, 0, err), 0);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.line[0], 1);
    assert_int_equal(c.line[1], 5);
    tr_corpus_skip_summary(&c, sum, sizeof sum);
    assert_contains(sum, "skipped 3 of 5 lines: 2 without a tab (first: ");
    assert_contains(sum, "mixed.tsv:2: no tab");
    assert_contains(sum, "; 1 with more than one tab (first: ");
    assert_contains(sum, "mixed.tsv:3: 2 tabs");
    tr_corpus_free(&c);
}

/* ---- vocabularies ------------------------------------------------------------------------ */

/* source counts: a 3, b 3, d 2, c 1; target: x 2, y 1 */
static const char small_tsv[] = "a b c\tx\nb a\tx\na d\ty\nd b\t.\n";

static void test_vocab_orders_by_count_then_bytes_after_specials(void **state) {
    (void)state;
    tr_corpus c;
    tr_vocab v;
    char err[TR_ERR_SIZE];
    assert_int_equal(read_corpus(&c, WRITE("small.tsv", small_tsv), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC, TR_WORDS, 2, err, sizeof err), 0);
    assert_int_equal(v.size, 7);
    const char *expect[] = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "d"};
    for (int i = 0; i < 7; i++) assert_string_equal(v.token[i], expect[i]);
    assert_int_equal(tr_vocab_id(&v, "b", 1), 5);
    assert_int_equal(tr_vocab_id(&v, "c", 1), TR_UNK); /* below min count */
    assert_int_equal(tr_vocab_id(&v, "<eos>", 5), TR_EOS);
    assert_int_equal(tr_vocab_id(&v, "bb", 1), 5); /* only len bytes are looked at */
    tr_vocab_free(&v);
    /* min count 1 keeps c; both sides together */
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC | TR_SIDE_TGT, TR_WORDS, 1, err, sizeof err), 0);
    const char *both[] = {"a", "b", "d", "x", ".", "c", "y"}; /* 3,3,2,2 then 1,1,1 in byte order */
    assert_int_equal(v.size, 11);
    for (int i = 0; i < 7; i++) assert_string_equal(v.token[4 + i], both[i]);
    tr_vocab_free(&v);
    tr_corpus_free(&c);
}

static void test_vocab_round_trips_through_string_and_file(void **state) {
    (void)state;
    tr_corpus c;
    tr_vocab v, w, u;
    char err[TR_ERR_SIZE], path[PATH_MAX];
    assert_int_equal(read_corpus(&c, WRITE("small2.tsv", small_tsv), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC, TR_WORDS, 2, err, sizeof err), 0);
    char *s = tr_vocab_to_string(&v);
    assert_string_equal(s, "<pad>\n<bos>\n<eos>\n<unk>\na\nb\nd");
    assert_int_equal(tr_vocab_from_string(&w, s, "config", err, sizeof err), 0);
    assert_int_equal(w.size, v.size);
    for (int i = 0; i < v.size; i++) assert_string_equal(w.token[i], v.token[i]);
    assert_int_equal(tr_vocab_id(&w, "d", 1), 6);
    snprintf(path, sizeof path, "%s/vocab.txt", tmpdir);
    assert_int_equal(tr_vocab_save(&v, path, err, sizeof err), 0);
    char *file = read_all(path);
    assert_string_equal(file, "<pad>\n<bos>\n<eos>\n<unk>\na\nb\nd\n");
    assert_int_equal(tr_vocab_load(&u, path, err, sizeof err), 0);
    assert_int_equal(u.size, 7);
    assert_int_equal(tr_vocab_id(&u, "a", 1), 4);
    free(file);
    free(s);
    tr_vocab_free(&u);
    tr_vocab_free(&w);
    tr_vocab_free(&v);
    tr_corpus_free(&c);
}

static void test_vocab_from_string_names_the_bad_line(void **state) {
    (void)state;
    tr_vocab v;
    char err[TR_ERR_SIZE];
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\nmille\ncent\nmille", "cfg", err, sizeof err),
                     -1);
    assert_contains(err, "cfg:7: duplicate token 'mille' (also line 5)");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<eos>\n<bos>\n<unk>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:2: expected the special token <bos> as id 1, found '<eos>'");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\na\n\nb", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:6: empty token");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\r\n<bos>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:1: a tab or carriage return in a token");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\n\xff", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:5: invalid UTF-8");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg: 2 lines, expected at least the 4 special tokens");
    assert_int_equal(tr_vocab_from_string(&v, "", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg: empty vocabulary");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/missing-vocab.txt", tmpdir);
    assert_int_equal(tr_vocab_load(&v, path, err, sizeof err), -1);
    assert_contains(err, "missing-vocab.txt: cannot open");
    assert_int_equal(tr_vocab_load(&v, WRITE("empty-vocab.txt", ""), err, sizeof err), -1);
    assert_contains(err, "empty-vocab.txt: file is empty");
    tr_vocab_free(&v);
}

static void test_vocab_encode_and_decode(void **state) {
    (void)state;
    tr_vocab v;
    char err[TR_ERR_SIZE], out[64];
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\nseventy\n-\none\n,", "cfg", err, sizeof err),
                     0);
    int64_t ids[8];
    assert_int_equal(tr_vocab_encode(&v, "seventy-one, two", TR_WORDS, ids, 8), 5);
    int64_t expect[] = {4, 5, 6, 7, TR_UNK};
    assert_memory_equal(ids, expect, sizeof expect);
    int64_t seq[] = {TR_BOS, 4, 5, 6, TR_PAD, 7, 99, TR_EOS, 4};
    assert_int_equal(tr_vocab_decode(&v, seq, 9, TR_WORDS, out, sizeof out), strlen("seventy-one, <unk>"));
    assert_string_equal(out, "seventy-one, <unk>");
    int64_t trimmed[] = {4, 6, TR_EOS, TR_PAD};
    assert_int_equal(tr_ids_len(trimmed, 4), 2);
    assert_int_equal(tr_ids_len(trimmed, 1), 1);
    tr_vocab_free(&v);
}

/* ---- encoded pairs and batches -------------------------------------------------------------- */

/* n pairs; pair i has 1 + (i*7 % 9) source words and 1 + (i*5 % 6) target words */
static void make_dataset(tr_dataset *d, tr_vocab *sv, tr_vocab *tv, int n, int max_len) {
    size_t cap = (size_t)n * 64 + 1, pos = 0;
    char *text = malloc(cap), err[TR_ERR_SIZE];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 1 + i * 7 % 9; k++)
            pos += (size_t)snprintf(text + pos, cap - pos, "%ss%d", k ? " " : "", (i + k) % 5);
        pos += (size_t)snprintf(text + pos, cap - pos, "\t");
        for (int k = 0; k < 1 + i * 5 % 6; k++)
            pos += (size_t)snprintf(text + pos, cap - pos, "%st%d", k ? " " : "", (i * k) % 4);
        pos += (size_t)snprintf(text + pos, cap - pos, "\n");
    }
    tr_corpus c;
    assert_int_equal(read_corpus(&c, write_file("gen.tsv", text, pos), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(sv, &c, TR_SIDE_SRC, TR_WORDS, 1, err, sizeof err), 0);
    assert_int_equal(tr_vocab_build(tv, &c, TR_SIDE_TGT, TR_WORDS, 1, err, sizeof err), 0);
    assert_int_equal(tr_dataset_build(d, &c, sv, tv, TR_WORDS, max_len, err, sizeof err), 0);
    tr_corpus_free(&c);
    free(text);
}

static void test_dataset_appends_eos_and_filters_by_length(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    make_dataset(&d, &sv, &tv, 40, 0);
    assert_int_equal(d.n, 40);
    assert_int_equal(d.dropped, 0);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(d.src_len[i], 2 + i * 7 % 9);
        assert_int_equal(d.tgt_len[i], 2 + i * 5 % 6);
        assert_int_equal(d.ids[d.src_start[i] + d.src_len[i] - 1], TR_EOS);
        assert_int_equal(d.ids[d.tgt_start[i] + d.tgt_len[i] - 1], TR_EOS);
        assert_int_equal(d.line[i], i + 1);
    }
    /* pair 1 is "s1 s2 s3 s4 s0 s1 s2 s3": its first id is the id of "s1" */
    assert_int_equal(d.ids[d.src_start[1]], tr_vocab_id(&sv, "s1", 2));
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
    /* at most 5 ids: source words ≤ 4 and target words ≤ 4 */
    make_dataset(&d, &sv, &tv, 40, 5);
    int keep = 0;
    for (int i = 0; i < 40; i++) keep += 2 + i * 7 % 9 <= 5 && 2 + i * 5 % 6 <= 5;
    assert_int_equal(d.n, keep);
    assert_int_equal(d.dropped, 40 - keep);
    for (int64_t i = 0; i < d.n; i++) assert_true(d.src_len[i] <= 5 && d.tgt_len[i] <= 5);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_split_is_reproducible_disjoint_and_complete(void **state) {
    (void)state;
    tr_dataset d, tr, he, tr2, he2;
    tr_vocab sv, tv;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 101, 0);
    assert_int_equal(tr_dataset_split(&d, 0.1, 7, &tr, &he, err, sizeof err), 0);
    assert_int_equal(he.n, 10); /* round(10.1) */
    assert_int_equal(tr.n, 91);
    int seen[102] = {0};
    for (int64_t i = 0; i < tr.n; i++) seen[tr.line[i]]++;
    for (int64_t i = 0; i < he.n; i++) seen[he.line[i]]++;
    for (int i = 1; i <= 101; i++) assert_int_equal(seen[i], 1);
    for (int64_t i = 1; i < he.n; i++) assert_true(he.line[i] > he.line[i - 1]); /* original order */
    /* the copies hold the same ids as the original pair */
    int64_t j = he.line[3] - 1;
    assert_int_equal(he.src_len[3], d.src_len[j]);
    assert_memory_equal(he.ids + he.tgt_start[3], d.ids + d.tgt_start[j], (size_t)d.tgt_len[j] * sizeof(int64_t));
    assert_int_equal(tr_dataset_split(&d, 0.1, 7, &tr2, &he2, err, sizeof err), 0);
    assert_memory_equal(he2.line, he.line, 10 * sizeof(int64_t));
    tr_dataset_free(&tr2);
    tr_dataset_free(&he2);
    assert_int_equal(tr_dataset_split(&d, 0.1, 8, &tr2, &he2, err, sizeof err), 0);
    assert_memory_not_equal(he2.line, he.line, 10 * sizeof(int64_t));
    tr_dataset_free(&tr2);
    tr_dataset_free(&he2);
    assert_int_equal(tr_dataset_split(&d, 0.0, 7, &tr2, NULL, err, sizeof err), 0); /* training part only */
    assert_int_equal(tr2.n, 101);
    assert_memory_equal(tr2.ids, d.ids, (size_t)(d.tgt_start[100] + d.tgt_len[100]) * sizeof(int64_t));
    tr_dataset_free(&tr2);
    assert_int_equal(tr_dataset_split(&d, 1.0, 7, &tr2, &he2, err, sizeof err), -1);
    assert_contains(err, "held-out fraction 1 is not in [0, 1)");
    assert_int_equal(tr_dataset_split(&d, 0.999, 7, &tr2, &he2, err, sizeof err), -1);
    assert_contains(err, "holding out 101 of 101 pairs leaves none to train on");
    tr_dataset_free(&tr);
    tr_dataset_free(&he);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_batches_cover_each_pair_once_per_epoch_with_correct_padding(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher b;
    tr_batch bt;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 53, 0);
    assert_int_equal(tr_batcher_init(&b, &d, 8, 11, true, err, sizeof err), 0);
    assert_int_equal(tr_batch_alloc(&bt, &b, err, sizeof err), 0);
    assert_int_equal(b.nbatches, 7); /* 6 × 8 + 5 */
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        tr_batcher_set_epoch(&b, epoch);
        int seen[53] = {0}, total = 0;
        for (int64_t step = 0; step < b.nbatches; step++) {
            assert_int_equal(tr_batcher_get(&b, &d, step, &bt), 0);
            int Ls = 0, Lt = 0;
            int64_t ntok = 0;
            for (int r = 0; r < bt.B; r++) {
                int64_t p = bt.index[r];
                seen[p]++;
                total++;
                int ls = d.src_len[p], lt = d.tgt_len[p];
                Ls = ls > Ls ? ls : Ls;
                Lt = lt > Lt ? lt : Lt;
                ntok += lt;
                assert_int_equal(bt.src_len[r], ls);
                assert_int_equal(bt.tgt_len[r], lt);
                const int64_t *s = d.ids + d.src_start[p], *t = d.ids + d.tgt_start[p];
                for (int k = 0; k < bt.Ls; k++) assert_int_equal(bt.src[r * bt.Ls + k], k < ls ? s[k] : TR_PAD);
                for (int k = 0; k < bt.Lt; k++) {
                    assert_int_equal(bt.tgt_in[r * bt.Lt + k], k == 0 ? TR_BOS : k < lt ? t[k - 1] : TR_PAD);
                    assert_int_equal(bt.tgt_out[r * bt.Lt + k], k < lt ? t[k] : TR_PAD);
                }
                assert_int_equal(bt.tgt_out[r * bt.Lt + lt - 1], TR_EOS);
            }
            assert_int_equal(bt.Ls, Ls); /* padded to the batch maximum, not the global one */
            assert_int_equal(bt.Lt, Lt);
            assert_int_equal(bt.ntokens, ntok);
        }
        assert_int_equal(total, 53);
        for (int i = 0; i < 53; i++) assert_int_equal(seen[i], 1);
    }
    assert_int_equal(tr_batcher_get(&b, &d, 7, &bt), -1);
    assert_int_equal(bt.B, 0);
    assert_int_equal(tr_batcher_get(&b, &d, -1, &bt), -1);
    tr_batch_free(&bt);
    tr_batcher_free(&b);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_batches_group_similar_source_lengths(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher b;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 90, 0);
    assert_int_equal(tr_batcher_init(&b, &d, 10, 3, true, err, sizeof err), 0);
    /* sorted by source length: batch k's longest source is no longer than batch k+1's shortest;
     * source lengths 2..10 occur 10 times each, so every batch has one source length */
    for (int64_t k = 0; k < b.nbatches; k++) {
        int lo = INT32_MAX, hi = 0;
        for (int r = 0; r < b.size[k]; r++) {
            int l = d.src_len[b.order[b.start[k] + r]];
            lo = l < lo ? l : lo;
            hi = l > hi ? l : hi;
        }
        assert_int_equal(lo, hi);
        assert_int_equal(lo, 2 + k);
    }
    tr_batcher_free(&b);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_epoch_order_depends_only_on_seed_and_epoch(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher a, b, c, fixed;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 200, 0);
    assert_int_equal(tr_batcher_init(&a, &d, 4, 42, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&b, &d, 4, 42, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&c, &d, 4, 43, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&fixed, &d, 4, 42, false, err, sizeof err), 0);
    size_t bytes = (size_t)a.nbatches * sizeof(int64_t);
    int64_t *e3 = malloc(bytes), *e4 = malloc(bytes);
    for (int e = 0; e < 3; e++) tr_batcher_set_epoch(&a, e); /* a walked there, b jumps there (resume) */
    tr_batcher_set_epoch(&a, 3);
    memcpy(e3, a.perm, bytes);
    tr_batcher_set_epoch(&b, 3);
    assert_memory_equal(b.perm, e3, bytes);
    assert_memory_equal(b.order, a.order, (size_t)d.n * sizeof(int64_t));
    tr_batcher_set_epoch(&a, 4);
    memcpy(e4, a.perm, bytes);
    assert_memory_not_equal(e4, e3, bytes);
    tr_batcher_set_epoch(&a, 3);
    assert_memory_equal(a.perm, e3, bytes);
    tr_batcher_set_epoch(&c, 3);
    assert_memory_not_equal(c.perm, e3, bytes);
    /* a permutation of the batches */
    int *seen = calloc((size_t)a.nbatches, sizeof(int));
    for (int64_t k = 0; k < a.nbatches; k++) seen[e4[k]]++;
    for (int64_t k = 0; k < a.nbatches; k++) assert_int_equal(seen[k], 1);
    tr_batcher_set_epoch(&fixed, 5);
    for (int64_t k = 0; k < fixed.nbatches; k++) assert_int_equal(fixed.perm[k], k);
    tr_batcher_free(&fixed);
    assert_int_equal(tr_batcher_init(&fixed, &d, 0, 1, true, err, sizeof err), -1);
    assert_contains(err, "batch size 0: must be at least 1");
    free(seen);
    free(e3);
    free(e4);
    tr_batcher_free(&a);
    tr_batcher_free(&b);
    tr_batcher_free(&c);
    tr_batcher_free(&fixed);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

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

/* ---- the shipped num-en-fr data set ---------------------------------------------------------- */

/* integer value of English or French number words as num2words writes them, -1 if unknown */
static long number_value(const char *text) {
    static const char *const en[] = {"zero",     "one",     "two",     "three",     "four",     "five",    "six",
                                     "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                                     "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
    static const char *const en_tens[] = {"twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};
    static const char *const fr[] = {"zéro", "un",  "deux", "trois", "quatre", "cinq",     "six",    "sept", "huit",
                                     "neuf", "dix", "onze", "douze", "treize", "quatorze", "quinze", "seize"};
    static const char *const fr_tens[] = {"vingt", "trente", "quarante", "cinquante", "soixante"};
    tr_span sp[64];
    int n = tr_tokenize(text, TR_WORDS, sp, 64);
    long total = 0, cur = 0;
    char prev[32] = "";
    for (int i = 0; i < n && i < 64; i++) {
        char w[32];
        snprintf(w, sizeof w, "%.*s", sp[i].len, sp[i].s);
        long v = -1;
        for (int k = 0; k < 20 && v < 0; k++)
            if (!strcmp(w, en[k])) v = k;
        for (int k = 0; k < 17 && v < 0; k++)
            if (!strcmp(w, fr[k])) v = k;
        for (int k = 0; k < 8 && v < 0; k++)
            if (!strcmp(w, en_tens[k])) v = 20 + 10 * k;
        for (int k = 0; k < 5 && v < 0; k++)
            if (!strcmp(w, fr_tens[k])) v = 20 + 10 * k;
        if (!strcmp(w, "vingts")) v = 20;
        if (!strcmp(w, "une")) v = 1;
        if (v >= 0) {
            if (v == 20 && !strcmp(prev, "quatre")) v = 80 - 4; /* quatre-vingt = 4 × 20 */
            cur += v;
        } else if (!strcmp(w, "hundred") || !strcmp(w, "cent") || !strcmp(w, "cents")) {
            cur = (cur ? cur : 1) * 100;
        } else if (!strcmp(w, "thousand") || !strcmp(w, "mille")) {
            total += (cur ? cur : 1) * 1000;
            cur = 0;
        } else if (strcmp(w, "and") && strcmp(w, "et") && strcmp(w, "-") && strcmp(w, ",")) {
            return -1;
        }
        if (strcmp(w, "-")) snprintf(prev, sizeof prev, "%s", w);
    }
    return total + cur;
}

static void test_number_parser_witness_reads_both_languages(void **state) {
    (void)state;
    assert_int_equal(number_value("seventy-one"), 71);
    assert_int_equal(number_value("soixante et onze"), 71);
    assert_int_equal(number_value("quatre-vingt-dix-neuf mille neuf cent quatre-vingts"), 99980);
    assert_int_equal(number_value("nine hundred and ninety-nine thousand, nine hundred and ninety-nine"), 999999);
    assert_int_equal(number_value("cent mille"), 100000);
    assert_int_equal(number_value("deux cent vingt et un mille trois"), 221003);
    assert_int_equal(number_value("zéro"), 0);
    assert_int_equal(number_value("eleventy"), -1);
}

static void test_shipped_corpus_reads_strictly_with_the_documented_sizes(void **state) {
    (void)state;
    tr_corpus tr, te;
    read_shipped(&tr, "train.tsv");
    read_shipped(&te, "test.tsv");
    assert_int_equal(tr.n, 20000);
    assert_int_equal(te.n, 2000);
    for (tr_corpus *c = &tr; c; c = c == &tr ? &te : NULL) {
        assert_int_equal(c->skipped, 0);
        assert_int_equal(c->crlf_lines, 0);
        assert_false(c->no_final_newline);
        assert_false(c->bom);
    }
    tr_corpus_free(&tr);
    tr_corpus_free(&te);
}

static void test_shipped_corpus_round_trips_through_both_tokenizers(void **state) {
    (void)state;
    const char *files[] = {"train.tsv", "test.tsv"};
    tr_span sp[512];
    char out[4096];
    int64_t checked = 0;
    for (int fi = 0; fi < 2; fi++) {
        tr_corpus c;
        read_shipped(&c, files[fi]);
        for (int64_t i = 0; i < c.n; i++)
            for (int side = 0; side < 2; side++) {
                const char *s = side ? c.tgt[i] : c.src[i];
                for (int mode = TR_WORDS; mode <= TR_CHARS; mode++) {
                    int n = tr_tokenize(s, (tr_tok_mode)mode, sp, 512);
                    assert_true(n > 0 && n <= 512);
                    tr_detokenize(sp, n, (tr_tok_mode)mode, out, sizeof out);
                    if (strcmp(out, s) != 0)
                        fail_msg("%s:%lld: '%s' detokenises to '%s'", files[fi], (long long)c.line[i], s, out);
                    checked++;
                }
            }
        tr_corpus_free(&c);
    }
    assert_int_equal(checked, 22000 * 2 * 2);
}

static void test_shipped_corpus_is_correct_disjoint_and_spread_over_digit_counts(void **state) {
    (void)state;
    const char *files[] = {"train.tsv", "test.tsv"};
    unsigned char *seen = calloc(1000000, 1); /* bit 1: in train, bit 2: in test */
    int64_t digits[2][7] = {{0}};
    bool has71 = false, has0 = false;
    for (int fi = 0; fi < 2; fi++) {
        tr_corpus c;
        read_shipped(&c, files[fi]);
        for (int64_t i = 0; i < c.n; i++) {
            long en = number_value(c.src[i]), fr = number_value(c.tgt[i]);
            if (en < 0 || en > 999999 || en != fr)
                fail_msg("%s:%lld: '%s' (%ld) and '%s' (%ld)", files[fi], (long long)c.line[i], c.src[i], en, c.tgt[i],
                         fr);
            if (seen[en] & (1 << fi)) fail_msg("%s:%lld: %ld appears twice", files[fi], (long long)c.line[i], en);
            if (seen[en]) fail_msg("%s:%lld: %ld is in both splits", files[fi], (long long)c.line[i], en);
            seen[en] |= (unsigned char)(1 << fi);
            int d = 1;
            for (long v = en; v >= 10; v /= 10) d++;
            digits[fi][d]++;
            has71 |= !strcmp(c.src[i], "seventy-one") && !strcmp(c.tgt[i], "soixante et onze");
            has0 |= !strcmp(c.src[i], "zero") && !strcmp(c.tgt[i], "zéro");
        }
        tr_corpus_free(&c);
    }
    free(seen);
    assert_true(has71);
    assert_true(has0);
    /* every integer with 1-3 digits is used (10, 90, 900 of them), the rest spreads evenly over
     * 4, 5 and 6 digits in each split, and test takes 2000/22000 of every digit count */
    const int64_t small[4] = {0, 10, 90, 900};
    for (int d = 1; d <= 3; d++) assert_int_equal(digits[0][d] + digits[1][d], small[d]);
    const int64_t size[2] = {20000, 2000};
    for (int fi = 0; fi < 2; fi++) {
        double rest = (double)(size[fi] - digits[fi][1] - digits[fi][2] - digits[fi][3]) / 3;
        for (int d = 4; d <= 6; d++)
            if (fabs((double)digits[fi][d] - rest) > 0.1 * rest)
                fail_msg("%s: %lld %d-digit numbers, expected about %.0f", files[fi], (long long)digits[fi][d], d,
                         rest);
    }
    for (int d = 1; d <= 6; d++) {
        double share = (double)(digits[0][d] + digits[1][d]) * 2000 / 22000;
        assert_true(fabs((double)digits[1][d] - share) <= 1);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_word_tokens_split_hyphens_and_punctuation),
        cmocka_unit_test(test_word_tokens_keep_accented_letters_and_split_unicode_punctuation),
        cmocka_unit_test(test_char_tokens_are_code_points_with_visible_spaces),
        cmocka_unit_test(test_tokenize_counts_beyond_max_and_writes_only_max),
        cmocka_unit_test(test_detokenize_inverts_conventional_spacing),
        cmocka_unit_test(test_detokenize_truncates_like_snprintf),
        cmocka_unit_test(test_corpus_missing_and_empty_files_fail_with_path),
        cmocka_unit_test(test_corpus_bad_lines_are_named_by_file_and_line),
        cmocka_unit_test(test_corpus_long_line_limit_excludes_the_line_ending),
        cmocka_unit_test(test_corpus_accepts_crlf_bom_and_missing_final_newline_with_notes),
        cmocka_unit_test(test_corpus_with_only_bad_lines_fails_listing_the_defects),
        cmocka_unit_test(test_corpus_skip_summary_counts_each_kind),
        cmocka_unit_test(test_vocab_orders_by_count_then_bytes_after_specials),
        cmocka_unit_test(test_vocab_round_trips_through_string_and_file),
        cmocka_unit_test(test_vocab_from_string_names_the_bad_line),
        cmocka_unit_test(test_vocab_encode_and_decode),
        cmocka_unit_test(test_dataset_appends_eos_and_filters_by_length),
        cmocka_unit_test(test_split_is_reproducible_disjoint_and_complete),
        cmocka_unit_test(test_batches_cover_each_pair_once_per_epoch_with_correct_padding),
        cmocka_unit_test(test_batches_group_similar_source_lengths),
        cmocka_unit_test(test_epoch_order_depends_only_on_seed_and_epoch),
        cmocka_unit_test(test_progress_plain_mode_prints_a_line_every_n_steps),
        cmocka_unit_test(test_progress_plain_mode_prints_by_time_and_ignores_nan_loss),
        cmocka_unit_test(test_progress_terminal_mode_redraws_one_line),
        cmocka_unit_test(test_progress_updates_allocate_nothing),
        cmocka_unit_test(test_durations_format_as_minutes_or_hours),
        cmocka_unit_test(test_attention_svg_is_well_formed_and_escapes_tokens),
        cmocka_unit_test(test_svg_writers_report_bad_arguments_and_unwritable_paths),
        cmocka_unit_test(test_curves_svg_has_two_panels_ticks_and_broken_lines),
        cmocka_unit_test(test_write_atomic_replaces_the_file),
        cmocka_unit_test(test_number_parser_witness_reads_both_languages),
        cmocka_unit_test(test_shipped_corpus_reads_strictly_with_the_documented_sizes),
        cmocka_unit_test(test_shipped_corpus_round_trips_through_both_tokenizers),
        cmocka_unit_test(test_shipped_corpus_is_correct_disjoint_and_spread_over_digit_counts),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
