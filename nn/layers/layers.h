/* Linear, Embedding, LayerNorm, Dropout, positional encodings and losses, with PyTorch 1.13's
 * formulas, defaults, parameter names, shapes and initialisation.
 *
 * Each functional form is one fused op (one node, backward beside it in its file of nn/layers/);
 * each module is a plain struct of parameter pointers made by ag_<module>_new, which adds the
 * parameters to an ag_params slab as "<prefix>.weight" / "<prefix>.bias" (just "weight" /
 * "bias" when prefix is NULL or "") and initialises them as torch.nn does. rng NULL means the
 * global generator. On misuse the functions report through ag_error and return NULL (modules:
 * a struct whose weight is NULL). */
#ifndef AG_NN_LAYERS_H
#define AG_NN_LAYERS_H
#include "../../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Linear ------------------------------------------------------------------------------- */
/* y = x @ w^T + b (F.linear). x: (..., in)  w: (out, in)  b: (out) or NULL  ->  y: (..., out).
 * One GEMM over the flattened leading dims; transposed or row-sliced x and w are read in place. */
AG_API ag_tensor *ag_linear(ag_tensor *x, ag_tensor *w, ag_tensor *b);

typedef struct {
    ag_tensor *weight, *bias; /* (out, in), (out) or NULL */
    int64_t in_features, out_features;
} ag_linear_module;
/* nn.Linear: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5)). */
AG_API ag_linear_module ag_linear_new(ag_params *p, const char *prefix, int64_t in_features, int64_t out_features, bool bias,
                                 ag_rng *rng);
/* x: (..., in) -> (..., out) */
AG_API ag_tensor *ag_linear_forward(const ag_linear_module *m, ag_tensor *x);

/* ---- Embedding ---------------------------------------------------------------------------- */
/* F.embedding(ids, weight, padding_idx), the one embedding lookup: rows of weight for every
 * id. weight: (V, E)  ids: any shape, i32/i64  ->  ids.shape + (E).
 * Rows equal to padding_idx (0..V-1; -1 for none) are looked up but receive no gradient.
 * Unlike PyTorch, -1 means "no padding", not "the last row". */
AG_API ag_tensor *ag_embedding(ag_tensor *weight, ag_tensor *ids, int64_t padding_idx);

typedef struct {
    ag_tensor *weight; /* (num_embeddings, embedding_dim) */
    int64_t num_embeddings, embedding_dim, padding_idx;
} ag_embedding_module;
/* nn.Embedding: weight ~ N(0, 1), row padding_idx (if not -1) zeroed. A learned positional
 * encoding is such an embedding over positions 0..L-1 (nn.Embedding(max_len, d_model)). */
AG_API ag_embedding_module ag_embedding_new(ag_params *p, const char *prefix, int64_t num_embeddings, int64_t embedding_dim,
                                       int64_t padding_idx, ag_rng *rng);
/* ids: any shape -> ids.shape + (embedding_dim) */
AG_API ag_tensor *ag_embedding_forward(const ag_embedding_module *m, ag_tensor *ids);

/* ---- LayerNorm over the last dim ---------------------------------------------------------- */
/* (x - mean) / sqrt(var + eps) * w + b, with the biased variance, over the last dim
 * (normalized_shape = (D,)). x: (..., D)  w, b: (D) or NULL  ->  (..., D). */
AG_API ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *w, ag_tensor *b, double eps);

typedef struct {
    ag_tensor *weight, *bias; /* (D) each, NULL without elementwise_affine */
    int64_t normalized_shape;
    double eps;
} ag_layer_norm_module;
/* nn.LayerNorm((D,), eps, elementwise_affine): weight ones, bias zeros (PyTorch's eps is 1e-5). */
AG_API ag_layer_norm_module ag_layer_norm_new(ag_params *p, const char *prefix, int64_t normalized_shape, double eps,
                                         bool elementwise_affine);
/* x: (..., D) -> (..., D) */
AG_API ag_tensor *ag_layer_norm_forward(const ag_layer_norm_module *m, ag_tensor *x);

/* ---- Dropout ------------------------------------------------------------------------------ */
/* Inverted dropout: each element kept with probability 1-p and scaled by 1/(1-p), else 0.
 * x: any shape -> same shape. The mask comes from the counter-based rng (numel(x) uniforms, in
 * row-major order), so it is reproducible and independent of the thread count. Returns x
 * itself (drawing nothing) when !training or p == 0; zeros when p == 1 (drawing nothing). */
AG_API ag_tensor *ag_dropout(ag_tensor *x, double p, bool training, ag_rng *rng);
/* The same in place (F.dropout(inplace=True)): y shares x's storage, for memory, and x's
 * version moves on (ag_version). x's old values are gone, so no recorded backward may read them
 * (true of the outputs of linear and attention): if one does, ag_backward reports it naming
 * that op (the version check, tensor/node.h). A non-contiguous x, or a leaf that requires grad
 * while grad mode is on, is done out of place. */
AG_API ag_tensor *ag_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng);
/* dropout(relu(x)) in place, with the same rng draws as ag_dropout: the transformer's
 * feed-forward activation. Keeps no mask: its backward reads only y (dx = g·scale where
 * y ≠ 0), so y must not be changed in place before backward (checked). Not training or
 * p == 0: relu in place. Same conditions on x as ag_dropout_. */
AG_API ag_tensor *ag_relu_dropout_(ag_tensor *x, double p, bool training, ag_rng *rng);

/* ---- the Transformer's feed-forward block ------------------------------------------------- */
/* y = dropout(relu(x w1ᵀ + b1)) w2ᵀ + b2, the values of ag_linear → ag_relu_dropout_ → ag_linear
 * (same rng draws), holding its (..., ff) hidden activation for backward packed: one bit per
 * element and the nonzero elements (after relu and dropout about half), not the dense tensor
 * and its keep mask (the hidden activation is the largest tensor of a Transformer layer).
 * x (..., d), w1 (ff, d), b1 (ff) or NULL, w2 (out, ff), b2 (out) or NULL -> (..., out).
 * Backward reads x, w1 and w2, so they must keep their values until then (checked). */
AG_API ag_tensor *ag_feed_forward(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2, double p,
                                  bool training, ag_rng *rng);

/* ---- positional encodings ----------------------------------------------------------------- */
/* "Attention is all you need" table (L, D), no grad: pe[pos, 2i] = sin(pos / 10000^(2i/D)),
 * pe[pos, 2i+1] = cos(pos / 10000^(2i/D)); computed in double. For a learned encoding use an
 * ag_embedding_module over positions. */
AG_API ag_tensor *ag_sinusoidal_positions(int64_t L, int64_t D, ag_dtype dtype);

/* ---- losses (nn/layers/loss.c, loss_pointwise.c) ---------------------------------------------- */
/* PyTorch's numbering of reductions; BATCHMEAN (F.kl_div's 'batchmean', accepted by ag_kl_div
 * only) is the sum divided by input.size(0). */
typedef enum {
    AG_REDUCTION_NONE = 0,
    AG_REDUCTION_MEAN = 1,
    AG_REDUCTION_SUM = 2,
    AG_REDUCTION_BATCHMEAN = 3
} ag_reduction;

/* The options of every loss below, by PyTorch's keyword names. A loss reads the fields that
 * concern it; weight or pos_weight given to a loss that has no such option is reported as
 * misuse. A NULL config means ag_loss_defaults(). Start from ag_loss_defaults() and set fields
 * by name: a zeroed struct has ignore_index 0 (class 0 ignored) and beta 0. */
typedef struct {
    ag_reduction reduction; /* 'mean' */
    ag_tensor *weight;      /* NULL. cross_entropy, nll_loss: (C) class weights; binary_cross_entropy
                               (_with_logits): broadcast to the input's shape. Gets no gradient. */
    ag_tensor *pos_weight;  /* NULL. binary_cross_entropy_with_logits: weight of the positive term,
                               broadcast to the input's shape ((C) runs along the last dim). No gradient. */
    int64_t ignore_index;   /* -100. cross_entropy, nll_loss */
    double label_smoothing; /* 0. cross_entropy, in [0, 1] */
    double beta;            /* 1.0. smooth_l1_loss, >= 0 (0 is l1_loss, as PyTorch) */
    bool log_target;        /* false. kl_div: target given as log-probabilities */
} ag_loss_config;

/* PyTorch's defaults: reduction 'mean', no weights, ignore_index -100, label_smoothing 0,
 * beta 1.0, log_target false. */
AG_API ag_loss_config ag_loss_defaults(void);

/* F.cross_entropy with class-index targets, log-softmax fused inside.
 * logits: (N, C) or (N, C, d1, ...) or (C)  targets: i64/i32 (N) or (N, d1, ...) or ()
 * -> NONE: targets' shape; MEAN/SUM: a 0-d tensor. Reads reduction, weight, ignore_index,
 * label_smoothing. Per target t, with class weights w (all 1 without weight):
 *   (1-ε)·w_t·(-log p_t) + (ε/C)·Σ_c w_c·(-log p_c),   ε = label_smoothing in [0, 1];
 * targets equal to ignore_index contribute 0, and MEAN divides by Σ w_t over the non-ignored
 * targets (their count without weight), for both terms, as torch 1.13 does.
 * Deviation: when every target is ignored, MEAN returns 0 with a zero gradient (PyTorch
 * returns NaN). A target outside [0, C) that is not ignore_index is reported as misuse. */
AG_API ag_tensor *ag_cross_entropy(ag_tensor *logits, ag_tensor *targets, const ag_loss_config *cfg);
/* F.nll_loss: -w_t·log_probs[target] per target, same layouts, options, ignore_index and MEAN
 * rule (and the same all-ignored deviation) as ag_cross_entropy; label_smoothing is not read. */
AG_API ag_tensor *ag_nll_loss(ag_tensor *log_probs, ag_tensor *targets, const ag_loss_config *cfg);
/* F.mse_loss: (a - b)². a, b: same shape (no broadcasting, unlike PyTorch which only warns)
 * -> NONE: that shape; MEAN/SUM: a 0-d tensor. Reads reduction. */
AG_API ag_tensor *ag_mse_loss(ag_tensor *a, ag_tensor *b, const ag_loss_config *cfg);

/* Pointwise losses (loss_pointwise.c). input and target: the same shape and float dtype
 * (PyTorch broadcasts them with a warning; attograd reports it) -> NONE: that shape;
 * MEAN/SUM: a 0-d tensor (MEAN over every element). Both input and target get gradients, as
 * in PyTorch. Sums are taken in double in fixed blocks: results do not depend on the thread
 * count. */
/* F.binary_cross_entropy: -w·(y·max(log x, -100) + (1-y)·max(log(1-x), -100)), input x
 * probabilities in [0, 1] (a value outside is reported, as PyTorch raises). The gradient is
 * PyTorch's: w·(x - y) / max(x·(1-x), 1e-12) for the input, w·(log(1-x) - log x) (unclamped:
 * ±inf at 0 and 1) for the target. Reads reduction, weight. */
AG_API ag_tensor *ag_binary_cross_entropy(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg);
/* F.binary_cross_entropy_with_logits: w·((1-y)·x + (1 + (p-1)·y)·softplus(-x)), with
 * softplus(-x) = max(-x, 0) + log1p(exp(-|x|)) (finite for any x), p = pos_weight (1 without).
 * Reads reduction, weight, pos_weight. */
AG_API ag_tensor *ag_binary_cross_entropy_with_logits(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg);
/* F.l1_loss: |x - y|; gradient sign(x - y), 0 where x == y. Reads reduction. */
AG_API ag_tensor *ag_l1_loss(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg);
/* F.smooth_l1_loss: d = x - y; 0.5·d²/beta where |d| < beta, else |d| - 0.5·beta. beta == 0
 * is ag_l1_loss (as PyTorch dispatches it); beta < 0 is reported. Reads reduction, beta. */
AG_API ag_tensor *ag_smooth_l1_loss(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg);
/* F.kl_div(input, target): input holds log-probabilities x; pointwise y·(log y - x) (0 where
 * y == 0, xlogy's rule), or with log_target exp(y)·(y - x). Reduction MEAN is over every
 * element (what torch 1.13 computes for 'mean', with its warning); BATCHMEAN divides the sum
 * by input.size(0), the KL divergence per sample. Reads reduction, log_target.
 * Deviation: the target's gradient where y == 0 (without log_target) is 0; PyTorch's is NaN. */
AG_API ag_tensor *ag_kl_div(ag_tensor *input, ag_tensor *target, const ag_loss_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
