/* GRU (nn.GRUCell, nn.GRU) with PyTorch 1.13's equations, gate order (r, z, n), parameter names,
 * shapes and initialisation, plus additive (Bahdanau) and dot-product (Luong) attention for
 * GRU encoder-decoders.
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
#include "../attention/attention.h"
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

/* ---- attention over encoder states --------------------------------------------------------
 * query: (N,Hq), the decoder state; keys: (N,S,Hk), the encoder outputs, also the values (a
 * seq-first (S,N,Hk) output is passed as ag_transpose(out, 0, 1), read in place);
 * key_padding_mask: (N,S) bool, True = padding (or a float mask added to the scores), or NULL.
 * Returns the context Σ_j w_j h_j (N,Hk); *weights (may be NULL) gets the attention weights
 * (N,S), part of the graph. A row whose every key is padding gets zero weights and a zero
 * context (ag_masked_softmax), not NaN. */

/* Fused additive score: s[n,j] = Σ_a v[a] tanh(kp[n,j,a] + qp[n,a]).
 * keys_proj: (N,S,A)  query_proj: (N,A)  v: (A) or (1,A)  ->  (N,S) */
AG_API ag_tensor *ag_additive_scores(ag_tensor *keys_proj, ag_tensor *query_proj, ag_tensor *v);

typedef struct {
    ag_linear_module W1; /* "W1.weight" (A,Hk), no bias: applied to the keys */
    ag_linear_module W2; /* "W2.weight" (A,Hq), no bias: applied to the query */
    ag_linear_module v;  /* "v.weight" (1,A), no bias */
    int64_t query_size, key_size, attn_size;
} ag_additive_attention_module;
/* Bahdanau attention, score(s, h_j) = vᵀ tanh(W1 h_j + W2 s); nn.Linear initialisation. */
AG_API ag_additive_attention_module ag_additive_attention_new(ag_params *p, const char *prefix, int64_t query_size,
                                                         int64_t key_size, int64_t attn_size, ag_rng *rng);
/* W1 applied to every key: keys (N,S,Hk) -> (N,S,A). Compute it once per source batch and pass
 * it to every decoder step's forward. */
AG_API ag_tensor *ag_additive_attention_keys(const ag_additive_attention_module *m, ag_tensor *keys);
/* keys_proj: ag_additive_attention_keys(m, keys), or NULL to compute it here. -> (N,Hk) */
AG_API ag_tensor *ag_additive_attention_forward(const ag_additive_attention_module *m, ag_tensor *query, ag_tensor *keys,
                                                ag_tensor *keys_proj, ag_tensor *key_padding_mask, ag_tensor **weights);

typedef struct {
    ag_tensor *weight; /* "W.weight" (Hq,Hk) for the general score, NULL for the plain dot */
    int64_t query_size, key_size;
} ag_dot_attention_module;
/* Luong attention: score = sᵀ h_j (general false: needs Hq == Hk, no parameters) or sᵀ W h_j
 * with W = nn.Linear(Hk, Hq, bias=False) (general true). */
AG_API ag_dot_attention_module ag_dot_attention_new(ag_params *p, const char *prefix, int64_t query_size, int64_t key_size,
                                               bool general, ag_rng *rng);
/* -> (N,Hk); the general score is computed as (s W)·h_j, one GEMM for the query. */
AG_API ag_tensor *ag_dot_attention_forward(const ag_dot_attention_module *m, ag_tensor *query, ag_tensor *keys,
                                           ag_tensor *key_padding_mask, ag_tensor **weights);

#ifdef __cplusplus
}
#endif
#endif
