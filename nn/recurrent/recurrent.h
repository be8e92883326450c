/* What the recurrent layers (gru.h, lstm.h, rnn.h) share in their public structs. */
#ifndef AG_NN_RECURRENT_H
#define AG_NN_RECURRENT_H
#include "../layers/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The weights of one recurrent cell, or of one layer direction of a GRU, LSTM or RNN, under
 * PyTorch's names: weight_ih (G·H,in), weight_hh (G·H,H), bias_ih and bias_hh (G·H) or NULL
 * without bias; G = 3 (GRU: r, z, n), 4 (LSTM: i, f, g, o) or 1 (RNN). */
typedef struct {
    ag_tensor *weight_ih, *weight_hh;
    ag_tensor *bias_ih, *bias_hh;
    int64_t input_size, hidden_size;
} ag_recurrent_cell_module;

#define AG_RECURRENT_MAX_LAYERS 8

/* A stack of recurrent layers, nn.GRU's and nn.LSTM's arguments (ag_gru_config,
 * ag_lstm_config; ag_rnn_config adds the nonlinearity) */
typedef struct {
    int64_t input_size, hidden_size;
    int num_layers;     /* 1.. AG_RECURRENT_MAX_LAYERS */
    bool bias;          /* bias_ih_l*, bias_hh_l* */
    bool batch_first;   /* input/output (N,L,*) instead of (L,N,*); not the states */
    double dropout;     /* on every layer's output but the last, in training mode */
    bool bidirectional; /* D = 2 directions, layer k > 0 reads both (concatenated) */
} ag_recurrent_config;

/* what nn.GRU / nn.LSTM / nn.RNN(input_size, hidden_size) default to: 1 layer, bias */
AG_API ag_recurrent_config ag_recurrent_defaults(int64_t input_size, int64_t hidden_size);

#ifdef __cplusplus
}
#endif
#endif
