/* attograd-translate average: checkpoint averaging (fairseq's scripts/average_checkpoints.py,
 * Marian's scripts/checkpoints/average.py): the mean of the parameters of checkpoints of one
 * model, saved as a checkpoint that translates like any other. */
#include <stdlib.h>
#include <string.h>

#include "translate.h"

/* What makes two checkpoints' parameters the same model's: its kind and sizes, how it reads
 * text and its vocabularies (training settings such as dropout may differ) */
static const char *const MODEL_KEYS[] = {"model",          "tokens",         "d_model",   "nhead",
                                         "dim_feedforward", "encoder_layers", "decoder_layers",
                                         "hidden",         "positions",      "max_len",   "src_vocab",
                                         "tgt_vocab",      "src_spm",        "tgt_spm"};

static const ag_config_entry *entry(const ag_train_state *s, const char *key) {
    for (int i = 0; i < s->nconfig; i++)
        if (strcmp(s->config[i].key, key) == 0) return &s->config[i];
    return NULL;
}

/* The first key of MODEL_KEYS whose entry a and b differ in (one has it, the other not, or
 * another type or value), with both values in detail when they are numbers; NULL when none */
static const char *model_difference(const ag_train_state *a, const ag_train_state *b, char *detail, size_t size) {
    *detail = 0;
    for (size_t k = 0; k < sizeof MODEL_KEYS / sizeof *MODEL_KEYS; k++) {
        const ag_config_entry *x = entry(a, MODEL_KEYS[k]), *y = entry(b, MODEL_KEYS[k]);
        if (!x && !y) continue;
        if (!x || !y || x->type != y->type) return MODEL_KEYS[k];
        if (x->type == AG_CONFIG_INT && x->i != y->i) {
            snprintf(detail, size, " (%lld and %lld)", (long long)x->i, (long long)y->i);
            return MODEL_KEYS[k];
        }
        if (x->type == AG_CONFIG_DOUBLE && memcmp(&x->d, &y->d, sizeof x->d) != 0) return MODEL_KEYS[k];
        if (x->type == AG_CONFIG_STRING && strcmp(x->s, y->s) != 0) {
            if (strcmp(MODEL_KEYS[k], "model") == 0 || strcmp(MODEL_KEYS[k], "tokens") == 0)
                snprintf(detail, size, " (%s and %s)", x->s, y->s);
            return MODEL_KEYS[k];
        }
    }
    return NULL;
}

/* Every checkpoint after the first is of the first's model; their steps, space-separated, into
 * steps. False after saying which is not and why. */
static bool same_models(const char *const *paths, int n, const trained *first, char *steps, size_t size) {
    size_t at = (size_t)snprintf(steps, size, "%lld", (long long)first->state.global_step);
    for (int k = 1; k < n; k++) {
        ag_train_state st = {0};
        char msg[2048], detail[96];
        if (ag_checkpoint_load(paths[k], NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) {
            fprintf(stderr, "attograd-translate average: %s\n", msg);
            return false;
        }
        const char *key = model_difference(&first->state, &st, detail, sizeof detail);
        if (key)
            fprintf(stderr, "attograd-translate average: %s and %s are checkpoints of different models: their %s "
                    "differ%s; only checkpoints of one model (one training run) can be averaged\n", paths[0],
                    paths[k], key, detail);
        else if (at < size)
            at += (size_t)snprintf(steps + at, size - at, " %lld", (long long)st.global_step);
        ag_train_state_clear(&st);
        if (key) return false;
    }
    return true;
}

static const char *AVERAGE_USAGE =
    "usage: attograd-translate average --out FILE CKPT...\n"
    "Averages the parameters of checkpoints of one model (one configuration and vocabularies, such as\n"
    "train --keep-last's OUT/step-S.h5) into the checkpoint FILE, written atomically, which eval,\n"
    "translate and attention read like any other. FILE keeps the first checkpoint's configuration and\n"
    "training state and no optimizer state (the average is for translating, not for --resume).";

/* average of the checkpoints pos[0..n) into out; the exit status */
static int average(const char *const *pos, int n, const char *out) {
    trained t;
    char msg[2048], steps[1024];
    if (!trained_load(&t, pos[0], msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate average: %s\n", msg);
        return 1;
    }
    int status = 1;
    if (!same_models(pos, n, &t, steps, sizeof steps)) goto done;
    if (ag_checkpoint_average(pos, n, model_params(t.m), msg, sizeof msg) != AG_CHECKPOINT_OK) {
        fprintf(stderr, "attograd-translate average: %s\n", msg);
        goto done;
    }
    /* what the file is an average of, for whoever reads its configuration */
    if (!ag_config_set_int(&t.state, "averaged_checkpoints", n) ||
        !ag_config_set_string(&t.state, "averaged_steps", steps)) {
        fprintf(stderr, "attograd-translate average: out of memory\n");
        goto done;
    }
    if (ag_checkpoint_save(out, model_params(t.m), NULL, &t.state, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) {
        fprintf(stderr, "attograd-translate average: saving failed: %s\n", msg);
        goto done;
    }
    printf("averaged %d checkpoints (steps %s) into %s\n", n, steps, out);
    status = 0;
done:
    trained_free(&t);
    return status;
}

int cmd_average(int argc, char **argv) {
    const char *out = NULL;
    bool help = false;
    const opt_def defs[] = {
        {"--out", OPT_STRING, &out, "FILE  the averaged checkpoint"},
        {"--help", OPT_FLAG, &help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    const char **pos = malloc(sizeof *pos * (size_t)(argc > 1 ? argc : 1));
    if (!pos) {
        fprintf(stderr, "attograd-translate average: out of memory\n");
        return 1;
    }
    int npos, status;
    if (!opts_parse_checked(argc, argv, 2, defs, NULL, pos, argc, &npos, NULL)) status = 2;
    else if (help) status = (opts_usage(stdout, AVERAGE_USAGE, defs, NULL), 0);
    else if (!out) status = opts_error(argv, 2, "--out FILE is required (where the average goes)");
    else if (npos == 0) status = opts_error(argv, 2, "no checkpoints to average (give one or more after --out FILE)");
    else status = average(pos, npos, out);
    free(pos);
    return status;
}
