/* Fused small attention: one (b,h) of attention held in vector registers, for short key ranges
 * (the caller: nn/attention/attention.c). At head dim 16 and 16 keys every product of a head is
 * 16×16×16: GEMM calls, their packing and a softmax pass over memory cost more than the
 * arithmetic. Here the live keys of a query row are the lanes of one vector (the AVX-512
 * kernels: up to 16 keys, no dropout) or of up to 8 (the AVX2 kernels: up to 64 keys, with
 * dropout): scores, mask, softmax and P·V of a head never leave registers and a stack buffer,
 * and the backward is fused the same way. f32 only. The AVX-512 set runs its own kernels where
 * they fit and the AVX2 ones for the other heads, measured faster there than the GEMM path;
 * their products run on the GEMM's register tile in use (op.h's ag__sgemm_small). f64, and the
 * generic set, take the GEMM path of nn/attention/attention.c.
 *
 * The set follows the library's one ISA decision (op.h's ag__isa_in_use: the CPU, or AG_ISA).
 * The kernels live in nn/attention/simd/avx2_attention.c and avx512_attention.c, compiled only
 * with -Dsimd=true (the default) on x86-64; nn/attention/simd/kernels.c holds the sets. */
#ifndef AG_ATTN_KERNELS_H
#define AG_ATTN_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#include "../../../tensor/op.h"

/* the limits of the fused kernels: live keys (AVX-512: the 16 lanes of one vector; AVX2: up to
 * 8 vectors a row), head dims and query rows */
#define AG_ATTN_SMALL_KEYS 16
#define AG_ATTN_AVX2_KEYS 64
#define AG_ATTN_SMALL_DIM 64
#define AG_ATTN_SMALL_ROWS 64

/* One (b,h): Q (L,Dh), K (n,Dh), V (n,Dv), row-major with unit-stride rows and leading
 * dimensions ldq, ldk, ldv; n in 1..AG_ATTN_AVX2_KEYS live keys (the keys from n on are
 * masked for every query). The mask of query row i is madd + i·madd_ld (n floats added to the
 * scaled scores, NULL for none; madd_ld 0: one row for all) and the bits dead[i·dead_ld] (bit j
 * set: key j is -inf; keys from n on always are). L and Dh, Dv up to the limits above.
 * Dropout (the AVX2 kernels only: the AVX-512 set sends a tile with keep there): keep
 * non-NULL gives the keep bytes of row i at keep + i·ldkeep; P V and the backward use
 * P·keep·keep_scale, P itself is what is written out. */
typedef struct {
    int64_t L, n, Dh, Dv;
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv;
    float alpha; /* the scale of QKᵀ */
    const float *madd;
    int64_t madd_ld;
    const uint64_t *dead;
    int64_t dead_ld;
    const uint8_t *keep;
    int64_t ldkeep;
    float keep_scale;
} ag__attn_tile;

/* P (L rows, ldp >= n apart; columns n..S-1 of each row zeroed, S = ldp) = softmax(alpha Q Kᵀ
 * + mask), a row with no live key all zeros; O (L,Dv), ldo = P V (with dropout Pd V) */
typedef void ag__attn_small_fwd_fn(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo);
/* from P (as written above) and dO (L,Dv): dV += Pᵀ dO, dS = P*(dO Vᵀ - rowsum(P * dO Vᵀ)),
 * (with dropout Pd for P in dV, and dO Vᵀ times keep·keep_scale), dQ += alpha dS K, dK +=
 * alpha dSᵀ Q; each of dq, dk, dv NULL when not wanted. With assign_S > 0 they are assigned
 * (=, old contents never read) instead, and rows n..assign_S-1 of dK and dV (the masked keys)
 * set to zero. */
typedef void ag__attn_small_bwd_fn(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout,
                                   int64_t lddo, float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv,
                                   int64_t lddv, int64_t assign_S);

/* One instruction set's kernels; both NULL in the generic set (the GEMM path) */
typedef struct {
    ag__isa isa;
    ag__attn_small_fwd_fn *fwd;
    ag__attn_small_bwd_fn *bwd;
} ag__attn_kernels;

/* the set of isa when this build has it and the CPU runs it (the generic one always), else
 * NULL: attention.c takes ag__attn_kernels_for(ag__isa_in_use()), and tests run every set the
 * CPU has, whatever AG_ISA chose */
const ag__attn_kernels *ag__attn_kernels_for(ag__isa isa);

#ifdef AG_SIMD
/* the kernels (nn/attention/simd/avx2_attention.c, avx512_attention.c) and the sets: call one
 * only when ag__attn_kernels_for says the CPU has its ISA */
ag__attn_small_fwd_fn ag__attn_small_fwd_avx2, ag__attn_small_fwd_avx512;
ag__attn_small_bwd_fn ag__attn_small_bwd_avx2, ag__attn_small_bwd_avx512;
extern const ag__attn_kernels ag__attn_kernels_avx512;
#endif
#endif
