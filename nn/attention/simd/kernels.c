/* The fused attention's kernel sets (nn/attention/simd/kernels.h), one per instruction set,
 * chosen by the library's one ISA decision (op.h's ag__isa_in_use). */
#include "kernels.h"

static const ag__attn_kernels generic = {.isa = AG_ISA_GENERIC};

#ifdef AG_SIMD
static const ag__attn_kernels avx2 = {
    .isa = AG_ISA_AVX2,
    .fwd = ag__attn_small_fwd_avx2,
    .bwd = ag__attn_small_bwd_avx2,
};
#endif

const ag__attn_kernels *ag__attn_kernels_for(ag__isa isa) {
    if (isa > ag__cpu_isa()) return NULL;
#ifdef AG_SIMD
    if (isa == AG_ISA_AVX512) return &ag__attn_kernels_avx512;
    if (isa == AG_ISA_AVX2) return &avx2;
#endif
    return &generic;
}
