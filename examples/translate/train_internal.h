/* attograd-translate train's parts, for train.c: its options and their checks
 * (train_checks.c), the corpora it trains on (train_data.c), evaluation and curves
 * (train_eval.c). */
#ifndef TRANSLATE_TRAIN_INTERNAL_H
#define TRANSLATE_TRAIN_INTERNAL_H
#include <stdio.h>

#include "id_scores.h"
#include "metrics.h"
#include "translate.h"

/* ---- the options (train.c parses them) ---- */

/* --patience's default: evaluations without a better dev exact match before a run stops */
#define TRAIN_DEFAULT_PATIENCE 5
#define TRAIN_STR_(x) #x
#define TRAIN_STR(x) TRAIN_STR_(x) /* a macro's value as a string literal, for --help */

typedef struct {
    const char *train, *dev, *test, *out, *model;
    const char *tokenizer, *spm_type, *spm_model;
    int64_t vocab_size;
    int64_t steps, batch, d_model, heads, layers, ff, hidden, max_len, min_count, eval_every, save_every, warmup,
        seed, threads, samples, beam, max_eval, patience;
    int64_t accum, keep_last; /* micro-batches per step (train_accum.c); step files kept (train_keep.c) */
    double lr, dropout, label_smoothing, clip, heldout, teacher_forcing, stop_at;
    bool chars, strict, resume, recompute_attention, keep_ff_activation, help;
} train_opts;

/* what train's numeric options accept (the parser reports a value outside by name) */
extern const opt_range TRAIN_RANGES[];
/* What is wrong with o that the ranges cannot say (one sentence), or NULL */
const char *train_opts_problem(const train_opts *o);

/* Before model_new: whether cfg (from o, or the checkpoint's when resuming) keeps to the limits
 * a checkpoint load enforces (model_config_check) and fits in memory for training on batches of
 * c's pairs; false after saying why on stderr. */
typedef struct corpora corpora;
bool train_model_checks(const model_config *cfg, const train_opts *o, const corpora *c);
/* Whether every value of p is finite: checked before a save, so that a run whose update went
 * to NaN or Inf never writes such weights over a good checkpoint */
bool params_finite(const ag_params *p);

/* ---- a step's gradient, checkpoints (train_accum.c, train_keep.c) ---- */
/* Zero m's gradients and fill them with the gradient of the mean loss over bt's target tokens,
 * in o->accum micro-batches (fewer when bt has fewer pairs), averaged over the ranks under
 * mpirun; the arena is reset between micro-batches. Returns the batch's mean loss. */
double train_batch_grads(model *m, const tr_batch *bt, const train_opts *o, ag_rng *rng, ag_arena *arena);
/* Save a checkpoint of m, opt and st at path (atomically); false after saying why on stderr */
bool train_save(const char *path, model *m, ag_optim *opt, ag_train_state *st);
/* --keep-last: save OUT/step-<step>.h5, then delete the step files of out older than the
 * keep newest up to this step (files of later steps, from before a resume, are left to be
 * overwritten). A failed save deletes nothing. False after saying why on stderr. */
bool train_keep_step(const char *out, int64_t keep, model *m, ag_optim *opt, ag_train_state *st);

/* ---- the corpora (train_data.c) ---- */
struct corpora {
    tr_corpus train_c, dev_c;
    tr_vocab src, tgt;
    tr_dataset all, train, dev;
    tr_dataset dev_eval, dev_rest; /* a fixed random subset of dev when --max-eval is smaller */
    tr_tok_mode mode;
};

double train_clock(void); /* seconds on the monotonic clock */
tr_tok_mode tok_mode(const train_opts *o);
/* The longest pair evaluation takes: what the model's positions hold (2 max_len + 8) */
int eval_limit(const train_opts *o);
bool read_corpus(tr_corpus *c, const char *path, const train_opts *o);
/* Corpora and vocabularies: built from the training file, or taken from the checkpoint when
 * resuming (so ids do not move). False after reporting why not. */
bool load_corpora(corpora *c, const train_opts *o, const trained *resumed);
void corpora_free(corpora *c);
/* The longest side of the training pairs in tokens (the <eos> counted) */
int64_t corpora_longest(const corpora *c);
/* Record in st what the run trains and evaluates on (paths, pair counts and a hash of each
 * split's ids); when resuming, first say on stderr where that differs from what st records.
 * False when st cannot hold it. */
bool corpora_record(ag_train_state *st, const corpora *c, const train_opts *o, bool resuming);

typedef struct {
    double loss, exact; /* exact: the fraction of translations whose ids are the reference's */
    double bleu, chrf;  /* sacreBLEU's BLEU and chrF2 on the detokenized text, 0..100 */
    int64_t sentences;
    tr_bleu_stats bleu_stats; /* their counts, for tr_metrics_print */
    tr_chrf_stats chrf_stats;
} eval_result;

/* Teacher-forced loss, greedy (beam <= 1) or beam exact match, BLEU and chrF of m on up to
 * max_pairs pairs of d (0: all), in the current arena (rewound after); prints `samples`
 * translations to f. The references are text's target sentences, the corpus d was built from
 * (matched by line), or when text is NULL, d's target ids read back as text. */
eval_result evaluate(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                     const tr_vocab *tgt_v, tr_tok_mode mode, int beam, int64_t max_pairs, int samples, FILE *f);

/* train --test's report on stdout: evaluate on d, the pairs of text (the test corpus) the
 * model's positions hold (limit tokens); the others count as wrong translations (not exact,
 * empty hypotheses for BLEU and chrF) */
void eval_report_test(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                      const tr_vocab *tgt_v, tr_tok_mode mode, int samples, int limit);


/* The teacher-forced cross entropy per target token (no label smoothing) of m on d, as
 * evaluate computes it, alone; in the current arena (rewound after). NaN without tokens. */
double evaluate_loss(model *m, const tr_dataset *d);

/* The training curves: the train loss and learning rate at every logged step (train_step,
 * n_train points); dev loss, dev exact match in percent, BLEU and chrF2 per evaluation (step, n
 * points). */
typedef struct {
    int n, cap, n_train, cap_train;
    double *step, *dev_loss, *dev_exact, *bleu, *chrf, *train_step, *train_loss, *train_lr;
} curves;

/* the steps of a run of total steps at which the train loss is logged: every curves_every(total)
 * steps (about 100 points a run, at most every 100 steps, the progress log's interval), and at
 * each evaluation */
int64_t curves_every(int64_t total);
void curves_add_train(curves *c, double step, double loss, double lr);
void curves_add(curves *c, double step, double dl, double exact_percent, double bleu, double chrf);
/* as an SVG at path, in four panels (losses, exact match, BLEU and chrF2, learning rate); false
 * after reporting a failure on stderr (the run goes on) */
bool curves_write(const curves *c, const char *path);
void curves_free(curves *c);

/* ---- the JSON Lines log OUT/log.jsonl (train_log.c describes its lines) ---- */
typedef struct {
    FILE *f; /* open for appending; NULL: no log (ranks other than 0) */
    const char *path;
    double tokens, seconds; /* trained since the last train entry, and the seconds its steps took */
    double elapsed;         /* the training seconds of the last entry a resumed run keeps */
    bool failed;            /* a write failed: said once, nothing more written */
} train_log;
/* Open path: a fresh run (resumed_step < 0) starts it empty; a resumed run keeps the entries up
 * to resumed_step, adds them to cv and their latest elapsed_s to l->elapsed, and drops the later
 * ones (steps its checkpoint lacks). False after reporting why not. */
bool train_log_open(train_log *l, const char *path, int64_t resumed_step, curves *cv);
/* one step's tokens and the seconds it took, for the next train entry's tokens/s */
void train_log_count(train_log *l, int64_t tokens, double seconds);
void train_log_train(train_log *l, int64_t step, double loss, double lr, double elapsed);
/* exact: a fraction (written as a percentage); bleu and chrf 0..100 */
void train_log_eval(train_log *l, int64_t step, double loss, double exact, double bleu, double chrf, int64_t pairs,
                    double elapsed);
void train_log_close(train_log *l);

/* ---- early stopping (train_stop.c says when an evaluation is better) ---- */
typedef struct {
    int64_t patience;   /* evaluations without a better one before stopping; 0: never */
    double exact, loss; /* the best evaluation's dev exact match (-1: none yet) and dev loss */
    int64_t step, since; /* its step, and the evaluations since */
} train_stopper;
/* from st's configuration (a resumed run's), or no best yet */
void stopper_init(train_stopper *s, int64_t patience, const ag_train_state *st);
/* after the evaluation at step: whether it is the best so far; the state goes into st's
 * configuration either way */
bool stopper_better(train_stopper *s, ag_train_state *st, int64_t step, double exact, double loss);
/* whether the patience is used up, with the line that says so in why */
bool stopper_done(const train_stopper *s, char *why, size_t n);

/* ---- the settings a run records and --resume restores (train_resume.c) ---- */
typedef struct {
    train_opts *o;           /* the options in use: the checkpoint's after settings_resume */
    const train_opts *given; /* the parsed options defs point into */
    const opt_def *defs;     /* the option table */
    const bool *flagged;     /* flagged[k]: defs[k] was on the command line */
    const char *from;        /* the checkpoint resumed from */
} run_settings;
/* --resume: load s->from into *resumed and take its settings into s->o; a flag given again that
 * differs is refused by name unless it is one a run may change (then it replaces the recorded
 * value). False after reporting every problem. */
bool settings_resume(const run_settings *s, trained *resumed);
/* record in st the settings of s->o that the model's configuration does not hold */
bool settings_store(const run_settings *s, ag_train_state *st);

#endif
