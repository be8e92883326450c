/* The translation models.
 * Transformer: embeddings scaled by √d plus sinusoidal positions, an nn.Transformer (post-norm,
 * batch-first), a Linear "generator" to the target vocabulary.
 * GRU, LSTM, RNN: a bidirectional GRU (LSTM, tanh RNN) encoder; its last hidden states
 * through a tanh Linear "bridge" start a GRUCell (LSTMCell, RNNCell) decoder that reads
 * [previous word; context] where the context is additive (Bahdanau) attention over the encoder
 * outputs with the previous decoder state as query; the generator reads [state; context]. The
 * LSTM decoder's cell state starts at zero.
 * Both are an encode step and a teacher-forced decode step, which training and the attention
 * pictures share; translation decodes one position at a time from an incremental state (the
 * Transformer decoder's key/value cache, the recurrent decoder's state). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

struct model {
    model_config cfg;
    ag_dtype dtype;
    ag_params *params;
    ag_arena *consts;   /* tensors that live as long as the model (positional table) */
    ag_rng init_rng;
    ag_embedding_module src_embed, tgt_embed;
    ag_linear_module generator;
    /* Transformer */
    ag_transformer_module tf;
    ag_tensor *pos;     /* (max_len, d) */
    /* recurrent: the encoder and decoder of the kind, the rest shared */
    ag_gru_module encoder;
    ag_lstm_module lstm_encoder;
    ag_rnn_module rnn_encoder;
    ag_linear_module bridge;
    ag_additive_attention_module attention;
    ag_gru_cell_module decoder;
    ag_lstm_cell_module lstm_decoder;
    ag_rnn_cell_module rnn_decoder;
};

/* what decoding needs from the source */
typedef struct {
    ag_tensor *memory;    /* (B,S,d) Transformer, (B,S,2H) recurrent */
    ag_tensor *src_pad;   /* (B,S) bool */
    ag_tensor *h0;        /* recurrent: (B,H) */
    ag_tensor *keys_proj; /* recurrent: W1·memory, (B,S,H) */
} encoded;

static const char *const kind_names[] = {"transformer", "gru", "lstm", "rnn"};

const char *model_kind_name(model_kind kind) { return kind_names[kind]; }

bool model_kind_parse(const char *name, model_kind *kind) {
    for (int k = 0; name && k < (int)(sizeof kind_names / sizeof *kind_names); k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *kind = (model_kind)k;
            return true;
        }
    return false;
}

bool model_kind_recurrent(model_kind kind) { return kind != MODEL_TRANSFORMER; }

int model_kind_gates(model_kind kind) { return kind == MODEL_GRU ? 3 : kind == MODEL_LSTM ? 4 : kind == MODEL_RNN; }

model_config model_defaults(model_kind kind, int64_t src_vocab, int64_t tgt_vocab) {
    model_config c = {.kind = kind, .src_vocab = src_vocab, .tgt_vocab = tgt_vocab, .d_model = 128, .nhead = 4,
                      .ff = 512, .enc_layers = 2, .dec_layers = 2, .hidden = 128, .dropout = 0.1, .max_len = 256};
    if (model_kind_recurrent(kind)) c.enc_layers = c.dec_layers = 1;
    return c;
}

static ag_transformer_config tf_config(const model_config *c) {
    ag_transformer_config t = ag_transformer_defaults(c->d_model, c->nhead);
    t.dim_feedforward = c->ff;
    t.dropout = c->dropout;
    t.batch_first = true;
    t.recompute_attention = c->recompute;
    t.keep_ff_activation = c->keep_ff;
    t.skip_padding = true; /* padded positions are masked keys and ignored targets: not computed */
    return t;
}

/* the encoder, bridge, attention, decoder and generator of a recurrent kind, in that order */
static void recurrent_new(model *m, const model_config *cfg, ag_rng *r) {
    int64_t E = cfg->d_model, H = cfg->hidden;
    ag_recurrent_config c = ag_recurrent_defaults(E, H);
    c.num_layers = (int)cfg->enc_layers;
    c.bidirectional = true;
    c.batch_first = true;
    c.dropout = cfg->dropout;
    if (cfg->kind == MODEL_GRU) m->encoder = ag_gru_new(m->params, "encoder", &c, r);
    else if (cfg->kind == MODEL_LSTM) m->lstm_encoder = ag_lstm_new(m->params, "encoder", &c, r);
    else m->rnn_encoder = ag_rnn_new(m->params, "encoder", &(ag_rnn_config){c, AG_RNN_TANH}, r);
    m->bridge = ag_linear_new(m->params, "bridge", 2 * H, H, true, r);
    m->attention = ag_additive_attention_new(m->params, "attention", H, 2 * H, H, r);
    if (cfg->kind == MODEL_GRU) m->decoder = ag_gru_cell_new(m->params, "decoder", E + 2 * H, H, true, r);
    else if (cfg->kind == MODEL_LSTM) m->lstm_decoder = ag_lstm_cell_new(m->params, "decoder", E + 2 * H, H, true, r);
    else m->rnn_decoder = ag_rnn_cell_new(m->params, "decoder", E + 2 * H, H, true, AG_RNN_TANH, r);
    m->generator = ag_linear_new(m->params, "generator", 3 * H, cfg->tgt_vocab, true, r);
}

int64_t model_param_count(const model_config *c) {
    double E = (double)c->d_model, F = (double)c->ff, H = (double)c->hidden, V = (double)c->tgt_vocab;
    double n = ((double)c->src_vocab + V) * E; /* the embeddings */
    if (c->kind == MODEL_TRANSFORMER) {
        double mha = 4 * E * E + 4 * E, ffn = 2 * E * F + F + E; /* in/out projections; linear1, linear2 */
        n += (double)c->enc_layers * (mha + ffn + 4 * E) + (double)c->dec_layers * (2 * mha + ffn + 6 * E);
        n += 4 * E + E * V + V; /* the encoder's and decoder's final norms, the generator */
    } else {
        double G = model_kind_gates(c->kind) * H, first = E, enc = 0;
        for (int64_t l = 0; l < c->enc_layers; l++, first = 2 * H) enc += 2 * (G * (first + H) + 2 * G);
        n += enc + (2 * H * H + H) + (3 * H * H + H) /* bridge, additive attention */
             + G * (E + 2 * H + H) + 2 * G + 3 * H * V + V; /* the decoder cell, the generator */
    }
    return n < 9.2e18 ? (int64_t)n : INT64_MAX;
}

model *model_new(const model_config *cfg, ag_dtype dt, uint64_t seed) {
    model *m = calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->dtype = dt;
    m->params = ag_params_new(dt);
    m->consts = ag_arena_new(1 << 16);
    m->init_rng = ag_rng_new(seed);
    ag_rng *r = &m->init_rng;
    int64_t E = cfg->d_model;
    m->src_embed = ag_embedding_new(m->params, "src_embed", cfg->src_vocab, E, PAD_ID, r);
    m->tgt_embed = ag_embedding_new(m->params, "tgt_embed", cfg->tgt_vocab, E, PAD_ID, r);
    if (cfg->kind == MODEL_TRANSFORMER) { /* N(0, 1/d) as fairseq: scaled by √d they have unit variance,
                                             the size of the positional encodings */
        ag_embedding_module *es[2] = {&m->src_embed, &m->tgt_embed};
        for (int i = 0; i < 2; i++) {
            ag_normal_(r, es[i]->weight, 0.0, 1.0 / sqrt((double)E));
            ag_fill_(ag_select(es[i]->weight, 0, PAD_ID), 0.0);
        }
    }
    if (cfg->kind == MODEL_TRANSFORMER) {
        ag_transformer_config tc = tf_config(cfg);
        m->tf = ag_transformer_new(m->params, "transformer", &tc, (int)cfg->enc_layers, (int)cfg->dec_layers, r);
        m->generator = ag_linear_new(m->params, "generator", E, cfg->tgt_vocab, true, r);
    } else {
        recurrent_new(m, cfg, r);
    }
    ag_arena *prev = ag_arena_use(m->consts);
    m->pos = ag_sinusoidal_positions(cfg->max_len, cfg->d_model, dt);
    ag_arena_use(prev);
    return m;
}

void model_free(model *m) {
    if (!m) return;
    ag_params_free(m->params);
    ag_arena_free(m->consts);
    free(m);
}

ag_params *model_params(model *m) { return m->params; }
const model_config *model_cfg(const model *m) { return &m->cfg; }

/* ids (B,L) at positions first.. → embedding·√d + positions, dropout: (B,L,d) */
static ag_tensor *embed(model *m, const ag_embedding_module *e, ag_tensor *ids, int64_t first, bool training, ag_rng *rng) {
    int64_t L = ids->shape[1];
    /* in place: the embedding rows and their products are read by no backward */
    ag_tensor *x = ag_mul_scalar_(ag_embedding_forward(e, ids), sqrt((double)m->cfg.d_model));
    x = ag_add_(x, ag_narrow(m->pos, 0, first, L));
    return ag_dropout_(x, m->cfg.dropout, training, rng);
}

static ag_tensor *pad_mask(ag_tensor *ids) { return ag_eq_scalar(ids, PAD_ID); }

static encoded encode(model *m, ag_tensor *src, bool training, ag_rng *rng) {
    encoded e = {.src_pad = pad_mask(src)};
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        ag_transformer_args a = {.src_key_padding_mask = e.src_pad, .training = training, .rng = rng};
        e.memory = ag_transformer_encoder_forward(&m->tf.encoder, embed(m, &m->src_embed, src, 0, training, rng), &a);
        return e;
    }
    int64_t B = src->shape[0], H = m->cfg.hidden;
    ag_tensor *x = ag_dropout(ag_embedding_forward(&m->src_embed, src), m->cfg.dropout, training, rng);
    ag_tensor *lengths = ag_sum(ag_logical_not(e.src_pad), 1, (int[]){1}, false); /* (B) i64 */
    ag_tensor *h_n = NULL;
    /* (B,S,2H); h_n (layers*2, B, H) */
    if (m->cfg.kind == MODEL_GRU) {
        ag_gru_args a = {.lengths = lengths, .training = training, .rng = rng};
        e.memory = ag_gru_forward(&m->encoder, x, &a, &h_n);
    } else if (m->cfg.kind == MODEL_LSTM) {
        ag_lstm_args a = {.lengths = lengths, .training = training, .rng = rng};
        e.memory = ag_lstm_forward(&m->lstm_encoder, x, &a, &h_n, NULL);
    } else {
        ag_rnn_args a = {.lengths = lengths, .training = training, .rng = rng};
        e.memory = ag_rnn_forward(&m->rnn_encoder, x, &a, &h_n);
    }
    int64_t last = h_n->shape[0] - 2;                   /* the last layer's two directions */
    ag_tensor *both = ag_reshape(ag_transpose(ag_narrow(h_n, 0, last, 2), 0, 1), AG_SHAPE(B, 2 * H));
    e.h0 = ag_tanh(ag_linear_forward(&m->bridge, both));
    e.keys_proj = ag_additive_attention_keys(&m->attention, e.memory);
    return e;
}

/* One recurrent decoder step: ids (B) → logits (B,V); *h (B,H) and the LSTM's *c (B,H), NULL
 * for zeros, move on; *w (optional) receives the (B,S) attention weights */
static ag_tensor *rnn_step(model *m, const encoded *e, ag_tensor **h, ag_tensor **c, ag_tensor *ids, bool training,
                           ag_rng *rng, ag_tensor **w) {
    ag_tensor *ctx = ag_additive_attention_forward(&m->attention, *h, e->memory, e->keys_proj, e->src_pad, w);
    ag_tensor *emb = ag_dropout(ag_embedding_forward(&m->tgt_embed, ids), m->cfg.dropout, training, rng);
    ag_tensor *in = ag_cat(2, (ag_tensor *[]){emb, ctx}, 1);
    if (m->cfg.kind == MODEL_GRU) *h = ag_gru_cell_forward(&m->decoder, in, *h);
    else if (m->cfg.kind == MODEL_LSTM) *h = ag_lstm_cell_forward(&m->lstm_decoder, in, *h, *c, c);
    else *h = ag_rnn_cell_forward(&m->rnn_decoder, in, *h);
    ag_tensor *out = ag_dropout(ag_cat(2, (ag_tensor *[]){*h, ctx}, 1), m->cfg.dropout, training, rng);
    return ag_linear_forward(&m->generator, out);
}

/* Teacher-forced logits (B,T,V) for tgt_in (B,T). Recurrent: with probability 1 - teacher_forcing a
 * step reads the model's own previous prediction instead of the reference (drawn from rng, one
 * draw per step); attn (optional, recurrent) receives the (B,T,S) attention weights. */
static ag_tensor *decode(model *m, const encoded *e, ag_tensor *tgt_in, bool training, double teacher_forcing,
                         ag_rng *rng, ag_tensor **attn) {
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        ag_transformer_args a = {.memory_key_padding_mask = e->src_pad,
                                 .tgt_key_padding_mask = pad_mask(tgt_in),
                                 .tgt_is_causal = true,
                                 .training = training,
                                 .rng = rng};
        ag_tensor *y = ag_transformer_decoder_forward(&m->tf.decoder, embed(m, &m->tgt_embed, tgt_in, 0, training, rng),
                                                      e->memory, &a);
        return ag_linear_forward(&m->generator, y);
    }
    int64_t T = tgt_in->shape[1];
    ag_tensor **logits = ag_arena_alloc(ag_arena_current(), sizeof(ag_tensor *) * (size_t)T);
    ag_tensor **ws = attn ? ag_arena_alloc(ag_arena_current(), sizeof(ag_tensor *) * (size_t)T) : NULL;
    ag_tensor *h = e->h0, *c = NULL, *prev = NULL;
    for (int64_t t = 0; t < T; t++) {
        ag_tensor *ids = ag_select(tgt_in, 1, t);
        if (t > 0 && teacher_forcing < 1.0) {
            double u;
            ag_rng_uniform_f64(rng, 1, &u);
            if (u >= teacher_forcing) ids = ag_argmax(prev, -1, false); /* its own guess: no gradient */
        }
        ag_tensor *w = NULL;
        logits[t] = prev = rnn_step(m, e, &h, &c, ids, training, rng, &w);
        if (ws) ws[t] = w;
    }
    if (attn) *attn = ag_stack((int)T, ws, 1);
    return ag_stack((int)T, logits, 1);
}

ag_tensor *model_forward(model *m, ag_tensor *src, ag_tensor *tgt_in, bool training, double teacher_forcing,
                         ag_rng *rng) {
    int64_t S = src->shape[1], T = tgt_in->shape[1];
    if (m->cfg.kind == MODEL_TRANSFORMER && (S > m->cfg.max_len || T > m->cfg.max_len)) {
        ag_error("model_forward", "sequence lengths %lld and %lld exceed max_len %lld", (long long)S, (long long)T,
                 (long long)m->cfg.max_len);
        return NULL;
    }
    encoded e = encode(m, src, training, rng);
    return decode(m, &e, tgt_in, training, teacher_forcing, rng, NULL);
}

ag_tensor *model_loss(ag_tensor *logits, ag_tensor *tgt_out, double label_smoothing) {
    int64_t V = logits->shape[2];
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD_ID;
    lc.label_smoothing = label_smoothing;
    return ag_cross_entropy(ag_reshape(logits, AG_SHAPE(-1, V)), ag_reshape(tgt_out, AG_SHAPE(-1)), &lc);
}

/* ---- decoding: the model's side of nn/decode ---- */

/* The Transformer decodes from its key/value cache; a recurrent decoder from its state (h, the
 * LSTM's c) and the encoder outputs it attends over, kept in an ag_decode_state. */
enum { ST_H, ST_C, ST_MEMORY, ST_KEYS, ST_PAD };
typedef struct {
    model *m;
    ag_decoder_cache *cache;
    ag_decode_state *state;
    int64_t t; /* positions fed */
} decoding;

static bool decoding_start(void *self, ag_tensor *src, int64_t max_rows, int64_t max_steps) {
    decoding *d = self;
    model *m = d->m;
    encoded e = encode(m, src, false, NULL);
    d->t = 0;
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        d->cache = ag_decoder_cache_new_rows(&m->tf.decoder, e.memory, e.src_pad, max_steps, max_rows);
        return d->cache != NULL;
    }
    d->state = ag_decode_state_new(src->shape[0], max_rows);
    return d->state && ag_decode_state_set(d->state, ST_H, e.h0, false) &&
           ag_decode_state_set(d->state, ST_MEMORY, e.memory, true) &&
           ag_decode_state_set(d->state, ST_KEYS, e.keys_proj, true) && ag_decode_state_set(d->state, ST_PAD, e.src_pad, true);
}

/* ids (R) -> logits (R,V) of the token after each */
static ag_tensor *decoding_step(void *self, ag_tensor *ids) {
    decoding *d = self;
    model *m = d->m;
    ag_tensor *logits;
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        ag_tensor *x = embed(m, &m->tgt_embed, ag_unsqueeze(ids, 1), d->t, false, NULL); /* (R,1,d) */
        logits = ag_linear_forward(&m->generator, ag_decoder_step(&m->tf.decoder, d->cache, ag_squeeze(x, 1)));
    } else {
        ag_decode_state *st = d->state;
        encoded e = {.memory = ag_decode_state_get(st, ST_MEMORY), .keys_proj = ag_decode_state_get(st, ST_KEYS),
                     .src_pad = ag_decode_state_get(st, ST_PAD)};
        ag_tensor *h = ag_decode_state_get(st, ST_H), *c = ag_decode_state_get(st, ST_C);
        logits = rnn_step(m, &e, &h, &c, ids, false, NULL, NULL);
        if (!ag_decode_state_set(st, ST_H, h, false) || (c && !ag_decode_state_set(st, ST_C, c, false))) return NULL;
    }
    d->t++;
    return logits;
}

static void decoding_reorder(void *self, ag_tensor *rows) {
    decoding *d = self;
    if (d->cache) ag_decoder_cache_reorder(d->cache, rows);
    else ag_decode_state_reorder(d->state, rows);
}

static void decoding_end(void *self) {
    decoding *d = self;
    ag_decode_state_free(d->state);
    *d = (decoding){.m = d->m};
}

bool model_decode(model *m, ag_tensor *src, const ag_decode_config *cfg, ag_decode_result *out) {
    decoding d = {.m = m};
    /* outputs of at most the model's positions less one */
    ag_decode_model dm = {&d, decoding_start, decoding_step, decoding_reorder, decoding_end, m->cfg.max_len - 1};
    return ag_decode(&dm, src, cfg, out);
}

void model_translate(model *m, ag_tensor *src, int64_t max_len, int beam, double alpha, int64_t *out) {
    int64_t B = src->shape[0];
    memset(out, 0, sizeof(int64_t) * (size_t)(B * max_len));
    ag_decode_config c = model_decode_config(beam, alpha);
    c.max_len = max_len;
    ag_decode_result r;
    if (!model_decode(m, src, &c, &r)) return;
    int64_t W = r.width < max_len ? r.width : max_len;
    for (int64_t b = 0; b < B; b++) memcpy(out + b * max_len, r.tokens + b * r.n_best * r.width, sizeof(int64_t) * (size_t)W);
    ag_decode_result_free(&r);
}

ag_decode_config model_decode_config(int64_t beam, double alpha) {
    ag_decode_config c = ag_decode_defaults();
    c.pad_id = PAD_ID;
    c.bos_id = BOS_ID;
    c.eos_id = EOS_ID;
    c.method = beam > 1 ? AG_DECODE_BEAM : AG_DECODE_GREEDY;
    c.beam_size = beam > 1 ? beam : 1;
    c.length_penalty = alpha;
    return c;
}

const double *model_attention(model *m, ag_tensor *src, ag_tensor *tgt_in, int *maps) {
    bool grad = ag_set_grad_enabled(false);
    bool rec = model_kind_recurrent(m->cfg.kind);
    int L = rec ? 1 : (int)m->cfg.dec_layers;
    int64_t H = rec ? 1 : m->cfg.nhead, T = tgt_in->shape[1], S = src->shape[1];
    ag_tensor **w = ag_arena_alloc(ag_arena_current(), sizeof(ag_tensor *) * (size_t)L);
    encoded e = encode(m, src, false, NULL);
    if (rec) {
        ag_tensor *a = NULL;
        decode(m, &e, tgt_in, false, 1.0, NULL, &a);
        w[0] = ag_unsqueeze(a, 1); /* (1,1,T,S) */
    } else {
        ag_transformer_args a = {.memory_key_padding_mask = e.src_pad, .tgt_is_causal = true, .cross_attn_weights = w};
        ag_transformer_decoder_forward(&m->tf.decoder, embed(m, &m->tgt_embed, tgt_in, 0, false, NULL), e.memory, &a);
    }
    double *out = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)(L * H * T * S));
    for (int l = 0; l < L; l++) ag_to_buffer(ag_select(w[l], 0, 0), AG_F64, out + (int64_t)l * H * T * S);
    *maps = L * (int)H;
    ag_set_grad_enabled(grad);
    return out;
}
