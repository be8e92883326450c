/* Transformer layers in training: dropout at torch's positions and its reproducibility,
 * gradients against finite differences (layers and a whole seq2seq loss), and the memory
 * options (recomputed attention, the kept feed-forward activation, skip_padding) giving the
 * same loss and gradients as the model run with each option off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn_transformer_util.h"

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

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, tu_setup, tu_teardown)
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
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
