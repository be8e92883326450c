/* Masked softmax and fused scaled dot-product attention with PyTorch 1.13's mask semantics
 * (nn.MultiheadAttention / F.multi_head_attention_forward):
 * - a bool mask is True where a position is masked out (may not be attended);
 * - a float mask (same dtype as the scores) is added to the scores; -inf masks a position.
 * A row whose every position is masked (True, or a score of -inf) gives zeros and a zero gradient, where PyTorch's
 * softmax gives NaN: a fully padded query then contributes nothing instead of poisoning the
 * loss. Both ops are single fused nodes (one forward kernel, one backward beside it). */
#ifndef AG_NN_ATTENTION_H
#define AG_NN_ATTENTION_H
#include "../../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* softmax of scores (any shape, f32/f64) along dim with mask (NULL, bool or float, broadcastable
 * to scores) applied first; same shape as scores. A float mask receives gradients. */
AG_API ag_tensor *ag_masked_softmax(ag_tensor *scores, ag_tensor *mask, int dim);

/* softmax(q kᵀ/√Dh + mask) v.  q (B,H,L,Dh), k (B,H,S,Dh), v (B,H,S,Dv), mask NULL / bool / float
 * broadcastable to (B,H,L,S); returns (B,H,L,Dv). causal masks key j > query i (top-left
 * aligned when L != S, as torch's is_causal). Dropout with probability dropout_p is applied to
 * the probabilities when training (rng NULL: the global generator). weights_out, if not NULL,
 * receives the (B,H,L,S) attention weights as F.multi_head_attention_forward returns them with
 * average_attn_weights=False: after dropout; outside the graph (no gradient). Inputs may be any
 * strided views: heads split by view + transpose or a transposed k go to BLAS as they are; only
 * an input with no unit stride in its last two dims is copied. Each (b,h) is computed by one
 * thread, so results do not depend on the thread count. */
AG_API ag_tensor *ag_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, bool causal, double dropout_p,
                               ag_rng *rng, bool training, ag_tensor **weights_out);

/* Merge F.multi_head_attention_forward's masks into one for ag_attention: attn_mask (L,S) or
 * (B*H,L,S) and key_padding_mask (B,S), either NULL, bool or float. Returns a mask broadcastable
 * to (B,H,L,S): (1,1,L,S), (B,H,L,S), (B,1,1,S) or (B,1|H,L,S) when both are given; NULL (and
 * no error) when both are NULL. Two bool masks are OR-ed (bool result); otherwise bool masks
 * become 0/-inf and the masks are added (torch 1.13 masked_fills -inf for a bool key padding
 * mask on a float attn_mask, which is the same; it has no working rule for a float key padding
 * mask next to an attn_mask, torch 2.x adds, as here). */
AG_API ag_tensor *ag_attention_mask(ag_tensor *attn_mask, ag_tensor *key_padding_mask, int64_t B, int64_t H);

/* (L,L) float mask, 0 on and below the diagonal and -inf above: torch's
 * nn.Transformer.generate_square_subsequent_mask(L). */
AG_API ag_tensor *ag_square_subsequent_mask(int64_t L, ag_dtype dt);
/* (L,L) bool mask, True above the diagonal (the same positions masked). */
AG_API ag_tensor *ag_causal_bool_mask(int64_t L);

#ifdef __cplusplus
}
#endif
#endif
