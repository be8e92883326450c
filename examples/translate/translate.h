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

/* Parse argv[first..] against defs; positional arguments go to pos (up to maxpos, count in
 * *npos). On a bad option prints the problem and usage to stderr and returns false. */
bool opts_parse(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                int maxpos, int *npos);
/* The same, and given[k] set when defs[k] appeared on the command line (given has an entry per
 * def, zeroed by the caller). */
bool opts_parse_given(int argc, char **argv, int first, const opt_def *defs, const char *usage, const char **pos,
                      int maxpos, int *npos, bool *given);
void opts_usage(FILE *f, const char *usage, const opt_def *defs);

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

/* Translate n sentences (beam <= 1: greedy) into out[i] (malloc'd strings). */
void translate_sentences(trained *t, const char *const *in, int n, int beam, double length_penalty, char **out);
/* The same as ids: hyp (n, translate_width(t)), each row as model_translate writes it. Metrics
 * compare these, not the text: "<unk>" as text would read back as three tokens. */
void translate_ids(trained *t, const char *const *in, int n, int beam, double length_penalty, int64_t *hyp);
int64_t translate_width(const trained *t);

/* Draw the cross-attention of translating sentence as an SVG heatmap at path; false with msg. */
bool attention_svg(trained *t, const char *sentence, const char *path, char *msg, size_t msgsize);

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_translate(int argc, char **argv);
int cmd_attention(int argc, char **argv);

#endif
