/* What an op author needs from the tensor core beyond the public API: the instruction set in
 * use, new and aliased tensors, element pointers, copies, gradient buffers and arena scratch,
 * shape checks, the dtype templates, the softmax row kernel, the GEMM entry points and the BLAS
 * view of a strided matrix, dropout's masks and the vectorisable expf. nn/, autograd/ and ops
 * written outside the library include this header, the one op-author header installed, and
 * node.h's recipe (which it includes); every function and variable it declares is exported
 * (AG_API) and links against the shared library. tensor/internal.h, the kernel tables and the
 * CPU dispatch stay private to tensor/. Names with ag__ are for op authors: stable within a
 * release, not the user API. */
#ifndef AG_OP_H
#define AG_OP_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fastmath.h" /* ag__expf: the softmax loops' vectorisable expf */
#include "node.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the vector instruction set ------------------------------------------------------------
 *
 * Decided once when the library is loaded (tensor/cpu.c) from what the CPU has
 * (__builtin_cpu_supports, so a build for any x86-64 runs everywhere; valgrind hides AVX-512 and
 * so reports AVX2) and one override in the environment:
 *   AG_ISA=avx512   the AVX-512F kernels (the CPU must have AVX-512F)
 *   AG_ISA=avx2     the AVX2 + FMA kernels, also on an AVX-512 CPU (to test or measure them there)
 *   AG_ISA=generic  the portable C paths, and OpenBLAS for every GEMM
 * Unset: the CPU's best. A value not in that list, or one the CPU (or a build without vector
 * kernels: -Dsimd=false, or not x86-64) cannot run, is reported once on stderr and the CPU's
 * best is used instead. The library's kernels follow this choice, and so does an op with vector
 * kernels of its own that picks them by ag__isa_in_use() (nn/attention does). */
typedef enum {
    AG_ISA_GENERIC, /* portable C (and OpenBLAS) only */
    AG_ISA_AVX2,    /* AVX2 with FMA */
    AG_ISA_AVX512,  /* AVX-512F (with FMA) */
} ag__isa;

/* the widest set this build has kernels for and this CPU runs (AG_ISA_GENERIC in a build
 * without vector kernels or on another architecture): every set up to it can run */
AG_API ag__isa ag__cpu_isa(void);
/* the set in use: ag__cpu_isa() unless AG_ISA chose another one */
AG_API ag__isa ag__isa_in_use(void);
/* "generic", "avx2" or "avx512": AG_ISA's spelling of isa */
AG_API const char *ag__isa_name(ag__isa isa);

/* A plain C loop (not an intrinsics kernel) that the compiler vectorises much better with AVX2
 * or AVX-512 (a conversion, a variable shift, an expf): compiled for x86-64-v4 (AVX-512), for
 * AVX2 and for the baseline, the loader picks one (GCC's function multiversioning), so a build
 * for any x86-64 runs it at the speed of a -march=native one. C11 contracts no multiply-add and
 * GCC reorders no sum, so every copy gives the same bits. Empty where the build already targets AVX2, or has no vector kernels. */
#if defined(AG_SIMD) && defined(__x86_64__) && defined(__GNUC__) && defined(__linux__) && !defined(__AVX2__)
#define AG_AVX2_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define AG_AVX2_CLONES
#endif

/* ---- dtype templates and threading ---------------------------------------------------------- */

/* One kernel body for every dtype: a template file (name.inc, plain C) is included once per
 * type with T the C type and FN(name) the suffixed name defined, e.g. for f32
 *     #define T float
 *     #define FN(name) name##_f32
 *     #include "softmax_rows.inc"
 *     #undef T
 *     #undef FN
 * and again with double / _f64 (int32_t / _i32, int64_t / _i64, uint8_t / _b8 where needed). */

/* Elements above which a loop is split across OpenMP threads. Each element is computed by
 * exactly one thread with the same arithmetic, so results never depend on the thread count. */
#define AG_PAR_THRESHOLD 32768

/* A parallel for-loop over independent elements when the int64_t par_work in scope (elements
 * touched) is above AG_PAR_THRESHOLD. */
#define AG_PAR_FOR _Pragma("omp parallel for if (par_work > AG_PAR_THRESHOLD) schedule(static)")

/* ---- tensors: make, alias, read, copy ------------------------------------------------------- */

/* Contiguous tensor of shape (no grad, no node), from the current arena; version 0. */
AG_API ag_tensor *ag__new(ag_dtype dt, int ndim, const int64_t *shape);
/* Header copy of t sharing its storage and its version counter (a view to be reshaped by the
 * caller). */
AG_API ag_tensor *ag__alias(const ag_tensor *t);
/* t itself when contiguous (or NULL), else a contiguous copy outside the graph (for kernels
 * that walk rows or hand t to BLAS; the caller's op records the gradient). */
AG_API ag_tensor *ag__dense(ag_tensor *t);
/* element pointer of the first element */
static inline char *ag__ptr(const ag_tensor *t) { return t->data + t->offset * (int64_t)ag_dtype_size(t->dtype); }

/* A header's bookkeeping, kept in ag_tensor's internal words (zero in a header built on the
 * stack or copied from nothing: no counter, no arena). may_alias: the words are read and
 * written through this type whatever the header was declared as. */
typedef struct __attribute__((may_alias)) {
    uint32_t *version;    /* its storage's counter, shared by every view (see ag_version) */
    uint32_t own_version; /* the version counter of a tensor made with new storage */
    uint32_t grad_pass;   /* backward pass in which a non-leaf grad was last written */
    uint32_t arena_slot;  /* the arena the header was made in (tensor/core.c), 0 for none */
    uint32_t reserved;
    uint64_t generation;  /* that arena's generation when the header was made */
} ag__tensor_state;
_Static_assert(sizeof(ag__tensor_state) <= sizeof(((ag_tensor *)0)->internal), "ag_tensor.internal too small");
static inline ag__tensor_state *ag__state(const ag_tensor *t) { return (ag__tensor_state *)(void *)t->internal; }

/* An in-place write into t's existing values through the API: its storage's version moves on
 * (every public function that changes data a caller already holds calls this once). Kernels
 * writing a new result do not. A header without a counter (one built on the stack) is skipped. */
static inline void ag__bump_version(ag_tensor *t) {
    if (t && ag__state(t)->version) ++*ag__state(t)->version;
}
/* ag_version, inline for the recording and the check of every node */
static inline uint32_t ag__version(const ag_tensor *t) {
    return t && ag__state(t)->version ? *ag__state(t)->version : 0;
}
/* ag_copy_ and ag_fill_ without the version bump, for results being made (a new tensor is at
 * version 0 when handed out). They return false after reporting misuse (shapes, overlap). */
AG_API bool ag__copy(ag_tensor *dst, const ag_tensor *src);
AG_API bool ag__fill(ag_tensor *t, double value);
/* dst += src, where src has dst's shape, broadcasts to it, or is a broadcast of it (then it is
 * summed down to dst's shape). dst may be a strided view. No grad recorded. */
AG_API void ag__add_into(ag_tensor *dst, const ag_tensor *src);

/* ---- recording and the engine's hooks (tensor/node.c; autograd/ drives them) ------------------ */

/* Records the node whatever the inputs (ag_finish's second half), for an op that knows its
 * output needs a gradient although no input requires one (ag_recompute: parameters inside). */
AG_API ag_node *ag__record(const ag_op *op, ag_tensor *out, int nin, ag_tensor *const *in);
/* The seq the next recorded node will get: nodes recorded from now on have seq >= it. */
AG_API uint64_t ag__next_seq(void);
/* The engine calls ag__grad_release(t) once t's producing op has run its backward: t->grad goes
 * back to the gradient pool (node.h) and becomes NULL, or, if t retains its grad, is first
 * copied into the current arena. */
AG_API void ag__grad_release(ag_tensor *t);
/* Engine hooks, set by autograd/: the current pass number, and an anomaly check that runs on
 * every op output (forward) when non-NULL. */
AG_API extern uint32_t ag__grad_pass;
AG_API extern void (*ag__anomaly_hook)(const ag_op *op, const ag_tensor *out, int nin, ag_tensor *const *in);

/* ---- shapes and checks ---------------------------------------------------------------------- */

/* Row-major strides of shape into stride. */
AG_API void ag__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
/* product of the dims */
AG_API int64_t ag__shape_numel(int ndim, const int64_t *shape);
/* Whether a tensor of shape could exist: no negative size, and its bytes in the widest dtype
 * fit in 63 bits (so element counts and byte sizes never overflow). */
AG_API bool ag__numel_fits(int ndim, const int64_t *shape);
/* "(2,3)" for a raw shape into buf (128 bytes; a longer one ends in "...)") */
AG_API char *ag__shape_str(int ndim, const int64_t *shape, char *buf);
/* same dims, in number and size */
AG_API bool ag__same_shape(const ag_tensor *a, const ag_tensor *b);
/* Byte strides of t broadcast into ndim/shape (t's dims aligned to the right). */
AG_API void ag__bcast_bstrides(const ag_tensor *t, int ndim, const int64_t *shape, int64_t *bstride);
/* Check that t is non-NULL, alive (not forgotten by its arena: tensor.h) and of a float dtype;
 * reports through op. */
AG_API bool ag__check_float(const char *op, const ag_tensor *t);
/* Check that t is non-NULL and alive; reports through op. */
AG_API bool ag__check_not_null(const char *op, const ag_tensor *t);

/* ---- gradient buffers and scratch ----------------------------------------------------------- */

/* ag_grad_buffer (node.h) for a backward that writes every element of t's gradient: when the
 * buffer is new in this pass, *fresh is set and its contents are undefined (no zeroing pass),
 * and the caller must assign (=, beta = 0) instead of accumulating; else exactly
 * ag_grad_buffer. */
AG_API ag_tensor *ag__grad_buffer_to_write(ag_tensor *t, bool *fresh);
/* memset(p, 0, bytes), split over the OpenMP threads when large (gradient buffers, slabs) */
AG_API void ag__zero(void *p, size_t bytes);
/* posix_memalign to 64 bytes, counted by ag_alloc_count; NULL when the system cannot provide
 * the memory (ag_xmalloc aborts instead). Free with ag_xfree. */
AG_API void *ag__try_malloc(size_t bytes);
/* A growable array p of *cap elements of size bytes, grown (doubling, contents kept) to hold
 * need; returns it. For buffers kept across steps, so growth stops after warm-up. */
AG_API void *ag__grow(void *p, size_t *cap, size_t need, size_t size);
/* ag_arena_alloc(a, bytes), a failure reported through op, naming what and the size
 * ("ag_x: cannot allocate 64 bytes for the saved state: out of memory"); NULL then */
AG_API void *ag__alloc(const char *op, ag_arena *a, size_t bytes, const char *what);
/* ag__new (a contiguous, uninitialised tensor from the current arena), a failure reported
 * through op naming the size and shape */
AG_API ag_tensor *ag__new_op(const char *op, ag_dtype dt, int ndim, const int64_t *shape);
/* ag_arena_rewind, then bytes from src (allocated after the mark) moved to the mark: returns
 * where they are now. */
AG_API void *ag__arena_rewind_move(ag_arena *a, ag_arena_mark m, const void *src, size_t bytes);

/* ---- the softmax row kernel (tensor/softmax_rows.inc, compiled in reduce.c) -----------------
 *
 * One kernel serves ag_softmax, ag_log_softmax, ag_masked_softmax and the attention's score
 * rows. A row of n elements: y = softmax(x + mask) with the row's maximum subtracted before
 * exp, or (log_, without a mask) x - log Σ exp(x). With a mask, a row with nothing left becomes
 * zeros (not 0/0), and its backward, y*(g - Σ g*y), is zero wherever y is. */
typedef enum { AG_SOFTMAX_MASK_NONE, AG_SOFTMAX_MASK_BOOL, AG_SOFTMAX_MASK_ADD } ag__softmax_mask_kind;
/* a row's mask: kind, its elements m at byte stride ms (bool: set means masked; add: of the
 * row's dtype), and lim: positions past it are masked too (the causal limit; n - 1 or more
 * masks nothing) */
typedef struct {
    ag__softmax_mask_kind kind;
    const char *m;
    int64_t ms, lim;
} ag__softmax_mask;
/* A row's exponentials (and, backward, its products) are summed in one order for every caller:
 * W lanes (element j into lane j mod W) added left to right, so that ag_softmax,
 * ag_masked_softmax without a mask and the attention's score rows agree bit for bit. f32 uses
 * tensor/fastmath.h's ag__expf. */
/* forward: x at element stride xs into y at ys; mask NULL for a plain softmax */
AG_API void ag__softmax_row_f32(bool log_, const float *x, int64_t xs, float *y, int64_t ys,
                                int64_t n, const ag__softmax_mask *mask);
AG_API void ag__softmax_row_f64(bool log_, const double *x, int64_t xs, double *y, int64_t ys,
                                int64_t n, const ag__softmax_mask *mask);
/* backward: dx = (acc: dx +) y*(g - Σ g*y), or for log_ g - exp(y) Σ g; all at stride s */
AG_API void ag__softmax_row_bwd_f32(bool log_, const float *y, const float *g, float *dx,
                                    int64_t n, int64_t s, bool acc);
AG_API void ag__softmax_row_bwd_f64(bool log_, const double *y, const double *g, double *dx,
                                    int64_t n, int64_t s, bool acc);
/* ---- end of the softmax row kernel ---- */

/* ---- GEMM ----------------------------------------------------------------------------------- */

/* Row-major C = alpha·op(A)·op(B) + beta·C with cblas_?gemm's arguments; which kernel runs where
 * (attograd's own f32 tiles or OpenBLAS) is told in tensor/gemm.h. No result depends on the
 * thread count. */
AG_API void ag__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* C = op(A)·op(B) + bias broadcast over rows (bias (n), unit stride, or NULL): ag_linear's
 * forward, with the bias added in the kernel's last step instead of a pass of its own */
AG_API void ag__sgemm_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b,
                           int64_t ldb, const float *bias, float *c, int64_t ldc);
AG_API void ag__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                      const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
/* The small path of ag__sgemm alone, for the products inside a kernel of an op's own (one
 * attention head, up to 64×64×64): C (m×n, rows ldc apart) = alpha·op(A)·B, or C += that (add),
 * B (k×n) row-major with rows ldb apart. With the f32 tiles in use (AG_ISA avx2 or avx512) it
 * is the register tile over A and B in place: no packing, threads or allocation, each element
 * summed over k in order; without them, ag__sgemm. */
AG_API void ag__sgemm_small(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                            const float *b, int64_t ldb, bool add, float *c, int64_t ldc);
/* dtype-generic: ag__sgemm or ag__dgemm */
AG_API void ag__gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                     int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* sets OpenBLAS back to one thread if the program raised it (a no-op inside a parallel region):
 * code that calls GEMMs from its own parallel regions calls it before opening them */
AG_API void ag__blas_single_threaded(void);

/* A strided matrix as BLAS reads it in place: p its element (0,0), stored row-major with rows
 * ld elements apart (trans false), or stored as its transpose, whose rows are ld apart (trans
 * true). */
typedef struct {
    const char *p;
    bool trans;
    int64_t ld;
} ag__blas_mat;
/* The r×c matrix at p with row stride rs and column stride cs (in elements) as BLAS can read
 * it: true and *m filled, or false when it needs a contiguous copy first (ag__dense). The
 * stride of a size-1 dim never matters; an empty matrix reads as it lies (ld >= 1). */
AG_API bool ag__blas_mat_of(const void *p, int64_t r, int64_t c, int64_t rs, int64_t cs, ag__blas_mat *m);

/* ---- dropout's keep masks and nonzero packing ------------------------------------------------ */

/* Element e of a mask at draw counter c is a 32-bit word x, word e & 1 of Philox draw c + e / 2
 * (tensor/rng.c), so a mask of n elements takes ag__mask_draws(n) = (n + 1) / 2 draws; x · 2^-32
 * is its uniform, and ag__u32_count_below(v) is the t with x < t exactly when that uniform is
 * < v (v in [0, 1]). ag__rng_keep decides (x < t) != at_least for elements first .. first+n-1
 * of the mask without making doubles: 0/1 into keep[i] and/or bit i of bits (bit i & 7 of
 * bits[i >> 3]; the last byte's bits past n are left as they were), either may be NULL. */
AG_API uint64_t ag__u32_count_below(double v);
static inline uint64_t ag__mask_draws(int64_t n) { return ((uint64_t)n + 1) / 2; }
AG_API void ag__rng_keep(uint64_t seed, uint64_t counter, int64_t first, int64_t n, uint64_t t, bool at_least,
                         uint8_t *keep, uint8_t *bits);
/* Nonzero packing (tensor/nzpack.c): elements e0 .. e0+n-1 of a float array (x is element e0)
 * into bit e of bits (1: its bits are not all zero; the bytes past the range keep their other
 * bits) and the nonzero elements, bit for bit and in order, into vals (room for n); returns how
 * many. Unpacking writes them back into x, zeros elsewhere, and returns how many it read. */
AG_API int64_t ag__nz_pack(ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits, void *vals);
AG_API int64_t ag__nz_unpack(ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n, const void *vals, void *x);

#ifdef __cplusplus
}
#endif
#endif
