/* attograd dist: data-parallel training over MPI, a library of its own (libattograd-dist, built
 * when meson finds MPI): a program includes this header beside attograd.h and links
 * `pkg-config --libs attograd-dist`; libattograd and the programs that use only it never load
 * MPI.
 *
 * Every process (rank) holds the whole model and trains on its share of each global batch. As
 * in PyTorch's DistributedDataParallel, ag_dist_new broadcasts rank 0's parameters to all, and
 * the gradients are averaged over the ranks in buckets of a few MiB, in reverse parameter
 * order: a bucket's non-blocking allreduce (MPI_Iallreduce) starts as soon as backward has made
 * the gradients of all its parameters final (autograd.h: ag_set_leaf_grad_hooks), so the
 * reduction of the last layers overlaps the backward of the first. ag_dist_sync_grads waits for
 * them all: the one call per step, between ag_backward and clipping or the optimizer, which
 * then see the averaged gradient unchanged. Buckets start in the same order on every rank
 * whatever order they complete in, and for a fixed number of ranks the sums are computed the
 * same way every run: runs are bit-identical and every rank holds the same parameters.
 *
 *     int main(int argc, char **argv) {
 *         if (!ag_dist_init(&argc, &argv)) return 1;
 *         int rank = ag_dist_rank(), size = ag_dist_size();
 *         ag_params *p = ag_params_new(AG_F32);
 *         ag_rng rng = ag_rng_new(1);                  // the same seed on every rank
 *         ag_linear_module fc = ag_linear_new(p, "fc", 64, 10, true, &rng);
 *         ag_dist *d = ag_dist_new(p, NULL);          // every rank starts from rank 0's values
 *         ag_adam_config adam = ag_adam_defaults();
 *         ag_optim *opt = ag_adam_new(p, &adam);
 *         for (int step = 0; step < 100; step++) {
 *             int64_t n = B / size, first = rank * n;  // this rank's rows of the global batch
 *             ag_tensor *x = rows_of(step, first, n), *y = labels_of(step, first, n);
 *             ag_rng_share_batch(&rng, first, n, B);   // each row's dropout mask, as in one process
 *             ag_params_zero_grad(p);
 *             ag_tensor *h = ag_dropout(x, 0.1, true, &rng);
 *             ag_backward(ag_cross_entropy(ag_linear_forward(&fc, h), y, NULL), NULL);
 *             ag_dist_sync_grads(d);                  // the mean of the ranks' gradients
 *             ag_clip_grad_norm(p, 1.0);
 *             ag_optim_step(opt);
 *             ag_arena_reset(ag_arena_current());
 *         }
 *         if (rank == 0) save_checkpoint(p, opt);    // every rank holds the same parameters
 *         ag_dist_free(d);
 *         ag_dist_finalize();
 *     }
 *
 * Dropout: with the same seed on every rank and the generator shared over the global batch
 * (ag_rng_share_batch, tensor.h), row first + i here draws the mask it draws in one process
 * running all B rows, and every rank's counter moves as that process's does: N ranks train as
 * one process, to f32 rounding, dropout included.
 *
 * Averaging is exact for a loss that is a mean over equal shares. A loss averaged over a
 * varying number of items per rank (tokens) must be scaled so that the average of the ranks'
 * gradients is the gradient of the global mean: multiply the local mean by
 * size * local_count / global_count (ag_dist_sum_i64 gives the global count).
 *
 * Faults: a process that dies or exits without ag_dist_finalize makes mpirun stop the others
 * (Open MPI's default). One that calls ag_dist_finalize while another still waits for it in a
 * collective stops the job too: the waiting rank sees its note and calls MPI_Abort naming it. A failure that one rank finds (a file it cannot open) must reach the
 * others before the next collective: ag_dist_agree. ag_dist_same finds a rank whose
 * configuration (corpus, vocabulary, model) differs from rank 0's. */
#ifndef AG_DIST_H
#define AG_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MPI_Init_thread (threads funneled: OpenMP threads never call MPI) unless MPI is already up.
 * false (with a message on stderr) when MPI cannot start. Without mpirun: one rank. */
AG_API bool ag_dist_init(int *argc, char ***argv);
/* Tells the other ranks this one takes part in no more collectives and waits for theirs, then
 * MPI_Finalize if ag_dist_init started MPI; call it on every rank, after the last collective. */
AG_API void ag_dist_finalize(void);
AG_API int ag_dist_rank(void);       /* 0 .. size-1 (0 before init) */
AG_API int ag_dist_size(void);       /* processes in the job (1 before init) */
AG_API int ag_dist_local_rank(void); /* among the processes on this machine */
AG_API int ag_dist_local_size(void);
/* Stop every process of the job now (MPI_Abort) with this exit status. */
AG_API void ag_dist_abort(int status);

/* ---- agreement across ranks (collectives: every rank calls them, in the same order) ---- */

/* Whether every rank's ok is true. If not, msg (msgsize bytes) gets "rank R: <its message>"
 * for the lowest failing rank R, on every rank, so that each can stop with the same words. */
AG_API bool ag_dist_agree(bool ok, const char *message, char *msg, size_t msgsize);
/* Whether the n bytes at data are the same on every rank as on rank 0 (by a 64-bit hash). If
 * not, msg gets "rank R: <what> differs from rank 0's" for the lowest such rank. */
AG_API bool ag_dist_same(const void *data, size_t n, const char *what, char *msg, size_t msgsize);
/* The sums over the ranks (MPI_Allreduce; Open MPI gives every rank the same bits). */
AG_API int64_t ag_dist_sum_i64(int64_t x);
AG_API double ag_dist_sum_f64(double x);
/* x[i] = the largest x[i] over the ranks, for n values (MPI_Allreduce). */
AG_API void ag_dist_max_u64(uint64_t *x, int n);
/* Whether any rank's flag is true (a stop decided by one rank). */
AG_API bool ag_dist_any(bool flag);
/* Broadcast n bytes from root. */
AG_API void ag_dist_broadcast(void *data, size_t n, int root);

/* ---- data-parallel gradients ---- */
typedef struct ag_dist ag_dist;

typedef struct {
    size_t bucket_bytes; /* 0: 4 MiB; the last parameters' bucket is as big as the others */
} ag_dist_opts;

/* Data-parallel training of p over all ranks: broadcasts p's values from rank 0, divides the
 * gradient slab into buckets and installs the leaf-gradient hooks (one ag_dist at a time).
 * opts may be NULL. Collective. */
AG_API ag_dist *ag_dist_new(ag_params *p, const ag_dist_opts *opts);
/* Removes the hooks. Not collective. */
AG_API void ag_dist_free(ag_dist *d);
/* Wait for the buckets' allreduce (starting those backward has not started, e.g. after no
 * backward at all) and divide by the number of ranks: p's gradient slab is then the mean of
 * the ranks' gradients, the same bits on every rank. One call per ag_backward. */
AG_API void ag_dist_sync_grads(ag_dist *d);
/* Gradient accumulation over several backward passes per optimizer step (PyTorch DDP's
 * no_sync): while on, a backward pass only adds to this rank's gradient slab and starts no
 * reduction; the first pass after it is turned off, or ag_dist_sync_grads, reduces the sum of
 * all the passes since the gradients were zeroed: one allreduce per step. */
AG_API void ag_dist_accumulate(ag_dist *d, bool on);
/* Broadcast p's values from rank 0 again (after loading a checkpoint on rank 0 only). */
AG_API void ag_dist_broadcast_params(ag_dist *d);
/* Whether every rank's parameters are bit-identical to rank 0's (a 64-bit hash of the slab). */
AG_API bool ag_dist_params_identical(ag_dist *d);

/* For tests and tuning: the number of buckets, and bucket b's slab range [first, end) in
 * elements (bucket 0 holds the last parameters). */
AG_API int ag_dist_bucket_count(const ag_dist *d);
AG_API void ag_dist_bucket_range(const ag_dist *d, int b, int64_t *first, int64_t *end);
/* The order in which the last sync's buckets became ready (complete) in backward: order[i] is
 * a bucket index, -1 for a bucket started only by sync. Returns the count written (<= n). */
AG_API int ag_dist_ready_order(const ag_dist *d, int *order, int n);

#ifdef __cplusplus
}
#endif
#endif
