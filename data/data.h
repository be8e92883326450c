/* attograd data: padding, teacher forcing, seeded shuffling and length-bucketed batches of
 * token-id sequences (what a training loop over a corpus needs before the model sees it).
 *
 * The tensor functions follow PyTorch (torch.nn.utils.rnn.pad_sequence, MultiheadAttention's
 * key_padding_mask with true = padding) and report misuse through the error handler. The
 * batcher works on a corpus, so it returns a status and a one-line message instead. Every
 * order here depends only on the seed (ag_rng's counter-based stream), never on the thread
 * count or the machine. */
#ifndef AG_DATA_H
#define AG_DATA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- padding ------------------------------------------------------------------------------ */
/* torch.nn.utils.rnn.pad_sequence(sequences, batch_first, padding_value): n tensors (L_i, *)
 * of one dtype and trailing shape -> (max L, n, *), or (n, max L, *) with batch_first; the
 * positions past each L_i hold padding_value. Differentiable (cat and stack). */
AG_API ag_tensor *ag_pad_sequence(int n, ag_tensor *const *sequences, bool batch_first, double padding_value);
/* the lengths L_i of n sequences (their dim 0) -> (n) i64 */
AG_API ag_tensor *ag_sequence_lengths(int n, ag_tensor *const *sequences);
/* lengths (B) i32/i64 -> (B, max_len) bool, true at positions >= lengths[b]: the padding, as
 * MultiheadAttention's key_padding_mask and the Transformer's *_key_padding_mask take it */
AG_API ag_tensor *ag_padding_mask(ag_tensor *lengths, int64_t max_len);

/* ---- teacher forcing ---------------------------------------------------------------------- */
/* y (B, L) i64 token ids, padded, with lengths (B) i32/i64 (each <= L) -> *input (B, L+1):
 * bos, y[b][0 .. len) and *target (B, L+1): y[b][0 .. len), eos, both padded with pad: the
 * decoder reads input and predicts target (BOS + y -> y + EOS). */
AG_API void ag_teacher_forcing(ag_tensor *y, ag_tensor *lengths, int64_t bos, int64_t eos, int64_t pad,
                               ag_tensor **input,
                               ag_tensor **target);
/* The same for one row of ids, into caller memory: input = bos, y[0 .. len), target =
 * y[0 .. len), eos, each padded with pad to width (>= len + 1). */
AG_API void ag_teacher_forcing_row(const int64_t *y, int64_t len, int64_t width, int64_t bos, int64_t eos, int64_t pad,
                                   int64_t *input, int64_t *target);
/* ids[0 .. len) then pad up to width (>= len) */
AG_API void ag_pad_row(const int64_t *ids, int64_t len, int64_t width, int64_t pad, int64_t *out);

/* ---- shuffling ---------------------------------------------------------------------------- */
/* Fisher-Yates shuffle of a[0 .. n) from rng (NULL: the global one): for i = n-1 down to 1,
 * one uniform u picks j = floor(u (i + 1)) and a[i], a[j] swap; rng's counter moves on n - 1. */
AG_API void ag_shuffle(int64_t *a, int64_t n, ag_rng *rng);

/* ---- length-bucketed batches -------------------------------------------------------------- */
/* Sequences (or pairs of sequences) are sorted by length, len[0] first, then len[1], ties in an
 * order chosen by the seed, and cut into batches of consecutive ones: a batch holds sequences
 * of similar length, so little of it is padding. A batch takes at most batch_size sequences
 * (0: no limit) and at most max_tokens padded tokens, counted as its sequences times its
 * longest length on either side (0: no limit; a sequence longer than that is a batch of its
 * own). The batches are fixed; each epoch visits them in an order that depends only on (seed,
 * epoch) when shuffle is on, else in length order: a run resumed at (epoch, step) sees the
 * same batches. The tie order takes counters [0, n) of the seed's stream and epoch e's order
 * counters from (e + 1) * 2^32 on. */
typedef struct {
    int64_t n;               /* sequences, or pairs */
    const int32_t *len[2];   /* (n) lengths (>= 0): len[0], and len[1] for pairs (else NULL) */
    int batch_size;          /* sequences per batch at most; 0: only max_tokens limits */
    int64_t max_tokens;      /* padded tokens per batch at most; 0: only batch_size limits */
    uint64_t seed;
    bool shuffle;            /* a new batch order every epoch */
} ag_batcher_config;

typedef struct {
    int64_t n, nbatches;
    int max_batch;           /* sequences in the largest batch */
    int32_t max_len[2];      /* the longest sequence on each side (0 for a side not given) */
    bool shuffle;
    uint64_t seed;
    int64_t epoch;           /* the epoch perm belongs to */
    int64_t *order;          /* (n) sequence indices; batch k is order[start[k] .. + size[k]) */
    int64_t *start;          /* (nbatches) */
    int32_t *size;           /* (nbatches) */
    int64_t *perm;           /* (nbatches) the batch visited at each step of the epoch */
} ag_batcher;

/* 0, or -1 with a message in err (no sequences, no limit, a negative length, out of memory) */
AG_API int ag_batcher_init(ag_batcher *b, const ag_batcher_config *c, char *err, size_t errsz);
AG_API void ag_batcher_free(ag_batcher *b);
/* the batch order of epoch (any epoch, in any order of calls; no allocation) */
AG_API void ag_batcher_set_epoch(ag_batcher *b, int64_t epoch);
/* The step-th batch of the current epoch: *rows points at its sequence indices (in length
 * order); returns how many, 0 when step is out of range. */
AG_API int ag_batcher_batch(const ag_batcher *b, int64_t step, const int64_t **rows);

#ifdef __cplusplus
}
#endif
#endif
