/* attograd-translate eval | translate | attention */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "svg.h"
#include "translate.h"

bool attention_svg(trained *t, const char *sentence, const char *path, char *msg, size_t msgsize) {
    enum { MAXT = 256 };
    int64_t src[MAXT], tgt[MAXT];
    /* read as translate_ids reads it: the model's positions cover max_len source ids */
    int maxs = t->max_len - 1 < MAXT - 1 ? (int)t->max_len - 1 : MAXT - 1;
    int S = tr_vocab_encode(&t->src, sentence, t->mode, src, maxs);
    if (S > maxs) S = maxs;
    src[S++] = TR_EOS;
    /* the rows are the ids the model produced, not its text encoded again: an <unk> it
     * produced would come back as the three tokens < unk > */
    int64_t W = translate_width(t);
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)W);
    translate_ids(t, &sentence, 1, 1, 0.0, hyp);
    size_t need = tr_vocab_decode(&t->tgt, hyp, (int)W, t->mode, NULL, 0) + 1;
    char *out = malloc(need);
    tr_vocab_decode(&t->tgt, hyp, (int)W, t->mode, out, need);
    int T = tr_ids_len(hyp, (int)W);
    if (T > MAXT - 1) T = MAXT - 1;
    tgt[0] = TR_BOS;
    memcpy(tgt + 1, hyp, sizeof(int64_t) * (size_t)T);
    T += 1; /* rows: the decoder reads <bos> w1 … wn and predicts w1 … wn <eos> */
    free(hyp);
    ag_arena *arena = ag_arena_new(1 << 20), *prev = ag_arena_use(arena);
    int maps = 0;
    const double *w = model_attention(t->m, ag_wrap(AG_I64, AG_SHAPE(1, S), src), ag_wrap(AG_I64, AG_SHAPE(1, T), tgt),
                                      &maps);
    /* labels: source tokens, and for each row the token the model produced there */
    const char **sl = calloc((size_t)S, sizeof *sl), **tl = calloc((size_t)T, sizeof *tl);
    for (int i = 0; i < S; i++) sl[i] = t->src.token[src[i]];
    for (int i = 0; i < T; i++) tl[i] = i + 1 < T ? t->tgt.token[tgt[i + 1]] : "<eos>";
    const model_config *c = model_cfg(t->m);
    int layers = model_kind_recurrent(c->kind) ? 1 : (int)c->dec_layers, heads = maps / layers;
    char title[600], err[TR_ERR_SIZE];
    snprintf(title, sizeof title, "%s  ->  %s", sentence, out);
    bool ok = tr_svg_attention(path, title, layers, heads, T, S, w, sl, tl, err, sizeof err) == 0;
    if (!ok) snprintf(msg, msgsize, "%s", err);
    free(sl);
    free(tl);
    free(out);
    ag_arena_use(prev);
    ag_arena_free(arena);
    return ok;
}

static const char *EVAL_USAGE = "usage: attograd-translate eval --checkpoint FILE --data FILE [--beam K]\n"
                                "Loss, exact match and corpus BLEU-4 of a checkpoint on a TSV file.";

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    int64_t beam = 1;
    bool strict = false, help = false;
    const opt_def defs[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "FILE  a checkpoint written by train"},
        {"--data", OPT_STRING, &data, "FILE  TSV corpus to evaluate on"},
        {"--beam", OPT_INT, &beam, "K     beam size (1: greedy)"},
        {"--strict", OPT_FLAG, &strict, "      stop at the first bad line instead of skipping it"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    int npos;
    if (!opts_parse(argc, argv, 2, defs, EVAL_USAGE, NULL, 0, &npos)) return 2;
    if (help) {
        opts_usage(stdout, EVAL_USAGE, defs);
        return 0;
    }
    if (!ckpt || !data || beam < 1) {
        fprintf(stderr, "attograd-translate eval: --checkpoint and --data are required, --beam >= 1\n");
        opts_usage(stderr, EVAL_USAGE, defs);
        return 2;
    }
    char msg[2048], err[TR_ERR_SIZE];
    trained t;
    if (!trained_load(&t, ckpt, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        return 1;
    }
    tr_corpus c = {0};
    tr_read_opts ro = {.strict = strict};
    if (tr_corpus_read(&c, data, &ro, err, sizeof err) != 0) {
        fprintf(stderr, "attograd-translate: %s\n", err);
        trained_free(&t);
        return 1;
    }
    char note[1024];
    if (tr_corpus_skip_summary(&c, note, sizeof note) > 0) fprintf(stderr, "attograd-translate: %s: %s\n", data, note);
    /* decode every source sentence and compare its ids with the reference text's, as train does
     * (the text would not do: "<unk>" reads back as three tokens) */
    enum { PART = 64, MAXT = 512 };
    int64_t W = translate_width(&t), r[MAXT];
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)(PART * W));
    tr_bleu_stats s = {0};
    for (int64_t at = 0; at < c.n; at += PART) {
        int k = c.n - at < PART ? (int)(c.n - at) : PART;
        translate_ids(&t, (const char *const *)c.src + at, k, (int)beam, 0.6, hyp);
        for (int i = 0; i < k; i++) {
            /* encode returns the full count, which may exceed the buffer: clamp */
            int rn = tr_vocab_encode(&t.tgt, c.tgt[at + i], t.mode, r, MAXT);
            tr_bleu_add_ids(&s, hyp + i * W, tr_ids_len(hyp + i * W, (int)W), r, rn < MAXT ? rn : MAXT);
        }
    }
    free(hyp);
    printf("%s: %lld pairs, %s exact match %.2f%%, BLEU %.2f\n", data, (long long)c.n, beam > 1 ? "beam" : "greedy",
           100 * tr_exact_match(&s), 100 * tr_bleu_score(&s));
    tr_corpus_free(&c);
    trained_free(&t);
    return 0;
}

static const char *TRANSLATE_USAGE =
    "usage: attograd-translate translate --checkpoint FILE [--beam K] [--length-penalty A] [SENTENCE ...]\n"
    "Translates the sentences given as arguments, or else one per line from stdin, to stdout.";

int cmd_translate(int argc, char **argv) {
    const char *ckpt = NULL;
    int64_t beam = 1;
    double alpha = 0.6;
    bool help = false;
    const opt_def defs[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "FILE  a checkpoint written by train"},
        {"--beam", OPT_INT, &beam, "K     beam size (1: greedy)"},
        {"--length-penalty", OPT_DOUBLE, &alpha, "A     GNMT length penalty ((5+len)/6)^A for beams (0.6)"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    enum { MAXPOS = 1024 };
    const char **pos = calloc(MAXPOS, sizeof *pos);
    int npos;
    if (!opts_parse(argc, argv, 2, defs, TRANSLATE_USAGE, pos, MAXPOS, &npos)) {
        free(pos);
        return 2;
    }
    if (help || !ckpt || beam < 1) {
        if (!help) fprintf(stderr, "attograd-translate translate: --checkpoint is required, --beam >= 1\n");
        opts_usage(help ? stdout : stderr, TRANSLATE_USAGE, defs);
        free(pos);
        return help ? 0 : 2;
    }
    char msg[2048];
    trained t;
    if (!trained_load(&t, ckpt, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        free(pos);
        return 1;
    }
    int n = npos, cap = npos;
    char **lines = NULL;
    if (npos == 0) { /* stdin, one sentence per line */
        cap = 64;
        lines = malloc(sizeof *lines * (size_t)cap);
        char *line = NULL;
        size_t len = 0;
        ssize_t got;
        while ((got = getline(&line, &len, stdin)) >= 0) {
            while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
            if (n == cap) lines = realloc(lines, sizeof *lines * (size_t)(cap *= 2));
            lines[n++] = strdup(line);
        }
        free(line);
    }
    const char *const *in = npos ? pos : (const char *const *)lines;
    char **out = calloc((size_t)(n ? n : 1), sizeof *out);
    translate_sentences(&t, in, n, (int)beam, alpha, out);
    for (int i = 0; i < n; i++) {
        printf("%s\n", out[i]);
        free(out[i]);
        if (lines) free(lines[i]);
    }
    free(out);
    free(lines);
    free(pos);
    trained_free(&t);
    return 0;
}

static const char *ATTENTION_USAGE = "usage: attograd-translate attention --checkpoint FILE --out FILE.svg SENTENCE\n"
                                     "Draws every layer and head of the cross-attention for one sentence.";

int cmd_attention(int argc, char **argv) {
    const char *ckpt = NULL, *out = "attention.svg";
    bool help = false;
    const opt_def defs[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "FILE  a checkpoint written by train"},
        {"--out", OPT_STRING, &out, "FILE  the SVG to write (attention.svg)"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    const char *pos[1];
    int npos;
    if (!opts_parse(argc, argv, 2, defs, ATTENTION_USAGE, pos, 1, &npos)) return 2;
    if (help || !ckpt || npos != 1) {
        if (!help) fprintf(stderr, "attograd-translate attention: --checkpoint and one SENTENCE are required\n");
        opts_usage(help ? stdout : stderr, ATTENTION_USAGE, defs);
        return help ? 0 : 2;
    }
    char msg[2048];
    trained t;
    if (!trained_load(&t, ckpt, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        return 1;
    }
    bool ok = attention_svg(&t, pos[0], out, msg, sizeof msg);
    if (ok) printf("%s\n", out);
    else fprintf(stderr, "attograd-translate: %s\n", msg);
    trained_free(&t);
    return ok ? 0 : 1;
}
