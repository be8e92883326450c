/* Parity adapters for the transformer layers and stacks (cases: gen_transformer.py). Every
 * module is built with prefix "" so the parameters carry torch's state_dict names
 * ("self_attn.in_proj_weight", "layers.1.norm2.bias", "encoder.norm.weight", ...). */
#include <string.h>

#include "parity.h"

static ag_transformer_config config(parity_case *c) {
    ag_transformer_config cfg = ag_transformer_defaults(pc_int(c, "d_model", 0), pc_int(c, "nhead", 1));
    cfg.dim_feedforward = pc_int(c, "dim_feedforward", 2048);
    cfg.dropout = pc_double(c, "dropout", 0.1);
    char act[16];
    pc_str(c, "activation", act, sizeof act, "relu");
    cfg.activation = strcmp(act, "gelu") == 0 ? AG_ACTIVATION_GELU : AG_ACTIVATION_RELU;
    if (strcmp(act, "gelu_tanh") == 0) cfg.activation = AG_ACTIVATION_GELU_TANH;
    cfg.layer_norm_eps = pc_double(c, "layer_norm_eps", 1e-5);
    cfg.batch_first = pc_bool(c, "batch_first", false);
    cfg.norm_first = pc_bool(c, "norm_first", false);
    cfg.recompute_attention = pc_bool(c, "recompute_attention", false);
    cfg.skip_padding = pc_bool(c, "skip_padding", false);
    return cfg;
}

/* optional input k (NULL when absent or marked none) */
static ag_tensor *opt(parity_case *c, int k) { return k < c->nin ? c->in[k] : NULL; }

/* in0 src, in1 src_mask, in2 src_key_padding_mask */
static ag_transformer_args encoder_args(parity_case *c) {
    return (ag_transformer_args){.src_mask = opt(c, 1), .src_key_padding_mask = opt(c, 2),
                                 .src_is_causal = pc_bool(c, "src_is_causal", false)};
}

/* in0 tgt, in1 memory, in2 tgt_mask, in3 memory_mask, in4 tgt_key_padding_mask,
 * in5 memory_key_padding_mask */
static ag_transformer_args decoder_args(parity_case *c) {
    return (ag_transformer_args){.tgt_mask = opt(c, 2), .memory_mask = opt(c, 3), .tgt_key_padding_mask = opt(c, 4),
                                 .memory_key_padding_mask = opt(c, 5),
                                 .tgt_is_causal = pc_bool(c, "tgt_is_causal", false)};
}

static int encoder_layer(parity_case *c, ag_tensor **out) {
    ag_transformer_config cfg = config(c);
    ag_rng r = ag_rng_new(0);
    ag_transformer_encoder_layer_module m = ag_transformer_encoder_layer_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_transformer_args a = encoder_args(c);
    out[0] = ag_transformer_encoder_layer_forward(&m, pc_in(c, 0), &a);
    return 1;
}

static int decoder_layer(parity_case *c, ag_tensor **out) {
    ag_transformer_config cfg = config(c);
    ag_rng r = ag_rng_new(0);
    ag_transformer_decoder_layer_module m = ag_transformer_decoder_layer_new(pc_params(c), "", &cfg, &r);
    if (!pc_load_params(c)) return -1;
    ag_transformer_args a = decoder_args(c);
    out[0] = ag_transformer_decoder_layer_forward(&m, pc_in(c, 0), pc_in(c, 1), &a);
    return 1;
}

/* the stacks are large structs: static, as the runner runs one case at a time */
static int encoder(parity_case *c, ag_tensor **out) {
    static ag_transformer_encoder_module m;
    ag_transformer_config cfg = config(c);
    ag_rng r = ag_rng_new(0);
    m = ag_transformer_encoder_new(pc_params(c), "", &cfg, (int)pc_int(c, "num_layers", 1), pc_bool(c, "norm", false),
                                   &r);
    if (!pc_load_params(c)) return -1;
    ag_transformer_args a = encoder_args(c);
    out[0] = ag_transformer_encoder_forward(&m, pc_in(c, 0), &a);
    return 1;
}

static int decoder(parity_case *c, ag_tensor **out) {
    static ag_transformer_decoder_module m;
    ag_transformer_config cfg = config(c);
    ag_rng r = ag_rng_new(0);
    m = ag_transformer_decoder_new(pc_params(c), "", &cfg, (int)pc_int(c, "num_layers", 1), pc_bool(c, "norm", false),
                                   &r);
    if (!pc_load_params(c)) return -1;
    ag_transformer_args a = decoder_args(c);
    out[0] = ag_transformer_decoder_forward(&m, pc_in(c, 0), pc_in(c, 1), &a);
    return 1;
}

/* in0 src, in1 tgt, in2 src_mask, in3 tgt_mask, in4 memory_mask, in5 src_key_padding_mask,
 * in6 tgt_key_padding_mask, in7 memory_key_padding_mask */
static int transformer(parity_case *c, ag_tensor **out) {
    static ag_transformer_module m;
    ag_transformer_config cfg = config(c);
    ag_rng r = ag_rng_new(0);
    m = ag_transformer_new(pc_params(c), "", &cfg, (int)pc_int(c, "num_encoder_layers", 1),
                           (int)pc_int(c, "num_decoder_layers", 1), &r);
    if (!pc_load_params(c)) return -1;
    ag_transformer_args a = {.src_mask = opt(c, 2), .tgt_mask = opt(c, 3), .memory_mask = opt(c, 4),
                             .src_key_padding_mask = opt(c, 5), .tgt_key_padding_mask = opt(c, 6),
                             .memory_key_padding_mask = opt(c, 7)};
    out[0] = ag_transformer_forward(&m, pc_in(c, 0), pc_in(c, 1), &a);
    return 1;
}

const parity_op parity_transformer_ops[] = {
    {"transformer_encoder_layer", encoder_layer},
    {"transformer_decoder_layer", decoder_layer},
    {"transformer_encoder", encoder},
    {"transformer_decoder", decoder},
    {"transformer", transformer},
    {NULL, NULL},
};
