/* Linear (and the packed rows of skip_padding), Embedding, LayerNorm and sinusoidal positions
 * against PyTorch 1.13, their gradients against finite differences, module parameter
 * names/shapes/initialisation, and misuse reporting. Expected numbers were produced by
 * /usr/bin/python3 with torch 1.13 (the expression is given above each block) and pasted here;
 * torch is not needed at run time. */
#include <math.h>
#include <string.h>

#include "../nn/nn_internal.h"
#include "../tensor/internal.h"
#include "test_util.h"

/* ==== Linear ================================================================================ */

/* torch (float32): x=[[1,2,3],[-1,.5,2]]; w=[[.1,.2,.3],[-.4,.5,-.6],[.7,.8,.9],[1,-1,.5]];
 * b=[.5,-.5,1,2]; y=F.linear(x,w,b); y.backward(g=[[1,2,3,4],[-1,.5,.25,2]]) */
#define LIN_X 1, 2, 3, -1, 0.5, 2
#define LIN_W 0.1, 0.2, 0.3, -0.4, 0.5, -0.6, 0.7, 0.8, 0.9, 1, -1, 0.5
#define LIN_B 0.5, -0.5, 1, 2
#define LIN_G 1, 2, 3, 4, -1, 0.5, 0.25, 2
#define LIN_Y 1.9000000953674316, -1.7000000476837158, 6, 2.5, 1.1000000238418579, -1.0500000715255737, 2.5, 1.5
#define LIN_DX 5.4000000953674316, -0.39999985694885254, 3.7999999523162842, 1.875, -1.75, 0.625
#define LIN_DW 2, 1.5, 1, 1.5, 4.25, 7, 2.75, 6.125, 9.5, 2, 9, 16
#define LIN_DB 0, 2.5, 3.25, 6

static void test_linear_2d_with_bias_matches_torch_values_and_grads(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(2, 3), LIN_X));
    ag_tensor *w = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(4, 3), LIN_W));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(4), LIN_B));
    ag_tensor *y = ag_linear(x, w, b);
    tu_assert_shape(y, 2, 4);
    tu_assert_values(y, 1e-6, LIN_Y);
    ag_backward(y, tu_tensor(AG_F32, AG_SHAPE(2, 4), LIN_G));
    tu_assert_values(x->grad, 1e-6, LIN_DX);
    tu_assert_values(w->grad, 1e-6, LIN_DW);
    tu_assert_values(b->grad, 1e-6, LIN_DB);
}

static void test_linear_reads_transposed_and_row_sliced_operands_in_place(void **s) {
    /* x as the transpose of a (3,2) tensor, w as the transpose of a (3,4) tensor */
    ag_tensor *xt = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3, 2), 1, -1, 2, 0.5, 3, 2));
    ag_tensor *wt = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(3, 4), 0.1, -0.4, 0.7, 1, 0.2, 0.5, 0.8, -1, 0.3, -0.6, 0.9, 0.5));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(4), LIN_B));
    ag_tensor *x = ag_transpose(xt, 0, 1), *w = ag_transpose(wt, 0, 1);
    assert_false(ag_is_contiguous(x));
    ag_tensor *y = ag_linear(x, w, b);
    tu_assert_values(y, 1e-6, LIN_Y);
    ag_backward(y, tu_tensor(AG_F32, AG_SHAPE(2, 4), LIN_G));
    tu_assert_values(xt->grad, 1e-6, 5.4000000953674316, 1.875, -0.39999985694885254, -1.75, 3.7999999523162842,
                     0.625);
    tu_assert_values(wt->grad, 1e-6, 2, 1.5, 2.75, 2, 1.5, 4.25, 6.125, 9, 1, 7, 9.5, 16);
    /* x as columns 1..3 of a (2,5) tensor: rows 5 apart */
    ag_tensor *big = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(2, 5), 9, 1, 2, 3, 9, 9, -1, 0.5, 2, 9));
    ag_tensor *w2 = tu_tensor(AG_F32, AG_SHAPE(4, 3), LIN_W);
    y = ag_linear(ag_narrow(big, 1, 1, 3), w2, b);
    tu_assert_values(y, 1e-6, LIN_Y);
    ag_backward(y, tu_tensor(AG_F32, AG_SHAPE(2, 4), LIN_G));
    tu_assert_values(big->grad, 1e-6, 0, 5.4000000953674316, -0.39999985694885254, 3.7999999523162842, 0, 0, 1.875,
                     -1.75, 0.625, 0);
}

/* torch (float64): x=[1,2,3,4,5,6,-1,-2,.5,.25,3,-2].reshape(2,2,3); w=[[.5,-1,2],[1.5,.25,-.75]];
 * y=F.linear(x,w); y.backward(g=[1,-1,2,.5,-2,1,3,.25].reshape(2,2,2)) */
#define LIN3_Y 4.5, -0.25, 9, 2.75, 2.5, -2.375, -6.875, 2.625
#define LIN3_W 0.5, -1, 2, 1.5, 0.25, -0.75
#define LIN3_G 1, -1, 2, 0.5, -2, 1, 3, 0.25
#define LIN3_DW 11.75, 25, 8, 0.0625, -0.75, 0

static void test_linear_3d_input_without_bias_matches_torch(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 2, 3), 1, 2, 3, 4, 5, 6, -1, -2, 0.5, 0.25, 3, -2));
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), LIN3_W));
    ag_tensor *y = ag_linear(x, w, NULL);
    tu_assert_shape(y, 2, 2, 2);
    tu_assert_values(y, 1e-12, LIN3_Y);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 2, 2), LIN3_G));
    tu_assert_values(x->grad, 1e-12, -1, -1.25, 2.75, 1.75, -1.875, 3.625, 0.5, 2.25, -4.75, 1.875, -2.9375, 5.8125);
    tu_assert_values(w->grad, 1e-12, LIN3_DW);
}

static void test_linear_copies_a_3d_input_whose_rows_do_not_share_a_stride(void **s) {
    /* base[i][j] = x[j][i] of the previous test, so transpose(base, 0, 1) is that x */
    ag_tensor *base = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 2, 3), 1, 2, 3, -1, -2, 0.5, 4, 5, 6, 0.25, 3, -2));
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 3), LIN3_W));
    ag_tensor *y = ag_linear(ag_transpose(base, 0, 1), w, NULL);
    tu_assert_values(y, 1e-12, LIN3_Y);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 2, 2), LIN3_G));
    tu_assert_values(base->grad, 1e-12, -1, -1.25, 2.75, 0.5, 2.25, -4.75, 1.75, -1.875, 3.625, 1.875, -2.9375,
                     5.8125);
    tu_assert_values(w->grad, 1e-12, LIN3_DW);
}

static void test_linear_1d_input_gives_1d_output(void **s) {
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(3), 1, 2, 3);
    ag_tensor *w = tu_tensor(AG_F64, AG_SHAPE(2, 3), LIN3_W);
    ag_tensor *y = ag_linear(x, w, tu_tensor(AG_F64, AG_SHAPE(2), 10, 20));
    tu_assert_shape(y, 2);
    tu_assert_values(y, 1e-12, 14.5, 19.75); /* hand: .5-2+6+10, 1.5+.5-2.25+20 */
}

static ag_tensor *f_linear(int n, ag_tensor **in, void *ctx) { return ag_linear(in[0], in[1], n > 2 ? in[2] : NULL); }
static ag_tensor *f_linear_transposed(int n, ag_tensor **in, void *ctx) {
    return ag_linear(ag_transpose(in[0], 0, 1), ag_transpose(in[1], 0, 1), in[2]);
}

static void test_linear_gradcheck(void **s) {
    ag_rng r = ag_rng_new(11);
    ag_tensor *in[3] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(2, 3, 4))), tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(5, 4))),
                        tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(5)))};
    tu_assert_gradcheck(f_linear, NULL, 3, in);
    tu_assert_gradcheck(f_linear, NULL, 2, in);
    ag_tensor *tin[3] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(4, 3))), tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(4, 5))), in[2]};
    tu_assert_gradcheck(f_linear_transposed, NULL, 3, tin);
}

/* ---- the packed rows of skip_padding (nn/transformer/rows.c, ag__linear_rows) ---- */

static const int64_t ROWS[3] = {4, 0, 3}; /* of the 6 rows of a (2,3,·) batch */

static ag_tensor *f_take_put(int n, ag_tensor **in, void *ctx) { /* (2,3,4) -> rows -> (2,3,4) */
    ag_tensor *t = ag__take_rows(in[0], ROWS, 3);
    return ag__put_rows(ag_mul(t, t), ROWS, AG_SHAPE(2, 3, 4));
}
static ag_tensor *f_linear_rows(int n, ag_tensor **in, void *ctx) { /* (3,4) -> (2,3,5) -> (2,3,2) -> (3,3) */
    ag_tensor *y = ag__linear_rows(in[0], in[1], in[2], 3, NULL, ROWS, AG_SHAPE(2, 3, 5));
    ag_tensor *z = ag__linear_rows(ag_tanh(y), in[3], in[4], 3, ROWS, ROWS, AG_SHAPE(2, 3, 2)); /* row to row */
    return ag__linear_rows(ag_tanh(z), in[5], NULL, 3, ROWS, NULL, 0, NULL);
}

static void test_packed_rows_values_gradcheck_and_misuse(void **s) {
    ag_rng r = ag_rng_new(12);
    ag_tensor *x = ag_randn(&r, AG_F64, AG_SHAPE(2, 3, 4));
    ag_tensor *t = ag__take_rows(x, ROWS, 3);
    tu_assert_shape(t, 3, 4);
    for (int i = 0; i < 3; i++)
        for (int e = 0; e < 4; e++)
            assert_true(ag_get(t, (int64_t[]){i, e}) == ag_get(x, (int64_t[]){ROWS[i] / 3, ROWS[i] % 3, e}));
    ag_tensor *y = ag__put_rows(t, ROWS, AG_SHAPE(2, 3, 4));
    for (int64_t row = 0; row < 6; row++) {
        bool kept = row == 4 || row == 0 || row == 3;
        for (int e = 0; e < 4; e++)
            assert_true(ag_get(y, (int64_t[]){row / 3, row % 3, e}) ==
                        (kept ? ag_get(x, (int64_t[]){row / 3, row % 3, e}) : 0.0));
    }
    /* the linear pair equals ag_linear on the taken rows */
    ag_tensor *w = ag_randn(&r, AG_F64, AG_SHAPE(5, 4)), *b = ag_randn(&r, AG_F64, AG_SHAPE(5));
    ag_tensor *lp = ag__linear_rows(t, w, b, 3, NULL, ROWS, AG_SHAPE(2, 3, 5));
    ag_tensor *lt = ag__linear_rows(x, w, b, 3, ROWS, NULL, 0, NULL), *ref = ag_linear(t, w, b);
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 5; o++) {
            double v = ag_get(ref, (int64_t[]){i, o});
            assert_true(fabs(ag_get(lt, (int64_t[]){i, o}) - v) <= 1e-15 * (1 + fabs(v)));
            assert_true(fabs(ag_get(lp, (int64_t[]){ROWS[i] / 3, ROWS[i] % 3, o}) - v) <= 1e-15 * (1 + fabs(v)));
        }
    assert_true(ag_get(lp, (int64_t[]){0, 1, 2}) == 0.0);
    ag_tensor *in[5] = {tu_leaf(x)};
    tu_assert_gradcheck(f_take_put, NULL, 1, in);
    ag_tensor *lin[6] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 4))), tu_leaf(w), tu_leaf(b),
                         tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(2, 5))), tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(2))),
                         tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 2)))};
    tu_assert_gradcheck(f_linear_rows, NULL, 6, lin);
    /* a row outside the batch is misuse, named */
    static const int64_t BAD[2] = {1, 6};
    assert_null(ag__take_rows(x, BAD, 2));
    tu_assert_error("ag__take_rows", "row 1 is 6");
    assert_null(ag__linear_rows(x, w, b, 2, BAD, NULL, 0, NULL));
    tu_assert_error("ag__linear_rows", "row 1 is 6");
    assert_null(ag__linear_rows(ag_narrow(t, 0, 0, 2), w, b, 2, NULL, BAD, AG_SHAPE(2, 3, 5)));
    tu_assert_error("ag__linear_rows", "row 1 is 6");
    /* the rows a padding mask leaves: bool true or float -inf is padding */
    ag__rowset rs;
    ag_tensor *m = ag_zeros(AG_BOOL, AG_SHAPE(2, 3));
    assert_false(ag__live_rows(m, true, &rs)); /* nothing to skip */
    ag_set(m, (int64_t[]){0, 2}, 1);
    ag_set(m, (int64_t[]){1, 1}, 1);
    assert_true(ag__live_rows(m, false, &rs));
    assert_int_equal(rs.n, 4);
    static const int64_t bf[4] = {0, 1, 3, 5}, sf[4] = {0, 2, 1, 5}; /* (L,N) order: l·2 + n */
    assert_memory_equal(rs.bf, bf, sizeof bf);
    assert_memory_equal(rs.src, sf, sizeof sf);
    ag_tensor *fm = ag_masked_fill(ag_full(AG_F32, AG_SHAPE(2, 3), -1e9), m, -INFINITY); /* -1e9 is not padding */
    assert_true(ag__live_rows(fm, true, &rs));
    assert_memory_equal(rs.bf, bf, sizeof bf);
    assert_true(rs.src == rs.bf);
    assert_false(ag__live_rows(ag_ones(AG_BOOL, AG_SHAPE(2, 3)), true, &rs)); /* nothing left */
}

static void test_linear_module_names_shapes_and_init_range(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_rng r = ag_rng_new(5);
    ag_linear_module lin = ag_linear_new(p, "encoder.layers.0.linear1", 64, 32, true, &r);
    assert_ptr_equal(lin.weight, ag_params_find(p, "encoder.layers.0.linear1.weight"));
    assert_ptr_equal(lin.bias, ag_params_find(p, "encoder.layers.0.linear1.bias"));
    assert_int_equal(lin.in_features, 64);
    assert_int_equal(lin.out_features, 32);
    tu_assert_shape(lin.weight, 32, 64);
    tu_assert_shape(lin.bias, 32);
    /* U(-1/√64, 1/√64) for both: inside the bound, reaching close to it on both sides */
    for (int k = 0; k < 2; k++) {
        ag_tensor *t = k ? lin.bias : lin.weight;
        static double v[2048];
        double lo = 0, hi = 0;
        ag_to_buffer(t, AG_F64, v);
        for (int64_t i = 0; i < ag_numel(t); i++) {
            assert_true(fabs(v[i]) < 0.125);
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
        assert_true(hi > (k ? 0.1 : 0.12) && lo < (k ? -0.1 : -0.12));
    }
    ag_linear_module nob = ag_linear_new(p, "out", 4, 3, false, &r);
    assert_null(nob.bias);
    assert_int_equal(p->count, 3);
    assert_non_null(ag_params_find(p, "out.weight"));
    assert_null(ag_params_find(p, "out.bias"));
    ag_tensor *y = ag_linear_forward(&lin, ag_ones(AG_F32, AG_SHAPE(3, 64)));
    tu_assert_shape(y, 3, 32);
    ag_params_free(p);
}

static void test_linear_reports_shape_mismatch_naming_both_shapes(void **s) {
    ag_tensor *x = ag_ones(AG_F32, AG_SHAPE(2, 3)), *w = ag_ones(AG_F32, AG_SHAPE(4, 5));
    assert_null(ag_linear(x, w, NULL));
    tu_assert_error("ag_linear", "(2,3)", "(4,5)");
    assert_null(ag_linear(x, ag_ones(AG_F32, AG_SHAPE(4, 3)), ag_ones(AG_F32, AG_SHAPE(5))));
    tu_assert_error("ag_linear", "(2,3)", "(4,3)", "(5)");
    assert_null(ag_linear(x, ag_ones(AG_F64, AG_SHAPE(4, 3)), NULL));
    tu_assert_error("ag_linear", "f32", "f64");
}

/* ==== Embedding ============================================================================= */

/* torch: w=[[0,0,0],[1,2,3],[4,5,6],[7,8,9],[10,11,12]]; ids=[[2,0,2],[4,2,0]];
 * y=F.embedding(ids,w,padding_idx=0); y.backward(torch.arange(18.).reshape(2,3,3)) */
static void test_embedding_padding_row_gets_no_grad_and_repeats_accumulate(void **s) {
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(5, 3), 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    ag_tensor *ids = tu_tensor(AG_I64, AG_SHAPE(2, 3), 2, 0, 2, 4, 2, 0);
    ag_tensor *y = ag_embedding(w, ids, 0);
    tu_assert_shape(y, 2, 3, 3);
    tu_assert_values(y, 0, 4, 5, 6, 0, 0, 0, 4, 5, 6, 10, 11, 12, 4, 5, 6, 0, 0, 0);
    ag_backward(y, ag_reshape(ag_arange(AG_F64, 0, 18, 1), AG_SHAPE(2, 3, 3)));
    tu_assert_values(w->grad, 0, 0, 0, 0, 0, 0, 0, 18, 21, 24, 0, 0, 0, 9, 10, 11);
}

static void test_embedding_without_padding_gives_every_row_its_grad(void **s) {
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3, 2), 1, 2, 3, 4, 5, 6));
    ag_tensor *ids = tu_tensor(AG_I32, AG_SHAPE(3), 0, 2, 0);
    ag_tensor *y = ag_embedding(w, ids, -1);
    tu_assert_values(y, 0, 1, 2, 5, 6, 1, 2);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(3, 2), 1, 10, 100, 1000, 3, 30));
    tu_assert_values(w->grad, 0, 4, 40, 0, 0, 100, 1000); /* hand-worked: row 0 gets rows 0 and 2 of g */
}

/* The padding row's true derivative is not zero (PyTorch just drops it), so the checked function
 * zeroes the outputs at padding positions: then every numerical derivative must match. */
static ag_tensor *f_embedding(int n, ag_tensor **in, void *ctx) {
    ag_tensor *ids = ctx, *keep = ag_unsqueeze(ag_to(ag_logical_not(ag_eq_scalar(ids, 2)), AG_F64), -1);
    return ag_mul(ag_embedding(in[0], ids, 2), keep);
}
static ag_tensor *f_embedding_nopad(int n, ag_tensor **in, void *ctx) { return ag_embedding(in[0], ctx, -1); }

static void test_embedding_gradcheck(void **s) {
    ag_rng r = ag_rng_new(3);
    ag_tensor *w = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(6, 3)));
    ag_tensor *ids = tu_tensor(AG_I64, AG_SHAPE(2, 3), 1, 2, 1, 5, 0, 2);
    tu_assert_gradcheck(f_embedding, ids, 1, &w);
    tu_assert_gradcheck(f_embedding_nopad, ids, 1, &w);
}

static void test_embedding_module_zeroes_padding_row_and_draws_standard_normal(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_rng r = ag_rng_new(9);
    ag_embedding_module e = ag_embedding_new(p, "src_tok_emb.embedding", 100, 20, 1, &r);
    assert_ptr_equal(e.weight, ag_params_find(p, "src_tok_emb.embedding.weight"));
    tu_assert_shape(e.weight, 100, 20);
    static double v[2000];
    ag_to_buffer(e.weight, AG_F64, v);
    double sum = 0, sq = 0;
    for (int i = 0; i < 2000; i++) {
        if (i / 20 == 1) {
            assert_true(v[i] == 0);
            continue;
        }
        sum += v[i];
        sq += v[i] * v[i];
    }
    double mean = sum / 1980, sd = sqrt(sq / 1980 - mean * mean);
    assert_true(fabs(mean) < 0.1);
    assert_true(sd > 0.93 && sd < 1.07);
    ag_tensor *y = ag_embedding_forward(&e, tu_tensor(AG_I64, AG_SHAPE(2), 1, 3));
    tu_assert_shape(y, 2, 20);
    ag_backward(y, ag_ones(AG_F32, AG_SHAPE(2, 20)));
    for (int j = 0; j < 20; j++) {
        assert_true(ag_get(e.weight->grad, (int64_t[]){1, j}) == 0);
        assert_true(ag_get(e.weight->grad, (int64_t[]){3, j}) == 1);
    }
    ag_params_free(p);
}

static void test_embedding_reports_bad_padding_idx(void **s) {
    ag_tensor *w = ag_ones(AG_F32, AG_SHAPE(4, 2)), *ids = tu_tensor(AG_I64, AG_SHAPE(1), 0);
    assert_null(ag_embedding(w, ids, 4));
    tu_assert_error("ag_embedding", "padding_idx 4", "(4,2)");
}

/* ==== LayerNorm ============================================================================= */

/* torch (float64): x=[[1,2,3,5],[-1,.5,4,-2]]; w=[1.5,-.5,2,1]; b=[.1,.2,-.3,.4];
 * y=F.layer_norm(x,(4,),w,b,1e-5); y.backward(g=[[1,-2,.5,3],[-1,2,.25,-.75]]) */
#define LN_X 1, 2, 3, 5, -1, 0.5, 4, -2
#define LN_G 1, -2, 0.5, 3, -1, 2, 0.25, -0.75
#define LN_Y                                                                                                      \
    -1.6748198782033703, 0.45354569688619578, 0.038060929181594594, 1.921274181317175, -0.80692114460201869,      \
        0.17251754107266609, 2.8879652355707326, -0.64433343923868802
#define LN_DX                                                                                                     \
    0.40567087416714087, -0.21249640156447613, -0.49260274811449867, 0.29942827551183404, -0.19561563955543093,   \
        -0.15210832431847948, 0.095981858846854673, 0.25174210502705568

static void test_layer_norm_matches_torch_values_and_grads(void **s) {
    ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 4), LN_X));
    ag_tensor *w = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), 1.5, -0.5, 2, 1));
    ag_tensor *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(4), 0.1, 0.2, -0.3, 0.4));
    ag_tensor *y = ag_layer_norm(x, w, b, 1e-5);
    tu_assert_values(y, 1e-12, LN_Y);
    ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 4), LN_G));
    tu_assert_values(x->grad, 1e-12, LN_DX);
    tu_assert_values(w->grad, 1e-12, -0.57859915573423448, 1.1241126232541188, 0.4830108867417402, 5.3470726233805417);
    tu_assert_values(b->grad, 1e-12, 0, 0, 0.75, 2.25);
}

/* the four affine variants (weight and bias each there or not) against torch's values above:
 * y - b without the bias, and (y - b) / w without either; weight and bias as strided views
 * (every other element of a longer tensor), whose gradients reach only the viewed elements */
static void test_layer_norm_affine_variants_and_strided_weights(void **s) {
    const double W[4] = {1.5, -0.5, 2, 1}, B[4] = {0.1, 0.2, -0.3, 0.4}, Y[8] = {LN_Y};
    for (int v = 0; v < 4; v++) {
        bool hw = v & 1, hb = v & 2;
        ag_tensor *x = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(2, 4), LN_X));
        ag_tensor *wb = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(8), W[0], 9, W[1], 9, W[2], 9, W[3], 9));
        ag_tensor *bb = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(8), B[0], 9, B[1], 9, B[2], 9, B[3], 9));
        ag_tensor *w = hw ? ag_slice(wb, 0, 0, 8, 2) : NULL, *b = hb ? ag_slice(bb, 0, 0, 8, 2) : NULL;
        ag_tensor *y = ag_layer_norm(x, w, b, 1e-5);
        double want[8];
        for (int i = 0; i < 8; i++) want[i] = ((Y[i] - B[i % 4]) / W[i % 4]) * (hw ? W[i % 4] : 1) + (hb ? B[i % 4] : 0);
        tu_assert_array(y, want, 1e-12);
        ag_backward(y, tu_tensor(AG_F64, AG_SHAPE(2, 4), LN_G));
        if (hw && hb) {
            tu_assert_values(x->grad, 1e-12, LN_DX);
            tu_assert_values(wb->grad, 1e-12, -0.57859915573423448, 0, 1.1241126232541188, 0, 0.4830108867417402, 0,
                             5.3470726233805417, 0);
            tu_assert_values(bb->grad, 1e-12, 0, 0, 0, 0, 0.75, 0, 2.25, 0);
        }
        if (!hw) { /* dx with w = 1: the gradcheck below covers it; here its rows sum to 0 */
            const double *dx = (const double *)tu_raw(x->grad);
            for (int r = 0; r < 2; r++) assert_true(fabs(dx[4 * r] + dx[4 * r + 1] + dx[4 * r + 2] + dx[4 * r + 3]) < 1e-12);
        }
    }
}

static void test_layer_norm_f32_transposed_input_without_affine_matches_torch(void **s) {
    /* x given as the transpose of its (4,2) transpose; torch: F.layer_norm(x,(4,),None,None,1e-5) */
    ag_tensor *xt = tu_leaf(tu_tensor(AG_F32, AG_SHAPE(4, 2), 1, -1, 2, 0.5, 3, 4, 5, -2));
    ag_tensor *y = ag_layer_norm(ag_transpose(xt, 0, 1), NULL, NULL, 1e-5);
    tu_assert_values(y, 1e-6, -1.1832132521355803, -0.50709139377239154, 0.16903046459079729, 1.5212741813171751,
                     -0.60461409640134578, 0.054964917854667839, 1.5939826177853662, -1.044333439238688);
    ag_backward(y, tu_tensor(AG_F32, AG_SHAPE(2, 4), LN_G));
    /* torch's x.grad (2,4), read here through the (4,2) transpose */
    tu_assert_values(xt->grad, 1e-6, 1.1494030638694577, -0.36864712477682626, -1.3908810066391157,
                     0.81301584637318203, -0.21249485615015018, -0.27731480410354437, 0.45397279891980857,
                     -0.16705391749281148);
}

/* ctx "transposed": x is in[0]ᵀ; "bias only": in[1] is the bias; else in[1], in[2] are the
 * weight and bias as far as n goes */
static ag_tensor *f_layer_norm(int n, ag_tensor **in, void *ctx) {
    bool tr = ctx && !strcmp(ctx, "transposed"), bias_only = ctx && !strcmp(ctx, "bias only");
    ag_tensor *x = tr ? ag_transpose(in[0], 0, 1) : in[0];
    if (bias_only) return ag_layer_norm(x, NULL, in[1], 1e-5);
    return ag_layer_norm(x, n > 1 ? in[1] : NULL, n > 2 ? in[2] : NULL, 1e-5);
}

static void test_layer_norm_gradcheck(void **s) {
    ag_rng r = ag_rng_new(4);
    ag_tensor *in[3] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 5))), tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(5))),
                        tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(5)))};
    tu_assert_gradcheck(f_layer_norm, NULL, 3, in);
    in[0] = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(5, 3)));
    tu_assert_gradcheck(f_layer_norm, "transposed", 3, in);
    in[0] = tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 5))); /* weight only, bias only, neither */
    tu_assert_gradcheck(f_layer_norm, NULL, 2, in);
    ag_tensor *bias_only[2] = {in[0], in[2]};
    tu_assert_gradcheck(f_layer_norm, "bias only", 2, bias_only);
    tu_assert_gradcheck(f_layer_norm, NULL, 1, in);
}

static void test_layer_norm_module_names_and_init(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_layer_norm_module ln = ag_layer_norm_new(p, "encoder.layers.0.norm1", 4, 1e-5, true);
    assert_ptr_equal(ln.weight, ag_params_find(p, "encoder.layers.0.norm1.weight"));
    assert_ptr_equal(ln.bias, ag_params_find(p, "encoder.layers.0.norm1.bias"));
    tu_assert_values(ln.weight, 0, 1, 1, 1, 1);
    tu_assert_values(ln.bias, 0, 0, 0, 0, 0);
    ag_layer_norm_module plain = ag_layer_norm_new(p, "final", 4, 1e-5, false);
    assert_null(plain.weight);
    assert_int_equal(p->count, 2);
    ag_tensor *x = tu_tensor(AG_F64, AG_SHAPE(2, 4), LN_X);
    tu_assert_values(ag_layer_norm_forward(&ln, x), 1e-12, -1.1832132521355803, -0.50709139377239154,
                     0.16903046459079729, 1.5212741813171751, -0.60461409640134578, 0.054964917854667839,
                     1.5939826177853662, -1.044333439238688);
    ag_params_free(p);
}

static void test_layer_norm_reports_weight_shape_mismatch(void **s) {
    assert_null(ag_layer_norm(ag_ones(AG_F32, AG_SHAPE(2, 4)), ag_ones(AG_F32, AG_SHAPE(3)), NULL, 1e-5));
    tu_assert_error("ag_layer_norm", "(2,4)", "(3)");
}

/* torch (float64): pe[pos,j] = sin/cos(pos / 10000**((j - j%2)/D)); equal to 1e-16 to the
 * tutorial's exp(arange(0,D,2) * -log(10000)/D) form */
static void test_sinusoidal_positions_match_torch(void **s) {
    ag_tensor *pe = ag_sinusoidal_positions(4, 6, AG_F64);
    tu_assert_shape(pe, 4, 6);
    tu_assert_values(pe, 1e-15, 0, 1, 0, 1, 0, 1, 0.8414709848078965, 0.54030230586813977, 0.046399223464731285,
                     0.99892297604063041, 0.0021544330233656045, 0.99999767920648086, 0.90929742682568171,
                     -0.41614683654714241, 0.092698500778727252, 0.99569422412373987, 0.0043088560467428125,
                     0.99999071683669571, 0.14112000805986721, -0.98999249660044542, 0.13879810108005056,
                     0.990320699135675, 0.0064632590701896456, 0.99997911292296082);
    ag_tensor *odd = ag_sinusoidal_positions(3, 5, AG_F32);
    tu_assert_values(odd, 1e-7, 0, 1, 0, 1, 0, 0.8414709848078965, 0.54030230586813977, 0.025116222909773774,
                     0.99968453791520984, 0.00063095730261541994, 0.90929742682568171, -0.41614683654714241,
                     0.050216599387465206, 0.99873835069349315, 0.0012619143540422218);
    assert_false(pe->requires_grad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
        T(test_linear_2d_with_bias_matches_torch_values_and_grads),
        T(test_linear_reads_transposed_and_row_sliced_operands_in_place),
        T(test_linear_3d_input_without_bias_matches_torch),
        T(test_linear_copies_a_3d_input_whose_rows_do_not_share_a_stride),
        T(test_linear_1d_input_gives_1d_output),
        T(test_linear_gradcheck),
        T(test_packed_rows_values_gradcheck_and_misuse),
        T(test_linear_module_names_shapes_and_init_range),
        T(test_linear_reports_shape_mismatch_naming_both_shapes),
        T(test_embedding_padding_row_gets_no_grad_and_repeats_accumulate),
        T(test_embedding_without_padding_gives_every_row_its_grad),
        T(test_embedding_gradcheck),
        T(test_embedding_module_zeroes_padding_row_and_draws_standard_normal),
        T(test_embedding_reports_bad_padding_idx),
        T(test_layer_norm_matches_torch_values_and_grads),
        T(test_layer_norm_affine_variants_and_strided_weights),
        T(test_layer_norm_f32_transposed_input_without_affine_matches_torch),
        T(test_layer_norm_gradcheck),
        T(test_layer_norm_module_names_and_init),
        T(test_layer_norm_reports_weight_shape_mismatch),
        T(test_sinusoidal_positions_match_torch),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
