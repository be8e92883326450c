/* Dropout masks drawn sample by sample (ag_rng_share_batch): a batch run whole, and the same
 * batch run in parts with the generator shared over it, give each sample the same mask (the
 * same outputs, and for the Transformer the same gradients) and leave the generator at the
 * same counter; so do the Transformer with and without skip_padding, whose packed rows draw as
 * the padded batch's. This is what lets N processes
 * train as one (tests/test_dist.c, tests/dist_cli.sh); here the parts run one after another in
 * one process. Misuse (a batch of another size than the shared one) is reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { N = 6, S = 5, T = 4, E = 8 };
static const int64_t SRC_LEN[N] = {5, 3, 4, 1, 5, 2}, TGT_LEN[N] = {4, 4, 2, 3, 1, 4};

/* cos(0.37 i + phase) over a new f32 tensor */
static ag_tensor *wave(int ndim, const int64_t *shape, double phase) {
    ag_tensor *t = ag_empty(AG_F32, ndim, shape);
    for (int64_t i = 0; i < ag_numel(t); i++) ((float *)t->data)[i] = (float)cos(0.37 * (double)i + phase);
    return t;
}

/* Every element within tol, over the positions (b, t) that lengths keep (len NULL: all), of a
 * (N, L, E) or, when !batch_first, (L, N, E) pair of tensors; returns how many were compared. */
static int64_t assert_rows_close(const ag_tensor *a, const ag_tensor *b, bool batch_first, const int64_t *len,
                                 double tol) {
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(ag_numel(a), ag_numel(b));
    int64_t n = ag_numel(a), L = batch_first ? a->shape[1] : a->shape[0], B = batch_first ? a->shape[0] : a->shape[1];
    int64_t D = a->shape[2], compared = 0;
    double *va = malloc(sizeof(double) * (size_t)n), *vb = malloc(sizeof(double) * (size_t)n);
    ag_to_buffer(a, AG_F64, va);
    ag_to_buffer(b, AG_F64, vb);
    for (int64_t s = 0; s < B; s++)
        for (int64_t t = 0; t < L; t++) {
            if (len && t >= len[s]) continue;
            int64_t row = batch_first ? s * L + t : t * B + s;
            for (int64_t j = 0; j < D; j++, compared++)
                if (fabs(va[row * D + j] - vb[row * D + j]) > tol)
                    fail_msg("sample %lld, position %lld, element %lld: %.9g vs %.9g", (long long)s, (long long)t,
                             (long long)j, va[row * D + j], vb[row * D + j]);
        }
    free(va);
    free(vb);
    return compared;
}

/* the whole batch's result against the parts' results (cat along the batch dim) */
typedef ag_tensor *(*batch_fn)(void *ctx, int64_t first, int64_t n, ag_rng *rng);

/* y of the whole batch (rng not shared, from counter c0), and the same batch in the given parts
 * with rng shared over it (each part from c0); the counter after each part is the whole's. */
static ag_tensor *run_parts(batch_fn f, void *ctx, int64_t total, const int64_t *cuts, int parts, int dim,
                            ag_tensor **whole) {
    ag_rng r = ag_rng_new(77);
    r.counter = 1001; /* odd: the parts start mid-block of the stream */
    *whole = f(ctx, 0, total, &r);
    uint64_t after = r.counter;
    ag_tensor *pieces[8];
    for (int i = 0; i < parts; i++) {
        ag_rng q = ag_rng_new(77);
        q.counter = 1001;
        ag_rng_share_batch(&q, cuts[i], cuts[i + 1] - cuts[i], total);
        pieces[i] = f(ctx, cuts[i], cuts[i + 1] - cuts[i], &q);
        assert_non_null(pieces[i]);
        assert_true(q.counter == after);
    }
    return ag_cat(parts, pieces, dim);
}

/* ---- ops: samples along dim 0 ---- */

static ag_tensor *X3;
static ag_tensor *dropout_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    (void)ctx;
    return ag_dropout(ag_narrow(X3, 0, first, n), 0.4, true, rng);
}

static void test_dropout_parts_draw_the_whole_batchs_masks(void **state) {
    (void)state;
    X3 = wave(AG_SHAPE(N, 7, 9), 0.1); /* 63 elements a sample: parts start mid-byte and mid-block */
    ag_tensor *whole, *parts = run_parts(dropout_fn, NULL, N, (int64_t[]){0, 1, 4, 6}, 3, 0, &whole);
    tu_assert_same(parts, whole, 0);
    int64_t zeros = 0;
    for (int64_t i = 0; i < ag_numel(whole); i++) zeros += ((float *)whole->data)[i] == 0;
    assert_true(zeros > 100 && zeros < 280); /* p = 0.4 of 378 */
}

/* a tensor with its samples along dim 1: the dropout of its transposed view */
static ag_tensor *dropout_dim1_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    (void)ctx;
    return ag_transpose(ag_dropout(ag_transpose(ag_narrow(X3, 1, first, n), 0, 1), 0.4, true, rng), 0, 1);
}

static void test_a_batch_along_dim_1_draws_through_a_transposed_view(void **state) {
    (void)state;
    X3 = wave(AG_SHAPE(7, N, 9), 0.15);
    ag_tensor *whole, *parts = run_parts(dropout_dim1_fn, NULL, N, (int64_t[]){0, 3, 6}, 2, 1, &whole);
    tu_assert_same(parts, whole, 0);
}

/* ag_feed_forward (relu + dropout fused) */
static ag_tensor *FF_W1, *FF_B1, *FF_W2, *FF_B2;
static ag_tensor *ff_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    (void)ctx;
    return ag_feed_forward(ag_narrow(X3, 0, first, n), FF_W1, FF_B1, FF_W2, FF_B2, 0.3, true, rng);
}

static void test_feed_forward_parts_draw_the_whole_batchs_masks(void **state) {
    (void)state;
    X3 = wave(AG_SHAPE(N, 3, 4), 0.2);
    FF_W1 = wave(AG_SHAPE(16, 4), 0.3);
    FF_B1 = wave(AG_SHAPE(16), 0.4);
    FF_W2 = wave(AG_SHAPE(4, 16), 0.5);
    FF_B2 = wave(AG_SHAPE(4), 0.6);
    ag_tensor *whole, *parts = run_parts(ff_fn, NULL, N, (int64_t[]){0, 3, 5, 6}, 3, 0, &whole);
    tu_assert_same(parts, whole, 1e-6);
}

/* ag_attention's dropout on the (B,H,L,S) probabilities */
static ag_tensor *Q4, *K4;
static ag_tensor *attention_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    (void)ctx;
    ag_tensor *q = ag_narrow(Q4, 0, first, n), *k = ag_narrow(K4, 0, first, n);
    return ag_attention(q, k, k, NULL, false, 0.5, rng, true, NULL);
}

static void test_attention_parts_draw_the_whole_batchs_masks(void **state) {
    (void)state;
    Q4 = wave(AG_SHAPE(N, 2, 3, 4), 0.7);
    K4 = wave(AG_SHAPE(N, 2, 5, 4), 0.8);
    ag_tensor *whole, *parts = run_parts(attention_fn, NULL, N, (int64_t[]){0, 2, 6}, 2, 0, &whole);
    tu_assert_same(parts, whole, 1e-6);
}

/* ---- layers: their own batch dim ---- */

typedef struct {
    ag_transformer_module tf;
    ag_tensor *src, *tgt, *src_pad, *tgt_pad, *causal;
    bool batch_first;
} tf_case;

static ag_tensor *pad_mask(const int64_t *len, int64_t L) {
    ag_tensor *m = ag_empty(AG_BOOL, AG_SHAPE(N, L));
    for (int64_t b = 0; b < N; b++)
        for (int64_t t = 0; t < L; t++) ((uint8_t *)m->data)[b * L + t] = t >= len[b];
    return m;
}

static tf_case tf_case_new(ag_params *p, bool batch_first, bool skip_padding, bool keep_ff, bool recompute) {
    tf_case c = {.batch_first = batch_first};
    ag_transformer_config cfg = ag_transformer_defaults(E, 2);
    cfg.dim_feedforward = 12;
    cfg.dropout = 0.25;
    cfg.batch_first = batch_first;
    cfg.skip_padding = skip_padding;
    cfg.keep_ff_activation = keep_ff;
    cfg.recompute_attention = recompute;
    ag_rng r = ag_rng_new(5);
    c.tf = ag_transformer_new(p, "tf", &cfg, 2, 2, &r);
    c.src = batch_first ? wave(AG_SHAPE(N, S, E), 0.9) : wave(AG_SHAPE(S, N, E), 0.9);
    c.tgt = batch_first ? wave(AG_SHAPE(N, T, E), 1.1) : wave(AG_SHAPE(T, N, E), 1.1);
    c.src_pad = pad_mask(SRC_LEN, S);
    c.tgt_pad = pad_mask(TGT_LEN, T);
    c.causal = ag_square_subsequent_mask(T, AG_F32);
    return c;
}

static ag_tensor *tf_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    tf_case *c = ctx;
    int bd = c->batch_first ? 0 : 1;
    ag_transformer_args a = {.src_key_padding_mask = ag_narrow(c->src_pad, 0, first, n),
                             .tgt_key_padding_mask = ag_narrow(c->tgt_pad, 0, first, n),
                             .memory_key_padding_mask = ag_narrow(c->src_pad, 0, first, n),
                             .tgt_mask = c->causal,
                             .training = true,
                             .rng = rng};
    return ag_transformer_forward(&c->tf, ag_narrow(c->src, bd, first, n), ag_narrow(c->tgt, bd, first, n), &a);
}

/* both layouts, with and without skip_padding, fused and composed feed-forward: the parts give
 * the whole batch's output on the target's live positions (skip_padding zeroes the others) */
static void test_transformer_parts_draw_the_whole_batchs_masks(void **state) {
    (void)state;
    for (int k = 0; k < 8; k++) {
        bool batch_first = k & 1, skip = k & 2, keep_ff = k & 4;
        ag_params *p = ag_params_new(AG_F32);
        tf_case c = tf_case_new(p, batch_first, skip, keep_ff, false);
        ag_tensor *whole, *parts = run_parts(tf_fn, &c, N, (int64_t[]){0, 2, 3, 6}, 3, batch_first ? 0 : 1, &whole);
        assert_rows_close(parts, whole, batch_first, TGT_LEN, 2e-5);
        ag_params_free(p);
    }
}

/* backward too: loss = Σ y·w over the whole batch, or over each part in turn (the gradients
 * add up), gives the same input and parameter gradients; with recompute_attention backward
 * draws the attention's masks again, from the part's place */
static void test_transformer_parts_give_the_whole_batchs_gradients(void **state) {
    (void)state;
    for (int recompute = 0; recompute < 2; recompute++) {
        ag_params *p = ag_params_new(AG_F32);
        tf_case c = tf_case_new(p, true, true, false, recompute);
        ag_tensor *src = c.src, *w = wave(AG_SHAPE(N, T, E), 1.7), *grads[2], *src_grads[2];
        for (int parts = 0; parts < 2; parts++) {
            c.src = tu_leaf(ag_clone(src));
            ag_params_zero_grad(p);
            const int64_t cut[3] = {0, 4, N};
            for (int i = 0; i < (parts ? 2 : 1); i++) {
                int64_t first = parts ? cut[i] : 0, n = parts ? cut[i + 1] - cut[i] : N;
                ag_rng r = ag_rng_new(41);
                if (parts) ag_rng_share_batch(&r, first, n, N);
                ag_tensor *y = tf_fn(&c, first, n, &r);
                ag_backward(ag_sum(ag_mul(y, ag_narrow(w, 0, first, n)), 0, NULL, false), NULL);
            }
            grads[parts] = ag_clone(p->flat_grad);
            src_grads[parts] = ag_clone(c.src->grad);
        }
        tu_assert_same(grads[1], grads[0], 2e-5);
        tu_assert_same(src_grads[1], src_grads[0], 2e-5);
        ag_params_free(p);
    }
}

/* skip_padding's packed rows draw the padded batch's masks: the same output on live positions */
static void test_skip_padding_draws_the_padded_batchs_masks(void **state) {
    (void)state;
    for (int bf = 0; bf < 2; bf++) {
        ag_params *p1 = ag_params_new(AG_F32), *p2 = ag_params_new(AG_F32);
        tf_case packed = tf_case_new(p1, bf, true, false, false), padded = tf_case_new(p2, bf, false, false, false);
        ag_rng r1 = ag_rng_new(9), r2 = ag_rng_new(9);
        ag_tensor *a = tf_fn(&packed, 0, N, &r1), *b = tf_fn(&padded, 0, N, &r2);
        assert_true(r1.counter == r2.counter);
        int64_t compared = assert_rows_close(a, b, bf, TGT_LEN, 2e-5);
        assert_int_equal(compared, (4 + 4 + 2 + 3 + 1 + 4) * E);
        /* and dropout is on: a generator at another counter gives other outputs */
        ag_rng r3 = ag_rng_new(9);
        r3.counter = 1;
        ag_tensor *c = tf_fn(&padded, 0, N, &r3);
        float *va = (float *)ag_contiguous(b)->data, *vc = (float *)ag_contiguous(c)->data;
        int64_t differ = 0;
        for (int64_t i = 0; i < ag_numel(b); i++) differ += fabsf(va[i] - vc[i]) > 1e-3f;
        assert_true(differ > ag_numel(b) / 2);
        ag_params_free(p1);
        ag_params_free(p2);
    }
}

/* a GRU's dropout between layers: its (L,N,H) steps hold the samples along dim 1 */
typedef struct {
    ag_gru_module gru;
    ag_tensor *x;
} gru_case;

static ag_tensor *gru_fn(void *ctx, int64_t first, int64_t n, ag_rng *rng) {
    gru_case *c = ctx;
    ag_gru_args a = {.training = true, .rng = rng};
    return ag_gru_forward(&c->gru, ag_narrow(c->x, 1, first, n), &a, NULL);
}

static void test_gru_parts_draw_the_whole_batchs_masks(void **state) {
    (void)state;
    ag_params *p = ag_params_new(AG_F32);
    ag_gru_config cfg = ag_gru_defaults(3, 5);
    cfg.num_layers = 3;
    cfg.dropout = 0.5;
    ag_rng r = ag_rng_new(3);
    gru_case c = {.gru = ag_gru_new(p, "gru", &cfg, &r), .x = wave(AG_SHAPE(4, N, 3), 1.3)};
    ag_tensor *whole, *parts = run_parts(gru_fn, &c, N, (int64_t[]){0, 4, 6}, 2, 1, &whole);
    assert_rows_close(parts, whole, false, NULL, 1e-6);
    ag_params_free(p);
}

/* ---- misuse ---- */

static void test_a_batch_of_another_size_is_reported(void **state) {
    (void)state;
    ag_rng r = ag_rng_new(1);
    ag_rng_share_batch(&r, 2, 3, 8);
    assert_null(ag_dropout(wave(AG_SHAPE(4, 5), 0), 0.5, true, &r));
    tu_assert_error("ag_dropout", "(4,5)", "4 samples", "samples 2 .. 4 of 8", "ag_rng_share_batch");
    assert_null(ag_feed_forward(wave(AG_SHAPE(2, 4), 0), wave(AG_SHAPE(6, 4), 0), NULL,
                                wave(AG_SHAPE(4, 6), 0), NULL, 0.5, true, &r));
    tu_assert_error("ag_feed_forward", "2 samples", "samples 2 .. 4 of 8");
    assert_null(ag_attention(wave(AG_SHAPE(1, 1, 2, 4), 0), wave(AG_SHAPE(1, 1, 2, 4), 0),
                             wave(AG_SHAPE(1, 1, 2, 4), 0), NULL, false, 0.5, &r, true, NULL));
    tu_assert_error("ag_attention", "1 samples", "samples 2 .. 4 of 8");
    /* not drawing (eval, p = 0) needs no check */
    assert_non_null(ag_dropout(wave(AG_SHAPE(4, 5), 0), 0.5, false, &r));
    assert_int_equal(tu_error_count(), 0);
    ag_rng_share_batch(&r, 6, 3, 8);
    tu_assert_error("ag_rng_share_batch", "samples 6 .. 8 of 8");
    ag_rng_share_batch(&r, 0, 0, 0); /* the sharing ends: any batch */
    assert_int_equal(tu_error_count(), 0);
    assert_non_null(ag_dropout(wave(AG_SHAPE(4, 5), 0), 0.5, true, &r));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_parts_draw_the_whole_batchs_masks),
        cmocka_unit_test(test_a_batch_along_dim_1_draws_through_a_transposed_view),
        cmocka_unit_test(test_feed_forward_parts_draw_the_whole_batchs_masks),
        cmocka_unit_test(test_attention_parts_draw_the_whole_batchs_masks),
        cmocka_unit_test(test_transformer_parts_draw_the_whole_batchs_masks),
        cmocka_unit_test(test_transformer_parts_give_the_whole_batchs_gradients),
        cmocka_unit_test(test_skip_padding_draws_the_padded_batchs_masks),
        cmocka_unit_test(test_gru_parts_draw_the_whole_batchs_masks),
        cmocka_unit_test(test_a_batch_of_another_size_is_reported),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
