/* nn.MultiheadAttention with PyTorch 1.13's contract: the same parameters (names, shapes,
 * initialisation), options, mask rules and outputs. Differences, on purpose: a query whose
 * every key is masked gets a zero attention vector (so its output is out_proj.bias) and zero
 * gradient where PyTorch gives NaN; is_causal (a PyTorch 2.x argument) is accepted; the
 * returned attention weights carry no gradient. Keys that key_padding_mask hides (bool true or
 * float -inf) are not projected: their attention weights are 0 and their gradients 0 whatever
 * their key and value rows hold, so those rows are left 0 (a NaN or inf there does not reach
 * the output, where PyTorch's 0 · NaN would). */
#ifndef AG_NN_MHA_H
#define AG_NN_MHA_H
#include "attention.h"
#include "../layers/layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t embed_dim, num_heads;
    double dropout;     /* on the attention weights, in training mode */
    bool bias;          /* in_proj_bias and out_proj.bias */
    bool add_bias_kv;   /* learned bias_k, bias_v (1,1,E) appended to the keys and values */
    bool add_zero_attn; /* a zero key and value appended after the projections */
    int64_t kdim, vdim; /* 0 → embed_dim; if either differs, separate q/k/v_proj_weight */
    bool batch_first;   /* (N,L,E) instead of (L,N,E) */
} ag_mha_config;

/* the configuration nn.MultiheadAttention(embed_dim, num_heads) defaults to */
AG_API ag_mha_config ag_mha_defaults(int64_t embed_dim, int64_t num_heads);

typedef struct {
    ag_mha_config cfg;
    ag_tensor *in_proj_weight;                              /* (3E,E), or NULL when kdim/vdim differ */
    ag_tensor *q_proj_weight, *k_proj_weight, *v_proj_weight; /* (E,E) (E,kdim) (E,vdim), or NULL */
    ag_tensor *in_proj_bias;                                /* (3E) or NULL */
    ag_tensor *bias_k, *bias_v;                             /* (1,1,E) or NULL */
    ag_linear_module out_proj;                                   /* "out_proj.weight" (E,E), "out_proj.bias" (E) */
} ag_mha_module;

/* Add the module's parameters under prefix ("" for none) and initialise them as PyTorch:
 * xavier-uniform in_proj (or q/k/v_proj), zero biases, xavier-normal bias_k/bias_v, out_proj
 * as nn.Linear. Misuse (embed_dim not divisible by num_heads, ...) is reported, and so is the
 * first parameter that cannot be allocated (ag_params_add); either way no weight is set. */
AG_API ag_mha_module ag_mha_new(ag_params *p, const char *prefix, const ag_mha_config *cfg, ag_rng *rng);

typedef struct {
    ag_tensor *key_padding_mask; /* (N,S) bool (True = padding) or float (added), or NULL; (S) unbatched */
    ag_tensor *attn_mask;        /* (L,S) or (N*num_heads,L,S), bool or float, or NULL */
    bool is_causal;              /* also mask key j > query i */
    bool need_weights;           /* return the attention weights in *weights */
    bool average_attn_weights;   /* (N,L,S) averaged over heads, else (N,H,L,S) */
    bool training;               /* dropout on */
    ag_rng *rng;                 /* dropout's generator (NULL: the global one) */
} ag_mha_args;

/* query (L,N,E) / (N,L,E) with batch_first; key (S,N,kdim), value (S,N,vdim) likewise.
 * Returns attn_output shaped like query; *weights (if need_weights and weights != NULL) gets
 * the attention weights after dropout. args may be NULL (no masks, need_weights off).
 * Unbatched, as PyTorch accepts it (batch_first does not apply): query (L,E), key (S,kdim),
 * value (S,vdim), key_padding_mask (S), attn_mask (L,S) or (num_heads,L,S) -> attn_output
 * (L,E), weights (L,S), or (num_heads,L,S) without average_attn_weights. */
AG_API ag_tensor *ag_mha_forward(const ag_mha_module *m, ag_tensor *query, ag_tensor *key, ag_tensor *value,
                                 const ag_mha_args *args, ag_tensor **weights);

#ifdef __cplusplus
}
#endif
#endif
