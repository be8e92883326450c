/* nn.TransformerEncoderLayer / TransformerDecoderLayer / TransformerEncoder / TransformerDecoder /
 * Transformer with PyTorch 1.13's contract: the same parameter names and shapes (state_dict
 * order), initialisation, options, mask rules and dropout positions. Post-norm (default) and
 * norm_first (pre-norm) layers; relu, exact gelu or tanh-approximated gelu in the feed-forward
 * block.
 *
 * Dropout sits where torch puts it: on the attention weights inside every attention block, after
 * each block's output (dropout1/2/3) and between the feed-forward activation and linear2
 * (dropout). Masks are drawn from args->rng in torch's execution order, so the same seed gives
 * the same output; in eval mode (training false) nothing is drawn.
 *
 * Differences, on purpose: a query whose every key is masked gets a zero attention vector and
 * zero gradient where torch gives NaN (see mha.h); torch's no-grad inference fast path is not
 * reproduced (in TransformerEncoder with a key padding mask it returns padded positions as
 * zeros and cuts positions padded in every sequence): outputs are always those of torch's
 * differentiable path; the PyTorch 2.x *_is_causal flags are accepted and apply a causal mask
 * (key j > query i masked) on top of any given mask. */
#ifndef AG_NN_TRANSFORMER_H
#define AG_NN_TRANSFORMER_H
#include "../attention/mha.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The feed-forward activation. GELU is exact GELU, F.gelu(x), what torch 1.13's
 * activation="gelu" means; GELU_TANH is F.gelu(x, approximate="tanh") (GPT-2's), which torch
 * takes as a callable: activation=lambda x: F.gelu(x, approximate="tanh"). */
typedef enum { AG_ACTIVATION_RELU = 0, AG_ACTIVATION_GELU = 1, AG_ACTIVATION_GELU_TANH = 2 } ag_activation;

typedef struct {
    int64_t d_model, nhead, dim_feedforward;
    double dropout;           /* attention weights, block outputs and feed-forward hidden units */
    ag_activation activation; /* of the feed-forward block: relu, exact gelu or tanh gelu */
    double layer_norm_eps;
    bool batch_first;         /* (N,L,E) instead of (L,N,E) */
    bool norm_first;          /* LayerNorm before each block (pre-norm) instead of after */
    /* attograd's own (not torch's): in training with grad, each attention block keeps only its
     * output and is computed again in backward (ag_recompute): its projections, scores and
     * probabilities are not held between forward and backward. The same values and parameter
     * gradients; less memory for a second forward of the attention. Off by default. */
    bool recompute_attention;
    /* attograd's own: in training with grad, the relu feed-forward block keeps its (N,L,ff)
     * hidden activation for backward dense, as torch does (the composed ops), instead of
     * packed (ag_feed_forward: its nonzero elements and one bit per element, about half the
     * memory, packed and unpacked in 1-3 % of a step). The same values and, up to rounding, the
     * same gradients. Off by default; gelu blocks always keep theirs dense. */
    bool keep_ff_activation;
    /* attograd's own: with key padding masks (src_key_padding_mask for an encoder,
     * tgt_key_padding_mask and memory_key_padding_mask for a decoder), a layer or stack runs its
     * projections, feed-forward blocks, LayerNorms and dropouts on the positions that are not
     * padding only (bool true or float -inf is padding), as torch's nested tensors do for
     * inference; a stack takes them out once and puts them back once. The attention still sees
     * every position, padding as zero keys and values that the mask hides. The outputs at the
     * other positions, and all gradients of a loss that reads only them, are those without
     * skip_padding (up to rounding); the outputs at padded positions are 0 instead of torch's
     * values, so nothing may read them: a decoder's memory_key_padding_mask must mask the source
     * padding (ag_transformer_forward reports misuse otherwise), and a loss must ignore padded
     * targets (ignore_index). Dropout draws each computed position's mask where the padded
     * batch has it (the padding is skipped, not drawn), so the masks are those of a run without.
     * Off by default; asking for cross-attention weights turns it off. */
    bool skip_padding;
} ag_transformer_config;

/* torch's defaults: dim_feedforward 2048, dropout 0.1, relu, eps 1e-5, seq-first, post-norm */
AG_API ag_transformer_config ag_transformer_defaults(int64_t d_model, int64_t nhead);

/* Masks and mode for every forward below; a layer reads the fields that concern it (an encoder
 * the src_* ones, a decoder the tgt_* and memory_* ones). Mask rules as in mha.h: bool True =
 * masked, float = added. NULL args: no masks, eval mode. */
typedef struct {
    ag_tensor *src_mask;                /* (S,S) or (N*nhead,S,S) */
    ag_tensor *tgt_mask;                /* (T,T) or (N*nhead,T,T), e.g. ag_square_subsequent_mask(T) */
    ag_tensor *memory_mask;             /* (T,S) or (N*nhead,T,S) */
    ag_tensor *src_key_padding_mask;    /* (N,S); (S) for unbatched input */
    ag_tensor *tgt_key_padding_mask;    /* (N,T); (T) */
    ag_tensor *memory_key_padding_mask; /* (N,S); (S) */
    bool src_is_causal, tgt_is_causal, memory_is_causal;
    bool training;                      /* dropout on */
    /* When non-NULL, decoders store their cross-attention weights here (for pictures; no
     * gradient): a decoder layer writes (N,nhead,T,S) per-head weights to [0], a decoder stack
     * layer l's to [l]. */
    ag_tensor **cross_attn_weights;
    ag_rng *rng;                        /* dropout's generator (NULL: the global one) */
} ag_transformer_args;

/* ---- layers ------------------------------------------------------------------------------- */
typedef struct {
    ag_transformer_config cfg;
    ag_mha_module self_attn;                /* "self_attn.in_proj_weight", ... */
    ag_linear_module linear1, linear2;      /* (ff,E) (ff), (E,ff) (E) */
    ag_layer_norm_module norm1, norm2;      /* (E) weight and bias each */
} ag_transformer_encoder_layer_module;

typedef struct {
    ag_transformer_config cfg;
    ag_mha_module self_attn, multihead_attn; /* "self_attn.*", "multihead_attn.*" (cross-attention) */
    ag_linear_module linear1, linear2;
    ag_layer_norm_module norm1, norm2, norm3;
} ag_transformer_decoder_layer_module;

/* Add the layer's parameters under prefix ("" for none; e.g. "encoder.layers.0") in torch's
 * order, initialised as torch (MultiheadAttention, Linear, LayerNorm defaults). Misuse (d_model
 * not divisible by nhead, dropout outside [0,1], ...) is reported; then self_attn.in_proj_weight
 * is NULL. */
AG_API ag_transformer_encoder_layer_module ag_transformer_encoder_layer_new(ag_params *p, const char *prefix,
                                                                       const ag_transformer_config *cfg, ag_rng *rng);
AG_API ag_transformer_decoder_layer_module ag_transformer_decoder_layer_new(ag_params *p, const char *prefix,
                                                                       const ag_transformer_config *cfg, ag_rng *rng);

/* src (S,N,E), or (N,S,E) with batch_first, or (S,E) unbatched  ->  same shape */
AG_API ag_tensor *ag_transformer_encoder_layer_forward(const ag_transformer_encoder_layer_module *m, ag_tensor *src,
                                                       const ag_transformer_args *args);
/* tgt (T,N,E) / (N,T,E) / (T,E), memory (S,N,E) / (N,S,E) / (S,E)  ->  tgt's shape */
AG_API ag_tensor *ag_transformer_decoder_layer_forward(const ag_transformer_decoder_layer_module *m, ag_tensor *tgt,
                                                       ag_tensor *memory, const ag_transformer_args *args);

/* ---- stacks ------------------------------------------------------------------------------- */
#define AG_TRANSFORMER_MAX_LAYERS 32

typedef struct {
    int num_layers;
    ag_transformer_encoder_layer_module layers[AG_TRANSFORMER_MAX_LAYERS]; /* "layers.N.*" */
    ag_layer_norm_module norm;                                             /* "norm.*"; weight NULL if none */
} ag_transformer_encoder_module;

typedef struct {
    int num_layers;
    ag_transformer_decoder_layer_module layers[AG_TRANSFORMER_MAX_LAYERS];
    ag_layer_norm_module norm;
} ag_transformer_decoder_module;

/* nn.TransformerEncoder(layer, num_layers, norm): layers "<prefix>.layers.N" and, with
 * final_norm, a LayerNorm(d_model, layer_norm_eps) "<prefix>.norm". As torch's _get_clones
 * deep-copies one layer, every layer starts with the same values (layer 0's). */
AG_API ag_transformer_encoder_module ag_transformer_encoder_new(ag_params *p, const char *prefix,
                                                           const ag_transformer_config *cfg,
                                                           int num_layers, bool final_norm, ag_rng *rng);
AG_API ag_transformer_decoder_module ag_transformer_decoder_new(ag_params *p, const char *prefix,
                                                           const ag_transformer_config *cfg,
                                                           int num_layers, bool final_norm, ag_rng *rng);
/* shapes as the layers' */
AG_API ag_tensor *ag_transformer_encoder_forward(const ag_transformer_encoder_module *m, ag_tensor *src,
                                                 const ag_transformer_args *args);
AG_API ag_tensor *ag_transformer_decoder_forward(const ag_transformer_decoder_module *m, ag_tensor *tgt, ag_tensor *memory,
                                                 const ag_transformer_args *args);

/* ---- incremental decoding ------------------------------------------------------------------- */
/* The decoder stack run one target position at a time, as in generation (fairseq's incremental
 * state): each layer's self-attention keys and values are cached, the cross-attention keys and
 * values of the memory computed once. Step t gives the decoder's output at position t for the
 * prefix fed so far, as the full forward with a causal target mask does (no target padding mask:
 * a generated prefix has none), at a cost per step that does not grow with the prefix beyond
 * attending over it. Grad mode must be off. Batch first: memory (N,S,E), steps (N,E). Layers
 * with separate q/k/v projections or bias_k/bias_v are not supported (the Transformer's are not). */
typedef struct ag_decoder_cache ag_decoder_cache;
/* A cache for up to max_len positions, in the current arena (it lives as long as the arena's
 * contents; rewinding to a mark taken after this call keeps it). memory_key_padding_mask (N,S)
 * bool or float, or NULL. */
AG_API ag_decoder_cache *ag_decoder_cache_new(const ag_transformer_decoder_module *m, ag_tensor *memory,
                                              ag_tensor *memory_key_padding_mask, int64_t max_len);
/* x (N,E): the embedded target token at the next position  ->  (N,E), after the stack's final
 * norm if it has one. Reports (and returns NULL) with grad mode on or past max_len. */
AG_API ag_tensor *ag_decoder_step(const ag_transformer_decoder_module *m, ag_decoder_cache *c, ag_tensor *x);
/* The same for up to max_rows rows (max_rows >= N; beam search: the sentences' beams): the
 * rows start as memory's N rows, and a reorder may grow or shrink them. Rows that read the same
 * memory row share its cross-attention keys and values: they are gathered again only when the
 * memory rows the rows read change. */
AG_API ag_decoder_cache *ag_decoder_cache_new_rows(const ag_transformer_decoder_module *m, ag_tensor *memory,
                                                   ag_tensor *memory_key_padding_mask, int64_t max_len,
                                                   int64_t max_rows);
/* Row r of the cache becomes row rows[r] of it (beam search keeping, copying or dropping beams);
 * rows (M) i64 or i32 indices of the current rows, 1 <= M <= max_rows (N for
 * ag_decoder_cache_new): the cache then has M rows, and steps take (M,E). The positions fed so
 * far stay. */
AG_API void ag_decoder_cache_reorder(ag_decoder_cache *c, ag_tensor *rows);
/* positions fed so far */
AG_API int64_t ag_decoder_cache_len(const ag_decoder_cache *c);

/* ---- nn.Transformer ------------------------------------------------------------------------ */
typedef struct {
    ag_transformer_encoder_module encoder; /* "encoder.layers.N.*", "encoder.norm.*" */
    ag_transformer_decoder_module decoder; /* "decoder.layers.N.*", "decoder.norm.*" */
} ag_transformer_module;

/* Encoder and decoder with final norms, then, as torch's _reset_parameters, every parameter
 * with more than one dim re-drawn xavier-uniform (so stacked layers no longer share values). */
AG_API ag_transformer_module ag_transformer_new(ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                                           int num_encoder_layers, int num_decoder_layers, ag_rng *rng);
/* src (S,N,E), tgt (T,N,E) (batch-first or unbatched likewise)  ->  (T,N,E): decoder(tgt,
 * encoder(src)) */
AG_API ag_tensor *ag_transformer_forward(const ag_transformer_module *m, ag_tensor *src, ag_tensor *tgt,
                                         const ag_transformer_args *args);

#ifdef __cplusplus
}
#endif
#endif
