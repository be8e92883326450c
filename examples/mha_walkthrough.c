/* Multi-head attention, one step at a time, on three words: "cat catches mouse".
 *
 *   mha_walkthrough [--seed N] [--mask]
 *
 * Each word is a 4-d vector; two heads of size 2. By default the projections are the identity
 * (so every number can be followed by hand); --seed N draws them as PyTorch initialises
 * nn.MultiheadAttention (xavier-uniform in_proj, zero biases). The steps are those of
 * nn.MultiheadAttention's forward: project, split into heads (view + transpose, no copy),
 * scaled scores per head, softmax, weighted sum, merge heads, output projection. The second
 * pass repeats it with a key padding mask that hides "mouse". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attograd.h"

enum { L = 3, E = 4, H = 2, DH = E / H };
static const char *words[L] = {"cat", "catches", "mouse"};

static void heading(const char *s) { printf("\n== %s\n", s); }

/* (1,L,E) → (1,H,L,DH): view the last dim as (H,DH), then swap the L and H dims. */
static ag_tensor *split_heads(ag_tensor *t) {
    return ag_transpose(ag_view(t, AG_SHAPE(1, L, H, DH)), 1, 2);
}

static void print_weights(ag_tensor *p, int head) {
    printf("   head %d   %10s %10s %10s\n", head, words[0], words[1], words[2]);
    for (int i = 0; i < L; i++) {
        printf("   %-8s", words[i]);
        for (int j = 0; j < L; j++) printf(" %10.4f", ag_get(p, (int64_t[]){0, head, i, j}));
        printf("\n");
    }
}

static void walkthrough(ag_tensor *x, ag_tensor *wq, ag_tensor *wk, ag_tensor *wv, ag_tensor *wo,
                        ag_tensor *key_padding_mask) {
    heading("1. project: Q = x Wq^T, K = x Wk^T, V = x Wv^T   (1,3,4) @ (4,4) -> (1,3,4)");
    ag_tensor *q = ag_matmul(x, ag_transpose(wq, 0, 1));
    ag_tensor *k = ag_matmul(x, ag_transpose(wk, 0, 1));
    ag_tensor *v = ag_matmul(x, ag_transpose(wv, 0, 1));
    ag_print(q, "Q");
    ag_print(k, "K");
    ag_print(v, "V");

    heading("2. split into heads: view(1,3,2,2) then transpose(1,2) -> (1,2,3,2), sharing Q's memory");
    ag_tensor *qh = split_heads(q), *kh = split_heads(k), *vh = split_heads(v);
    ag_print(qh, "Q heads");
    printf("   Q heads shares Q's storage: %s (strides %lld,%lld,%lld,%lld)\n", qh->data == q->data ? "yes" : "no",
           (long long)qh->stride[0], (long long)qh->stride[1], (long long)qh->stride[2], (long long)qh->stride[3]);

    heading("3. scores per head: Q K^T / sqrt(2)   (1,2,3,2) @ (1,2,2,3) -> (1,2,3,3)");
    ag_tensor *scores = ag_div_scalar(ag_matmul(qh, ag_transpose(kh, 2, 3)), sqrt((double)DH));
    if (key_padding_mask) {
        /* (1,S) bool, True = padding: broadcast to (1,1,1,S) and hide those keys from every query */
        ag_tensor *m = ag_view(key_padding_mask, AG_SHAPE(1, 1, 1, L));
        scores = ag_masked_fill(scores, m, -INFINITY);
        printf("   key padding mask (True = hidden): [%s, %s, %s] -> scores set to -inf there\n",
               ag_get(key_padding_mask, (int64_t[]){0, 0}) ? "True" : "False",
               ag_get(key_padding_mask, (int64_t[]){0, 1}) ? "True" : "False",
               ag_get(key_padding_mask, (int64_t[]){0, 2}) ? "True" : "False");
    }
    ag_print(scores, "scores");

    heading("4. softmax over the keys: each row sums to 1");
    ag_tensor *p = ag_softmax(scores, -1);
    for (int h = 0; h < H; h++) print_weights(p, h);

    heading("5. head outputs: weights @ V   (1,2,3,3) @ (1,2,3,2) -> (1,2,3,2)");
    ag_tensor *oh = ag_matmul(p, vh);
    ag_print(oh, "head outputs");

    heading("6. merge heads: transpose(1,2), contiguous, view(1,3,4)");
    ag_tensor *merged = ag_view(ag_contiguous(ag_transpose(oh, 1, 2)), AG_SHAPE(1, L, E));
    ag_print(merged, "concat");

    heading("7. output projection: concat Wo^T   (1,3,4) @ (4,4) -> (1,3,4)");
    ag_tensor *out = ag_matmul(merged, ag_transpose(wo, 0, 1));
    ag_print(out, "attn_output");
    ag_tensor *avg = ag_mean(p, 1, (int[]){1}, false);
    ag_print(avg, "attn_weights (averaged over heads, as need_weights=True)");
}

int main(int argc, char **argv) {
    long seed = -1;
    bool mask_only = false;
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
        } else {
            fprintf(stderr, "usage: mha_walkthrough [--seed N] [--mask]\n"
                            "  --seed N  random projections (PyTorch's xavier-uniform init) instead of identity\n"
                            "  --mask    only the pass with a key padding mask\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    ag_tensor *x = ag_from_buffer(AG_F32, AG_SHAPE(1, L, E),
                                  (const float[]){0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f, 1.1f, 1.2f});
    ag_tensor *w[4];
    if (seed < 0) {
        for (int i = 0; i < 4; i++) {
            w[i] = ag_zeros(AG_F32, AG_SHAPE(E, E));
            for (int64_t d = 0; d < E; d++) ag_set(w[i], (int64_t[]){d, d}, 1.0);
        }
    } else {
        /* in_proj_weight (3E,E) is xavier-uniform as one matrix: bound sqrt(6/(E+3E)) */
        ag_rng r = ag_rng_new((uint64_t)seed);
        double bound = sqrt(6.0 / (E + 3 * E)), out_bound = 1.0 / sqrt((double)E);
        for (int i = 0; i < 3; i++) w[i] = ag_uniform(&r, AG_F32, AG_SHAPE(E, E), -bound, bound);
        w[3] = ag_uniform(&r, AG_F32, AG_SHAPE(E, E), -out_bound, out_bound);
    }
    printf("Multi-head attention on \"cat catches mouse\": 3 words, embed_dim 4, 2 heads of size 2\n");
    ag_print(x, "x (batch 1, 3 words, 4 features)");
    if (seed < 0) printf("Projections Wq, Wk, Wv, Wo: identity (run with --seed N for random ones)\n");
    else {
        ag_print(w[0], "Wq");
        ag_print(w[1], "Wk");
        ag_print(w[2], "Wv");
        ag_print(w[3], "Wo");
    }
    if (!mask_only) walkthrough(x, w[0], w[1], w[2], w[3], NULL);
    printf("\n\n######## again, with \"mouse\" treated as padding (key_padding_mask) ########\n");
    ag_tensor *mask = ag_from_buffer(AG_BOOL, AG_SHAPE(1, L), (const uint8_t[]){0, 0, 1});
    walkthrough(x, w[0], w[1], w[2], w[3], mask);
    return 0;
}
