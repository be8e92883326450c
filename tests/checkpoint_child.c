/* The second process of the checkpoint tests (tests/test_checkpoint_trainer.c runs it through
 * AG_CHECKPOINT_CHILD; scripts/checkpoint_torch.py check runs it too):
 *
 *   resume <ckpt> <steps> <out> [forget-optim|forget-rng]
 *       rebuild the trainer from the checkpoint's config alone (fresh random init, an Adam with
 *       other hyperparameters), load it, train <steps> more steps printing each loss as a hex
 *       float, save to <out>. forget-* skip restoring a part (negative controls).
 *   save-loop <path> <first version 1|2>
 *       print "R", then save versions 1 and 2 alternately to <path> until killed, printing "S"
 *       after each save.
 *   mlp-init <ckpt> <f32|f64> <seed>     save a fresh Linear-ReLU-Linear MLP with its config
 *   mlp-forward <ckpt> <batch>           load it by its config, print input and output
 *
 * test_checkpoint_trainer.c includes this file with CHECKPOINT_CHILD_NO_MAIN defined to share the
 * trainer and the two kill-test versions, so the parent and child run the same code. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attograd.h"

/* used by test_checkpoint_trainer.c, which includes this file, but not by the child itself */
#define SHARED __attribute__((unused))

/* ---- the resume trainer: Linear-ReLU-Dropout-Linear (nn.Sequential names 0.*, 3.*), Adam,
 * a warmup schedule, a shuffled epoch order and dropout both driven by saved rngs ---- */
typedef struct {
    ag_params *p;
    ag_optim *opt;
    ag_linear_module l0, l3;
    ag_arena *arena;
    int64_t in, out, nsamples, batch, warmup;
    double dropout, base_lr;
    float *x;
    int64_t *y, *perm;
    ag_rng epoch_rng; /* the shuffle rng as of the start of the current epoch */
    ag_rng drop_rng;
    int64_t epoch, pos;
} trainer;

/* What rebuilds the trainer: everything trainer_new reads. */
SHARED static void trainer_config(ag_train_state *st) {
    ag_config_set_int(st, "in_features", 6);
    ag_config_set_int(st, "hidden", 16);
    ag_config_set_int(st, "out_features", 3);
    ag_config_set_int(st, "samples", 24);
    ag_config_set_int(st, "batch", 8);
    ag_config_set_int(st, "data_seed", 7);
    ag_config_set_int(st, "warmup", 3);
    ag_config_set_double(st, "dropout", 0.25);
    ag_config_set_double(st, "lr", 0.02);
    ag_config_set_string(st, "activation", "relu");
}

static int64_t cfg_int(const ag_train_state *st, const char *key) {
    int64_t v = 0;
    if (!ag_config_get_int(st, key, &v)) fprintf(stderr, "config has no int '%s'\n", key);
    return v;
}

static double cfg_double(const ag_train_state *st, const char *key) {
    double v = 0;
    if (!ag_config_get_double(st, key, &v)) fprintf(stderr, "config has no number '%s'\n", key);
    return v;
}

/* From cfg alone; init_seed, betas and eps vary between callers so that only a checkpoint can
 * make two trainers agree. */
static trainer *trainer_new(const ag_train_state *cfg, uint64_t init_seed, double beta1, double beta2, double eps) {
    trainer *t = calloc(1, sizeof *t);
    t->in = cfg_int(cfg, "in_features");
    t->out = cfg_int(cfg, "out_features");
    t->nsamples = cfg_int(cfg, "samples");
    t->batch = cfg_int(cfg, "batch");
    t->warmup = cfg_int(cfg, "warmup");
    t->dropout = cfg_double(cfg, "dropout");
    t->base_lr = cfg_double(cfg, "lr");
    int64_t hidden = cfg_int(cfg, "hidden");
    t->arena = ag_arena_new(1 << 20);
    ag_rng init = ag_rng_new(init_seed);
    t->p = ag_params_new(AG_F32);
    t->l0 = ag_linear_new(t->p, "0", t->in, hidden, true, &init);
    t->l3 = ag_linear_new(t->p, "3", hidden, t->out, true, &init);
    t->opt = ag_adam_new(
        t->p, &(ag_adam_config){.lr = t->base_lr, .betas = {beta1, beta2}, .eps = eps, .weight_decay = 0.01});
    /* the data set: normal features, labels from a fixed rule plus noise */
    ag_rng data = ag_rng_new((uint64_t)cfg_int(cfg, "data_seed"));
    double *v = malloc(sizeof(double) * (size_t)(t->nsamples * (t->in + 1)));
    ag_rng_normal_f64(&data, t->nsamples * (t->in + 1), v);
    t->x = malloc(sizeof(float) * (size_t)(t->nsamples * t->in));
    t->y = malloc(sizeof(int64_t) * (size_t)t->nsamples);
    t->perm = malloc(sizeof(int64_t) * (size_t)t->nsamples);
    for (int64_t i = 0; i < t->nsamples; i++) {
        for (int64_t j = 0; j < t->in; j++) t->x[i * t->in + j] = (float)v[i * (t->in + 1) + j];
        double s = t->x[i * t->in] - t->x[i * t->in + 1] + 0.5 * v[i * (t->in + 1) + t->in];
        t->y[i] = s < -0.5 ? 0 : s < 0.5 ? 1 : 2;
    }
    free(v);
    t->epoch_rng = ag_rng_new(init_seed + 1);
    t->drop_rng = ag_rng_new(init_seed + 2);
    return t;
}

static void trainer_free(trainer *t) {
    ag_optim_free(t->opt);
    ag_params_free(t->p);
    ag_arena_free(t->arena);
    free(t->x);
    free(t->y);
    free(t->perm);
    free(t);
}

/* this epoch's order: Fisher-Yates from a copy of epoch_rng, so it can be redrawn mid-epoch */
static void trainer_shuffle(trainer *t) {
    int64_t n = t->nsamples;
    double *u = malloc(sizeof(double) * (size_t)n);
    ag_rng r = t->epoch_rng;
    ag_rng_uniform_f64(&r, n, u);
    for (int64_t i = 0; i < n; i++) t->perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(u[i] * (double)(i + 1)), tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
    free(u);
}

/* one optimizer step on the next batch; returns the batch loss (before the step) */
static double trainer_step(trainer *t) {
    ag_arena *prev = ag_arena_use(t->arena);
    ag_arena_reset(t->arena);
    trainer_shuffle(t);
    float xb[64 * 16];
    int64_t yb[64];
    for (int64_t b = 0; b < t->batch; b++) {
        int64_t i = t->perm[t->pos + b];
        memcpy(xb + b * t->in, t->x + i * t->in, sizeof(float) * (size_t)t->in);
        yb[b] = t->y[i];
    }
    ag_tensor *x = ag_from_buffer(AG_F32, AG_SHAPE(t->batch, t->in), xb);
    ag_tensor *y = ag_from_buffer(AG_I64, AG_SHAPE(t->batch), yb);
    ag_tensor *h = ag_dropout(ag_relu(ag_linear_forward(&t->l0, x)), t->dropout, true, &t->drop_rng);
    ag_tensor *loss = ag_cross_entropy(ag_linear_forward(&t->l3, h), y, NULL);
    ag_params_zero_grad(t->p);
    ag_backward(loss, NULL);
    ag_lr_schedule_config sched = ag_lr_schedule_defaults(AG_LR_WARMUP_INV_SQRT, t->base_lr);
    sched.warmup_steps = t->warmup;
    t->opt->lr = ag_lr_schedule_at(&sched, t->opt->step + 1);
    ag_optim_step(t->opt);
    double l = ag_item(loss);
    t->pos += t->batch;
    if (t->pos + t->batch > t->nsamples) {
        t->pos = 0;
        t->epoch++;
        t->epoch_rng.counter += (uint64_t)t->nsamples;
    }
    ag_arena_use(prev);
    return l;
}

static void trainer_save_state(const trainer *t, ag_train_state *st) {
    st->global_step = t->opt->step;
    st->epoch = t->epoch;
    st->data_position = t->pos;
    ag_state_set_rng(st, "shuffle", &t->epoch_rng);
    ag_state_set_rng(st, "dropout", &t->drop_rng);
}

static void trainer_restore_state(trainer *t, const ag_train_state *st) {
    t->epoch = st->epoch;
    t->pos = st->data_position;
    ag_state_get_rng(st, "shuffle", &t->epoch_rng);
    ag_state_get_rng(st, "dropout", &t->drop_rng);
}

/* ---- the kill test's two versions: every value says which version it belongs to ---- */
static ag_params *version_params(ag_dtype dt) {
    ag_params *p = ag_params_new(dt);
    ag_params_add(p, "encoder.layers.0.linear1.weight", AG_SHAPE(256, 96));
    ag_params_add(p, "encoder.layers.0.linear1.bias", AG_SHAPE(256));
    ag_params_add(p, "decoder.out.weight", AG_SHAPE(40, 256));
    ag_params_add(p, "temperature", 0, NULL);
    return p;
}

/* exact in f32: at most 14 significant bits */
static double version_value(int v, int slab, int64_t i) {
    return (v == 1 ? 1.0 : -1.0) * (1.0 + slab * 64.0 + (double)(i % 4096) / 1024.0);
}

static void version_fill(int v, ag_params *p, ag_optim *o, ag_train_state *st) {
    for (int s = 0; s < 3; s++) {
        void *slab = p->data;
        if (s) ag_optim_state(o, s - 1, &slab);
        for (int k = 0; k < p->count; k++) /* the parameters' slices; alignment gaps stay zero */
            for (int64_t i = p->list[k]->offset; i < p->list[k]->offset + ag_numel(p->list[k]); i++) {
                if (p->dtype == AG_F32) ((float *)slab)[i] = (float)version_value(v, s, i);
                else ((double *)slab)[i] = version_value(v, s, i);
            }
    }
    o->step = 10 * v;
    o->lr = 0.001 * v;
    o->betas[0] = v == 1 ? 0.9 : 0.8;
    o->betas[1] = v == 1 ? 0.999 : 0.99;
    ag_train_state_clear(st);
    st->global_step = 100 * v;
    st->epoch = v;
    st->data_position = 8 * v;
    ag_state_set_rng(st, "shuffle", &(ag_rng){.seed = (uint64_t)v, .counter = 1000u * (uint64_t)v});
    ag_config_set_int(st, "version", v);
    ag_config_set_double(st, "scale", 0.5 * v);
    ag_config_set_string(st, "name", v == 1 ? "A" : "B");
}

/* 1 or 2 when every value (slabs, hyperparameters, state, config) is that version's, else 0 */
SHARED static int version_of(const ag_params *p, const ag_optim *o, const ag_train_state *st) {
    int v = o->step == 10 ? 1 : o->step == 20 ? 2 : 0;
    if (!v) return 0;
    for (int s = 0; s < 3; s++) {
        void *slab = p->data;
        if (s) ag_optim_state(o, s - 1, &slab);
        for (int k = 0; k < p->count; k++)
            for (int64_t i = p->list[k]->offset; i < p->list[k]->offset + ag_numel(p->list[k]); i++) {
                double got = p->dtype == AG_F32 ? ((float *)slab)[i] : ((double *)slab)[i];
                if (got != version_value(v, s, i)) return 0;
            }
    }
    int64_t iv;
    double dv;
    ag_rng r;
    const char *name = ag_config_get_string(st, "name");
    bool ok = o->lr == 0.001 * v && o->betas[0] == (v == 1 ? 0.9 : 0.8) && o->betas[1] == (v == 1 ? 0.999 : 0.99) &&
              st->global_step == 100 * v && st->epoch == v && st->data_position == 8 * v &&
              ag_state_get_rng(st, "shuffle", &r) && r.seed == (uint64_t)v && r.counter == 1000u * (uint64_t)v &&
              ag_config_get_int(st, "version", &iv) && iv == v && ag_config_get_double(st, "scale", &dv) &&
              dv == 0.5 * v && name && strcmp(name, v == 1 ? "A" : "B") == 0;
    return ok ? v : 0;
}

#ifndef CHECKPOINT_CHILD_NO_MAIN

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "checkpoint_child: %s: %s\n", what, msg);
    return 1;
}

static int cmd_resume(const char *ckpt, int64_t steps, const char *out, const char *forget) {
    char msg[2048];
    ag_train_state st = {0};
    /* the config alone says how to build the model */
    if (ag_checkpoint_load(ckpt, NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("config", msg);
    trainer *t = trainer_new(&st, 991, 0.5, 0.6, 1e-3);
    bool forget_optim = forget && strcmp(forget, "forget-optim") == 0;
    if (ag_checkpoint_load(ckpt, t->p, forget_optim ? NULL : t->opt, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK)
        return fail("load", msg);
    if (!(forget && strcmp(forget, "forget-rng") == 0)) trainer_restore_state(t, &st);
    else t->epoch = st.epoch, t->pos = st.data_position;
    for (int64_t s = 0; s < steps; s++) printf("%a\n", trainer_step(t));
    trainer_save_state(t, &st);
    if (ag_checkpoint_save(out, t->p, t->opt, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("save", msg);
    ag_train_state_clear(&st);
    trainer_free(t);
    return 0;
}

static int cmd_save_loop(const char *path, int v) {
    char msg[2048];
    ag_params *p = version_params(AG_F32);
    ag_optim *o = ag_adam_new(p, NULL);
    ag_train_state st[2] = {{0}};
    version_fill(1, p, o, &st[0]);
    ag_params *q = version_params(AG_F32); /* version 2's values, kept to swap in with memcpy */
    ag_optim *o2 = ag_adam_new(q, NULL);
    version_fill(2, q, o2, &st[1]);
    ag_params *ps[2] = {p, q};
    ag_optim *os[2] = {o, o2};
    /* a first save elsewhere warms up HDF5, so the parent's kill delays measure steady saves */
    char warm[4096];
    snprintf(warm, sizeof warm, "%s.warm", path);
    if (ag_checkpoint_save(warm, p, o, &st[0], NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("save", msg);
    fputs("R", stdout);
    fflush(stdout);
    for (;; v = 3 - v) {
        if (ag_checkpoint_save(path, ps[v - 1], os[v - 1], &st[v - 1], NULL, msg, sizeof msg) != AG_CHECKPOINT_OK)
            return fail("save", msg);
        fputs("S", stdout); /* one byte per completed save */
        fflush(stdout);
    }
}

/* nn.Sequential(nn.Linear(in, hidden), nn.ReLU(), nn.Linear(hidden, out)) */
static ag_params *mlp_new(ag_dtype dt, int64_t in, int64_t hidden, int64_t out, uint64_t seed, ag_linear_module *l) {
    ag_rng r = ag_rng_new(seed);
    ag_params *p = ag_params_new(dt);
    l[0] = ag_linear_new(p, "0", in, hidden, true, &r);
    l[1] = ag_linear_new(p, "2", hidden, out, true, &r);
    return p;
}

static int cmd_mlp_init(const char *path, const char *dtype, uint64_t seed) {
    char msg[2048];
    ag_linear_module l[2];
    ag_train_state st = {0};
    ag_config_set_int(&st, "in_features", 5);
    ag_config_set_int(&st, "hidden", 7);
    ag_config_set_int(&st, "out_features", 3);
    ag_config_set_string(&st, "activation", "relu");
    ag_config_set_string(&st, "dtype", dtype);
    ag_params *p = mlp_new(strcmp(dtype, "f64") == 0 ? AG_F64 : AG_F32, 5, 7, 3, seed, l);
    if (ag_checkpoint_save(path, p, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("save", msg);
    ag_train_state_clear(&st);
    ag_params_free(p);
    return 0;
}

static void print_tensor(const char *name, ag_tensor *t) {
    int64_t n = ag_numel(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    ag_to_buffer(t, AG_F64, v);
    printf("%s %lld %lld\n", name, (long long)t->shape[0], (long long)t->shape[1]);
    for (int64_t i = 0; i < n; i++) printf("%a\n", v[i]);
    free(v);
}

static int cmd_mlp_forward(const char *path, int64_t batch) {
    char msg[2048];
    ag_linear_module l[2];
    ag_train_state st = {0};
    if (ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("config", msg);
    const char *dtype = ag_config_get_string(&st, "dtype");
    ag_dtype dt = dtype && strcmp(dtype, "f64") == 0 ? AG_F64 : AG_F32;
    int64_t in = cfg_int(&st, "in_features");
    ag_params *p = mlp_new(dt, in, cfg_int(&st, "hidden"), cfg_int(&st, "out_features"), 0, l);
    if (ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("load", msg);
    ag_rng r = ag_rng_new(123);
    ag_tensor *x = ag_randn(&r, dt, AG_SHAPE(batch, in));
    ag_tensor *y = ag_linear_forward(&l[1], ag_relu(ag_linear_forward(&l[0], x)));
    print_tensor("x", x);
    print_tensor("y", y);
    ag_train_state_clear(&st);
    ag_params_free(p);
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "resume") == 0 && argc >= 5)
        return cmd_resume(argv[2], atoll(argv[3]), argv[4], argc > 5 ? argv[5] : NULL);
    if (strcmp(cmd, "save-loop") == 0 && argc == 4) return cmd_save_loop(argv[2], atoi(argv[3]) == 2 ? 2 : 1);
    if (strcmp(cmd, "mlp-init") == 0 && argc == 5) return cmd_mlp_init(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (strcmp(cmd, "mlp-forward") == 0 && argc == 4) return cmd_mlp_forward(argv[2], atoll(argv[3]));
    fprintf(stderr, "usage: checkpoint_child resume CKPT STEPS OUT [forget-optim|forget-rng] | save-loop PATH 1|2 |\n"
                    "       mlp-init CKPT f32|f64 SEED | mlp-forward CKPT BATCH\n");
    return 2;
}
#endif
