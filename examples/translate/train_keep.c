/* attograd-translate train's checkpoint files: the save every checkpoint goes through, and
 * --keep-last's step-numbered files. */
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_internal.h"

bool train_save(const char *path, model *m, ag_optim *opt, ag_train_state *st) {
    char msg[1024];
    /* between steps the training arena is idle: its pages make room for HDF5's buffers, so a
     * save does not add its memory to a step's (else a save would set the run's peak RSS) */
    ag_arena_trim(ag_arena_current());
    ag_checkpoint_status s = ag_checkpoint_save(path, model_params(m), opt, st, NULL, msg, sizeof msg);
#ifdef __GLIBC__
    /* the freed buffers of HDF5 (6-9 MiB) go back to the system, not into the run's peak */
    malloc_trim(0);
#endif
    if (s != AG_CHECKPOINT_OK) fprintf(stderr, "attograd-translate: saving %s failed: %s\n", path, msg);
    return s == AG_CHECKPOINT_OK;
}

/* OUT/step-<step>.h5 into path */
static void step_path(char *path, size_t size, const char *out, int64_t step) {
    snprintf(path, size, "%s/step-%lld.h5", out, (long long)step);
}

/* the step of a file named step-<step>.h5 as train_keep_step writes it (no sign, no leading
 * zero), else -1 */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step-", 5) != 0 || name[5] < '0' || name[5] > '9' || (name[5] == '0' && name[6] != '.'))
        return -1;
    char *end;
    errno = 0;
    long long step = strtoll(name + 5, &end, 10);
    return errno || strcmp(end, ".h5") != 0 ? -1 : (int64_t)step;
}

static int by_step_down(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Delete out's step files of steps up to `step` but the keep newest. A file that cannot be
 * deleted is reported and left (the run goes on: nothing is lost). */
static void prune(const char *out, int64_t keep, int64_t step) {
    DIR *d = opendir(out);
    if (!d) {
        fprintf(stderr, "attograd-translate: warning: cannot list %s to delete old step files: %s\n", out,
                strerror(errno));
        return;
    }
    int64_t *steps = NULL, n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of(e->d_name);
        if (s < 0 || s > step) continue;
        if (n == cap) {
            int64_t *grown = realloc(steps, sizeof *steps * (size_t)(cap = cap ? 2 * cap : 16));
            if (!grown) { /* nothing is deleted: the next save lists them again */
                n = 0;
                break;
            }
            steps = grown;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n > keep) qsort(steps, (size_t)n, sizeof *steps, by_step_down);
    for (int64_t i = keep; i < n; i++) {
        char path[4096];
        step_path(path, sizeof path, out, steps[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            fprintf(stderr, "attograd-translate: warning: cannot delete %s: %s\n", path, strerror(errno));
    }
    free(steps);
}

bool train_keep_step(const char *out, int64_t keep, model *m, ag_optim *opt, ag_train_state *st) {
    char path[4096];
    step_path(path, sizeof path, out, st->global_step);
    if (!train_save(path, m, opt, st)) return false; /* the older files stay */
    prune(out, keep, st->global_step);
    return true;
}
