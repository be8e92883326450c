/* Transformer encoder/decoder layers, stacks and nn.Transformer: parameter names, shapes, order
 * and initialisation against torch 1.13's state_dict, values against torch, gradients against
 * finite differences (layers and a whole seq2seq loss), dropout positions and reproducibility,
 * and misuse reporting. Expected numbers were produced by /usr/bin/python3 with torch 1.13 (the
 * script is summarised above each block) and pasted here; torch is not needed at run time. The
 * broad PyTorch comparison (gradients of every parameter) is tests/parity/gen_transformer.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* Every parameter, in registration order, set to 0.3 sin(0.7 i + 1) with i counting elements
 * across all of them: torch's side fills its state_dict the same way. */
static void fill_params(ag_params *p) {
    int64_t i = 0;
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        int64_t idx[AG_MAX_DIMS] = {0};
        for (int64_t e = 0; e < ag_numel(t); e++, i++) {
            int64_t r = e;
            for (int d = t->ndim - 1; d >= 0; d--) {
                idx[d] = r % t->shape[d];
                r /= t->shape[d];
            }
            ag_set(t, idx, 0.3 * sin(0.7 * (double)i + 1));
        }
    }
}

/* row-major tensor of cos(0.5 i + phase) */
static ag_tensor *wave(ag_dtype dt, int ndim, const int64_t *shape, double phase) {
    ag_tensor *t = ag_empty(dt, ndim, shape);
    int64_t n = ag_numel(t);
    double v[256];
    assert_true(n <= 256);
    for (int64_t i = 0; i < n; i++) v[i] = cos(0.5 * (double)i + phase);
    ag_copy_(t, ag_wrap(AG_F64, ndim, shape, v));
    return t;
}

static ag_tensor *bools(int ndim, const int64_t *shape, const char *bits) {
    ag_tensor *t = ag_empty(AG_BOOL, ndim, shape);
    for (int64_t i = 0; i < ag_numel(t); i++) ((uint8_t *)t->data)[i] = bits[i] == '1';
    return t;
}

static void assert_close(const ag_tensor *a, const ag_tensor *b, double tol) {
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(ag_numel(a), ag_numel(b));
    static double va[4096], vb[4096];
    assert_true(ag_numel(a) <= 4096);
    ag_to_buffer(a, AG_F64, va);
    ag_to_buffer(b, AG_F64, vb);
    for (int64_t i = 0; i < ag_numel(a); i++)
        if (fabs(va[i] - vb[i]) > tol) fail_msg("element %lld: %.17g vs %.17g", (long long)i, va[i], vb[i]);
}

static ag_transformer_config small_config(bool norm_first, ag_activation act, bool batch_first) {
    ag_transformer_config c = ag_transformer_defaults(4, 2);
    c.dim_feedforward = 6;
    c.norm_first = norm_first;
    c.activation = act;
    c.batch_first = batch_first;
    return c;
}

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

static void max_abs(const ag_tensor *t, double *mx) {
    static double v[4096];
    ag_to_buffer(t, AG_F64, v);
    *mx = 0;
    for (int64_t i = 0; i < ag_numel(t); i++) *mx = fmax(*mx, fabs(v[i]));
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

/* ==== dropout ================================================================================= */

static ag_tensor *encode(const ag_transformer_encoder_layer_module *m, ag_tensor *x, bool training, ag_rng *r) {
    ag_transformer_args a = {.training = training, .rng = r};
    return ag_transformer_encoder_layer_forward(m, x, &a);
}

/* torch's positions: encoder attention weights (N·H·L·L mask elements), dropout1 (N·L·E),
 * dropout after the activation (N·L·ff), dropout2 (N·L·E); the decoder adds cross-attention
 * weights (N·H·T·S), dropout2 after it and dropout3 after the feed-forward block. A mask of n
 * elements takes (n + 1) / 2 draws. */
#define DRAWS(n) (((n) + 1) / 2)
static void test_training_draws_dropout_at_torchs_positions_and_same_seed_repeats(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, true);
    c.dropout = 0.3;
    ag_transformer_encoder_layer_module e = ag_transformer_encoder_layer_new(p, "e", &c, NULL);
    ag_transformer_decoder_layer_module d = ag_transformer_decoder_layer_new(p, "d", &c, NULL);
    fill_params(p);
    ag_tensor *x = wave(AG_F64, AG_SHAPE(2, 3, 4), 0), *mem = wave(AG_F64, AG_SHAPE(2, 5, 4), 1);
    ag_rng r1 = ag_rng_new(7), r2 = ag_rng_new(7), r3 = ag_rng_new(8);
    ag_tensor *y1 = encode(&e, x, true, &r1), *y2 = encode(&e, x, true, &r2), *y3 = encode(&e, x, true, &r3);
    assert_int_equal(r1.counter, DRAWS(2 * 2 * 3 * 3) + DRAWS(2 * 3 * 4) + DRAWS(2 * 3 * 6) + DRAWS(2 * 3 * 4));
    assert_close(y1, y2, 0);
    double diff;
    max_abs(ag_sub(y1, y3), &diff);
    assert_true(diff > 1e-3);
    max_abs(ag_sub(y1, encode(&e, x, false, NULL)), &diff);
    assert_true(diff > 1e-3);

    ag_transformer_args a = {.training = true, .rng = &r1};
    uint64_t before = r1.counter;
    ag_tensor *z1 = ag_transformer_decoder_layer_forward(&d, x, mem, &a);
    assert_int_equal(r1.counter - before, DRAWS(2 * 2 * 3 * 3) + DRAWS(2 * 3 * 4) + DRAWS(2 * 2 * 3 * 5) +
                                              DRAWS(2 * 3 * 4) + DRAWS(2 * 3 * 6) + DRAWS(2 * 3 * 4));
    a.rng = &r2;
    assert_close(z1, ag_transformer_decoder_layer_forward(&d, x, mem, &a), 0);
    ag_params_free(p);
}

static void test_eval_mode_draws_nothing_and_equals_training_with_dropout_zero(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(true, AG_ACTIVATION_GELU, false), c0 = c;
    c0.dropout = 0;
    ag_transformer_encoder_layer_module e = ag_transformer_encoder_layer_new(p, "", &c, NULL);
    fill_params(p);
    ag_transformer_encoder_layer_module e0 = e;
    e0.cfg = c0;
    e0.self_attn.cfg.dropout = 0;
    ag_tensor *x = wave(AG_F64, AG_SHAPE(3, 2, 4), 0.5);
    ag_rng r = ag_rng_new(1);
    ag_tensor *y = encode(&e, x, false, &r);
    assert_int_equal(r.counter, 0);
    assert_close(y, encode(&e, x, false, &r), 0);
    assert_close(y, encode(&e0, x, true, &r), 0);
    ag_params_free(p);
}

/* With p = 1 every dropout zeroes its block, so torch's formulas leave: post-norm
 * norm2(norm1(x)) (decoder: norm3(norm2(norm1(x)))), norm_first x itself. */
static void test_dropout_one_zeroes_every_block_leaving_only_the_norms(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, false), cn = c;
    c.dropout = cn.dropout = 1;
    cn.norm_first = true;
    ag_transformer_encoder_layer_module e = ag_transformer_encoder_layer_new(p, "e", &c, NULL);
    ag_transformer_encoder_layer_module en = ag_transformer_encoder_layer_new(p, "en", &cn, NULL);
    ag_transformer_decoder_layer_module d = ag_transformer_decoder_layer_new(p, "d", &c, NULL);
    fill_params(p);
    ag_tensor *x = wave(AG_F64, AG_SHAPE(3, 2, 4), 0.1), *mem = wave(AG_F64, AG_SHAPE(4, 2, 4), 2);
    ag_rng r = ag_rng_new(2);
    ag_transformer_args a = {.training = true, .rng = &r};
    ag_tensor *n2 = ag_layer_norm_forward(&e.norm2, ag_layer_norm_forward(&e.norm1, x));
    assert_close(ag_transformer_encoder_layer_forward(&e, x, &a), n2, 1e-14);
    assert_close(ag_transformer_encoder_layer_forward(&en, x, &a), x, 0);
    ag_tensor *n1 = ag_layer_norm_forward(&d.norm1, x);
    ag_tensor *n3 = ag_layer_norm_forward(&d.norm3, ag_layer_norm_forward(&d.norm2, n1));
    assert_close(ag_transformer_decoder_layer_forward(&d, x, mem, &a), n3, 1e-14);
    ag_params_free(p);
}

/* ==== gradients ================================================================================ */

typedef struct {
    const ag_transformer_encoder_layer_module *enc;
    const ag_transformer_decoder_layer_module *dec;
    ag_transformer_args args;
    uint64_t seed; /* training: a fresh generator per call, so every evaluation uses one mask */
} layer_ctx;

static ag_tensor *f_layer(int n, ag_tensor **in, void *ctx) {
    layer_ctx *c = ctx;
    ag_transformer_args a = c->args;
    ag_rng r = ag_rng_new(c->seed);
    a.rng = &r;
    if (c->enc) return ag_transformer_encoder_layer_forward(c->enc, in[0], &a);
    return ag_transformer_decoder_layer_forward(c->dec, in[0], in[1], &a);
}

/* inputs then every parameter, all requiring grad */
static int gradcheck_inputs(ag_params *p, ag_tensor **in, int nin) {
    for (int k = 0; k < p->count; k++) in[nin + k] = p->list[k];
    return nin + p->count;
}

static void test_encoder_layer_gradcheck_post_and_pre_norm_relu_and_gelu_with_key_padding(void **s) {
    for (int variant = 0; variant < 5; variant++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(variant & 1, variant & 2 ? AG_ACTIVATION_GELU : AG_ACTIVATION_RELU,
                                               variant == 4);
        ag_rng r = ag_rng_new(20 + (uint64_t)variant);
        ag_transformer_encoder_layer_module m = ag_transformer_encoder_layer_new(p, "", &c, &r);
        for (int k = 0; k < p->count; k++) ag_normal_(&r, p->list[k], 0, 0.5);
        layer_ctx ctx = {.enc = &m, .args = {.src_key_padding_mask = bools(AG_SHAPE(2, 3), "001000")}};
        if (variant == 4) { /* batch_first, training: fixed dropout masks everywhere */
            ctx.args.training = true;
            ctx.seed = 5;
        }
        /* (L,N,E) = (3,2,4), or (N,L,E) = (2,3,4) batch_first */
        ag_tensor *src = variant == 4 ? ag_randn(&r, AG_F64, AG_SHAPE(2, 3, 4))
                                      : ag_randn(&r, AG_F64, AG_SHAPE(3, 2, 4));
        ag_tensor *in[64] = {tu_leaf(src)};
        tu_assert_gradcheck(f_layer, &ctx, gradcheck_inputs(p, in, 1), in);
        ag_params_free(p);
    }
}

static void test_decoder_layer_gradcheck_causal_tgt_mask_and_memory_key_padding(void **s) {
    for (int norm_first = 0; norm_first < 2; norm_first++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(norm_first, norm_first ? AG_ACTIVATION_GELU : AG_ACTIVATION_RELU,
                                               false);
        ag_rng r = ag_rng_new(30 + (uint64_t)norm_first);
        ag_transformer_decoder_layer_module m = ag_transformer_decoder_layer_new(p, "", &c, &r);
        for (int k = 0; k < p->count; k++) ag_normal_(&r, p->list[k], 0, 0.5);
        layer_ctx ctx = {.dec = &m,
                         .args = {.tgt_mask = ag_square_subsequent_mask(3, AG_F64),
                                  .tgt_key_padding_mask = bools(AG_SHAPE(2, 3), "000001"),
                                  .memory_key_padding_mask = bools(AG_SHAPE(2, 4), "00010011")}};
        ag_tensor *in[64] = {tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(3, 2, 4))),
                             tu_leaf(ag_randn(&r, AG_F64, AG_SHAPE(4, 2, 4)))};
        tu_assert_gradcheck(f_layer, &ctx, gradcheck_inputs(p, in, 2), in);
        ag_params_free(p);
    }
}

/* A one-layer seq2seq model as a translation example would build it: token embeddings scaled
 * by √d plus sinusoidal positions, one encoder and one decoder layer (batch_first), a Linear to
 * the vocabulary, cross entropy with label smoothing ignoring the padding id. */
enum { PAD = 0, V = 6, D = 4 };
typedef struct {
    ag_embedding_module src_emb, tgt_emb;
    ag_transformer_encoder_layer_module enc;
    ag_transformer_decoder_layer_module dec;
    ag_linear_module generator;
    ag_tensor *src, *tgt_in, *tgt_out, *src_pad, *tgt_pad, *causal;
    uint64_t dropout_seed; /* 0: eval mode; else training, dropout drawn from this seed */
    ag_rng rng;            /* (it must outlive backward: recomputed attention draws again from it) */
} seq2seq;

/* ids (N,L) -> (N,L,D) */
static ag_tensor *embed(const ag_embedding_module *e, ag_tensor *ids) {
    ag_tensor *x = ag_mul_scalar(ag_embedding_forward(e, ids), sqrt((double)D));
    return ag_add(x, ag_sinusoidal_positions(ids->shape[1], D, x->dtype));
}

static ag_tensor *f_seq2seq(int n, ag_tensor **in, void *ctx) {
    seq2seq *m = ctx;
    m->rng = ag_rng_new(m->dropout_seed);
    ag_transformer_args a = {.src_key_padding_mask = m->src_pad, .tgt_mask = m->causal,
                             .tgt_key_padding_mask = m->tgt_pad, .memory_key_padding_mask = m->src_pad,
                             .training = m->dropout_seed != 0, .rng = &m->rng};
    ag_tensor *memory = ag_transformer_encoder_layer_forward(&m->enc, embed(&m->src_emb, m->src), &a);
    ag_tensor *y = ag_transformer_decoder_layer_forward(&m->dec, embed(&m->tgt_emb, m->tgt_in), memory, &a);
    ag_tensor *logits = ag_linear_forward(&m->generator, y); /* (N,T,V) */
    int64_t nt = ag_numel(m->tgt_out);
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD;
    lc.label_smoothing = 0.1;
    return ag_cross_entropy(ag_reshape(logits, AG_SHAPE(nt, V)), ag_reshape(m->tgt_out, AG_SHAPE(nt)), &lc);
}

static ag_tensor *ids(int64_t n, int64_t l, const int64_t *v) { return ag_from_buffer(AG_I64, AG_SHAPE(n, l), v); }

static seq2seq seq2seq_new(ag_params *p, const ag_transformer_config *cfg) {
    ag_rng r = ag_rng_new(40);
    seq2seq m = {0};
    m.src_emb = ag_embedding_new(p, "src_embed", V, D, PAD, &r);
    m.tgt_emb = ag_embedding_new(p, "tgt_embed", V, D, PAD, &r);
    m.enc = ag_transformer_encoder_layer_new(p, "transformer.encoder.layers.0", cfg, &r);
    m.dec = ag_transformer_decoder_layer_new(p, "transformer.decoder.layers.0", cfg, &r);
    m.generator = ag_linear_new(p, "generator", D, V, true, &r);
    /* random biases and norm affine parameters; padding rows stay zero-initialised but are
     * perturbed by gradcheck: their numerical gradient must be 0 because every padded position
     * is masked as a key and ignored as a target */
    for (int k = 2; k < p->count; k++) ag_normal_(&r, p->list[k], 0, 0.5);
    /* ids: 0 pad, 1 bos, 2 eos */
    m.src = ids(2, 4, (const int64_t[]){3, 4, 5, 2, 4, 3, 2, PAD});
    m.tgt_in = ids(2, 4, (const int64_t[]){1, 5, 3, 4, 1, 4, PAD, PAD});
    m.tgt_out = ids(2, 4, (const int64_t[]){5, 3, 4, 2, 4, 2, PAD, PAD});
    m.src_pad = ag_eq_scalar(m.src, PAD);
    m.tgt_pad = ag_eq_scalar(m.tgt_in, PAD);
    m.causal = ag_causal_bool_mask(4);
    return m;
}

static void test_seq2seq_loss_gradcheck_over_every_parameter(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, true);
    seq2seq m = seq2seq_new(p, &c);
    ag_tensor *loss = f_seq2seq(0, NULL, &m);
    assert_int_equal(loss->ndim, 0);
    assert_true(isfinite(ag_item(loss)) && ag_item(loss) > 0);
    tu_assert_gradcheck(f_seq2seq, &m, p->count, p->list);
    ag_params_free(p);
}

/* m's seq2seq loss into *loss and every parameter's gradient (p->numel doubles, malloc'd); the
 * arena bytes the forward kept into *kept when asked */
static double *loss_and_grads(ag_params *p, seq2seq *m, double *loss, size_t *kept) {
    ag_arena *arena = ag_arena_current();
    ag_params_zero_grad(p);
    size_t before = ag_arena_used(arena);
    ag_tensor *l = f_seq2seq(0, NULL, m);
    if (kept) *kept = ag_arena_used(arena) - before;
    *loss = ag_item(l);
    ag_backward(l, NULL);
    double *g = malloc(sizeof(double) * (size_t)p->numel);
    ag_to_buffer(p->flat_grad, AG_F64, g);
    return g;
}

/* the largest |a - b| over n, and the largest |a| into *size */
static double max_diff(const double *a, const double *b, int64_t n, double *size) {
    double worst = 0;
    *size = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(b[i] - a[i]));
        *size = fmax(*size, fabs(a[i]));
    }
    return worst;
}

/* The seq2seq loss and every parameter gradient with an option off and on (set), dropout 0.2
 * in training: the same loss, the same gradients to rounding (1e-14 of the largest); the arena
 * bytes each forward kept into kept[0] (off) and kept[1] (on). */
static void same_loss_and_gradients_with(ag_transformer_config c, void (*set)(seq2seq *, bool), size_t kept[2]) {
    ag_params *p = ag_params_new(AG_F64);
    c.dropout = 0.2;
    seq2seq m = seq2seq_new(p, &c);
    m.dropout_seed = 5;
    double loss[2], *grads[2];
    for (int on = 0; on < 2; on++) {
        set(&m, on == 1);
        grads[on] = loss_and_grads(p, &m, &loss[on], &kept[on]);
    }
    assert_int_equal(tu_error_count(), 0);
    assert_true(loss[0] > 0.5);
    assert_true(loss[1] == loss[0]);
    double size, worst = max_diff(grads[0], grads[1], p->numel, &size);
    assert_true(size > 1e-2);
    if (worst > 1e-14 * size) fail_msg("gradients differ by %g (largest %g)", worst, size);
    for (int k = 0; k < 2; k++) free(grads[k]);
    ag_params_free(p);
}

static void set_recompute_attention(seq2seq *m, bool on) {
    m->enc.cfg.recompute_attention = m->dec.cfg.recompute_attention = on;
}

/* recompute_attention: the masks drawn again the same, the input gradients' terms summed in
 * another grouping; every attention block's projections and probabilities gone after forward */
static void test_recomputed_attention_gives_the_same_loss_and_gradients_in_less_memory(void **s) {
    size_t kept[2];
    same_loss_and_gradients_with(small_config(false, AG_ACTIVATION_RELU, true), set_recompute_attention, kept);
    assert_true(kept[1] + 2048 < kept[0]);
}

static void test_seq2seq_gradcheck_with_recomputed_attention(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(true, AG_ACTIVATION_GELU, true);
    c.recompute_attention = true;
    seq2seq m = seq2seq_new(p, &c);
    tu_assert_gradcheck(f_seq2seq, &m, p->count, p->list);
    ag_params_free(p);
}

static void set_keep_ff_activation(seq2seq *m, bool on) {
    m->enc.cfg.keep_ff_activation = m->dec.cfg.keep_ff_activation = on;
}

/* keep_ff_activation, with and without skip_padding: the same dropout masks, the weight
 * gradients summed in another grouping; the kept blocks hold each layer's hidden activation
 * (rows x ff doubles) */
static void test_kept_ff_activation_gives_the_same_loss_and_gradients_holding_it(void **s) {
    for (int skip = 0; skip < 2; skip++) {
        ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, true);
        c.skip_padding = skip == 1;
        size_t kept[2];
        same_loss_and_gradients_with(c, set_keep_ff_activation, kept);
        /* rows: 2x4 source and target positions, 5 and 6 of them not padding */
        size_t hidden = sizeof(double) * (size_t)c.dim_feedforward * (skip ? 5 + 6 : 8 + 8);
        if (kept[1] < kept[0] + hidden)
            fail_msg("skip %d: kept %zu bytes, %zu without the activations", skip, kept[1], kept[0]);
    }
}

static void test_seq2seq_gradcheck_with_kept_ff_activation(void **s) {
    ag_params *p = ag_params_new(AG_F64);
    ag_transformer_config c = small_config(true, AG_ACTIVATION_RELU, true);
    c.keep_ff_activation = true;
    c.skip_padding = true;
    seq2seq m = seq2seq_new(p, &c);
    tu_assert_gradcheck(f_seq2seq, &m, p->count, p->list);
    ag_params_free(p);
}

/* ==== skip_padding ============================================================================= */

/* the seq2seq loss and every parameter gradient with skip_padding off and on: the padded
 * positions are masked keys and ignored targets, so the two agree to rounding (f64); variant 0
 * post-norm relu, 1 pre-norm gelu, 2 with recompute_attention, 3 training with dropout 0 */
static void test_skip_padding_gives_the_same_loss_and_gradients(void **s) {
    for (int variant = 0; variant < 4; variant++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(variant == 1, variant == 1 ? AG_ACTIVATION_GELU : AG_ACTIVATION_RELU,
                                               true);
        c.recompute_attention = variant == 2;
        c.dropout = 0;
        seq2seq m = seq2seq_new(p, &c);
        m.dropout_seed = variant == 3 ? 7 : 0;
        double loss[2], *grads[2];
        for (int skip = 0; skip < 2; skip++) {
            m.enc.cfg.skip_padding = m.dec.cfg.skip_padding = skip == 1;
            grads[skip] = loss_and_grads(p, &m, &loss[skip], NULL);
        }
        assert_int_equal(tu_error_count(), 0);
        assert_true(loss[0] > 0.5);
        assert_true(fabs(loss[1] - loss[0]) <= 1e-14 * loss[0]);
        double size, worst = max_diff(grads[0], grads[1], p->numel, &size);
        assert_true(size > 1e-2);
        if (worst > 1e-13 * size) fail_msg("variant %d: gradients differ by %g (largest %g)", variant, worst, size);
        for (int k = 0; k < 2; k++) free(grads[k]);
        ag_params_free(p);
    }
}

/* the packed rows' own backward (ag__take_rows, ag__linear_rows, ag__put_rows) against finite
 * differences */
static void test_seq2seq_gradcheck_with_skip_padding(void **s) {
    for (int variant = 0; variant < 2; variant++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(variant == 1, AG_ACTIVATION_RELU, true);
        c.skip_padding = true;
        c.recompute_attention = variant == 1;
        seq2seq m = seq2seq_new(p, &c);
        tu_assert_gradcheck(f_seq2seq, &m, p->count, p->list);
        ag_params_free(p);
    }
}

/* A graph outlives its backward until the arena is reset, as with PyTorch's retain_graph=True:
 * a second backward over the same loss gives every parameter the same gradient again, bit for
 * bit, with dropout, recompute_attention, packed or kept feed-forward activations and
 * skip_padding (their saved state is read, never consumed, by backward). */
static void test_a_second_backward_over_the_same_graph_gives_the_same_gradients(void **s) {
    for (int variant = 0; variant < 4; variant++) {
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(variant == 1, AG_ACTIVATION_RELU, true);
        c.dropout = 0.2;
        c.recompute_attention = variant == 1;
        c.keep_ff_activation = variant == 2;
        c.skip_padding = variant == 3;
        seq2seq m = seq2seq_new(p, &c);
        m.dropout_seed = 5;
        ag_params_zero_grad(p);
        ag_tensor *loss = f_seq2seq(0, NULL, &m);
        double *g[2];
        for (int pass = 0; pass < 2; pass++) {
            ag_params_zero_grad(p);
            ag_backward(loss, NULL);
            g[pass] = malloc(sizeof(double) * (size_t)p->numel);
            ag_to_buffer(p->flat_grad, AG_F64, g[pass]);
        }
        assert_int_equal(tu_error_count(), 0);
        double size, worst = max_diff(g[0], g[1], p->numel, &size);
        assert_true(size > 1e-2);
        if (worst != 0) fail_msg("variant %d: the second backward's gradients differ by %g", variant, worst);
        for (int k = 0; k < 2; k++) free(g[k]);
        ag_params_free(p);
    }
}

/* Stacks and the whole nn.Transformer, seq-first, batch-first and unbatched, bool and float
 * (-inf) padding masks, and single layers: with skip_padding the outputs at the positions that
 * are not padding are those without it, and the padded positions are 0. */
static void test_skip_padding_keeps_the_outputs_at_real_positions(void **s) {
    for (int variant = 0; variant < 4; variant++) { /* 0 seq-first bool, 1 batch-first float, 2 unbatched, 3 layer */
        ag_params *p = ag_params_new(AG_F64);
        ag_transformer_config c = small_config(variant == 1, AG_ACTIVATION_RELU, variant == 1);
        ag_rng r = ag_rng_new(60 + (uint64_t)variant);
        ag_transformer_module *t = ag_arena_alloc(ag_arena_current(), sizeof *t);
        *t = ag_transformer_new(p, "", &c, 2, 2, &r);
        int64_t N = 2, S = 5, T = 4, E = 4;
        ag_tensor *spad = bools(AG_SHAPE(2, 5), "0001100000"), *tpad = bools(AG_SHAPE(2, 4), "00010011");
        if (variant == 1) { /* the same positions as -inf in a float mask */
            spad = ag_masked_fill(ag_zeros(AG_F64, AG_SHAPE(2, 5)), spad, -INFINITY);
            tpad = ag_masked_fill(ag_zeros(AG_F64, AG_SHAPE(2, 4)), tpad, -INFINITY);
        }
        ag_tensor *src = ag_randn(&r, AG_F64, AG_SHAPE(S, N, E)), *tgt = ag_randn(&r, AG_F64, AG_SHAPE(T, N, E));
        if (variant == 1) src = ag_transpose(src, 0, 1), tgt = ag_transpose(tgt, 0, 1); /* (N,L,E), strided */
        ag_transformer_args a = {.src_key_padding_mask = spad, .tgt_key_padding_mask = tpad,
                                 .memory_key_padding_mask = spad, .tgt_is_causal = true};
        if (variant == 2) { /* sequence 0 alone */
            src = ag_select(src, 1, 0);
            tgt = ag_select(tgt, 1, 0);
            a.src_key_padding_mask = a.memory_key_padding_mask = ag_select(spad, 0, 0);
            a.tgt_key_padding_mask = ag_select(tpad, 0, 0);
            N = 1;
        }
        ag_tensor *y[2], *mem[2];
        for (int skip = 0; skip < 2; skip++) {
            for (int l = 0; l < 2; l++)
                t->encoder.layers[l].cfg.skip_padding = t->decoder.layers[l].cfg.skip_padding = skip == 1;
            if (variant == 3) { /* one encoder layer, one decoder layer */
                mem[skip] = ag_transformer_encoder_layer_forward(&t->encoder.layers[0], src, &a);
                y[skip] = ag_transformer_decoder_layer_forward(&t->decoder.layers[0], tgt, mem[skip], &a);
            } else {
                mem[skip] = ag_transformer_encoder_forward(&t->encoder, src, &a);
                y[skip] = ag_transformer_forward(t, src, tgt, &a);
            }
            assert_non_null(y[skip]);
        }
        assert_int_equal(tu_error_count(), 0);
        int bf = variant == 1, un = variant == 2;
        for (int64_t n = 0; n < N; n++)
            for (int which = 0; which < 2; which++) { /* memory, then output */
                int64_t L = which ? T : S;
                ag_tensor *pad = which ? tpad : spad, **v = which ? y : mem;
                for (int64_t l = 0; l < L; l++) {
                    double pv = ag_get(pad, (int64_t[]){n, l});
                    bool padded = variant == 1 ? pv == -INFINITY : pv != 0;
                    for (int64_t e = 0; e < E; e++) {
                        int64_t i3[3] = {bf ? n : l, bf ? l : n, e}, i2[2] = {l, e};
                        double a0 = ag_get(v[0], un ? i2 : i3), a1 = ag_get(v[1], un ? i2 : i3);
                        if (!padded) {
                            if (fabs(a0 - a1) > 1e-12) fail_msg("variant %d %s (%lld,%lld,%lld): %.17g vs %.17g",
                                                                variant, which ? "output" : "memory", (long long)n,
                                                                (long long)l, (long long)e, a1, a0);
                        } else if (a1 != 0.0) {
                            fail_msg("variant %d %s (%lld,%lld,%lld) is padding: %.17g, not 0", variant,
                                     which ? "output" : "memory", (long long)n, (long long)l, (long long)e, a1);
                        }
                    }
                }
            }
        ag_params_free(p);
    }
}

static void test_skip_padding_refuses_a_memory_mask_other_than_the_source_one(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config c = small_config(false, AG_ACTIVATION_RELU, true);
    c.skip_padding = true;
    ag_rng r = ag_rng_new(3);
    ag_transformer_module *t = ag_arena_alloc(ag_arena_current(), sizeof *t);
    *t = ag_transformer_new(p, "", &c, 1, 1, &r);
    ag_tensor *src = ag_randn(&r, AG_F32, AG_SHAPE(2, 3, 4)), *tgt = ag_randn(&r, AG_F32, AG_SHAPE(2, 2, 4));
    ag_transformer_args a = {.src_key_padding_mask = bools(AG_SHAPE(2, 3), "001000")};
    assert_null(ag_transformer_forward(t, src, tgt, &a));
    tu_assert_error("ag_transformer_forward", "skip_padding", "memory_key_padding_mask");
    a.memory_key_padding_mask = bools(AG_SHAPE(2, 3), "100000"); /* misses the source's padding */
    assert_null(ag_transformer_forward(t, src, tgt, &a));
    tu_assert_error("ag_transformer_forward", "skip_padding", "memory_key_padding_mask");
    a.memory_key_padding_mask = bools(AG_SHAPE(2, 3), "001000"); /* the same positions, another tensor */
    assert_non_null(ag_transformer_forward(t, src, tgt, &a));
    a.memory_key_padding_mask = bools(AG_SHAPE(2, 3), "011000"); /* more of them */
    assert_non_null(ag_transformer_forward(t, src, tgt, &a));
    assert_int_equal(tu_error_count(), 0);
    ag_params_free(p);
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
        T(test_training_draws_dropout_at_torchs_positions_and_same_seed_repeats),
        T(test_eval_mode_draws_nothing_and_equals_training_with_dropout_zero),
        T(test_dropout_one_zeroes_every_block_leaving_only_the_norms),
        T(test_encoder_layer_gradcheck_post_and_pre_norm_relu_and_gelu_with_key_padding),
        T(test_decoder_layer_gradcheck_causal_tgt_mask_and_memory_key_padding),
        T(test_seq2seq_loss_gradcheck_over_every_parameter),
        T(test_recomputed_attention_gives_the_same_loss_and_gradients_in_less_memory),
        T(test_seq2seq_gradcheck_with_recomputed_attention),
        T(test_kept_ff_activation_gives_the_same_loss_and_gradients_holding_it),
        T(test_seq2seq_gradcheck_with_kept_ff_activation),
        T(test_skip_padding_gives_the_same_loss_and_gradients),
        T(test_seq2seq_gradcheck_with_skip_padding),
        T(test_a_second_backward_over_the_same_graph_gives_the_same_gradients),
        T(test_skip_padding_keeps_the_outputs_at_real_positions),
        T(test_skip_padding_refuses_a_memory_mask_other_than_the_source_one),
        T(test_new_reports_bad_config_and_forward_refuses_the_failed_module),
        T(test_forward_reports_input_and_mask_shapes_naming_the_argument),
        T(test_decoder_stack_reports_cross_attention_weights_per_layer),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
