/* attograd-translate train: what its options accept, and whether the model they describe fits
 * in memory, found before anything is allocated. Every numeric option has a range: the model
 * sizes share their bounds with the check a checkpoint's configuration gets when it loads, the
 * counts that the program keeps in an int stop at INT32_MAX, and --threads at what a process
 * can start. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "train_internal.h"

#define I32 2147483647.0 /* counts kept in an int: pairs per batch, samples, --min-count */

const opt_range TRAIN_RANGES[] = {
    {"--heldout", 0, 1, false, true, "a fraction from 0 to 1 (1 excluded)"},
    {"--steps", 1, INFINITY, false, false, NULL},
    {"--batch", 1, TR_MAX_SIZE, false, false, NULL},
    {"--accum", 1, TR_MAX_SIZE, false, false, NULL},
    {"--keep-last", 0, I32, false, false, "an integer >= 0 (0: none)"},
    {"--lr", 0, INFINITY, true, false, NULL},
    {"--warmup", 1, INFINITY, false, false, NULL},
    {"--d-model", 1, TR_MAX_SIZE, false, false, NULL},
    {"--heads", 1, TR_MAX_SIZE, false, false, NULL},
    {"--layers", 0, AG_TRANSFORMER_MAX_LAYERS, false, false, NULL},
    {"--ff", 1, TR_MAX_SIZE, false, false, NULL},
    {"--hidden", 1, TR_MAX_SIZE, false, false, NULL},
    {"--dropout", 0, 1, false, true, "a probability from 0 to 1 (1 excluded)"},
    {"--label-smoothing", 0, 1, false, false, NULL},
    {"--clip", 0, INFINITY, false, false, "a number >= 0 (0: off)"},
    {"--teacher-forcing", 0, 1, false, false, "a probability from 0 to 1"},
    {"--max-len", 2, TR_MAX_LEN, false, false, NULL},
    {"--min-count", 1, I32, false, false, NULL},
    {"--vocab-size", 0, TR_MAX_SIZE, false, false, "an integer from 0 to 1048576 (0: chosen from the corpus)"},
    {"--eval-every", 1, INFINITY, false, false, NULL},
    {"--max-eval", 0, INFINITY, false, false, "an integer >= 0 (0: all)"},
    {"--save-every", 1, INFINITY, false, false, NULL},
    {"--samples", 0, I32, false, false, NULL},
    {"--stop-at", 0, 1, false, false, "an exact match fraction from 0 to 1 (0: off)"},
    {"--patience", 0, INFINITY, false, false, "an integer >= 0 (0: off)"},
    {"--seed", 0, INFINITY, false, false, NULL},
    {"--threads", 0, TR_MAX_THREADS, false, false, "an integer from 0 to 1024 (0: the free cores)"},
    {NULL, 0, 0, false, false, NULL},
};

const char *train_opts_problem(const train_opts *o) {
    if (!o->train && !o->resume) return "--train FILE is required";
    model_kind kind;
    if (!model_kind_parse(o->model, &kind)) return "--model is transformer, gru, lstm or rnn";
    if (o->steps < 1 || o->batch < 1 || o->d_model < 1 || o->heads < 1 || o->layers < 0 || o->ff < 1 ||
        o->hidden < 1 || o->max_len < 2 || o->min_count < 1 || o->eval_every < 1 || o->save_every < 1 ||
        o->warmup < 1 || o->samples < 0 || o->threads < 0 || o->max_eval < 0 || o->patience < 0)
        return "sizes, counts and intervals must be positive";
    if (o->batch > TR_MAX_SIZE || o->max_len > TR_MAX_LEN || o->samples > I32 || o->min_count > I32)
        return "--batch, --max-len, --samples or --min-count is beyond its range (see --help)";
    if (o->accum < 1 || o->keep_last < 0) return "--accum must be at least 1 and --keep-last at least 0";
    if (o->batch * o->accum > TR_MAX_SIZE) return "--batch x --accum must be at most 1048576 pairs a step";
    if (o->d_model % o->heads != 0) return "--d-model must be a multiple of --heads";
    if (strcmp(o->tokenizer, "spm") != 0 && strcmp(o->tokenizer, "word") != 0 && strcmp(o->tokenizer, "char") != 0)
        return "--tokenizer is spm, word or char";
    if (strcmp(o->spm_type, "unigram") != 0 && strcmp(o->spm_type, "bpe") != 0) return "--spm-type is unigram or bpe";
    if (o->vocab_size < 0) return "--vocab-size must be positive (0: chosen from the corpus)";
    if ((o->spm_model || o->vocab_size) && strcmp(o->tokenizer, "spm") != 0)
        return "--spm-model and --vocab-size are for --tokenizer spm";
    if (!(o->lr > 0) || !(o->dropout >= 0 && o->dropout < 1) || !(o->label_smoothing >= 0 && o->label_smoothing <= 1) ||
        !(o->clip >= 0) || !(o->heldout >= 0 && o->heldout < 1) ||
        !(o->teacher_forcing >= 0 && o->teacher_forcing <= 1))
        return "--lr > 0, --dropout in [0,1), --label-smoothing, --teacher-forcing in [0,1], --heldout in [0,1)";
    return NULL;
}

/* ---- memory ---- */

/* a cgroup v2 memory.max in bytes (the container's limit), or 0 when there is none */
static double cgroup_limit(void) {
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    unsigned long long v = 0;
    bool got = f && fscanf(f, "%llu", &v) == 1; /* "max": no limit */
    if (f) fclose(f);
    return got ? (double)v : 0;
}

double tr_memory_available(const char **what) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double have = pages > 0 && page > 0 ? (double)pages * (double)page : INFINITY, cg = cgroup_limit();
    *what = "this machine has";
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < have) {
        have = (double)rl.rlim_cur;
        *what = "the address-space limit (ulimit -v) is";
    }
    if (cg > 0 && cg < have) {
        have = cg;
        *what = "the cgroup's memory.max is";
    }
    return have;
}

tr_text tr_bytes_text(double bytes) {
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    tr_text t;
    if (u == 0) snprintf(t.s, sizeof t.s, "%.0f bytes", bytes);
    else snprintf(t.s, sizeof t.s, "%.1f %s", bytes, unit[u]);
    return t;
}

/* "--d-model 128 --heads 4 --ff 512 --layers 2+2" or "--model gru --d-model 128 --hidden 128
 * --layers 1", with the vocabularies' sizes: the options that make the model's size */
static void describe(const model_config *c, char *buf, size_t n) {
    if (model_kind_recurrent(c->kind))
        snprintf(buf, n, "--model %s --d-model %lld --hidden %lld --layers %lld", model_kind_name(c->kind),
                 (long long)c->d_model, (long long)c->hidden, (long long)c->enc_layers);
    else
        snprintf(buf, n, "--d-model %lld --heads %lld --ff %lld --layers %lld+%lld", (long long)c->d_model,
                 (long long)c->nhead, (long long)c->ff, (long long)c->enc_layers, (long long)c->dec_layers);
    size_t at = strlen(buf);
    snprintf(buf + at, n - at, " with vocabularies of %lld and %lld tokens", (long long)c->src_vocab,
             (long long)c->tgt_vocab);
}

/* Floats a training step keeps per pair for backward, roughly, when each side has len tokens:
 * per token and layer the Transformer's projections, residuals and norms (about 16 d_model),
 * its feed-forward activation (2 ff) and attention weights (2 heads x len); the recurrent
 * kinds' gates and states in both directions; and the logits with their softmax and gradient. */
static double activation_floats(const model_config *c, double len) {
    double E = (double)c->d_model, H = (double)c->hidden, per_token;
    if (model_kind_recurrent(c->kind))
        per_token = (2 * (double)c->enc_layers + 1) * (4 * model_kind_gates(c->kind) * H + 4 * H) + len;
    else
        per_token = (double)(c->enc_layers + c->dec_layers) * (16 * E + 2 * (double)c->ff + 2 * (double)c->nhead * len);
    return len * (per_token + 3 * (double)c->tgt_vocab);
}

bool tr_model_fits_memory(const model_config *c, int64_t batch, int64_t len, const char *name, char *msg,
                          size_t msgsize) {
    const char *what;
    double have = tr_memory_available(&what), params = (double)model_param_count(c);
    double weights = 4 * params, positions = 4 * (double)c->max_len * (double)c->d_model;
    double state = batch > 0 ? 4 * weights : weights; /* training: gradients and Adam's two moments */
    double act = batch > 0 ? 4 * (double)batch * activation_floats(c, (double)len) : 0;
    if (state + positions + act <= have) return true;
    char model[256], train[512] = "";
    describe(c, model, sizeof model);
    if (batch > 0)
        snprintf(train, sizeof train, ", %s with their gradients and Adam's two moments; with the positional table "
                 "(%s) and about %s of activations for batches of %lld pairs of up to %lld tokens, %s in all",
                 tr_bytes_text(state).s, tr_bytes_text(positions).s, tr_bytes_text(act).s, (long long)batch,
                 (long long)len, tr_bytes_text(state + positions + act).s);
    else snprintf(train, sizeof train, " and %s for the positional table", tr_bytes_text(positions).s);
    snprintf(msg, msgsize, "%s%s%s: %.0f parameters need %s for the parameters alone%s; %s %s", name ? name : "",
             name ? ": " : "", model, params, tr_bytes_text(weights).s, train, what, tr_bytes_text(have).s);
    return false;
}

/* ---- divergence ---- */

bool params_finite(const ag_params *p) {
    if (p->dtype == AG_F64) {
        const double *x = (const double *)p->data;
        for (int64_t i = 0; i < p->numel; i++)
            if (!isfinite(x[i])) return false;
        return true;
    }
    const float *x = (const float *)p->data;
    for (int64_t i = 0; i < p->numel; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

bool train_model_checks(const model_config *cfg, const train_opts *o, const corpora *c) {
    char msg[1024];
    if (!model_config_check(cfg, o->max_len, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: its checkpoint would not load: %s\n", msg);
        return false;
    }
    int64_t batch = o->batch < c->train.n ? o->batch : c->train.n; /* a batch holds at most every pair */
    if (tr_model_fits_memory(cfg, batch, corpora_longest(c), NULL, msg, sizeof msg)) return true;
    fprintf(stderr, "attograd-translate: the model is too big: %s\n", msg);
    return false;
}
