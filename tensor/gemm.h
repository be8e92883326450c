/* How the GEMM entry points of the library (declared in op.h, defined in tensor/gemm.c)
 * compute row-major C = alpha·op(A)·op(B) + beta·C, with cblas_?gemm's arguments. What runs
 * where:
 *   f32 with the AVX-512 kernel table:  attograd's own kernel, 8×32 register tile
 *   f32 with the AVX2 kernel table:     the same driver with a 6×16 AVX2 tile for small
 *                                       products and for depth <= 1024 with A as it lies; the
 *                                       rest go to OpenBLAS (as fast or faster there on Zen 3)
 *   f32 with the generic table, all f64: OpenBLAS through ag__blas_gemm
 * The table is chosen once when the library is loaded (op.h's ag__isa_in_use: the CPU, or AG_ISA). The
 * own kernel splits the work over OpenMP threads by output blocks with a fixed summation
 * order, and ag__blas_gemm cuts products into shape-determined blocks, so no result depends on
 * the thread count; called inside a parallel region, the own kernel runs on the caller's
 * thread alone. */
#ifndef AG_GEMM_H
#define AG_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "op.h"
#include "simd/kernels.h"
#include "tensor.h"

/* OpenBLAS kept single-threaded, large products cut into shape-determined blocks over OpenMP
 * (tensor/gemm.c): results independent of the thread count; it calls ag__blas_single_threaded
 * (op.h) first */
void ag__blas_gemm(ag_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                   int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* ag__sgemm (ag__sgemm_bias when bias is non-NULL) with the set K on the small unpacked path
 * (small: beta 0 or 1, and with tb k·n <= 64K) or the blocked one, whatever the size: the
 * driver's paths one by one, for tests */
void ag__sgemm_path(const ag__sgemm_kernels *K, bool small, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc, const float *bias);
#endif
