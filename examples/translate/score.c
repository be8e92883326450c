/* attograd-translate score: a hypothesis file against a reference file, as sacreBLEU's command
 * line scores them (`sacrebleu REF -i HYP -m bleu chrf -f text`): corpus BLEU and chrF2 with
 * their signatures, and exact match. Lines are read as sacreBLEU reads them: split at "\n"
 * only, each stripped of trailing whitespace (a "\r" too), UTF-8. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "metrics.h"
#include "translate.h"

typedef struct {
    char *text;
    char **line;
    int64_t n;
} lines;

static void lines_free(lines *l) {
    free(l->text);
    free(l->line);
    memset(l, 0, sizeof *l);
}

/* whether s[0..n) is UTF-8 without NUL bytes; the offset of the first bad byte in *bad */
static bool valid_utf8(const char *s, size_t n, size_t *bad) {
    uint32_t cp;
    for (size_t i = 0, len; i < n; i += len)
        if (s[i] == 0 || !(len = (size_t)tr__utf8_next((const unsigned char *)s + i, n - i, &cp))) {
            *bad = i;
            return false;
        }
    return true;
}

/* All of path ("-": stdin) split into lines; false after printing why not. */
static bool read_lines(lines *l, const char *path, const char *what) {
    bool std = strcmp(path, "-") == 0;
    const char *name = std ? "stdin" : path;
    FILE *f = std ? stdin : fopen(path, "rb");
    memset(l, 0, sizeof *l);
    if (!f) {
        fprintf(stderr, "attograd-translate score: cannot open %s file %s: %s\n", what, path, strerror(errno));
        return false;
    }
    size_t n = 0, cap = 1 << 16;
    l->text = malloc(cap);
    for (size_t got = 1; l->text && got > 0;) {
        if (n + 1 >= cap) {
            char *t = realloc(l->text, cap *= 2);
            if (!t) free(l->text);
            l->text = t;
            if (!t) break;
        }
        got = fread(l->text + n, 1, cap - n - 1, f);
        n += got;
    }
    bool err = !l->text || ferror(f);
    if (!std) fclose(f);
    if (err) {
        fprintf(stderr, "attograd-translate score: cannot read %s file %s: %s\n", what, name,
                l->text ? strerror(errno) : "out of memory");
        lines_free(l);
        return false;
    }
    l->text[n] = 0;
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += l->text[i] == '\n';
    count += n > 0 && l->text[n - 1] != '\n';
    l->line = malloc(sizeof(char *) * (size_t)(count + 1));
    if (!l->line) {
        fprintf(stderr, "attograd-translate score: %s file %s: out of memory\n", what, name);
        lines_free(l);
        return false;
    }
    char *s = l->text, *end = l->text + n;
    for (int64_t k = 0; k < count; k++) {
        char *e = memchr(s, '\n', (size_t)(end - s));
        if (e) *e = 0;
        size_t len = (size_t)((e ? e : end) - s), bad;
        if (!valid_utf8(s, len, &bad)) {
            fprintf(stderr, "attograd-translate score: %s:%lld: invalid UTF-8 at byte %zu (0x%02X)%s\n", name,
                    (long long)(k + 1), bad + 1, (unsigned char)s[bad], s[bad] ? "" : ", a NUL byte");
            lines_free(l);
            return false;
        }
        l->line[k] = s;
        s = e ? e + 1 : s + len;
    }
    l->n = count;
    return true;
}

static const char *SCORE_USAGE =
    "usage: attograd-translate score --ref FILE [--hyp FILE] [--width N]\n"
    "Scores hypotheses against references, one sentence per line, as sacreBLEU's command line does\n"
    "(sacrebleu REF -i HYP -m bleu chrf -f text): corpus BLEU (13a tokenizer, exp smoothing) and\n"
    "chrF2, each with sacreBLEU " TR_SACREBLEU_VERSION "'s signature, then exact match (the lines equal but for\n"
    "trailing whitespace). The hypotheses come from stdin when --hyp is absent or '-'.";

int cmd_score(int argc, char **argv) {
    const char *hyp_path = NULL, *ref_path = NULL;
    int64_t width = 1;
    bool help = false;
    const opt_def defs[] = {
        {"--hyp", OPT_STRING, &hyp_path, "FILE  hypotheses, one a line ('-' or absent: stdin)"},
        {"--ref", OPT_STRING, &ref_path, "FILE  references, one a line"},
        {"--width", OPT_INT, &width, "N     decimals of the scores (1, sacreBLEU's default)"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    static const opt_range ranges[] = {{"--width", 0, 10, false, false, NULL}, {NULL, 0, 0, false, false, NULL}};
    int npos;
    if (!opts_parse_checked(argc, argv, 2, defs, ranges, NULL, 0, &npos, NULL)) return 2;
    if (help) {
        opts_usage(stdout, SCORE_USAGE, defs, ranges);
        return 0;
    }
    if (!ref_path) return opts_error(argv, 2, "--ref FILE is required (the references, one a line)");
    lines h, r;
    if (!read_lines(&r, ref_path, "reference")) return 1;
    if (!read_lines(&h, hyp_path ? hyp_path : "-", "hypothesis")) {
        lines_free(&r);
        return 1;
    }
    const char *hname = !hyp_path || strcmp(hyp_path, "-") == 0 ? "stdin" : hyp_path;
    int status = 1;
    tr_scores s;
    if (h.n != r.n) {
        fprintf(stderr, "attograd-translate score: %s has %lld lines and %s has %lld: they must pair line by line\n",
                hname, (long long)h.n, ref_path, (long long)r.n);
        goto done;
    }
    if (r.n == 0) {
        fprintf(stderr, "attograd-translate score: %s has no lines: nothing to score\n", ref_path);
        goto done;
    }
    for (int64_t i = 0; i < r.n; i++)
        if (tr_rstrip_len(r.line[i]) == 0) { /* what sacreBLEU reads is empty */
            fprintf(stderr, "attograd-translate score: %s:%lld: empty reference (sacreBLEU refuses them)\n",
                    ref_path, (long long)(i + 1));
            goto done;
        }
    if (tr_scores_init(&s) != 0) goto oom;
    for (int64_t i = 0; i < r.n; i++)
        if (tr_scores_add(&s, h.line[i], (const char *const *)&r.line[i], 1, -1) != 0) {
            tr_scores_free(&s);
            goto oom;
        }
    char extra[128];
    snprintf(extra, sizeof extra, "exact match = %.*f (%lld of %lld lines)", (int)width, 100 * tr_scores_exact(&s),
             (long long)s.exact, (long long)s.sentences);
    tr_metrics_print(stdout, &s.bleu, &s.chrf, 1, (int)width, extra);
    tr_scores_free(&s);
    status = 0;
    goto done;
oom:
    fprintf(stderr, "attograd-translate score: out of memory\n");
done:
    lines_free(&h);
    lines_free(&r);
    return status;
}
