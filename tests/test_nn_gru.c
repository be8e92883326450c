/* GRUCell, GRU (nn/recurrent/gru.h) and additive / dot-product attention
 * (nn/attention/seq2seq_attention.h).
 *
 * Expected values were computed with PyTorch 1.13 (/usr/bin/python3) in float64 and pasted as
 * literals. Inputs are tu_seq(shape, a, c)[i] = sin(a*i + c) in row-major order; parameter k (in
 * the module's order) is tu_seq(shape, 0.3 + 0.1k, 0.1k) * 0.5. In torch:
 *
 *     def tu_seq(shape, a, c):
 *         return torch.sin(torch.arange(math.prod(shape), dtype=torch.float64) * a + c).reshape(shape)
 *     def fill(m):
 *         with torch.no_grad():
 *             for k, (name, p) in enumerate(m.named_parameters()):
 *                 p.copy_(tu_seq(p.shape, 0.3 + 0.1 * k, 0.1 * k) * 0.5)
 *
 * AdditiveAttention and DotAttention are the torch modules in tests/parity/gen_gru.py. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"



static ag_tensor *ids_of(int ndim, const int64_t *shape, const int64_t *v) {
    return ag_from_buffer(AG_I64, ndim, shape, v);
}

static ag_tensor *bool_of(int ndim, const int64_t *shape, const int *bits) {
    ag_tensor *m = ag_empty(AG_BOOL, ndim, shape);
    for (int64_t i = 0; i < ag_numel(m); i++) ((uint8_t *)m->data)[i] = (uint8_t)bits[i];
    return m;
}

static double *values(const ag_tensor *t) {
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(ag_numel(t) + 1));
    ag_to_buffer(t, AG_F64, v);
    return v;
}

/* every parameter of p after the n given tensors, for gradcheck */
static int with_params(ag_tensor **in, int n, const ag_params *p) {
    for (int k = 0; k < p->count; k++) in[n++] = p->list[k];
    return n;
}

/* ---- parameters ---- */

static void test_gru_cell_parameters_match_torch_names_shapes_and_init(void **s) {
    /* nn.GRUCell(3,4).state_dict(): weight_ih (12,3), weight_hh (12,4), bias_ih (12), bias_hh (12) */
    ag_params *p = ag_params_new(AG_F32);
    ag_gru_cell_module m = ag_gru_cell_new(p, "dec", 3, 4, true, NULL);
    assert_int_equal(p->count, 4);
    const char *names[] = {"dec.weight_ih", "dec.weight_hh", "dec.bias_ih", "dec.bias_hh"};
    for (int k = 0; k < 4; k++) assert_string_equal(p->list[k]->name, names[k]);
    tu_assert_shape(m.weight_ih, 12, 3);
    tu_assert_shape(m.weight_hh, 12, 4);
    tu_assert_shape(m.bias_ih, 12);
    tu_assert_shape(m.bias_hh, 12);
    double *v = values(p->flat), lo = 1, hi = -1; /* U(-1/√4, 1/√4) */
    for (int64_t i = 0; i < p->numel; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    assert_true(lo >= -0.5 && hi <= 0.5 && lo < -0.4 && hi > 0.4);
    ag_params_free(p);
    p = ag_params_new(AG_F32);
    m = ag_gru_cell_new(p, "", 3, 4, false, NULL);
    assert_int_equal(p->count, 2);
    assert_string_equal(p->list[1]->name, "weight_hh");
    assert_null(m.bias_ih);
    ag_params_free(p);
}

static void test_gru_parameters_match_torch_state_dict_order_and_shapes(void **s) {
    /* list(nn.GRU(3, 4, num_layers=2, bidirectional=True).state_dict().items()) */
    static const struct {
        const char *name;
        int64_t r, c;
    } want[] = {{"weight_ih_l0", 12, 3},         {"weight_hh_l0", 12, 4},          {"bias_ih_l0", 12, 0},
                {"bias_hh_l0", 12, 0},           {"weight_ih_l0_reverse", 12, 3},  {"weight_hh_l0_reverse", 12, 4},
                {"bias_ih_l0_reverse", 12, 0},   {"bias_hh_l0_reverse", 12, 0},    {"weight_ih_l1", 12, 8},
                {"weight_hh_l1", 12, 4},         {"bias_ih_l1", 12, 0},            {"bias_hh_l1", 12, 0},
                {"weight_ih_l1_reverse", 12, 8}, {"weight_hh_l1_reverse", 12, 4},  {"bias_ih_l1_reverse", 12, 0},
                {"bias_hh_l1_reverse", 12, 0}};
    ag_params *p = ag_params_new(AG_F32);
    ag_gru_config cfg = ag_gru_defaults(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
    assert_int_equal(p->count, 16);
    for (int k = 0; k < 16; k++) {
        ag_tensor *t = p->list[k];
        assert_string_equal(t->name, want[k].name);
        assert_int_equal(t->ndim, want[k].c ? 2 : 1);
        assert_int_equal(t->shape[0], want[k].r);
        if (want[k].c) assert_int_equal(t->shape[1], want[k].c);
    }
    assert_ptr_equal(m.layer[1][1].weight_ih, p->list[12]);
    ag_params_free(p);
    p = ag_params_new(AG_F32);
    cfg.bias = false;
    ag_gru_new(p, "enc.rnn", &cfg, NULL);
    assert_int_equal(p->count, 8);
    assert_string_equal(p->list[3]->name, "enc.rnn.weight_hh_l0_reverse");
    ag_params_free(p);
}

/* ---- values ---- */

static void test_gru_cell_matches_torch_on_transposed_input(void **s) {
    /* m = nn.GRUCell(3, 2); fill(m); m(tu_seq((3,2), 0.5, 0).t(), tu_seq((2,2), 0.8, 0.5)) */
    static const double want[] = {0.405337491657, 0.532570318533, 0.767680447504, 0.011620124184};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        ag_params *p = ag_params_new(dt);
        ag_gru_cell_module m = ag_gru_cell_new(p, "", 3, 2, true, NULL);
        tu_fill_params(p);
        ag_tensor *x = ag_transpose(tu_seq(dt, AG_SHAPE(3, 2), 0.5, 0), 0, 1);
        ag_tensor *y = ag_gru_cell_forward(&m, x, tu_seq(dt, AG_SHAPE(2, 2), 0.8, 0.5));
        tu_assert_shape(y, 2, 2);
        tu_assert_array(y, want, dt == AG_F32 ? 1e-6 : 1e-11);
        /* unbatched: row 1 alone */
        ag_tensor *y1 = ag_gru_cell_forward(&m, ag_select(x, 0, 1), ag_select(tu_seq(dt, AG_SHAPE(2, 2), 0.8, 0.5), 0, 1));
        tu_assert_shape(y1, 2);
        tu_assert_values(y1, dt == AG_F32 ? 1e-6 : 1e-11, want[2], want[3]);
        ag_params_free(p);
    }
}

static void test_gru_bidirectional_with_lengths_matches_pack_padded_sequence(void **s) {
    /* g = nn.GRU(2, 3, bidirectional=True); fill(g)
     * o, hn = g(pack_padded_sequence(tu_seq((3,2,2), 0.6, 0.2), tensor([3,1]), enforce_sorted=False),
     *           tu_seq((2,2,3), 0.45, 0.7)); o = pad_packed_sequence(o, total_length=3)[0] */
    static const double want_out[] = {
        0.498917549224,  0.121731928809,   0.223322343701,   -0.113782544429, 0.220090047078, 0.564957273225,
        0.623512250672,  0.0375954086636,  -0.340868788277,  0.0159694517179, -0.191818590059, -0.489652569467,
        0.32079679035,   -0.153070004904,  -0.249308057528,  -0.102594059733, 0.425636629879, 0.511705969768,
        0,               0,                0,                0,               0,              0,
        0.26562166146,   0.0268907592237,  -0.0581979857506, -0.248245100785, 0.198443111489, 0.457338512321,
        0,               0,                0,                0,               0,              0};
    static const double want_hn[] = {0.26562166146,   0.0268907592237, -0.0581979857506, 0.623512250672,
                                     0.0375954086636, -0.340868788277, -0.113782544429,  0.220090047078,
                                     0.564957273225,  0.0159694517179, -0.191818590059,  -0.489652569467};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        double tol = dt == AG_F32 ? 1e-6 : 1e-11;
        ag_params *p = ag_params_new(dt);
        ag_gru_config cfg = ag_gru_defaults(2, 3);
        cfg.bidirectional = true;
        ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
        tu_fill_params(p);
        ag_tensor *x = tu_seq(dt, AG_SHAPE(3, 2, 2), 0.6, 0.2), *hn = NULL;
        ag_gru_args a = {.h0 = tu_seq(dt, AG_SHAPE(2, 2, 3), 0.45, 0.7), .lengths = ids_of(AG_SHAPE(2), (int64_t[]){3, 1})};
        ag_tensor *y = ag_gru_forward(&m, x, &a, &hn);
        tu_assert_shape(y, 3, 2, 6);
        tu_assert_shape(hn, 2, 2, 3);
        tu_assert_array(y, want_out, tol);
        tu_assert_array(hn, want_hn, tol);
        /* batch_first on a transposed (non-contiguous) input gives the transposed output */
        m.cfg.batch_first = true;
        ag_tensor *yb = ag_gru_forward(&m, ag_transpose(x, 0, 1), &a, &hn);
        tu_assert_shape(yb, 2, 3, 6);
        tu_assert_same(ag_transpose(yb, 0, 1), y, 0);
        tu_assert_array(hn, want_hn, tol);
        ag_params_free(p);
    }
}

/* A padded sequence gives what the same GRU gives on that sequence alone, cut to its length:
 * the reverse direction starts at its last real step. */
static void test_gru_padded_sequence_equals_the_sequence_run_alone(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_gru_config cfg = ag_gru_defaults(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
    ag_tensor *x = tu_seq(AG_F64, AG_SHAPE(5, 3, 3), 0.37, 0.1), *h0 = tu_seq(AG_F64, AG_SHAPE(4, 3, 4), 0.71, 0.3);
    int64_t len[3] = {2, 5, 0};
    ag_tensor *hn, *y = ag_gru_forward(&m, x, &(ag_gru_args){.h0 = h0, .lengths = ids_of(AG_SHAPE(3), len)}, &hn);
    for (int b = 0; b < 3; b++) {
        ag_tensor *yb = ag_select(y, 1, b), *hb = ag_select(hn, 1, b);
        if (len[b] > 0) {
            ag_tensor *xa = ag_narrow(ag_narrow(x, 1, b, 1), 0, 0, len[b]), *ha;
            ag_tensor *ya = ag_gru_forward(&m, xa, &(ag_gru_args){.h0 = ag_narrow(h0, 1, b, 1)}, &ha);
            tu_assert_same(ag_narrow(yb, 0, 0, len[b]), ya, 1e-14);
            tu_assert_same(hb, ha, 1e-14);
        } else { /* length 0: h_n is h0 */
            tu_assert_same(hb, ag_select(h0, 1, b), 0);
        }
        for (int64_t t = len[b]; t < 5; t++) /* padded steps output zeros */
            tu_assert_same(ag_select(yb, 0, t), ag_zeros(AG_F64, AG_SHAPE(8)), 0);
    }
    /* an expanded (stride-0) h0 reads as its materialised copy */
    ag_tensor *hx = ag_expand(ag_narrow(h0, 1, 0, 1), AG_SHAPE(4, 3, 4)), *hn2;
    ag_tensor *y1 = ag_gru_forward(&m, x, &(ag_gru_args){.h0 = hx, .lengths = ids_of(AG_SHAPE(3), len)}, &hn);
    ag_tensor *y2 = ag_gru_forward(&m, x, &(ag_gru_args){.h0 = ag_contiguous(hx), .lengths = ids_of(AG_SHAPE(3), len)},
                                   &hn2);
    tu_assert_same(y1, y2, 0);
    tu_assert_same(hn, hn2, 0);
    ag_params_free(p);
}

static void test_gru_unbatched_input_equals_a_batch_of_one(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_gru_config cfg = ag_gru_defaults(3, 2);
    cfg.bidirectional = true;
    ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
    ag_tensor *x = tu_seq(AG_F64, AG_SHAPE(4, 3), 0.5, 0.2), *h0 = tu_seq(AG_F64, AG_SHAPE(2, 2), 0.9, 0.1), *hn, *hb;
    ag_tensor *y = ag_gru_forward(&m, x, &(ag_gru_args){.h0 = h0}, &hn);
    ag_tensor *yb = ag_gru_forward(&m, ag_unsqueeze(x, 1), &(ag_gru_args){.h0 = ag_unsqueeze(h0, 1)}, &hb);
    tu_assert_shape(y, 4, 4);
    tu_assert_shape(hn, 2, 2);
    tu_assert_same(y, yb, 0);
    tu_assert_same(hn, hb, 0);
    ag_params_free(p);
}

static void test_gru_dropout_applies_between_layers_only_in_training(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_gru_config cfg = ag_gru_defaults(3, 4);
    cfg.num_layers = 2;
    cfg.dropout = 1.0; /* every first-layer output dropped: layer 2 reads zeros */
    ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
    ag_tensor *x = tu_seq(AG_F64, AG_SHAPE(3, 2, 3), 0.5, 0.2), *hn;
    ag_tensor *eval = ag_gru_forward(&m, x, NULL, NULL);
    ag_gru_module m0 = m;
    m0.cfg.dropout = 0;
    tu_assert_same(eval, ag_gru_forward(&m0, x, NULL, NULL), 0);
    ag_tensor *train = ag_gru_forward(&m, x, &(ag_gru_args){.training = true}, &hn);
    /* witness: layer 1 alone on a zero input */
    ag_gru_module top = m;
    top.cfg.num_layers = 1;
    top.cfg.input_size = 4;
    top.layer[0][0] = m.layer[1][0];
    tu_assert_same(train, ag_gru_forward(&top, ag_zeros(AG_F64, AG_SHAPE(3, 2, 4)), NULL, NULL), 1e-15);
    ag_params_free(p);
}

static void test_gru_results_do_not_depend_on_thread_count(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_gru_config cfg = ag_gru_defaults(8, 96);
    cfg.bidirectional = true;
    ag_gru_module m = ag_gru_new(p, "", &cfg, NULL);
    ag_tensor *x = tu_leaf(tu_seq(AG_F32, AG_SHAPE(3, 64, 8), 0.37, 0.1));
    ag_tensor *out[2];
    double *g[2];
    int threads = omp_get_max_threads();
    int64_t len[64];
    for (int b = 0; b < 64; b++) len[b] = 1 + b % 3;
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k ? 2 : 1);
        ag_zero_grad_(x);
        out[k] = ag_gru_forward(&m, x, &(ag_gru_args){.lengths = ids_of(AG_SHAPE(64), len)}, NULL);
        ag_backward(ag_sum(ag_mul(out[k], out[k]), 0, NULL, false), NULL);
        g[k] = values(x->grad);
    }
    omp_set_num_threads(threads);
    tu_assert_same(out[0], out[1], 0);
    tu_assert_values_(__FILE__, __LINE__, x->grad, g[0], ag_numel(x), 0);
    (void)g[1];
    ag_params_free(p);
}

/* ---- attention values ---- */

static ag_tensor *att_keys(ag_dtype dt) { /* (N,S,Hk) = (2,3,3), a transposed view */
    return ag_transpose(tu_seq(dt, AG_SHAPE(3, 2, 3), 0.7, 0.3), 0, 1);
}
static ag_tensor *att_mask(void) { return bool_of(AG_SHAPE(2, 3), (int[]){0, 0, 1, 0, 0, 0}); }

static void test_additive_attention_matches_torch_with_padding_mask(void **s) {
    /* a = AdditiveAttention(2, 3, 2); fill(a); keys = tu_seq((3,2,3), 0.7, 0.3).transpose(0, 1)
     * a(tu_seq((2,2), 1.1, 0.2), keys, tensor([[F,F,T],[F,F,F]])) */
    static const double ctx[] = {-0.190202671687, 0.183338442014, 0.470652621693,
                                 0.107031662617,  0.160989182051, 0.139230973641};
    static const double w[] = {0.618457441103, 0.381542558897, 0, 0.321558987997, 0.429669169698, 0.248771842305};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        ag_params *p = ag_params_new(dt);
        ag_additive_attention_module m = ag_additive_attention_new(p, "attn", 2, 3, 2, NULL);
        assert_string_equal(p->list[0]->name, "attn.W1.weight");
        assert_string_equal(p->list[2]->name, "attn.v.weight");
        tu_assert_shape(m.v.weight, 1, 2);
        tu_fill_params(p);
        ag_tensor *keys = att_keys(dt), *wt;
        ag_tensor *c = ag_additive_attention_forward(&m, tu_seq(dt, AG_SHAPE(2, 2), 1.1, 0.2), keys, NULL, att_mask(), &wt);
        tu_assert_shape(c, 2, 3);
        tu_assert_array(c, ctx, dt == AG_F32 ? 1e-6 : 1e-11);
        tu_assert_array(wt, w, dt == AG_F32 ? 1e-6 : 1e-11);
        /* precomputed key projection gives the same */
        ag_tensor *c2 = ag_additive_attention_forward(&m, tu_seq(dt, AG_SHAPE(2, 2), 1.1, 0.2), keys,
                                                      ag_additive_attention_keys(&m, keys), att_mask(), NULL);
        tu_assert_same(c2, c, 0);
        ag_params_free(p);
    }
}

static void test_dot_attention_matches_torch_plain_and_general(void **s) {
    /* DotAttention(3, 3, False)(tu_seq((2,3), 1.1, 0.2), keys, mask) and
     * d = DotAttention(2, 3, True); fill(d); d(tu_seq((2,2), 1.1, 0.2), keys, mask) */
    static const double ctx[] = {0.225071342969, 0.746015959185, 0.916097612974,
                                 -0.601153881657, -0.62329529561, -0.35229119278};
    static const double w[] = {0.944661367783, 0.0553386322172, 0, 0.196923619595, 0.041469330874, 0.761607049531};
    static const double gctx[] = {0.148834839299,   0.642718943024,   0.834322285084,
                                  -0.0941569065904, -0.0766261713381, -0.0230569503887};
    static const double gw[] = {0.884776458118, 0.115223541882, 0, 0.297587565981, 0.304729038657, 0.397683395361};
    ag_params *p = ag_params_new(AG_F64);
    ag_dot_attention_module dot = ag_dot_attention_new(NULL, "", 3, 3, false, NULL);
    ag_dot_attention_module gen = ag_dot_attention_new(p, "luong", 2, 3, true, NULL);
    assert_string_equal(p->list[0]->name, "luong.W.weight");
    tu_assert_shape(gen.weight, 2, 3);
    tu_fill_params(p);
    ag_tensor *wt;
    ag_tensor *c = ag_dot_attention_forward(&dot, tu_seq(AG_F64, AG_SHAPE(2, 3), 1.1, 0.2), att_keys(AG_F64), att_mask(), &wt);
    tu_assert_array(c, ctx, 1e-11);
    tu_assert_array(wt, w, 1e-11);
    c = ag_dot_attention_forward(&gen, tu_seq(AG_F64, AG_SHAPE(2, 2), 1.1, 0.2), att_keys(AG_F64), att_mask(), &wt);
    tu_assert_array(c, gctx, 1e-11);
    tu_assert_array(wt, gw, 1e-11);
    ag_params_free(p);
}

static void test_attention_fully_padded_row_gives_zero_context_and_grad(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_additive_attention_module m = ag_additive_attention_new(p, "", 2, 3, 2, NULL);
    ag_tensor *q = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 2), 1.1, 0.2)), *keys = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3, 3), 0.7, 0.3));
    ag_tensor *mask = bool_of(AG_SHAPE(2, 3), (int[]){1, 1, 1, 0, 1, 0}), *w;
    ag_tensor *c = ag_additive_attention_forward(&m, q, keys, NULL, mask, &w);
    ag_backward(ag_sum(c, 0, NULL, false), NULL);
    tu_assert_values(ag_select(c, 0, 0), 0, 0, 0, 0);
    tu_assert_values(ag_select(w, 0, 0), 0, 0, 0, 0);
    tu_assert_values(ag_select(q->grad, 0, 0), 0, 0, 0);
    tu_assert_same(ag_select(keys->grad, 0, 0), ag_zeros(AG_F64, AG_SHAPE(3, 3)), 0);
    ag_dot_attention_module d = ag_dot_attention_new(NULL, "", 3, 3, false, NULL);
    c = ag_dot_attention_forward(&d, ag_select(keys, 1, 0), keys, mask, &w);
    tu_assert_values(ag_select(c, 0, 0), 0, 0, 0, 0);
    ag_params_free(p);
}

/* ---- gradcheck ---- */

static ag_tensor *f_cell(int n, ag_tensor **in, void *ctx) {
    return ag_gru_cell(ag_transpose(in[0], 0, 1), in[1], in[2], in[3], in[4], in[5]);
}

static void test_gru_cell_passes_gradcheck(void **s) {
    ag_tensor *in[6] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 2), 0.5, 0)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 4), 0.8, 0.5)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(12, 3), 0.7, 0.1), 0.6)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(12, 4), 1.3, 0.2), 0.6)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(12), 0.9, 0.3)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(12), 1.1, 0.4))};
    tu_assert_gradcheck(f_cell, NULL, 6, in);
    in[1] = NULL; /* zero hx, no biases */
    in[4] = in[5] = NULL;
    tu_assert_gradcheck(f_cell, NULL, 6, in);
}

typedef struct {
    ag_gru_module m;
    ag_tensor *lengths;
} gru_ctx;

static ag_tensor *f_gru(int n, ag_tensor **in, void *ctx) { /* output and h_n, flattened together */
    gru_ctx *c = ctx;
    ag_tensor *hn, *y = ag_gru_forward(&c->m, in[0], &(ag_gru_args){.h0 = in[1], .lengths = c->lengths}, &hn);
    ag_tensor *parts[2] = {ag_reshape(y, AG_SHAPE(-1)), ag_reshape(hn, AG_SHAPE(-1))};
    return ag_cat(2, parts, 0);
}

static void test_gru_two_layers_bidirectional_with_lengths_passes_gradcheck(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_gru_config cfg = ag_gru_defaults(2, 3);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    cfg.batch_first = true;
    gru_ctx c = {ag_gru_new(p, "", &cfg, NULL), ids_of(AG_SHAPE(2), (int64_t[]){1, 3})};
    ag_tensor *in[64] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3, 2), 0.6, 0.2)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 2, 3), 0.45, 0.7))};
    int n = with_params(in, 2, p);
    tu_assert_gradcheck(f_gru, &c, n, in);
    ag_params_free(p);
}

typedef struct {
    ag_additive_attention_module add;
    ag_dot_attention_module dot;
    ag_tensor *mask;
} att_ctx;

static ag_tensor *f_additive(int n, ag_tensor **in, void *ctx) {
    att_ctx *c = ctx;
    ag_tensor *w, *ctxv = ag_additive_attention_forward(&c->add, in[0], ag_transpose(in[1], 0, 1), NULL, c->mask, &w);
    ag_tensor *parts[2] = {ag_reshape(ctxv, AG_SHAPE(-1)), ag_reshape(w, AG_SHAPE(-1))};
    return ag_cat(2, parts, 0);
}

static ag_tensor *f_dot(int n, ag_tensor **in, void *ctx) {
    att_ctx *c = ctx;
    ag_tensor *w, *ctxv = ag_dot_attention_forward(&c->dot, in[0], ag_transpose(in[1], 0, 1), c->mask, &w);
    ag_tensor *parts[2] = {ag_reshape(ctxv, AG_SHAPE(-1)), ag_reshape(w, AG_SHAPE(-1))};
    return ag_cat(2, parts, 0);
}

static void test_additive_and_dot_attention_pass_gradcheck_with_padding_mask(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    att_ctx c = {ag_additive_attention_new(p, "add", 2, 3, 4, NULL), ag_dot_attention_new(p, "dot", 2, 3, true, NULL),
                 bool_of(AG_SHAPE(2, 4), (int[]){0, 0, 1, 0, 1, 1, 1, 1})}; /* row 1 fully padded */
    ag_tensor *in[8] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 2), 1.1, 0.2)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 2, 3), 0.7, 0.3))};
    in[2] = c.add.W1.weight, in[3] = c.add.W2.weight, in[4] = c.add.v.weight;
    tu_assert_gradcheck(f_additive, &c, 5, in);
    in[2] = c.dot.weight;
    tu_assert_gradcheck(f_dot, &c, 3, in);
    c.dot = ag_dot_attention_new(NULL, "", 3, 3, false, NULL);
    in[0] = tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.4, 0.9));
    tu_assert_gradcheck(f_dot, &c, 2, in);
    ag_params_free(p);
}

/* ---- a GRU + additive-attention seq2seq model, gradchecked through all its parameters ---- */

enum { V = 6, E = 3, HE = 3, HD = 4, A = 3, NB = 2, SL = 4, TL = 3, PAD = 0 };

typedef struct {
    ag_embedding_module src_emb, tgt_emb;
    ag_gru_module enc;
    ag_linear_module bridge, out;
    ag_gru_cell_module dec;
    ag_additive_attention_module attn;
    ag_tensor *src, *lengths, *mask, *tgt_in[TL], *tgt_out;
} s2s;

static ag_tensor *f_seq2seq(int n, ag_tensor **in, void *ctx) {
    s2s *m = ctx;
    ag_tensor *hn, *enc = ag_gru_forward(&m->enc, ag_embedding_forward(&m->src_emb, m->src),
                                         &(ag_gru_args){.lengths = m->lengths}, &hn); /* (SL,NB,2HE) */
    ag_tensor *keys = ag_transpose(enc, 0, 1), *kp = ag_additive_attention_keys(&m->attn, keys);
    ag_tensor *last[2] = {ag_select(hn, 0, 0), ag_select(hn, 0, 1)};
    ag_tensor *st = ag_tanh(ag_linear_forward(&m->bridge, ag_cat(2, last, 1))), *logits[TL];
    for (int t = 0; t < TL; t++) { /* teacher forcing: the reference token of step t-1 goes in */
        ag_tensor *c = ag_additive_attention_forward(&m->attn, st, keys, kp, m->mask, NULL);
        ag_tensor *xin[2] = {ag_embedding_forward(&m->tgt_emb, m->tgt_in[t]), c};
        st = ag_gru_cell_forward(&m->dec, ag_cat(2, xin, 1), st);
        ag_tensor *o[2] = {st, c};
        logits[t] = ag_linear_forward(&m->out, ag_cat(2, o, 1)); /* (NB,V) */
    }
    ag_tensor *all = ag_reshape(ag_stack(TL, logits, 1), AG_SHAPE(NB * TL, V));
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD;
    return ag_cross_entropy(all, m->tgt_out, &lc);
}

static void test_gru_attention_seq2seq_passes_gradcheck_over_all_parameters(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_rng rng = ag_rng_new(7);
    s2s m;
    m.src_emb = ag_embedding_new(p, "src_emb", V, E, PAD, &rng);
    ag_gru_config cfg = ag_gru_defaults(E, HE);
    cfg.bidirectional = true;
    m.enc = ag_gru_new(p, "encoder", &cfg, &rng);
    m.bridge = ag_linear_new(p, "bridge", 2 * HE, HD, true, &rng);
    m.tgt_emb = ag_embedding_new(p, "tgt_emb", V, E, PAD, &rng);
    m.dec = ag_gru_cell_new(p, "decoder", E + 2 * HE, HD, true, &rng);
    m.attn = ag_additive_attention_new(p, "attn", HD, 2 * HE, A, &rng);
    m.out = ag_linear_new(p, "out", HD + 2 * HE, V, true, &rng);
    /* src (SL,NB): sequence 1 has 2 real tokens then padding */
    m.src = ids_of(AG_SHAPE(SL, NB), (int64_t[]){3, 2, 5, 4, 1, PAD, 2, PAD});
    m.lengths = ids_of(AG_SHAPE(NB), (int64_t[]){4, 2});
    m.mask = bool_of(AG_SHAPE(NB, SL), (int[]){0, 0, 0, 0, 0, 0, 1, 1});
    static const int64_t tin[TL][NB] = {{1, 1}, {4, 3}, {2, 5}}, tout[NB * TL] = {4, 2, 3, 3, 5, PAD};
    for (int t = 0; t < TL; t++) m.tgt_in[t] = ids_of(AG_SHAPE(NB), tin[t]);
    m.tgt_out = ids_of(AG_SHAPE(NB * TL), tout);
    ag_tensor *in[64];
    int n = with_params(in, 0, p);
    assert_true(p->numel > 400);
    ag_tensor *loss = f_seq2seq(n, in, &m);
    assert_true(isfinite(ag_item(loss)) && ag_item(loss) > 0);
    tu_assert_gradcheck(f_seq2seq, &m, n, in);
    ag_params_free(p);
}

/* ---- errors ---- */

static void test_gru_errors_name_the_op_and_shapes(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_gru_cell_module cell = ag_gru_cell_new(p, "c", 3, 4, true, NULL);
    assert_null(ag_gru_cell_forward(&cell, ag_zeros(AG_F32, AG_SHAPE(2, 5)), NULL));
    tu_assert_error("ag_gru_cell", "input (2,5)", "weight_ih (12,3)");
    assert_null(ag_gru_cell_forward(&cell, ag_zeros(AG_F32, AG_SHAPE(2, 3)), ag_zeros(AG_F32, AG_SHAPE(3, 4))));
    tu_assert_error("ag_gru_cell", "hx (3,4)");
    assert_null(ag_gru_cell_forward(&cell, ag_zeros(AG_F64, AG_SHAPE(2, 3)), NULL));
    tu_assert_error("ag_gru_cell", "weight_ih (12,3) is f32");

    ag_gru_config cfg = ag_gru_defaults(3, 4);
    cfg.bidirectional = true;
    ag_gru_module m = ag_gru_new(p, "g", &cfg, NULL);
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(5, 2, 3));
    assert_null(ag_gru_forward(&m, ag_zeros(AG_F32, AG_SHAPE(5, 2, 4)), NULL, NULL));
    tu_assert_error("ag_gru_forward", "input (5,2,4)", "(L,N,3)");
    assert_null(ag_gru_forward(&m, x, &(ag_gru_args){.h0 = ag_zeros(AG_F32, AG_SHAPE(1, 2, 4))}, NULL));
    tu_assert_error("ag_gru_forward", "h0 (1,2,4)", "(2,2,4)");
    assert_null(ag_gru_forward(&m, x, &(ag_gru_args){.lengths = ids_of(AG_SHAPE(2), (int64_t[]){5, 6})}, NULL));
    tu_assert_error("ag_gru_forward", "lengths (2)", "lengths[1] = 6");
    assert_null(ag_gru_forward(&m, x, &(ag_gru_args){.lengths = ids_of(AG_SHAPE(3), (int64_t[]){5, 5, 5})}, NULL));
    tu_assert_error("ag_gru_forward", "lengths (3)", "expected (2)");
    cfg.num_layers = 0;
    ag_gru_module bad = ag_gru_new(p, "bad", &cfg, NULL);
    tu_assert_error("ag_gru_new", "num_layers 0");
    assert_null(ag_gru_forward(&bad, x, NULL, NULL));
    tu_assert_error("ag_gru_forward", "not created");

    ag_additive_attention_module att = ag_additive_attention_new(p, "a", 4, 3, 2, NULL);
    ag_tensor *q = ag_zeros(AG_F32, AG_SHAPE(2, 4)), *k = ag_zeros(AG_F32, AG_SHAPE(2, 5, 3));
    assert_null(ag_additive_attention_forward(&att, q, ag_zeros(AG_F32, AG_SHAPE(2, 5, 4)), NULL, NULL, NULL));
    tu_assert_error("ag_additive_attention_forward", "query (2,4)", "keys (2,5,4)");
    assert_null(ag_additive_attention_forward(&att, q, k, NULL, ag_zeros(AG_BOOL, AG_SHAPE(2, 4)), NULL));
    tu_assert_error("ag_additive_attention_forward", "key_padding_mask (2,4)", "(2,5)");
    assert_null(ag_additive_scores(ag_zeros(AG_F32, AG_SHAPE(2, 5, 3)), ag_zeros(AG_F32, AG_SHAPE(2, 2)),
                                   ag_zeros(AG_F32, AG_SHAPE(1, 3))));
    tu_assert_error("ag_additive_scores", "keys_proj (2,5,3)", "query_proj (2,2)");
    ag_dot_attention_new(NULL, "d", 4, 3, false, NULL);
    tu_assert_error("ag_dot_attention_new", "query_size 4, key_size 3");
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gru_cell_parameters_match_torch_names_shapes_and_init, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_parameters_match_torch_state_dict_order_and_shapes, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_cell_matches_torch_on_transposed_input, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_bidirectional_with_lengths_matches_pack_padded_sequence, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_padded_sequence_equals_the_sequence_run_alone, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_unbatched_input_equals_a_batch_of_one, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_dropout_applies_between_layers_only_in_training, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_results_do_not_depend_on_thread_count, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_additive_attention_matches_torch_with_padding_mask, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_dot_attention_matches_torch_plain_and_general, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_attention_fully_padded_row_gives_zero_context_and_grad, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_cell_passes_gradcheck, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_two_layers_bidirectional_with_lengths_passes_gradcheck, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_additive_and_dot_attention_pass_gradcheck_with_padding_mask, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_attention_seq2seq_passes_gradcheck_over_all_parameters, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_gru_errors_name_the_op_and_shapes, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
