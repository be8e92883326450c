/* Parity adapters for the pointwise losses, amsgrad, unbatched MultiheadAttention and the tanh
 * GELU Transformer layers (cases: gen_nn_losses_options.py). Class-weighted cross entropy and NLL run
 * through ops.c's cross_entropy and nll_loss (their third input is the weight). */
#include <string.h>

#include "parity.h"

/* reduction, beta and log_target from the case's attributes; in2 weight, in3 pos_weight */
static ag_loss_config loss_config(parity_case *c) {
    char r[16];
    pc_str(c, "reduction", r, sizeof r, "mean");
    ag_loss_config lc = ag_loss_defaults();
    lc.reduction = strcmp(r, "sum") == 0         ? AG_REDUCTION_SUM
                 : strcmp(r, "none") == 0        ? AG_REDUCTION_NONE
                 : strcmp(r, "batchmean") == 0   ? AG_REDUCTION_BATCHMEAN
                                                 : AG_REDUCTION_MEAN;
    lc.beta = pc_double(c, "beta", 1.0);
    lc.log_target = pc_bool(c, "log_target", false);
    lc.weight = c->nin > 2 ? c->in[2] : NULL;
    lc.pos_weight = c->nin > 3 ? c->in[3] : NULL;
    return lc;
}

static int binary_cross_entropy(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_binary_cross_entropy(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int binary_cross_entropy_with_logits(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_binary_cross_entropy_with_logits(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int l1_loss(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_l1_loss(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int smooth_l1_loss(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_smooth_l1_loss(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

static int kl_div(parity_case *c, ag_tensor **out) {
    ag_loss_config lc = loss_config(c);
    out[0] = ag_kl_div(pc_in(c, 0), pc_in(c, 1), &lc);
    return 1;
}

const parity_op parity_nn_losses_options_ops[] = {
    {"binary_cross_entropy", binary_cross_entropy},
    {"binary_cross_entropy_with_logits", binary_cross_entropy_with_logits},
    {"l1_loss", l1_loss},
    {"smooth_l1_loss", smooth_l1_loss},
    {"kl_div", kl_div},
    {NULL, NULL},
};
