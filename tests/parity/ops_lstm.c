/* Parity adapters for LSTMCell, LSTM, RNNCell and RNN of nn/recurrent/lstm.h, rnn.h (cases:
 * gen_lstm.py). */
#include "parity.h"

static ag_tensor *opt_in(parity_case *c, int k) { return c->nin > k ? c->in[k] : NULL; }

/* in0 input, in1 hx, in2 cx (each state may be absent); attrs input_size, hidden_size, bias;
 * outputs h', c' */
static int lstm_cell(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_lstm_cell_module m = ag_lstm_cell_new(pc_params(c), "", pc_int(c, "input_size", 0), pc_int(c, "hidden_size", 0),
                                        pc_bool(c, "bias", true), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_lstm_cell_forward(&m, pc_in(c, 0), opt_in(c, 1), opt_in(c, 2), &out[1]);
    return 2;
}

/* in0 input, in1 hx (may be absent); attrs as lstm_cell and nonlinearity (1 = relu) */
static int rnn_cell(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_rnn_cell_module m = ag_rnn_cell_new(pc_params(c), "", pc_int(c, "input_size", 0), pc_int(c, "hidden_size", 0),
                                      pc_bool(c, "bias", true), pc_bool(c, "nonlinearity", false) ? AG_RNN_RELU : AG_RNN_TANH,
                                      &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_rnn_cell_forward(&m, pc_in(c, 0), opt_in(c, 1));
    return 1;
}

/* attrs input_size, hidden_size, num_layers, bias, batch_first, bidirectional */
static ag_recurrent_config layers_config(parity_case *c) {
    ag_recurrent_config cfg = ag_recurrent_defaults(pc_int(c, "input_size", 0), pc_int(c, "hidden_size", 0));
    cfg.num_layers = (int)pc_int(c, "num_layers", 1);
    cfg.bias = pc_bool(c, "bias", true);
    cfg.batch_first = pc_bool(c, "batch_first", false);
    cfg.bidirectional = pc_bool(c, "bidirectional", false);
    return cfg;
}

/* in0 input, in1 h0, in2 c0, in3 lengths (each but the input may be absent); outputs output,
 * h_n, c_n */
static int lstm(parity_case *c, ag_tensor **out) {
    ag_lstm_config cfg = layers_config(c);
    ag_rng r = ag_rng_new(0);
    ag_lstm_module m = ag_lstm_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_lstm_args a = {.h0 = opt_in(c, 1), .c0 = opt_in(c, 2), .lengths = opt_in(c, 3)};
    out[0] = ag_lstm_forward(&m, pc_in(c, 0), &a, &out[1], &out[2]);
    return 3;
}

/* in0 input, in1 h0, in2 lengths (each of the last two may be absent); outputs output, h_n */
static int rnn(parity_case *c, ag_tensor **out) {
    ag_rnn_config cfg = {layers_config(c), pc_bool(c, "nonlinearity", false) ? AG_RNN_RELU : AG_RNN_TANH};
    ag_rng r = ag_rng_new(0);
    ag_rnn_module m = ag_rnn_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_rnn_args a = {.h0 = opt_in(c, 1), .lengths = opt_in(c, 2)};
    out[0] = ag_rnn_forward(&m, pc_in(c, 0), &a, &out[1]);
    return 2;
}

const parity_op parity_lstm_ops[] = {
    {"lstm_cell", lstm_cell},
    {"rnn_cell", rnn_cell},
    {"lstm", lstm},
    {"rnn", rnn},
    {NULL, NULL},
};
