/* What GRU, LSTM and RNN share (nn/recurrent/recurrent.c): a kind names one cell's gate
 * arithmetic (its step kernels and sizes); the fused cell op, the fused sequence op, the
 * parameters and the layer stack (layers, directions, lengths, dropout, h_n) serve every kind.
 *
 * A layer direction is ag_linear over all time steps (the input projection, one GEMM) followed
 * by one recurrence node whose output is (L+S, N, H) for S states: rows 0..L-1 the per-step
 * outputs, then the final h (and c): output, h_n and c_n are views of one node. Its backward
 * runs backpropagation through time with one GEMM per step for dh and one GEMM over all steps
 * for dW_hh. Every output element is computed by one thread with a fixed order, so results do
 * not depend on the thread count. */
#ifndef AG_RECURRENT_INTERNAL_H
#define AG_RECURRENT_INTERNAL_H
#include "../../tensor/op.h"
#include "../layers/layers.h"
#include "recurrent.h"

/* One time step for N rows. gi: rows gis apart, (G·H) = W_i· x (+ b_ih if bih); gh: N×G·H =
 * W_h· h without b_hh; bhh (G·H) or NULL; h, c: N×H (c NULL for a one-state kind) -> hout,
 * cout (may alias h, c); y (optional, N×H) gets hout, 0 where inactive. Inactive rows keep h
 * and c. saved (N × saved·H, optional): what step_bwd reads. */
typedef void (*ag__rnn_step_fwd)(int64_t N, int64_t H, const void *gi, int64_t gis, const void *bih, const void *gh,
                                 const void *bhh, const void *h, const void *c, void *hout, void *cout, void *y,
                                 void *saved, const uint8_t *active);
/* Its backward. dh, dc (N×H, dc NULL for one state) in: the gradients of h and c after the
 * step; out: the part of the gradients of h and c before it that does not pass through W_hh.
 * g (optional): dy of this step, added to dh. hp: h before the step. dgi += (rows dgis apart,
 * optional); dgh = (N×G·H) the gradient of W_h· h + b_hh. Inactive rows: dgh 0, dh, dc kept. */
typedef void (*ag__rnn_step_bwd)(int64_t N, int64_t H, void *dh, void *dc, const void *g, const void *saved,
                                 const void *hp, void *dgi, int64_t dgis, void *dgh, const uint8_t *active);

typedef struct {
    ag_op cell_op, seq_op;  /* named "ag_gru_cell", "ag_gru_sequence"...; backward from below */
    const char *module;     /* "GRU", "LSTM", "RNN" */
    int gates;              /* G: weight_ih has G·H rows */
    int states;             /* 1 (h) or 2 (h, c) */
    int saved;              /* saved·H elements per row kept for backward */
    ag__rnn_step_fwd fwd[2]; /* f32, f64 */
    ag__rnn_step_bwd bwd[2];
} ag__rnn_kind;

/* the backwards of every kind's cell_op and seq_op */
void ag__rnn_cell_backward(ag_node *n);
void ag__rnn_seq_backward(ag_node *n);
/* the tensors the two read: cell x, h, w_ih, w_hh; sequence w_hh (the rest are its own) */
#define AG__RNN_CELL_SAVES (AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1) | AG_SAVES_INPUT(3) | AG_SAVES_INPUT(4))
#define AG__RNN_SEQ_SAVES AG_SAVES_INPUT(3)

/* One step as one op (the public cell functions): x (N,in) or (in); h, c like (N,H) or NULL
 * for zeros (c only for two states); w_ih (G·H,in), w_hh (G·H,H), b_ih, b_hh (G·H) or NULL.
 * Checked and reported through op. -> (S,N,H) or (S,H): h', then c'. */
ag_tensor *ag__rnn_cell(const ag__rnn_kind *k, const char *op, ag_tensor *x, ag_tensor *h, ag_tensor *c,
                        ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih, ag_tensor *b_hh);

/* "weight_ih<suffix>", "weight_hh<suffix>" and with bias "bias_ih<suffix>", "bias_hh<suffix>"
 * under prefix (G·H rows), all U(-1/√H, 1/√H) as RNNBase.reset_parameters. Misuse (no set,
 * sizes <= 0) is reported through op; then, or when the set refused one, the weights are NULL. */
ag_recurrent_cell_module ag__rnn_cell_new(ag_params *p, const char *op, const char *prefix, const char *suffix, int gates,
                                     int64_t in, int64_t H, bool bias, ag_rng *rng);

/* layer[layer][direction], the weights of layer k > 0 reading D·H; the config checked first
 * (reported through op). False after reporting, with layer[0][0] empty. */
bool ag__rnn_stack_new(ag_params *p, const char *op, const char *prefix, const ag_recurrent_config *s, int gates,
                       ag_rng *rng, ag_recurrent_cell_module layer[AG_RECURRENT_MAX_LAYERS][2]);

/* nn.GRU / nn.LSTM / nn.RNN forward over a stack made by the function named new_op (the
 * contract in gru.h's ag_gru_forward); c0 and c_n only for two states. *h_n, *c_n (may be NULL)
 * are set NULL first. NULL after reporting through op. */
ag_tensor *ag__rnn_forward(const ag__rnn_kind *k, const char *op, const char *new_op, const ag_recurrent_config *s,
                           const ag_recurrent_cell_module (*layer)[2], ag_tensor *x, ag_tensor *h0, ag_tensor *c0,
                           ag_tensor *lengths, bool training, ag_rng *rng, ag_tensor **h_n, ag_tensor **c_n);
#endif
