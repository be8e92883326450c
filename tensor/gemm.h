/* The GEMM entry points of the library (tensor/gemm.c): row-major C =
 * alpha·op(A)·op(B) + beta·C, with cblas_?gemm's arguments. What runs where, chosen once at run
 * time (so a build for any x86-64 runs everywhere):
 *   f32, CPU with AVX-512F:      attograd's own kernel, 8×32 register tile
 *   f32, CPU with AVX2 and FMA:  the same driver with a 6×16 AVX2 tile for small products and
 *                                for depth <= 1024 with A as it lies; the rest go to OpenBLAS
 *                                (as fast or faster there on Zen 3: tensor/gemm_kernels.c)
 *   f32 otherwise, and all f64:  OpenBLAS through ag__blas_gemm
 * AG_GEMM=blas in the environment forces OpenBLAS for f32 too (AG_GEMM=avx2 picks the AVX2
 * tile on an AVX-512 CPU). valgrind hides AVX-512: under it the AVX2 tile runs. The own kernel
 * splits the work over OpenMP threads by output blocks with a fixed summation order, and
 * ag__blas_gemm cuts products into shape-determined blocks, so no
 * result depends on the thread count; called inside a parallel region, the own kernel runs on
 * the caller's thread alone. */
#ifndef AG_GEMM_H
#define AG_GEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"
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
/* which f32 kernel set ag__sgemm runs: ag__cpu_isa(), or AG_ISA_NONE (OpenBLAS) with
 * AG_GEMM=blas, or AG_ISA_AVX2 on an AVX-512 CPU with AG_GEMM=avx2. Code with kernels of its
 * own per ISA (nn/attention/attention_small.c) follows it, so that AG_GEMM switches those too. */
ag__isa ag__sgemm_isa_in_use(void);
/* the path of the other vector kernels (dropout's masks, nonzero packing): AVX-512 where the
 * GEMM runs AVX-512 (so AG_GEMM=avx2 switches them too, as it does the attention kernels), else
 * AVX2 where the CPU has it */
ag__isa ag__vector_isa(void);
#endif
