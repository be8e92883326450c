/* attograd-translate: train a toy translation model with teacher forcing, evaluate it, translate,
 * and draw where it attends.
 *
 *   attograd-translate train --train FILE [options]
 *   attograd-translate eval --checkpoint FILE --data FILE [--beam K]
 *   attograd-translate translate --checkpoint FILE [--beam K] [SENTENCE ...]   (else stdin)
 *   attograd-translate attention --checkpoint FILE --out FILE.svg SENTENCE
 *   attograd-translate score --ref FILE [--hyp FILE]                          (else stdin)
 *
 * Bad input (files, corpora, options) is reported with a message and never crashes: exit status
 * 1 for a failure, 2 for a usage error. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "subword.h"
#include "textio.h"
#include "translate.h"
#include "translate_version.h" /* AG_TRANSLATE_VERSION, made by meson from the project's version */

/* ---- options ----
 * Conventions as getopt_long's: "--name value" or "--name=value"; "-x value" or "-xvalue" for an
 * option with a short name, "-xy" for two short flags; "--" ends the options (what follows is
 * positional, a sentence that begins with '-' too); a lone "-" is positional (stdin). Anything
 * else that begins with '-' is an option, and an unknown one is an error. A value is the next
 * argument whatever it is ("--length-penalty -0.5"). Unlike getopt_long, an abbreviated long
 * name is refused (with "did you mean"): an abbreviation that works today would stop working
 * when a longer option that shares it is added. --help stops the parse where it stands. */

/* The short names: one letter for an option several commands share, after Marian's
 * (marian-decoder -m models, -b beam-size, -n normalize, -i input, -o output; marian -t
 * train-sets) and sacreBLEU's (-i input, -w width). A letter stands for the same long option
 * in every command that has that option. */
static const struct {
    char letter;
    const char *name;
} SHORT_NAMES[] = {{'h', "--help"}, {'m', "--checkpoint"}, {'b', "--beam"}, {'n', "--length-penalty"},
                   {'o', "--out"},  {'t', "--train"},      {'i', "--hyp"},  {'r', "--ref"},
                   {'w', "--width"}};

/* the short name of d ('b' for --beam), or 0 */
static char short_of(const opt_def *d) {
    for (size_t k = 0; k < sizeof SHORT_NAMES / sizeof *SHORT_NAMES; k++)
        if (strcmp(SHORT_NAMES[k].name, d->name) == 0) return SHORT_NAMES[k].letter;
    return 0;
}

static const opt_def *find_short(const opt_def *defs, char letter) {
    for (const opt_def *k = defs; k->name; k++)
        if (short_of(k) == letter) return k;
    return NULL;
}

/* the option named by the len bytes at name, or NULL */
static const opt_def *find_long(const opt_def *defs, const char *name, size_t len) {
    for (const opt_def *k = defs; k->name; k++)
        if (strlen(k->name) == len && strncmp(k->name, name, len) == 0) return k;
    return NULL;
}

/* the subcommand of argv ("train"), or "" before it */
static const char *command_of(char **argv, int first) { return first >= 2 ? argv[1] : ""; }

int opts_error(char **argv, int first, const char *fmt, ...) {
    const char *cmd = command_of(argv, first);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "attograd-translate%s%s: ", *cmd ? " " : "", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'attograd-translate%s%s --help' for the %s.\n", *cmd ? " " : "", cmd,
            *cmd ? "options" : "commands");
    return 2;
}

/* edit distance of a (alen bytes) and b counting an insertion, a deletion, a substitution or a
 * swap of neighbours as one edit (optimal string alignment); up to 64 bytes of each count */
static size_t edit_distance(const char *a, size_t alen, const char *b) {
    size_t blen = strlen(b), d[65][65];
    if (alen > 64) alen = 64;
    if (blen > 64) blen = 64;
    for (size_t i = 0; i <= alen; i++) d[i][0] = i;
    for (size_t j = 0; j <= blen; j++) d[0][j] = j;
    for (size_t i = 1; i <= alen; i++)
        for (size_t j = 1; j <= blen; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[alen][blen];
}

const char *opts_nearest(const char *word, size_t len, const char *const *names, int n) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int k = 0; k < n; k++) {
        size_t d = edit_distance(word, len, names[k]);
        if (d < best_d) best_d = d, best = names[k];
    }
    /* a near miss: one typo in a short name, two in a longer one (a third of a long one), or a
     * prefix of exactly one name; the leading dashes of an option do not count */
    size_t dashes = strspn(word, "-"), core = dashes < len ? len - dashes : 0;
    size_t limit = core <= 3 ? 1 : core >= 7 ? core / 3 : 2;
    if (best_d <= limit) return best;
    const char *prefix = NULL;
    for (int k = 0; k < n; k++)
        if (len >= 4 && strncmp(names[k], word, len) == 0) {
            if (prefix) return NULL;
            prefix = names[k];
        }
    return prefix;
}

/* "an integer >= 1", "a number from 0 to 1 (1 excluded)", ... for d, with range r (may be NULL) */
static void expectation(const opt_def *d, const opt_range *r, char *buf, size_t n) {
    const char *kind = d->type == OPT_INT ? "an integer" : "a number";
    if (r && r->expect) snprintf(buf, n, "%s", r->expect);
    else if (!r || (isinf(r->min) && isinf(r->max))) snprintf(buf, n, "%s", kind);
    else if (isinf(r->max)) snprintf(buf, n, "%s %s %.15g", kind, r->min_excluded ? ">" : ">=", r->min);
    else if (isinf(r->min)) snprintf(buf, n, "%s %s %.15g", kind, r->max_excluded ? "<" : "<=", r->max);
    else snprintf(buf, n, "%s from %.15g to %.15g%s", kind, r->min, r->max,
                  r->min_excluded ? (r->max_excluded ? " (both excluded)" : " (the lower excluded)")
                                  : (r->max_excluded ? " (the upper excluded)" : ""));
}

static const opt_range *range_of(const opt_def *d, const opt_range *ranges) {
    for (const opt_range *r = ranges; r && r->name; r++)
        if (strcmp(r->name, d->name) == 0) return r;
    return NULL;
}

void opts_usage(FILE *f, const char *usage, const opt_def *defs, const opt_range *ranges) {
    fprintf(f, "%s\n", usage);
    if (defs && defs[0].name) fprintf(f, "options:\n");
    for (const opt_def *d = defs; d && d->name; d++) {
        char letter = short_of(d), values[160] = "";
        if (d->type == OPT_INT || d->type == OPT_DOUBLE) expectation(d, range_of(d, ranges), values, sizeof values);
        fprintf(f, "  %c%c%c %-21s %s%s%s%s\n", letter ? '-' : ' ', letter ? letter : ' ', letter ? ',' : ' ',
                d->name, d->help, *values ? " [" : "", values, *values ? "]" : "");
    }
}

/* v parsed into d's value: a whole number or a finite number, nothing after it, within r */
static bool parse_value(const opt_def *d, const opt_range *r, const char *v) {
    char *end;
    double x;
    long long i = 0;
    errno = 0;
    if (d->type == OPT_STRING) {
        *(const char **)d->value = v;
        return true;
    }
    if (d->type == OPT_INT) {
        i = strtoll(v, &end, 10);
        x = (double)i;
    } else {
        x = strtod(v, &end);
    }
    if (errno || end == v || *end || !isfinite(x)) return false;
    if (r && (x < r->min || x > r->max || (r->min_excluded && x == r->min) || (r->max_excluded && x == r->max)))
        return false;
    if (d->type == OPT_INT) *(int64_t *)d->value = i;
    else *(double *)d->value = x;
    return true;
}

/* one command line being parsed */
typedef struct {
    int argc, first;
    char **argv;
    const opt_def *defs;
    const opt_range *ranges;
    bool *given;      /* may be NULL */
    bool positionals; /* whether the command takes any */
    bool help;        /* --help seen: the parse stops */
} opts_parser;

static const char *nearest_option(const opt_def *defs, const char *word, size_t len) {
    const char *names[128];
    int n = 0;
    for (const opt_def *k = defs; k->name && n < 128; k++) names[n++] = k->name;
    return opts_nearest(word, len, names, n);
}

/* "unknown option" for the len bytes at word, with the option it is a near miss of; a command
 * that takes positional arguments says how to give one that begins with '-' */
static void report_unknown(const opts_parser *p, const char *word, size_t len) {
    const char *near = nearest_option(p->defs, word, len);
    if (near) opts_error(p->argv, p->first, "unknown option '%.*s' (did you mean %s?)", (int)len, word, near);
    else if (p->positionals)
        opts_error(p->argv, p->first, "unknown option '%.*s' (an argument that begins with '-' goes after '--')",
                   (int)len, word);
    else opts_error(p->argv, p->first, "unknown option '%.*s'", (int)len, word);
}

/* d given (shown as the user wrote it: "--beam" or "-b (--beam)") with the value v (NULL when the
 * command line ends first); false after reporting a missing or bad value */
static bool take(opts_parser *p, const opt_def *d, const char *shown, const char *v) {
    if (p->given) p->given[d - p->defs] = true;
    if (d->type == OPT_FLAG) {
        *(bool *)d->value = true;
        if (strcmp(d->name, "--help") == 0) p->help = true;
        return true;
    }
    const opt_range *r = range_of(d, p->ranges);
    char expect[160];
    expectation(d, r, expect, sizeof expect);
    if (!v) {
        /* a string's value as its help says: "FILE, a checkpoint written by train" */
        const char *h = d->help, *rest = h + strcspn(h, " ");
        if (d->type == OPT_STRING)
            opts_error(p->argv, p->first, "%s needs a value: %.*s, %s", shown, (int)(rest - h), h,
                       rest + strspn(rest, " "));
        else opts_error(p->argv, p->first, "%s needs a value: %s", shown, expect);
        return false;
    }
    if (!parse_value(d, r, v)) {
        opts_error(p->argv, p->first, "%s expects %s, got '%s'", shown, expect, v);
        return false;
    }
    return true;
}

/* argv[i], "--name" or "--name=value"; the index of the last argument used, or -1 after an error */
static int long_option(opts_parser *p, int i) {
    const char *a = p->argv[i], *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const opt_def *d = find_long(p->defs, a, len);
    if (!d) {
        report_unknown(p, a, len);
        return -1;
    }
    if (d->type == OPT_FLAG && eq) {
        opts_error(p->argv, p->first, "%s takes no value, got '%s'", d->name, eq + 1);
        return -1;
    }
    const char *v = d->type == OPT_FLAG ? NULL : eq ? eq + 1 : i + 1 < p->argc ? p->argv[++i] : NULL;
    return take(p, d, d->name, v) ? i : -1;
}

/* argv[i], short options: "-b 4", "-b4", "-h"; the index of the last argument used, or -1 */
static int short_options(opts_parser *p, int i) {
    const char *a = p->argv[i];
    /* a long name with one dash ("-beam") is refused, not read as -b with the value "eam" */
    char dashed[72] = "";
    if (strlen(a) > 2 && strlen(a) < 64) snprintf(dashed, sizeof dashed, "-%s", a);
    if (*dashed && find_long(p->defs, dashed, strlen(dashed))) {
        opts_error(p->argv, p->first, "unknown option '%s' (did you mean %s?)", a, dashed);
        return -1;
    }
    for (const char *c = a + 1; *c; c++) {
        const opt_def *d = find_short(p->defs, *c);
        if (!d) {
            /* the whole argument named when its first letter is unknown ("-checkpint", with the
             * long option it is a near miss of; "-5 degrees"), else the letter ("-x" of "-hx") */
            const char *near = c == a + 1 && *dashed ? nearest_option(p->defs, dashed, strlen(dashed)) : NULL;
            char letter[3] = {'-', *c, 0};
            if (near) opts_error(p->argv, p->first, "unknown option '%s' (did you mean %s?)", a, near);
            else report_unknown(p, c == a + 1 ? a : letter, c == a + 1 ? strlen(a) : 2);
            return -1;
        }
        char shown[64];
        snprintf(shown, sizeof shown, "-%c (%s)", *c, d->name);
        if (d->type == OPT_FLAG) {
            if (!take(p, d, shown, NULL)) return -1;
            if (p->help) return i;
            continue;
        }
        const char *v = c[1] ? c + 1 : i + 1 < p->argc ? p->argv[++i] : NULL;
        return take(p, d, shown, v) ? i : -1;
    }
    return i;
}

bool opts_parse(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                int maxpos, int *npos) {
    return opts_parse_checked(argc, argv, first, defs, NULL, pos, maxpos, npos, NULL);
}

bool opts_parse_given(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                      int maxpos, int *npos, bool *given) {
    return opts_parse_checked(argc, argv, first, defs, NULL, pos, maxpos, npos, given);
}

bool opts_parse_checked(int argc, char **argv, int first, const opt_def *defs, const opt_range *ranges,
                        const char **pos, int maxpos, int *npos, bool *given) {
    opts_parser p = {argc, first, argv, defs, ranges, given, maxpos > 0, false};
    bool options = true; /* until "--" */
    *npos = 0;
    for (int i = first; i < argc && !p.help; i++) {
        const char *a = argv[i];
        if (options && strcmp(a, "--") == 0) {
            options = false;
        } else if (options && a[0] == '-' && a[1]) {
            i = a[1] == '-' ? long_option(&p, i) : short_options(&p, i);
            if (i < 0) return false;
        } else if (*npos < maxpos) {
            pos[(*npos)++] = a;
        } else {
            opts_error(argv, first, "unexpected argument '%s'", a);
            return false;
        }
    }
    return true;
}

/* ---- the model configuration and vocabularies inside a checkpoint ----
 * A vocabulary is one config string "<name>", its tokens one a line. Checkpoints of earlier
 * versions (config strings of at most 255 bytes) split it into "<name>.0", "<name>.1", ...
 * each holding whole lines, with "<name>.parts" their count: that form still loads. */

/* the vocabulary text of name (malloc'd), in either form; NULL when missing or damaged */
static char *load_text(const ag_train_state *st, const char *name) {
    const char *whole = ag_config_get_string(st, name);
    if (whole) return strdup(whole);
    char key[AG_CHECKPOINT_NAME_MAX];
    int64_t parts = 0;
    snprintf(key, sizeof key, "%s.parts", name);
    if (!ag_config_get_int(st, key, &parts) || parts < 1 || parts > st->nconfig) return NULL;
    size_t total = 1, at = 0;
    for (int64_t i = 0; i < parts; i++) {
        snprintf(key, sizeof key, "%s.%lld", name, (long long)i);
        const char *s = ag_config_get_string(st, key);
        if (!s) return NULL;
        total += strlen(s);
    }
    char *text = malloc(total);
    for (int64_t i = 0; text && i < parts; i++) {
        snprintf(key, sizeof key, "%s.%lld", name, (long long)i);
        const char *s = ag_config_get_string(st, key);
        memcpy(text + at, s, strlen(s));
        at += strlen(s);
    }
    if (text) text[at] = 0;
    return text;
}

/* the SentencePiece vocabulary whose model is the base64 config string key */
static bool load_spm(const ag_train_state *st, const char *key, tr_vocab *v, const char *name, char *err,
                     size_t errsz) {
    const char *b64 = ag_config_get_string(st, key);
    char *model = NULL;
    size_t len = 0;
    if (!b64 || tr_base64_decode(b64, &model, &len) != 0) {
        snprintf(err, errsz, "%s: %s", key, b64 ? "not base64" : "missing");
        return false;
    }
    bool ok = tr_vocab_from_spm(v, model, len, name, err, errsz) == 0;
    free(model);
    return ok;
}

bool config_store(ag_train_state *st, const model_config *c, const tr_vocab *src, const tr_vocab *tgt,
                  tr_tok_mode mode, int64_t max_len, char *msg, size_t msgsize) {
    bool ok = ag_config_set_string(st, "model", model_kind_name(c->kind)) &&
              ag_config_set_int(st, "d_model", c->d_model) && ag_config_set_int(st, "nhead", c->nhead) &&
              ag_config_set_int(st, "dim_feedforward", c->ff) && ag_config_set_int(st, "encoder_layers", c->enc_layers) &&
              ag_config_set_int(st, "decoder_layers", c->dec_layers) && ag_config_set_int(st, "hidden", c->hidden) &&
              ag_config_set_double(st, "dropout", c->dropout) && ag_config_set_int(st, "positions", c->max_len) &&
              ag_config_set_int(st, "max_len", max_len) &&
              ag_config_set_string(st, "tokens", mode == TR_SPM ? "spm" : mode == TR_CHARS ? "chars" : "words");
    if (!ok) {
        snprintf(msg, msgsize, "the model configuration does not fit the checkpoint");
        return false;
    }
    /* a SentencePiece vocabulary is its model's bytes, in base64 (config strings are text) */
    bool spm = mode == TR_SPM;
    char *s = spm ? tr_base64_encode(src->spm_model, src->spm_len) : tr_vocab_to_string(src);
    char *t = spm ? tr_base64_encode(tgt->spm_model, tgt->spm_len) : tr_vocab_to_string(tgt);
    ok = s && t && ag_config_set_string(st, spm ? "src_spm" : "src_vocab", s) &&
         ag_config_set_string(st, spm ? "tgt_spm" : "tgt_vocab", t);
    if (!ok)
        snprintf(msg, msgsize, "out of memory storing the vocabularies (%d and %d tokens) in the checkpoint's "
                 "configuration", src->size, tgt->size);
    free(s);
    free(t);
    return ok;
}

/* A damaged configuration must not reach model_new (whose layers refuse impossible sizes) nor
 * the decoding buffers sized by max_len; train holds its options to the same limits. */
bool model_config_check(const model_config *c, int64_t max_len, char *msg, size_t msgsize) {
    int64_t max_layers = model_kind_recurrent(c->kind) ? AG_GRU_MAX_LAYERS : AG_TRANSFORMER_MAX_LAYERS;
    const struct {
        const char *key;
        int64_t v, lo, hi;
    } range[] = {{"d_model", c->d_model, 1, TR_MAX_SIZE},
                 {"nhead", c->nhead, 1, c->d_model},
                 {"dim_feedforward", c->ff, 1, TR_MAX_SIZE},
                 {"encoder_layers", c->enc_layers, 1, max_layers},
                 {"decoder_layers", c->dec_layers, 1, max_layers},
                 {"hidden", c->hidden, 1, TR_MAX_SIZE},
                 {"max_len", max_len, 2, TR_MAX_SIZE},
                 {"positions", c->max_len, max_len, TR_MAX_POSITIONS}};
    for (size_t i = 0; i < sizeof range / sizeof *range; i++)
        if (range[i].v < range[i].lo || range[i].v > range[i].hi) {
            snprintf(msg, msgsize, "%s = %lld, expected %lld to %lld", range[i].key, (long long)range[i].v,
                     (long long)range[i].lo, (long long)range[i].hi);
            return false;
        }
    if (c->d_model % c->nhead != 0) {
        snprintf(msg, msgsize, "d_model %lld is not a multiple of nhead %lld", (long long)c->d_model,
                 (long long)c->nhead);
        return false;
    }
    if (!(c->dropout >= 0 && c->dropout < 1)) {
        snprintf(msg, msgsize, "dropout = %s, expected 0 to 1 (excluded)", tr_num_text(c->dropout).s);
        return false;
    }
    return true;
}

tr_text tr_num_text(double x) {
    tr_text t;
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(t.s, sizeof t.s, "%.*g", digits, x);
        if (strtod(t.s, NULL) == x) break;
    }
    return t;
}

bool trained_load(trained *t, const char *path, char *msg, size_t msgsize) {
    memset(t, 0, sizeof *t);
    ag_checkpoint_status st = ag_checkpoint_load(path, NULL, NULL, &t->state, NULL, msg, msgsize);
    if (st != AG_CHECKPOINT_OK) goto fail;
    const char *kind = ag_config_get_string(&t->state, "model"), *tokens = ag_config_get_string(&t->state, "tokens");
    model_config c = {0};
    bool ok = tokens && model_kind_parse(kind, &c.kind);
    ok = ok && ag_config_get_int(&t->state, "d_model", &c.d_model) && ag_config_get_int(&t->state, "nhead", &c.nhead) &&
         ag_config_get_int(&t->state, "dim_feedforward", &c.ff) &&
         ag_config_get_int(&t->state, "encoder_layers", &c.enc_layers) &&
         ag_config_get_int(&t->state, "decoder_layers", &c.dec_layers) &&
         ag_config_get_int(&t->state, "hidden", &c.hidden) && ag_config_get_double(&t->state, "dropout", &c.dropout) &&
         ag_config_get_int(&t->state, "positions", &c.max_len) &&
         ag_config_get_int(&t->state, "max_len", &t->max_len);
    if (!ok) {
        snprintf(msg, msgsize, "%s: not a checkpoint of attograd-translate (model configuration missing)", path);
        goto fail;
    }
    char why[256];
    if (!model_config_check(&c, t->max_len, why, sizeof why)) {
        snprintf(msg, msgsize, "%s: damaged model configuration: %s", path, why);
        goto fail;
    }
    t->mode = strcmp(tokens, "spm") == 0 ? TR_SPM : strcmp(tokens, "chars") == 0 ? TR_CHARS : TR_WORDS;
    char err[TR_ERR_SIZE] = "";
    if (t->mode == TR_SPM) {
        ok = load_spm(&t->state, "src_spm", &t->src, "source SentencePiece model", err, sizeof err) &&
             load_spm(&t->state, "tgt_spm", &t->tgt, "target SentencePiece model", err, sizeof err);
    } else {
        char *sv = load_text(&t->state, "src_vocab"), *tv = load_text(&t->state, "tgt_vocab");
        ok = sv && tv && tr_vocab_from_string(&t->src, sv, "source vocabulary", err, sizeof err) == 0 &&
             tr_vocab_from_string(&t->tgt, tv, "target vocabulary", err, sizeof err) == 0;
        free(sv);
        free(tv);
    }
    if (!ok) {
        snprintf(msg, msgsize, "%s: the vocabularies in the checkpoint are missing or damaged%s%s", path,
                 *err ? ": " : "", err);
        goto fail;
    }
    c.src_vocab = t->src.size;
    c.tgt_vocab = t->tgt.size;
    /* the model must fit in the file that holds its parameters, 4 bytes each, and in memory:
     * a damaged size is refused here, before anything is allocated */
    double need = 4 * (double)model_param_count(&c);
    struct stat fs;
    if (stat(path, &fs) == 0 && need > (double)fs.st_size) {
        snprintf(msg, msgsize, "%s: damaged model configuration: d_model %lld, dim_feedforward %lld, hidden %lld, "
                 "%lld+%lld layers and vocabularies of %lld and %lld tokens make %.0f bytes of parameters, more "
                 "than the file's %lld", path, (long long)c.d_model, (long long)c.ff, (long long)c.hidden,
                 (long long)c.enc_layers, (long long)c.dec_layers, (long long)c.src_vocab, (long long)c.tgt_vocab,
                 need, (long long)fs.st_size);
        goto fail;
    }
    if (!tr_model_fits_memory(&c, 0, 0, path, msg, msgsize)) goto fail;
    t->m = model_new(&c, AG_F32, 0);
    if (!t->m || (st = ag_checkpoint_load(path, model_params(t->m), NULL, NULL, NULL, msg, msgsize)) != AG_CHECKPOINT_OK)
        goto fail;
    return true;
fail: /* everything loaded so far, the configuration's strings included */
    trained_free(t);
    return false;
}

void trained_free(trained *t) {
    model_free(t->m);
    tr_vocab_free(&t->src);
    tr_vocab_free(&t->tgt);
    ag_train_state_clear(&t->state);
    memset(t, 0, sizeof *t);
}

/* ---- translating ---- */

int64_t translate_width(const trained *t) { return 2 * t->max_len + 8; }

void translate_ids(trained *t, const char *const *in, int n, int beam, double length_penalty, int64_t *hyp) {
    enum { CHUNK = 64 };
    int64_t W = translate_width(t);
    ag_arena *arena = translate_arena(), *prev = ag_arena_use(arena);
    for (int at = 0; at < n; at += CHUNK) {
        int B = n - at < CHUNK ? n - at : CHUNK;
        ag_tensor *s = translate_source(t, in + at, B);
        model_translate(t->m, s, W, beam, length_penalty, hyp + (int64_t)at * W);
        ag_arena_reset(arena);
    }
    ag_arena_use(prev);
}

static const char *MAIN_USAGE =
    "usage: attograd-translate COMMAND [options]\n"
    "commands:\n"
    "  train       train a model on a TSV parallel corpus (source<TAB>target per line)\n"
    "  eval        loss, exact match, BLEU and chrF of a checkpoint on a TSV file\n"
    "  translate   translate sentences given as arguments, or one per line on stdin\n"
    "  attention   draw the cross-attention of one sentence as an SVG heatmap\n"
    "  score       sacreBLEU's BLEU and chrF and exact match of a hypothesis file against references\n"
    "  average     average the parameters of checkpoints of one model into a new checkpoint\n"
    "`attograd-translate COMMAND --help` (or -h) lists a command's options.\n"
    "options:\n"
    "  -h, --help      this text\n"
    "      --version   the version";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "%s\n", MAIN_USAGE);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "train") == 0) return cmd_train(argc, argv);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(cmd, "translate") == 0) return cmd_translate(argc, argv);
    if (strcmp(cmd, "attention") == 0) return cmd_attention(argc, argv);
    if (strcmp(cmd, "score") == 0) return cmd_score(argc, argv);
    if (strcmp(cmd, "average") == 0) return cmd_average(argc, argv);
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        printf("%s\n", MAIN_USAGE);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("attograd-translate %s\n", AG_TRANSLATE_VERSION);
        return 0;
    }
    const char *commands[] = {"train", "eval", "translate", "attention", "score", "average", "--help", "--version"};
    const char *near = opts_nearest(cmd, strlen(cmd), commands, 8);
    const char *what = cmd[0] == '-' && cmd[1] ? "option" : "command";
    if (near) return opts_error(argv, 1, "unknown %s '%s' (did you mean %s?)", what, cmd, near);
    return opts_error(argv, 1, "unknown %s '%s'", what, cmd);
}
