/* attograd-translate train: early stopping on the dev exact match with a patience counted in
 * evaluations, as Marian's --early-stopping and fairseq's --patience count validations.
 *
 * An evaluation is better than the best so far when its dev exact match is higher, or equal and
 * below 100 % with a lower dev loss: while exact match stands still (at 0 % early in a run, or on
 * a plateau) the loss shows what the model still learns; at 100 % nothing can be better, so a
 * run that has learned the dev pairs stops `patience` evaluations later. best.h5 is the best
 * evaluation by the same rule. The state lives in the checkpoint's configuration, so a resumed
 * run counts on where it stopped. */
#include <math.h>
#include <stdio.h>

#include "train_internal.h"

void stopper_init(train_stopper *s, int64_t patience, const ag_train_state *st) {
    *s = (train_stopper){.patience = patience, .exact = -1, .loss = INFINITY, .step = -1};
    ag_config_get_double(st, "best_dev_exact", &s->exact);
    ag_config_get_double(st, "best_dev_loss", &s->loss);
    ag_config_get_int(st, "best_step", &s->step);
    ag_config_get_int(st, "evals_since_best", &s->since);
}

bool stopper_better(train_stopper *s, ag_train_state *st, int64_t step, double exact, double loss) {
    bool better = exact > s->exact || (exact == s->exact && exact < 1 && loss < s->loss);
    if (better) {
        s->exact = exact;
        s->loss = loss;
        s->step = step;
        s->since = 0;
    } else {
        s->since++;
    }
    /* the checkpoints saved after this evaluation carry it (a config update only fails out of memory,
     * and then the resumed run counts from an older best) */
    ag_config_set_double(st, "best_dev_exact", s->exact);
    ag_config_set_double(st, "best_dev_loss", s->loss);
    ag_config_set_int(st, "best_step", s->step);
    ag_config_set_int(st, "evals_since_best", s->since);
    return better;
}

bool stopper_done(const train_stopper *s, char *why, size_t n) {
    if (s->patience <= 0 || s->since < s->patience) return false;
    snprintf(why, n, "stopped: no better dev exact match in %lld evaluation%s (best %.2f %% at step %lld)",
             (long long)s->since, s->since == 1 ? "" : "s", 100 * s->exact, (long long)s->step);
    return true;
}
