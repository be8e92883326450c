/* sgemm peak of the linked OpenBLAS: C = A B for square f32 matrices (n = 512, 1024), the
 * yardstick the other benchmarks' GFLOP/s are compared with. Also the same product through
 * ag_matmul, to show the library adds nothing around BLAS: attograd's own kernel where the CPU
 * has AVX-512 or AVX2+FMA, else OpenBLAS kept single-threaded in blocks that attograd deals to its threads. */
#include <cblas.h>

#include "../attograd.h"
#include "bench_util.h"

int main(int argc, char **argv) {
    int reps = bench_reps(argc, argv, 40), threads = bench_threads();
    openblas_set_num_threads(threads);
    printf("NOTE OpenBLAS %s, kernel %s, threads %d\n", openblas_get_config(), openblas_get_corename(), threads);
    ag_arena *arena = ag_arena_new(64 << 20);
    ag_arena_use(arena);
    ag_rng rng = ag_rng_new(1234);
    const int sizes[] = {512, 1024};
    for (int si = 0; si < 2; si++) {
        int n = sizes[si];
        ag_arena_reset(arena);
        ag_tensor *a = ag_randn(&rng, AG_F32, AG_SHAPE(n, n)), *b = ag_randn(&rng, AG_F32, AG_SHAPE(n, n));
        ag_tensor *c = ag_zeros(AG_F32, AG_SHAPE(n, n));
        const float *pa = (const float *)a->data, *pb = (const float *)b->data;
        float *pc = (float *)c->data;
        int r = n >= 1024 ? reps / 4 + 3 : reps;
        openblas_set_num_threads(threads); /* ag_matmul below sets it back to 1 (tensor/gemm.c) */
        double *t = malloc(sizeof(double) * (size_t)r);
        for (int i = 0; i < 3; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n);
        for (int i = 0; i < r; i++) {
            double t0 = bench_now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n);
            t[i] = bench_now_ms() - t0;
        }
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%dx%d", n, n, n);
        double gflop = 2.0 * n * (double)n * n * 1e-9;
        bench_result("sgemm", shape, threads, bench_median(t, r), gflop, "cblas_sgemm");
        ag_arena *scratch = ag_arena_new(8 << 20); /* the products, forgotten after each run */
        ag_arena_use(scratch);
        for (int i = 0; i < 3 + r; i++) {
            ag_arena_reset(scratch);
            double t0 = bench_now_ms();
            ag_matmul(a, b);
            if (i >= 3) t[i - 3] = bench_now_ms() - t0;
        }
        ag_arena_use(arena);
        ag_arena_free(scratch);
        bench_result("matmul", shape, threads, bench_median(t, r), gflop, "ag_matmul");
        free(t);
    }
    ag_arena_free(arena);
    return 0;
}
