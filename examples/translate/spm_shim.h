/* A C interface to the parts of SentencePiece (C++, libsentencepiece) that attograd-translate
 * uses: train a model in memory, load one from its serialized bytes, encode and decode. Only
 * examples/translate links the C++ library; the rest of attograd stays C11.
 *
 * Models trained here use the ids of data.h for the specials (<pad> 0, <bos> 1, <eos> 2,
 * <unk> 3) and are lossless: no normalisation, whitespace kept as it is, and bytes of
 * characters absent from the training text encoded as <0xNN> pieces, so decode(encode(s)) == s
 * for any UTF-8 s. Fallible functions return 0, or -1 with a one-line message in err. */
#ifndef TR_SPM_SHIM_H
#define TR_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_spm tr_spm;

typedef struct {
    const char *type; /* "unigram" or "bpe" */
    int vocab_size;   /* an upper bound: a corpus with fewer possible pieces gets fewer */
} tr_spm_train_opts;

/* Train on n sentences (NUL-terminated UTF-8). The model's serialized bytes go to *model
 * (malloc'd, *len bytes). Deterministic: the same sentences and options give the same bytes.
 * Quiet: SentencePiece's log stays off. */
int tr_spm_train(const char *const *sentences, int64_t n, const tr_spm_train_opts *o, char **model, size_t *len,
                 char *err, size_t errsz);
/* A model from its serialized bytes (a .model file's content); NULL with err on failure. */
tr_spm *tr_spm_load(const void *model, size_t len, char *err, size_t errsz);
void tr_spm_free(tr_spm *p);
int tr_spm_size(const tr_spm *p);
/* the piece of id (0 <= id < size) as UTF-8, valid while p lives */
const char *tr_spm_piece(const tr_spm *p, int id);
/* whether id is a byte piece <0xNN> */
int tr_spm_is_byte(const tr_spm *p, int id);
/* ids of text; writes the first max, returns the count (-1 if SentencePiece refuses text) */
int tr_spm_encode(const tr_spm *p, const char *text, int64_t *ids, int max);
/* Text of n ids (ids out of range read as <unk>); writes at most outsz-1 bytes and a NUL,
 * returns the full length. */
size_t tr_spm_decode(const tr_spm *p, const int64_t *ids, int n, char *out, size_t outsz);

#ifdef __cplusplus
}
#endif
#endif
