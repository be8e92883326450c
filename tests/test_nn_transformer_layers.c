/* Transformer encoder/decoder layers, stacks and nn.Transformer: parameter names, shapes, order
 * and initialisation against torch 1.13's state_dict, values against torch (contiguous,
 * transposed, batch_first and unbatched inputs; decoder steps and their cache), and misuse
 * reporting. Expected numbers were produced by /usr/bin/python3 with torch 1.13 (the script is
 * summarised above each block) and pasted here; torch is not needed at run time. The broad
 * PyTorch comparison (gradients of every parameter) is tests/parity/gen_transformer.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_transformer_util.h"

/* ==== parameters ============================================================================= */

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
} pinfo;

/* p->list[first + k] is "<prefix>.<want[k].name>" with want[k]'s shape, for k < n */
static void assert_params(const ag_params *p, int first, const char *prefix, const pinfo *want, int n) {
    for (int k = 0; k < n; k++) {
        char name[256];
        snprintf(name, sizeof name, "%s%s%s", prefix, *prefix ? "." : "", want[k].name);
        ag_tensor *t = p->list[first + k];
        if (strcmp(t->name, name) != 0) fail_msg("parameter %d is '%s', torch has '%s'", first + k, t->name, name);
        assert_int_equal(t->ndim, want[k].ndim);
        for (int d = 0; d < want[k].ndim; d++) assert_int_equal(t->shape[d], want[k].shape[d]);
        assert_ptr_equal(ag_params_find(p, name), t);
    }
}

/* torch: [(k, tuple(v.shape)) for k, v in nn.TransformerEncoderLayer(8, 2, 16).state_dict().items()] */
static const pinfo ENCODER_LAYER[] = {
    {"self_attn.in_proj_weight", 2, {24, 8}}, {"self_attn.in_proj_bias", 1, {24}},
    {"self_attn.out_proj.weight", 2, {8, 8}}, {"self_attn.out_proj.bias", 1, {8}},
    {"linear1.weight", 2, {16, 8}},           {"linear1.bias", 1, {16}},
    {"linear2.weight", 2, {8, 16}},           {"linear2.bias", 1, {8}},
    {"norm1.weight", 1, {8}},                 {"norm1.bias", 1, {8}},
    {"norm2.weight", 1, {8}},                 {"norm2.bias", 1, {8}},
};
/* torch: the same for nn.TransformerDecoderLayer(8, 2, 16) */
static const pinfo DECODER_LAYER[] = {
    {"self_attn.in_proj_weight", 2, {24, 8}},      {"self_attn.in_proj_bias", 1, {24}},
    {"self_attn.out_proj.weight", 2, {8, 8}},      {"self_attn.out_proj.bias", 1, {8}},
    {"multihead_attn.in_proj_weight", 2, {24, 8}}, {"multihead_attn.in_proj_bias", 1, {24}},
    {"multihead_attn.out_proj.weight", 2, {8, 8}}, {"multihead_attn.out_proj.bias", 1, {8}},
    {"linear1.weight", 2, {16, 8}},                {"linear1.bias", 1, {16}},
    {"linear2.weight", 2, {8, 16}},                {"linear2.bias", 1, {8}},
    {"norm1.weight", 1, {8}},                      {"norm1.bias", 1, {8}},
    {"norm2.weight", 1, {8}},                      {"norm2.bias", 1, {8}},
    {"norm3.weight", 1, {8}},                      {"norm3.bias", 1, {8}},
};
#define NENC (int)(sizeof ENCODER_LAYER / sizeof ENCODER_LAYER[0])
#define NDEC (int)(sizeof DECODER_LAYER / sizeof DECODER_LAYER[0])
static const pinfo NORM[] = {{"weight", 1, {8}}, {"bias", 1, {8}}};

static void test_layer_parameter_names_shapes_and_order_match_torch_state_dict(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    ag_transformer_encoder_layer_module e = ag_transformer_encoder_layer_new(p, "encoder.layers.0", &c, NULL);
    ag_transformer_decoder_layer_module d = ag_transformer_decoder_layer_new(p, "", &c, NULL);
    assert_int_equal(p->count, NENC + NDEC);
    assert_params(p, 0, "encoder.layers.0", ENCODER_LAYER, NENC);
    assert_params(p, NENC, "", DECODER_LAYER, NDEC);
    assert_ptr_equal(e.linear1.weight, ag_params_find(p, "encoder.layers.0.linear1.weight"));
    assert_ptr_equal(e.norm2.bias, ag_params_find(p, "encoder.layers.0.norm2.bias"));
    assert_ptr_equal(d.multihead_attn.in_proj_weight, ag_params_find(p, "multihead_attn.in_proj_weight"));
    assert_ptr_equal(d.norm3.weight, ag_params_find(p, "norm3.weight"));
    ag_params_free(p);
}

/* torch: list(nn.Transformer(8, 2, 1, 1, 16).state_dict()) (34 names); and
 * list(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 2, nn.LayerNorm(8)).state_dict()) */
static void test_stack_and_transformer_names_match_torch_state_dict(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    ag_transformer_module *t = ag_arena_alloc(ag_arena_current(), sizeof *t);
    *t = ag_transformer_new(p, "", &c, 1, 1, NULL);
    assert_int_equal(p->count, 34);
    assert_params(p, 0, "encoder.layers.0", ENCODER_LAYER, NENC);
    assert_params(p, NENC, "encoder.norm", NORM, 2);
    assert_params(p, NENC + 2, "decoder.layers.0", DECODER_LAYER, NDEC);
    assert_params(p, NENC + 2 + NDEC, "decoder.norm", NORM, 2);
    ag_params_free(p);

    p = ag_params_new(AG_F32);
    ag_transformer_encoder_module *e = ag_arena_alloc(ag_arena_current(), sizeof *e);
    *e = ag_transformer_encoder_new(p, "model.encoder", &c, 2, true, NULL);
    assert_int_equal(e->num_layers, 2);
    assert_int_equal(p->count, 2 * NENC + 2);
    assert_params(p, 0, "model.encoder.layers.0", ENCODER_LAYER, NENC);
    assert_params(p, NENC, "model.encoder.layers.1", ENCODER_LAYER, NENC);
    assert_params(p, 2 * NENC, "model.encoder.norm", NORM, 2);
    ag_transformer_decoder_module *d = ag_arena_alloc(ag_arena_current(), sizeof *d);
    *d = ag_transformer_decoder_new(p, "dec", &c, 1, false, NULL);
    assert_null(d->norm.weight);
    assert_int_equal(p->count, 2 * NENC + 2 + NDEC);
    assert_params(p, 2 * NENC + 2, "dec.layers.0", DECODER_LAYER, NDEC);
    ag_params_free(p);
}

/* torch's init: MultiheadAttention xavier-uniform in_proj and zero biases, Linear U(±1/√in),
 * LayerNorm ones/zeros; TransformerEncoder deep-copies the layer, so layers start equal. */
static void test_stack_layers_start_as_copies_of_one_torch_initialised_layer(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    ag_rng r = ag_rng_new(3);
    ag_transformer_encoder_module *e = ag_arena_alloc(ag_arena_current(), sizeof *e);
    *e = ag_transformer_encoder_new(p, "", &c, 3, true, &r);
    double m;
    for (int l = 1; l < 3; l++)
        for (int k = 0; k < NENC; k++) assert_close(p->list[k], p->list[l * NENC + k], 0);
    const ag_transformer_encoder_layer_module *l0 = &e->layers[0];
    max_abs(l0->self_attn.in_proj_weight, &m);
    assert_true(m <= sqrt(6.0 / 32) && m > 0.8 * sqrt(6.0 / 32));
    max_abs(l0->self_attn.in_proj_bias, &m);
    assert_true(m == 0);
    max_abs(l0->self_attn.out_proj.bias, &m);
    assert_true(m == 0);
    max_abs(l0->linear1.weight, &m);
    assert_true(m <= 1 / sqrt(8.0) && m > 0.8 / sqrt(8.0));
    max_abs(l0->linear2.bias, &m);
    assert_true(m <= 1 / sqrt(16.0) && m > 0);
    tu_assert_values(l0->norm1.weight, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    tu_assert_values(e->norm.bias, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    ag_params_free(p);
}

/* nn.Transformer._reset_parameters re-draws every matrix xavier-uniform (so the stacked layers
 * differ) and leaves the vectors (still copies) alone. */
static void test_transformer_redraws_matrices_xavier_uniform_and_keeps_vectors(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    ag_rng r = ag_rng_new(4);
    ag_transformer_module *t = ag_arena_alloc(ag_arena_current(), sizeof *t);
    *t = ag_transformer_new(p, "", &c, 2, 1, &r);
    const ag_transformer_encoder_layer_module *a = &t->encoder.layers[0], *b = &t->encoder.layers[1];
    double m, d;
    max_abs(ag_sub(a->self_attn.in_proj_weight, b->self_attn.in_proj_weight), &d);
    assert_true(d > 0.1);
    assert_close(a->linear1.bias, b->linear1.bias, 0);
    /* linear1.weight (16,8): xavier bound √(6/24) = 0.5, larger than Linear's 1/√8 */
    max_abs(a->linear1.weight, &m);
    assert_true(m <= 0.5 && m > 1 / sqrt(8.0));
    max_abs(t->decoder.layers[0].multihead_attn.out_proj.weight, &m);
    assert_true(m <= sqrt(6.0 / 16) && m > 1 / sqrt(8.0));
    max_abs(a->self_attn.in_proj_bias, &m);
    assert_true(m == 0);
    ag_params_free(p);
}

/* ==== values against torch ==================================================================== */

/* torch (float64): enc = nn.TransformerEncoderLayer(4, 2, 6, 0.1, "relu"), every state_dict
 * element i set to 0.3 sin(0.7 i + 1), eval; src (3,2,4) = cos(0.5 i);
 * kpm = [[F,F,F],[F,F,T]]; enc(src, src_key_padding_mask=kpm) */
#define ENC_OUT                                                                                                    \
    -0.3951832027333933, -0.002123020318683127, -0.16983627949216473, 0.17658545226910619, -0.3827133285360912,    \
        -0.03444551621563313, -0.20762292378733965, 0.3942058599490436, -0.325129369845333, -0.07182689327116881, \
        -0.15776131377956568, 0.6238100714358099, -0.3810378035937182, 0.008706563175592241,                      \
        -0.17413106537982254, 0.1650218130420632, -0.3966688377354874, -0.026621131512156032,                     \
        -0.1957896323208051, 0.3141841050946151, -0.3248628937237856, -0.07326657223194537, -0.15419160899654138, \
        0.6263146249063385

static void test_encoder_layer_post_norm_matches_torch_for_contiguous_and_transposed_input(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, false);
    ag_transformer_encoder_layer_module m = ag_transformer_encoder_layer_new(p, "", &c, NULL);
    fill_params(p);
    ag_tensor *src = wave(AG_F64, AG_SHAPE(3, 2, 4), 0);
    ag_transformer_args a = {.src_key_padding_mask = bools(AG_SHAPE(2, 3), "000001")};
    ag_tensor *y = ag_transformer_encoder_layer_forward(&m, src, &a);
    tu_assert_shape(y, 3, 2, 4);
    tu_assert_values(y, 1e-12, ENC_OUT);
    /* the same sequence as a transposed view of a (2,3,4) batch-major tensor */
    ag_tensor *t = ag_transpose(ag_contiguous(ag_transpose(src, 0, 1)), 0, 1);
    assert_false(ag_is_contiguous(t));
    tu_assert_values(ag_transformer_encoder_layer_forward(&m, t, &a), 1e-12, ENC_OUT);
    ag_params_free(p);
}

/* torch (float64): dec = nn.TransformerDecoderLayer(4, 2, 6, 0.1, "gelu", 1e-5, batch_first=True,
 * norm_first=True), filled as above, eval; tgt (2,3,4) = cos(0.5 i + 0.3), memory (2,4,4) =
 * cos(0.5 i + 1.1); dec(tgt, memory, tgt_mask=generate_square_subsequent_mask(3),
 * memory_key_padding_mask=[[F,F,F,F],[F,F,T,T]]) */
#define DEC_OUT                                                                                                    \
    0.27413855849095203, 0.5453849114471033, 0.0016200581626426014, -0.28747969122262085, -1.3341727765529698,     \
        -1.0981711679529675, -1.2479345149379566, -0.8660802619012439, -1.0896119120761172, -0.04547613297352335, \
        0.2826201140306673, 0.8058518897998126, 0.3060728255604607, 0.7370518743143795, 0.23737893173153446,      \
        0.017130678025732343, -1.111292642004028, -0.9534160769955073, -1.271015315625212, -0.980051723629872,    \
        -1.337387239799772, -0.31374498446110444, 0.00991809269849997, 0.6611884983715672

/* the DEC_OUT case: a norm_first gelu decoder layer, its inputs and masks */
typedef struct {
    ag_params *p;
    ag_transformer_decoder_layer_module m;
    ag_tensor *tgt, *mem;
    ag_transformer_args a;
} dec_case;

static dec_case dec_case_new(void) {
    dec_case d = {.p = ag_params_new(AG_F64)};
    ag_transformer_config c = small_config(true, AG_ACTIVATION_GELU, true);
    d.m = ag_transformer_decoder_layer_new(d.p, "", &c, NULL);
    fill_params(d.p);
    d.tgt = wave(AG_F64, AG_SHAPE(2, 3, 4), 0.3);
    d.mem = wave(AG_F64, AG_SHAPE(2, 4, 4), 1.1);
    d.a = (ag_transformer_args){.tgt_mask = ag_square_subsequent_mask(3, AG_F64),
                                .memory_key_padding_mask = bools(AG_SHAPE(2, 4), "00000011")};
    return d;
}

static void test_decoder_layer_norm_first_gelu_causal_matches_torch_with_sliced_memory(void **s) {
    dec_case d = dec_case_new();
    ag_tensor *y = ag_transformer_decoder_layer_forward(&d.m, d.tgt, d.mem, &d.a);
    tu_assert_shape(y, 2, 3, 4);
    tu_assert_values(y, 1e-12, DEC_OUT);
    /* memory as every other row of a (2,8,4) tensor holding it at even rows */
    ag_tensor *big = ag_zeros(AG_F64, AG_SHAPE(2, 8, 4));
    ag_tensor *sl = ag_slice(big, 1, 0, 8, 2);
    ag_copy_(sl, d.mem);
    assert_false(ag_is_contiguous(sl));
    tu_assert_values(ag_transformer_decoder_layer_forward(&d.m, d.tgt, sl, &d.a), 1e-12, DEC_OUT);
    /* tgt_is_causal stands for the same mask */
    ag_transformer_args flag = {.tgt_is_causal = true, .memory_key_padding_mask = d.a.memory_key_padding_mask};
    tu_assert_values(ag_transformer_decoder_layer_forward(&d.m, d.tgt, d.mem, &flag), 1e-12, DEC_OUT);
    ag_params_free(d.p);
}

/* Without grad a layer forgets its intermediates: the arena then holds only the output, and
 * the values are those computed with grad on (the torch fixture). */
static void test_no_grad_layers_keep_only_their_output(void **s) {
    dec_case d = dec_case_new();
    bool prev = ag_set_grad_enabled(false);
    ag_arena *arena = ag_arena_current();
    size_t before = ag_arena_used(arena);
    ag_tensor *y = ag_transformer_decoder_layer_forward(&d.m, d.tgt, d.mem, &d.a);
    assert_true(ag_arena_used(arena) - before <= 256 + 256); /* 2x3x4 doubles and a header */
    tu_assert_values(y, 1e-12, DEC_OUT);
    ag_set_grad_enabled(prev);
    ag_params_free(d.p);
}

/* ==== incremental decoding ==================================================================== */

/* Feeding a target one position at a time through the cache gives, at every position, what the
 * full decoder stack gives there with a causal mask: post- and pre-norm, relu and gelu, with a
 * final norm and a memory padding mask. */
static void test_decoder_steps_equal_the_full_causal_forward(void **s) {
    for (int k = 0; k < 2; k++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(k == 1, k == 1 ? AG_ACTIVATION_GELU : AG_ACTIVATION_RELU, true);
        ag_transformer_decoder_module m = ag_transformer_decoder_new(p, "", &c, 2, true, NULL);
        fill_params(p);
        int64_t N = 3, T = 5, S = 4;
        ag_tensor *tgt = wave(AG_F64, AG_SHAPE(N, T, 4), 0.3), *mem = wave(AG_F64, AG_SHAPE(N, S, 4), 1.1);
        ag_tensor *kpm = bools(AG_SHAPE(N, S), "000000110001");
        ag_transformer_args a = {.tgt_is_causal = true, .memory_key_padding_mask = kpm};
        bool prev = ag_set_grad_enabled(false);
        ag_tensor *full = ag_transformer_decoder_forward(&m, tgt, mem, &a);
        ag_decoder_cache *cache = ag_decoder_cache_new(&m, mem, kpm, T);
        for (int64_t t = 0; t < T; t++) {
            ag_tensor *y = ag_decoder_step(&m, cache, ag_contiguous(ag_select(tgt, 1, t)));
            tu_assert_shape(y, N, 4);
            assert_close(y, ag_select(full, 1, t), 1e-12);
        }
        assert_int_equal(ag_decoder_cache_len(cache), T);
        assert_null(ag_decoder_step(&m, cache, ag_contiguous(ag_select(tgt, 1, 0))));
        tu_assert_error("ag_decoder_step", "position 5", "max_len 5");
        ag_set_grad_enabled(prev);
        ag_params_free(p);
    }
}

/* Beam search moves rows: after reordering, the cache continues as if row r had always been fed
 * row rows[r]'s prefix and memory. */
static void test_decoder_cache_reorder_continues_the_chosen_rows(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, true);
    ag_transformer_decoder_module m = ag_transformer_decoder_new(p, "", &c, 2, false, NULL);
    fill_params(p);
    int64_t N = 3, T = 4, S = 4;
    ag_tensor *tgt = wave(AG_F64, AG_SHAPE(N, T, 4), 0.7), *mem = wave(AG_F64, AG_SHAPE(N, S, 4), 0.2);
    ag_tensor *kpm = bools(AG_SHAPE(N, S), "000100000011");
    ag_tensor *rows = tu_tensor(AG_I64, AG_SHAPE(3), 2, 2, 0);
    bool prev = ag_set_grad_enabled(false);
    /* reordered after two positions; the other cache is fed the reordered inputs from the start */
    ag_decoder_cache *a = ag_decoder_cache_new(&m, mem, kpm, T);
    ag_decoder_cache *b = ag_decoder_cache_new(&m, ag_index_select(mem, 0, rows), ag_index_select(kpm, 0, rows), T);
    ag_tensor *tr = ag_index_select(tgt, 0, rows);
    for (int64_t t = 0; t < T; t++) {
        ag_tensor *ya = ag_decoder_step(&m, a, ag_contiguous(ag_select(t < 2 ? tgt : tr, 1, t)));
        ag_tensor *yb = ag_decoder_step(&m, b, ag_contiguous(ag_select(tr, 1, t)));
        if (t == 1) ag_decoder_cache_reorder(a, rows);
        if (t >= 2) assert_close(ya, yb, 1e-12);
    }
    tu_assert_values(kpm, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1); /* the caller's mask is untouched */
    ag_set_grad_enabled(prev);
    assert_null(ag_decoder_cache_new(&m, mem, NULL, T));
    tu_assert_error("ag_decoder_cache_new", "grad mode is on");
    ag_params_free(p);
}

/* ==== layouts ================================================================================= */

static void test_batch_first_and_unbatched_inputs_give_the_seq_first_results(void **s) {
    ag_params *p = ag_params_new(AG_F64), *q = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, false), cb = c;
    cb.batch_first = true;
    ag_transformer_decoder_layer_module m = ag_transformer_decoder_layer_new(p, "", &c, NULL);
    ag_transformer_decoder_layer_module mb = ag_transformer_decoder_layer_new(q, "", &cb, NULL);
    fill_params(p);
    fill_params(q);
    ag_tensor *tgt = wave(AG_F64, AG_SHAPE(3, 2, 4), 0.2), *mem = wave(AG_F64, AG_SHAPE(5, 2, 4), 0.9);
    ag_transformer_args a = {.tgt_is_causal = true, .memory_key_padding_mask = bools(AG_SHAPE(2, 5), "0000000011")};
    ag_tensor *y = ag_transformer_decoder_layer_forward(&m, tgt, mem, &a);
    ag_tensor *yb = ag_transformer_decoder_layer_forward(&mb, ag_transpose(tgt, 0, 1), ag_transpose(mem, 0, 1), &a);
    tu_assert_shape(yb, 2, 3, 4);
    assert_close(ag_transpose(yb, 0, 1), y, 1e-12);
    /* sequence 1 alone, unbatched: (T,E), (S,E) and an (S) key padding mask */
    ag_transformer_args u = {.tgt_is_causal = true, .memory_key_padding_mask = bools(AG_SHAPE(5), "00011")};
    ag_tensor *y1 = ag_transformer_decoder_layer_forward(&m, ag_select(tgt, 1, 1), ag_select(mem, 1, 1), &u);
    tu_assert_shape(y1, 3, 4);
    assert_close(y1, ag_select(y, 1, 1), 1e-12);
    ag_params_free(p);
    ag_params_free(q);
}
/* ==== misuse =================================================================================== */

static void test_new_reports_bad_config_and_forward_refuses_the_failed_module(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config c = ag_transformer_defaults(6, 4);
    ag_transformer_encoder_layer_module m = ag_transformer_encoder_layer_new(p, "enc", &c, NULL);
    tu_assert_error("ag_transformer_encoder_layer_new", "'enc'", "d_model 6", "nhead 4");
    assert_null(m.self_attn.in_proj_weight);
    assert_int_equal(p->count, 0);
    assert_null(ag_transformer_encoder_layer_forward(&m, ag_zeros(AG_F32, AG_SHAPE(2, 1, 6)), NULL));
    tu_assert_error("ag_transformer_encoder_layer_forward", "not created");
    c = ag_transformer_defaults(8, 2);
    c.dropout = 1.5;
    ag_transformer_decoder_layer_new(p, "dec", &c, NULL);
    tu_assert_error("ag_transformer_decoder_layer_new", "dropout 1.5");
    c.dropout = 0.1;
    ag_transformer_encoder_module *e = ag_arena_alloc(ag_arena_current(), sizeof *e);
    *e = ag_transformer_encoder_new(p, "encoder", &c, 0, true, NULL);
    tu_assert_error("ag_transformer_encoder_new", "'encoder'", "num_layers 0");
    assert_null(ag_transformer_encoder_forward(e, ag_zeros(AG_F32, AG_SHAPE(2, 1, 8)), NULL));
    tu_assert_error("ag_transformer_encoder_forward", "not created");
    ag_params_free(p);
}

static void test_forward_reports_input_and_mask_shapes_naming_the_argument(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    ag_transformer_encoder_layer_module e = ag_transformer_encoder_layer_new(p, "e", &c, NULL);
    ag_transformer_decoder_layer_module d = ag_transformer_decoder_layer_new(p, "d", &c, NULL);
    ag_tensor *x = ag_zeros(AG_F32, AG_SHAPE(5, 3, 8)), *mem = ag_zeros(AG_F32, AG_SHAPE(6, 3, 8));
    assert_null(ag_transformer_encoder_layer_forward(&e, ag_zeros(AG_F32, AG_SHAPE(5, 3, 7)), NULL));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src (5,3,7)", "(L,N,d_model)", "8");
    ag_transformer_args a = {.src_key_padding_mask = ag_zeros(AG_BOOL, AG_SHAPE(5, 3))};
    assert_null(ag_transformer_encoder_layer_forward(&e, x, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src_key_padding_mask (5,3)", "(3,5)");
    a = (ag_transformer_args){.src_key_padding_mask = ag_zeros(AG_I64, AG_SHAPE(3, 5))};
    assert_null(ag_transformer_encoder_layer_forward(&e, x, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src_key_padding_mask (3,5)", "i64");
    a = (ag_transformer_args){.src_mask = ag_zeros(AG_F32, AG_SHAPE(5, 6))};
    assert_null(ag_transformer_encoder_layer_forward(&e, x, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src_mask (5,6)", "(5,5) or (6,5,5)");
    assert_null(ag_transformer_decoder_layer_forward(&d, x, ag_zeros(AG_F32, AG_SHAPE(6, 2, 8)), NULL));
    tu_assert_error("ag_transformer_decoder_layer_forward", "tgt (5,3,8)", "memory (6,2,8)", "batch");
    a = (ag_transformer_args){.memory_mask = ag_zeros(AG_F32, AG_SHAPE(5, 5))};
    assert_null(ag_transformer_decoder_layer_forward(&d, x, mem, &a));
    tu_assert_error("ag_transformer_decoder_layer_forward", "memory_mask (5,5)", "(5,6)");
    a = (ag_transformer_args){.memory_key_padding_mask = ag_zeros(AG_BOOL, AG_SHAPE(3, 5))};
    assert_null(ag_transformer_decoder_layer_forward(&d, x, mem, &a));
    tu_assert_error("ag_transformer_decoder_layer_forward", "memory_key_padding_mask (3,5)", "(3,6)");
    assert_null(ag_transformer_decoder_layer_forward(&d, x, NULL, NULL));
    tu_assert_error("ag_transformer_decoder_layer_forward");
    ag_params_free(p);

    p = ag_params_new(AG_F32);
    ag_transformer_module *t = ag_arena_alloc(ag_arena_current(), sizeof *t);
    *t = ag_transformer_new(p, "", &c, 1, 1, NULL);
    assert_null(ag_transformer_forward(t, x, ag_zeros(AG_F32, AG_SHAPE(4, 2, 8)), NULL));
    tu_assert_error("ag_transformer_forward", "src (5,3,8)", "tgt (4,2,8)", "batch");
    assert_null(ag_transformer_forward(t, x, ag_zeros(AG_F32, AG_SHAPE(4, 3, 6)), NULL));
    tu_assert_error("ag_transformer_forward", "tgt (4,3,6)", "d_model 8");
    tu_assert_shape(ag_transformer_forward(t, x, ag_zeros(AG_F32, AG_SHAPE(4, 3, 8)), NULL), 4, 3, 8);
    ag_params_free(p);
}

/* The decoder stack hands out each layer's cross-attention weights on request, without
 * changing its output: (N,nhead,T,S) rows summing to 1, zero on padded memory positions. */
static void test_decoder_stack_reports_cross_attention_weights_per_layer(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_rng r = ag_rng_new(9);
    ag_transformer_config c = ag_transformer_defaults(8, 2);
    c.dim_feedforward = 16;
    c.batch_first = true;
    ag_transformer_decoder_module *d = ag_arena_alloc(ag_arena_current(), sizeof *d);
    *d = ag_transformer_decoder_new(p, "decoder", &c, 2, true, &r);
    ag_tensor *tgt = ag_randn(&r, AG_F32, AG_SHAPE(2, 3, 8)), *mem = ag_randn(&r, AG_F32, AG_SHAPE(2, 5, 8));
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(2, 5));
    ag_set(kpm, (int64_t[]){1, 4}, 1); /* item 1's last memory position is padding */
    ag_transformer_args a = {.memory_key_padding_mask = kpm, .tgt_is_causal = true};
    ag_tensor *plain = ag_transformer_decoder_forward(d, tgt, mem, &a);
    ag_tensor *w[2] = {NULL, NULL};
    a.cross_attn_weights = w;
    ag_tensor *y = ag_transformer_decoder_forward(d, tgt, mem, &a);
    assert_memory_equal(plain->data, y->data, sizeof(float) * 2 * 3 * 8);
    for (int l = 0; l < 2; l++) {
        tu_assert_shape(w[l], 2, 2, 3, 5);
        ag_tensor *rows = ag_sum(w[l], 1, (int[]){-1}, false);
        tu_assert_values(rows, 1e-6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 3; t++) assert_true(ag_get(w[l], (int64_t[]){1, h, t, 4}) == 0.0);
    }
    assert_true(ag_get(w[0], (int64_t[]){0, 0, 0, 4}) > 0.0);
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
        T(test_layer_parameter_names_shapes_and_order_match_torch_state_dict),
        T(test_stack_and_transformer_names_match_torch_state_dict),
        T(test_stack_layers_start_as_copies_of_one_torch_initialised_layer),
        T(test_transformer_redraws_matrices_xavier_uniform_and_keeps_vectors),
        T(test_encoder_layer_post_norm_matches_torch_for_contiguous_and_transposed_input),
        T(test_decoder_layer_norm_first_gelu_causal_matches_torch_with_sliced_memory),
        T(test_no_grad_layers_keep_only_their_output),
        T(test_decoder_steps_equal_the_full_causal_forward),
        T(test_decoder_cache_reorder_continues_the_chosen_rows),
        T(test_batch_first_and_unbatched_inputs_give_the_seq_first_results),
        T(test_new_reports_bad_config_and_forward_refuses_the_failed_module),
        T(test_forward_reports_input_and_mask_shapes_naming_the_argument),
        T(test_decoder_stack_reports_cross_attention_weights_per_layer),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
