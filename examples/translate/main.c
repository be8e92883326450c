/* attograd-translate: train a toy translation model with teacher forcing, evaluate it, translate,
 * and draw where it attends.
 *
 *   attograd-translate train --train FILE [options]
 *   attograd-translate eval --checkpoint FILE --data FILE [--beam K]
 *   attograd-translate translate --checkpoint FILE [--beam K] [SENTENCE ...]   (else stdin)
 *   attograd-translate attention --checkpoint FILE --out FILE.svg SENTENCE
 *
 * Bad input (files, corpora, options) is reported with a message and never crashes: exit status
 * 1 for a failure, 2 for a usage error. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "subword.h"
#include "translate.h"

/* ---- options ---- */

void opts_usage(FILE *f, const char *usage, const opt_def *defs) {
    fprintf(f, "%s\n", usage);
    if (defs && defs[0].name) fprintf(f, "options:\n");
    for (const opt_def *d = defs; d && d->name; d++) fprintf(f, "  %-20s %s\n", d->name, d->help);
}

static bool parse_value(const opt_def *d, const char *v) {
    char *end;
    errno = 0;
    switch (d->type) {
    case OPT_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) return false;
        *(int64_t *)d->value = x;
        return true;
    }
    case OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x)) return false;
        *(double *)d->value = x;
        return true;
    }
    case OPT_STRING: *(const char **)d->value = v; return true;
    case OPT_FLAG: return false;
    }
    return false;
}

bool opts_parse(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                int maxpos, int *npos) {
    return opts_parse_given(argc, argv, first, defs, usage, pos, maxpos, npos, NULL);
}

bool opts_parse_given(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                      int maxpos, int *npos, bool *given) {
    *npos = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            for (i++; i < argc; i++) {
                if (*npos >= maxpos) goto too_many;
                pos[(*npos)++] = argv[i];
            }
            break;
        }
        if (strncmp(a, "--", 2) != 0 || strlen(a) == 2) {
            if (*npos >= maxpos) goto too_many;
            pos[(*npos)++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const opt_def *d = NULL;
        for (const opt_def *k = defs; k->name; k++)
            if (strlen(k->name) == len && strncmp(k->name, a, len) == 0) d = k;
        if (!d) {
            fprintf(stderr, "attograd-translate: unknown option '%.*s'\n", (int)len, a);
            goto usage;
        }
        if (given) given[d - defs] = true;
        if (d->type == OPT_FLAG) {
            if (eq) {
                fprintf(stderr, "attograd-translate: option %s takes no value\n", d->name);
                goto usage;
            }
            *(bool *)d->value = true;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            fprintf(stderr, "attograd-translate: option %s needs a value (%s)\n", d->name, d->help);
            goto usage;
        }
        if (!parse_value(d, v)) {
            fprintf(stderr, "attograd-translate: option %s: '%s' is not a valid %s\n", d->name, v,
                    d->type == OPT_INT ? "integer" : "number");
            goto usage;
        }
    }
    return true;
too_many:
    fprintf(stderr, "attograd-translate: too many arguments\n");
usage:
    opts_usage(stderr, usage, defs);
    return false;
}

/* ---- the model configuration and vocabularies inside a checkpoint ----
 * A vocabulary is one config string "<name>", its tokens one a line. Checkpoints of earlier
 * versions (config strings of at most 255 bytes) split it into "<name>.0", "<name>.1", ...
 * each holding whole lines, with "<name>.parts" their count: that form still loads. */

/* the vocabulary text of name (malloc'd), in either form; NULL when missing or damaged */
static char *load_text(const ag_train_state *st, const char *name) {
    const char *whole = ag_config_get_string(st, name);
    if (whole) return strdup(whole);
    char key[AG_CKPT_NAME_MAX];
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
    bool ok = ag_config_set_string(st, "model", c->kind == MODEL_GRU ? "gru" : "transformer") &&
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
 * the decoding buffers sized by max_len: false with msg naming the field, its value and range. */
static bool check_config(const char *path, const model_config *c, int64_t max_len, char *msg, size_t msgsize) {
    int64_t max_layers = c->kind == MODEL_GRU ? AG_GRU_MAX_LAYERS : AG_TRANSFORMER_MAX_LAYERS;
    const struct {
        const char *key;
        int64_t v, lo, hi;
    } range[] = {{"d_model", c->d_model, 1, 1 << 20},
                 {"nhead", c->nhead, 1, c->d_model},
                 {"dim_feedforward", c->ff, 1, 1 << 20},
                 {"encoder_layers", c->enc_layers, 1, max_layers},
                 {"decoder_layers", c->dec_layers, 1, max_layers},
                 {"hidden", c->hidden, 1, 1 << 20},
                 {"max_len", max_len, 2, 1 << 20},
                 {"positions", c->max_len, max_len, 1 << 21}};
    for (size_t i = 0; i < sizeof range / sizeof *range; i++)
        if (range[i].v < range[i].lo || range[i].v > range[i].hi) {
            snprintf(msg, msgsize, "%s: damaged model configuration: %s = %lld, expected %lld to %lld", path,
                     range[i].key, (long long)range[i].v, (long long)range[i].lo, (long long)range[i].hi);
            return false;
        }
    if (c->d_model % c->nhead != 0) {
        snprintf(msg, msgsize, "%s: damaged model configuration: d_model %lld is not a multiple of nhead %lld", path,
                 (long long)c->d_model, (long long)c->nhead);
        return false;
    }
    if (!(c->dropout >= 0 && c->dropout < 1)) {
        snprintf(msg, msgsize, "%s: damaged model configuration: dropout = %g, expected 0 to 1 (excluded)", path,
                 c->dropout);
        return false;
    }
    return true;
}

bool trained_load(trained *t, const char *path, char *msg, size_t msgsize) {
    memset(t, 0, sizeof *t);
    ag_ckpt_status st = ag_checkpoint_load(path, NULL, NULL, &t->state, NULL, msg, msgsize);
    if (st != AG_CKPT_OK) goto fail;
    const char *kind = ag_config_get_string(&t->state, "model"), *tokens = ag_config_get_string(&t->state, "tokens");
    model_config c = {0};
    bool ok = kind && tokens && (strcmp(kind, "transformer") == 0 || strcmp(kind, "gru") == 0);
    c.kind = kind && strcmp(kind, "gru") == 0 ? MODEL_GRU : MODEL_TRANSFORMER;
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
    if (!check_config(path, &c, t->max_len, msg, msgsize)) goto fail;
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
    /* the model must fit in the file that holds its parameters, 4 bytes each: at least the
     * embeddings, and per layer the attention's four d_model x d_model projections (Transformer)
     * or the 3 hidden x hidden recurrent weights (GRU) */
    double layers = (double)(c.enc_layers + c.dec_layers), d = (double)c.d_model, h = (double)c.hidden;
    double least = 4 * (((double)c.src_vocab + (double)c.tgt_vocab) * d +
                        layers * (c.kind == MODEL_GRU ? 3 * h * h : 4 * d * d));
    struct stat fs;
    if (stat(path, &fs) == 0 && least > (double)fs.st_size) {
        snprintf(msg, msgsize, "%s: damaged model configuration: d_model %lld, hidden %lld, %lld+%lld layers and "
                 "vocabularies of %lld and %lld tokens need at least %.0f bytes of parameters, more than the "
                 "file's %lld", path, (long long)c.d_model, (long long)c.hidden, (long long)c.enc_layers,
                 (long long)c.dec_layers, (long long)c.src_vocab, (long long)c.tgt_vocab, least,
                 (long long)fs.st_size);
        goto fail;
    }
    t->m = model_new(&c, AG_F32, 0);
    if (!t->m || (st = ag_checkpoint_load(path, model_params(t->m), NULL, NULL, NULL, msg, msgsize)) != AG_CKPT_OK)
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
    int64_t L = t->max_len, W = translate_width(t);
    int64_t *src = calloc((size_t)(CHUNK * L), sizeof *src);
    ag_arena *arena = ag_arena_new(1 << 20), *prev = ag_arena_use(arena);
    for (int at = 0; at < n; at += CHUNK) {
        int B = n - at < CHUNK ? n - at : CHUNK;
        int64_t S = 1;
        memset(src, 0, sizeof(int64_t) * (size_t)(CHUNK * L));
        for (int b = 0; b < B; b++) {
            int len = tr_vocab_encode(&t->src, in[at + b], t->mode, src + b * L, (int)L - 1);
            if (len > L - 1) len = (int)L - 1;
            src[b * L + len] = TR_EOS;
            if (len + 1 > S) S = len + 1;
        }
        ag_tensor *s = ag_empty(AG_I64, AG_SHAPE(B, S));
        for (int b = 0; b < B; b++) memcpy((int64_t *)s->data + b * S, src + b * L, sizeof(int64_t) * (size_t)S);
        model_translate(t->m, s, W, beam, length_penalty, hyp + (int64_t)at * W);
        ag_arena_reset(arena);
    }
    ag_arena_use(prev);
    ag_arena_free(arena);
    free(src);
}

void translate_sentences(trained *t, const char *const *in, int n, int beam, double length_penalty, char **out) {
    enum { PART = 64 }; /* ids of a part at a time: a long input stays small */
    int64_t W = translate_width(t);
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)(PART * W));
    for (int at = 0; at < n; at += PART) {
        int k = n - at < PART ? n - at : PART;
        translate_ids(t, in + at, k, beam, length_penalty, hyp);
        for (int i = 0; i < k; i++) {
            size_t need = tr_vocab_decode(&t->tgt, hyp + i * W, (int)W, t->mode, NULL, 0) + 1;
            out[at + i] = malloc(need);
            tr_vocab_decode(&t->tgt, hyp + i * W, (int)W, t->mode, out[at + i], need);
        }
    }
    free(hyp);
}

static const char *MAIN_USAGE =
    "usage: attograd-translate COMMAND [options]\n"
    "commands:\n"
    "  train       train a model on a TSV parallel corpus (source<TAB>target per line)\n"
    "  eval        loss, exact match and BLEU of a checkpoint on a TSV file\n"
    "  translate   translate sentences given as arguments, or one per line on stdin\n"
    "  attention   draw the cross-attention of one sentence as an SVG heatmap\n"
    "`attograd-translate COMMAND --help` lists a command's options.";

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
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        printf("%s\n", MAIN_USAGE);
        return 0;
    }
    fprintf(stderr, "attograd-translate: unknown command '%s'\n%s\n", cmd, MAIN_USAGE);
    return 2;
}
