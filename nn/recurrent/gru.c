/* GRU cell and GRU layers (nn/recurrent/gru.h).
 *
 * The cell op, the sequence op and the layer stack are the recurrent core's
 * (recurrent_internal.h); this file gives it the GRU's gate arithmetic (gru_kernels.inc). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <tgmath.h>

#include "../../tensor/op.h"
#include "gru.h"
#include "recurrent_internal.h"
#include "../nn_internal.h"

/* ---- kernels: step_fwd_f32, step_bwd_f32, ... ---- */
#define T float
#define FN(name) name##_f32
#include "gru_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "gru_kernels.inc"
#undef T
#undef FN

/* gates r, z, n; saved per row: r, z, n and W_hn h + b_hn */
static const ag__rnn_kind GRU = {{"ag_gru_cell", ag__rnn_cell_backward, AG__RNN_CELL_SAVES},
                                 {"ag_gru_sequence", ag__rnn_seq_backward, AG__RNN_SEQ_SAVES},
                                 "GRU",
                                 3,
                                 1,
                                 4,
                                 {step_fwd_f32, step_fwd_f64},
                                 {step_bwd_f32, step_bwd_f64}};

/* ==== GRU cell ================================================================================== */

ag_tensor *ag_gru_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                       ag_tensor *b_hh) {
    ag_tensor *y = ag__rnn_cell(&GRU, "ag_gru_cell", x, h, NULL, w_ih, w_hh, b_ih, b_hh);
    return y ? ag_select(y, 0, 0) : NULL;
}

ag_gru_cell_module ag_gru_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size, bool bias,
                              ag_rng *rng) {
    return ag__rnn_cell_new(p, "ag_gru_cell_new", prefix, "", 3, input_size, hidden_size, bias, rng);
}

ag_tensor *ag_gru_cell_forward(const ag_gru_cell_module *m, ag_tensor *x, ag_tensor *h) {
    if (!m || !m->weight_ih) {
        ag_error("ag_gru_cell_forward", "module is NULL or was not created (ag_gru_cell_new failed?)");
        return NULL;
    }
    return ag_gru_cell(x, h, m->weight_ih, m->weight_hh, m->bias_ih, m->bias_hh);
}

/* ==== GRU ======================================================================================= */

ag_gru_config ag_gru_defaults(int64_t input_size, int64_t hidden_size) {
    return ag_recurrent_defaults(input_size, hidden_size);
}

ag_gru_module ag_gru_new(ag_params *p, const char *prefix, const ag_gru_config *cfg, ag_rng *rng) {
    ag_gru_module m = {.cfg = cfg ? *cfg : (ag_gru_config){0}};
    ag__rnn_stack_new(p, "ag_gru_new", prefix, cfg, 3, rng, m.layer);
    return m;
}

ag_tensor *ag_gru_forward(const ag_gru_module *m, ag_tensor *x, const ag_gru_args *args, ag_tensor **h_n) {
    ag_gru_args none = {0};
    const ag_gru_args *a = args ? args : &none;
    return ag__rnn_forward(&GRU, "ag_gru_forward", "ag_gru_new", m ? &m->cfg : NULL, m ? m->layer : NULL, x, a->h0,
                           NULL, a->lengths, a->training, a->rng, h_n, NULL);
}
