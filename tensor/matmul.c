/* torch.matmul through cblas ?gemm. Every operand, including the gradient buffers written in
 * backward, is described as a stack of strided matrices ("mat"); a matrix whose rows or
 * columns are unit-stride goes to BLAS as it lies (NoTrans or Trans with its leading
 * dimension), so transposed views cost nothing. Only a matrix with neither layout (expanded or
 * strided inner dims) is copied first. */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "gemm_kernels.h"
#include "internal.h"

/* ---- the GEMM (tensor/gemm.h) ----
 * BLIS's loop structure: C is cut into blocks of MC rows × NCH columns (one task each, spread
 * over the OpenMP team), K into slices of KC. Per slice, B's columns are packed into NR-wide
 * panels and each task packs its MC×KC block of A into MR-high panels (k-major, zero-padded),
 * then an MR×NR register-tile kernel runs over every (A panel, B panel) pair. Packing absorbs
 * every transpose and stride. The K slices are added into C in order and each element of C
 * belongs to one task, so the sums never depend on the thread count.
 * One driver for every ISA: the tile (MR, NR), the blocking (KC, MC, NCH, the small-path
 * bound) and the kernels come from the set chosen once at run time (tensor/gemm_kernels.c):
 * AVX-512F (8×32), else AVX2+FMA (6×16), else none, and every f32 product goes to OpenBLAS
 * (ag__blas_gemm, tensor/gemm.c). AG_GEMM=blas forces OpenBLAS; AG_GEMM=avx2 takes the AVX2
 * set on an AVX-512 CPU too, to test it there. */

/* op(B) transposed into a buffer of at most this many floats on the small path */
#define SMALL_TB (64 * 1024)

static const ag__sgemm_kernels *kernels; /* NULL: OpenBLAS */
static ag__isa isa = AG_ISA_NONE;
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void choose_isa(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    const char *e = getenv("AG_GEMM");
    if (e && !strcmp(e, "blas")) return;
    isa = ag__cpu_isa();
    if (isa == AG_ISA_AVX512 && e && !strcmp(e, "avx2")) isa = AG_ISA_AVX2;
    kernels = isa == AG_ISA_AVX512 ? &ag__sgemm_avx512 : isa == AG_ISA_AVX2 ? &ag__sgemm_avx2 : NULL;
#endif
}

ag__isa ag__sgemm_isa_in_use(void) {
    pthread_once(&isa_once, choose_isa);
    return isa;
}

ag__isa ag__vector_isa(void) {
    if (ag__sgemm_isa_in_use() == AG_ISA_AVX512) return AG_ISA_AVX512;
    return ag__cpu_isa() == AG_ISA_NONE ? AG_ISA_NONE : AG_ISA_AVX2;
}

const ag__sgemm_kernels *ag__sgemm_kernels_in_use(void) {
    pthread_once(&isa_once, choose_isa);
    return kernels;
}

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
static void pack_a(const float *a, int64_t lda, bool ta, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float *ap,
                   int64_t MR) {
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

/* op(B)(k, j) with B row-major: b[k·ldb + j], or transposed: b[j·ldb + k]; the NR-wide panel
 * of columns j0.. (nc of them left) */
static void pack_b_panel(const float *b, int64_t ldb, bool tb, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                         float *bp, int64_t NR) {
    int64_t nr = nc < NR ? nc : NR;
    if (!tb) {
        for (int64_t k = 0; k < kc; k++) {
            const float *src = b + (k0 + k) * ldb + j0;
            float *dst = bp + k * NR;
            for (int64_t j = 0; j < nr; j++) dst[j] = src[j];
            for (int64_t j = nr; j < NR; j++) dst[j] = 0;
        }
    } else {
        ag__sgemm_pack_bt(b + j0 * ldb + k0, ldb, kc, nr, NR, bp);
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
static void sgemm_task(const sgemm_args *g, int64_t i0, int64_t mc, int64_t j0, int64_t nc, const float *bp,
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
static void sgemm_blocked(const sgemm_args *g, float beta) {
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
            pack_b_panel(g->b, g->ldb, g->tb, k0, kc, p * NR, n - p * NR, bp + k0 * npan * NR + p * NR * kc, NR);
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
    /* the own kernel does not call OpenBLAS, but a program that raised its threads gets it back
     * single-threaded from any GEMM, as with OpenBLAS (cheap: two calls) */
    ag__blas_single_threaded();
    const ag__sgemm_kernels *K = ag__sgemm_kernels_in_use();
    bool small = K && (beta == 0 || beta == 1) && small_fits(K, tb, m, n, k);
    if (!K || (!small && !blocked_fits(K, ta, k))) {
        ag__blas_gemm(AG_F32, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    ag__sgemm_path(K, small, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

void ag__sgemm_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, const float *bias, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    ag__blas_single_threaded();
    const ag__sgemm_kernels *K = ag__sgemm_kernels_in_use();
    bool small = K && small_fits(K, tb, m, n, k);
    if (k > 0 && K && (small || blocked_fits(K, ta, k))) {
        ag__sgemm_path(K, small, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, bias);
        return;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) c[i * ldc + j] = bias ? bias[j] : 0;
    ag__sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}

void ag__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c, int64_t ldc) {
    ag__blas_gemm(AG_F64, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ag__gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
              int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    if (dt == AG_F32) ag__sgemm(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
    else ag__dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- shapes ---- */

/* The broadcast problem: out[batch] = A[batch] @ B[batch] with A (m,k), B (k,n). A 1-d left
 * operand is a (1,k) row, a 1-d right operand a (k,1) column, and the inserted dim is dropped
 * from the result, as torch does. */
typedef struct {
    bool a1, b1;                    /* operand was 1-d */
    int nb;                         /* batch dims */
    int64_t bshape[AG_MAX_DIMS];
    int64_t m, k, n;
    int ondim;
    int64_t oshape[AG_MAX_DIMS];
} geom;

/* which matrix dims a tensor lacks: a 1-d left operand has no row dim, a 1-d right one no col */
enum { FULL = 0, NO_ROW = 1, NO_COL = 2 };

static bool plan_shapes(ag_tensor *a, ag_tensor *b, geom *g) {
    const char *op = "ag_matmul";
    if (!ag__check_not_null(op, a) || !ag__check_not_null(op, b)) return false;
    char s1[128], s2[128], s3[128], s4[128];
    ag_shape_str(a, s1);
    ag_shape_str(b, s2);
    if (a->dtype != b->dtype) {
        ag_error(op, "%s %s @ %s %s: dtypes differ (convert with ag_to)", s1, ag_dtype_name(a->dtype), s2,
                 ag_dtype_name(b->dtype));
        return false;
    }
    if (a->dtype != AG_F32 && a->dtype != AG_F64) {
        ag_error(op, "%s @ %s: dtype %s is not supported (f32 or f64 only)", s1, s2, ag_dtype_name(a->dtype));
        return false;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        ag_error(op, "%s @ %s: both operands need at least 1 dim (use ag_mul for a 0-d operand)", s1, s2);
        return false;
    }
    g->a1 = a->ndim == 1;
    g->b1 = b->ndim == 1;
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[g->b1 ? 0 : b->ndim - 2];
    if (ka != kb) {
        ag_error(op, "%s @ %s: inner dims %lld and %lld differ", s1, s2, (long long)ka, (long long)kb);
        return false;
    }
    g->m = g->a1 ? 1 : a->shape[a->ndim - 2];
    g->k = ka;
    g->n = g->b1 ? 1 : b->shape[b->ndim - 1];
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    g->nb = na > nbb ? na : nbb;
    for (int i = 0; i < g->nb; i++) {
        int ia = na - g->nb + i, ib = nbb - g->nb + i;
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            ag_error(op, "%s @ %s: batch dims %s and %s cannot be broadcast", s1, s2, ag__shape_str(na, a->shape, s3),
                     ag__shape_str(nbb, b->shape, s4));
            return false;
        }
        g->bshape[i] = sa == 1 ? sb : sa;
    }
    g->ondim = g->nb;
    memcpy(g->oshape, g->bshape, sizeof(int64_t) * (size_t)g->nb);
    if (!g->a1) g->oshape[g->ondim++] = g->m;
    if (!g->b1) g->oshape[g->ondim++] = g->n;
    return true;
}

/* ---- strided matrix stacks ---- */

typedef struct {
    char *p;                  /* element (0,0) of batch 0 */
    int64_t r, c, rs, cs;     /* rows, cols, and their strides in elements */
    int64_t bs[AG_MAX_DIMS];  /* stride along each broadcast batch dim; 0 where broadcast */
} mat;

/* t (an operand, the output, or a gradient of one of them) as a matrix stack over g's batch */
static mat mat_of(const ag_tensor *t, int missing, const geom *g) {
    mat x = {.p = ag__ptr(t)};
    int d = t->ndim;
    if (missing & NO_COL) {
        x.c = 1;
    } else {
        d--;
        x.c = t->shape[d];
        x.cs = t->stride[d];
    }
    if (missing & NO_ROW) {
        x.r = 1;
    } else {
        d--;
        x.r = t->shape[d];
        x.rs = t->stride[d];
    }
    for (int i = 0; i < g->nb; i++) {
        int it = d - g->nb + i;
        x.bs[i] = it >= 0 && t->shape[it] == g->bshape[i] && g->bshape[i] != 1 ? t->stride[it] : 0;
    }
    return x;
}

static mat transposed(mat x) {
    int64_t r = x.r, rs = x.rs;
    x.r = x.c;
    x.rs = x.cs;
    x.c = r;
    x.cs = rs;
    return x;
}

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* BLAS reads an r×c matrix row-major as it lies (NoTrans, ld = row stride) or as the
 * transpose of a row-major matrix (Trans, ld = col stride). An empty one is read as it lies,
 * whatever its strides (nothing is read; BLAS wants ld >= 1). */
bool ag__blas_mat_of(const void *p, int64_t r, int64_t c, int64_t rs, int64_t cs, ag__blas_mat *m) {
    if (r == 0 || c == 0) {
        *m = (ag__blas_mat){p, false, max1(c)};
        return true;
    }
    if ((c == 1 || cs == 1) && (r == 1 || rs >= max1(c))) {
        *m = (ag__blas_mat){p, false, r == 1 ? max1(c) : rs};
        return true;
    }
    if ((r == 1 || rs == 1) && (c == 1 || cs >= max1(r))) {
        *m = (ag__blas_mat){p, true, c == 1 ? max1(r) : cs};
        return true;
    }
    return false;
}

/* How BLAS can read x (ag__blas_mat_of) */
static bool layout(const mat *x, bool *trans, int64_t *ld) {
    ag__blas_mat b;
    if (!ag__blas_mat_of(x->p, x->r, x->c, x->rs, x->cs, &b)) return false;
    *trans = b.trans;
    *ld = b.ld;
    return true;
}

/* BLAS writes C row-major only */
static bool writable(const mat *x) {
    bool trans;
    int64_t ld;
    return layout(x, &trans, &ld) && !trans;
}

static mat operand(ag_tensor *t, int missing, const geom *g) {
    mat x = mat_of(t, missing, g);
    bool trans;
    int64_t ld;
    /* a contiguous copy outside the graph (a recorded clone would be an orphan node) */
    if (!layout(&x, &trans, &ld)) x = mat_of(ag__dense(t), missing, g);
    return x;
}

/* Merge one batch dim of blen steps of bstride into a matrix dim (len, stride), when the batch
 * step continues that dim's progression. */
static bool fold(int64_t *len, int64_t *stride, int64_t bstride, int64_t blen) {
    if (bstride == 0) return false;
    if (*len == 1) *stride = bstride;
    else if (bstride != *len * *stride) return false;
    *len *= blen;
    return true;
}

/* ---- batched gemm ---- */

typedef struct {
    mat x, y, o;
    int nb;
    int64_t bshape[AG_MAX_DIMS];
    bool tx, ty;
    int64_t ldx, ldy, ldo;
    double beta;
} gemm_plan;

/* Each output matrix is written by one gemm call. Batches that share an output matrix (the
 * reduction over broadcast dims in backward) run in order on one thread; otherwise small
 * matrices, which OpenBLAS computes single-threaded, are spread over OpenMP threads. */
static void bmm_run(ag_dtype dt, const gemm_plan *q) {
    int64_t nbatch = ag__shape_numel(q->nb, q->bshape);
    bool reduce = false;
    for (int d = 0; d < q->nb; d++) reduce |= q->o.bs[d] == 0;
    int64_t work = q->x.r * q->x.c * q->y.c;
    bool par = !reduce && nbatch > 1 && work <= 65536 && nbatch * work > AG_PAR_THRESHOLD;
#pragma omp parallel for if (par) schedule(static)
    for (int64_t b = 0; b < nbatch; b++) {
        int64_t ox = 0, oy = 0, oo = 0, rem = b;
        for (int d = q->nb - 1; d >= 0; d--) {
            int64_t i = rem % q->bshape[d];
            rem /= q->bshape[d];
            ox += i * q->x.bs[d];
            oy += i * q->y.bs[d];
            oo += i * q->o.bs[d];
        }
        if (dt == AG_F32)
            ag__sgemm(q->tx, q->ty, q->x.r, q->y.c, q->x.c, 1.0f, (const float *)q->x.p + ox, q->ldx,
                      (const float *)q->y.p + oy, q->ldy, (float)q->beta, (float *)q->o.p + oo, q->ldo);
        else
            ag__dgemm(q->tx, q->ty, q->x.r, q->y.c, q->x.c, 1.0, (const double *)q->x.p + ox, q->ldx,
                      (const double *)q->y.p + oy, q->ldy, q->beta, (double *)q->o.p + oo, q->ldo);
    }
}

static bool fits_int(int64_t v) { return v <= INT_MAX; }

/* o[batch] = x[batch] @ y[batch] + beta o[batch]; x, y readable by BLAS, o writable; false
 * (reported) when a dim exceeds BLAS's 32-bit ints. Batch dims
 * that continue a matrix dim are folded into it first: rows of x and o when y is shared across
 * them (x @ W over a batch is one gemm), the inner dim when o is (a weight gradient summed over
 * the batch is one gemm). */
static bool bmm(ag_dtype dt, const mat *x, const mat *y, const mat *o, const geom *g, double beta) {
    gemm_plan q = {.x = *x, .y = *y, .o = *o, .beta = beta};
    for (int d = 0; d < g->nb; d++) {
        if (g->bshape[d] == 1) continue;
        q.bshape[q.nb] = g->bshape[d];
        q.x.bs[q.nb] = x->bs[d];
        q.y.bs[q.nb] = y->bs[d];
        q.o.bs[q.nb] = o->bs[d];
        q.nb++;
    }
    if (q.x.r == 0 || q.y.c == 0 || q.x.c == 0 || ag__shape_numel(q.nb, q.bshape) == 0) return true;
    bool t;
    int64_t ld;
    while (q.nb > 0) {
        int d = q.nb - 1;
        int64_t len = q.bshape[d];
        mat x2 = q.x, y2 = q.y, o2 = q.o;
        bool rows = q.y.bs[d] == 0 && fold(&x2.r, &x2.rs, q.x.bs[d], len) && fold(&o2.r, &o2.rs, q.o.bs[d], len);
        if (!rows) {
            x2 = q.x;
            o2 = q.o;
            if (!(q.o.bs[d] == 0 && fold(&x2.c, &x2.cs, q.x.bs[d], len) && fold(&y2.r, &y2.rs, q.y.bs[d], len)))
                break;
        }
        if (!layout(&x2, &t, &ld) || !layout(&y2, &t, &ld) || !writable(&o2)) break;
        q.x = x2;
        q.y = y2;
        q.o = o2;
        q.nb--;
    }
    layout(&q.x, &q.tx, &q.ldx);
    layout(&q.y, &q.ty, &q.ldy);
    layout(&q.o, &t, &q.ldo);
    if (!fits_int(q.x.r) || !fits_int(q.x.c) || !fits_int(q.y.c) || !fits_int(q.ldx) || !fits_int(q.ldy) ||
        !fits_int(q.ldo)) {
        ag_error("ag_matmul", "(%lld,%lld) @ (%lld,%lld): matrix too large for 32-bit BLAS", (long long)q.x.r,
                 (long long)q.x.c, (long long)q.y.r, (long long)q.y.c);
        return false;
    }
    bmm_run(dt, &q);
    return true;
}

/* ---- the op ---- */

/* dst += x @ y into in's gradient buffer (the batch dims in is broadcast over are summed by
 * accumulating their products one after another into the same matrix) */
static void grad_into(ag_tensor *in, int missing, const mat *x, const mat *y, const geom *g) {
    ag_tensor *buf = ag_grad_buffer(in);
    if (!buf) return;
    mat o = mat_of(buf, missing, g);
    if (writable(&o)) {
        bmm(in->dtype, x, y, &o, g, 1.0);
        return;
    }
    ag_tensor *tmp = ag_zeros(in->dtype, in->ndim, in->shape);
    o = mat_of(tmp, missing, g);
    bmm(in->dtype, x, y, &o, g, 1.0);
    ag__add_into(buf, tmp);
}

/* dA = dC @ B^T ; dB = A^T @ dC */
static void matmul_backward(ag_node *n) {
    ag_tensor *a = n->in[0], *b = n->in[1], *gc = n->out->grad;
    geom g;
    if (!plan_shapes(a, b, &g)) return;
    int ma = g.a1 ? NO_ROW : FULL, mb = g.b1 ? NO_COL : FULL;
    mat dc = operand(gc, ma | mb, &g);
    if (a->requires_grad) {
        mat bt = transposed(operand(b, mb, &g));
        grad_into(a, ma, &dc, &bt, &g);
    }
    if (b->requires_grad) {
        mat at = transposed(operand(a, ma, &g));
        grad_into(b, mb, &at, &dc, &g);
    }
}
static const ag_op MATMUL = {"ag_matmul", matmul_backward, AG_SAVES_INPUT(0) | AG_SAVES_INPUT(1)};

/* a (…,m,k) or (k), b (…,k,n) or (k) -> broadcast(…) + (m) + (n), the 1-d dims dropped */
ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b) {
    geom g;
    if (!plan_shapes(a, b, &g)) return NULL;
    ag_tensor *out = g.k == 0 ? ag_zeros(a->dtype, g.ondim, g.oshape) : ag__new(a->dtype, g.ondim, g.oshape);
    int ma = g.a1 ? NO_ROW : FULL, mb = g.b1 ? NO_COL : FULL;
    mat x = operand(a, ma, &g), y = operand(b, mb, &g), o = mat_of(out, ma | mb, &g);
    if (!bmm(a->dtype, &x, &y, &o, &g, 0.0)) return NULL;
    ag_finish(&MATMUL, out, 2, (ag_tensor *[]){a, b});
    return out;
}
