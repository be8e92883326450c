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
} ag_recurrent_cell_t;

#ifdef __cplusplus
}
#endif
#endif
