/* Internals shared by the files of nn/layers/ (not installed): parameter names, BLAS operands
 * and the linear products and dropout that the feed-forward block is built from. Reductions in
 * these files accumulate in double with a fixed order per output element (SIMD reductions fix
 * theirs at compile time), so results do not depend on the OpenMP thread count. */
#ifndef AG_NN_LAYERS_INTERNAL_H
#define AG_NN_LAYERS_INTERNAL_H
#include <stdio.h>

#include "../../tensor/op.h"
#include "layers.h"
#include "../nn_internal.h"

/* columns handled by one thread in column reductions (a block's partial sums stay in registers/L1) */
#define COLS 64

/* An m×k operand for row-major BLAS (op.h): stored as is (trans false, rows ld apart) or
 * stored as its k×m transpose (trans true, rows of the transpose ld apart). */
typedef ag__blas_mat mat;

static inline mat transposed(mat a) {
    a.trans = !a.trans;
    return a;
}

/* t (..., k) read in place as an m×k matrix when its strides allow (contiguous, row-sliced, or a
 * 2-d transpose); p is NULL when it must be copied first. */
mat ag__as_matrix(const ag_tensor *t, int64_t m, int64_t k);
/* t as an m×k operand, copying it (without recording) only when BLAS cannot read it in place */
ag_tensor *ag__operand(ag_tensor *t, int64_t m, int64_t k, mat *out);
/* y (m×out, contiguous) = x wᵀ + b: x m×in, w out×in, b (out) strided or NULL */
void ag__linear_fwd(ag_dtype dt, mat xm, mat wm, const ag_tensor *b, int64_t m, int64_t in, int64_t out, char *y);
/* dx += dy w (dx = dy w when dx_assign) ; dw += dyᵀ x ; db += Σ_rows dy (each skipped when NULL;
 * all contiguous); dy m×out */
void ag__linear_bwd(ag_dtype dt, const char *dy, mat xm, mat wm, int64_t m, int64_t in, int64_t out, char *dx,
                    bool dx_assign, char *dw, char *db);
/* t's gradient buffer, NULL when t needs none */
char *ag__grad_ptr(ag_tensor *t);

/* p a probability, else reported through op */
bool ag__check_p(const char *op, const ag_tensor *x, double p);
/* y = dropout(x) (relu first when asked) for elements e0 .. e0+n-1 of a mask placed by m, drawn
 * from r at its counter (dropout.c) */
__attribute__((visibility("hidden"))) void ag__drop_apply(ag_dtype dt, const char *x, char *y, int64_t n, int64_t e0, double p, bool relu,
                    const ag__mask_place *m, const ag_rng *r, uint8_t *bits);
/* the generator's counter moves past the whole batch's mask (none when nothing is drawn) */
void ag__drop_advance(ag_rng *r, const ag__mask_place *m, double p);
/* dx += (kept)·g·scale, or dx = when not acc; kept from bits, or (bits NULL) where y ≠ 0 */
void ag__drop_bwd(ag_dtype dt, const uint8_t *bits, const char *y, const char *g, char *dx, int64_t n, double scale,
                  bool acc);

/* cfg, or *defaults filled with ag_loss_defaults() when cfg is NULL; NULL (reported through op)
 * when cfg sets weight or pos_weight and the loss has no such option (loss.c) */
const ag_loss_config *ag__loss_config(const char *op, const ag_loss_config *cfg, bool weight, bool pos_weight,
                                      ag_loss_config *defaults);
#endif
