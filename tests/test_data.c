/* Data helpers: pad_sequence (torch.nn.utils.rnn.pad_sequence's layout), lengths and the padding
 * mask (true = pad), teacher forcing, the seeded shuffle and the length-bucketed batcher. The
 * expected values are worked by hand from the definitions. */
#include <string.h>

#include "test_util.h"

static ag_tensor *ids(int64_t n, const int64_t *v) { return ag_from_buffer(AG_I64, AG_SHAPE(n), v); }

static void test_pad_sequence_pads_to_the_longest_in_both_layouts(void **s) {
    ag_tensor *seqs[3] = {ids(3, (int64_t[]){1, 2, 3}), ids(2, (int64_t[]){4, 5}), ids(1, (int64_t[]){6})};
    ag_tensor *bf = ag_pad_sequence(3, seqs, true, -1);
    tu_assert_shape(bf, 3, 3);
    tu_assert_values(bf, 0, 1, 2, 3, 4, 5, -1, 6, -1, -1);
    ag_tensor *tf = ag_pad_sequence(3, seqs, false, 0);
    tu_assert_shape(tf, 3, 3);
    tu_assert_values(tf, 0, 1, 4, 6, 2, 5, 0, 3, 0, 0);
    tu_assert_values(ag_sequence_lengths(3, seqs), 0, 3, 2, 1);
    /* trailing dims: (L, 2) sequences -> (2, 2, 2) batch-first */
    ag_tensor *a = tu_tensor(AG_F64, AG_SHAPE(2, 2), 1, 2, 3, 4), *b = tu_tensor(AG_F64, AG_SHAPE(1, 2), 5, 6);
    tu_assert_values(ag_pad_sequence(2, (ag_tensor *[]){a, b}, true, 9), 0, 1, 2, 3, 4, 5, 6, 9, 9);
}

static void test_pad_sequence_gradient_reaches_only_the_real_positions(void **s) {
    ag_tensor *a = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(3), 1, 2, 3)), *b = tu_leaf(tu_tensor(AG_F64, AG_SHAPE(1), 4));
    ag_tensor *y = ag_pad_sequence(2, (ag_tensor *[]){a, b}, true, 0.5);
    ag_tensor *w = tu_tensor(AG_F64, AG_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ag_backward(ag_sum(ag_mul(y, w), 0, NULL, false), NULL);
    tu_assert_values(a->grad, 0, 1, 2, 3);
    tu_assert_values(b->grad, 0, 4);
}

static ag_tensor *f_pad(int n, ag_tensor **in, void *ctx) { return ag_pad_sequence(n, in, false, 0.25); }

static void test_pad_sequence_passes_gradcheck(void **s) {
    ag_tensor *in[2] = {tu_leaf(tu_seq(AG_F64, AG_SHAPE(3, 2), 0.7, 0.1)), tu_leaf(tu_seq(AG_F64, AG_SHAPE(1, 2), 0.3, 0.2))};
    tu_assert_gradcheck(f_pad, NULL, 2, in);
}

static void test_padding_mask_is_true_at_the_padding(void **s) {
    ag_tensor *len = ag_from_buffer(AG_I32, AG_SHAPE(3), (int32_t[]){3, 1, 0});
    ag_tensor *m = ag_padding_mask(len, 4);
    assert_int_equal(m->dtype, AG_BOOL);
    tu_assert_values(m, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1);
    assert_null(ag_padding_mask(len, 2));
    tu_assert_error("ag_padding_mask", "lengths[0] = 3", "[0, 2]");
}

static void test_teacher_forcing_shifts_bos_in_and_eos_out(void **s) {
    ag_tensor *y = ag_from_buffer(AG_I64, AG_SHAPE(2, 3), (int64_t[]){5, 6, 7, 8, 9, 0});
    ag_tensor *len = ag_from_buffer(AG_I64, AG_SHAPE(2), (int64_t[]){3, 2}), *in, *out;
    ag_teacher_forcing(y, len, 1, 2, 0, &in, &out);
    tu_assert_shape(in, 2, 4);
    tu_assert_values(in, 0, 1, 5, 6, 7, 1, 8, 9, 0);
    tu_assert_values(out, 0, 5, 6, 7, 2, 8, 9, 2, 0);
    int64_t row_in[5], row_out[5];
    ag_teacher_forcing_row((int64_t[]){4, 4}, 2, 5, 1, 2, 0, row_in, row_out);
    assert_memory_equal(row_in, ((int64_t[]){1, 4, 4, 0, 0}), sizeof row_in);
    assert_memory_equal(row_out, ((int64_t[]){4, 4, 2, 0, 0}), sizeof row_out);
    ag_teacher_forcing(ag_zeros(AG_F32, AG_SHAPE(2, 3)), len, 1, 2, 0, &in, &out);
    tu_assert_error("ag_teacher_forcing", "(2,3) f32", "i64");
    assert_null(in);
}

static void test_shuffle_is_fisher_yates_on_the_seeds_uniforms(void **s) {
    /* the uniforms the shuffle draws, one per position from the last down */
    ag_rng r = ag_rng_new(42);
    double u[3];
    ag_rng_uniform_f64(&r, 3, u);
    int64_t expect[4] = {0, 1, 2, 3};
    for (int i = 3, k = 0; i > 0; i--, k++) {
        int64_t j = (int64_t)(u[k] * (i + 1)), t = expect[i];
        expect[i] = expect[j];
        expect[j] = t;
    }
    int64_t a[4] = {0, 1, 2, 3};
    ag_rng q = ag_rng_new(42);
    ag_shuffle(a, 4, &q);
    assert_memory_equal(a, expect, sizeof a);
    assert_int_equal(q.counter, 3);
    /* a permutation, the same for the same seed, another for another seed */
    int64_t b[64], c[64], d[64];
    for (int i = 0; i < 64; i++) b[i] = c[i] = d[i] = i;
    ag_rng r1 = ag_rng_new(7), r2 = ag_rng_new(7), r3 = ag_rng_new(8);
    ag_shuffle(b, 64, &r1);
    ag_shuffle(c, 64, &r2);
    ag_shuffle(d, 64, &r3);
    assert_memory_equal(b, c, sizeof b);
    assert_true(memcmp(b, d, sizeof b) != 0);
    uint64_t seen = 0;
    for (int i = 0; i < 64; i++) seen |= (uint64_t)1 << b[i];
    assert_true(seen == UINT64_MAX);
}

/* the sequences of every batch of epoch e, batches in visiting order, -1 between batches */
static int batches_of(ag_batcher *b, int64_t e, int64_t *out) {
    int k = 0;
    ag_batcher_set_epoch(b, e);
    for (int64_t step = 0; step < b->nbatches; step++) {
        const int64_t *rows;
        int n = ag_batcher_batch(b, step, &rows);
        for (int i = 0; i < n; i++) out[k++] = rows[i];
        out[k++] = -1;
    }
    return k;
}

static void test_batcher_buckets_by_length_in_batches_of_a_count(void **s) {
    /* lengths of sequences 0..6; distinct, so the order is by length alone */
    int32_t len[7] = {5, 1, 7, 3, 2, 6, 4};
    ag_batcher b;
    char err[200];
    ag_batcher_config c = {.n = 7, .len = {len, NULL}, .batch_size = 3, .seed = 1, .shuffle = false};
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), 0);
    assert_int_equal(b.nbatches, 3);
    assert_int_equal(b.max_batch, 3);
    assert_int_equal(b.max_len[0], 7);
    int64_t got[16];
    int n = batches_of(&b, 0, got);
    int64_t want[] = {1, 4, 3, -1, 6, 0, 5, -1, 2, -1}; /* lengths 1 2 3 | 4 5 6 | 7 */
    assert_int_equal(n, 10);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(ag_batcher_batch(&b, 3, NULL), 0);
    ag_batcher_free(&b);
}

static void test_batcher_token_budget_counts_padded_tokens_of_the_longer_side(void **s) {
    /* pairs (source, target): sorted by source length then target length */
    int32_t src[6] = {2, 2, 3, 4, 4, 9}, tgt[6] = {3, 2, 2, 6, 4, 1};
    ag_batcher b;
    char err[200];
    ag_batcher_config c = {.n = 6, .len = {src, tgt}, .max_tokens = 8, .seed = 3};
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), 0);
    /* order 1 (2,2), 0 (2,3), 2 (3,2), 4 (4,4), 3 (4,6), 5 (9,1):
     * {1,0}: 2 x 3 = 6; + 2 would be 3 x 3 = 9 > 8 -> {2,4}: 2 x 4 = 8; {3}: 6; {5}: 9 (alone) */
    int64_t got[16], want[] = {1, 0, -1, 2, 4, -1, 3, -1, 5, -1};
    assert_int_equal(batches_of(&b, 0, got), 10);
    assert_memory_equal(got, want, sizeof want);
    assert_int_equal(b.max_len[1], 6);
    ag_batcher_free(&b);
    /* both limits: at most 1 per batch */
    c.batch_size = 1;
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), 0);
    assert_int_equal(b.nbatches, 6);
    ag_batcher_free(&b);
}

static void test_batcher_is_deterministic_for_a_seed_and_shuffles_per_epoch(void **s) {
    int32_t len[48];
    for (int i = 0; i < 48; i++) len[i] = 1 + i % 4; /* 12 of each length: the seed orders the ties */
    ag_batcher a, b, d;
    char err[200];
    ag_batcher_config c = {.n = 48, .len = {len, NULL}, .batch_size = 4, .seed = 11, .shuffle = true};
    assert_int_equal(ag_batcher_init(&a, &c, err, sizeof err), 0);
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), 0);
    c.seed = 12;
    assert_int_equal(ag_batcher_init(&d, &c, err, sizeof err), 0);
    int64_t x[64] = {0}, y[64] = {0}, z[64] = {0};
    batches_of(&a, 2, x);
    batches_of(&b, 0, y);
    batches_of(&b, 2, y); /* the order of an epoch does not depend on the epochs before */
    assert_memory_equal(x, y, sizeof x);
    batches_of(&a, 3, z);
    assert_true(memcmp(x, z, sizeof x) != 0);
    assert_true(memcmp(a.order, d.order, sizeof(int64_t) * 48) != 0); /* ties ordered by the seed */
    for (int64_t k = 0; k < a.nbatches; k++) { /* 4 divides 12: each batch holds one length */
        const int64_t *rows;
        int n = ag_batcher_batch(&a, k, &rows);
        for (int i = 1; i < n; i++) assert_int_equal(len[rows[i]], len[rows[0]]);
    }
    ag_batcher_free(&a);
    ag_batcher_free(&b);
    ag_batcher_free(&d);
}

static void test_batcher_reports_bad_input_with_a_message(void **s) {
    int32_t len[2] = {1, -1};
    ag_batcher b;
    char err[200];
    ag_batcher_config c = {.n = 2, .len = {len, NULL}};
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "give a batch size or a token budget"));
    c.batch_size = 2;
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "sequence 1 has a negative length"));
    c.n = 0;
    assert_int_equal(ag_batcher_init(&b, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "no sequences"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)
        T(test_pad_sequence_pads_to_the_longest_in_both_layouts),
        T(test_pad_sequence_gradient_reaches_only_the_real_positions),
        T(test_pad_sequence_passes_gradcheck),
        T(test_padding_mask_is_true_at_the_padding),
        T(test_teacher_forcing_shifts_bos_in_and_eos_out),
        T(test_shuffle_is_fisher_yates_on_the_seeds_uniforms),
        T(test_batcher_buckets_by_length_in_batches_of_a_count),
        T(test_batcher_token_budget_counts_padded_tokens_of_the_longer_side),
        T(test_batcher_is_deterministic_for_a_seed_and_shuffles_per_epoch),
        T(test_batcher_reports_bad_input_with_a_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
