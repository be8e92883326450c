/* attograd-translate train under mpirun: each global batch split over the ranks, the gradients
 * averaged (nn/dist/dist.h), rank 0 alone printing, evaluating and saving. In a build without
 * MPI, or run without mpirun, there is one rank and every call is a no-op or the identity. */
#ifndef TRANSLATE_TRAIN_DIST_H
#define TRANSLATE_TRAIN_DIST_H
#include <stdbool.h>
#include <stdint.h>

#include "attograd.h"
#include "data.h"

/* Start MPI when run by mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE); false after reporting why
 * it could not start. */
bool tr_dist_begin(void);
void tr_dist_end(void);
int tr_dist_rank(void);
int tr_dist_size(void);

/* Set-up on ranks other than 0 is quiet: its messages go to a temporary file, and
 * tr_dist_setup_agree gives them to every rank when that rank's set-up failed. */
void tr_dist_quiet_setup(void);
/* Whether set-up succeeded on every rank; if not, rank 0 prints "rank R: <its last message>"
 * for the lowest failing rank other than 0 (rank 0's own message is already out). Restores
 * stderr. Collective. */
bool tr_dist_setup_agree(bool ok);
/* Whether every rank read the same training pairs, vocabularies and model (size and settings
 * in config, a short text); reports the first rank that differs. Collective. */
bool tr_dist_same_run(const tr_dataset *train, const tr_vocab *src, const tr_vocab *tgt, const ag_params *p,
                      const char *config);
/* Data-parallel training of p from here on (rank 0's values broadcast). */
void tr_dist_attach(ag_params *p);
/* the end of data-parallel training: rng (dropout's and the teacher-forcing draws) no longer
 * shared over a global batch */
void tr_dist_detach(ag_rng *rng);

/* This rank's rows of rows lo .. hi-1 of a batch (a micro-batch under --accum; 0 and bt->B for
 * the whole batch): first, n (n may be 0 when there are fewer rows than ranks), and the factor
 * that makes the mean loss over its target tokens, summed over the micro-batches and averaged
 * over the ranks, the mean over the whole batch's tokens (size * local tokens / batch tokens).
 * Every rank draws from the run's rng, shared over the whole batch (ag_rng_share_batch): each
 * pair gets the dropout mask it gets in one process, whatever rank and micro-batch run it. */
void tr_dist_rows(const tr_batch *bt, int64_t lo, int64_t hi, ag_rng *rng, int64_t *first, int64_t *n,
                  double *loss_scale);
/* Backward passes from here on only add to this rank's gradients (on), or the next one, or
 * tr_dist_sync, reduces them (off): one allreduce per optimizer step under --accum. */
void tr_dist_accumulate(bool on);
/* After backward (or instead of one, on a rank with no rows): the averaged gradient. */
void tr_dist_sync(void);
/* The batch's mean loss from this rank's share of it: the sum of its micro-batches' mean
 * losses, each times its loss_scale / size. Collective. */
double tr_dist_batch_loss(double local_share);
/* Whether flag is set on any rank. Collective (one rank: flag). */
bool tr_dist_any(bool flag);
/* SIGINT and SIGTERM (on) only set a flag that tr_dist_step_done reads, or (off) take their
 * default action again. */
void tr_dist_catch_signals(bool on);
/* After a step: every rank's rng counter moves to the largest (a rank with no rows drew
 * nothing), so rank 0's, which checkpoints save, is every rank's and a resumed run continues the
 * stream exactly; *diverged (a non-finite loss) is set on every rank when set on any; returns
 * whether a signal caught since tr_dist_catch_signals reached any rank. Every rank gets the same
 * answers and stops after the same step; the caller tests them, never a flag of its own, between
 * collectives. Collective. */
bool tr_dist_step_done(ag_rng *rng, bool *diverged);

#endif
