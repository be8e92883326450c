/* Multi-head attention, one step at a time, on three words: "cat catches mouse".
 *
 *   mha_walkthrough [--seed N] [--mask] [--save-weights FILE.h5]
 *
 * Each word is a 4-d vector; two heads of size 2; float64 throughout. By default the
 * projections are the identity (so every number can be followed by hand); --seed N draws them
 * as PyTorch initialises nn.MultiheadAttention (xavier-uniform in_proj, zero biases, out_proj
 * as nn.Linear). The forward steps are those of nn.MultiheadAttention's forward: project, split
 * Q, K and V into heads (view + transpose, no copy), scaled scores per head, softmax, weighted
 * sum, merge heads, output projection; the result is then checked against ag_mha_forward.
 * The backward section takes loss = ½ Σ attn_output² and derives its gradient with respect to
 * Wo, Wq, Wk and Wv step by step (the chain rule through every forward step, by hand), then
 * checks it against autograd (ag_backward through ag_mha_forward) and central finite
 * differences. The first pass has no mask; a second pass (or, with --mask, the only one) hides
 * "mouse" with a key padding mask.
 *
 * --save-weights FILE.h5 writes the module as an attograd checkpoint under PyTorch's
 * state_dict names (in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias), so that
 * examples/mha_walkthrough_torch.py loads it into torch.nn.MultiheadAttention and reproduces
 * every printed number. Numbers are printed to 10 decimals, weights to 17 significant digits
 * (exact doubles). Exits 1 if a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attograd.h"

enum { L = 3, E = 4, H = 2, DH = E / H };
static const char *words[L] = {"cat", "catches", "mouse"};
static int checks_failed, checks_run;

static void heading(const char *s) { printf("\n== %s\n", s); }

/* t (f64, any shape whose last-but-one dim is the 3 words or which is (4,4)) as rows:
 * "NAME (shape):" then one line per row, labelled by word, blocks per head for 4-d tensors */
static void show(const char *name, ag_tensor *t, bool exact) {
    char buf[128];
    ag_tensor *c = ag_contiguous(t);
    const double *d = (const double *)c->data + c->offset;
    int64_t cols = c->shape[c->ndim - 1], rows = ag_numel(c) / cols;
    int64_t per_block = c->ndim >= 2 ? c->shape[c->ndim - 2] : 1;
    printf("%s %s:\n", name, ag_shape_str(t, buf));
    for (int64_t r = 0; r < rows; r++) {
        if (c->ndim == 4 && r % per_block == 0) printf("   [head %lld]\n", (long long)(r / per_block) % c->shape[1]);
        printf("   %-8s", per_block == L && c->ndim >= 2 ? words[r % L] : "");
        for (int64_t j = 0; j < cols; j++) printf(exact ? " % .17g" : " % .10f", d[r * cols + j]);
        printf("\n");
    }
}

static double max_abs_diff(ag_tensor *a, ag_tensor *b) {
    ag_tensor *d = ag_abs(ag_sub(a, b));
    return ag_item(ag_max(ag_reshape(d, AG_SHAPE(-1)), 0, false));
}

static void check(const char *what, double diff, double tol) {
    bool ok = diff <= tol;
    checks_run++;
    checks_failed += !ok;
    printf("   check: %s: max |difference| %.3g (tolerance %.0e): %s\n", what, diff, tol, ok ? "ok" : "FAILED");
}

/* (1,L,E) → (1,H,L,DH): view the last dim as (H,DH), then swap the L and H dims. */
static ag_tensor *split_heads(ag_tensor *t) { return ag_transpose(ag_view(t, AG_SHAPE(1, L, H, DH)), 1, 2); }
/* (1,H,L,DH) → (1,L,E): the inverse, a copy (transpose then contiguous) */
static ag_tensor *merge_heads(ag_tensor *t) { return ag_view(ag_contiguous(ag_transpose(t, 1, 2)), AG_SHAPE(1, L, E)); }
/* (1,L,E) as the (L,E) matrix of its rows */
static ag_tensor *rows(ag_tensor *t) { return ag_reshape(t, AG_SHAPE(L, E)); }

typedef struct {
    ag_tensor *q, *k, *v, *qh, *kh, *vh, *scores, *p, *oh, *merged, *out;
} trace;

/* the forward by hand; mask (1,S) bool or NULL; quiet: no printing (finite differences) */
static double forward(ag_tensor *x, ag_tensor *const w[4], ag_tensor *mask, trace *t, bool quiet) {
    if (!quiet) heading("1. project: Q = x Wq^T, K = x Wk^T, V = x Wv^T   (1,3,4) @ (4,4) -> (1,3,4)");
    t->q = ag_matmul(x, ag_transpose(w[0], 0, 1));
    t->k = ag_matmul(x, ag_transpose(w[1], 0, 1));
    t->v = ag_matmul(x, ag_transpose(w[2], 0, 1));
    if (!quiet) {
        show("Q", t->q, false);
        show("K", t->k, false);
        show("V", t->v, false);
        heading("2. split Q, K and V into heads: view(1,3,2,2) then transpose(1,2) -> (1,2,3,2), no copy");
    }
    t->qh = split_heads(t->q);
    t->kh = split_heads(t->k);
    t->vh = split_heads(t->v);
    if (!quiet) {
        show("Q heads", t->qh, false);
        show("K heads", t->kh, false);
        show("V heads", t->vh, false);
        printf("   each shares its matrix's storage: %s (Q heads strides %lld,%lld,%lld,%lld)\n",
               t->qh->data == t->q->data && t->kh->data == t->k->data && t->vh->data == t->v->data ? "yes" : "no",
               (long long)t->qh->stride[0], (long long)t->qh->stride[1], (long long)t->qh->stride[2],
               (long long)t->qh->stride[3]);
        heading("3. scores per head: Q K^T / sqrt(2)   (1,2,3,2) @ (1,2,2,3) -> (1,2,3,3)");
    }
    t->scores = ag_div_scalar(ag_matmul(t->qh, ag_transpose(t->kh, 2, 3)), sqrt((double)DH));
    if (mask) {
        /* (1,S) bool, True = padding: broadcast to (1,1,1,S) and hide those keys from every query */
        t->scores = ag_masked_fill(t->scores, ag_view(mask, AG_SHAPE(1, 1, 1, L)), -INFINITY);
        if (!quiet)
            printf("   key padding mask (True = hidden): [%s, %s, %s] -> scores set to -inf there\n",
                   ag_get(mask, (int64_t[]){0, 0}) ? "True" : "False", ag_get(mask, (int64_t[]){0, 1}) ? "True" : "False",
                   ag_get(mask, (int64_t[]){0, 2}) ? "True" : "False");
    }
    if (!quiet) {
        show("scores", t->scores, false);
        heading("4. softmax over the keys: each row sums to 1");
    }
    t->p = ag_softmax(t->scores, -1);
    if (!quiet) {
        show("attention weights", t->p, false);
        heading("5. head outputs: weights @ V   (1,2,3,3) @ (1,2,3,2) -> (1,2,3,2)");
    }
    t->oh = ag_matmul(t->p, t->vh);
    if (!quiet) {
        show("head outputs", t->oh, false);
        heading("6. merge heads: transpose(1,2), contiguous, view(1,3,4)");
    }
    t->merged = merge_heads(t->oh);
    if (!quiet) {
        show("concat", t->merged, false);
        heading("7. output projection: concat Wo^T   (1,3,4) @ (4,4) -> (1,3,4)");
    }
    t->out = ag_matmul(t->merged, ag_transpose(w[3], 0, 1));
    double loss = 0.5 * ag_item(ag_sum(ag_mul(t->out, t->out), 0, NULL, false));
    if (!quiet) {
        show("attn_output", t->out, false);
        show("attn_weights (averaged over heads, as need_weights=True)", ag_mean(t->p, 1, (int[]){1}, false), false);
    }
    return loss;
}

/* nn.MultiheadAttention(4, 2, batch_first=True) holding w (zero biases) */
static ag_mha_module module(ag_params *p, ag_tensor *const w[4]) {
    ag_rng r = ag_rng_new(0);
    ag_mha_config cfg = ag_mha_defaults(E, H);
    cfg.batch_first = true;
    ag_mha_module m = ag_mha_new(p, "", &cfg, &r);
    bool prev = ag_set_grad_enabled(false);
    ag_copy_(m.in_proj_weight, ag_cat(3, w, 0));
    ag_copy_(m.out_proj.weight, w[3]);
    ag_fill_(m.in_proj_bias, 0);
    ag_fill_(m.out_proj.bias, 0);
    ag_set_grad_enabled(prev);
    return m;
}

/* The gradient of loss = ½ Σ out² with respect to Wo, Wq, Wk, Wv, step by step; dw[0..3] gets
 * dWq, dWk, dWv, dWo. */
static void backward_by_hand(ag_tensor *x, ag_tensor *const w[4], const trace *t, ag_tensor *dw[4]) {
    heading("8. backward: loss = 1/2 sum(attn_output^2), so dloss/dattn_output = attn_output");
    ag_tensor *dout = t->out;
    printf("   loss = %.10f\n", 0.5 * ag_item(ag_sum(ag_mul(t->out, t->out), 0, NULL, false)));
    heading("9. through the output projection out = concat Wo^T:  dWo = dout^T concat,  dconcat = dout Wo");
    dw[3] = ag_matmul(ag_transpose(rows(dout), 0, 1), rows(t->merged));
    ag_tensor *dmerged = ag_matmul(dout, w[3]);
    show("dWo", dw[3], false);
    show("dconcat", dmerged, false);
    heading("10. through the merge: split dconcat into heads as the forward split Q");
    ag_tensor *doh = split_heads(dmerged);
    show("dhead outputs", doh, false);
    heading("11. through head outputs = P V:  dP = dhead V^T,  dV heads = P^T dhead");
    ag_tensor *dp = ag_matmul(doh, ag_transpose(t->vh, 2, 3));
    ag_tensor *dvh = ag_matmul(ag_transpose(t->p, 2, 3), doh);
    show("dP", dp, false);
    show("dV heads", dvh, false);
    heading("12. through the softmax: dscores = P * (dP - rowsum(dP * P))   (masked keys: P = 0, so 0)");
    ag_tensor *ds = ag_mul(t->p, ag_sub(dp, ag_sum(ag_mul(dp, t->p), 1, (int[]){-1}, true)));
    show("dscores", ds, false);
    heading("13. through scores = Q K^T / sqrt(2):  dQ heads = dscores K / sqrt(2),  dK heads = dscores^T Q / sqrt(2)");
    ag_tensor *dqh = ag_div_scalar(ag_matmul(ds, t->kh), sqrt((double)DH));
    ag_tensor *dkh = ag_div_scalar(ag_matmul(ag_transpose(ds, 2, 3), t->qh), sqrt((double)DH));
    show("dQ heads", dqh, false);
    show("dK heads", dkh, false);
    heading("14. merge the heads back: dQ, dK, dV (1,3,4)");
    ag_tensor *dq = merge_heads(dqh), *dk = merge_heads(dkh), *dv = merge_heads(dvh);
    show("dQ", dq, false);
    show("dK", dk, false);
    show("dV", dv, false);
    heading("15. through the projections Q = x Wq^T (and K, V):  dWq = dQ^T x,  dWk = dK^T x,  dWv = dV^T x");
    ag_tensor *d[3] = {dq, dk, dv};
    const char *names[3] = {"dWq", "dWk", "dWv"};
    for (int i = 0; i < 3; i++) {
        dw[i] = ag_matmul(ag_transpose(rows(d[i]), 0, 1), rows(x));
        show(names[i], dw[i], false);
    }
}

/* d loss / d w[i][r][c] by central differences, every element */
static ag_tensor *finite_differences(ag_tensor *x, ag_tensor *const w[4], int i, ag_tensor *mask) {
    const double h = 1e-6;
    ag_tensor *g = ag_zeros(AG_F64, AG_SHAPE(E, E));
    for (int64_t r = 0; r < E; r++)
        for (int64_t c = 0; c < E; c++) {
            int64_t at[2] = {r, c};
            double w0 = ag_get(w[i], at);
            trace t;
            ag_set(w[i], at, w0 + h);
            double up = forward(x, w, mask, &t, true);
            ag_set(w[i], at, w0 - h);
            double down = forward(x, w, mask, &t, true);
            ag_set(w[i], at, w0);
            ag_set(g, at, (up - down) / (2 * h));
        }
    return g;
}

static void walkthrough(ag_tensor *x, ag_tensor *const w[4], ag_tensor *mask) {
    trace t;
    forward(x, w, mask, &t, false);

    /* the same module through the library: ag_mha_forward with these weights and zero biases */
    ag_params *p = ag_params_new(AG_F64);
    ag_mha_module m = module(p, w);
    ag_mha_args a = {.key_padding_mask = mask, .need_weights = true, .average_attn_weights = false};
    ag_tensor *wts = NULL;
    ag_tensor *y = ag_mha_forward(&m, x, x, x, &a, &wts);
    heading("check the hand computation against ag_mha_forward (nn.MultiheadAttention)");
    check("attn_output == ag_mha_forward's", max_abs_diff(t.out, y), 1e-12);
    check("attention weights == ag_mha_forward's per-head weights", max_abs_diff(t.p, wts), 1e-12);

    ag_tensor *dw[4];
    backward_by_hand(x, w, &t, dw);

    heading("16. check the hand gradients against autograd (ag_backward through ag_mha_forward)");
    ag_tensor *loss = ag_mul_scalar(ag_sum(ag_mul(y, y), 0, NULL, false), 0.5);
    ag_backward(loss, NULL);
    const char *names[4] = {"dWq", "dWk", "dWv", "dWo"};
    for (int i = 0; i < 4; i++) {
        ag_tensor *g = i < 3 ? ag_narrow(m.in_proj_weight->grad, 0, i * E, E) : m.out_proj.weight->grad;
        char what[64];
        snprintf(what, sizeof what, "%s == autograd's", names[i]);
        check(what, max_abs_diff(dw[i], g), 1e-12);
    }
    heading("17. check them against central finite differences (step 1e-6, every element)");
    ag_tensor *wc[4];
    for (int i = 0; i < 4; i++) wc[i] = ag_clone(w[i]); /* perturbed one element at a time */
    for (int i = 0; i < 4; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s == finite differences", names[i]);
        check(what, max_abs_diff(dw[i], finite_differences(x, wc, i, mask)), 1e-7);
    }
    ag_params_free(p);
}

static int save_weights(const char *path, ag_tensor *const w[4]) {
    ag_params *p = ag_params_new(AG_F64);
    module(p, w);
    char msg[512];
    ag_checkpoint_status st = ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg);
    ag_params_free(p);
    if (st != AG_CHECKPOINT_OK) {
        fprintf(stderr, "mha_walkthrough: %s\n", msg);
        return 1;
    }
    printf("weights saved to %s (in_proj_weight = [Wq; Wk; Wv], in_proj_bias 0, out_proj.weight = Wo, "
           "out_proj.bias 0)\n",
           path);
    return 0;
}

int main(int argc, char **argv) {
    long seed = -1;
    bool mask_only = false;
    const char *save = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            char *end;
            seed = strtol(argv[++i], &end, 10);
            if (*end || seed < 0) {
                fprintf(stderr, "mha_walkthrough: --seed takes a non-negative integer, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--mask") == 0) {
            mask_only = true;
        } else if (strcmp(argv[i], "--save-weights") == 0 && i + 1 < argc) {
            save = argv[++i];
        } else {
            fprintf(stderr, "usage: mha_walkthrough [--seed N] [--mask] [--save-weights FILE.h5]\n"
                            "  --seed N               random projections (PyTorch's init) instead of identity\n"
                            "  --mask                 only the pass with a key padding mask\n"
                            "  --save-weights FILE.h5 write the weights for examples/mha_walkthrough_torch.py\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    ag_tensor *x = ag_from_buffer(AG_F64, AG_SHAPE(1, L, E),
                                  (const double[]){0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2});
    ag_tensor *w[4];
    if (seed < 0) {
        for (int i = 0; i < 4; i++) {
            w[i] = ag_zeros(AG_F64, AG_SHAPE(E, E));
            for (int64_t d = 0; d < E; d++) ag_set(w[i], (int64_t[]){d, d}, 1.0);
        }
    } else {
        /* in_proj_weight (3E,E) is xavier-uniform as one matrix: bound sqrt(6/(E+3E)); out_proj
         * is nn.Linear's kaiming-uniform: bound 1/sqrt(E) */
        ag_rng r = ag_rng_new((uint64_t)seed);
        double bound = sqrt(6.0 / (E + 3 * E)), out_bound = 1.0 / sqrt((double)E);
        for (int i = 0; i < 3; i++) w[i] = ag_uniform(&r, AG_F64, AG_SHAPE(E, E), -bound, bound);
        w[3] = ag_uniform(&r, AG_F64, AG_SHAPE(E, E), -out_bound, out_bound);
    }
    printf("Multi-head attention on \"cat catches mouse\": 3 words, embed_dim 4, 2 heads of size 2, float64\n");
    show("x (batch 1, 3 words, 4 features)", x, false);
    if (seed < 0) {
        printf("Projections Wq, Wk, Wv, Wo: identity, biases 0 (run with --seed N for random ones)\n");
    } else {
        const char *names[4] = {"Wq", "Wk", "Wv", "Wo"};
        for (int i = 0; i < 4; i++) show(names[i], w[i], true);
        printf("Biases: 0 (as PyTorch initialises in_proj_bias and out_proj.bias)\n");
    }
    if (save && save_weights(save, w)) return 1;
    ag_tensor *mask = ag_from_buffer(AG_BOOL, AG_SHAPE(1, L), (const uint8_t[]){0, 0, 1});
    if (mask_only) {
        printf("\n\n######## with \"mouse\" treated as padding (key_padding_mask) ########\n");
    } else {
        walkthrough(x, w, NULL);
        printf("\n\n######## again, with \"mouse\" treated as padding (key_padding_mask) ########\n");
    }
    walkthrough(x, w, mask);
    /* ten checks per pass: a pass that skipped one fails too */
    int expected = mask_only ? 10 : 20;
    printf("\n%d checks, %d failed\n", checks_run, checks_failed);
    return checks_failed || checks_run != expected ? 1 : 0;
}
