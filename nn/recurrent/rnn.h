/* Elman RNN (nn.RNNCell, nn.RNN) with PyTorch 1.13's equation, parameter names, shapes and
 * initialisation:  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)  (or relu).
 * Built as the GRU is (gru.h); f32 and f64. */
#ifndef AG_NN_RNN_H
#define AG_NN_RNN_H
#include "../layers/layers.h"
#include "recurrent.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AG_RNN_TANH = 0, AG_RNN_RELU = 1 } ag_rnn_nonlinearity; /* nonlinearity='tanh' | 'relu' */

/* ---- RNN cell --------------------------------------------------------------------------- */
/* One step (torch.rnn_tanh_cell, torch.rnn_relu_cell), one fused op. x: (N,in) or (in)  h: (N,H)
 * or (H), NULL for zeros  w_ih: (H,in)  w_hh: (H,H)  b_ih, b_hh: (H) or NULL  ->  (N,H) or (H) */
AG_API ag_tensor *ag_rnn_tanh_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                                   ag_tensor *b_hh);
AG_API ag_tensor *ag_rnn_relu_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                                   ag_tensor *b_hh);

typedef struct {
    ag_recurrent_cell_module w; /* weight_ih (H,in), weight_hh (H,H), bias_ih, bias_hh (H) or NULL */
    ag_rnn_nonlinearity nonlinearity;
} ag_rnn_cell_module;
/* nn.RNNCell: "weight_ih", "weight_hh", "bias_ih", "bias_hh" under prefix, all U(-1/√H, 1/√H). */
AG_API ag_rnn_cell_module ag_rnn_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size,
                                     bool bias,
                                     ag_rnn_nonlinearity nonlinearity, ag_rng *rng);
/* x: (N,in) or (in)  h: (N,H) or (H) or NULL  ->  (N,H) or (H) */
AG_API ag_tensor *ag_rnn_cell_forward(const ag_rnn_cell_module *m, ag_tensor *x, ag_tensor *h);

/* ---- RNN -------------------------------------------------------------------------------- */
#define AG_RNN_MAX_LAYERS AG_RECURRENT_MAX_LAYERS

typedef struct {
    ag_recurrent_config layers; /* input_size, hidden_size, num_layers, bias, batch_first, ... */
    ag_rnn_nonlinearity nonlinearity;
} ag_rnn_config;

/* what nn.RNN(input_size, hidden_size) defaults to (tanh) */
AG_API ag_rnn_config ag_rnn_defaults(int64_t input_size, int64_t hidden_size);

typedef struct {
    ag_rnn_config cfg;
    /* [layer][direction]: "weight_ih_l{k}", ..., "bias_hh_l{k}_reverse" */
    ag_recurrent_cell_module layer[AG_RNN_MAX_LAYERS][2];
} ag_rnn_module;

/* nn.RNN: parameters in torch's order under prefix, all U(-1/√H, 1/√H). Misuse is reported
 * (then layer[0][0] is empty). */
AG_API ag_rnn_module ag_rnn_new(ag_params *p, const char *prefix, const ag_rnn_config *cfg, ag_rng *rng);

typedef struct {
    ag_tensor *h0;      /* (num_layers*D, N, H), or (num_layers*D, H) unbatched; NULL: zeros */
    ag_tensor *lengths; /* (N) i32/i64 in [0, L], or NULL: every sequence has length L */
    bool training;      /* dropout between layers on */
    ag_rng *rng;        /* dropout's generator (NULL: the global one) */
} ag_rnn_args;

/* nn.RNN's (output, h_n), with the shapes and the lengths of ag_gru_forward. args may be NULL. */
AG_API ag_tensor *ag_rnn_forward(const ag_rnn_module *m, ag_tensor *x, const ag_rnn_args *args, ag_tensor **h_n);

#ifdef __cplusplus
}
#endif
#endif
