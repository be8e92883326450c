/* Decoding for sequence-to-sequence models: greedy, beam search and sampling, batched over
 * sentences of different lengths (docs/decode.md).
 *
 * A model plugs in through ag_decode_model: encode a batch of sources once, then one decoder step
 * at a time from its cache or state for R rows (a row is a sentence, or one of its beams), and
 * reorder the rows between steps (beams kept, copied or dropped; finished rows leave). The
 * Transformer's ag_decoder_cache (transformer.h) and ag_decode_state (below, for recurrent
 * states) hold what a step needs across the per-step arena rewind.
 *
 * Every sentence is decoded as it would be alone: its own length limit, its own rows, its own
 * random draws; the result does not depend on the other sentences of the batch or on the thread
 * count. */
#ifndef AG_NN_DECODE_H
#define AG_NN_DECODE_H
#include "../../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model's side --------------------------------------------------------------------- */
typedef struct {
    void *self; /* passed to every function below */
    /* Encode src (B,S) i64 ids (padded with the config's pad_id) and get ready for steps: the
     * rows are then the B sentences, row b reading sentence b; at most max_rows rows and
     * max_steps steps follow. What it makes in the current arena lives until ag_decode returns.
     * False after reporting through the error handler. */
    bool (*start)(void *self, ag_tensor *src, int64_t max_rows, int64_t max_steps);
    /* Feed ids (R) i64, one token per row, at each row's next position  ->  (R,V) scores of the
     * token after it: logits or log-probabilities (ag_decode takes their log_softmax), in the
     * current arena. NULL after reporting. Grad mode is off. */
    ag_tensor *(*step)(void *self, ag_tensor *ids);
    /* Row r continues row rows[r] of the last step; rows (M) i64, M >= 1, may differ from the
     * previous row count (beams copied, finished rows dropped). Called between steps. After each
     * step, once its scores are read, the arena is rewound to where it was before the step:
     * state kept from step to step must live before that point (made in start, as the
     * Transformer's ag_decoder_cache) or outside the arena (ag_decode_state). Not called when
     * the rows stay as they are. */
    void (*reorder)(void *self, ag_tensor *rows);
    /* Release what start made outside the arena; may be NULL. Called once after start, whether
     * start succeeded or not. */
    void (*end)(void *self);
    int64_t max_len; /* the longest output the model can produce (positions), 0: no limit */
} ag_decode_model;

/* ---- configuration ------------------------------------------------------------------------ */
typedef enum { AG_DECODE_GREEDY = 0, AG_DECODE_BEAM = 1, AG_DECODE_SAMPLE = 2 } ag_decode_method;

/* How a hypothesis' log-probability is normalised for ranking: GNMT's score / ((5+len)/6)^α,
 * or Marian's score / len^α; len counts its tokens, <eos> included (at least 1). */
typedef enum { AG_LENGTH_GNMT = 0, AG_LENGTH_MARIAN = 1 } ag_length_norm;

typedef struct {
    ag_decode_method method;    /* AG_DECODE_GREEDY */
    int64_t beam_size;          /* beam search: hypotheses kept per sentence (4) */
    int64_t n_best;             /* hypotheses returned per sentence, at most beam_size (1) */
    double length_penalty;      /* α (0.6); 0 ranks by the plain log-probability */
    ag_length_norm length_norm; /* AG_LENGTH_GNMT */
    /* a sentence of n source ids (pads not counted) gets at most floor(a·n + b) tokens, <eos>
     * included, and never more than max_len nor the model's max_len */
    double max_len_a, max_len_b; /* 2, 8 */
    int64_t max_len;             /* 256 */
    int64_t pad_id, bos_id, eos_id; /* 0, 1, 2: pad and bos are never generated */
    /* sampling: from softmax(log p / temperature) over the top_k most likely tokens (0: all);
     * temperature 0 is greedy. Sentence b of a call draws its step t from rng's stream at
     * counter + b·max_len + t, and the call moves the counter on by B·max_len, so decoding the
     * sentences one call at a time draws what one batched call draws. NULL: the global one. */
    double temperature; /* 1 */
    int64_t top_k;      /* 0 */
    ag_rng *rng;        /* NULL */
} ag_decode_config;

AG_API ag_decode_config ag_decode_defaults(void);

/* ---- results ------------------------------------------------------------------------------ */
/* Hypothesis k of sentence b is row b·n_best + k, best first (by normalised score): width ids
 * (no <bos>; ending at and including <eos> when it produced one; then pad_id), its length in
 * ids, its log-probability (the model's, summed over its tokens) and its normalised score. A
 * sentence with fewer hypotheses than n_best (a beam that found fewer) has length 0 and scores
 * -inf in the rest. Heap memory: ag_decode_result_free. */
typedef struct {
    int64_t sentences, n_best, width;
    int64_t *tokens;  /* (sentences·n_best, width) */
    int64_t *lengths; /* (sentences·n_best) */
    double *scores, *norm_scores;
} ag_decode_result;

/* Decode the B sentences of src (B,S) i64 with m as cfg says into *out (made here; free it with
 * ag_decode_result_free). Runs with grad mode off, in the current arena, which it leaves as it
 * found it. False, with *out empty, after reporting misuse (a bad config, src not (B,S) i64, a
 * model without start/step/reorder, scores of the wrong shape) or a failing model step. */
AG_API bool ag_decode(const ag_decode_model *m, ag_tensor *src, const ag_decode_config *cfg, ag_decode_result *out);
AG_API void ag_decode_result_free(ag_decode_result *r);

/* The penalty score is divided by: ((5+len)/6)^α (GNMT) or len^α (Marian), len at least 1 */
AG_API double ag_decode_length_penalty(ag_length_norm norm, double alpha, int64_t len);

/* ---- state of a recurrent decoder ----------------------------------------------------------
 * Tensors kept outside the arena, so that they survive the per-step rewind: per-row ones (a
 * recurrent decoder's hidden and cell state, (R,...)) move with ag_decode_state_reorder, and
 * per-sentence ones (the encoder outputs and padding mask, (B,...), set once) are read as (R,...),
 * row r getting its sentence's, gathered again only when the rows' sentences change. */
#define AG_DECODE_STATE_SLOTS 8
typedef struct ag_decode_state ag_decode_state;
/* For B sentences and up to max_rows rows; the rows start as the sentences. NULL after
 * reporting. */
AG_API ag_decode_state *ag_decode_state_new(int64_t sentences, int64_t max_rows);
AG_API void ag_decode_state_free(ag_decode_state *s);
/* Slot 0 <= slot < AG_DECODE_STATE_SLOTS holds a copy of t: (R,...) for the current rows, or
 * with per_sentence (B,...) for the sentences. Any dtype; the shape after dim 0 is fixed by the
 * slot's first set. False after reporting. */
AG_API bool ag_decode_state_set(ag_decode_state *s, int slot, ag_tensor *t, bool per_sentence);
/* The slot's values for the current rows (R,...): a tensor in the current arena over the
 * state's memory, valid until the next set or reorder; NULL for a slot never set. */
AG_API ag_tensor *ag_decode_state_get(ag_decode_state *s, int slot);
/* Row r becomes row rows[r] (as ag_decode_model's reorder); rows (M) i64 or i32 */
AG_API bool ag_decode_state_reorder(ag_decode_state *s, ag_tensor *rows);
/* rows now */
AG_API int64_t ag_decode_state_rows(const ag_decode_state *s);

#ifdef __cplusplus
}
#endif
#endif
