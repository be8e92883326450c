/* Internals shared by nn/ files (not installed): the fused attention over packed heads that
 * ag_mha_forward is built on. */
#ifndef AG_NN_INTERNAL_H
#define AG_NN_INTERNAL_H
#include "attention.h"

/* Attention over heads laid side by side in the last dim, as nn.MultiheadAttention's
 * projections produce them: q = columns [qo, qo+E) of tq (N,L,*), k and v the same of tk and
 * tv (N,S,*); tq, tk and tv may be one packed tensor (self-attention's (N,L,3E)). Head h is
 * columns h·E/H .. (h+1)·E/H - 1 of each. Returns (N,L,E) contiguous with the heads merged:
 * ag_attention of the split heads, transposed back and reshaped, without those copies; the
 * gradients go straight into tq, tk and tv's gradient buffers. mask (broadcastable to
 * (N,H,L,S)), causal, dropout and weights_out ((N,H,L,S)) as ag_attention. */
ag_tensor *ag__attention_heads(ag_tensor *tq, int64_t qo, ag_tensor *tk, int64_t ko, ag_tensor *tv, int64_t vo,
                               int64_t E, int64_t H, ag_tensor *mask, bool causal, double dropout_p, ag_rng *rng,
                               bool training, ag_tensor **weights_out);
#endif
