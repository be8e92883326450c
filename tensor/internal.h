/* Internals of the tensor core, private to tensor/ (not installed): the strided N-d loop,
 * overlap checks, sanitizer poisoning, the per-ISA forms of the vector kernels. Everything an
 * op outside tensor/ may use is in op.h, which this header includes. */
#ifndef AG_INTERNAL_H
#define AG_INTERNAL_H

#include "node.h"
#include "op.h"
#include "tensor.h"

/* the GEMM dispatch (its entry points are in op.h); through it the kernel table ag__kernels
 * (tensor/simd/kernels.h) */
#include "gemm.h"

/* Grad mode, kept here where ops record (tensor/node.c); the API declares it in
 * autograd/autograd.h, which tensor/ may not include */
AG_API bool ag_set_grad_enabled(bool on);
AG_API bool ag_grad_enabled(void);

/* How the memory of a destination dst and a source src of an op that writes dst meet, as torch
 * tells them apart: NONE (disjoint, or either empty), FULL (the same elements in the same
 * layout: an elementwise op may read and write them together), PARTIAL (both dense, some
 * elements shared in another layout: results would depend on the loop order), MAYBE (their
 * byte ranges meet but a strided layout may interleave them). */
typedef enum { AG_OVERLAP_NONE, AG_OVERLAP_FULL, AG_OVERLAP_PARTIAL, AG_OVERLAP_MAYBE } ag_overlap;
ag_overlap ag__overlap(const ag_tensor *dst, const ag_tensor *src);
/* The checks before writing into dst from src (src may be NULL): ag_error, as torch, when dst
 * has several elements on one address (an expanded view) or src partially overlaps it.
 * Returns src, or a private copy of it when the overlap may interleave, so the op reads the
 * old values whatever the loop order; NULL after an error. With src NULL, returns dst or
 * NULL. */
const ag_tensor *ag__writable(const char *op, const ag_tensor *dst, const ag_tensor *src);

/* ---- arena generations (tensor/core.c) ----
 * Every arena has a row in ag__arena_gens (up to AG_ARENA_SLOTS - 1 arenas at once; more are
 * untracked), and every header made in an arena notes the row and the arena's generation then
 * (its ag__tensor_state). A header with row 0 (parameters' headers are made in an arena never
 * reset, headers on the stack have none) is always alive. */
#define AG_ARENA_SLOTS 256
/* bytes an arena may hold since its last reset before growing past them warns (once): far
 * above a training step of attograd-translate (29 MiB by default, under 400 MiB at 4x the
 * width and batch), reached by a loop that never resets after some 20 000 small matmuls */
#define AG_ARENA_WARN_BYTES ((size_t)1 << 30)
typedef struct {
    uint64_t gen;               /* the generation tensors made now get */
    uint64_t live_from;         /* the first generation since the last reset */
    uint64_t dead_lo, dead_hi;  /* generations a rewind forgot (empty when dead_lo > dead_hi) */
} ag__arena_gen;
extern ag__arena_gen ag__arena_gens[AG_ARENA_SLOTS];
/* A zeroed header from a's current half (tensor/core.c), with a counter of its own (version 0)
 * and a's row and generation noted; NULL when out of memory. */
ag_tensor *ag__arena_header(ag_arena *a);
/* Whether t may be used: made in the arena's current life and not forgotten by a rewind. A
 * compare or two, nothing per element; a garbage row (the header overwritten) is dead. */
static inline bool ag__alive(const ag_tensor *t) {
    const ag__tensor_state *s = ag__state(t);
    if (s->arena_slot == 0) return true;
    if (s->arena_slot >= AG_ARENA_SLOTS) return false;
    const ag__arena_gen *g = &ag__arena_gens[s->arena_slot];
    uint64_t v = s->generation;
    return v >= g->live_from && v <= g->gen && (v < g->dead_lo || v > g->dead_hi);
}
/* Report through op that t is dead (its shape, dtype, both generations); returns false. */
bool ag__report_dead(const char *op, const ag_tensor *t);

/* Strided loop over ndim/shape for nops operands. base[k] is operand k's first element,
 * bstride[k][d] its stride in bytes along d (0 where broadcast). fn gets every innermost run:
 * n elements, the run's pointers, and each operand's byte stride along the run. Parallel above
 * AG_PAR_THRESHOLD elements. */
#define AG_MAX_OPS 4
typedef void (*ag_run_fn)(int64_t n, char *const *p, const int64_t *s, void *ctx);
void ag__foreach(int ndim, const int64_t *shape, int nops, char *const *base,
                 const int64_t (*bstride)[AG_MAX_DIMS], ag_run_fn fn, void *ctx);

/* dst = src, src as for ag__add_into; false (dst unchanged) when src does not fit */
bool ag__set_into(ag_tensor *dst, const ag_tensor *src);

/* The dims of a reduction (tensor/reduce.c; norm.c shares them): dims (ndims of them, NULL or
 * 0: all; a 0-d t accepts 0 and -1) as a bit mask over t's dims, false after reporting through
 * op; t's shape without the dims in mask, or with them 1 (keepdim), returning the ndim; and g
 * (the reduced shape, either form) viewed with t's ndim and 1 in the reduced dims, so that it
 * broadcasts back over t. */
bool ag__dims_mask(const char *op, const ag_tensor *t, int ndims, const int *dims, unsigned *mask)
    __attribute__((visibility("hidden")));
int ag__reduced_shape(const ag_tensor *t, unsigned mask, bool keepdim, int64_t *shape)
    __attribute__((visibility("hidden")));
ag_tensor *ag__keepdim_view(ag_tensor *g, const ag_tensor *t, unsigned mask) __attribute__((visibility("hidden")));

/* Under AddressSanitizer, memory the library holds but nobody may use (an arena's free space,
 * a released gradient buffer) is poisoned, so a use after the rewind that forgot it is reported
 * where it happens. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define AG_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define AG_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define AG_POISON(p, n) ((void)(p), (void)(n))
#define AG_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* The whole pages inside [from, to) leave the resident set (madvise MADV_DONTNEED; the partial
 * pages at the ends stay). For memory whose contents do not matter (the arena's free space) or
 * that the kernel refills unchanged (a file mapping nobody wrote to). */
void ag__drop_pages(const void *from, const void *to);

/* Philox draws without OpenMP, for callers that split the work themselves (tensor/rng.c): the
 * same numbers as ag_rng_uniform_f64 from counter on, on the kernel table's vector path. */
void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out);
/* ag__rng_keep (op.h) on kernel table K's path (the generic table: the scalar reference; tests
 * run each table ag__kernels_for gives) */
void ag__rng_keep_with(const ag__kernel_table *K, uint64_t seed, uint64_t counter, int64_t first, int64_t n,
                       uint64_t t, bool at_least, uint8_t *keep, uint8_t *bits);
/* the one-block-per-value reference of the draws and the masks (tests compare), and which
 * vector path runs: "AVX2", "AVX2 draws, AVX-512 masks" or NULL (the scalar reference) */
void ag__rng_uniform_scalar(uint64_t seed, uint64_t counter, int64_t n, double *out);
uint32_t ag__rng_mask_word(uint64_t seed, uint64_t counter, uint64_t e);
void ag__rng_keep_scalar(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                         uint8_t *keep, uint8_t *bits);
const char *ag__rng_vector_path(void);

/* ag__nz_pack and ag__nz_unpack (op.h) on kernel table K's path (the generic table: the scalar
 * one; tests run each table ag__kernels_for gives) */
int64_t ag__nz_pack_with(const ag__kernel_table *K, ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits,
                         void *vals);
int64_t ag__nz_unpack_with(const ag__kernel_table *K, ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n,
                           const void *vals, void *x);

#endif
