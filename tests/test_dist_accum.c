/* Gradient accumulation under data parallelism (ag_dist_accumulate, nn/dist/dist.h), run by the
 * suite as `mpirun -np 2 test_dist_accum`: every rank runs every check; a failed check prints
 * "rank R: ..." and exits 1. The loss sum(w * x) has the gradient x, so the expected reduced
 * gradient, the mean over the ranks of the sum of their passes' x, is worked out by hand. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "attograd.h"
#include "dist_check.h"
#include "nn/dist/dist.h"

static int rank, size;

enum { N = 12 }; /* three parameters of 4, each its own bucket */

/* x of pass j on rank r: (r + 1)(j + 1) + i, small integers, exact in float and in any sum */
static float x_of(int r, int j, int i) { return (float)((r + 1) * (j + 1) + i); }

/* one backward pass of sum(w * x) for this rank's pass j: adds x to w's gradient */
static void pass(ag_params *p, int j) {
    float x[N];
    for (int i = 0; i < N; i++) x[i] = x_of(rank, j, i);
    ag_tensor *loss = NULL;
    for (int k = 0; k < p->count; k++) {
        ag_tensor *xs = ag_wrap(AG_F32, AG_SHAPE(4), (char *)(x + 4 * k));
        ag_tensor *term = ag_sum(ag_mul(p->list[k], xs), 0, NULL, false);
        loss = loss ? ag_add(loss, term) : term;
    }
    ag_backward(loss, NULL);
    ag_arena_reset(ag_arena_current());
}

/* After passes[r] passes on rank r, all but the last under ag_dist_accumulate (all of them when
 * skip_last[r]: a rank whose last micro-batch has no rows runs no last backward): the gradient
 * is the mean over the ranks of each one's sum of x, and the buckets started during the last
 * pass, or in ag_dist_sync_grads on a rank that had none */
static void check_accumulated(ag_params *p, ag_dist *d, const int *passes, const bool *skip_last) {
    ag_params_zero_grad(p);
    int mine = passes[rank], accumulated = skip_last[rank] ? mine : mine - 1;
    ag_dist_accumulate(d, true);
    for (int j = 0; j < accumulated; j++) pass(p, j);
    ag_dist_accumulate(d, false);
    if (!skip_last[rank]) pass(p, mine - 1);
    ag_dist_sync_grads(d);
    const float *g = (const float *)p->grad;
    for (int k = 0; k < p->count; k++)
        for (int i = 0; i < 4; i++) {
            double want = 0;
            for (int r = 0; r < size; r++)
                for (int j = 0; j < passes[r]; j++) want += x_of(r, j, 4 * k + i);
            want /= size;
            CHECK(g[p->list[k]->offset + i] == (float)want, "parameter %d element %d: gradient %g, expected %g", k, i,
                  g[p->list[k]->offset + i], want);
        }
    int order[8], n = ag_dist_ready_order(d, order, 8);
    for (int b = 0; b < n; b++)
        CHECK(skip_last[rank] ? order[b] == -1 : order[b] >= 0, "bucket %d became ready %s (%d passes on this rank)",
              order[b], order[b] >= 0 ? "in backward" : "in sync", mine);
    CHECK(n == 3, "%d buckets reduced", n);
}

int main(int argc, char **argv) {
    if (!ag_dist_init(&argc, &argv)) return 1;
    rank = ag_dist_rank();
    size = ag_dist_size();
    ag_params *p = ag_params_new(AG_F32);
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", k);
        ag_tensor *w = ag_params_add(p, name, 1, (int64_t[]){4});
        ag_requires_grad_(w, true);
    }
    ag_dist *d = ag_dist_new(p, &(ag_dist_opts){.bucket_bytes = 16});
    CHECK(ag_dist_bucket_count(d) == 3, "%d buckets", ag_dist_bucket_count(d));
    CHECK(size <= 64, "%d ranks", size);
    int four[64], ragged[64], one[64];
    bool none[64] = {false}, odd[64];
    for (int r = 0; r < size; r++) four[r] = 4, ragged[r] = r % 2 ? 2 : 3, one[r] = 1, odd[r] = r % 2;
    check_accumulated(p, d, four, none);  /* 4 passes per step on every rank */
    check_accumulated(p, d, ragged, odd); /* odd ranks' last micro-batch has no rows: no last backward */
    check_accumulated(p, d, one, none);   /* no accumulation: the usual step */
    check_accumulated(p, d, four, none);  /* and again: nothing of the earlier steps is left */
    ag_dist_free(d);
    ag_params_free(p);
    if (rank == 0) printf("ok gradient accumulation over %d ranks: one reduction of the summed passes\n", size);
    ag_dist_finalize();
    return 0;
}
