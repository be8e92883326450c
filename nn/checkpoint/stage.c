/* Loads as a whole: everything read and checked into staging memory, committed only when the
 * load succeeds; and the read-back of what a save has just written, through the same staging
 * (docs/checkpoint.md). */
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"

/* What a load has read and checked, before it is committed: copies of the slabs, the
 * optimizer's hyperparameters and a training state. */
typedef struct {
    size_t bytes;      /* one slab */
    char *model;       /* params' slab, or NULL */
    char *optim[3];    /* parallel to ag_optim_state(opt, k) */
    ag_optim opt;      /* the optimizer's hyperparameters as read */
    ag_train_state *state;
} stage_t;

static void stage_free(stage_t *st) {
    free(st->model);
    for (int k = 0; k < 3; k++) free(st->optim[k]);
    ag_train_state_clear(st->state);
    free(st->state);
}

/* Staging for what params, opt and state (each may be NULL) would receive. Each slab starts
 * as a copy of the live one, what a non-strict load leaves where the file has nothing; with
 * flip, as its bitwise complement, so that no byte the file fails to provide can pass for a
 * byte read. false with NOMEM reported. */
static bool stage_new(stage_t *st, const ag_params *params, const ag_optim *opt, bool state, bool flip, report *r) {
    memset(st, 0, sizeof *st);
    bool oom = false;
    void *slab[4] = {params ? params->data : NULL};
    char **dst[4] = {&st->model, &st->optim[0], &st->optim[1], &st->optim[2]};
    if (params) st->bytes = (size_t)params->numel * ag_dtype_size(params->dtype);
    if (opt) {
        st->opt = *opt;
        for (int k = 0; k < ag_optim_state_count(opt); k++) ag_optim_state(opt, k, &slab[k + 1]);
    }
    for (int k = 0; k < 4; k++) {
        if (!slab[k]) continue;
        if (!(*dst[k] = malloc(st->bytes + 1))) {
            oom = true;
            continue;
        }
        memcpy(*dst[k], slab[k], st->bytes);
        if (flip)
            for (size_t b = 0; b < st->bytes; b++) (*dst[k])[b] = (char)~(*dst[k])[b];
    }
    if (state) oom |= !(st->state = calloc(1, sizeof *st->state));
    if (oom) {
        stage_free(st);
        memset(st, 0, sizeof *st);
        return ag__ck_problem(r, NOMEM, "out of memory staging the load");
    }
    return true;
}

/* Read path into st. A read in this process that met what HDF5 does not checksum (a file
 * edited by hand, its header rewritten) is redone from fresh staging as the read of a file
 * without a header: in a child process first. */
static void stage_read(const char *path, stage_t *st, const ag_params *params, const ag_optim *opt, bool flip,
                       report *r) {
    report before = *r;
    for (int untrusted = 0; untrusted < 2; untrusted++) {
        read_req q = {params, st->model, opt, &st->opt, st->optim, st->state, false};
        if (ag__ck_read_file(path, &q, untrusted, r)) return;
        bool state = st->state != NULL;
        stage_free(st);
        *r = before;
        if (!stage_new(st, params, opt, state, flip, r)) return;
    }
}

static void stage_commit(stage_t *st, ag_params *params, ag_optim *opt, ag_train_state *state) {
    if (params) {
        memcpy(params->data, st->model, st->bytes);
        ag__bump_version(params->flat); /* the parameters changed in place (the slab's version) */
    }
    if (opt) {
        for (int k = 0; k < ag_optim_state_count(opt); k++) {
            void *slab;
            ag_optim_state(opt, k, &slab);
            memcpy(slab, st->optim[k], st->bytes);
        }
        opt->lr = st->opt.lr;
        opt->betas[0] = st->opt.betas[0];
        opt->betas[1] = st->opt.betas[1];
        opt->eps = st->opt.eps;
        opt->weight_decay = st->opt.weight_decay;
        opt->momentum = st->opt.momentum;
        opt->dampening = st->opt.dampening;
        opt->nesterov = st->opt.nesterov;
        opt->step = st->opt.step;
    }
    if (state) { /* the new state's memory moves into *state */
        ag_train_state_clear(state);
        *state = *st->state;
        memset(st->state, 0, sizeof *st->state);
    }
}

ag_checkpoint_status ag_checkpoint_load(const char *path, ag_params *params, ag_optim *opt, ag_train_state *state,
                                  const ag_checkpoint_load_opts *opts, char *msg, size_t msgsize) {
    report r = {.len = 0};
    bool strict = !(opts && opts->non_strict);
    stage_t st;
    if (!path || !*path)
        ag__ck_problem(&r, INVAL, "ag_checkpoint_load: no path given");
    else if (opt && (opt->params != params || opt->numel != params->numel))
        ag__ck_problem(&r, INVAL, "the optimizer must be loaded together with the parameter set it was made for");
    else if (params && params->dtype != AG_F32 && params->dtype != AG_F64)
        ag__ck_problem(&r, INVAL, "parameters must be f32 or f64");
    if (!r.worst && stage_new(&st, params, opt, state != NULL, false, &r)) {
        hush_t h = ag__ck_begin();
        stage_read(path, &st, params, opt, false, &r);
        ag__ck_end(h);
        ag_checkpoint_status s = ag__ck_report_status(&r, strict);
        if (s == AG_CHECKPOINT_OK || s == AG_CHECKPOINT_PARTIAL) stage_commit(&st, params, opt, state);
        stage_free(&st);
    }
    ag__ck_report_write(&r, path, ag__ck_report_status(&r, strict) == AG_CHECKPOINT_PARTIAL ? "loaded what matches; " : "", msg,
                 msgsize);
    return ag__ck_report_status(&r, strict);
}

/* ---- reading back what a save wrote ---------------------------------------------------------- */

static bool config_equal(const ag_config_entry *a, const ag_config_entry *b) {
    if (a->type != b->type) return false;
    if (a->type == AG_CONFIG_INT) return a->i == b->i;
    if (a->type == AG_CONFIG_DOUBLE) return memcmp(&a->d, &b->d, sizeof a->d) == 0;
    return strcmp(a->s, b->s) == 0;
}

/* Whether slabs a and b of p hold the same bytes in every parameter (not in the alignment
 * padding between them, which no file holds). */
static bool slab_equal(const ag_params *p, const char *a, const char *b) {
    size_t es = ag_dtype_size(p->dtype);
    for (int i = 0; i < p->count; i++) {
        size_t at = (size_t)p->list[i]->offset * es;
        if (memcmp(a + at, b + at, (size_t)ag_numel(p->list[i]) * es) != 0) return false;
    }
    return true;
}

/* The first difference between the training state saved and the one read, or NULL. */
static const char *state_difference(const ag_train_state *a, const ag_train_state *b) {
    if (a->global_step != b->global_step || a->epoch != b->epoch || a->data_position != b->data_position)
        return "the training position";
    if (a->nrng != b->nrng) return "the rng states";
    for (int i = 0; i < a->nrng; i++) {
        ag_rng g;
        if (!ag_state_get_rng(b, a->rng[i].name, &g) || g.seed != a->rng[i].rng.seed ||
            g.counter != a->rng[i].rng.counter)
            return "the rng states";
    }
    if (a->nconfig != b->nconfig) return "the config";
    for (int i = 0; i < a->nconfig; i++) {
        const ag_config_entry *e = &a->config[i], *found = NULL;
        for (int j = 0; j < b->nconfig && !found; j++)
            if (strcmp(b->config[j].key, e->key) == 0) found = &b->config[j];
        if (!found || !config_equal(e, found)) return "the config";
    }
    return NULL;
}

/* Read the file a save has just written (between ag__ck_begin and
 * ag__ck_end) and compare every byte of
 * every slab, the optimizer's hyperparameters and the training state with what was saved:
 * false with IO reported, naming the first part that differs, unless the file holds exactly
 * that. A write that failed without an error (a chunk lost on a full disk reads back as fill
 * values) cannot pass: the stage starts as the complement of what was saved. */
bool ag__ck_read_back(const char *path, const ag_params *p, const ag_optim *o, const ag_train_state *s, report *r) {
    stage_t st;
    report rr = {.len = 0};
    if (!stage_new(&st, p, o, s != NULL, true, r)) return false;
    stage_read(path, &st, p, o, true, &rr);
    const char *diff = NULL;
    if (!rr.worst) {
        if (!slab_equal(p, st.model, p->data)) diff = "the parameters";
        for (int k = 0; o && !diff && k < ag_optim_state_count(o); k++) {
            void *slab;
            const char *name = ag_optim_state(o, k, &slab);
            if (!slab_equal(p, st.optim[k], slab)) diff = name;
        }
        if (o && !diff &&
            (st.opt.lr != o->lr || st.opt.betas[0] != o->betas[0] || st.opt.betas[1] != o->betas[1] ||
             st.opt.eps != o->eps || st.opt.weight_decay != o->weight_decay || st.opt.momentum != o->momentum ||
             st.opt.dampening != o->dampening || st.opt.nesterov != o->nesterov || st.opt.step != o->step))
            diff = "the optimizer's hyperparameters";
        if (s && !diff) diff = state_difference(s, st.state);
    }
    stage_free(&st);
    if (rr.worst) return ag__ck_problem(r, IO, "'%s' does not read back what was written (%s)", path, rr.text);
    if (diff) return ag__ck_problem(r, IO, "'%s' does not read back what was written: %s differ", path, diff);
    return true;
}
