/* A small checkpoint with every kind of content a load restores: f32 parameters (a matrix, a
 * vector, a 0-d scalar), an Adam optimizer with its two state slabs and hyperparameters, the
 * training position, two rngs, and config entries of each type (an int, a double, a short
 * string and a 300-byte one, which the file holds as a dataset). Every value is a formula of
 * its index, so the expected state is independent of any file.
 *
 * Used by tests/test_checkpoint_flips.c and by tests/checkpoint_v1_make.c, the program that
 * made tests/checkpoint_v1.h5 (a format_version 1 file). */
#ifndef AG_TEST_CHECKPOINT_FIXTURE_H
#define AG_TEST_CHECKPOINT_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "attograd.h"

typedef struct {
    ag_params *p;
    ag_optim *opt;
    ag_train_state st;
} ckpt_fixture;

/* the 300-byte config string (UTF-8, with newlines, as a vocabulary is) */
static inline void ckpt_fixture_vocab(char *buf /* >= 301 */) {
    size_t n = 0;
    for (int i = 0; n < 300; i++) n += (size_t)snprintf(buf + n, 301 - n, "w\xc3\xb6rd%d\n", i);
    buf[300] = 0;
}

/* The model and optimizer (values set when filled, else the fresh init: zeros and defaults)
 * and, when filled, the training state. Free with ckpt_fixture_free. */
static inline void ckpt_fixture_make(ckpt_fixture *fx, bool filled) {
    memset(fx, 0, sizeof *fx);
    fx->p = ag_params_new(AG_F32);
    ag_params_add(fx->p, "enc.weight", 2, (const int64_t[]){3, 2});
    ag_params_add(fx->p, "enc.bias", 1, (const int64_t[]){3});
    ag_params_add(fx->p, "scale", 0, NULL);
    ag_adam_config c = ag_adam_defaults();
    fx->opt = ag_adam_new(fx->p, &c);
    if (!filled) return;
    for (int i = 0; i < fx->p->count; i++) {
        ag_tensor *t = fx->p->list[i];
        float *w = (float *)fx->p->data + t->offset, *m = (float *)fx->opt->exp_avg + t->offset,
              *v = (float *)fx->opt->exp_avg_sq + t->offset;
        for (int64_t k = 0; k < ag_numel(t); k++) {
            w[k] = (float)(k - 2.5) * 0.375f + (float)i;
            m[k] = 0.015625f * (float)(k + 1) - (float)i;
            v[k] = 0.0078125f * (float)(k + 3 * i + 1);
        }
    }
    fx->opt->lr = 0.003;
    fx->opt->betas[0] = 0.875;
    fx->opt->betas[1] = 0.96875;
    fx->opt->eps = 1e-7;
    fx->opt->weight_decay = 0.0625;
    fx->opt->step = 7;
    fx->st.global_step = 7;
    fx->st.epoch = 2;
    fx->st.data_position = 5;
    ag_state_set_rng(&fx->st, "shuffle", &(ag_rng){.seed = 11, .counter = 22});
    ag_state_set_rng(&fx->st, "dropout", &(ag_rng){.seed = 33, .counter = 44});
    char vocab[301];
    ckpt_fixture_vocab(vocab);
    ag_config_set_int(&fx->st, "d_model", 4);
    ag_config_set_double(&fx->st, "dropout", 0.125);
    ag_config_set_string(&fx->st, "activation", "gelu");
    ag_config_set_string(&fx->st, "vocab", vocab);
}

static inline void ckpt_fixture_free(ckpt_fixture *fx) {
    ag_optim_free(fx->opt);
    ag_params_free(fx->p);
    ag_train_state_clear(&fx->st);
}

#endif
