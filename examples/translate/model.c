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

/* ---- decoding ---- */

/* Decoding one position at a time: the Transformer decoder's key/value cache, or the recurrent
 * decoder's state. Rows are sentences (or beams). */
typedef struct {
    encoded e;
    ag_decoder_cache *cache; /* Transformer */
    ag_tensor *h, *c;        /* recurrent: (R,H); the LSTM's c, NULL before the first step */
    int64_t t;               /* positions fed */
} stepper;

static stepper stepper_new(model *m, ag_tensor *src, int64_t max_len) {
    stepper st = {.e = encode(m, src, false, NULL)};
    if (m->cfg.kind == MODEL_TRANSFORMER) st.cache = ag_decoder_cache_new(&m->tf.decoder, st.e.memory, st.e.src_pad, max_len);
    else st.h = st.e.h0;
    return st;
}

/* feed ids (R) at the next position: log-probabilities of the token after it into out (R,V) */
static void stepper_next(model *m, stepper *st, ag_tensor *ids, double *out) {
    ag_tensor *logits;
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        ag_tensor *x = embed(m, &m->tgt_embed, ag_unsqueeze(ids, 1), st->t, false, NULL); /* (R,1,d) */
        logits = ag_linear_forward(&m->generator, ag_decoder_step(&m->tf.decoder, st->cache, ag_squeeze(x, 1)));
    } else {
        logits = rnn_step(m, &st->e, &st->h, &st->c, ids, false, NULL, NULL);
    }
    st->t++;
    ag_to_buffer(ag_log_softmax(logits, -1), AG_F64, out);
}

/* row r continues row rows[r] (beam search); then forget this step's tensors (back to mark) */
static void stepper_end_step(model *m, stepper *st, ag_tensor *rows, ag_arena *arena, ag_arena_mark mark) {
    if (m->cfg.kind == MODEL_TRANSFORMER) {
        if (rows) ag_decoder_cache_reorder(st->cache, rows);
        ag_arena_rewind(arena, mark);
    } else if (!st->c) { /* the state survives the rewind, moved down to the mark */
        st->h = ag_arena_rewind_keep(arena, mark, rows ? ag_index_select(st->h, 0, rows) : st->h);
    } else { /* h and c kept as one (2,R,H) tensor */
        ag_tensor *hc = ag_stack(2, (ag_tensor *[]){st->h, st->c}, 0);
        hc = ag_arena_rewind_keep(arena, mark, rows ? ag_index_select(hc, 1, rows) : hc);
        st->h = ag_select(hc, 0, 0);
        st->c = ag_select(hc, 0, 1);
    }
}

static double length_penalty(int64_t len, double alpha) { return alpha == 0 ? 1.0 : pow((5.0 + (double)len) / 6.0, alpha); }

/* The beams of a batch: K rows per sentence, each a token sequence (W wide, starting with
 * <bos>) with its score, generated length and whether it has finished. */
typedef struct {
    double score;
    int64_t len;
    bool done;
} hyp;
typedef struct {
    double score;
    int64_t row, token;
} cand;
typedef struct {
    int64_t K, W, V;
    int64_t *tok, *ntok; /* (R, W), this step's and the next */
    hyp *h, *nh;
    cand *c; /* K·V candidates of one sentence */
} beams;

/* Sentence b's beams after step t (lp: (R, V) log-probabilities of the next token; over: its
 * limit is passed, so its beams end as finished ones do) into the next buffers; parent[j] the
 * row beam j continues. True when a beam moved to another row. */
static bool advance_sentence(beams *bm, int64_t b, int64_t t, bool over, const double *lp, int64_t *parent) {
    int64_t K = bm->K, V = bm->V, W = bm->W, n = 0;
    bool moved = false;
    cand *c = bm->c;
    for (int64_t r = b * K; r < b * K + K; r++) {
        if (bm->h[r].score == -INFINITY) continue;
        if (bm->h[r].done || over) c[n++] = (cand){bm->h[r].score, r, PAD_ID};
        else /* <pad> and <bos> are never words of a translation */
            for (int64_t v = 0; v < V; v++)
                if (v != PAD_ID && v != BOS_ID) c[n++] = (cand){bm->h[r].score + lp[r * V + v], r, v};
    }
    for (int64_t k = 0; k < K; k++) { /* k-th best candidate (K is small) */
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++)
            if (c[i].score > -INFINITY && (best < 0 || c[i].score > c[best].score)) best = i;
        int64_t j = b * K + k;
        parent[j] = best < 0 ? j : c[best].row;
        moved |= parent[j] != j;
        if (best < 0) {
            bm->nh[j] = (hyp){-INFINITY, 0, true};
            continue;
        }
        const hyp *from = &bm->h[c[best].row];
        memcpy(bm->ntok + j * W, bm->tok + c[best].row * W, sizeof(int64_t) * (size_t)W);
        bm->ntok[j * W + t] = c[best].token;
        bm->nh[j] = from->done || over ? (hyp){from->score, from->len, true}
                                       : (hyp){c[best].score, from->len + 1, c[best].token == EOS_ID};
        c[best].score = -INFINITY;
    }
    return moved;
}

/* each sentence's own limit (2·n + 8 for its n source ids, at most max_len), so that its
 * translation does not depend on the sentences padded into the same batch; malloc'd */
static int64_t *sentence_limits(ag_tensor *src, int64_t max_len) {
    int64_t B = src->shape[0], S = src->shape[1], *ids = malloc(sizeof(int64_t) * (size_t)(B * S));
    int64_t *limit = malloc(sizeof(int64_t) * (size_t)B);
    ag_to_buffer(src, AG_I64, ids);
    for (int64_t b = 0; b < B; b++) {
        int64_t len = 0;
        for (int64_t i = 0; i < S; i++) len += ids[b * S + i] != PAD_ID;
        limit[b] = 2 * len + 8 < max_len ? 2 * len + 8 : max_len;
    }
    free(ids);
    return limit;
}

/* sentence b's best beam by score / length penalty (greedy: by score) into out (max_len ids) */
static void write_best(const beams *bm, int64_t b, int64_t max_len, double alpha, int64_t *out) {
    int64_t K = bm->K, best = b * K;
    double bs = -INFINITY;
    for (int64_t r = b * K; r < b * K + K; r++) {
        if (bm->h[r].score == -INFINITY) continue;
        double s = K > 1 ? bm->h[r].score / length_penalty(bm->h[r].len > 0 ? bm->h[r].len : 1, alpha)
                         : bm->h[r].score;
        if (s > bs) {
            bs = s;
            best = r;
        }
    }
    for (int64_t i = 0; i < max_len; i++) {
        int64_t v = bm->tok[best * bm->W + 1 + i];
        out[i] = v;
        if (v == EOS_ID || v == PAD_ID) break;
    }
}

/* Beam search over B sentences with K beams each (K = 1 is greedy). A finished beam (it produced
 * <eos>) is carried on unchanged with its score; the best beam by score / length penalty wins. */
void model_translate(model *m, ag_tensor *src, int64_t max_len, int beam, double alpha, int64_t *out) {
    bool grad = ag_set_grad_enabled(false);
    int64_t B = src->shape[0], V = m->cfg.tgt_vocab, K = beam > 1 ? beam : 1, R = B * K, stride = max_len;
    memset(out, 0, sizeof(int64_t) * (size_t)(B * stride));
    /* no translation runs longer than twice its source and a little (nor the positions) */
    if (max_len > 2 * src->shape[1] + 8) max_len = 2 * src->shape[1] + 8;
    if (max_len > m->cfg.max_len - 1) max_len = m->cfg.max_len - 1;

    /* every sentence repeated K times: rows b*K .. b*K+K-1 */
    ag_tensor *rows = ag_empty(AG_I64, AG_SHAPE(R));
    for (int64_t r = 0; r < R; r++) ((int64_t *)rows->data)[r] = r / K;
    stepper st = stepper_new(m, ag_index_select(src, 0, rows), max_len);
    /* each row's last token, and the row each new beam continues */
    ag_tensor *last = ag_empty(AG_I64, AG_SHAPE(R)), *parent = ag_empty(AG_I64, AG_SHAPE(R));
    int64_t *lastp = (int64_t *)last->data, *parentp = (int64_t *)parent->data;
    /* each step's tensors are dropped once its log-probabilities are read */
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena);

    int64_t W = max_len + 1;
    beams bm = {K, W, V, calloc((size_t)(R * W), sizeof(int64_t)), calloc((size_t)(R * W), sizeof(int64_t)),
                calloc((size_t)R, sizeof(hyp)), calloc((size_t)R, sizeof(hyp)), malloc(sizeof(cand) * (size_t)(K * V))};
    double *lp = malloc(sizeof(double) * (size_t)(R * V));
    for (int64_t r = 0; r < R; r++) {
        bm.tok[r * W] = BOS_ID;
        bm.h[r].score = r % K == 0 ? 0.0 : -INFINITY; /* identical beams at the start: keep one */
    }
    int64_t *limit = sentence_limits(src, max_len);
    for (int64_t t = 1; t <= max_len; t++) {
        bool live = false;
        for (int64_t r = 0; r < R; r++) live |= !bm.h[r].done && bm.h[r].score > -INFINITY;
        if (!live) break;
        for (int64_t r = 0; r < R; r++) lastp[r] = bm.tok[r * W + t - 1];
        stepper_next(m, &st, last, lp);
        bool moved = false;
        for (int64_t b = 0; b < B; b++) moved |= advance_sentence(&bm, b, t, t > limit[b], lp, parentp);
        int64_t *tt = bm.tok;
        bm.tok = bm.ntok;
        bm.ntok = tt;
        hyp *th = bm.h;
        bm.h = bm.nh;
        bm.nh = th;
        stepper_end_step(m, &st, moved ? parent : NULL, arena, mark);
    }
    for (int64_t b = 0; b < B; b++) write_best(&bm, b, max_len, alpha, out + b * stride);
    free(bm.tok);
    free(bm.ntok);
    free(bm.h);
    free(bm.nh);
    free(bm.c);
    free(lp);
    free(limit);
    ag_set_grad_enabled(grad);
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
