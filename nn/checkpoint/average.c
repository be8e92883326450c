/* Checkpoint averaging (ag_checkpoint_average): the element-wise mean of several checkpoints'
 * parameters, as fairseq's average_checkpoints and Marian's average.py make it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_internal.h"

/* mean += (x - mean) / k over the slab (k from 1), skipped where x equals the mean: n copies
 * of one value give that value back exactly, -0 included (-0 + 0 would be +0), and the double
 * mean carries no more error than a few units of its last place before the one rounding to
 * the parameters' dtype */
static void running_mean(double *mean, const char *slab, ag_dtype dt, int64_t n, int k) {
    for (int64_t i = 0; i < n; i++) {
        double x = dt == AG_F32 ? (double)((const float *)slab)[i] : ((const double *)slab)[i];
        if (k == 1) mean[i] = x;
        else if (x != mean[i]) mean[i] += (x - mean[i]) / k;
    }
}

ag_checkpoint_status ag_checkpoint_average(const char *const *paths, int n, ag_params *params, char *msg,
                                           size_t msgsize) {
    if (msg && msgsize) *msg = 0;
    if (!paths || n < 1 || !params || params->numel == 0 ||
        (params->dtype != AG_F32 && params->dtype != AG_F64)) {
        if (msg && msgsize)
            snprintf(msg, msgsize, "ag_checkpoint_average: needs at least one checkpoint (got %d) and a parameter set "
                     "of f32 or f64 parameters", n);
        return AG_CHECKPOINT_EINVAL;
    }
    size_t bytes = (size_t)params->numel * ag_dtype_size(params->dtype);
    double *mean = malloc((size_t)params->numel * sizeof *mean);
    char *before = malloc(bytes);
    ag_checkpoint_status s = AG_CHECKPOINT_OK;
    if (!mean || !before) {
        if (msg && msgsize)
            snprintf(msg, msgsize, "out of memory averaging %lld parameters", (long long)params->numel);
        s = AG_CHECKPOINT_ENOMEM;
    } else {
        memcpy(before, params->data, bytes);
        /* each file loaded whole and checked (names, shapes, dtypes) into params, then added */
        for (int k = 0; k < n && s == AG_CHECKPOINT_OK; k++) {
            s = ag_checkpoint_load(paths[k], params, NULL, NULL, NULL, msg, msgsize);
            if (s == AG_CHECKPOINT_OK) running_mean(mean, params->data, params->dtype, params->numel, k + 1);
        }
        if (s != AG_CHECKPOINT_OK) {
            memcpy(params->data, before, bytes); /* a failed average changes nothing */
        } else if (params->dtype == AG_F32) {
            float *x = (float *)params->data;
            for (int64_t i = 0; i < params->numel; i++) x[i] = (float)mean[i];
        } else {
            memcpy(params->data, mean, bytes);
        }
        ag__bump_version(params->flat); /* the loads changed the parameters in place */
    }
    free(mean);
    free(before);
    return s;
}
