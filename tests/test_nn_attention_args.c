/* Masks the attention entry points refuse: an integer mask (torch: "only bool and floating
 * types of masks are supported"), a float mask of another dtype than the query, and a mask
 * its arena has forgotten. Each is reported once, naming the op, the mask and its dtype, and
 * the call returns NULL, never the output computed without the mask. */
#include <math.h>
#include <string.h>

#include "test_util.h"

typedef struct {
    ag_params *p;
    ag_mha_module m;
    ag_tensor *q; /* (N,L,E) = (2,3,4), batch-first self-attention */
} mha_case;

static mha_case mha_case_new(void) {
    mha_case c;
    ag_rng r = ag_rng_new(5);
    c.p = ag_params_new(AG_F32);
    ag_mha_config cfg = ag_mha_defaults(4, 2);
    cfg.batch_first = true;
    c.m = ag_mha_new(c.p, "", &cfg, &r);
    c.q = tu_seq(AG_F32, AG_SHAPE(2, 3, 4), 0.3, 0.1);
    return c;
}

static ag_tensor *forward(mha_case *c, ag_tensor *q, ag_tensor *kpm, ag_tensor *am) {
    ag_mha_args a = {.key_padding_mask = kpm, .attn_mask = am};
    return ag_mha_forward(&c->m, q, q, q, &a, NULL);
}

static void test_mha_refuses_integer_masks_and_returns_null(void **s) {
    mha_case c = mha_case_new();
    ag_tensor *kpm_i64 = ag_zeros(AG_I64, AG_SHAPE(2, 3)), *am_i32 = ag_zeros(AG_I32, AG_SHAPE(3, 3));
    assert_null(forward(&c, c.q, kpm_i64, NULL));
    tu_assert_error("ag_mha_forward", "key_padding_mask (2,3) of dtype i64", "expected bool or f32");
    assert_null(forward(&c, c.q, NULL, am_i32));
    tu_assert_error("ag_mha_forward", "attn_mask (3,3) of dtype i32", "expected bool or f32");
    assert_null(forward(&c, c.q, ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), am_i32)); /* one good, one not */
    tu_assert_error("ag_mha_forward", "attn_mask (3,3) of dtype i32");
    /* a float mask of the other float dtype (torch: the mask's dtype must match the query's) */
    assert_null(forward(&c, c.q, ag_zeros(AG_F64, AG_SHAPE(2, 3)), NULL));
    tu_assert_error("ag_mha_forward", "key_padding_mask (2,3) of dtype f64", "expected bool or f32");
    /* unbatched: (L,E) with a (S) mask */
    ag_tensor *q1 = ag_select(c.q, 0, 0);
    assert_null(forward(&c, q1, ag_zeros(AG_I64, AG_SHAPE(3)), NULL));
    tu_assert_error("ag_mha_forward", "key_padding_mask (1,3) of dtype i64");
    /* the same masks as bool give the output (the zeros mask nothing: as no mask at all) */
    ag_tensor *y = forward(&c, c.q, ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), ag_zeros(AG_BOOL, AG_SHAPE(3, 3)));
    assert_non_null(y);
    tu_assert_same(y, forward(&c, c.q, NULL, NULL), 0);
    assert_int_equal(tu_error_count(), 0);
    ag_params_free(c.p);
}

static void test_mha_and_attention_refuse_a_forgotten_mask(void **s) {
    mha_case c = mha_case_new();
    ag_tensor *old_kpm = ag_zeros(AG_BOOL, AG_SHAPE(2, 3)), *old_am = ag_zeros(AG_F32, AG_SHAPE(3, 3));
    ag_arena_reset(ag_arena_current());
    ag_tensor *q = tu_seq(AG_F32, AG_SHAPE(2, 3, 4), 0.3, 0.1);
    ag_tensor *fresh = ag_ones(AG_BOOL, AG_SHAPE(2, 3)); /* where the old mask's values were */
    (void)fresh;
    assert_null(forward(&c, q, old_kpm, NULL));
    tu_assert_error("ag_mha_forward", "(2,3) bool tensor made in arena generation", "ag_arena_reset");
    assert_null(forward(&c, q, NULL, old_am));
    tu_assert_error("ag_mha_forward", "(3,3) f32 tensor made in arena generation");
    /* the fused attention and the masked softmax themselves */
    ag_tensor *q4 = tu_seq(AG_F32, AG_SHAPE(1, 1, 3, 2), 0.2, 0.0);
    assert_null(ag_attention(q4, q4, q4, old_am, false, 0, NULL, false, NULL));
    tu_assert_error("ag_attention", "(3,3) f32 tensor made in arena generation");
    assert_null(ag_masked_softmax(ag_zeros(AG_F32, AG_SHAPE(3, 3)), old_am, -1));
    tu_assert_error("ag_masked_softmax", "(3,3) f32 tensor made in arena generation");
    assert_int_equal(tu_error_count(), 0);
    ag_params_free(c.p);
}

/* the Transformer's layers check their masks before the attention sees them */
static void test_transformer_layer_refuses_integer_and_forgotten_masks(void **s) {
    ag_params *p = ag_params_new(AG_F32);
    ag_transformer_config cfg = ag_transformer_defaults(4, 2);
    cfg.dim_feedforward = 8;
    cfg.batch_first = true;
    ag_rng r = ag_rng_new(3);
    ag_transformer_encoder_layer_module m = ag_transformer_encoder_layer_new(p, "", &cfg, &r);
    ag_tensor *old_mask = ag_zeros(AG_BOOL, AG_SHAPE(3, 3));
    ag_arena_reset(ag_arena_current());
    ag_tensor *src = tu_seq(AG_F32, AG_SHAPE(2, 3, 4), 0.3, 0.1);
    ag_transformer_args a = {.src_key_padding_mask = ag_zeros(AG_I64, AG_SHAPE(2, 3))};
    assert_null(ag_transformer_encoder_layer_forward(&m, src, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src_key_padding_mask (2,3)", "dtype i64");
    a = (ag_transformer_args){.src_mask = ag_zeros(AG_I32, AG_SHAPE(3, 3))};
    assert_null(ag_transformer_encoder_layer_forward(&m, src, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "src_mask (3,3)", "dtype i32");
    a = (ag_transformer_args){.src_mask = old_mask};
    assert_null(ag_transformer_encoder_layer_forward(&m, src, &a));
    tu_assert_error("ag_transformer_encoder_layer_forward", "(3,3) bool tensor made in arena generation");
    a = (ag_transformer_args){.src_mask = ag_zeros(AG_BOOL, AG_SHAPE(3, 3))};
    assert_non_null(ag_transformer_encoder_layer_forward(&m, src, &a));
    assert_int_equal(tu_error_count(), 0);
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
        T(test_mha_refuses_integer_masks_and_returns_null),
        T(test_mha_and_attention_refuse_a_forgotten_mask),
        T(test_transformer_layer_refuses_integer_and_forgotten_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
