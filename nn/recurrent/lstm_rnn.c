/* LSTMCell, LSTM, RNNCell and RNN (nn/recurrent/lstm.h, rnn.h): the recurrent core
 * (recurrent_internal.h) with the LSTM's and the Elman RNN's gate arithmetic
 * (lstm_kernels.inc). */
#include <math.h>
#include <string.h>
#include <tgmath.h>

#include "../../tensor/op.h"
#include "lstm.h"
#include "recurrent_internal.h"
#include "rnn.h"

#define T float
#define FN(name) name##_f32
#include "lstm_kernels.inc"
#undef T
#undef FN
#define T double
#define FN(name) name##_f64
#include "lstm_kernels.inc"
#undef T
#undef FN

static const ag__rnn_kind LSTM = {{"ag_lstm_cell", ag__rnn_cell_backward, AG__RNN_CELL_SAVES},
                                  {"ag_lstm_sequence", ag__rnn_seq_backward, AG__RNN_SEQ_SAVES},
                                  "LSTM",
                                  4,
                                  2,
                                  6,
                                  {lstm_fwd_f32, lstm_fwd_f64},
                                  {lstm_bwd_f32, lstm_bwd_f64}};
static const ag__rnn_kind RNN_TANH = {{"ag_rnn_tanh_cell", ag__rnn_cell_backward, AG__RNN_CELL_SAVES},
                                      {"ag_rnn_tanh_sequence", ag__rnn_seq_backward, AG__RNN_SEQ_SAVES},
                                      "RNN",
                                      1,
                                      1,
                                      1,
                                      {tanh_fwd_f32, tanh_fwd_f64},
                                      {tanh_bwd_f32, tanh_bwd_f64}};
static const ag__rnn_kind RNN_RELU = {{"ag_rnn_relu_cell", ag__rnn_cell_backward, AG__RNN_CELL_SAVES},
                                      {"ag_rnn_relu_sequence", ag__rnn_seq_backward, AG__RNN_SEQ_SAVES},
                                      "RNN",
                                      1,
                                      1,
                                      1,
                                      {relu_fwd_f32, relu_fwd_f64},
                                      {relu_bwd_f32, relu_bwd_f64}};

/* the module is there, else reported through op naming the function that makes it */
static bool created(const char *op, const char *new_op, const void *m, const ag_tensor *w) {
    if (m && w) return true;
    ag_error(op, "module is NULL or was not created (%s failed?)", new_op);
    return false;
}

/* ==== LSTM ====================================================================================== */

ag_tensor *ag_lstm_cell(ag_tensor *x, ag_tensor *h, ag_tensor *c, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                        ag_tensor *b_hh, ag_tensor **c_next) {
    ag_tensor *y = ag__rnn_cell(&LSTM, "ag_lstm_cell", x, h, c, w_ih, w_hh, b_ih, b_hh);
    if (c_next) *c_next = y ? ag_select(y, 0, 1) : NULL;
    return y ? ag_select(y, 0, 0) : NULL;
}

ag_lstm_cell_module ag_lstm_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size, bool bias,
                                ag_rng *rng) {
    return ag__rnn_cell_new(p, "ag_lstm_cell_new", prefix, "", 4, input_size, hidden_size, bias, rng);
}

ag_tensor *ag_lstm_cell_forward(const ag_lstm_cell_module *m, ag_tensor *x, ag_tensor *h, ag_tensor *c,
                                ag_tensor **c_next) {
    if (c_next) *c_next = NULL;
    if (!created("ag_lstm_cell_forward", "ag_lstm_cell_new", m, m ? m->weight_ih : NULL)) return NULL;
    return ag_lstm_cell(x, h, c, m->weight_ih, m->weight_hh, m->bias_ih, m->bias_hh, c_next);
}

ag_lstm_config ag_lstm_defaults(int64_t input_size, int64_t hidden_size) {
    return ag_recurrent_defaults(input_size, hidden_size);
}

ag_lstm_module ag_lstm_new(ag_params *p, const char *prefix, const ag_lstm_config *cfg, ag_rng *rng) {
    ag_lstm_module m = {.cfg = cfg ? *cfg : (ag_lstm_config){0}};
    ag__rnn_stack_new(p, "ag_lstm_new", prefix, cfg, 4, rng, m.layer);
    return m;
}

ag_tensor *ag_lstm_forward(const ag_lstm_module *m, ag_tensor *x, const ag_lstm_args *args, ag_tensor **h_n,
                           ag_tensor **c_n) {
    ag_lstm_args none = {0};
    const ag_lstm_args *a = args ? args : &none;
    return ag__rnn_forward(&LSTM, "ag_lstm_forward", "ag_lstm_new", m ? &m->cfg : NULL, m ? m->layer : NULL, x,
                           a->h0, a->c0, a->lengths, a->training, a->rng, h_n, c_n);
}

/* ==== RNN ======================================================================================= */

static const ag__rnn_kind *rnn_kind(ag_rnn_nonlinearity f) { return f == AG_RNN_RELU ? &RNN_RELU : &RNN_TANH; }

ag_tensor *ag_rnn_tanh_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                            ag_tensor *b_hh) {
    ag_tensor *y = ag__rnn_cell(&RNN_TANH, "ag_rnn_tanh_cell", x, h, NULL, w_ih, w_hh, b_ih, b_hh);
    return y ? ag_select(y, 0, 0) : NULL;
}

ag_tensor *ag_rnn_relu_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                            ag_tensor *b_hh) {
    ag_tensor *y = ag__rnn_cell(&RNN_RELU, "ag_rnn_relu_cell", x, h, NULL, w_ih, w_hh, b_ih, b_hh);
    return y ? ag_select(y, 0, 0) : NULL;
}

static bool nonlinearity_ok(const char *op, const char *prefix, ag_rnn_nonlinearity f) {
    if (f == AG_RNN_TANH || f == AG_RNN_RELU) return true;
    ag_error(op, "'%s': nonlinearity %d: expected AG_RNN_TANH or AG_RNN_RELU", prefix ? prefix : "", (int)f);
    return false;
}

ag_rnn_cell_module ag_rnn_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size, bool bias,
                              ag_rnn_nonlinearity nonlinearity, ag_rng *rng) {
    ag_rnn_cell_module m = {{NULL, NULL, NULL, NULL, input_size, hidden_size}, nonlinearity};
    if (nonlinearity_ok("ag_rnn_cell_new", prefix, nonlinearity))
        m.w = ag__rnn_cell_new(p, "ag_rnn_cell_new", prefix, "", 1, input_size, hidden_size, bias, rng);
    return m;
}

ag_tensor *ag_rnn_cell_forward(const ag_rnn_cell_module *m, ag_tensor *x, ag_tensor *h) {
    if (!created("ag_rnn_cell_forward", "ag_rnn_cell_new", m, m ? m->w.weight_ih : NULL)) return NULL;
    const ag_recurrent_cell_module *w = &m->w;
    return (m->nonlinearity == AG_RNN_RELU ? ag_rnn_relu_cell : ag_rnn_tanh_cell)(x, h, w->weight_ih, w->weight_hh,
                                                                                  w->bias_ih, w->bias_hh);
}

ag_rnn_config ag_rnn_defaults(int64_t input_size, int64_t hidden_size) {
    return (ag_rnn_config){ag_recurrent_defaults(input_size, hidden_size), AG_RNN_TANH};
}

ag_rnn_module ag_rnn_new(ag_params *p, const char *prefix, const ag_rnn_config *cfg, ag_rng *rng) {
    ag_rnn_module m = {.cfg = cfg ? *cfg : (ag_rnn_config){{0}, AG_RNN_TANH}};
    if (!cfg || nonlinearity_ok("ag_rnn_new", prefix, cfg->nonlinearity))
        ag__rnn_stack_new(p, "ag_rnn_new", prefix, cfg ? &cfg->layers : NULL, 1, rng, m.layer);
    return m;
}

ag_tensor *ag_rnn_forward(const ag_rnn_module *m, ag_tensor *x, const ag_rnn_args *args, ag_tensor **h_n) {
    ag_rnn_args none = {0};
    const ag_rnn_args *a = args ? args : &none;
    return ag__rnn_forward(rnn_kind(m ? m->cfg.nonlinearity : AG_RNN_TANH), "ag_rnn_forward", "ag_rnn_new",
                           m ? &m->cfg.layers : NULL,
                           m ? m->layer : NULL, x, a->h0, NULL, a->lengths, a->training, a->rng, h_n, NULL);
}
