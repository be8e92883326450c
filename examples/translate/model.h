/* The translation models: a Transformer seq2seq and a recurrent (GRU, LSTM or RNN)
 * encoder-decoder with additive attention, as modules over one ag_params slab with PyTorch state_dict names (so a checkpoint
 * loads into bench/torch_translate.py's equivalent torch model). Token id 0 is <pad>. */
#ifndef TRANSLATE_MODEL_H
#define TRANSLATE_MODEL_H

#include "attograd.h"

typedef enum { MODEL_TRANSFORMER = 0, MODEL_GRU = 1, MODEL_LSTM = 2, MODEL_RNN = 3 } model_kind;

/* "transformer", "gru", "lstm", "rnn": the --model values and the checkpoints' "model" */
const char *model_kind_name(model_kind kind);
/* the kind of that name: true and *kind set, else false */
bool model_kind_parse(const char *name, model_kind *kind);
/* the recurrent encoder-decoders (one attention map, at most AG_GRU_MAX_LAYERS layers) */
bool model_kind_recurrent(model_kind kind);
/* hidden x hidden recurrent weights per layer and direction: 3 (GRU), 4 (LSTM), 1 (RNN), 0 */
int model_kind_gates(model_kind kind);

typedef struct {
    model_kind kind;
    int64_t src_vocab, tgt_vocab;
    int64_t d_model;         /* embedding size (Transformer d_model, recurrent embedding size) */
    int64_t nhead, ff;       /* Transformer */
    int64_t enc_layers, dec_layers;
    int64_t hidden;          /* recurrent hidden size */
    double dropout;
    int64_t max_len;         /* longest sequence the positional table covers */
    bool recompute;          /* Transformer: attention recomputed in backward (not saved in checkpoints) */
    bool keep_ff;            /* Transformer: feed-forward activation kept for backward (not saved either) */
} model_config;

/* the defaults of `attograd-translate train --model transformer|gru|lstm|rnn` */
model_config model_defaults(model_kind kind, int64_t src_vocab, int64_t tgt_vocab);

/* the parameters model_new makes for cfg, counted without making them (INT64_MAX when that
 * many do not fit an int64) */
int64_t model_param_count(const model_config *cfg);

typedef struct model model;

/* Build the model's parameters into a new slab of dtype dt, initialised from seed. */
model *model_new(const model_config *cfg, ag_dtype dt, uint64_t seed);
void model_free(model *m);
ag_params *model_params(model *m);
const model_config *model_cfg(const model *m);

/* Teacher-forced logits: src (B,S), tgt_in (B,T) I64 ids (0 = pad) -> (B,T,tgt_vocab).
 * teacher_forcing < 1 (recurrent only) feeds the model's own previous prediction instead of the
 * reference with probability 1 - teacher_forcing at each step, drawn from rng. */
ag_tensor *model_forward(model *m, ag_tensor *src, ag_tensor *tgt_in, bool training, double teacher_forcing,
                         ag_rng *rng);

/* Mean label-smoothed cross entropy of logits (B,T,V) against tgt_out (B,T), pads ignored. */
ag_tensor *model_loss(ag_tensor *logits, ag_tensor *tgt_out, double label_smoothing);

/* nn/decode's defaults with this model's <pad>, <bos> and <eos> ids: greedy for beam <= 1, else
 * beam search with beam beams and length penalty alpha */
ag_decode_config model_decode_config(int64_t beam, double alpha);
/* Decode src (B,S) with nn/decode (eval mode): greedy, beam search or sampling as cfg says, each
 * sentence at most the model's positions less one; false after reporting. */
bool model_decode(model *m, ag_tensor *src, const ag_decode_config *cfg, ag_decode_result *out);

/* Greedy or beam decoding (eval mode) with model_decode's defaults. src (B,S). Writes up to max_len ids per sentence (without
 * <bos>, ending at and including <eos> when produced) into out (B*max_len, rest 0 = pad); no
 * sentence runs longer than 2·n + 8 for its n source ids (<eos> included, pads not).
 * beam <= 1: greedy; length_penalty alpha as in GNMT ((5+len)/6)^alpha. */
void model_translate(model *m, ag_tensor *src, int64_t max_len, int beam, double length_penalty, int64_t *out);

/* Cross-attention weights while the model reads src (1,S) and is fed tgt_in (1,T) (<bos> and
 * its translation): *maps maps of (T,S) doubles, row-major, layer by layer and head by head
 * within a layer (recurrent: one map), from the current arena. */
const double *model_attention(model *m, ag_tensor *src, ag_tensor *tgt_in, int *maps);

#define BOS_ID 1
#define EOS_ID 2
#define PAD_ID 0

#endif
