/* The GEMM entry points of the library (tensor/matmul.c, tensor/gemm.c): row-major C = alpha·op(A)·op(B) +
 * beta·C, with cblas_?gemm's arguments. f32 runs attograd's own AVX-512 kernel when the CPU
 * has AVX-512F (checked at run time, so a build for any x86-64 runs everywhere; valgrind hides
 * AVX-512 and so gets OpenBLAS), else OpenBLAS; f64 always OpenBLAS (both through ag__blas_gemm, thread-count independent). The own kernel splits the
 * work over OpenMP threads by output blocks with a fixed summation order, so its results do
 * not depend on the thread count; called inside a parallel region it runs on the caller's
 * thread alone. */
#ifndef AG_GEMM_H
#define AG_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

void ag__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* C = op(A)·op(B) + bias broadcast over rows (bias (n), unit stride, or NULL): ag_linear's
 * forward, with the bias added in the kernel's last step instead of a pass of its own */
void ag__sgemm_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                    int64_t ldb, const float *bias, float *c, int64_t ldc);
void ag__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c, int64_t ldc);
/* dtype-generic: ag__sgemm or ag__dgemm */
void ag__gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
              int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* OpenBLAS kept single-threaded, large products cut into shape-determined blocks over OpenMP
 * (tensor/gemm.c): results independent of the thread count */
void ag__blas_gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* sets OpenBLAS back to one thread if the program raised it (a no-op inside a parallel region):
 * ag__blas_gemm calls it, and so does code that calls GEMMs from its own parallel regions,
 * before opening them */
void ag__blas_single_threaded(void);
/* true when ag__sgemm uses the AVX-512 kernel (AG_GEMM=blas in the environment turns it off) */
bool ag__sgemm_native(void);
#endif
