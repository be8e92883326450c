/* Internals shared by the Transformer's files (not installed): configuration checks, parameter
 * naming, the layers' blocks and residual connections, and the packed rows of skip_padding. */
#ifndef AG_NN_TRANSFORMER_INTERNAL_H
#define AG_NN_TRANSFORMER_INTERNAL_H
#include "../nn_internal.h"
#include "transformer.h"

#define TRY(e) do { if (!(e)) return NULL; } while (0)

/* A sequence as the layers see it: always batched; unbatched (L,E) input gets a batch dim of 1
 * (at 0 or 1 by batch_first) and its key padding masks (L) become (1,L). */
typedef struct {
    ag_tensor *x;
    int64_t n, len;
} seq;

bool ag__tf_check_config(const char *op, const char *prefix, const ag_transformer_config *c);
/* the modules of a layer, named "<prefix>.<name>" */
ag_mha_module ag__tf_attn_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c,
                         ag_rng *rng);
ag_linear_module ag__tf_linear_new(ag_params *p, const char *prefix, const char *name, int64_t in, int64_t out,
                              ag_rng *rng);
ag_layer_norm_module ag__tf_norm_new(ag_params *p, const char *prefix, const char *name, const ag_transformer_config *c);
/* t as a batched sequence (see seq), else reported through op naming it what */
bool ag__tf_check_seq(const char *op, const char *what, ag_tensor *t, const ag_transformer_config *c, seq *s);
/* attn_mask (L,S) or (N*H,L,S); key padding mask (N,S), or (S) when the input was unbatched
 * (then *kpm is replaced by its (1,S) view) */
bool ag__tf_check_masks(const char *op, const char *mask_name, ag_tensor *am, const char *kpm_name, ag_tensor **kpm,
                        bool unbatched, int64_t N, int64_t H, int64_t L, int64_t S);
/* dropout(linear2(dropout(activation(linear1(x))))): torch's _ff_block; x is the packed rows r
 * with skip_padding, else r is NULL */
ag_tensor *ag__tf_ff_block(const ag_linear_module *l1, const ag_linear_module *l2, const ag_transformer_config *c, ag_tensor *x,
                           const ag__rowset *r, const ag_transformer_args *a);
/* A block of a layer: an attention block (attn set) or the feed-forward block (l1, l2). */
typedef struct {
    const ag_mha_module *attn;
    ag_tensor *kv;               /* keys and values; NULL: self-attention on the block's input */
    ag_tensor *mask, *kpm;
    bool causal;
    ag_tensor **weights;         /* the attention weights wanted, or NULL */
    const ag__rowset *qr, *kr;   /* skip_padding's rows (the input's, the keys'), or NULL */
    const ag_linear_module *l1, *l2;
} ag__tf_block;
/* x through block b with its residual connection and norm (post-norm or norm_first) */
ag_tensor *ag__tf_residual(ag_tensor *x, const ag_layer_norm_module *norm, const ag__tf_block *b,
                           const ag_transformer_config *c, const ag_transformer_args *a);
/* y, or (inference without weights handed out) y alone kept of what was allocated since mark */
ag_tensor *ag__tf_layer_result(ag_arena_mark mark, ag_tensor *y, bool keep_all);
/* the input's rows that are run (all of it without skip_padding), and the output put back in
 * the input's layout */
ag_tensor *ag__tf_rows_in(const seq *s, const ag__rowset *r);
ag_tensor *ag__tf_rows_out(ag_tensor *x, const seq *s, const ag__rowset *r, bool unbatched,
                           const ag_transformer_config *c);
/* the layers "<prefix>.layers.N" of a stack, made by new_layer, then given layer 0's values */
bool ag__tf_stack_new(const char *op, ag_params *p, const char *prefix, const ag_transformer_config *cfg,
                      int num_layers, ag_rng *rng,
                      bool (*new_layer)(void *layers, int l, ag_params *p, const char *name,
                                        const ag_transformer_config *cfg, ag_rng *rng),
                      void *layers);
#endif
