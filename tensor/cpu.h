/* The widest vector instruction set attograd has kernels for on this CPU, checked once at run
 * time (so a build for any x86-64 runs everywhere; valgrind hides AVX-512 and so reports AVX2).
 * tensor/gemm.c, tensor/rng.c and nn/attention/attention_small.c choose their kernels from it. */
#ifndef AG_CPU_H
#define AG_CPU_H

typedef enum {
    AG_ISA_NONE,   /* scalar code (and OpenBLAS) only */
    AG_ISA_AVX2,   /* AVX2 with FMA */
    AG_ISA_AVX512, /* AVX-512F (with FMA) */
} ag__isa;

ag__isa ag__cpu_isa(void);
#endif
