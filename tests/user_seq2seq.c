/* A user's program against the installed headers alone: a Bahdanau GRU seq2seq (GRU encoder,
 * additive attention over its outputs, a GRU cell decoder reading [previous token; context])
 * learns to reverse short digit strings with teacher forcing, then decodes held-out strings with
 * the library's greedy and beam search (nn/decode), its state kept in an ag_decode_state.
 * Exits 0 when greedy gets at least 90 % exactly right, beam 1 equals greedy and beam 3 is as
 * good as greedy within 5 %. */
#include <attograd.h>
#include <stdio.h>
#include <string.h>

enum { PAD, BOS, EOS, DIGIT0, V = DIGIT0 + 6, E = 16, H = 48, L = 5, BATCH = 32, STEPS = 400, TESTS = 100 };

typedef struct {
    ag_params *p;
    ag_embedding_module src_embed, tgt_embed;
    ag_gru_module encoder;
    ag_additive_attention_module attention;
    ag_gru_cell_module decoder;
    ag_linear_module out;
    ag_decode_state *state; /* while decoding */
} seq2seq;

enum { STATE_H, STATE_MEMORY, STATE_KEYS, STATE_PAD };

static seq2seq model_new(ag_rng *r) {
    seq2seq m = {.p = ag_params_new(AG_F32)};
    m.src_embed = ag_embedding_new(m.p, "src_embed", V, E, PAD, r);
    m.tgt_embed = ag_embedding_new(m.p, "tgt_embed", V, E, PAD, r);
    ag_gru_config c = ag_gru_defaults(E, H);
    c.batch_first = true;
    m.encoder = ag_gru_new(m.p, "encoder", &c, r);
    m.attention = ag_additive_attention_new(m.p, "attention", H, H, H, r);
    m.decoder = ag_gru_cell_new(m.p, "decoder", E + H, H, true, r);
    m.out = ag_linear_new(m.p, "out", 2 * H, V, true, r);
    return m;
}

/* src (B,S) -> encoder outputs (B,S,H); *h (B,H) its last state */
static ag_tensor *encode(seq2seq *m, ag_tensor *src, ag_tensor **h) {
    ag_tensor *lengths = ag_sum(ag_logical_not(ag_eq_scalar(src, PAD)), 1, (int[]){1}, false);
    ag_gru_args a = {.lengths = lengths};
    ag_tensor *h_n = NULL, *y = ag_gru_forward(&m->encoder, ag_embedding_forward(&m->src_embed, src), &a, &h_n);
    *h = ag_select(h_n, 0, 0);
    return y;
}

/* one decoder step: ids (B) -> logits (B,V); *h moves on */
static ag_tensor *step(seq2seq *m, ag_tensor *memory, ag_tensor *keys, ag_tensor *pad, ag_tensor **h, ag_tensor *ids) {
    ag_tensor *ctx = ag_additive_attention_forward(&m->attention, *h, memory, keys, pad, NULL);
    *h = ag_gru_cell_forward(&m->decoder, ag_cat(2, (ag_tensor *[]){ag_embedding_forward(&m->tgt_embed, ids), ctx}, 1), *h);
    return ag_linear_forward(&m->out, ag_cat(2, (ag_tensor *[]){*h, ctx}, 1));
}

/* a digit string of 3..L digits into src, its reverse and <eos> into tgt (both padded) */
static void example(ag_rng *r, int64_t *src, int64_t *tgt) {
    double u[L + 1];
    ag_rng_uniform_f64(r, L + 1, u);
    int n = 3 + (int)(u[0] * (L - 2));
    memset(src, 0, sizeof(int64_t) * (L + 1));
    memset(tgt, 0, sizeof(int64_t) * (L + 1));
    for (int i = 0; i < n; i++) src[i] = DIGIT0 + (int64_t)(u[i + 1] * 6);
    for (int i = 0; i < n; i++) tgt[i] = src[n - 1 - i];
    src[n] = EOS;
    tgt[n] = EOS;
}

static void train(seq2seq *m, ag_rng *r) {
    ag_optim *opt = ag_adam_new(m->p, &(ag_adam_config){.lr = 1e-2, .betas = {0.9, 0.999}, .eps = 1e-8});
    ag_arena *arena = ag_arena_current();
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD;
    for (int s = 0; s < STEPS; s++) {
        int64_t src[BATCH][L + 1], tgt[BATCH][L + 1], in[BATCH][L + 1];
        for (int b = 0; b < BATCH; b++) {
            example(r, src[b], tgt[b]);
            in[b][0] = BOS; /* teacher forcing: the decoder reads <bos> and the reference */
            memcpy(&in[b][1], tgt[b], sizeof(int64_t) * L);
        }
        ag_tensor *h, *x = ag_from_buffer(AG_I64, AG_SHAPE(BATCH, L + 1), src);
        ag_tensor *memory = encode(m, x, &h), *keys = ag_additive_attention_keys(&m->attention, memory);
        ag_tensor *pad = ag_eq_scalar(x, PAD), *ids = ag_from_buffer(AG_I64, AG_SHAPE(BATCH, L + 1), in), *logits[L + 1];
        for (int t = 0; t <= L; t++) logits[t] = step(m, memory, keys, pad, &h, ag_select(ids, 1, t));
        ag_tensor *y = ag_reshape(ag_stack(L + 1, logits, 1), AG_SHAPE(-1, V));
        ag_tensor *loss = ag_cross_entropy(y, ag_from_buffer(AG_I64, AG_SHAPE(BATCH * (L + 1)), tgt), &lc);
        ag_params_zero_grad(m->p);
        ag_backward(loss, NULL);
        ag_clip_grad_norm(m->p, 1.0);
        ag_optim_step(opt);
        ag_arena_reset(arena);
    }
    ag_optim_free(opt);
}

/* ---- the model's side of nn/decode ---- */
static bool dec_start(void *self, ag_tensor *src, int64_t max_rows, int64_t max_steps) {
    seq2seq *m = self;
    (void)max_steps;
    ag_tensor *h, *memory = encode(m, src, &h);
    m->state = ag_decode_state_new(src->shape[0], max_rows);
    return m->state && ag_decode_state_set(m->state, STATE_H, h, false) &&
           ag_decode_state_set(m->state, STATE_MEMORY, memory, true) &&
           ag_decode_state_set(m->state, STATE_KEYS, ag_additive_attention_keys(&m->attention, memory), true) &&
           ag_decode_state_set(m->state, STATE_PAD, ag_eq_scalar(src, PAD), true);
}

static ag_tensor *dec_step(void *self, ag_tensor *ids) {
    seq2seq *m = self;
    ag_tensor *h = ag_decode_state_get(m->state, STATE_H);
    ag_tensor *logits = step(m, ag_decode_state_get(m->state, STATE_MEMORY), ag_decode_state_get(m->state, STATE_KEYS),
                             ag_decode_state_get(m->state, STATE_PAD), &h, ids);
    return ag_decode_state_set(m->state, STATE_H, h, false) ? logits : NULL;
}

static void dec_reorder(void *self, ag_tensor *rows) { ag_decode_state_reorder(((seq2seq *)self)->state, rows); }

static void dec_end(void *self) {
    seq2seq *m = self;
    ag_decode_state_free(m->state);
    m->state = NULL;
}

/* exact matches of decoding src (TESTS sentences) against tgt; the hypotheses into hyp */
static int decode(seq2seq *m, ag_tensor *src, int64_t tgt[][L + 1], ag_decode_method method, int beam, int64_t *hyp) {
    ag_decode_model dm = {m, dec_start, dec_step, dec_reorder, dec_end, 0};
    ag_decode_config c = ag_decode_defaults();
    c.method = method;
    c.beam_size = beam;
    ag_decode_result r;
    if (!ag_decode(&dm, src, &c, &r)) return -1;
    int right = 0;
    for (int b = 0; b < TESTS; b++) {
        int64_t len = r.lengths[b], *toks = r.tokens + b * r.width, n = 0;
        while (n <= L && tgt[b][n] != PAD) n++;
        right += len == n && memcmp(toks, tgt[b], sizeof(int64_t) * (size_t)n) == 0;
        memset(hyp + b * (L + 9), 0, sizeof(int64_t) * (L + 9));
        memcpy(hyp + b * (L + 9), toks, sizeof(int64_t) * (size_t)(len < L + 9 ? len : L + 9));
    }
    ag_decode_result_free(&r);
    return right;
}

int main(void) {
    ag_set_num_threads(1);
    ag_rng r = ag_rng_new(7);
    seq2seq m = model_new(&r);
    train(&m, &r);
    int64_t src[TESTS][L + 1], tgt[TESTS][L + 1];
    ag_rng test_rng = ag_rng_new(1234);
    for (int b = 0; b < TESTS; b++) example(&test_rng, src[b], tgt[b]);
    ag_tensor *x = ag_from_buffer(AG_I64, AG_SHAPE(TESTS, L + 1), src);
    static int64_t greedy[TESTS * (L + 9)], beam1[TESTS * (L + 9)], beam3[TESTS * (L + 9)];
    int g = decode(&m, x, tgt, AG_DECODE_GREEDY, 1, greedy);
    int b1 = decode(&m, x, tgt, AG_DECODE_BEAM, 1, beam1);
    int b3 = decode(&m, x, tgt, AG_DECODE_BEAM, 3, beam3);
    bool same = memcmp(greedy, beam1, sizeof greedy) == 0;
    printf("reverse %d digit strings: greedy %d%%, beam 1 %d%% (%s greedy's), beam 3 %d%%\n", TESTS, g, b1,
           same ? "the same as" : "NOT", b3);
    ag_params_free(m.p);
    return g >= 90 && same && b3 >= g - 5 ? 0 : 1;
}
