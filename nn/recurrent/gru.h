/* GRU (nn.GRUCell, nn.GRU) with PyTorch 1.13's equations, gate order (r, z, n), parameter names,
 * shapes and initialisation (the attention of GRU encoder-decoders: attention/seq2seq_attention.h).
 *
 *   r = σ(W_ir x + b_ir + W_hr h + b_hr)     z = σ(W_iz x + b_iz + W_hz h + b_hz)
 *   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))     h' = (1 − z) ⊙ n + z ⊙ h
 *
 * A GRU layer direction is two nodes: one GEMM for the input projection of every time step
 * (ag_linear) and one fused recurrence node (forward loop and backpropagation through time side
 * by side in recurrent.c, which LSTM and RNN share). A GRU cell step is one fused node. All work
 * in f32 and f64. */
#ifndef AG_NN_GRU_H
#define AG_NN_GRU_H
#include "../layers/layers.h"
#include "recurrent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- GRU cell --------------------------------------------------------------------------- */
/* One GRU step (torch.gru_cell), one fused op. x: (N,in) or (in)  h: (N,H) or (H), NULL for
 * zeros  w_ih: (3H,in)  w_hh: (3H,H)  b_ih, b_hh: (3H) or NULL  ->  h': (N,H) or (H). */
AG_API ag_tensor *ag_gru_cell(ag_tensor *x, ag_tensor *h, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                              ag_tensor *b_hh);

/* weight_ih (3H,in), weight_hh (3H,H), rows stacked r, z, n; bias_ih, bias_hh (3H) or NULL */
typedef ag_recurrent_cell_module ag_gru_cell_module;
/* nn.GRUCell: "weight_ih", "weight_hh", "bias_ih", "bias_hh" under prefix, all U(-1/√H, 1/√H). */
AG_API ag_gru_cell_module ag_gru_cell_new(ag_params *p, const char *prefix, int64_t input_size, int64_t hidden_size,
                                     bool bias,
                                     ag_rng *rng);
/* x: (N,in) or (in)  h: (N,H) or (H) or NULL  ->  (N,H) or (H) */
AG_API ag_tensor *ag_gru_cell_forward(const ag_gru_cell_module *m, ag_tensor *x, ag_tensor *h);

/* ---- GRU -------------------------------------------------------------------------------- */
#define AG_GRU_MAX_LAYERS AG_RECURRENT_MAX_LAYERS

/* input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional */
typedef ag_recurrent_config ag_gru_config;

/* what nn.GRU(input_size, hidden_size) defaults to */
AG_API ag_gru_config ag_gru_defaults(int64_t input_size, int64_t hidden_size);

typedef struct {
    ag_gru_config cfg;
    /* [layer][direction]: "weight_ih_l{k}", ..., "bias_hh_l{k}_reverse" (input_size of layer
     * k > 0 is D*H) */
    ag_gru_cell_module layer[AG_GRU_MAX_LAYERS][2];
} ag_gru_module;

/* nn.GRU: parameters in torch's order (per layer, per direction: weight_ih, weight_hh, bias_ih,
 * bias_hh) under prefix, all U(-1/√H, 1/√H). Misuse is reported (then layer[0][0] is empty). */
AG_API ag_gru_module ag_gru_new(ag_params *p, const char *prefix, const ag_gru_config *cfg, ag_rng *rng);

typedef struct {
    ag_tensor *h0;      /* (num_layers*D, N, H), or (num_layers*D, H) unbatched; NULL: zeros */
    ag_tensor *lengths; /* (N) i32/i64 in [0, L], or NULL: every sequence has length L */
    bool training;      /* dropout between layers on */
    ag_rng *rng;        /* dropout's generator (NULL: the global one) */
} ag_gru_args;

/* x: (L,N,in), (N,L,in) with batch_first, or (L,in) unbatched  ->  output (L,N,D*H) (or
 * (N,L,D*H), or (L,D*H)), the last layer's hidden state at every step, directions concatenated
 * (forward first). *h_n (may be NULL) gets (num_layers*D, N, H) (or (num_layers*D, H)), row
 * layer*D + direction. With lengths the result is what pack_padded_sequence(enforce_sorted=
 * False) + GRU + pad_packed_sequence(total_length=L) give: step t of sequence b is skipped
 * (hidden state unchanged, output 0, no gradient) when t >= lengths[b], so the reverse
 * direction starts at each sequence's last real step and h_n holds the state after its last
 * real step. Deviation: a length of 0 is accepted (h_n = h0, output zeros; torch rejects it).
 * args may be NULL. */
AG_API ag_tensor *ag_gru_forward(const ag_gru_module *m, ag_tensor *x, const ag_gru_args *args, ag_tensor **h_n);

#ifdef __cplusplus
}
#endif
#endif
