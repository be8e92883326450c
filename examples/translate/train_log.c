/* attograd-translate train: OUT/log.jsonl, one JSON object a line for every logged training step
 * and every evaluation, each line flushed as it is written. Numbers are written in the fewest
 * digits that read back as the same double (tr_num_text); NaN and infinities, which JSON lacks,
 * as null.
 *
 *   {"kind":"train","step":100,"loss":2.5,"lr":0.00025,"tokens_per_s":12000,"elapsed_s":8.5}
 *   {"kind":"eval","step":250,"dev_loss":0.5,"exact_match":97.8,"bleu":99.1,"chrf":99.5,
 *    "dev_pairs":1000,"elapsed_s":21}
 *
 * exact_match, bleu and chrf are percentages (0 to 100) as the run prints them; elapsed_s counts
 * the seconds of training since step 0: a resumed run goes on from its last kept entry's. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

/* x as JSON: exact, or null when it is not finite */
static const char *num(double x, tr_text *t) {
    if (!isfinite(x)) return "null";
    *t = tr_num_text(x);
    return t->s;
}

/* the number after "key": in line (NaN when absent or null) */
static double field(const char *line, const char *key) {
    char k[40];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(k), &end);
    return end == p + strlen(k) ? NAN : v;
}

static void write_failed(train_log *l) {
    if (!l->failed)
        fprintf(stderr, "attograd-translate: writing %s failed: %s; the run goes on without it\n", l->path,
                strerror(errno));
    l->failed = true;
}

static void put_line(train_log *l, const char *line) {
    if (!l->f || l->failed) return;
    if (fputs(line, l->f) < 0 || fflush(l->f) != 0) write_failed(l);
}

/* the entries of text up to step `upto` (whole lines of an object with a kind and a step) copied
 * to keep and added to cv, the latest elapsed_s into l->elapsed; returns the bytes kept */
static size_t keep_entries(train_log *l, char *text, int64_t upto, char *keep, curves *cv) {
    size_t at = 0;
    for (char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (!nl) break; /* a line cut short by a crash */
        *nl = 0;
        double step = field(line, "step");
        bool train = strstr(line, "\"kind\":\"train\"") != NULL, eval = strstr(line, "\"kind\":\"eval\"") != NULL;
        if (line[0] != '{' || !(step >= 0) || step > (double)upto || !(train || eval)) continue;
        if (train) curves_add_train(cv, step, field(line, "loss"), field(line, "lr"));
        else curves_add(cv, step, field(line, "dev_loss"), field(line, "exact_match"), field(line, "bleu"),
                        field(line, "chrf"));
        double t = field(line, "elapsed_s");
        if (t > l->elapsed) l->elapsed = t;
        size_t len = strlen(line);
        memcpy(keep + at, line, len);
        keep[at + len] = '\n';
        at += len + 1;
    }
    return at;
}

/* a resumed run: the file rewritten with the entries up to step `upto`, which go to cv too */
static bool keep_until(train_log *l, int64_t upto, curves *cv) {
    FILE *f = fopen(l->path, "r");
    if (!f) return errno == ENOENT; /* a run from before the log: it starts here */
    char *text = NULL, err[TR_ERR_SIZE];
    size_t cap = 0, len = 0, n = 1;
    bool oom = false;
    while (n > 0 && !oom) {
        if (len + 65536 > cap) {
            char *t = realloc(text, cap = 2 * cap + 65536);
            oom = !t;
            if (t) text = t;
        }
        n = oom ? 0 : fread(text + len, 1, cap - len - 1, f);
        len += n;
    }
    bool read_ok = !ferror(f) && !oom;
    fclose(f);
    char *keep = read_ok ? malloc(len + 1) : NULL;
    bool ok = keep != NULL;
    if (ok) {
        text[len] = 0;
        ok = tr_write_atomic(l->path, keep, keep_entries(l, text, upto, keep, cv), err, sizeof err) == 0;
        if (!ok) fprintf(stderr, "attograd-translate: %s\n", err);
    } else {
        fprintf(stderr, "attograd-translate: cannot read %s: %s\n", l->path,
                oom || read_ok ? "out of memory" : strerror(errno));
    }
    free(text);
    free(keep);
    return ok;
}

bool train_log_open(train_log *l, const char *path, int64_t resumed_step, curves *cv) {
    *l = (train_log){.path = path};
    if (resumed_step >= 0 && !keep_until(l, resumed_step, cv)) return false;
    l->f = fopen(path, resumed_step >= 0 ? "a" : "w");
    if (!l->f) fprintf(stderr, "attograd-translate: cannot write %s: %s\n", path, strerror(errno));
    return l->f != NULL;
}

void train_log_count(train_log *l, int64_t tokens, double seconds) {
    l->tokens += (double)tokens;
    l->seconds += seconds;
}

void train_log_train(train_log *l, int64_t step, double loss, double lr, double elapsed) {
    char line[512];
    tr_text t[4];
    double rate = l->seconds > 0 ? l->tokens / l->seconds : NAN;
    snprintf(line, sizeof line, "{\"kind\":\"train\",\"step\":%lld,\"loss\":%s,\"lr\":%s,\"tokens_per_s\":%s,"
             "\"elapsed_s\":%s}\n", (long long)step, num(loss, &t[0]), num(lr, &t[1]), num(rate, &t[2]),
             num(elapsed, &t[3]));
    put_line(l, line);
    l->tokens = l->seconds = 0;
}

void train_log_eval(train_log *l, int64_t step, double loss, double exact, double bleu, double chrf, int64_t pairs,
                    double elapsed) {
    char line[512];
    tr_text t[5];
    snprintf(line, sizeof line, "{\"kind\":\"eval\",\"step\":%lld,\"dev_loss\":%s,\"exact_match\":%s,\"bleu\":%s,"
             "\"chrf\":%s,\"dev_pairs\":%lld,\"elapsed_s\":%s}\n", (long long)step, num(loss, &t[0]),
             num(100 * exact, &t[1]), num(bleu, &t[2]), num(chrf, &t[3]), (long long)pairs, num(elapsed, &t[4]));
    put_line(l, line);
}

void train_log_close(train_log *l) {
    if (l->f && fclose(l->f) != 0 && !l->failed) write_failed(l);
    l->f = NULL;
}
