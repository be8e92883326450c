/* Parity adapters for GRUCell, GRU (nn/recurrent/gru.h) and the attention modules of
 * nn/attention/seq2seq_attention.h (cases: gen_gru.py). */
#include "parity.h"

/* in0 input, in1 hx (may be absent); attrs input_size, hidden_size, bias */
static int gru_cell(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_gru_cell_module m = ag_gru_cell_new(pc_params(c), "", pc_int(c, "input_size", 0), pc_int(c, "hidden_size", 0),
                                      pc_bool(c, "bias", true), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_gru_cell_forward(&m, pc_in(c, 0), c->nin > 1 ? c->in[1] : NULL);
    return 1;
}

/* in0 input, in1 h0, in2 lengths (each of the last two may be absent); outputs output, h_n */
static int gru(parity_case *c, ag_tensor **out) {
    ag_gru_config cfg = ag_gru_defaults(pc_int(c, "input_size", 0), pc_int(c, "hidden_size", 0));
    cfg.num_layers = (int)pc_int(c, "num_layers", 1);
    cfg.bias = pc_bool(c, "bias", true);
    cfg.batch_first = pc_bool(c, "batch_first", false);
    cfg.bidirectional = pc_bool(c, "bidirectional", false);
    ag_rng r = ag_rng_new(0);
    ag_gru_module m = ag_gru_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_gru_args a = {.h0 = c->nin > 1 ? c->in[1] : NULL, .lengths = c->nin > 2 ? c->in[2] : NULL};
    out[0] = ag_gru_forward(&m, pc_in(c, 0), &a, &out[1]);
    return 2;
}

/* in0 query, in1 keys, in2 key_padding_mask (may be absent); outputs context, weights */
static int additive_attention(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_additive_attention_module m = ag_additive_attention_new(pc_params(c), "", pc_int(c, "query_size", 0),
                                                          pc_int(c, "key_size", 0), pc_int(c, "attn_size", 0), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_additive_attention_forward(&m, pc_in(c, 0), pc_in(c, 1), NULL, c->nin > 2 ? c->in[2] : NULL, &out[1]);
    return 2;
}

static int dot_attention(parity_case *c, ag_tensor **out) {
    ag_rng r = ag_rng_new(0);
    ag_dot_attention_module m = ag_dot_attention_new(pc_params(c), "", pc_int(c, "query_size", 0), pc_int(c, "key_size", 0),
                                                pc_bool(c, "general", false), &r);
    if (!pc_load_params(c)) return -1;
    out[0] = ag_dot_attention_forward(&m, pc_in(c, 0), pc_in(c, 1), c->nin > 2 ? c->in[2] : NULL, &out[1]);
    return 2;
}

const parity_op parity_gru_ops[] = {
    {"gru_cell", gru_cell},
    {"gru", gru},
    {"additive_attention", additive_attention},
    {"dot_attention", dot_attention},
    {NULL, NULL},
};
