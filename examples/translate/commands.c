/* attograd-translate eval | translate | attention */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "svg.h"
#include "textio.h"
#include "train_internal.h"
#include "translate.h"

/* what --beam and --length-penalty accept: a beam of 64 already holds 64 rows per sentence */
static const opt_range DECODE_RANGES[] = {
    {"--beam", 1, 64, false, false, NULL},
    {"--length-penalty", 0, INFINITY, false, false, NULL},
    {"--max-input-tokens", 1, 65536, false, false, NULL},
    {"--n-best", 1, 64, false, false, NULL},
    {"--batch", 1, 4096, false, false, NULL},
    {"--max-len-ratio", 0, 1000, false, false, NULL},
    {NULL, 0, 0, false, false, NULL},
};

/* stdout flushed; false (status 1) after saying on stderr why it cannot be written */
static bool stdout_ok(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return true;
    fprintf(stderr, "attograd-translate: writing stdout: %s\n", errno ? strerror(errno) : "write error");
    return false;
}

/* what the model's source tokens are called in messages */
static const char *unit_name(const trained *t) {
    return t->mode == TR_SPM ? "piece" : t->mode == TR_CHARS ? "character" : "word";
}

/* What the model will not read as given, on stderr after where ("stdin:3: ", or ""): the tokens
 * of sentence that the source vocabulary lacks, in one line, each named once (the model reads
 * them as <unk>; control characters and invalid UTF-8 as \xNN), and the tokens past the first
 * reads (what the model's positions allow). */
static void report_input(const trained *t, const char *sentence, int reads, const char *where) {
    enum { MAXTOK = 1024 };
    int64_t ids[MAXTOK];
    bool spm = t->mode == TR_SPM;
    int total = tr_vocab_encode(&t->src, sentence, t->mode, ids, MAXTOK);
    const char *unit = unit_name(t);
    if (total > reads)
        fprintf(stderr, "attograd-translate: %s%d %ss: the model reads the first %d (it was trained with --max-len "
                        "%lld)\n", where, total, unit, reads, (long long)t->max_len);
    /* the words (characters) that become <unk>: a subword model names the words whose pieces
     * include one (none with the byte pieces train gives its models) */
    tr_span tok[MAXTOK];
    int n = tr_tokenize(sentence, spm ? TR_WORDS : t->mode, tok, MAXTOK), unknown = 0;
    if (n > MAXTOK) n = MAXTOK;
    if (!spm && n > reads) n = reads;
    char list[1024], word[256];
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        bool unk = false;
        if (!spm) {
            unk = tr_vocab_id(&t->src, tok[i].s, tok[i].len) == TR_UNK;
        } else if (tok[i].len < (int)sizeof word) {
            int64_t pieces[64];
            snprintf(word, sizeof word, "%.*s", tok[i].len, tok[i].s);
            int k = tr_vocab_encode(&t->src, word, t->mode, pieces, 64);
            for (int j = 0; j < k && j < 64 && !unk; j++) unk = pieces[j] == TR_UNK;
        }
        if (!unk) continue;
        bool again = false;
        for (int j = 0; j < i && !again; j++)
            again = tok[j].len == tok[i].len && memcmp(tok[j].s, tok[i].s, (size_t)tok[i].len) == 0;
        if (again) continue;
        char shown[256];
        tr_text_clean(tok[i].s, (size_t)tok[i].len, TR_TEXT_ESCAPED, shown, sizeof shown);
        if (at < sizeof list) at += (size_t)snprintf(list + at, sizeof list - at, "%s'%s'", unknown ? ", " : "", shown);
        unknown++;
    }
    if (unknown) {
        const char *what = spm ? "word" : unit;
        fprintf(stderr, "attograd-translate: %sunknown %s%s %s (not in the source vocabulary)\n", where, what,
                unknown > 1 ? "s" : "", list);
    }
}

enum { ATTN_MAX = 256 }; /* rows and columns of an attention picture, at most */

/* source tokens attention_svg draws: as translate_ids reads them (the model's positions cover
 * max_len source ids, <eos> one of them), and a column for each */
static int attention_reads(const trained *t) {
    return t->max_len - 1 < ATTN_MAX - 1 ? (int)t->max_len - 1 : ATTN_MAX - 1;
}

bool attention_svg(trained *t, const char *sentence, const char *path, char *msg, size_t msgsize) {
    int64_t src[ATTN_MAX], tgt[ATTN_MAX];
    int maxs = attention_reads(t);
    int S = tr_vocab_encode(&t->src, sentence, t->mode, src, maxs);
    if (S > maxs) S = maxs;
    src[S++] = TR_EOS;
    /* the rows are the ids the model produced, not its text encoded again: an <unk> it
     * produced would come back as the three tokens < unk > */
    int64_t W = translate_width(t);
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)W);
    translate_ids(t, &sentence, 1, 1, 0.0, hyp);
    size_t len = tr_vocab_decode(&t->tgt, hyp, (int)W, t->mode, NULL, 0);
    char *raw = malloc(len + 1), *out = NULL;
    if (raw) tr_vocab_decode(&t->tgt, hyp, (int)W, t->mode, raw, len + 1);
    if (raw) out = tr_text_clean_dup(raw, len, TR_TEXT_LINE); /* as translate prints it */
    free(raw);
    if (!out) {
        free(hyp);
        snprintf(msg, msgsize, "%s: out of memory", path);
        return false;
    }
    int T = tr_ids_len(hyp, (int)W);
    if (T > ATTN_MAX - 1) T = ATTN_MAX - 1;
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

static const char *EVAL_USAGE =
    "usage: attograd-translate eval --checkpoint FILE --data FILE [--beam K]\n"
    "Loss (teacher-forced cross entropy per target token), exact match, and sacreBLEU's corpus BLEU\n"
    "and chrF2 on the detokenized translations, of a checkpoint on a TSV file, in one line:\n"
    "\"FILE: N pairs, loss L, greedy exact match E%, BLEU B, chrF2 C\", then sacreBLEU's lines for\n"
    "both with their signatures.";

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    int64_t beam = 1;
    bool strict = false, help = false;
    const opt_def defs[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "FILE  a checkpoint written by train"},
        {"--data", OPT_STRING, &data, "FILE  TSV corpus to evaluate on"},
        {"--beam", OPT_INT, &beam, "K     beam size (1, the default: greedy)"},
        {"--strict", OPT_FLAG, &strict, "      stop at the first bad line instead of skipping it"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    int npos;
    if (!opts_parse_checked(argc, argv, 2, defs, DECODE_RANGES, NULL, 0, &npos, NULL)) return 2;
    if (help) {
        opts_usage(stdout, EVAL_USAGE, defs, DECODE_RANGES);
        return stdout_ok() ? 0 : 1;
    }
    if (!ckpt) return opts_error(argv, 2, "--checkpoint FILE is required (a checkpoint written by train)");
    if (!data) return opts_error(argv, 2, "--data FILE is required (the TSV corpus to evaluate on)");
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
    /* decode every source sentence; exact match, BLEU and chrF compare it with the reference as
     * train's evaluations do (tr_id_scores_add) */
    enum { PART = 64, MAXT = 512 };
    int64_t W = translate_width(&t), r[MAXT];
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)(PART * W));
    tr_id_scores sc;
    bool ok = tr_id_scores_init(&sc) && hyp;
    for (int64_t at = 0; ok && at < c.n; at += PART) {
        int k = c.n - at < PART ? (int)(c.n - at) : PART;
        translate_ids(&t, (const char *const *)c.src + at, k, (int)beam, 0.6, hyp);
        for (int i = 0; ok && i < k; i++) {
            /* encode returns the full count, which may exceed the buffer: clamp */
            int rn = tr_vocab_encode(&t.tgt, c.tgt[at + i], t.mode, r, MAXT);
            ok = tr_id_scores_add(&sc, &t.tgt, t.mode, hyp + i * W, tr_ids_len(hyp + i * W, (int)W), r,
                                  rn < MAXT ? rn : MAXT, c.tgt[at + i]);
        }
    }
    free(hyp);
    /* the loss on the pairs the model was trained to read (at most max_len tokens a side), as
     * train's evaluations compute it */
    tr_dataset d = {0};
    double loss = NAN;
    if (tr_dataset_build(&d, &c, &t.src, &t.tgt, t.mode, (int)t.max_len, err, sizeof err) == 0) {
        ag_arena *arena = ag_arena_new(1 << 20), *prev = ag_arena_use(arena);
        loss = evaluate_loss(t.m, &d);
        ag_arena_use(prev);
        ag_arena_free(arena);
    }
    char left_out[160] = "";
    if (d.n < c.n)
        snprintf(left_out, sizeof left_out, " (on %lld pairs: %lld longer than the model's %lld tokens left out)",
                 (long long)d.n, (long long)(c.n - d.n), (long long)t.max_len);
    if (ok) {
        printf("%s: %lld pairs, loss %.4f%s, %s exact match %.2f%%, BLEU %.2f, chrF2 %.2f\n", data, (long long)c.n, loss,
               left_out, beam > 1 ? "beam" : "greedy", 100 * tr_scores_exact(&sc.s), tr_scores_bleu(&sc.s),
               tr_scores_chrf(&sc.s));
        tr_metrics_print(stdout, &sc.s.bleu, &sc.s.chrf, 1, 2, NULL);
    } else {
        fprintf(stderr, "attograd-translate: eval: out of memory\n");
    }
    tr_id_scores_free(&sc);
    tr_dataset_free(&d);
    tr_corpus_free(&c);
    trained_free(&t);
    return ok && stdout_ok() ? 0 : 1;
}

static const char *TRANSLATE_USAGE =
    "usage: attograd-translate translate --checkpoint FILE [--beam K] [--length-penalty A] [--max-input-tokens N]\n"
    "       [--n-best N] [--scores] [--max-len-ratio R] [--batch N] [--] [SENTENCE ... | -]\n"
    "Translates the sentences given as arguments, or else each line of stdin as soon as it is read,\n"
    "one line out per sentence. A word the model does not know is named on stderr and read as <unk>.\n"
    "An empty line, and a line over the --max-input-tokens limit (said on stderr), get an empty line.\n"
    "A sentence that begins with '-' goes after '--'; '-' alone reads stdin.";

/* A line at most BYTES_PER_TOKEN * --max-input-tokens bytes long is held and tokenized; a longer
 * one is not read into memory at all (textio.h), so one huge line costs neither memory nor time.
 * 16 bytes a token is far more than any tokenizer's average on text. */
enum { BYTES_PER_TOKEN = 16 };

/* how translate reads and answers: the model, the decoding settings and the input limits */
typedef struct {
    trained *t;
    ag_decode_config dc;
    int batch;
    bool nbest, scores; /* Marian's n-best lines; the score after each translation */
    int64_t max_tokens;
    size_t max_bytes;
    const char *where; /* "stdin:" or "argument " before a line's number in messages; NULL: none */
} translator;

/* an input line: n bytes at s, or s NULL for a line of n bytes that was not held; no its number */
typedef struct {
    const char *s;
    size_t n;
    int64_t no;
} input_line;

/* line's text for the tokenizer (malloc'd), or NULL when its output line is empty: an empty or
 * blank line, or one over the limits (said on stderr after at); *oom when memory ran out */
static char *accept_line(const translator *x, const input_line *line, const char *at, bool *oom) {
    const trained *t = x->t;
    if (!line->s || line->n > x->max_bytes) {
        fprintf(stderr, "attograd-translate: %s%zu bytes, more than the %zu that --max-input-tokens %lld allows "
                        "(%d a token): not translated, an empty line stands for it\n",
                at, line->n, x->max_bytes, (long long)x->max_tokens, BYTES_PER_TOKEN);
        return NULL;
    }
    char *text = tr_text_clean_dup(line->s, line->n, TR_TEXT_INPUT);
    if (!text) return *oom = true, NULL;
    int tokens = tr_tokenize(text, TR_WORDS, NULL, 0) ? tr_vocab_encode(&t->src, text, t->mode, NULL, 0) : 0;
    if (tokens > x->max_tokens)
        fprintf(stderr, "attograd-translate: %s%d %ss, more than --max-input-tokens %lld: not translated, an empty "
                        "line stands for it\n", at, tokens, unit_name(t), (long long)x->max_tokens);
    if (tokens == 0 || tokens > x->max_tokens) {
        free(text);
        return NULL;
    }
    report_input(t, text, (int)t->max_len - 1, at);
    return text;
}

/* Translate n lines and print one line for each, in order: the translation made one printable
 * line (control characters dropped, textio.h), or an empty line. 0, or 1 after a message when
 * stdout cannot be written or memory ran out. */
static int translate_print(const translator *x, const input_line *in, int n) {
    size_t m = (size_t)(n ? n : 1);
    char **text = calloc(m, sizeof *text), **out = NULL;
    const char **todo = calloc(m, sizeof *todo);
    bool oom = !text || !todo;
    int k = 0;
    for (int i = 0; i < n && !oom; i++) {
        char at[64] = "";
        if (x->where) snprintf(at, sizeof at, "%s%lld: ", x->where, (long long)in[i].no);
        if ((text[i] = accept_line(x, &in[i], at, &oom))) todo[k++] = text[i];
    }
    int64_t nb = x->dc.n_best;
    double *score = calloc(m * (size_t)nb, sizeof *score);
    oom = oom || !score || !(out = calloc(m * (size_t)nb, sizeof *out)) ||
          !translate_texts(x->t, todo, k, &x->dc, x->batch, out, score);
    for (int i = 0, j = 0; i < n && !oom; i++) {
        if (!text[i]) { /* a line not translated stands as an empty translation, of score 0 */
            translate_print_hyp(stdout, "", 0.0, in[i].no - 1, x->nbest, x->scores);
            continue;
        }
        for (int64_t h = 0; h < nb; h++, j++)
            if (score[j] != -INFINITY) /* else the beam found fewer */
                translate_print_hyp(stdout, out[j], score[j], in[i].no - 1, x->nbest, x->scores);
    }
    free(score);
    for (int i = 0; i < n && text; i++) free(text[i]);
    for (int64_t j = 0; out && j < (int64_t)k * nb; j++) free(out[j]);
    free(text);
    free(out);
    free(todo);
    if (oom) fprintf(stderr, "attograd-translate: out of memory translating\n");
    return stdout_ok() && !oom ? 0 : 1;
}

/* stdin as it comes: the complete lines read so far (up to a batch) are translated together and
 * answered, and stdout flushed, before the next read waits for more. A terminal gets its answer
 * per line, a pipe streams, and a file is translated in batches. 0, or 1 when stdin cannot be
 * read or stdout written. */
static int translate_stdin(const translator *x) {
    enum { PART = 64 };
    tr_line_reader r;
    tr_line_reader_init(&r, 0, x->max_bytes);
    input_line lines[PART];
    char err[TR_ERR_SIZE];
    int n = 0, status = 0;
    for (;;) {
        const char *s;
        size_t len;
        /* wait for input only when no line is held: held lines are answered first */
        tr_line_status st = tr_line_next(&r, n == 0, &s, &len, err, sizeof err);
        if (st == TR_LINE_OK || st == TR_LINE_LONG) {
            lines[n++] = (input_line){s, len, r.lineno};
            if (n < PART) continue;
        }
        if (st == TR_LINE_ERROR) {
            fprintf(stderr, "attograd-translate: reading stdin: %s\n", err);
            status = 1;
        }
        if (n > 0 && translate_print(x, lines, n) != 0) status = 1;
        n = 0;
        if (status || st == TR_LINE_END) break;
    }
    tr_line_reader_free(&r);
    return status;
}

int cmd_translate(int argc, char **argv) {
    const char *ckpt = NULL;
    int64_t beam = 1, max_tokens = 4096, n_best = 0, batch = 64;
    double alpha = 0.6, ratio = 2;
    const char *norm = NULL;
    bool help = false, scores = false;
    const opt_def defs[] = {
        {"--checkpoint", OPT_STRING, &ckpt, "FILE  a checkpoint written by train"},
        {"--beam", OPT_INT, &beam, "K     beam size (1, the default: greedy)"},
        {"--length-penalty", OPT_DOUBLE, &alpha, "A     length penalty exponent for beams (0.6)"},
        {"--length-norm", OPT_STRING, &norm, "NAME  gnmt: score / ((5+len)/6)^A (default); marian: score / len^A"},
        {"--n-best", OPT_INT, &n_best, "N     the N best translations of each sentence (a beam of at least N): 'id ||| text ||| score'"},
        {"--scores", OPT_FLAG, &scores, "      append ' ||| score' (the normalised log-probability) to each line"},
        {"--max-len-ratio", OPT_DOUBLE, &ratio, "R     at most R * source tokens + 8 tokens out (2)"},
        {"--batch", OPT_INT, &batch, "N     sentences decoded together (64)"},
        {"--max-input-tokens", OPT_INT, &max_tokens,
         "N     longest line translated, in tokens (4096); 16 bytes a token at most"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    enum { MAXPOS = 1024 };
    const char **pos = calloc(MAXPOS, sizeof *pos);
    int npos;
    if (!opts_parse_checked(argc, argv, 2, defs, DECODE_RANGES, pos, MAXPOS, &npos, NULL)) {
        free(pos);
        return 2;
    }
    if (help || !ckpt) {
        free(pos);
        if (!help) return opts_error(argv, 2, "--checkpoint FILE is required (a checkpoint written by train)");
        opts_usage(stdout, TRANSLATE_USAGE, defs, DECODE_RANGES);
        return stdout_ok() ? 0 : 1;
    }
    char msg[2048];
    ag_decode_config dc;
    if (!translate_decode_config(&dc, beam, alpha, norm, n_best, ratio, msg, sizeof msg)) {
        free(pos);
        return opts_error(argv, 2, "%s", msg);
    }
    trained t;
    if (!trained_load(&t, ckpt, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        free(pos);
        return 1;
    }
    translator x = {&t, dc, (int)batch, n_best > 0, scores, max_tokens, (size_t)(BYTES_PER_TOKEN * max_tokens), "stdin:"};
    int status = 0;
    if (npos == 1 && strcmp(pos[0], "-") == 0) npos = 0; /* stdin, as cat reads it */
    if (npos > 0) {
        input_line *lines = calloc((size_t)npos, sizeof *lines);
        for (int i = 0; lines && i < npos; i++) lines[i] = (input_line){pos[i], strlen(pos[i]), i + 1};
        x.where = npos > 1 ? "argument " : NULL;
        status = lines ? translate_print(&x, lines, npos) : 1;
        if (!lines) fprintf(stderr, "attograd-translate: out of memory\n");
        free(lines);
    } else {
        status = translate_stdin(&x);
    }
    free(pos);
    trained_free(&t);
    return status;
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
    if (help) {
        opts_usage(stdout, ATTENTION_USAGE, defs, NULL);
        return stdout_ok() ? 0 : 1;
    }
    if (!ckpt) return opts_error(argv, 2, "--checkpoint FILE is required (a checkpoint written by train)");
    if (npos != 1) return opts_error(argv, 2, "one SENTENCE is required (the sentence to draw)");
    char msg[2048];
    trained t;
    if (!trained_load(&t, ckpt, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        return 1;
    }
    report_input(&t, pos[0], attention_reads(&t), "");
    bool ok = attention_svg(&t, pos[0], out, msg, sizeof msg);
    if (ok) printf("%s\n", out);
    else fprintf(stderr, "attograd-translate: %s\n", msg);
    trained_free(&t);
    return ok && stdout_ok() ? 0 : 1;
}
