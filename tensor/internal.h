/* Internals shared by the tensor core's files (and by nn/ kernels): allocation, dtype
 * templates, the strided N-d loop. Not installed. */
#ifndef AG_INTERNAL_H
#define AG_INTERNAL_H

#include "node.h"
#include "tensor.h"

/* One kernel body for every dtype: a macro X(T, S, D) is expanded once per type, T the C type,
 * S the suffix, D the ag_dtype. Kernels are written once as such a macro. */
#define AG_FLOAT_TYPES(X) X(float, f32, AG_F32) X(double, f64, AG_F64)
#define AG_INT_TYPES(X) X(int32_t, i32, AG_I32) X(int64_t, i64, AG_I64)
#define AG_NUMERIC_TYPES(X) AG_FLOAT_TYPES(X) AG_INT_TYPES(X)
#define AG_ALL_TYPES(X) AG_NUMERIC_TYPES(X) X(uint8_t, b8, AG_BOOL)

/* Elements above which a loop is split across OpenMP threads. Each element is computed by
 * exactly one thread with the same arithmetic, so results never depend on the thread count. */
#define AG_PAR_THRESHOLD 32768

/* A parallel for-loop over independent elements when the int64_t par_work in scope (elements
 * touched) is above AG_PAR_THRESHOLD. */
#define AG_PAR_FOR _Pragma("omp parallel for if (par_work > AG_PAR_THRESHOLD) schedule(static)")

/* t itself when contiguous, else a contiguous copy outside the graph (for kernels that walk
 * rows; the caller's op records the gradient). */
ag_tensor *ag__dense(ag_tensor *t);

/* every GEMM of attograd: ag__sgemm, ag__dgemm, ag__gemm (any float dtype); through it the
 * kernel table ag__kernels (tensor/simd/kernels.h) */
#include "gemm.h"

/* A growable array p of *cap elements of size bytes, grown (doubling, contents kept) to hold
 * need; returns it. For buffers kept across steps, so growth stops after warm-up. */
void *ag__grow(void *p, size_t *cap, size_t need, size_t size);

/* Contiguous tensor of shape (no grad, no node), from the current arena; version 0. */
ag_tensor *ag__new(ag_dtype dt, int ndim, const int64_t *shape);
/* Header copy of t sharing its storage and its version counter (a view to be reshaped by the
 * caller). */
ag_tensor *ag__alias(const ag_tensor *t);
/* An in-place write into t's existing values through the API: its storage's version moves on
 * (every public function that changes data a caller already holds calls this once). Kernels
 * writing a new result do not. A header without a counter (one built on the stack) is skipped. */
static inline void ag__bump_version(ag_tensor *t) {
    if (t->version) ++*t->version;
}
/* ag_version, inline for the recording and the check of every node */
static inline uint32_t ag__version(const ag_tensor *t) { return t && t->version ? *t->version : 0; }
/* ag_copy_ and ag_fill_ without the version bump, for results being made (a new tensor is at
 * version 0 when handed out). They return false after reporting misuse (shapes, overlap). */
bool ag__copy(ag_tensor *dst, const ag_tensor *src);
bool ag__fill(ag_tensor *t, double value);
/* Row-major strides of shape into stride. */
void ag__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
int64_t ag__shape_numel(int ndim, const int64_t *shape);
/* element pointer of the first element */
static inline char *ag__ptr(const ag_tensor *t) { return t->data + t->offset * (int64_t)ag_dtype_size(t->dtype); }
/* "(2,3)" for a raw shape */
char *ag__shape_str(int ndim, const int64_t *shape, char *buf);
bool ag__same_shape(const ag_tensor *a, const ag_tensor *b);

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

/* Strided loop over ndim/shape for nops operands. base[k] is operand k's first element,
 * bstride[k][d] its stride in bytes along d (0 where broadcast). fn gets every innermost run:
 * n elements, the run's pointers, and each operand's byte stride along the run. Parallel above
 * AG_PAR_THRESHOLD elements. */
#define AG_MAX_OPS 4
typedef void (*ag_run_fn)(int64_t n, char *const *p, const int64_t *s, void *ctx);
void ag__foreach(int ndim, const int64_t *shape, int nops, char *const *base,
                 const int64_t (*bstride)[AG_MAX_DIMS], ag_run_fn fn, void *ctx);
/* Byte strides of t broadcast into ndim/shape (t's dims aligned to the right). */
void ag__bcast_bstrides(const ag_tensor *t, int ndim, const int64_t *shape, int64_t *bstride);

/* dst += src, where src has dst's shape, broadcasts to it, or is a broadcast of it (then it is
 * summed down to dst's shape). dst may be a strided view. No grad recorded. */
void ag__add_into(ag_tensor *dst, const ag_tensor *src);
/* dst = src, src as for ag__add_into; false (dst unchanged) when src does not fit */
bool ag__set_into(ag_tensor *dst, const ag_tensor *src);

/* ag_grad_buffer for a backward that writes every element of t's gradient: when the buffer is
 * new in this pass, *fresh is set and its contents are undefined (no zeroing pass), and the
 * caller must assign (=, beta = 0) instead of accumulating; else exactly ag_grad_buffer. */
ag_tensor *ag__grad_buffer_to_write(ag_tensor *t, bool *fresh);

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

/* memset(p, 0, bytes), split over the OpenMP threads when large (gradient buffers, slabs) */
void ag__zero(void *p, size_t bytes);

/* The whole pages inside [from, to) leave the resident set (madvise MADV_DONTNEED; the partial
 * pages at the ends stay). For memory whose contents do not matter (the arena's free space) or
 * that the kernel refills unchanged (a file mapping nobody wrote to). */
void ag__drop_pages(const void *from, const void *to);

/* ag_arena_rewind, then bytes from src (allocated after the mark) moved to the mark: returns
 * where they are now. */
void *ag__arena_rewind_move(ag_arena *a, ag_arena_mark m, const void *src, size_t bytes);

/* Philox draws without OpenMP, for callers that split the work themselves (tensor/rng.c): the
 * same numbers as ag_rng_uniform_f64 from counter on, on the kernel table's vector path. */
void ag__rng_uniform_serial(uint64_t seed, uint64_t counter, int64_t n, double *out);
/* Dropout's keep masks: element e of a mask at draw counter c is a 32-bit word x, word e & 1 of
 * draw c + e / 2 (tensor/rng.c), so a mask of n elements takes ag__mask_draws(n) = (n + 1) / 2
 * draws; x · 2^-32 is its uniform, and ag__u32_count_below(v) is the t with x < t exactly when
 * that uniform is < v (v in [0, 1]). ag__rng_keep decides (x < t) != at_least for elements first .. first+n-1 of the mask without
 * making doubles: 0/1 into keep[i] and/or bit i of bits (bit i & 7 of bits[i >> 3]; the last
 * byte's bits past n are left as they were), either may be NULL. */
uint64_t ag__u32_count_below(double v);
static inline uint64_t ag__mask_draws(int64_t n) { return ((uint64_t)n + 1) / 2; }
void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                  uint8_t *keep, uint8_t *bits);
/* ag__rng_keep on kernel table K's path (the generic table: the scalar reference; tests run
 * each table ag__kernels_for gives) */
void ag__rng_keep_with(const ag__kernel_table *K, uint64_t seed, uint64_t counter, int64_t first, int64_t n,
                       uint64_t t, bool at_least, uint8_t *keep, uint8_t *bits);
/* the one-block-per-value reference of the draws and the masks (tests compare), and which
 * vector path runs: "AVX2", "AVX2 draws, AVX-512 masks" or NULL (the scalar reference) */
void ag__rng_uniform_scalar(uint64_t seed, uint64_t counter, int64_t n, double *out);
uint32_t ag__rng_mask_word(uint64_t seed, uint64_t counter, uint64_t e);
void ag__rng_keep_scalar(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                         uint8_t *keep, uint8_t *bits);
const char *ag__rng_vector_path(void);

/* Nonzero packing (tensor/nzpack.c): elements e0 .. e0+n-1 of a float array (x is element e0)
 * into bit e of bits (1: its bits are not all zero; the bytes past the range keep their other
 * bits) and the nonzero elements, bit for bit and in order, into vals (room for n); returns how
 * many. Unpacking writes them back into x, zeros elsewhere, and returns how many it read. The
 * _with forms run kernel table K's path (the generic table: the scalar one). */
int64_t ag__nz_pack(ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits, void *vals);
int64_t ag__nz_unpack(ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n, const void *vals, void *x);
int64_t ag__nz_pack_with(const ag__kernel_table *K, ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits,
                         void *vals);
int64_t ag__nz_unpack_with(const ag__kernel_table *K, ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n,
                           const void *vals, void *x);

/* Check that t is non-NULL and of a float dtype; reports through op. */
bool ag__check_float(const char *op, const ag_tensor *t);
bool ag__check_not_null(const char *op, const ag_tensor *t);

#endif
