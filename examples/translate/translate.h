/* attograd-translate: what the subcommands share (options, loading a run's checkpoint). */
#ifndef TRANSLATE_H
#define TRANSLATE_H

#include "attograd.h"
#include "data.h"
#include "model.h"

/* ---- options: one table per subcommand ---- */
typedef enum { OPT_INT, OPT_DOUBLE, OPT_STRING, OPT_FLAG } opt_type;
typedef struct {
    const char *name;   /* "--steps" */
    opt_type type;
    void *value;        /* int64_t*, double*, const char**, bool* */
    const char *help;   /* "N  optimizer steps (default 3000)" */
} opt_def;

/* Parse argv[first..] against defs as getopt_long would (main.c says how: "--name value",
 * "--name=value", "-x value", "-xvalue", "--" ending the options, "-" positional); positional
 * arguments go to pos (up to maxpos, count in *npos). On a bad option prints the problem to
 * stderr (as opts_parse_checked) and returns false. --help ends the parse. */
bool opts_parse(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                int maxpos, int *npos);
/* The same, and given[k] set when defs[k] appeared on the command line (given has an entry per
 * def, zeroed by the caller). */
bool opts_parse_given(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                      int maxpos, int *npos, bool *given);

/* The values an option accepts, beyond its type: [min, max], either end excluded or infinite.
 * expect, if not NULL, replaces the generated "an integer >= 1" in messages. */
typedef struct {
    const char *name; /* "--steps" */
    double min, max;
    bool min_excluded, max_excluded;
    const char *expect;
} opt_range;

/* usage, then each option of defs: its short name if it has one (-b for --beam: main.c's
 * SHORT_NAMES), its help and, for a number, the values ranges allows ("[an integer >= 1]") */
void opts_usage(FILE *f, const char *usage, const opt_def *defs, const opt_range *ranges);

/* opts_parse_given with ranges (NULL-name terminated, may be NULL). Every problem is reported
 * as one line naming the option and what it expects (with "did you mean --steps?" for a near
 * miss of an option name), then a pointer to the command's --help; false then (exit status 2). */
bool opts_parse_checked(int argc, char **argv, int first, const opt_def *defs, const opt_range *ranges,
                        const char **pos, int maxpos, int *npos, bool *given);
/* Report a usage error of the command of argv (first: where its options begin, 2 after a
 * subcommand) the way the parser does: "attograd-translate train: " fmt, then the pointer to
 * --help. Returns 2, the exit status of a usage error. */
int opts_error(char **argv, int first, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The name of names[0..n) nearest to the len bytes at word when it is a near miss (a typo or
 * two, or a prefix of exactly one name), else NULL */
const char *opts_nearest(const char *word, size_t len, const char *const *names, int n);

/* ---- limits and numbers in messages ---- */

/* The model sizes a run may ask for and a checkpoint's configuration may hold: d_model, heads,
 * ff, hidden and pairs per batch up to TR_MAX_SIZE; the positional table of 2 max_len + 8
 * positions up to TR_MAX_POSITIONS, so --max-len up to TR_MAX_LEN; --threads up to
 * TR_MAX_THREADS (libgomp keeps a team's threads on its stack: 100000 overflow it). */
#define TR_MAX_SIZE (1 << 20)
#define TR_MAX_POSITIONS (1 << 21)
#define TR_MAX_LEN ((TR_MAX_POSITIONS - 8) / 2)
#define TR_MAX_THREADS 1024

/* a short text, returned by value: tr_num_text(x).s lives until the end of the statement */
typedef struct {
    char s[40];
} tr_text;
/* x in the fewest significant digits that read back as x ("0.001", "0.0010000000000000002"),
 * so two different values never print alike */
tr_text tr_num_text(double x);
/* "512 bytes", "12.4 GiB" */
tr_text tr_bytes_text(double bytes);
/* The bytes this process can use: physical memory, or a smaller address-space limit (RLIMIT_AS)
 * or cgroup memory.max; *what names it ("this machine has") */
double tr_memory_available(const char **what);
/* Whether the model of cfg fits in that memory: its parameters (and the positional table) to
 * translate with when batch is 0, and to train on batches of batch pairs of up to len tokens
 * with their gradients, Adam's moments and a rough estimate of the activations otherwise. False
 * with msg ("name: --d-model 1048576 ...: N parameters need 16.0 TiB for the parameters alone;
 * this machine has 23.4 GiB"; name may be NULL). Nothing is allocated. */
bool tr_model_fits_memory(const model_config *cfg, int64_t batch, int64_t len, const char *name, char *msg,
                          size_t msgsize);
/* The limits a checkpoint's configuration is held to when it loads (sizes, layers, positions,
 * heads dividing d_model, dropout): false with msg ("dim_feedforward = 2097152, expected 1 to
 * 1048576") */
bool model_config_check(const model_config *c, int64_t max_len, char *msg, size_t msgsize);

/* ---- a trained model with its vocabularies ---- */
typedef struct {
    model *m;
    tr_vocab src, tgt;
    tr_tok_mode mode;
    int64_t max_len;      /* longest sentence in ids the model was trained for */
    ag_train_state state; /* as loaded */
} trained;

/* Load a checkpoint written by `train` (model, vocabularies, config). false with msg on error. */
bool trained_load(trained *t, const char *path, char *msg, size_t msgsize);
void trained_free(trained *t);

/* Record the model configuration and vocabularies in st (for saving); false with msg. */
bool config_store(ag_train_state *st, const model_config *c, const tr_vocab *src, const tr_vocab *tgt,
                  tr_tok_mode mode, int64_t max_len, char *msg, size_t msgsize);

/* Translate n sentences, batch at a time, as dc says (model_decode) into text[i·n_best + k]:
 * hypothesis k of sentence i, a malloc'd string, one line of printable UTF-8 (textio.h's
 * TR_TEXT_LINE: control characters dropped), and score[i·n_best + k] (may be NULL) its
 * normalised score. False when memory ran out (entries left NULL). decode_out.c */
bool translate_texts(trained *t, const char *const *in, int n, const ag_decode_config *dc, int batch, char **text,
                     double *score);
/* The arena translating decodes in, kept for the process: its pages stay mapped from one batch
 * of sentences to the next (reset after each) */
ag_arena *translate_arena(void);
/* The sentences in[0..B) as the model reads them: (B,S) ids, each at most max_len - 1 of them
 * and <eos>, padded; in the current arena */
ag_tensor *translate_source(const trained *t, const char *const *in, int B);
/* translate's line for one hypothesis: the text; with scores "text ||| score"; with nbest
 * Marian's n-best line "id ||| text ||| score" */
void translate_print_hyp(FILE *f, const char *text, double score, int64_t id, bool nbest, bool scores);
/* translate's decoding options as a config (--beam, --length-penalty, --length-norm gnmt|marian,
 * --n-best, --max-len-ratio); false with msg for a bad combination */
bool translate_decode_config(ag_decode_config *dc, int64_t beam, double alpha, const char *norm, int64_t n_best,
                             double ratio, char *msg, size_t msgsize);
/* The same as ids: hyp (n, translate_width(t)), each row as model_translate writes it, for
 * metrics: tr_id_scores_add compares them with the reference's ids and text. */
void translate_ids(trained *t, const char *const *in, int n, int beam, double length_penalty, int64_t *hyp);
int64_t translate_width(const trained *t);

/* Draw the cross-attention of translating sentence as an SVG heatmap at path; false with msg. */
bool attention_svg(trained *t, const char *sentence, const char *path, char *msg, size_t msgsize);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_translate(int argc, char **argv);
int cmd_attention(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_average(int argc, char **argv);

#endif
