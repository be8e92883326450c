/* The one ISA decision (op.h's ag__isa_in_use, AG_ISA) and the kernel table it fills
 * (tensor/simd/kernels.h).
 * It runs once, in a constructor, before any kernel can be called; until then (another
 * library's constructor calling in early) ag__kernels is the generic table, which is correct
 * everywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simd/kernels.h"

/* every entry NULL: the portable C paths, OpenBLAS for the GEMMs */
static const ag__kernel_table generic = {.isa = AG_ISA_GENERIC};

const ag__kernel_table *ag__kernels = &generic;
static ag__isa cpu_isa = AG_ISA_GENERIC;

static const char *const NAMES[] = {"generic", "avx2", "avx512"};

const char *ag__isa_name(ag__isa isa) { return NAMES[isa]; }

static ag__isa detect(void) {
#if defined(AG_SIMD) && defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init(); /* needed before __builtin_cpu_supports in a constructor */
    if (__builtin_cpu_supports("avx512f")) return AG_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return AG_ISA_AVX2;
#endif
    return AG_ISA_GENERIC;
}

/* AG_ISA's choice: best when unset, or (said once on stderr) when it names no set or one this
 * CPU and build cannot run */
static ag__isa requested(ag__isa best) {
    const char *e = getenv("AG_ISA");
    if (!e || !*e) return best;
    for (int i = AG_ISA_GENERIC; i <= AG_ISA_AVX512; i++) {
        if (strcmp(e, NAMES[i])) continue;
        if (i <= (int)best) return (ag__isa)i;
#ifdef AG_SIMD
        fprintf(stderr, "attograd: AG_ISA=%s, but this CPU lacks %s: using %s\n", e,
                i == AG_ISA_AVX512 ? "AVX-512F" : "AVX2 with FMA", NAMES[best]);
#else
        fprintf(stderr, "attograd: AG_ISA=%s, but this build has no vector kernels: using %s\n", e,
                NAMES[best]);
#endif
        return best;
    }
    fprintf(stderr, "attograd: AG_ISA=%s is not one of avx512, avx2, generic: using %s\n", e, NAMES[best]);
    return best;
}

const ag__kernel_table *ag__kernels_for(ag__isa isa) {
    if (isa > cpu_isa) return NULL;
#ifdef AG_SIMD
    if (isa == AG_ISA_AVX512) return &ag__kernels_avx512;
    if (isa == AG_ISA_AVX2) return &ag__kernels_avx2;
#endif
    return &generic;
}

__attribute__((constructor)) static void choose_kernels(void) {
    cpu_isa = detect();
    ag__kernels = ag__kernels_for(requested(cpu_isa));
}

ag__isa ag__cpu_isa(void) { return cpu_isa; }
ag__isa ag__isa_in_use(void) { return ag__kernels->isa; }
