/* Every GEMM of the library (tensor/gemm.h): attograd's own f32 GEMM, the driver of the
 * register tiles of the kernel table (tensor/simd/kernels.h), and OpenBLAS for f64 and for the
 * f32 products the own GEMM does not take.
 * OpenBLAS's own threading changes results with the thread count (its kernel choice depends on
 * it: the single-threaded sgemm "direct" path, for one), so OpenBLAS stays single-threaded and
 * large products are parallelised here: the output is cut into blocks whose size depends only
 * on the shape, every block is one single-threaded GEMM, and OpenMP deals the blocks out. 1
 * thread or 8, the same calls compute the same numbers. */
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>

#include "internal.h"

/* 2·m·n·k of every product through ag__sgemm, ag__sgemm_bias and ag__dgemm (ag_gemm_flops);
 * relaxed: a count, read between steps, ordering nothing */
static _Atomic uint64_t gemm_flops;

static void count_flops(int64_t m, int64_t n, int64_t k) {
    if (m > 0 && n > 0 && k > 0)
        atomic_fetch_add_explicit(&gemm_flops, (uint64_t)(2 * m * n * k), memory_order_relaxed);
}

uint64_t ag_gemm_flops(void) { return atomic_load_explicit(&gemm_flops, memory_order_relaxed); }

/* ---- OpenBLAS ---- */

/* A product of at least GEMM_SPLIT_WORK multiply-adds with more than GEMM_BLOCK rows (or
 * columns) is cut into at most GEMM_MAX_BLOCKS blocks of at least GEMM_BLOCK: every block is a
 * whole OpenBLAS call that packs op(B) (op(A)) again, so few large blocks cost least, and four
 * keep 2 or 4 threads evenly busy. */
#define GEMM_BLOCK 128
#define GEMM_MAX_BLOCKS 4
#define GEMM_SPLIT_WORK (1 << 21)

/* OpenBLAS single-threaded: once when the library is loaded, and again whenever a GEMM finds
 * that the program has raised its thread count since (openblas_set_num_threads or a library
 * that calls it): a threaded OpenBLAS inside attograd's blocks would oversubscribe the cores
 * and, worse, make results depend on the thread count. Checked outside parallel regions only,
 * so the setting never changes under a running GEMM. */
__attribute__((constructor)) static void blas_single_threaded(void) { openblas_set_num_threads(1); }

void ag__blas_single_threaded(void) {
    if (!omp_in_parallel() && openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

static inline blasint ld(int64_t v) { return (blasint)(v > 1 ? v : 1); } /* BLAS wants >= 1 */

static void gemm1(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const char *a,
                  int64_t lda, const char *b, int64_t ldb, double beta, char *c, int64_t ldc) {
    enum CBLAS_TRANSPOSE A = ta ? CblasTrans : CblasNoTrans, B = tb ? CblasTrans : CblasNoTrans;
    if (dt == AG_F32)
        cblas_sgemm(CblasRowMajor, A, B, (blasint)m, (blasint)n, (blasint)k, (float)alpha, (const float *)a, ld(lda),
                    (const float *)b, ld(ldb), (float)beta, (float *)c, ld(ldc));
    else
        cblas_dgemm(CblasRowMajor, A, B, (blasint)m, (blasint)n, (blasint)k, alpha, (const double *)a, ld(lda),
                    (const double *)b, ld(ldb), beta, (double *)c, ld(ldc));
}

void ag__blas_gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    ag__blas_single_threaded();
    const char *A = a, *B = b;
    char *C = c;
    int64_t es = (int64_t)ag_dtype_size(dt);
    if (k == 0) { /* an empty sum: C = beta C, without trusting BLAS to treat k = 0 so */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                char *e = C + (i * ldc + j) * es;
                if (dt == AG_F32) *(float *)e = beta == 0 ? 0.0f : (float)beta * *(float *)e;
                else *(double *)e = beta == 0 ? 0.0 : beta * *(double *)e;
            }
        return;
    }
    bool split = (double)m * (double)n * (double)k >= GEMM_SPLIT_WORK && (m > GEMM_BLOCK || n > GEMM_BLOCK);
    if (!split) {
        gemm1(dt, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    bool rows = m >= n;
    int64_t total = rows ? m : n, size = (total + GEMM_MAX_BLOCKS - 1) / GEMM_MAX_BLOCKS;
    size = size < GEMM_BLOCK ? GEMM_BLOCK : (size + 15) / 16 * 16;
    int64_t blocks = (total + size - 1) / size;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int64_t i = 0; i < blocks; i++) {
        int64_t s = i * size, len = total - s < size ? total - s : size;
        if (rows) /* rows s.. of C from rows s.. of op(A) */
            gemm1(dt, ta, tb, len, n, k, alpha, A + (ta ? s : s * lda) * es, lda, B, ldb, beta, C + s * ldc * es, ldc);
        else      /* columns s.. of C from columns s.. of op(B) */
            gemm1(dt, ta, tb, m, len, k, alpha, A, lda, B + (tb ? s * ldb : s) * es, ldb, beta, C + s * es, ldc);
    }
}

/* ---- attograd's own f32 GEMM ----
 * BLIS's loop structure: C is cut into blocks of MC rows × NCH columns (one task each, spread
 * over the OpenMP team), K into slices of KC. Per slice, B's columns are packed into NR-wide
 * panels and each task packs its MC×KC block of A into MR-high panels (k-major, zero-padded),
 * then an MR×NR register-tile kernel runs over every (A panel, B panel) pair. Packing absorbs
 * every transpose and stride. The K slices are added into C in order and each element of C
 * belongs to one task, so the sums never depend on the thread count.
 * One driver for every ISA, in portable C: the tile (MR, NR), the blocking (KC, MC, NCH, the
 * small-path bound) and the kernels come from the kernel table's set (ag__kernels->sgemm,
 * tensor/simd/kernels.h): AVX-512F (8×32) or AVX2+FMA (6×16); with none (AG_ISA=generic, a
 * build without vector kernels, another CPU) every f32 product goes to OpenBLAS. */

/* op(B) transposed into a buffer of at most this many floats on the small path */
#define SMALL_TB (64 * 1024)

/* Per-thread packing buffers, grown when needed (counted by ag_alloc_count) and kept; a
 * thread's are freed when it exits (OpenMP may retire pool threads when the team size changes). */
static _Thread_local float *abuf, *bbuf;
static _Thread_local size_t acap, bcap;
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static char buf_key_mark[1];

static void free_bufs(void *unused) {
    ag_xfree(abuf);
    ag_xfree(bbuf);
    abuf = bbuf = NULL;
    acap = bcap = 0;
}
static void make_key(void) { pthread_key_create(&buf_key, free_bufs); }

static float *grow(float **buf, size_t *cap, size_t n) {
    if (n > *cap) {
        pthread_once(&buf_once, make_key);
        pthread_setspecific(buf_key, buf_key_mark); /* non-NULL, so the destructor runs */
        ag_xfree(*buf);
        *buf = ag_xmalloc(n * sizeof(float));
        *cap = n;
    }
    return *buf;
}

/* op(A)(i, k) with A row-major: a[i·lda + k], or transposed: a[k·lda + i]; panels MR high */
AG_AVX2_CLONES static void pack_a(const float *a, int64_t lda, bool ta, int64_t i0, int64_t mc, int64_t k0,
                                  int64_t kc, float *ap, int64_t MR) {
    for (int64_t ir = 0; ir < mc; ir += MR) {
        int64_t mr = mc - ir < MR ? mc - ir : MR;
        float *dst = ap + ir * kc;
        if (ta) {
            for (int64_t k = 0; k < kc; k++) {
                const float *src = a + (k0 + k) * lda + i0 + ir;
                for (int64_t i = 0; i < mr; i++) dst[k * MR + i] = src[i];
                for (int64_t i = mr; i < MR; i++) dst[k * MR + i] = 0;
            }
        } else {
            for (int64_t i = 0; i < MR; i++) {
                if (i >= mr) {
                    for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = 0;
                    continue;
                }
                const float *src = a + (i0 + ir + i) * lda + k0;
                for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = src[k];
            }
        }
    }
}

/* op(B)'s panel when B is stored transposed: bp[k·NR + j] = b[j·ldb + k] for j < nr, zero for
 * nr <= j < NR. The set's 8×8 register transposes move the whole blocks (8 rows of B in, 8 rows
 * of the panel out), and the edges go element by element. */
static void pack_bt(const ag__sgemm_kernels *K, const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR,
                    float *bp) {
    int64_t j8 = nr / 8 * 8, k8 = kc / 8 * 8;
    if (K->pack_bt_blocks) K->pack_bt_blocks(b, ldb, kc, nr, NR, bp);
    else j8 = k8 = 0;
    for (int64_t k = 0; k < kc; k++) {
        for (int64_t j = k < k8 ? j8 : 0; j < nr; j++) bp[k * NR + j] = b[j * ldb + k];
        for (int64_t j = nr; j < NR; j++) bp[k * NR + j] = 0;
    }
}

/* op(B)(k, j) with B row-major: b[k·ldb + j], or transposed: b[j·ldb + k]; the NR-wide panel
 * of columns j0.. (nc of them left) */
AG_AVX2_CLONES static void pack_b_panel(const ag__sgemm_kernels *K, const float *b, int64_t ldb, bool tb, int64_t k0,
                                        int64_t kc, int64_t j0, int64_t nc, float *bp, int64_t NR) {
    int64_t nr = nc < NR ? nc : NR;
    if (!tb) {
        for (int64_t k = 0; k < kc; k++) {
            const float *src = b + (k0 + k) * ldb + j0;
            float *dst = bp + k * NR;
            for (int64_t j = 0; j < nr; j++) dst[j] = src[j];
            for (int64_t j = nr; j < NR; j++) dst[j] = 0;
        }
    } else {
        pack_bt(K, b + j0 * ldb + k0, ldb, kc, nr, NR, bp);
    }
}

/* Small products (attention heads: 16×16×16 up to 64×64×64) skip packing: the small kernel
 * reads A in place, B too when its rows are unit-stride (else it is transposed once into a
 * small buffer), and masks the row and column tails instead of padding them. Same register
 * tile. C = alpha op(A) op(B) + bias row (NULL: none) (+ C when add) */
static void sgemm_small(const ag__sgemm_kernels *K, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc, bool add,
                        const float *bias) {
    if (tb) { /* op(B) row-major into a buffer: one pass over B, 8 of its rows at a time so that
               * each step writes 8 neighbouring floats instead of 8 lines n apart */
        float *t = grow(&bbuf, &bcap, (size_t)(k * n));
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            const float *r = b + j * ldb;
            for (int64_t p = 0; p < k; p++)
                for (int64_t q = 0; q < 8; q++) t[p * n + j + q] = r[q * ldb + p];
        }
        for (; j < n; j++)
            for (int64_t p = 0; p < k; p++) t[p * n + j] = b[j * ldb + p];
        b = t;
        ldb = n;
    }
    int64_t ars = ta ? 1 : lda, aks = ta ? lda : 1, MR = K->mr, NR = K->nr;
    for (int64_t j = 0; j < n; j += NR)
        for (int64_t i = 0; i < m; i += MR)
            K->small_tile(k, a + i * ars, ars, aks, m - i < MR ? m - i : MR, b + j, ldb, n - j < NR ? n - j : NR,
                          c + i * ldc + j, ldc, alpha, add, bias ? bias + j : NULL);
}

typedef struct {
    const ag__sgemm_kernels *K;
    bool ta, tb;
    int64_t m, n, k;
    float alpha;
    const float *a, *b, *bias; /* bias: (n) added to every row, or NULL */
    int64_t lda, ldb, ldc;
    float *c;
} sgemm_args;

/* One task: rows i0.. (mc) × columns j0.. (nc) of C over all of K, slice by slice in order.
 * bp holds all of op(B) packed: slice k0 (kc deep) starts at k0·npan·NR, its panel p at
 * p·NR·kc from there. */
AG_AVX2_CLONES static void sgemm_task(const sgemm_args *g, int64_t i0, int64_t mc, int64_t j0, int64_t nc, const float *bp,
                       int64_t npan, bool beta_one) {
    const ag__sgemm_kernels *K = g->K;
    int64_t MR = K->mr, NR = K->nr, KC = K->kc;
    float *ap = grow(&abuf, &acap, (size_t)(K->mc * KC));
    float tile[AG_SGEMM_MAX_TILE] __attribute__((aligned(64)));
    /* The kernel only broadcasts A's elements, so A can be read where it lies: packing costs a
     * strided copy that only pays off when many B panels reuse it and A is transposed (rows of
     * op(A) a long stride apart, which alias in L1). Same sums either way. */
    int64_t ars = g->ta ? 1 : g->lda, aks = g->ta ? g->lda : 1;
    bool inplace = !g->ta || nc <= 4 * NR;
    for (int64_t k0 = 0; k0 < g->k; k0 += KC) {
        int64_t kc = g->k - k0 < KC ? g->k - k0 : KC;
        bool add = k0 > 0 || beta_one;
        if (!inplace) pack_a(g->a, g->lda, g->ta, i0, mc, k0, kc, ap, MR);
        for (int64_t jr = 0; jr < nc; jr += NR) {
            int64_t nr = nc - jr < NR ? nc - jr : NR;
            const float *b = bp + k0 * npan * NR + (j0 + jr) / NR * NR * kc;
            const float *bias = add || !g->bias ? NULL : g->bias + j0 + jr;
            for (int64_t ir = 0; ir < mc; ir += MR) {
                int64_t mr = mc - ir < MR ? mc - ir : MR;
                float *c = g->c + (i0 + ir) * g->ldc + j0 + jr;
                if (inplace) {
                    K->small_tile(kc, g->a + (i0 + ir) * ars + k0 * aks, ars, aks, mr, b, NR, nr, c, g->ldc,
                                  g->alpha, add, bias);
                    continue;
                }
                if (mr == MR && nr == NR) {
                    K->packed(kc, ap + ir * kc, b, c, g->ldc, g->alpha, add, bias);
                    continue;
                }
                K->packed(kc, ap + ir * kc, b, tile, NR, g->alpha, false, NULL);
                for (int64_t i = 0; i < mr; i++)
                    for (int64_t j = 0; j < nr; j++)
                        c[i * g->ldc + j] = add ? c[i * g->ldc + j] + tile[i * NR + j]
                                                : bias ? tile[i * NR + j] + bias[j] : tile[i * NR + j];
            }
        }
    }
}

/* B is packed whole first, then the tasks run without further synchronisation */
AG_AVX2_CLONES static void sgemm_blocked(const sgemm_args *g, float beta) {
    const ag__sgemm_kernels *K = g->K;
    int64_t m = g->m, n = g->n, k = g->k, NR = K->nr, KC = K->kc, MC = K->mc, NCH = K->nch;
    if (beta != 0 && beta != 1)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) g->c[i * g->ldc + j] *= beta;
    int64_t npan = (n + NR - 1) / NR, nks = (k + KC - 1) / KC, mt = (m + MC - 1) / MC, nt = (n + NCH - 1) / NCH;
    float *bp = grow(&bbuf, &bcap, (size_t)(npan * NR * k));
    bool par = !omp_in_parallel() && omp_get_max_threads() > 1 && m * n * k > (1 << 18);
#pragma omp parallel if (par)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < nks * npan; t++) {
            int64_t k0 = t / npan * KC, p = t % npan, kc = k - k0 < KC ? k - k0 : KC;
            pack_b_panel(K, g->b, g->ldb, g->tb, k0, kc, p * NR, n - p * NR, bp + k0 * npan * NR + p * NR * kc, NR);
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < mt * nt; t++) {
            int64_t i0 = t / nt * MC, j0 = t % nt * NCH;
            sgemm_task(g, i0, m - i0 < MC ? m - i0 : MC, j0, n - j0 < NCH ? n - j0 : NCH, bp, npan, beta != 0);
        }
    }
}

/* the blocked path or OpenBLAS past the small path (ag__sgemm_kernels.blocked_k) */
static bool blocked_fits(const ag__sgemm_kernels *K, bool ta, int64_t k) {
    return k <= K->blocked_k && (!ta || K->blocked_ta);
}

/* the small path's limits: work, and op(B)'s copy when B is transposed */
static bool small_fits(const ag__sgemm_kernels *K, bool tb, int64_t m, int64_t n, int64_t k) {
    return m * n * k <= K->small && (!tb || k * n <= SMALL_TB);
}

void ag__sgemm_path(const ag__sgemm_kernels *K, bool small, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc, const float *bias) {
    if (small) {
        sgemm_small(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc, beta == 1, bias);
    } else {
        sgemm_args g = {K, ta, tb, m, n, k, alpha, a, b, bias, lda, ldb, ldc, c};
        sgemm_blocked(&g, beta);
    }
}

void ag__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0) { /* C = beta C; BLAS never reads A, B then */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    count_flops(m, n, k);
    /* the own kernel does not call OpenBLAS, but a program that raised its threads gets it back
     * single-threaded from any GEMM, as with OpenBLAS (cheap: two calls) */
    ag__blas_single_threaded();
    const ag__sgemm_kernels *K = ag__kernels->sgemm;
    bool small = K && (beta == 0 || beta == 1) && small_fits(K, tb, m, n, k);
    if (!K || (!small && !blocked_fits(K, ta, k))) {
        ag__blas_gemm(AG_F32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    ag__sgemm_path(K, small, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

void ag__sgemm_small(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, bool add, float *c, int64_t ldc) {
    const ag__sgemm_kernels *K = ag__kernels->sgemm;
    if (K) sgemm_small(K, ta, false, m, n, k, alpha, a, lda, b, ldb, c, ldc, add, NULL);
    else ag__sgemm(ta, false, m, n, k, alpha, a, lda, b, ldb, add ? 1.0f : 0.0f, c, ldc);
}

void ag__sgemm_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, const float *bias, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    ag__blas_single_threaded();
    const ag__sgemm_kernels *K = ag__kernels->sgemm;
    bool small = K && small_fits(K, tb, m, n, k);
    if (k > 0 && K && (small || blocked_fits(K, ta, k))) {
        count_flops(m, n, k);
        ag__sgemm_path(K, small, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, bias);
        return;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = bias ? bias[j] : 0;
    ag__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}

void ag__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    count_flops(m, n, k);
    ag__blas_gemm(AG_F64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ag__gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
              int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    if (dt == AG_F32) ag__sgemm(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
    else ag__dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
