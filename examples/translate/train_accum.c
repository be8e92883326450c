/* attograd-translate train --accum: the gradient of one optimizer step's batch, computed in
 * micro-batches (fairseq's --update-freq, Marian's --optimizer-delay). */
#include "train_dist.h"
#include "train_internal.h"

/* The batch's rows split into micro-batches (each then split over the ranks, train_dist.h),
 * each one's forward and backward in the arena, which is reset after it: the gradients add up
 * in the parameters' gradient slab, which lives outside the arena. Every micro-batch starts
 * from the step's rng counter and draws, through the generator shared over the whole batch,
 * the masks its rows get in one pass over it; the counter ends where that pass's would. Each
 * micro-batch's mean loss is scaled by its share of the batch's target tokens, so the sum of
 * the gradients is the gradient of the mean over all of them, not a mean of means. */
double train_batch_grads(model *m, const tr_batch *bt, const train_opts *o, ag_rng *rng, ag_arena *arena) {
    int64_t parts = o->accum < bt->B ? o->accum : bt->B; /* an epoch's last batch may be short */
    uint64_t start = rng->counter, end = start;
    int size = tr_dist_size();
    double share = 0;
    ag_params_zero_grad(model_params(m));
    for (int64_t k = 0; k < parts; k++) {
        int64_t first, rows;
        double scale;
        rng->counter = start;
        tr_dist_rows(bt, bt->B * k / parts, bt->B * (k + 1) / parts, rng, &first, &rows, &scale);
        tr_dist_accumulate(k + 1 < parts); /* the allreduce starts in the last micro-batch's backward */
        if (rows > 0) {
            ag_tensor *src = ag_wrap(AG_I64, AG_SHAPE(rows, bt->Ls), (char *)(bt->src + first * bt->Ls));
            ag_tensor *tin = ag_wrap(AG_I64, AG_SHAPE(rows, bt->Lt), (char *)(bt->tgt_in + first * bt->Lt));
            ag_tensor *tout = ag_wrap(AG_I64, AG_SHAPE(rows, bt->Lt), (char *)(bt->tgt_out + first * bt->Lt));
            ag_tensor *loss =
                model_loss(model_forward(m, src, tin, true, o->teacher_forcing, rng), tout, o->label_smoothing);
            ag_backward(scale == 1.0 ? loss : ag_mul_scalar(loss, scale), NULL);
            share += ag_item(loss) * (scale / size);
        }
        if (rng->counter > end) end = rng->counter;
        if (k + 1 < parts) ag_arena_reset(arena);
    }
    rng->counter = end;
    if (size == 1 && parts > 1) ag_rng_share_batch(rng, 0, 0, 0);
    tr_dist_sync();
    return tr_dist_batch_loss(share);
}
