/* GEMM through OpenBLAS, for f64 and for f32 where attograd's own kernel (tensor/matmul.c) does
 * not run. OpenBLAS's own threading changes results with the thread count (its kernel choice
 * depends on it: the single-threaded sgemm "direct" path, for one), so OpenBLAS stays
 * single-threaded and large products are parallelised here: the output is cut into blocks whose
 * size depends only on the shape, every block is one single-threaded GEMM, and OpenMP deals the
 * blocks out. 1 thread or 8, the same calls compute the same numbers. */
#include <cblas.h>
#include <omp.h>

#include "internal.h"

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
