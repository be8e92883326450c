/* LSTM (nn.LSTMCell, nn.LSTM) with PyTorch 1.13's equations, gate order (i, f, g, o), parameter
 * names, shapes and initialisation.
 *
 *   i = σ(W_ii x + b_ii + W_hi h + b_hi)    f = σ(W_if x + b_if + W_hf h + b_hf)
 *   g = tanh(W_ig x + b_ig + W_hg h + b_hg)  o = σ(W_io x + b_io + W_ho h + b_ho)
 *   c' = f ⊙ c + i ⊙ g    h' = o ⊙ tanh(c')
 *
 * Built as the GRU is (gru.h): a layer direction is one GEMM for the input projection of every
 * step and one fused recurrence node; a cell step is one fused node. f32 and f64. Not
 * supported: proj_size (nn.LSTM's projected hidden state). */
#ifndef AG_NN_LSTM_H
#define AG_NN_LSTM_H
#include "../layers/layers.h"
#include "recurrent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- LSTM cell -------------------------------------------------------------------------- */
/* One LSTM step (torch.lstm_cell), one fused op. x: (N,in) or (in)  h, c: (N,H) or (H), NULL
 * for zeros  w_ih: (4H,in)  w_hh: (4H,H)  b_ih, b_hh: (4H) or NULL  ->  h': (N,H) or (H);
 * *c_next (may be NULL) gets c'. */
AG_API ag_tensor *ag_lstm_cell(ag_tensor *x, ag_tensor *h, ag_tensor *c, ag_tensor *w_ih, ag_tensor *w_hh,
                               ag_tensor *b_ih,
                               ag_tensor *b_hh, ag_tensor **c_next);

/* weight_ih (4H,in), weight_hh (4H,H), rows stacked i, f, g, o; bias_ih, bias_hh (4H) or NULL */
typedef ag_recurrent_cell_module ag_lstm_cell_module;
/* nn.LSTMCell: "weight_ih", "weight_hh", "bias_ih", "bias_hh" under prefix, all U(-1/√H, 1/√H). */
AG_API ag_lstm_cell_module ag_lstm_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size,
                                       bool bias,
                                       ag_rng *rng);
/* x: (N,in) or (in)  h, c: (N,H) or (H) or NULL  ->  h' (N,H) or (H); *c_next (may be NULL) c' */
AG_API ag_tensor *ag_lstm_cell_forward(const ag_lstm_cell_module *m, ag_tensor *x, ag_tensor *h, ag_tensor *c,
                                       ag_tensor **c_next);

/* ---- LSTM ------------------------------------------------------------------------------- */
#define AG_LSTM_MAX_LAYERS AG_RECURRENT_MAX_LAYERS

/* input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional */
typedef ag_recurrent_config ag_lstm_config;

/* what nn.LSTM(input_size, hidden_size) defaults to */
AG_API ag_lstm_config ag_lstm_defaults(int64_t input_size, int64_t hidden_size);

typedef struct {
    ag_lstm_config cfg;
    /* [layer][direction]: "weight_ih_l{k}", ..., "bias_hh_l{k}_reverse" */
    ag_lstm_cell_module layer[AG_LSTM_MAX_LAYERS][2];
} ag_lstm_module;

/* nn.LSTM: parameters in torch's order (per layer, per direction: weight_ih, weight_hh,
 * bias_ih, bias_hh) under prefix, all U(-1/√H, 1/√H). Misuse is reported (then layer[0][0]
 * is empty). */
AG_API ag_lstm_module ag_lstm_new(ag_params *p, const char *prefix, const ag_lstm_config *cfg, ag_rng *rng);

typedef struct {
    ag_tensor *h0, *c0; /* (num_layers*D, N, H), or (num_layers*D, H) unbatched; NULL: zeros */
    ag_tensor *lengths; /* (N) i32/i64 in [0, L], or NULL: every sequence has length L */
    bool training;      /* dropout between layers on */
    ag_rng *rng;        /* dropout's generator (NULL: the global one) */
} ag_lstm_args;

/* nn.LSTM's (output, (h_n, c_n)): x (L,N,in), (N,L,in) with batch_first, or (L,in) unbatched
 * -> output (L,N,D*H) (or (N,L,D*H), or (L,D*H)); *h_n and *c_n (each may be NULL) get
 * (num_layers*D, N, H) (or (num_layers*D, H)), row layer*D + direction. Lengths as in
 * ag_gru_forward: what pack_padded_sequence(enforce_sorted=False) + LSTM +
 * pad_packed_sequence(total_length=L) give (a length of 0 is accepted: h_n = h0, c_n = c0).
 * args may be NULL. */
AG_API ag_tensor *ag_lstm_forward(const ag_lstm_module *m, ag_tensor *x, const ag_lstm_args *args, ag_tensor **h_n,
                                  ag_tensor **c_n);

#ifdef __cplusplus
}
#endif
#endif
