/* attograd tensor core: N-d strided tensors, views, broadcasting ops, reductions, BLAS matmul.
 *
 * Memory: every tensor (header and data) comes from the *current arena*, a bump allocator that
 * is reset as a whole (normally after the optimizer step). Nothing is freed one by one.
 * Ops are differentiable: when grad mode is on and an input requires grad, an op records a node
 * (see tensor/node.h); autograd/ walks those nodes backward. The tensor core itself never
 * includes anything above it.
 *
 * Misuse (shape mismatch, bad dim, wrong dtype) is reported through the error handler with a
 * message that names the op and the shapes; the default handler prints and aborts. When a
 * handler returns, the failing op returns NULL. */
#ifndef AG_TENSOR_H
#define AG_TENSOR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "export.h" /* AG_API */

#ifdef __cplusplus
extern "C" {
#endif

#define AG_MAX_DIMS 8

typedef enum { AG_F32, AG_F64, AG_I32, AG_I64, AG_BOOL } ag_dtype;

typedef struct ag_node ag_node;
typedef struct ag_arena ag_arena;

typedef struct ag_tensor {
    char *data;                    /* storage base; element i.. at data + elsize*(offset + Σ i_k*stride_k) */
    int64_t offset;                /* in elements */
    int64_t shape[AG_MAX_DIMS];
    int64_t stride[AG_MAX_DIMS];   /* in elements; 0 for expanded dims */
    int ndim;
    ag_dtype dtype;
    bool requires_grad;
    bool retains_grad;             /* a non-leaf keeps its grad after backward (ag_retain_grad) */
    struct ag_tensor *grad;        /* same shape and dtype, contiguous; NULL until needed */
    ag_node *node;                 /* op that produced this tensor; NULL for leaves */
    const char *name;              /* optional (parameters carry their state_dict name) */
    /* The library's bookkeeping of this header (its storage's version counter, the arena
     * generation it was made in, the backward pass of its gradient): not API. Read it through
     * ag_version; op authors reach the rest through tensor/op.h. A header copy copies it. */
    uint64_t internal[4];
} ag_tensor;

/* Build a shape argument pair: ag_zeros(AG_F32, AG_SHAPE(2, 3)). */
#define AG_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* ---- errors --------------------------------------------------------------------------- */
/* message starts with the op name, e.g. "ag_matmul: (2,3) @ (4,5): inner dims 3 and 4 differ" */
typedef void (*ag_error_fn)(const char *message, void *user);
/* Install a handler (NULL restores the default print-and-abort); returns the previous one. */
AG_API ag_error_fn ag_set_error_handler(ag_error_fn fn, void *user);
/* Report misuse: formats "<op>: <fmt...>" and calls the handler. */
AG_API void ag_error(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message reported (empty string if none), and clearing it. */
AG_API const char *ag_last_error(void);
AG_API void ag_clear_error(void);
/* "(2,3)" into buf (at least 128 bytes); returns buf. */
AG_API char *ag_shape_str(const ag_tensor *t, char *buf);
AG_API const char *ag_dtype_name(ag_dtype dt);
AG_API size_t ag_dtype_size(ag_dtype dt);

/* ---- arenas ---------------------------------------------------------------------------
 * Use after reset: a tensor notes its arena's generation when it is made. ag_arena_reset
 * starts a new generation (everything before is forgotten), and so does a mark: rewinding to
 * it forgets what was made after it. An op given a forgotten tensor reports it through the
 * error handler ("ag_add: (2,3) f32 tensor made in arena generation 4, which ag_arena_reset
 * ... has forgotten (the arena is at generation 9)") and returns NULL; an op whose only check
 * is the one every op ends with (ag_finish) reports it there and records nothing. The check is
 * a compare or two per input. Parameters (their arena is never reset) and headers made outside
 * any arena are never stale. The check reads the tensor's header, which an arena keeps intact
 * for one generation after forgetting it: a tensor from the step (or decoding iteration) just
 * before is always reported, an older one only while no newer header has taken its place.
 * Header memory is never given back to the system (ag_arena_free keeps it for the next
 * ag_arena_new), so the check never reads freed memory, and a tensor of a freed arena is
 * reported as one its reset forgot. Reading values directly (ag_get, ag_set, ag_item,
 * ag_to_buffer, ag_fprint, the fills) makes the same check.
 * Growth: an arena holding more than a threshold (1 GiB unless set with
 * ag_arena_set_growth_warning) since its last reset warns once on stderr, naming
 * ag_arena_reset, when it grows further. */
AG_API ag_arena *ag_arena_new(size_t initial_bytes);
/* Gives the arena's memory back, except its tensor headers (above); a's tensors are stale. */
AG_API void ag_arena_free(ag_arena *a);
/* Forget everything allocated; keeps the memory (coalesced into one block) for the next step. */
AG_API void ag_arena_reset(ag_arena *a);
/* 64-byte aligned, uninitialised; NULL when the system cannot provide the memory (a tensor
 * whose data cannot be had reports that through ag_error, naming the size and shape). */
AG_API void *ag_arena_alloc(ag_arena *a, size_t bytes);
AG_API size_t ag_arena_used(const ag_arena *a);
/* Give the pages of the arena's free space back to the system: they leave the resident set
 * until used again, and the blocks stay (no heap allocation when they are). For a pause
 * between steps that needs memory of its own (a checkpoint save), not for every step: the
 * next step faults the pages in again (zero-filled; arena memory is uninitialised anyway). */
AG_API void ag_arena_trim(ag_arena *a);
/* The growth warning's threshold for a (bytes allocated since the last reset; 0: never warn);
 * also re-arms the warning. */
AG_API void ag_arena_set_growth_warning(ag_arena *a, size_t bytes);
/* A position in an arena, and going back to it: everything allocated after the mark is
 * forgotten (for loops inside a step, e.g. decoding one token at a time), and tensors made
 * after the mark are stale. */
typedef struct { uint64_t internal[10]; } ag_arena_mark; /* the arena's position: not API */
AG_API ag_arena_mark ag_arena_get_mark(const ag_arena *a);
AG_API void ag_arena_rewind(ag_arena *a, ag_arena_mark m);
/* Rewind to m but keep one result: t's values move (contiguous, with t's shape) to the mark's
 * position and the returned tensor holds them. For no-grad computations (inference): a layer
 * forgets its intermediates as soon as its output exists. t must not require grad (a recorded
 * graph may need what is forgotten); everything else allocated after m is gone. */
AG_API ag_tensor *ag_arena_rewind_keep(ag_arena *a, ag_arena_mark m, ag_tensor *t);
/* Make a the current arena for all tensor allocation; returns the previous one. */
AG_API ag_arena *ag_arena_use(ag_arena *a);
/* The current arena (a process-wide default one is created on first use). */
AG_API ag_arena *ag_arena_current(void);
/* Heap allocations made by the library so far (arena blocks, slabs). Constant in steady state. */
AG_API uint64_t ag_alloc_count(void);
/* Floating-point operations of the library's matrix products so far: 2·m·n·k summed over every
 * GEMM (ag_matmul, the linear and recurrent layers, attention's GEMM path), f32 and f64.
 * The fused attention kernels' products (tensor/simd/) are not GEMM calls and count nothing. A
 * step's figure, divided by an sgemm rate, is the least time its products can take. */
AG_API uint64_t ag_gemm_flops(void);
/* malloc that counts itself in ag_alloc_count; aborts on out-of-memory. */
AG_API void *ag_xmalloc(size_t bytes);
AG_API void ag_xfree(void *p);

/* ---- threads ------------------------------------------------------------------------- */
/* Threads for attograd's parallel work, as torch.set_num_threads: its OpenMP loops, its GEMM's
 * blocks and the products it hands to OpenBLAS, which it splits into blocks by shape over the
 * same threads (OpenBLAS itself runs single-threaded inside them, so OPENBLAS_NUM_THREADS does
 * not apply; attograd sets OpenBLAS back to 1 thread if the program raised it). Process-wide:
 * the calling thread uses it at once, other threads from their next ag_arena_reset. Results are the same bits at every count.
 * The default is OMP_NUM_THREADS when set; else the CPUs of the process's affinity mask, and
 * under mpirun no more than the CPUs / the ranks on this machine (OMPI_COMM_WORLD_LOCAL_SIZE,
 * or MPI_LOCALNRANKS). A thread whose OpenMP count the program sets itself
 * (omp_set_num_threads) keeps that count until ag_set_num_threads. */
/* n from 1 to 4 per online CPU and no more than OpenMP's thread limit (OMP_THREAD_LIMIT): more
 * threads than that only wait for CPUs (a region waits for its slowest thread), and a count in
 * the tens of thousands overflows the stack of the thread that starts them (libgomp lays out
 * its team on that stack). Returns true when set; else the error handler, naming the limit,
 * and false (the count stays as it was). OMP_NUM_THREADS above the limit gives the limit. */
AG_API bool ag_set_num_threads(int n);
/* the count set by ag_set_num_threads, or the default */
AG_API int ag_get_num_threads(void);
/* Following the load (on by default; AG_FOLLOW_LOAD=0 in the environment starts it off):
 * between steps (ag_arena_reset, at most every 200 ms) attograd measures the CPU time other
 * processes take on its CPUs, and its parallel work uses no more threads than the CPUs left
 * free, at least 1 and at most ag_get_num_threads(): a region waits for its slowest thread,
 * so a thread sharing a core with a busy process slows every region. Returns the previous
 * setting. */
AG_API bool ag_set_follow_load(bool on);

/* ---- random numbers (Philox4x32-10, counter based: value i depends only on seed and i) ---- */
/* counter counts draws (53-bit uniforms); two draws share one Philox block, and a dropout mask
 * of n elements takes (n + 1) / 2 draws, a 32-bit word each (tensor/rng.c); n counts the whole
 * batch's elements when the generator is shared (ag_rng_share_batch) */
typedef struct {
    uint64_t seed, counter;
    int64_t share_first, share_count, share_total; /* ag_rng_share_batch; all 0 when not shared */
} ag_rng;
AG_API ag_rng ag_rng_new(uint64_t seed);
/* Data-parallel training: this process's batch is samples first .. first+count-1 of a global
 * batch of total samples, and the dropout masks drawn from rng are the global batch's. Sample b
 * here gets the mask sample first+b gets in one process running the whole batch, and each draw
 * moves the counter past the whole batch's mask, so N processes with the same seed draw what one
 * process draws. The ops see the batch along dim 0 (ag_dropout, ag_feed_forward, ag_attention),
 * the layers along their own batch dim (batch_first); a dropout over a batch of another size
 * than count is reported (a tensor with its batch along dim d: drop out the view
 * ag_transpose(x, 0, d)). Masks are drawn sample by sample whether shared or not: a batch of n
 * samples draws as samples 0 .. n-1 of a batch of n. count 0 (first and total 0) ends the
 * sharing. */
AG_API void ag_rng_share_batch(ag_rng *rng, int64_t first, int64_t count, int64_t total);
/* the global generator used when an ag_rng* argument is NULL */
AG_API ag_rng *ag_rng_global(void);
AG_API void ag_manual_seed(uint64_t seed);
/* n uniforms in [0,1), advancing rng->counter by n; n standard normals (Box-Muller, two draws
 * each), advancing it by 2n. */
AG_API void ag_rng_uniform_f64(ag_rng *rng, int64_t n, double *out);
AG_API void ag_rng_normal_f64(ag_rng *rng, int64_t n, double *out);

/* ---- creation (all from the current arena) -------------------------------------------- */
AG_API ag_tensor *ag_empty(ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_zeros(ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_ones(ag_dtype dt, int ndim, const int64_t *shape);
AG_API ag_tensor *ag_full(ag_dtype dt, int ndim, const int64_t *shape, double value);
AG_API ag_tensor *ag_empty_like(const ag_tensor *t);
AG_API ag_tensor *ag_zeros_like(const ag_tensor *t);
/* torch.full_like / torch.ones_like: t's shape and dtype, not t's strides, no grad */
AG_API ag_tensor *ag_full_like(const ag_tensor *t, double value);
AG_API ag_tensor *ag_ones_like(const ag_tensor *t);
AG_API ag_tensor *ag_scalar(ag_dtype dt, double value);                   /* 0-d tensor */
AG_API ag_tensor *ag_arange(ag_dtype dt, double start, double end, double step);
/* copy a row-major buffer of dtype dt */
AG_API ag_tensor *ag_from_buffer(ag_dtype dt, int ndim, const int64_t *shape, const void *data);
/* wrap caller memory (row-major, not copied, not owned); a new storage for ag_version, whose
 * counter lives in the returned header: its views must not outlive the arena it came from */
AG_API ag_tensor *ag_wrap(ag_dtype dt, int ndim, const int64_t *shape, void *data);
AG_API ag_tensor *ag_rand(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape);   /* U[0,1) */
AG_API ag_tensor *ag_randn(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape);  /* N(0,1) */
AG_API ag_tensor *ag_uniform(ag_rng *rng, ag_dtype dt, int ndim, const int64_t *shape, double lo, double hi);
/* Everything that writes into an existing tensor (these, ag_add_, ag_mul_scalar_) follows
 * torch's memory-overlap rules: the destination may not be an expanded view (several elements
 * at one address), and a source sharing some of its elements in another dense layout (x[1:]
 * into x[:-1], x into x^T) is an error: clone the source first. The same view, and strided
 * views whose ranges meet, are fine: the source's old values are read. */
/* Fill in place. No grad is recorded, so these may initialise leaves that require grad (as
 * torch.nn.init does under no_grad); each write moves t's version on (ag_version). */
AG_API void ag_fill_(ag_tensor *t, double value);
AG_API void ag_uniform_(ag_rng *rng, ag_tensor *t, double lo, double hi);
AG_API void ag_normal_(ag_rng *rng, ag_tensor *t, double mean, double std);
/* dst[...] = src broadcast to dst's shape, converting dtype; no grad recorded; moves dst's
 * version on, as the fills do */
AG_API void ag_copy_(ag_tensor *dst, const ag_tensor *src);

/* ---- inspection ------------------------------------------------------------------------ */
AG_API int64_t ag_numel(const ag_tensor *t);
AG_API bool ag_is_contiguous(const ag_tensor *t);
/* The version of t's storage (torch's t._version): 0 when made, +1 for every write into existing
 * data through the API (ag_add_, ag_mul_scalar_, the in-place dropouts, ag_copy_, ag_fill_,
 * ag_uniform_, ag_normal_, ag_set, optimizer steps, checkpoint loads), shared by every view of
 * the storage. A recorded op notes the versions of the tensors its backward reads, and
 * ag_backward reports one that has moved on since (tensor/node.h). The parameters of one
 * ag_params share one counter. */
AG_API uint32_t ag_version(const ag_tensor *t);
/* dim < 0 counts from the end; returns -1 (after reporting through op) when out of range */
AG_API int ag_wrap_dim(const char *op, const ag_tensor *t, int dim);
AG_API double ag_get(const ag_tensor *t, const int64_t *index);           /* any dtype, as double */
AG_API void ag_set(ag_tensor *t, const int64_t *index, double value);     /* moves t's version on */
AG_API double ag_item(const ag_tensor *t);                                 /* one-element tensor */
/* copy out as row-major dtype dt (converting) */
AG_API void ag_to_buffer(const ag_tensor *t, ag_dtype dt, void *out);
AG_API void ag_fprint(FILE *f, const ag_tensor *t, const char *name);
AG_API void ag_print(const ag_tensor *t, const char *name);

/* ---- views (share storage; differentiable) --------------------------------------------- */
AG_API ag_tensor *ag_view(ag_tensor *t, int ndim, const int64_t *shape);    /* one -1 allowed */
AG_API ag_tensor *ag_reshape(ag_tensor *t, int ndim, const int64_t *shape); /* view if possible, else copy */
AG_API ag_tensor *ag_transpose(ag_tensor *t, int d0, int d1);
AG_API ag_tensor *ag_permute(ag_tensor *t, const int *dims);
AG_API ag_tensor *ag_narrow(ag_tensor *t, int dim, int64_t start, int64_t length);
AG_API ag_tensor *ag_slice(ag_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
AG_API ag_tensor *ag_select(ag_tensor *t, int dim, int64_t index);
AG_API ag_tensor *ag_squeeze(ag_tensor *t, int dim);
AG_API ag_tensor *ag_unsqueeze(ag_tensor *t, int dim);
AG_API ag_tensor *ag_expand(ag_tensor *t, int ndim, const int64_t *shape);  /* -1 keeps a dim */
AG_API ag_tensor *ag_contiguous(ag_tensor *t);                              /* t itself if contiguous */
AG_API ag_tensor *ag_clone(ag_tensor *t);
AG_API ag_tensor *ag_to(ag_tensor *t, ag_dtype dt);                         /* differentiable f32<->f64 */
/* a leaf sharing t's data (and its version), cut from the graph */
AG_API ag_tensor *ag_detach(ag_tensor *t);

/* ---- elementwise, with NumPy/PyTorch broadcasting; both operands must share a dtype ------ */
AG_API ag_tensor *ag_add(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_sub(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_mul(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_div(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_pow(ag_tensor *a, ag_tensor *b);
/* a += b in place, b broadcast to a's shape (Tensor.add_); returns a header on a's storage that
 * records the addition, and a's version moves on (ag_version). For memory: a's old values are
 * gone, so a must not be a leaf that requires grad while grad mode is on (reported), and no
 * recorded backward may read them (the outputs of linear, dropout and attention qualify: their
 * backward reads inputs and masks only). If one does (exp's, whose backward reads its output),
 * ag_backward reports it, naming that op, instead of computing a wrong gradient. */
AG_API ag_tensor *ag_add_(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_add_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_sub_scalar(ag_tensor *a, double s);   /* a - s */
AG_API ag_tensor *ag_rsub_scalar(ag_tensor *a, double s);  /* s - a */
AG_API ag_tensor *ag_mul_scalar(ag_tensor *a, double s);
/* a *= s in place (Tensor.mul_), on the terms of ag_add_ (above) */
AG_API ag_tensor *ag_mul_scalar_(ag_tensor *a, double s);
AG_API ag_tensor *ag_div_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_pow_scalar(ag_tensor *a, double p);   /* a ** p */
AG_API ag_tensor *ag_neg(ag_tensor *a);
AG_API ag_tensor *ag_exp(ag_tensor *a);
AG_API ag_tensor *ag_log(ag_tensor *a);
AG_API ag_tensor *ag_sqrt(ag_tensor *a);
AG_API ag_tensor *ag_abs(ag_tensor *a);
AG_API ag_tensor *ag_tanh(ag_tensor *a);
AG_API ag_tensor *ag_sigmoid(ag_tensor *a);
AG_API ag_tensor *ag_relu(ag_tensor *a);
AG_API ag_tensor *ag_gelu(ag_tensor *a);        /* exact: x/2 (1 + erf(x/√2)) */
AG_API ag_tensor *ag_gelu_tanh(ag_tensor *a);   /* tanh approximation, torch's approximate='tanh' */
/* More math (tensor/pointwise.c), f32/f64, each named by its PyTorch counterpart. */
AG_API ag_tensor *ag_sin(ag_tensor *a);         /* torch.sin */
AG_API ag_tensor *ag_cos(ag_tensor *a);         /* torch.cos */
/* torch.clamp(a, min, max): -INFINITY / INFINITY for an absent bound; min > max gives max
 * everywhere; NaN stays NaN; the gradient passes where min <= a <= max (bounds included) */
AG_API ag_tensor *ag_clamp(ag_tensor *a, double min, double max);
/* torch.nn.functional.leaky_relu(a, negative_slope) (torch's default slope: 0.01) */
AG_API ag_tensor *ag_leaky_relu(ag_tensor *a, double negative_slope);
AG_API ag_tensor *ag_silu(ag_tensor *a);        /* torch.nn.functional.silu: a * sigmoid(a) */
/* torch.nn.functional.softplus(a, beta, threshold): log(1 + exp(beta a)) / beta, and a itself
 * where beta a > threshold (torch's defaults: 1, 20) */
AG_API ag_tensor *ag_softplus(ag_tensor *a, double beta, double threshold);
/* torch.nn.functional.elu(a, alpha): a > 0 ? a : alpha (exp(a) - 1) (torch's default alpha: 1) */
AG_API ag_tensor *ag_elu(ag_tensor *a, double alpha);
/* torch.maximum / torch.minimum: elementwise, broadcast, any dtype (both one); NaN wins; on a
 * tie each operand gets half the gradient (torch) */
AG_API ag_tensor *ag_maximum(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_minimum(ag_tensor *a, ag_tensor *b);
/* cond ? a : b, all three broadcast together; cond is AG_BOOL */
AG_API ag_tensor *ag_where(ag_tensor *cond, ag_tensor *a, ag_tensor *b);
/* a with value wherever mask (AG_BOOL, broadcastable to a) is true */
AG_API ag_tensor *ag_masked_fill(ag_tensor *a, ag_tensor *mask, double value);
/* comparisons give AG_BOOL; not differentiable */
AG_API ag_tensor *ag_eq(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_ne(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_lt(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_le(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_gt(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_ge(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_eq_scalar(ag_tensor *a, double s);
/* a != s, a < s, a <= s, a > s, a >= s (torch.ne, lt, le, gt, ge with a number): as torch,
 * floats compare in their dtype, integers and bool exactly (2 < 2.5 is true) */
AG_API ag_tensor *ag_ne_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_lt_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_le_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_gt_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_ge_scalar(ag_tensor *a, double s);
AG_API ag_tensor *ag_logical_not(ag_tensor *a);
AG_API ag_tensor *ag_logical_and(ag_tensor *a, ag_tensor *b);
AG_API ag_tensor *ag_logical_or(ag_tensor *a, ag_tensor *b);
/* broadcast shape of a and b into out (returns ndim, or -1 and reports through op) */
AG_API int ag_broadcast_shape(const char *op, const ag_tensor *a, const ag_tensor *b, int64_t *out);

/* ---- reductions (dims == NULL / ndims == 0: all dims) ------------------------------------ */
AG_API ag_tensor *ag_sum(ag_tensor *t, int ndims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_mean(ag_tensor *t, int ndims, const int *dims, bool keepdim);
/* population (correction 0) or sample (correction 1) variance */
AG_API ag_tensor *ag_var(ag_tensor *t, int ndims, const int *dims, int correction, bool keepdim);
AG_API ag_tensor *ag_max(ag_tensor *t, int dim, bool keepdim);      /* values; grad to the first argmax */
AG_API ag_tensor *ag_argmax(ag_tensor *t, int dim, bool keepdim);   /* AG_I64, first maximum */
/* torch.max(t, dim, keepdim) / torch.min(t, dim, keepdim): the values as ag_max (the first
 * maximum or minimum, a NaN before anything; grad to that element) and, when indices is not
 * NULL, their positions into *indices (AG_I64, the values' shape) */
AG_API ag_tensor *ag_max_dim(ag_tensor *t, int dim, bool keepdim, ag_tensor **indices);
AG_API ag_tensor *ag_min_dim(ag_tensor *t, int dim, bool keepdim, ag_tensor **indices);
/* torch.sort(t, dim, descending, stable=True): any dtype; t's shape, sorted along dim, NaN
 * greatest; equal elements keep their order. Positions into *indices (AG_I64) when not NULL. */
AG_API ag_tensor *ag_sort(ag_tensor *t, int dim, bool descending, ag_tensor **indices);
/* torch.topk(t, k, dim, largest, sorted): the k largest (or smallest) along dim, always in
 * sorted order (torch leaves the order to the implementation when sorted is false), ties in
 * index order; positions into *indices (AG_I64) when not NULL */
AG_API ag_tensor *ag_topk(ag_tensor *t, int64_t k, int dim, bool largest, bool sorted, ag_tensor **indices);
/* torch.cumsum(t, dim): running sums along dim; f32/f64 keep their dtype (f32 summed in
 * double, as torch), integers and bool give AG_I64 */
AG_API ag_tensor *ag_cumsum(ag_tensor *t, int dim);
/* torch.linalg.vector_norm(t, ord=p, dim=dims, keepdim), f32/f64: (Σ|t|^p)^(1/p) over dims, p = 0
 * the count of non-zeros, p = ±INFINITY the largest / smallest |t|. torch's gradient: zero
 * where the norm is 0, and for ±inf split evenly among the elements that give the norm. */
AG_API ag_tensor *ag_norm(ag_tensor *t, double p, int ndims, const int *dims, bool keepdim);
/* torch.any / torch.all over dims: AG_BOOL, any dtype (NaN counts as true); over nothing
 * any is false and all true */
AG_API ag_tensor *ag_any(ag_tensor *t, int ndims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_all(ag_tensor *t, int ndims, const int *dims, bool keepdim);
AG_API ag_tensor *ag_softmax(ag_tensor *t, int dim);
AG_API ag_tensor *ag_log_softmax(ag_tensor *t, int dim);
/* sum g (broadcast shape) down to shape ndim/shape (the reverse of broadcasting) */
AG_API ag_tensor *ag_sum_to_shape(ag_tensor *g, int ndim, const int64_t *shape);

/* ---- linear algebra ---------------------------------------------------------------------- */
/* torch.matmul: 1-d·1-d, 2-d, batched with broadcast batch dims; f32/f64 through cblas */
AG_API ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b);

/* ---- joining, splitting, indexing ------------------------------------------------------- */
AG_API ag_tensor *ag_cat(int n, ag_tensor *const *ts, int dim);
AG_API ag_tensor *ag_stack(int n, ag_tensor *const *ts, int dim);
/* Views of split_size along dim (the last may be smaller). Returns the total number of pieces
 * and writes the first min(total, max) to out (like snprintf: call with max 0 to size out);
 * -1 on misuse. */
AG_API int ag_split(ag_tensor *t, int64_t split_size, int dim, ag_tensor **out, int max);
/* torch.chunk: pieces of ceil(size/chunks) (may be fewer than chunks); returns as ag_split */
AG_API int ag_chunk(ag_tensor *t, int chunks, int dim, ag_tensor **out, int max);
/* index: 1-d AG_I32/AG_I64 */
AG_API ag_tensor *ag_index_select(ag_tensor *t, int dim, ag_tensor *index);
/* out[i][j] = t[index[i][j]][j] for dim 0, etc. (torch.gather) */
AG_API ag_tensor *ag_gather(ag_tensor *t, int dim, ag_tensor *index);
AG_API ag_tensor *ag_one_hot(ag_tensor *index, int64_t num_classes);       /* AG_I64 */

#ifdef __cplusplus
}
#endif
#endif
