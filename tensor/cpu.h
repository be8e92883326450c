/* The vector instruction set attograd's kernels use, decided once when the library is loaded
 * (tensor/cpu.c) from what the CPU has (__builtin_cpu_supports, so a build for any x86-64 runs
 * everywhere; valgrind hides AVX-512 and so reports AVX2) and one override in the environment:
 *   AG_ISA=avx512   the AVX-512F kernels (the CPU must have AVX-512F)
 *   AG_ISA=avx2     the AVX2 + FMA kernels, also on an AVX-512 CPU (to test or measure them there)
 *   AG_ISA=generic  the portable C paths, and OpenBLAS for every GEMM
 * Unset: the CPU's best. A value not in that list, or one the CPU (or a build without vector
 * kernels: -Dsimd=false, or not x86-64) cannot run, is reported once on stderr and the CPU's
 * best is used instead. The kernels of the chosen set are reached through one table
 * (tensor/simd/kernels.h). Installed with op.h (through kernels.h), for op authors. */
#ifndef AG_CPU_H
#define AG_CPU_H

typedef enum {
    AG_ISA_GENERIC, /* portable C (and OpenBLAS) only */
    AG_ISA_AVX2,    /* AVX2 with FMA */
    AG_ISA_AVX512,  /* AVX-512F (with FMA) */
} ag__isa;

/* the widest set this build has kernels for and this CPU runs (AG_ISA_GENERIC in a build
 * without vector kernels or on another architecture) */
ag__isa ag__cpu_isa(void);
/* the set in use: ag__cpu_isa() unless AG_ISA chose another one */
ag__isa ag__isa_in_use(void);
/* "generic", "avx2" or "avx512": AG_ISA's spelling of isa */
const char *ag__isa_name(ag__isa isa);
#endif
