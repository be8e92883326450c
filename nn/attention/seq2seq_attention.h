/* Attention of a recurrent decoder over the encoder's states: additive (Bahdanau) and
 * dot-product (Luong), their parameters torch.nn.Linear's (names and initialisation); f32 and
 * f64. */
#ifndef AG_NN_SEQ2SEQ_ATTENTION_H
#define AG_NN_SEQ2SEQ_ATTENTION_H
#include "../layers/layers.h"
#include "attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Both forwards take query: (N,Hq), the decoder state; keys: (N,S,Hk), the encoder outputs,
 * also the values (a seq-first (S,N,Hk) output is passed as ag_transpose(out, 0, 1), read in
 * place); key_padding_mask: (N,S) bool, True = padding (or a float mask added to the scores), or NULL.
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
