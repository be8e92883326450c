/* attograd-translate: SentencePiece subword vocabularies (a tr_vocab whose ids are a
 * SentencePiece model's, spm_shim.h). Conventions of data.h: 0 or -1 with a message in err. */
#ifndef TR_SUBWORD_H
#define TR_SUBWORD_H

#include "data.h"

typedef struct {
    const char *type; /* "unigram" (the default when NULL) or "bpe" */
    int vocab_size;   /* 0: tr_subword_default_size */
} tr_subword_opts;

/* The vocabulary size the defaults choose for a side of c: the 4 specials, the 256 byte pieces,
 * one piece per distinct character, and two pieces more per distinct word (a word and its form
 * starting a sentence piece, "▁word") but at most one per 20 pairs, so that every piece is seen
 * often enough to be learnt. */
int tr_subword_default_size(const tr_corpus *c, int side);
/* The smallest vocabulary SentencePiece trains on that side: the 4 specials, the 256 byte
 * pieces and one piece per distinct character ("▁" for the space, always there). */
int tr_subword_least_size(const tr_corpus *c, int side);
/* Train a model on the given side (TR_SIDE_SRC or TR_SIDE_TGT) of c. */
int tr_vocab_train_spm(tr_vocab *v, const tr_corpus *c, int side, const tr_subword_opts *o, char *err, size_t errsz);
/* A vocabulary from a model's serialized bytes; name labels messages. The model must have the
 * specials of data.h at their ids (<pad> 0, <bos> 1, <eos> 2, <unk> 3), as models trained by
 * attograd-translate and by spm_train with --pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3
 * --pad_piece=<pad> --bos_piece=<bos> --eos_piece=<eos> do. */
int tr_vocab_from_spm(tr_vocab *v, const void *model, size_t len, const char *name, char *err, size_t errsz);
/* The same from a .model file. */
int tr_vocab_load_spm(tr_vocab *v, const char *path, char *err, size_t errsz);
/* A copy of v (any kind). */
int tr_vocab_copy(tr_vocab *dst, const tr_vocab *v, char *err, size_t errsz);

/* Base64 (RFC 4648, with padding) of len bytes: a malloc'd string, NULL when out of memory. */
char *tr_base64_encode(const void *data, size_t len);
/* The bytes of base64 text s into *out (malloc'd, *len bytes); -1 if s is not base64. */
int tr_base64_decode(const char *s, char **out, size_t *len);

#endif
