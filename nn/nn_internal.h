/* Internals shared by nn/ files (not installed): parameter names, the fused attention over
 * packed heads that ag_mha_forward is built on, and the packed rows the Transformer's
 * skip_padding runs on. */
#ifndef AG_NN_INTERNAL_H
#define AG_NN_INTERNAL_H
#include <stdio.h>

#include "attention/attention.h"
#include "attention/mha.h"

/* A module's parameter name "<prefix>.<leaf>" ("encoder.layers.0" + "linear1.weight"), or leaf
 * alone for a NULL or empty prefix, into buf of size bytes; a name that does not fit is cut and
 * reported through op. Returns buf. */
static inline const char *ag__param_name(char *buf, size_t size, const char *op, const char *prefix,
                                         const char *leaf) {
    int n = prefix && *prefix ? snprintf(buf, size, "%s.%s", prefix, leaf) : snprintf(buf, size, "%s", leaf);
    if (n >= 0 && (size_t)n >= size)
        ag_error(op, "parameter name '%s...' longer than %zu characters", buf, size - 1);
    return buf;
}

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

/* The positions of a padded (N, L) batch that are not padding, n of them: packed row i is
 * row bf[i] of the batch flattened in (N, L) order, and row src[i] of the input's own layout
 * ((N, L) when batch_first, else (L, N); then src is bf). Arena memory. */
typedef struct {
    const int64_t *bf, *src;
    int64_t n, N, L;
} ag__rowset;
/* The rowset of key padding mask kpm (N, L): bool true or float -inf is padding. False (r
 * untouched) when no position, or every position, is padding, or when the list cannot be had
 * (out of memory: the caller computes every row, which gives the same result). */
bool ag__live_rows(ag_tensor *kpm, bool batch_first, ag__rowset *r);
/* Is every position that key padding mask b pads also padding in a (same shape)? True for b
 * NULL. */
bool ag__padding_covers(ag_tensor *a, ag_tensor *b);
/* Rows rows[0..n) of x seen as (R, D), D its last dim -> (n, D). Backward scatters them back. */
ag_tensor *ag__take_rows(ag_tensor *x, const int64_t *rows, int64_t n);
/* x (n, D) -> shape (leading dims R, last dim D): zeros, but row rows[i] is x's row i (rows
 * distinct). Backward takes those rows of the gradient. */
ag_tensor *ag__put_rows(ag_tensor *x, const int64_t *rows, int ndim, const int64_t *shape);

/* Where a dropout mask's elements sit in the mask of the whole batch (ag_rng_share_batch): the
 * batch's mask is drawn sample-major, each sample's elements in their own order, so a sample's
 * mask depends neither on the layout of the batch nor on the process that runs it. Dense: the
 * elements are (pre, n, inner) with the n samples along the middle (pre = 1: batch first).
 * Packed rows (pos set): the live rows of a padded batch of n samples of len rows of D
 * elements, row i being row pos[i] = b·len + t of it (padding is skipped, not drawn). first
 * and total place this batch in the whole one (ag__place_bind: 0 and n when not shared). */
typedef struct {
    int64_t pre, n, inner;
    const int64_t *pos;
    int64_t len, D;
    int64_t first, total;
} ag__mask_place;
/* a tensor of this shape with its samples along dim (a 0-d one is one sample) */
ag__mask_place ag__place_dense(int ndim, const int64_t *shape, int dim);
/* packed rows of D elements, row i being row pos[i] of a padded batch of n samples of len rows */
ag__mask_place ag__place_rows(const int64_t *pos, int64_t n, int64_t len, int64_t D);
/* m's place in r's shared batch; false (reported through op, naming x) when r is shared for
 * another number of samples than m holds */
bool ag__place_bind(const char *op, ag__mask_place *m, const ag_rng *r, const ag_tensor *x);
/* elements of the whole batch's mask: a draw moves the counter past them */
int64_t ag__place_numel(const ag__mask_place *m);
/* For elements e0 .. e0+cnt-1 of the tensor: keep[e - e0] = (x < t) != at_least, x being the
 * element's word of the whole batch's mask at counter base (ag__rng_keep), and bit e of bits too
 * when bits is not NULL (the bits past the range left as they were). */
void ag__place_keep(const ag__mask_place *m, uint64_t seed, uint64_t base, int64_t e0, int64_t cnt, uint64_t t,
                    bool at_least, uint8_t *keep, uint8_t *bits);
/* ag_dropout, ag_dropout_ (inplace) or ag_relu_dropout_ (relu: in place too) with the mask
 * placed by m (dropout.c) */
ag_tensor *ag__dropout_placed(ag_tensor *x, double p, bool training, ag_rng *rng, bool inplace, bool relu,
                              const ag__mask_place *m);
/* ag_feed_forward with its hidden activation's dropout mask placed by hidden (feed_forward.c) */
ag_tensor *ag__feed_forward_placed(ag_tensor *x, ag_tensor *w1, ag_tensor *b1, ag_tensor *w2, ag_tensor *b2,
                                   double p, bool training, ag_rng *rng, const ag__mask_place *hidden);

/* rows[0..n) within [0, R), else reported through op */
bool ag__check_rows(const char *op, const int64_t *rows, int64_t n, int64_t R);
/* zero the rows of y (R rows of row_bytes) that are not among rows[0..n); false when its
 * scratch cannot be had (reported through ag__put_rows) */
bool ag__zero_other_rows(char *y, const int64_t *rows, int64_t n, int64_t R, size_t row_bytes);
/* dst row rows[i] = src row i (scatter), or dst row i = src row rows[i] (!scatter); add: +=, of
 * D elements of dt */
void ag__rows_copy(char *dst, const char *src, const int64_t *rows, int64_t n, size_t row_bytes, bool scatter);
void ag__rows_add(ag_dtype dt, char *dst, const char *src, const int64_t *rows, int64_t n, int64_t D, bool scatter);
/* ag_linear computed for m rows only, the packed sides held only in arena scratch: input row
 * i is row in_rows[i] of x seen as (R, in) (x's own memory order), or, in_rows NULL, row i of
 * x (m rows); its result goes to row out_rows[i] of a new (ndim, shape) tensor that is 0
 * elsewhere, or, out_rows NULL, to row i of an (m, out) result. Both sets of rows distinct. */
ag_tensor *ag__linear_rows(ag_tensor *x, ag_tensor *w, ag_tensor *b, int64_t m, const int64_t *in_rows,
                           const int64_t *out_rows, int ndim, const int64_t *shape);

/* ag_mha_forward on packed rows: q (qr->n, E) the positions qr of a (N, L) batch, kv (kr->n, E)
 * those kr of (N, S); q == kv (with qr == kr) is self-attention. The projections run on the
 * packed rows only; the attention sees them placed in (N, L, ·) with zeros for padding, which
 * the key padding mask in a must mask. Returns (qr->n, E); no weights. For the modules the
 * Transformer layers make: the packed in_proj_weight, no bias_k/bias_v, no add_zero_attn. */
ag_tensor *ag__mha_forward_rows(const ag_mha_module *m, ag_tensor *q, const ag__rowset *qr, ag_tensor *kv,
                                const ag__rowset *kr, const ag_mha_args *a);

/* v, or 1 when v < 1: a size that never allocates or divides by zero */
static inline int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* ts[i] (may be NULL) of ref's dtype, else reported through op naming names[i]
 * (recurrent/recurrent.c; the recurrent layers and the seq2seq attention check with it) */
bool ag__same_dtype(const char *op, const ag_tensor *ref, int n, ag_tensor *const *ts, const char *const *names);

/* NULL, bool, or a float mask of the scores' dtype, broadcastable to ndim/shape (the scores'
 * shape, whose name the message gives as what): returns the mask kind (tensor/op.h's
 * ag__softmax_mask_kind), -1 after reporting. For the masked softmax and the attention. */
int ag__check_softmax_mask(const char *op, const ag_tensor *mask, ag_dtype dt, int ndim, const int64_t *shape,
                           const char *what);
#endif
