/* attograd-translate support: TSV parallel corpora, tokenisation, vocabularies, batching.
 *
 * This code reads files and user text, so it never aborts and never calls ag_error: every
 * fallible function returns 0 on success and -1 on failure, and then has written a message to
 * the caller's buffer err (errsz bytes, TR_ERR_SIZE is plenty) that says what and where, e.g.
 * "data/train.tsv:17: no tab between source and target". Out of memory is such a failure too.
 * Structs are filled by *_read/_build/_init and released by the matching *_free (which accepts
 * a zeroed or failed struct). */
#ifndef TR_DATA_H
#define TR_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

#define TR_ERR_SIZE 512

/* special token ids, the same in every vocabulary */
enum { TR_PAD = 0, TR_BOS = 1, TR_EOS = 2, TR_UNK = 3, TR_NUM_SPECIALS = 4 };

/* ---- reading a corpus: one "source<TAB>target" pair per line ---------------------------- */
/* Lines that are skipped (lenient mode) or fatal (strict mode). */
typedef enum {
    TR_BAD_BLANK,  /* empty line */
    TR_BAD_NO_TAB, /* no tab between source and target */
    TR_BAD_TABS,   /* more than one tab */
    TR_BAD_UTF8,   /* invalid UTF-8 (or a NUL byte) */
    TR_BAD_LONG,   /* longer than max_line_bytes */
    TR_BAD_EMPTY,  /* source or target is empty or only whitespace */
    TR_NUM_BAD
} tr_bad_kind;

typedef struct {
    bool strict;           /* the first bad line is fatal; otherwise bad lines are skipped */
    size_t max_line_bytes; /* without the line ending; 0 → 4096 */
} tr_read_opts;

typedef struct {
    int64_t n;         /* pairs kept */
    char **src, **tgt; /* pair i, NUL-terminated valid UTF-8 without line ending */
    int64_t *line;     /* 1-based line number of pair i */
    const char *path;  /* as given to tr_corpus_read (not copied) */
    int64_t lines;     /* lines in the file */
    int64_t skipped;   /* bad lines skipped (lenient mode) */
    int64_t bad_count[TR_NUM_BAD];
    char first_bad[TR_NUM_BAD][160]; /* message for the first bad line of each kind */
    /* accepted but worth a note: CRLF endings (the \r is dropped), no newline after the last
     * line, a UTF-8 byte order mark (dropped) */
    int64_t crlf_lines, first_crlf_line;
    bool no_final_newline, bom;
    /* internal */
    char *text;
    size_t text_len, text_cap;
    int64_t cap;
} tr_corpus;

/* Read a TSV corpus. opts may be NULL (lenient, 4096 bytes). Fails on a missing, unreadable
 * or empty file, a file without one good line, and in strict mode on the first bad line. */
int tr_corpus_read(tr_corpus *c, const char *path, const tr_read_opts *opts, char *err, size_t errsz);
void tr_corpus_free(tr_corpus *c);
/* "skipped 3 of 120 lines: 2 without a tab (first: train.tsv:17: no tab between source and
 * target); 1 with invalid UTF-8 (first: train.tsv:40: invalid UTF-8 at byte 5 (0xC3))";
 * returns the length like snprintf, 0 (empty buf) when nothing was skipped. */
int tr_corpus_skip_summary(const tr_corpus *c, char *buf, size_t n);
/* "train.tsv:1: CRLF line ending, 12 lines like it (\r removed); train.tsv:12: no newline at
 * the end of the file"; returns the length like snprintf, 0 (empty buf) if there is no note. */
int tr_corpus_note_summary(const tr_corpus *c, char *buf, size_t n);

/* ---- tokenisation ---------------------------------------------------------------------- */
/* TR_SPM: SentencePiece subwords, the model held by the vocabulary (subword.h) */
typedef enum { TR_WORDS, TR_CHARS, TR_SPM } tr_tok_mode;
/* a token: len bytes at s (not NUL-terminated) */
typedef struct {
    const char *s;
    int len;
} tr_span;
/* the visible space of character-level tokens: U+2581 LOWER ONE EIGHTH BLOCK */
#define TR_SPACE_TOKEN "\xe2\x96\x81"

/* Split UTF-8 text into tokens and write the first max to out; returns the total count.
 * TR_WORDS: split on whitespace; every punctuation character (ASCII and common Unicode
 * marks such as « » ’ …) is a token of its own ("seventy-one" → seventy - one).
 * TR_CHARS: one token per code point, each whitespace character is TR_SPACE_TOKEN.
 * Spans point into text (or at the static TR_SPACE_TOKEN). Invalid UTF-8 bytes become
 * one-byte tokens (the corpus reader rejects them before this point). */
int tr_tokenize(const char *text, tr_tok_mode mode, tr_span *out, int max);
/* Join tokens into text, the inverse of tr_tokenize for conventionally spaced text: words are
 * separated by one space; no space around - ' ’ /, none before , . ; : ! ? ) ] } % … » ”, none
 * after ( [ { « “ ¿ ¡. Writes at most outsz-1 bytes and a NUL; returns the full length. */
size_t tr_detokenize(const tr_span *toks, int n, tr_tok_mode mode, char *out, size_t outsz);

/* ---- vocabularies ---------------------------------------------------------------------- */
typedef struct {
    int size;     /* including the 4 specials */
    char **token; /* id → NUL-terminated token; 0..3 are <pad> <bos> <eos> <unk> */
    /* internal */
    int32_t *slot; /* open-addressing table of ids, nslot a power of two */
    int nslot;
    char *text;
    /* a SentencePiece vocabulary (subword.h): its model, which encodes and decodes, and the
     * model's serialized bytes; NULL for word and character vocabularies */
    struct tr_spm *spm;
    char *spm_model;
    size_t spm_len;
} tr_vocab;

enum { TR_SIDE_SRC = 1, TR_SIDE_TGT = 2 }; /* sides of a corpus, combinable */

/* Tokens of the given corpus sides that occur at least min_count times, ids by descending
 * count then byte order after the specials. */
int tr_vocab_build(tr_vocab *v, const tr_corpus *c, int sides, tr_tok_mode mode, int min_count, char *err,
                   size_t errsz);
void tr_vocab_free(tr_vocab *v);
/* id of the len-byte token at tok, TR_UNK if absent */
int tr_vocab_id(const tr_vocab *v, const char *tok, int len);
/* tokens joined by "\n" (id i on line i, specials first); malloc'd, NULL when out of memory */
char *tr_vocab_to_string(const tr_vocab *v);
/* Parse tr_vocab_to_string's form (a final newline is allowed). name labels messages:
 * "vocab.txt:6: duplicate token 'mille' (also line 2)". */
int tr_vocab_from_string(tr_vocab *v, const char *s, const char *name, char *err, size_t errsz);
/* one token per line, written atomically */
int tr_vocab_save(const tr_vocab *v, const char *path, char *err, size_t errsz);
int tr_vocab_load(tr_vocab *v, const char *path, char *err, size_t errsz);
/* ids of text's tokens (unknown → TR_UNK, no <eos>); writes the first max, returns the count.
 * A SentencePiece vocabulary encodes and decodes with its model, whatever mode says. */
int tr_vocab_encode(const tr_vocab *v, const char *text, tr_tok_mode mode, int64_t *ids, int max);
/* Text of ids: stops at the first <eos>, skips <pad> and <bos>, out-of-range ids read "<unk>".
 * Returns the full length like tr_detokenize. */
size_t tr_vocab_decode(const tr_vocab *v, const int64_t *ids, int n, tr_tok_mode mode, char *out, size_t outsz);
/* number of ids before the first <eos> or <pad> (the sentence, for metrics) */
int tr_ids_len(const int64_t *ids, int n);

/* ---- encoded pairs ----------------------------------------------------------------------- */
typedef struct {
    int64_t n;                      /* pairs */
    int64_t *ids;                   /* all sentences: w1 … wn <eos> */
    int64_t *src_start, *tgt_start; /* (n) offsets into ids */
    int32_t *src_len, *tgt_len;     /* (n) lengths counting the <eos> */
    int64_t *line;                  /* (n) corpus line of the pair */
    int64_t dropped;                /* pairs removed by the length filter */
} tr_dataset;

/* Encode every pair of c; pairs with a side longer than max_len ids (counting <eos>; 0: no
 * limit) are dropped and counted. */
int tr_dataset_build(tr_dataset *d, const tr_corpus *c, const tr_vocab *src_vocab, const tr_vocab *tgt_vocab,
                     tr_tok_mode mode, int max_len, char *err, size_t errsz);
void tr_dataset_free(tr_dataset *d);
/* Hold out round(fraction * n) pairs chosen by seed; both parts keep the original order.
 * held may be NULL (fraction 0 then makes train a copy of all). */
int tr_dataset_split(const tr_dataset *all, double fraction, uint64_t seed, tr_dataset *train, tr_dataset *held,
                     char *err, size_t errsz);

/* ---- length-bucketed batches ------------------------------------------------------------ */
/* The library's batcher (data/data.h) over the pairs' (source, target) lengths: sorted by
 * source length, then target length, ties in a seed-chosen order, cut into batches of
 * batch_size consecutive pairs (the last may be smaller). The composition is fixed; each epoch
 * visits the batches in an order that depends only on (seed, epoch), so a run resumed at
 * (epoch, step) sees the same batches. max_len[0] and max_len[1] are the longest source and
 * target: the buffer size tr_batch needs. */
typedef ag_batcher tr_batcher;

/* Buffers of one batch, row-major, padded with TR_PAD: wrap them with ag_wrap(AG_I64, ...). */
typedef struct {
    int B, Ls, Lt;              /* this batch: pairs, source and target lengths */
    int64_t *src;               /* (B, Ls) w1 … wn <eos> <pad> … */
    int64_t *tgt_in;            /* (B, Lt) <bos> w1 … wm <pad> … (teacher forcing input) */
    int64_t *tgt_out;           /* (B, Lt) w1 … wm <eos> <pad> … (what to predict) */
    int32_t *src_len, *tgt_len; /* (B) */
    int64_t *index;             /* (B) pair index in the dataset */
    int64_t ntokens;            /* non-pad entries of tgt_out */
    int cap_B, cap_Ls, cap_Lt;
} tr_batch;

int tr_batcher_init(tr_batcher *b, const tr_dataset *d, int batch_size, uint64_t seed, bool shuffle, char *err,
                    size_t errsz);
static inline void tr_batcher_free(tr_batcher *b) { ag_batcher_free(b); }
/* Make the batch order of epoch (any epoch, any order of calls; no allocation). */
static inline void tr_batcher_set_epoch(tr_batcher *b, int64_t epoch) { ag_batcher_set_epoch(b, epoch); }
/* buffers big enough for every batch of b (the only allocation of the batching loop) */
int tr_batch_alloc(tr_batch *bt, const tr_batcher *b, char *err, size_t errsz);
void tr_batch_free(tr_batch *bt);
/* Fill bt with the step-th batch (0 ≤ step < nbatches) of the current epoch; -1 (and bt->B = 0)
 * if step is out of range or bt was allocated for another batcher. */
int tr_batcher_get(const tr_batcher *b, const tr_dataset *d, int64_t step, tr_batch *bt);

/* ---- files ----------------------------------------------------------------------------- */
/* Replace path with len bytes of data atomically: temp file in the same directory, fsync,
 * rename, fsync of the directory. A crash leaves the old file or the new one. */
int tr_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errsz);

#endif
