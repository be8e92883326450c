/* attograd-translate train: the settings a run records in its checkpoints' configuration, and
 * --resume taking them back, so that `train --out DIR --resume` continues the run as it was
 * started: the same data, model, updates, evaluation and stopping. */
#include <stdlib.h>
#include <string.h>

#include "train_internal.h"

/* How a recorded setting is restored and recorded:
 * MODEL  decides the model: must agree when given again; recorded by config_store;
 * AGREE  decides the data order, the updates or the dev pairs the best is chosen on: must agree
 *        when given again; recorded here;
 * CHANGE safe to change on resume (how long, how often to evaluate or save, when to stop, the
 *        corpus files, which are checked by content): a value given again replaces the recorded
 *        one; recorded here, except the corpora's paths (corpora_record). */
enum { MODEL, AGREE, CHANGE, CHANGE_CORPUS };
static const struct {
    const char *flag, *key;
    int how;
} SETTINGS[] = {
    {"--batch", "batch", AGREE},
    {"--seed", "seed", AGREE},
    {"--heldout", "heldout", AGREE},
    {"--max-len", "max_len", MODEL},
    {"--min-count", "min_count", AGREE},
    {"--d-model", "d_model", MODEL},
    {"--heads", "nhead", MODEL},
    {"--layers", "encoder_layers", MODEL},
    {"--ff", "dim_feedforward", MODEL},
    {"--hidden", "hidden", MODEL},
    {"--dropout", "dropout", MODEL},
    {"--lr", "lr", AGREE},
    {"--warmup", "warmup", AGREE},
    {"--label-smoothing", "label_smoothing", AGREE},
    {"--clip", "clip", AGREE},
    {"--teacher-forcing", "teacher_forcing", AGREE},
    {"--max-eval", "max_eval", AGREE},
    {"--accum", "accum", AGREE},
    {"--steps", "steps", CHANGE},
    {"--eval-every", "eval_every", CHANGE},
    {"--save-every", "save_every", CHANGE},
    {"--samples", "samples", CHANGE},
    {"--stop-at", "stop_at", CHANGE},
    {"--patience", "patience", CHANGE},
    {"--keep-last", "keep_last", CHANGE},
    {"--test", "test_file", CHANGE},
    {"--train", "train_file", CHANGE_CORPUS},
    {"--dev", "dev_file", CHANGE_CORPUS},
};
#define NSETTINGS (sizeof SETTINGS / sizeof *SETTINGS)

static int def_index(const run_settings *s, const char *flag) {
    for (int k = 0; s->defs[k].name; k++)
        if (strcmp(s->defs[k].name, flag) == 0) return k;
    return -1;
}

/* the field of s->o that defs[k] parses into (defs point into *s->given) */
static void *field_of(const run_settings *s, int k) {
    return (char *)s->o + ((const char *)s->defs[k].value - (const char *)s->given);
}

/* a field's value as text, for messages: into buf, which is returned */
static const char *value_text(opt_type type, const void *f, char *buf, size_t n) {
    if (type == OPT_INT) snprintf(buf, n, "%lld", (long long)*(const int64_t *)f);
    else if (type == OPT_DOUBLE) snprintf(buf, n, "%s", tr_num_text(*(const double *)f).s);
    else snprintf(buf, n, "%s", *(const char *const *)f ? *(const char *const *)f : "(none)");
    return buf;
}

/* One recorded setting into s->o: false after reporting a conflict with the checkpoint's value */
static bool restore_option(const run_settings *s, const ag_train_state *st, size_t i) {
    const char *flag = SETTINGS[i].flag, *key = SETTINGS[i].key;
    int k = def_index(s, flag);
    opt_type type = s->defs[k].type;
    void *f = field_of(s, k);
    union {
        int64_t i;
        double d;
        const char *s;
    } was = {0};
    char now[4200], then[4200];
    bool have = type == OPT_INT      ? ag_config_get_int(st, key, &was.i)
                : type == OPT_DOUBLE ? ag_config_get_double(st, key, &was.d)
                                     : (was.s = ag_config_get_string(st, key)) != NULL;
    if (!have) { /* a checkpoint of an earlier attograd-translate, or a path the run did not have */
        if (type != OPT_STRING && !s->flagged[k])
            fprintf(stderr, "attograd-translate: note: %s does not record %s: using %s\n", s->from, flag,
                    value_text(type, f, now, sizeof now));
        return true;
    }
    bool differs = type == OPT_INT      ? *(int64_t *)f != was.i
                   : type == OPT_DOUBLE ? *(double *)f != was.d
                                        : !*(const char **)f || strcmp(*(const char **)f, was.s) != 0;
    if (s->flagged[k] && differs && SETTINGS[i].how >= CHANGE) {
        fprintf(stderr, "attograd-translate: note: %s %s replaces the run's %s\n", flag,
                value_text(type, f, now, sizeof now), value_text(type, &was, then, sizeof then));
        return true;
    }
    if (s->flagged[k] && differs) {
        fprintf(stderr, "attograd-translate: cannot resume: %s %s differs from the checkpoint's %s (a resumed run "
                        "continues with the settings it was trained with: leave %s out)\n",
                flag, value_text(type, f, now, sizeof now), value_text(type, &was, then, sizeof then), flag);
        return false;
    }
    memcpy(f, &was, type == OPT_INT ? sizeof(int64_t) : type == OPT_DOUBLE ? sizeof(double) : sizeof(char *));
    return true;
}

bool settings_resume(const run_settings *s, trained *resumed) {
    char msg[2048];
    train_opts *o = s->o;
    if (!trained_load(resumed, s->from, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: cannot resume: %s\n", msg);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < NSETTINGS; i++) ok &= restore_option(s, &resumed->state, i);
    const char *kind = ag_config_get_string(&resumed->state, "model");
    if (s->flagged[def_index(s, "--model")] && kind && strcmp(kind, o->model) != 0) {
        fprintf(stderr, "attograd-translate: cannot resume: --model %s differs from the checkpoint's %s (leave "
                        "--model out)\n", o->model, kind);
        ok = false;
    }
    const char *reads[] = {"words", "characters", "SentencePiece subwords"};
    if ((o->chars || s->flagged[def_index(s, "--tokenizer")]) && tok_mode(o) != resumed->mode) {
        fprintf(stderr, "attograd-translate: cannot resume: %s %s, but the checkpoint's model reads %s (leave it "
                        "out)\n", o->chars ? "--chars" : "--tokenizer", o->chars ? "" : o->tokenizer,
                reads[resumed->mode]);
        ok = false;
    }
    for (int k = 0; k < 3; k++) {
        const char *flag = (const char *[]){"--spm-model", "--spm-type", "--vocab-size"}[k];
        if (s->flagged[def_index(s, flag)]) {
            fprintf(stderr, "attograd-translate: cannot resume: %s: the vocabularies are the checkpoint's (leave it "
                            "out)\n", flag);
            ok = false;
        }
    }
    if (ok && !o->train) {
        fprintf(stderr, "attograd-translate: cannot resume: %s does not record its training file: give --train "
                        "FILE\n", s->from);
        return false;
    }
    const char *bad = ok ? train_opts_problem(o) : NULL;
    if (bad) fprintf(stderr, "attograd-translate: cannot resume: the checkpoint's settings are invalid: %s\n", bad);
    return ok && !bad;
}

bool settings_store(const run_settings *s, ag_train_state *st) {
    bool ok = true;
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (SETTINGS[i].how == MODEL || SETTINGS[i].how == CHANGE_CORPUS) continue;
        int k = def_index(s, SETTINGS[i].flag);
        const void *f = field_of(s, k);
        const char *key = SETTINGS[i].key;
        if (s->defs[k].type == OPT_INT) ok &= ag_config_set_int(st, key, *(const int64_t *)f);
        else if (s->defs[k].type == OPT_DOUBLE) ok &= ag_config_set_double(st, key, *(const double *)f);
        else if (*(const char *const *)f) ok &= ag_config_set_string(st, key, *(const char *const *)f);
        else ag_config_remove(st, key);
    }
    if (!ok) fprintf(stderr, "attograd-translate: out of memory recording the settings in the checkpoint\n");
    return ok;
}
