/* The example from the README (kept here so the build proves it compiles and runs):
 * one gradient step of y = mean((x W^T - t)^2), and a finite-difference check of it. */
#include <stdio.h>

#include "attograd.h"

static ag_tensor *loss_fn(int n, ag_tensor **in, void *ctx) {
    (void)n;
    ag_tensor **data = ctx; /* x (4,3), t (4,2) */
    ag_tensor *d = ag_sub(ag_matmul(data[0], ag_transpose(in[0], 0, 1)), data[1]);
    return ag_mean(ag_mul(d, d), 0, NULL, false);
}

int main(void) {
    ag_rng rng = ag_rng_new(0);
    ag_tensor *x = ag_randn(&rng, AG_F64, AG_SHAPE(4, 3));
    ag_tensor *t = ag_randn(&rng, AG_F64, AG_SHAPE(4, 2));
    ag_tensor *w = ag_randn(&rng, AG_F64, AG_SHAPE(2, 3));
    ag_requires_grad_(w, true);

    ag_tensor *data[2] = {x, t};
    ag_tensor *loss = loss_fn(1, &w, data);
    ag_backward(loss, NULL);
    printf("loss %.6f\n", ag_item(loss));
    ag_print(w->grad, "dloss/dW");

    ag_gradcheck_result r = ag_gradcheck(loss_fn, data, 1, &w, NULL);
    printf("gradcheck: %s\n", r.ok ? "ok" : r.message);
    return r.ok ? 0 : 1;
}
