/* LSTMCell, LSTM, RNNCell and RNN (nn/recurrent/lstm.h, rnn.h).
 *
 * Expected values were computed with PyTorch 1.13 (/usr/bin/python3) in float64 and pasted as
 * literals, with the inputs and parameters of tests/test_nn_gru.c: inputs are
 * tu_seq(shape, a, c)[i] = sin(a*i + c); parameter k (in the module's order) is
 * tu_seq(shape, 0.3 + 0.1k, 0.1k) * 0.5 (fill(m) there). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static ag_tensor *ids_of(int ndim, const int64_t *shape, const int64_t *v) {
    return ag_from_buffer(AG_I64, ndim, shape, v);
}

static double *values(const ag_tensor *t) {
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(ag_numel(t) + 1));
    ag_to_buffer(t, AG_F64, v);
    return v;
}

static int with_params(ag_tensor **in, int n, const ag_params *p) {
    for (int k = 0; k < p->count; k++) in[n++] = p->list[k];
    return n;
}

/* output, h_n and c_n (those not NULL) flattened into one vector */
static ag_tensor *flat3(ag_tensor *a, ag_tensor *b, ag_tensor *c) {
    ag_tensor *parts[3];
    int n = 0;
    ag_tensor *all[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (all[i]) parts[n++] = ag_reshape(all[i], AG_SHAPE(-1));
    return ag_cat(n, parts, 0);
}

/* ---- parameters ---- */

static void test_lstm_and_rnn_parameters_match_torch_state_dict_order_and_shapes(void **s) {
    /* nn.LSTM(3, 4, num_layers=2, bidirectional=True): 16 tensors, 4H = 16 rows, layer 1 reads 8 */
    ag_params *p = ag_params_new(AG_F32);
    ag_lstm_config cfg = ag_lstm_defaults(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    ag_lstm_module m = ag_lstm_new(p, "enc", &cfg, NULL);
    assert_int_equal(p->count, 16);
    assert_string_equal(p->list[0]->name, "enc.weight_ih_l0");
    assert_string_equal(p->list[7]->name, "enc.bias_hh_l0_reverse");
    assert_string_equal(p->list[12]->name, "enc.weight_ih_l1_reverse");
    tu_assert_shape(p->list[0], 16, 3);
    tu_assert_shape(p->list[1], 16, 4);
    tu_assert_shape(p->list[2], 16);
    tu_assert_shape(p->list[12], 16, 8);
    assert_ptr_equal(m.layer[1][1].weight_ih, p->list[12]);
    double *v = values(p->flat), lo = 1, hi = -1; /* U(-1/√4, 1/√4) */
    for (int64_t i = 0; i < p->numel; i++) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    assert_true(lo >= -0.5 && hi <= 0.5 && lo < -0.45 && hi > 0.45);
    ag_params_free(p);
    /* nn.LSTMCell(3, 4, bias=False), nn.RNNCell(3, 4), nn.RNN(3, 4, bias=False): H rows */
    p = ag_params_new(AG_F32);
    ag_lstm_cell_module c = ag_lstm_cell_new(p, "dec", 3, 4, false, NULL);
    assert_int_equal(p->count, 2);
    assert_string_equal(p->list[1]->name, "dec.weight_hh");
    assert_null(c.bias_ih);
    ag_rnn_cell_module rc = ag_rnn_cell_new(p, "rc", 3, 4, true, AG_RNN_RELU, NULL);
    assert_int_equal(p->count, 6);
    tu_assert_shape(rc.w.weight_ih, 4, 3);
    tu_assert_shape(rc.w.bias_hh, 4);
    ag_rnn_config rcfg = ag_rnn_defaults(3, 4);
    assert_int_equal(rcfg.nonlinearity, AG_RNN_TANH);
    rcfg.layers.bias = false;
    rcfg.layers.bidirectional = true;
    ag_rnn_new(p, "rnn", &rcfg, NULL);
    assert_int_equal(p->count, 10);
    assert_string_equal(p->list[9]->name, "rnn.weight_hh_l0_reverse");
    tu_assert_shape(p->list[9], 4, 4);
    ag_params_free(p);
}

/* ---- values ---- */

static void test_lstm_cell_matches_torch_on_transposed_input(void **s) {
    /* m = nn.LSTMCell(3, 2); fill(m)
     * m(tu_seq((3,2), 0.5, 0).t(), (tu_seq((2,2), 0.8, 0.5), tu_seq((2,2), 0.65, 0.25))) */
    static const double want_h[] = {-0.00407279038276, -0.0688285501689, 0.123744267811, -0.0461352693059};
    static const double want_c[] = {-0.0200757131077, -0.194084608687, 0.768606260451, -0.138131900644};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        double tol = dt == AG_F32 ? 1e-6 : 1e-11;
        ag_params *p = ag_params_new(dt);
        ag_lstm_cell_module m = ag_lstm_cell_new(p, "", 3, 2, true, NULL);
        tu_fill_params(p);
        ag_tensor *x = ag_transpose(tu_seq(dt, AG_SHAPE(3, 2), 0.5, 0), 0, 1), *c1;
        ag_tensor *h0 = tu_seq(dt, AG_SHAPE(2, 2), 0.8, 0.5), *c0 = tu_seq(dt, AG_SHAPE(2, 2), 0.65, 0.25);
        ag_tensor *h1 = ag_lstm_cell_forward(&m, x, h0, c0, &c1);
        tu_assert_shape(h1, 2, 2);
        tu_assert_array(h1, want_h, tol);
        tu_assert_array(c1, want_c, tol);
        /* unbatched: row 1 alone */
        h1 = ag_lstm_cell_forward(&m, ag_select(x, 0, 1), ag_select(h0, 0, 1), ag_select(c0, 0, 1), &c1);
        tu_assert_shape(h1, 2);
        tu_assert_values(h1, tol, want_h[2], want_h[3]);
        tu_assert_values(c1, tol, want_c[2], want_c[3]);
        ag_params_free(p);
    }
}

static void test_lstm_bidirectional_with_lengths_matches_pack_padded_sequence(void **s) {
    /* g = nn.LSTM(2, 3, bidirectional=True); fill(g); x = tu_seq((3,2,2), 0.6, 0.2)
     * o, (hn, cn) = g(pack_padded_sequence(x, tensor([3,1]), enforce_sorted=False),
     *                 (tu_seq((2,2,3), 0.45, 0.7), tu_seq((2,2,3), 0.55, 0.3)))
     * o = pad_packed_sequence(o, total_length=3)[0] */
    static const double want_out[] = {
        0.0492484821679,  -0.061855207591, -0.172742855832,  0.0298244759261, 0.153254931041,  0.139815125662,
        0.0552320974474,  -0.111087260651, -0.509251921997,  -0.00185231114018, 0.174748129408, -0.0460544864222,
        0.0405925492107,  -0.201972346385, -0.30326604008,   0.0134736406233, 0.209733716528,  0.126205354368,
        0,                0,               0,                0,               0,               0,
        -0.000589269876291, -0.154966811383, -0.114425123526, -0.121522131681, 0.0487745471803, 0.0789657957423,
        0,                0,               0,                0,               0,               0};
    static const double want_hn[] = {-0.000589269876291, -0.154966811383, -0.114425123526, 0.0552320974474,
                                     -0.111087260651,    -0.509251921997, 0.0298244759261,  0.153254931041,
                                     0.139815125662,     -0.00185231114018, 0.174748129408, -0.0460544864222};
    static const double want_cn[] = {-0.00120215812783, -0.395815644611, -0.323044432652, 0.62812600096,
                                     -0.361592725188,   -0.828818853386, 0.0495329829424, 0.35443307159,
                                     0.595345395731,    -0.00226139497917, 0.337677518587, -0.354086610962};
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F32 : AG_F64;
        double tol = dt == AG_F32 ? 1e-6 : 1e-11;
        ag_params *p = ag_params_new(dt);
        ag_lstm_config cfg = ag_lstm_defaults(2, 3);
        cfg.bidirectional = true;
        ag_lstm_module m = ag_lstm_new(p, "", &cfg, NULL);
        tu_fill_params(p);
        ag_tensor *x = tu_seq(dt, AG_SHAPE(3, 2, 2), 0.6, 0.2), *hn = NULL, *cn = NULL;
        ag_lstm_args a = {.h0 = tu_seq(dt, AG_SHAPE(2, 2, 3), 0.45, 0.7), .c0 = tu_seq(dt, AG_SHAPE(2, 2, 3), 0.55, 0.3),
                          .lengths = ids_of(AG_SHAPE(2), (int64_t[]){3, 1})};
        ag_tensor *y = ag_lstm_forward(&m, x, &a, &hn, &cn);
        tu_assert_shape(y, 3, 2, 6);
        tu_assert_shape(hn, 2, 2, 3);
        tu_assert_shape(cn, 2, 2, 3);
        tu_assert_array(y, want_out, tol);
        tu_assert_array(hn, want_hn, tol);
        tu_assert_array(cn, want_cn, tol);
        /* batch_first on a transposed (non-contiguous) input gives the transposed output */
        m.cfg.batch_first = true;
        ag_tensor *yb = ag_lstm_forward(&m, ag_transpose(x, 0, 1), &a, &hn, &cn);
        tu_assert_shape(yb, 2, 3, 6);
        tu_assert_same(ag_transpose(yb, 0, 1), y, 0);
        tu_assert_array(cn, want_cn, tol);
        ag_params_free(p);
    }
}

static void test_rnn_cells_and_relu_rnn_with_lengths_match_torch(void **s) {
    /* r = nn.RNNCell(3, 2, nonlinearity=nl); fill(r); r(tu_seq((3,2), 0.5, 0).t(), tu_seq((2,2), 0.8, 0.5)) */
    static const double tanh_h[] = {0.70794555487, 0.976284368026, 0.580943595607, 0.97149518741};
    static const double relu_h[] = {0.883053128244, 2.21141968562, 0.66388581631, 2.11823728821};
    /* r = nn.RNN(2, 3, num_layers=2, nonlinearity='relu'); fill(r); the input, h0 and lengths of
     * the LSTM case above (h0 tu_seq((2,2,3), 0.45, 0.7)) */
    static const double want_out[] = {1.82630702416, 1.25316826067, 0, 1.84035106002, 0.771640632162, 0,
                                      4.11487858212, 0.674066045968, 0, 0, 0, 0,
                                      4.06832435681, 1.39201947479, 0, 0, 0, 0};
    static const double want_hn[] = {1.61074578514, 3.15443266193, 0.890284301373, 0.64378986596,
                                     2.1545660825,  2.19961936423, 4.06832435681,  1.39201947479,
                                     0,             1.84035106002, 0.771640632162, 0};
    ag_params *p = ag_params_new(AG_F64);
    ag_rnn_cell_module t = ag_rnn_cell_new(p, "", 3, 2, true, AG_RNN_TANH, NULL);
    tu_fill_params(p);
    ag_params *q = ag_params_new(AG_F64);
    ag_rnn_cell_module r = ag_rnn_cell_new(q, "", 3, 2, true, AG_RNN_RELU, NULL);
    tu_fill_params(q);
    ag_tensor *x = ag_transpose(tu_seq(AG_F64, AG_SHAPE(3, 2), 0.5, 0), 0, 1), *h = tu_seq(AG_F64, AG_SHAPE(2, 2), 0.8, 0.5);
    tu_assert_array(ag_rnn_cell_forward(&t, x, h), tanh_h, 1e-11);
    tu_assert_array(ag_rnn_cell_forward(&r, x, h), relu_h, 1e-11);
    tu_assert_array(ag_rnn_tanh_cell(x, h, t.w.weight_ih, t.w.weight_hh, t.w.bias_ih, t.w.bias_hh), tanh_h, 1e-11);
    ag_params_free(p);
    ag_params_free(q);
    p = ag_params_new(AG_F64);
    ag_rnn_config cfg = ag_rnn_defaults(2, 3);
    cfg.layers.num_layers = 2;
    cfg.nonlinearity = AG_RNN_RELU;
    ag_rnn_module m = ag_rnn_new(p, "", &cfg, NULL);
    tu_fill_params(p);
    ag_tensor *hn, *y = ag_rnn_forward(&m, tu_seq(AG_F64, AG_SHAPE(3, 2, 2), 0.6, 0.2),
                                       &(ag_rnn_args){.h0 = tu_seq(AG_F64, AG_SHAPE(2, 2, 3), 0.45, 0.7),
                                                      .lengths = ids_of(AG_SHAPE(2), (int64_t[]){3, 1})},
                                       &hn);
    tu_assert_array(y, want_out, 1e-11);
    tu_assert_array(hn, want_hn, 1e-11);
    ag_params_free(p);
}

/* A padded sequence gives what the same LSTM gives on that sequence alone, cut to its length;
 * a length of 0 leaves h0 and c0 as they are. */
static void test_lstm_padded_sequence_equals_the_sequence_run_alone(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_lstm_config cfg = ag_lstm_defaults(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    ag_lstm_module m = ag_lstm_new(p, "", &cfg, NULL);
    ag_tensor *x = tu_seq(AG_F64, AG_SHAPE(5, 3, 3), 0.37, 0.1), *h0 = tu_seq(AG_F64, AG_SHAPE(4, 3, 4), 0.71, 0.3);
    ag_tensor *c0 = tu_seq(AG_F64, AG_SHAPE(4, 3, 4), 0.53, 0.9);
    int64_t len[3] = {2, 5, 0};
    ag_tensor *hn, *cn;
    ag_tensor *y = ag_lstm_forward(&m, x, &(ag_lstm_args){.h0 = h0, .c0 = c0, .lengths = ids_of(AG_SHAPE(3), len)}, &hn,
                                   &cn);
    for (int b = 0; b < 3; b++) {
        ag_tensor *yb = ag_select(y, 1, b);
        if (len[b] > 0) {
            ag_tensor *xa = ag_narrow(ag_narrow(x, 1, b, 1), 0, 0, len[b]), *ha, *ca;
            ag_lstm_args a = {.h0 = ag_narrow(h0, 1, b, 1), .c0 = ag_narrow(c0, 1, b, 1)};
            ag_tensor *ya = ag_lstm_forward(&m, xa, &a, &ha, &ca);
            tu_assert_same(ag_narrow(yb, 0, 0, len[b]), ya, 1e-14);
            tu_assert_same(ag_select(hn, 1, b), ha, 1e-14);
            tu_assert_same(ag_select(cn, 1, b), ca, 1e-14);
        } else {
            tu_assert_same(ag_select(hn, 1, b), ag_select(h0, 1, b), 0);
            tu_assert_same(ag_select(cn, 1, b), ag_select(c0, 1, b), 0);
        }
        for (int64_t t = len[b]; t < 5; t++) tu_assert_same(ag_select(yb, 0, t), ag_zeros(AG_F64, AG_SHAPE(8)), 0);
    }
    ag_params_free(p);
}

/* ---- gradcheck ---- */

static ag_tensor *f_lstm_cell(int n, ag_tensor **in, void *ctx) {
    ag_tensor *c1, *h1 = ag_lstm_cell(ag_transpose(in[0], 0, 1), in[1], in[2], in[3], in[4], in[5], in[6], &c1);
    return flat3(h1, c1, NULL);
}

static void test_lstm_cell_passes_gradcheck(void **s) {
    ag_tensor *in[7] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 2), 0.5, 0)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.8, 0.5)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3), 0.65, 0.25)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(12, 3), 0.7, 0.1), 0.6)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(12, 3), 1.3, 0.2), 0.6)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(12), 0.9, 0.3)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(12), 1.1, 0.4))};
    tu_assert_gradcheck(f_lstm_cell, NULL, 7, in);
    in[1] = in[2] = NULL; /* zero states, no biases */
    in[5] = in[6] = NULL;
    tu_assert_gradcheck(f_lstm_cell, NULL, 7, in);
}

static ag_tensor *f_rnn_cells(int n, ag_tensor **in, void *ctx) { /* tanh and relu of the same weights */
    ag_tensor *x = ag_transpose(in[0], 0, 1);
    return flat3(ag_rnn_tanh_cell(x, in[1], in[2], in[3], in[4], in[5]),
                 ag_rnn_relu_cell(x, in[1], in[2], in[3], in[4], in[5]), NULL);
}

static void test_rnn_cells_pass_gradcheck(void **s) {
    ag_tensor *in[6] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 4), 0.5, 0)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 3), 0.8, 0.5)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(3, 3), 0.7, 0.1), 0.6)),
                        tu_leaf(ag_mul_scalar(tu_seq(AG_F64, AG_SHAPE(3, 3), 1.3, 0.2), 0.6)),
                        tu_leaf(tu_seq(AG_F64, AG_SHAPE(3), 0.9, 0.3)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(3), 1.1, 0.4))};
    /* some relu pre-activations are negative (zero output and gradient), none near the kink */
    ag_tensor *pre = ag_add(ag_linear(ag_transpose(in[0], 0, 1), in[2], in[4]), ag_linear(in[1], in[3], in[5]));
    double *v = values(pre), least = 1;
    int negative = 0;
    for (int64_t i = 0; i < ag_numel(pre); i++) least = fmin(least, fabs(v[i])), negative += v[i] < 0;
    assert_true(negative > 0 && least > 1e-3);
    tu_assert_gradcheck(f_rnn_cells, NULL, 6, in);
}

typedef struct {
    ag_lstm_module lstm;
    ag_rnn_module rnn;
    ag_tensor *lengths;
} seq_ctx;

static ag_tensor *f_lstm(int n, ag_tensor **in, void *ctx) {
    seq_ctx *c = ctx;
    ag_tensor *hn, *cn;
    ag_tensor *y = ag_lstm_forward(&c->lstm, in[0], &(ag_lstm_args){.h0 = in[1], .c0 = in[2], .lengths = c->lengths},
                                   &hn, &cn);
    return flat3(y, hn, cn);
}

static void test_lstm_two_layers_bidirectional_with_lengths_passes_gradcheck(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_lstm_config cfg = ag_lstm_defaults(2, 3);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    cfg.batch_first = true;
    seq_ctx c = {.lstm = ag_lstm_new(p, "", &cfg, NULL), .lengths = ids_of(AG_SHAPE(2), (int64_t[]){1, 3})};
    ag_tensor *in[64] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(2, 3, 2), 0.6, 0.2)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 2, 3), 0.45, 0.7)),
                         tu_leaf(tu_seq(AG_F64, AG_SHAPE(4, 2, 3), 0.55, 0.3))};
    int n = with_params(in, 3, p);
    tu_assert_gradcheck(f_lstm, &c, n, in);
    ag_params_free(p);
}

static ag_tensor *f_rnn(int n, ag_tensor **in, void *ctx) {
    seq_ctx *c = ctx;
    ag_tensor *hn, *y = ag_rnn_forward(&c->rnn, in[0], &(ag_rnn_args){.h0 = in[1], .lengths = c->lengths}, &hn);
    return flat3(y, hn, NULL);
}

static void test_rnn_two_layers_bidirectional_with_lengths_passes_gradcheck(void **s) {
    for (int k = 0; k < 2; k++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_rnn_config cfg = ag_rnn_defaults(2, 3);
        cfg.layers.num_layers = 2;
        cfg.layers.bidirectional = k == 0;
        cfg.nonlinearity = k ? AG_RNN_RELU : AG_RNN_TANH;
        seq_ctx c = {.rnn = ag_rnn_new(p, "", &cfg, NULL), .lengths = ids_of(AG_SHAPE(2), (int64_t[]){3, 2})};
        tu_fill_params(p);
        ag_tensor *in[64] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 2, 2), 0.6, 0.2)),
                             tu_leaf(tu_seq(AG_F64, AG_SHAPE(2 * (k ? 1 : 2), 2, 3), 0.45, 0.7))};
        int n = with_params(in, 2, p);
        tu_assert_gradcheck(f_rnn, &c, n, in);
        ag_params_free(p);
    }
}

/* ---- training: no allocation in steady state ---- */

static void test_lstm_training_step_allocates_nothing_after_warm_up(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_rng rng = ag_rng_new(3);
    ag_lstm_config cfg = ag_lstm_defaults(4, 8);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    cfg.batch_first = true;
    cfg.dropout = 0.2;
    ag_lstm_module enc = ag_lstm_new(p, "encoder", &cfg, &rng);
    ag_lstm_cell_module dec = ag_lstm_cell_new(p, "decoder", 16, 8, true, &rng);
    ag_arena *step = ag_arena_new(4096), *prev = ag_arena_use(step); /* must grow, then settle */
    uint64_t after_warmup = 0;
    double first = 0, last = 0;
    for (int it = 0; it < 12; it++) {
        if (it == 3) after_warmup = ag_alloc_count();
        ag_params_zero_grad(p);
        ag_tensor *x = tu_seq(AG_F32, AG_SHAPE(3, 5, 4), 0.37, 0.1), *hn, *cn;
        ag_tensor *y = ag_lstm_forward(&enc, x, &(ag_lstm_args){.lengths = ids_of(AG_SHAPE(3), (int64_t[]){5, 2, 4}),
                                                                .training = true, .rng = &rng},
                                       &hn, &cn);
        ag_tensor *c, *h = ag_lstm_cell_forward(&dec, ag_select(y, 1, 0), ag_select(hn, 0, 3), NULL, &c);
        ag_tensor *loss = ag_mean(ag_mul(ag_sub(h, ag_full(AG_F32, AG_SHAPE(3, 8), 0.5)), ag_add(h, c)), 0, NULL, false);
        ag_backward(loss, NULL);
        *(it ? &last : &first) = ag_item(loss);
        float *w = (float *)p->data, *g = (float *)p->grad;
        for (int64_t i = 0; i < p->numel; i++) w[i] -= 0.1f * g[i];
        ag_arena_reset(step);
    }
    assert_int_equal(ag_alloc_count(), after_warmup);
    assert_true(last < first); /* the steps do train */
    ag_arena_use(prev);
    ag_arena_free(step);
    ag_params_free(p);
}

/* ---- errors ---- */

static void test_lstm_and_rnn_errors_name_the_op_and_shapes(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_lstm_cell_module cell = ag_lstm_cell_new(p, "c", 3, 4, true, NULL);
    ag_tensor *c1 = ag_zeros(AG_F32, AG_SHAPE(1));
    assert_null(ag_lstm_cell_forward(&cell, ag_zeros(AG_F32, AG_SHAPE(2, 5)), NULL, NULL, &c1));
    assert_null(c1);
    tu_assert_error("ag_lstm_cell", "input (2,5)", "weight_ih (16,3)", "(4H,in)");
    assert_null(ag_lstm_cell_forward(&cell, ag_zeros(AG_F32, AG_SHAPE(2, 3)), NULL, ag_zeros(AG_F32, AG_SHAPE(3, 4)), NULL));
    tu_assert_error("ag_lstm_cell", "cx (3,4)", "hx and cx like (N,H)");
    assert_null(ag_lstm_cell_forward(NULL, ag_zeros(AG_F32, AG_SHAPE(2, 3)), NULL, NULL, NULL));
    tu_assert_error("ag_lstm_cell_forward", "ag_lstm_cell_new failed?");

    ag_lstm_config cfg = ag_lstm_defaults(3, 4);
    cfg.bidirectional = true;
    ag_lstm_module m = ag_lstm_new(p, "l", &cfg, NULL);
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(5, 2, 3)), *hn = x;
    assert_null(ag_lstm_forward(&m, x, &(ag_lstm_args){.c0 = ag_zeros(AG_F32, AG_SHAPE(2, 3, 4))}, &hn, NULL));
    assert_null(hn);
    tu_assert_error("ag_lstm_forward", "c0 (2,3,4)", "expected c0 (2,2,4)");
    assert_null(ag_lstm_forward(&m, ag_zeros(AG_F64, AG_SHAPE(5, 2, 3)), NULL, NULL, NULL));
    tu_assert_error("ag_lstm_forward", "input (5,2,3) is f64");
    cfg.num_layers = 9;
    ag_lstm_module bad = ag_lstm_new(p, "bad", &cfg, NULL);
    tu_assert_error("ag_lstm_new", "num_layers 9", "1..8 layers");
    assert_null(ag_lstm_forward(&bad, x, NULL, NULL, NULL));
    tu_assert_error("ag_lstm_forward", "ag_lstm_new failed?");

    ag_rnn_config rc = ag_rnn_defaults(3, 4);
    rc.nonlinearity = (ag_rnn_nonlinearity)7;
    ag_rnn_module r = ag_rnn_new(p, "r", &rc, NULL);
    tu_assert_error("ag_rnn_new", "nonlinearity 7");
    assert_null(r.layer[0][0].weight_ih);
    rc.nonlinearity = AG_RNN_RELU;
    r = ag_rnn_new(p, "r", &rc, NULL);
    assert_null(ag_rnn_forward(&r, x, &(ag_rnn_args){.lengths = ids_of(AG_SHAPE(2), (int64_t[]){5, 6})}, NULL));
    tu_assert_error("ag_rnn_forward", "lengths[1] = 6");
    assert_null(ag_rnn_relu_cell(ag_zeros(AG_F32, AG_SHAPE(2, 3)), NULL, r.layer[0][0].weight_ih,
                                 ag_zeros(AG_F32, AG_SHAPE(8, 4)), NULL, NULL));
    tu_assert_error("ag_rnn_relu_cell", "weight_hh (8,4)", "(1H,H)");
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lstm_and_rnn_parameters_match_torch_state_dict_order_and_shapes, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_cell_matches_torch_on_transposed_input, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_bidirectional_with_lengths_matches_pack_padded_sequence, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_rnn_cells_and_relu_rnn_with_lengths_match_torch, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_padded_sequence_equals_the_sequence_run_alone, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_cell_passes_gradcheck, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_rnn_cells_pass_gradcheck, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_two_layers_bidirectional_with_lengths_passes_gradcheck, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_rnn_two_layers_bidirectional_with_lengths_passes_gradcheck, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_training_step_allocates_nothing_after_warm_up, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_lstm_and_rnn_errors_name_the_op_and_shapes, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
