/* One (b,h) of attention held in vector registers, for short key ranges (nn/attention_small.c,
 * nn/attention_small_avx2.c).
 * At head dim 16 and 16 keys every product of a head is 16×16×16: GEMM calls, their packing
 * and a softmax pass over memory cost more than the arithmetic. Here the live keys of a query
 * row are the lanes of one vector: scores, mask, softmax and P·V of 8 query rows at a time
 * never leave registers, and the backward is fused the same way. f32 only, with AVX-512F or
 * else AVX2 + FMA chosen at run time; f64 and other CPUs take the GEMM path of nn/attention.c.
 * Internal, not installed. */
#ifndef AG_ATTENTION_SMALL_H
#define AG_ATTENTION_SMALL_H
#include <stdbool.h>
#include <stdint.h>

/* the limits of the fused kernels: live keys per vector, head dims and query rows */
#define AG_ATTN_SMALL_KEYS 16
#define AG_ATTN_SMALL_DIM 64
#define AG_ATTN_SMALL_ROWS 64

/* One (b,h): Q (L,Dh), K (n,Dh), V (n,Dv), row-major with unit-stride rows and leading
 * dimensions ldq, ldk, ldv; n in 1..16 live keys (the keys from n on are masked for every
 * query). The mask of query row i is madd + i·madd_ld (16 floats added to the scaled scores,
 * NULL for none; madd_ld 0: one row for all) and the bits dead[i·dead_ld] (lanes set there
 * are -inf; lanes from n on always are). L and Dh, Dv up to the limits above. */
typedef struct {
    int64_t L, n, Dh, Dv;
    const float *q, *k, *v;
    int64_t ldq, ldk, ldv;
    float alpha; /* the scale of QKᵀ */
    const float *madd;
    int64_t madd_ld;
    const uint16_t *dead;
    int64_t dead_ld;
} ag__attn_tile;

/* true when the kernels below exist and the CPU runs them (AVX-512F, or AVX2 and FMA; and
 * AG_GEMM=blas is not set). Checked once. */
bool ag__attn_small_available(void);
/* P (L rows, ldp >= n apart; columns n..S-1 of each row zeroed, S = ldp) = softmax(alpha Q Kᵀ
 * + mask), a row with no live key all zeros; O (L,Dv), ldo = P V */
void ag__attn_small_fwd(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo);
/* from P (as written above) and dO (L,Dv): dV += Pᵀ dO, dS = P*(dO Vᵀ - rowsum(P * dO Vᵀ)),
 * dQ += alpha dS K, dK += alpha dSᵀ Q; each of dq, dk, dv NULL when not wanted. With assign_S
 * > 0 they are assigned (=, old contents never read) instead, and rows n..assign_S-1 of dK
 * and dV (the masked keys) set to zero. */
void ag__attn_small_bwd(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout, int64_t lddo,
                        float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv, int64_t lddv, int64_t assign_S);

/* the kernels of one instruction set, which ag__attn_small_fwd/bwd choose from (x86-64 only;
 * for tests: call one only when __builtin_cpu_supports says the CPU has it) */
void ag__attn_small_fwd_avx512(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo);
void ag__attn_small_bwd_avx512(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout, int64_t lddo,
                               float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv, int64_t lddv,
                               int64_t assign_S);
void ag__attn_small_fwd_avx2(const ag__attn_tile *t, float *p, int64_t ldp, float *o, int64_t ldo);
void ag__attn_small_bwd_avx2(const ag__attn_tile *t, const float *p, int64_t ldp, const float *dout, int64_t lddo,
                             float *dq, int64_t lddq, float *dk, int64_t lddk, float *dv, int64_t lddv,
                             int64_t assign_S);
#endif
