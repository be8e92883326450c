/* nn/decode: greedy, beam search and sampling on two tiny random seq2seq models (f64): a
 * Transformer decoding from its key/value cache and a GRU with additive attention decoding from
 * an ag_decode_state. The witnesses: the model's log-probabilities recomputed with teacher
 * forcing (the Transformer's full causal forward, the GRU's cell run over the whole target), an
 * exhaustive search over every sequence up to a small length, and the same sentences decoded
 * one at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { PAD = 0, BOS = 1, EOS = 2, V = 6, SV = 7, E = 8, NB = 5, SL = 5 };

typedef struct {
    bool gru;
    ag_params *p;
    ag_embedding_module se, te;
    ag_linear_module gen;
    ag_transformer_module tf;       /* Transformer */
    ag_gru_module enc;              /* GRU */
    ag_additive_attention_module att;
    ag_gru_cell_module cell;
    ag_decoder_cache *cache;        /* while decoding */
    ag_decode_state *st;
} tiny;

enum { ST_H, ST_MEM, ST_KEYS, ST_PAD };

static tiny *tiny_new(bool gru, uint64_t seed) {
    tiny *m = calloc(1, sizeof *m);
    ag_rng r = ag_rng_new(seed);
    m->gru = gru;
    m->p = ag_params_new(AG_F64);
    m->se = ag_embedding_new(m->p, "se", SV, E, PAD, &r);
    m->te = ag_embedding_new(m->p, "te", V, E, PAD, &r);
    if (gru) {
        ag_gru_config c = ag_gru_defaults(E, E);
        c.batch_first = true;
        m->enc = ag_gru_new(m->p, "enc", &c, &r);
        m->att = ag_additive_attention_new(m->p, "att", E, E, E, &r);
        m->cell = ag_gru_cell_new(m->p, "cell", 2 * E, E, true, &r);
        m->gen = ag_linear_new(m->p, "gen", 2 * E, V, true, &r);
    } else {
        ag_transformer_config c = ag_transformer_defaults(E, 2);
        c.dim_feedforward = 16;
        c.dropout = 0;
        c.batch_first = true;
        m->tf = ag_transformer_new(m->p, "tf", &c, 1, 1, &r);
        m->gen = ag_linear_new(m->p, "gen", E, V, true, &r);
    }
    ag_normal_(&r, m->gen.weight, 0.0, 1.5); /* distributions far from uniform */
    return m;
}

static void tiny_free(tiny *m) {
    ag_params_free(m->p);
    free(m);
}

/* src (B,S) -> memory (B,S,E); *h0 (B,E) for the GRU */
static ag_tensor *encode(tiny *m, ag_tensor *src, ag_tensor **h0) {
    ag_tensor *pad = ag_eq_scalar(src, PAD);
    if (!m->gru) {
        ag_transformer_args a = {.src_key_padding_mask = pad};
        return ag_transformer_encoder_forward(&m->tf.encoder, ag_embedding_forward(&m->se, src), &a);
    }
    ag_gru_args a = {.lengths = ag_sum(ag_logical_not(pad), 1, (int[]){1}, false)};
    ag_tensor *h_n = NULL, *out = ag_gru_forward(&m->enc, ag_embedding_forward(&m->se, src), &a, &h_n);
    *h0 = ag_select(h_n, 0, 0);
    return out;
}

/* one GRU decoder step: ids (R), *h (R,E) moves on -> logits (R,V) */
static ag_tensor *gru_step(tiny *m, ag_tensor *mem, ag_tensor *keys, ag_tensor *pad, ag_tensor **h, ag_tensor *ids) {
    ag_tensor *ctx = ag_additive_attention_forward(&m->att, *h, mem, keys, pad, NULL);
    *h = ag_gru_cell_forward(&m->cell, ag_cat(2, (ag_tensor *[]){ag_embedding_forward(&m->te, ids), ctx}, 1), *h);
    return ag_linear_forward(&m->gen, ag_cat(2, (ag_tensor *[]){*h, ctx}, 1));
}

/* ---- the provider ---- */
static bool tiny_start(void *self, ag_tensor *src, int64_t max_rows, int64_t max_steps) {
    tiny *m = self;
    ag_tensor *h0 = NULL, *mem = encode(m, src, &h0), *pad = ag_eq_scalar(src, PAD);
    if (!m->gru) return (m->cache = ag_decoder_cache_new_rows(&m->tf.decoder, mem, pad, max_steps, max_rows)) != NULL;
    m->st = ag_decode_state_new(src->shape[0], max_rows);
    return m->st && ag_decode_state_set(m->st, ST_H, h0, false) && ag_decode_state_set(m->st, ST_MEM, mem, true) &&
           ag_decode_state_set(m->st, ST_KEYS, ag_additive_attention_keys(&m->att, mem), true) &&
           ag_decode_state_set(m->st, ST_PAD, pad, true);
}

static ag_tensor *tiny_step(void *self, ag_tensor *ids) {
    tiny *m = self;
    if (!m->gru) return ag_linear_forward(&m->gen, ag_decoder_step(&m->tf.decoder, m->cache, ag_embedding_forward(&m->te, ids)));
    ag_tensor *h = ag_decode_state_get(m->st, ST_H);
    ag_tensor *y = gru_step(m, ag_decode_state_get(m->st, ST_MEM), ag_decode_state_get(m->st, ST_KEYS),
                            ag_decode_state_get(m->st, ST_PAD), &h, ids);
    return ag_decode_state_set(m->st, ST_H, h, false) ? y : NULL;
}

static void tiny_reorder(void *self, ag_tensor *rows) {
    tiny *m = self;
    if (m->gru) ag_decode_state_reorder(m->st, rows);
    else ag_decoder_cache_reorder(m->cache, rows);
}

static void tiny_end(void *self) {
    tiny *m = self;
    ag_decode_state_free(m->st);
    m->st = NULL;
    m->cache = NULL;
}

static ag_decode_model provider(tiny *m) { return (ag_decode_model){m, tiny_start, tiny_step, tiny_reorder, tiny_end, 0}; }

/* ---- the witness: teacher forcing ---- */

/* log p(hyp | src) of the n source ids and the len tokens of hyp, by a full forward */
static double teacher_score(tiny *m, const int64_t *src, int64_t n, const int64_t *hyp, int64_t len) {
    if (len == 0) return 0;
    bool grad = ag_set_grad_enabled(false);
    int64_t in[64];
    in[0] = BOS;
    memcpy(in + 1, hyp, sizeof(int64_t) * (size_t)(len - 1));
    ag_tensor *s = ag_from_buffer(AG_I64, AG_SHAPE(1, n), src), *tgt = ag_from_buffer(AG_I64, AG_SHAPE(1, len), in);
    ag_tensor *h = NULL, *mem = encode(m, s, &h), *logits;
    if (!m->gru) {
        ag_transformer_args a = {.tgt_is_causal = true};
        logits = ag_linear_forward(&m->gen, ag_transformer_decoder_forward(&m->tf.decoder, ag_embedding_forward(&m->te, tgt), mem, &a));
        logits = ag_select(logits, 0, 0);
    } else {
        ag_tensor *rows[64], *keys = ag_additive_attention_keys(&m->att, mem);
        for (int64_t i = 0; i < len; i++) rows[i] = gru_step(m, mem, keys, NULL, &h, ag_select(tgt, 1, i));
        logits = ag_cat((int)len, rows, 0);
    }
    ag_tensor *lp = ag_log_softmax(logits, -1);
    double sum = 0;
    for (int64_t i = 0; i < len; i++) sum += ag_get(lp, (int64_t[]){i, hyp[i]});
    ag_set_grad_enabled(grad);
    return sum;
}

/* the batch of sources: sentence b has SRC_LEN[b] ids (the last <eos>), then padding */
static const int64_t SRC[NB][SL] = {{3, 4, 5, 6, EOS}, {4, EOS}, {5, 5, 3, EOS}, {6, EOS}, {3, 6, EOS}};
static const int64_t SRC_LEN[NB] = {5, 2, 4, 2, 3};

static ag_tensor *sources(int64_t first, int64_t n) {
    return ag_from_buffer(AG_I64, AG_SHAPE(n, SL), &SRC[first][0]);
}

static ag_decode_result decode(tiny *m, ag_tensor *src, const ag_decode_config *c) {
    ag_decode_model dm = provider(m);
    ag_decode_result r;
    assert_true(ag_decode(&dm, src, c, &r));
    return r;
}

static void assert_same_hyp(const ag_decode_result *a, int64_t ra, const ag_decode_result *b, int64_t rb, double tol) {
    assert_int_equal(a->lengths[ra], b->lengths[rb]);
    for (int64_t i = 0; i < a->lengths[ra]; i++) assert_int_equal(a->tokens[ra * a->width + i], b->tokens[rb * b->width + i]);
    assert_true(fabs(a->scores[ra] - b->scores[rb]) <= tol);
}

/* ---- tests ---- */

/* Beam search with one beam is greedy, token for token and score for score (two code paths). */
static void test_beam_of_one_is_greedy(void **s) {
    for (int g = 0; g < 2; g++) {
        tiny *m = tiny_new(g, 11);
        ag_decode_config c = ag_decode_defaults();
        ag_decode_result greedy = decode(m, sources(0, NB), &c);
        c.method = AG_DECODE_BEAM;
        c.beam_size = 1;
        ag_decode_result beam = decode(m, sources(0, NB), &c);
        int64_t nonempty = 0;
        for (int64_t b = 0; b < NB; b++) {
            assert_same_hyp(&greedy, b, &beam, b, 0);
            nonempty += greedy.lengths[b] > 1;
        }
        assert_true(nonempty >= 2); /* the model says something */
        ag_decode_result_free(&greedy);
        ag_decode_result_free(&beam);
        tiny_free(m);
    }
}

/* Every score and normalised score of an n-best list is the model's log-probability of its
 * tokens, recomputed with teacher forcing; the list is sorted by normalised score. */
static void test_nbest_scores_are_teacher_forced_log_probabilities(void **s) {
    for (int g = 0; g < 2; g++) {
        tiny *m = tiny_new(g, 5);
        ag_decode_config c = ag_decode_defaults();
        c.method = AG_DECODE_BEAM;
        c.beam_size = c.n_best = 4;
        c.length_norm = g ? AG_LENGTH_MARIAN : AG_LENGTH_GNMT;
        ag_decode_result r = decode(m, sources(0, NB), &c);
        for (int64_t b = 0; b < NB; b++)
            for (int64_t k = 0; k < 4; k++) {
                int64_t o = b * 4 + k, len = r.lengths[o];
                assert_true(len >= 1 && len <= 2 * SRC_LEN[b] + 8);
                double want = teacher_score(m, SRC[b], SRC_LEN[b], r.tokens + o * r.width, len);
                assert_true(fabs(r.scores[o] - want) < 1e-9);
                double pen = g ? pow((double)len, 0.6) : pow((5.0 + (double)len) / 6.0, 0.6);
                assert_true(fabs(r.norm_scores[o] - want / pen) < 1e-9);
                if (k > 0) assert_true(r.norm_scores[o] <= r.norm_scores[o - 1]);
                for (int64_t i = 0; i < len; i++) {
                    int64_t v = r.tokens[o * r.width + i];
                    assert_true(v != PAD && v != BOS && (v == EOS) == (i == len - 1 && v == EOS));
                }
            }
        ag_decode_result_free(&r);
        tiny_free(m);
    }
}

/* Every hypothesis of at most L tokens, scored by teacher forcing: len-1 words (3 of them) then
 * <eos>, or, at the limit L, L words. Returns the best normalised score, its tokens and length. */
static double exhaustive(tiny *m, int64_t b, int64_t L, ag_length_norm norm, double alpha, int64_t *best, int64_t *blen) {
    static const int64_t lasts[4] = {EOS, 3, 4, 5};
    double bs = -INFINITY;
    for (int64_t len = 1, n = 1; len <= L; n *= 3, len++)
        for (int64_t code = 0; code < n; code++)
            for (int last = 0; last < (len == L ? 4 : 1); last++) {
                int64_t hyp[16], x = code;
                for (int64_t i = 0; i < len - 1; i++, x /= 3) hyp[i] = 3 + x % 3;
                hyp[len - 1] = lasts[last];
                double sc = teacher_score(m, SRC[b], SRC_LEN[b], hyp, len) / ag_decode_length_penalty(norm, alpha, len);
                if (sc > bs) {
                    bs = sc;
                    memcpy(best, hyp, sizeof(int64_t) * (size_t)len);
                    *blen = len;
                }
            }
    return bs;
}

/* With more beams than the candidates of any step (L = 3: at most 1 + 3 + 9·4 = 40 of them),
 * nothing is pruned, so beam search must return the hypothesis of highest normalised score
 * among all sequences of at most 3 tokens, found here exhaustively by teacher forcing. */
static void test_wide_beam_finds_the_exhaustive_best(void **s) {
    for (int g = 0; g < 2; g++)
        for (int norm = 0; norm < 2; norm++) {
            tiny *m = tiny_new(g, 3 + (uint64_t)norm);
            ag_decode_config c = ag_decode_defaults();
            c.method = AG_DECODE_BEAM;
            c.beam_size = 48;
            c.max_len_a = 0;
            c.max_len_b = 3;
            c.length_norm = norm ? AG_LENGTH_MARIAN : AG_LENGTH_GNMT;
            c.length_penalty = norm ? 1.0 : 0.6;
            ag_decode_result r = decode(m, sources(0, NB), &c);
            for (int64_t b = 0; b < NB; b++) {
                int64_t best[16], blen = 0;
                double want = exhaustive(m, b, 3, c.length_norm, c.length_penalty, best, &blen);
                assert_true(fabs(r.norm_scores[b] - want) < 1e-9);
                assert_int_equal(r.lengths[b], blen);
                for (int64_t i = 0; i < blen; i++) assert_int_equal(r.tokens[b * r.width + i], best[i]);
            }
            ag_decode_result_free(&r);
            tiny_free(m);
        }
}

/* A batch decodes each sentence as it decodes alone: greedy, beam search (n-best) and sampling
 * (the sentences one call at a time from the same generator). */
static void test_batched_equals_one_sentence_at_a_time(void **s) {
    for (int g = 0; g < 2; g++)
        for (int method = 0; method < 3; method++) {
            tiny *m = tiny_new(g, 7);
            ag_decode_config c = ag_decode_defaults();
            c.method = (ag_decode_method)method;
            c.beam_size = 3;
            c.n_best = method == AG_DECODE_BEAM ? 3 : 1;
            ag_rng r1 = ag_rng_new(99), r2 = ag_rng_new(99);
            c.rng = &r1;
            ag_decode_result all = decode(m, sources(0, NB), &c);
            c.rng = &r2;
            for (int64_t b = 0; b < NB; b++) {
                ag_decode_result one = decode(m, sources(b, 1), &c);
                for (int64_t k = 0; k < c.n_best; k++) assert_same_hyp(&all, b * c.n_best + k, &one, k, 1e-12);
                ag_decode_result_free(&one);
            }
            assert_int_equal(r1.counter, r2.counter);
            ag_decode_result_free(&all);
            tiny_free(m);
        }
}

/* Sampling: the same seed gives the same translations, another seed others; top_k = 1,
 * temperature 0 and a temperature near 0 are greedy. */
static void test_sampling_is_seeded_and_its_limits_are_greedy(void **s) {
    tiny *m = tiny_new(true, 13);
    ag_decode_config c = ag_decode_defaults();
    ag_decode_result greedy = decode(m, sources(0, NB), &c);
    c.method = AG_DECODE_SAMPLE;
    c.temperature = 2.0; /* flatter: draws differ more */
    ag_decode_result runs[3];
    for (int i = 0; i < 3; i++) {
        ag_rng r = ag_rng_new(i < 2 ? 1 : 2);
        c.rng = &r;
        runs[i] = decode(m, sources(0, NB), &c);
    }
    bool differ = false;
    for (int64_t b = 0; b < NB; b++) {
        assert_same_hyp(&runs[0], b, &runs[1], b, 0);
        differ |= runs[0].lengths[b] != runs[2].lengths[b] ||
                  memcmp(runs[0].tokens + b * runs[0].width, runs[2].tokens + b * runs[2].width,
                         sizeof(int64_t) * (size_t)runs[0].lengths[b]) != 0;
        double want = teacher_score(m, SRC[b], SRC_LEN[b], runs[2].tokens + b * runs[2].width, runs[2].lengths[b]);
        assert_true(fabs(runs[2].scores[b] - want) < 1e-9); /* the model's log-probability, not the tempered one */
    }
    assert_true(differ);
    struct { double temperature; int64_t top_k; } greedy_like[] = {{1.0, 1}, {0.0, 0}, {1e-4, 0}};
    for (int i = 0; i < 3; i++) {
        ag_rng r = ag_rng_new(5);
        c.rng = &r;
        c.temperature = greedy_like[i].temperature;
        c.top_k = greedy_like[i].top_k;
        ag_decode_result x = decode(m, sources(0, NB), &c);
        for (int64_t b = 0; b < NB; b++) assert_same_hyp(&greedy, b, &x, b, 1e-12);
        ag_decode_result_free(&x);
    }
    for (int i = 0; i < 3; i++) ag_decode_result_free(&runs[i]);
    ag_decode_result_free(&greedy);
    tiny_free(m);
}

/* A sentence of n source ids gets at most floor(a·n + b) tokens, and never more than max_len. */
static void test_length_limits(void **s) {
    tiny *m = tiny_new(false, 21);
    /* a model that never says <eos>: its bias forbids it */
    ag_fill_(ag_narrow(m->gen.bias, 0, EOS, 1), -1e9);
    ag_decode_config c = ag_decode_defaults();
    c.max_len_a = 1.5;
    c.max_len_b = 1;
    ag_decode_result r = decode(m, sources(0, NB), &c);
    for (int64_t b = 0; b < NB; b++) assert_int_equal(r.lengths[b], (int64_t)floor(1.5 * (double)SRC_LEN[b] + 1));
    ag_decode_result_free(&r);
    c.max_len = 4;
    c.method = AG_DECODE_BEAM;
    r = decode(m, sources(0, NB), &c);
    for (int64_t b = 0; b < NB; b++) assert_int_equal(r.lengths[b], 4);
    assert_int_equal(r.width, 4);
    ag_decode_result_free(&r);
    tiny_free(m);
}

static ag_tensor *bad_step(void *self, ag_tensor *ids) {
    (void)self;
    return ag_zeros(AG_F64, AG_SHAPE(ids->shape[0] + 1, V));
}

/* Misuse is reported naming ag_decode (or the state's function) and fails without a crash. */
static void test_misuse_is_reported(void **s) {
    tiny *m = tiny_new(false, 1);
    ag_decode_model dm = provider(m);
    ag_decode_result r;
    ag_decode_config c = ag_decode_defaults();
    c.n_best = 2;
    assert_false(ag_decode(&dm, sources(0, NB), &c, &r));
    tu_assert_error("ag_decode", "n_best");
    assert_null(r.tokens);
    c = ag_decode_defaults();
    c.temperature = -1;
    assert_false(ag_decode(&dm, sources(0, NB), &c, &r));
    tu_assert_error("ag_decode", "temperature");
    c = ag_decode_defaults();
    assert_false(ag_decode(&dm, ag_zeros(AG_F32, AG_SHAPE(2, 3)), &c, &r));
    tu_assert_error("ag_decode", "src (2,3) f32");
    ag_decode_model none = {0};
    assert_false(ag_decode(&none, sources(0, NB), &c, &r));
    tu_assert_error("ag_decode", "start, step and reorder");
    dm.step = bad_step;
    ag_tensor *src = sources(0, NB);
    size_t used = ag_arena_used(ag_arena_current());
    assert_false(ag_decode(&dm, src, &c, &r));
    tu_assert_error("ag_decode", "(6,6) f64 scores for 5 rows");
    assert_int_equal(ag_arena_used(ag_arena_current()), used); /* the arena as it was */
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *mem = ag_zeros(AG_F64, AG_SHAPE(2, 3, E));
    assert_null(ag_decoder_cache_new_rows(&m->tf.decoder, mem, NULL, 4, 1));
    tu_assert_error("ag_decoder_cache_new", "max_rows 1", "max_rows >= N");
    ag_decoder_cache *cache = ag_decoder_cache_new_rows(&m->tf.decoder, mem, NULL, 4, 3);
    ag_decoder_cache_reorder(cache, tu_tensor(AG_I64, AG_SHAPE(4), 0, 1, 1, 0));
    tu_assert_error("ag_decoder_cache_reorder", "1 <= M <= 3");
    ag_decoder_cache_reorder(cache, tu_tensor(AG_I64, AG_SHAPE(3), 0, 1, 2));
    tu_assert_error("ag_decoder_cache_reorder", "rows[2] = 2", "of the cache's 2");
    ag_decoder_cache_reorder(cache, tu_tensor(AG_I64, AG_SHAPE(3), 0, 1, 1));
    assert_int_equal(tu_error_count(), 0);
    tu_assert_shape(ag_decoder_step(&m->tf.decoder, cache, ag_zeros(AG_F64, AG_SHAPE(3, E))), 3, E);
    ag_set_grad_enabled(grad);
    ag_decode_state *st = ag_decode_state_new(2, 4);
    assert_false(ag_decode_state_set(st, 0, ag_zeros(AG_F64, AG_SHAPE(3, 2)), false));
    tu_assert_error("ag_decode_state_set", "expected 2 rows");
    assert_true(ag_decode_state_set(st, 0, ag_zeros(AG_F64, AG_SHAPE(2, 2)), false));
    assert_false(ag_decode_state_reorder(st, tu_tensor(AG_I64, AG_SHAPE(2), 0, 2)));
    tu_assert_error("ag_decode_state_reorder", "rows[1] = 2");
    ag_decode_state_free(st);
    tiny_free(m);
}

/* ag_decode_state: per-row slots move with the rows; per-sentence slots read by each row's
 * sentence, whatever the reorders in between. */
static void test_state_rows_follow_reorders(void **s) {
    ag_decode_state *st = ag_decode_state_new(2, 5);
    assert_true(ag_decode_state_set(st, 0, tu_tensor(AG_F64, AG_SHAPE(2, 1), 10, 20), false));
    assert_true(ag_decode_state_set(st, 1, tu_tensor(AG_BOOL, AG_SHAPE(2, 2), 1, 0, 0, 1), true));
    assert_true(ag_decode_state_reorder(st, tu_tensor(AG_I64, AG_SHAPE(5), 1, 0, 1, 1, 0)));
    tu_assert_values(ag_decode_state_get(st, 0), 0, 20, 10, 20, 20, 10);
    tu_assert_values(ag_decode_state_get(st, 1), 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0);
    assert_true(ag_decode_state_reorder(st, tu_tensor(AG_I32, AG_SHAPE(2), 4, 0)));
    tu_assert_values(ag_decode_state_get(st, 0), 0, 10, 20);
    tu_assert_values(ag_decode_state_get(st, 1), 0, 1, 0, 0, 1);
    assert_int_equal(ag_decode_state_rows(st), 2);
    assert_null(ag_decode_state_get(st, 2));
    ag_decode_state_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam_of_one_is_greedy),
        cmocka_unit_test(test_nbest_scores_are_teacher_forced_log_probabilities),
        cmocka_unit_test(test_wide_beam_finds_the_exhaustive_best),
        cmocka_unit_test(test_batched_equals_one_sentence_at_a_time),
        cmocka_unit_test(test_sampling_is_seeded_and_its_limits_are_greedy),
        cmocka_unit_test(test_length_limits),
        cmocka_unit_test(test_misuse_is_reported),
        cmocka_unit_test(test_state_rows_follow_reorders),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
