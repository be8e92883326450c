/* The one table of vector kernels (tensor/cpu.c fills it once when the library is loaded) and
 * the types of its entries. Every caller of an intrinsics kernel goes through ag__kernels: the
 * GEMM driver (tensor/gemm.c), nonzero packing (tensor/nzpack.c), the generator's draws and
 * dropout masks (tensor/rng.c) and the fused small attention (nn/attention/attention.c). An
 * entry that is NULL (every one in the generic table) means: take the portable C path. The
 * kernels themselves live in tensor/simd/, named by ISA first: avx2.c and avx512.c (each ISA's
 * table, GEMM tile, nonzero packing and generator) and avx2_attention.c, avx512_attention.c
 * (the fused attention), compiled only with -Dsimd=true (the default) on x86-64. Installed
 * with op.h, which includes it: nn/attention calls the fused attention through the table. */
#ifndef AG_SIMD_KERNELS_H
#define AG_SIMD_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#include "../cpu.h"

/* ---- the GEMM's register tiles (the driver: tensor/gemm.c) ---- */

/* C tile (mr×nr, rows ldc apart) = alpha · Ap Bp (+ bias row, NULL for none), or += that (add).
 * Ap: kc steps of mr floats (packed A), Bp: kc steps of nr floats (a packed B panel, aligned) */
typedef void ag__tile_packed_fn(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, float alpha,
                                bool add, const float *bias);
/* the same tile from A read in place (row i, step k at a[i·ars + k·aks]) and B rows ldb apart;
 * only rows < rows and columns < cols of C are read or written (a tail tile) */
typedef void ag__tile_small_fn(int64_t kc, const float *a, int64_t ars, int64_t aks, int64_t rows, const float *b,
                               int64_t ldb, int64_t cols, float *c, int64_t ldc, float alpha, bool add,
                               const float *bias);
/* the 8×8 blocks of a B panel from B stored transposed: bp[k·NR + j] = b[j·ldb + k] for the
 * columns j < nr and steps k < kc each rounded down to a multiple of 8 (the driver does the
 * edges and the zero padding) */
typedef void ag__pack_bt_blocks_fn(const float *b, int64_t ldb, int64_t kc, int64_t nr, int64_t NR, float *bp);

/* One register tile and the blocking it is tuned for */
typedef struct {
    const char *name;
    int64_t mr, nr;      /* the register tile */
    int64_t kc;          /* K slice depth */
    int64_t mc, nch;     /* rows and columns of C per task */
    int64_t small;       /* m·n·k up to which the unpacked small path runs */
    /* past the small path, the blocked path runs products of depth k <= blocked_k (with op(A) =
     * Aᵀ too when blocked_ta); the rest go to OpenBLAS (measured as fast or faster there) */
    int64_t blocked_k;
    bool blocked_ta;
    ag__tile_packed_fn *packed;
    ag__tile_small_fn *small_tile;
    ag__pack_bt_blocks_fn *pack_bt_blocks;
} ag__sgemm_kernels;

/* the largest mr·nr of any set (a tail tile's scratch) */
#define AG_SGEMM_MAX_TILE (8 * 32)

/* ---- fused small attention (the caller: nn/attention/attention.c) ----
 * One (b,h) of attention held in vector registers, for short key ranges. At head dim 16 and 16
 * keys every product of a head is 16×16×16: GEMM calls, their packing and a softmax pass over
 * memory cost more than the arithmetic. Here the live keys of a query row are the lanes of one
 * vector (the AVX-512 kernels: up to 16 keys, no dropout) or of up to 8 (the AVX2 kernels: up
 * to 64 keys, with dropout): scores, mask, softmax and P·V of a head never leave registers and
 * a stack buffer, and the backward is fused the same way. f32 only. The AVX-512 table runs its
 * own kernels where they fit and the AVX2 ones (with the AVX-512 GEMM tile for their products)
 * for the other heads, measured faster there than the GEMM path. f64, and the generic table,
 * take the GEMM path of nn/attention/attention.c. */

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
 * Dropout (the AVX2 kernels only: the AVX-512 table sends a tile with keep there): keep
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

/* ---- the table ---- */

typedef struct {
    ag__isa isa;
    /* f32 GEMM tiles; NULL: OpenBLAS for every product */
    const ag__sgemm_kernels *sgemm;
    /* Nonzero packing of n f32 elements (n a multiple of nz_width) whose bits start at a whole
     * byte: the bits, and unless vals is NULL the nonzero values (room for cap of them; none
     * stored or read past it); return the count (tensor/nzpack.c does the edges). */
    int64_t (*nz_pack_f32)(const float *x, int64_t n, uint8_t *bits, float *vals, int64_t cap);
    int64_t (*nz_unpack_f32)(const uint8_t *bits, int64_t n, const float *vals, int64_t cap, float *x);
    int64_t nz_width;
    /* the generator's uniforms from counter on (ag__rng_uniform_serial's contract) */
    void (*rng_uniform)(uint64_t seed, uint64_t counter, int64_t n, double *out);
    /* bit j: mask word j of Philox blocks blk .. blk + 15 (word j & 3 of block blk + j / 4) < t,
     * key[r] the round keys (tensor/simd/philox.h) */
    uint64_t (*rng_below64)(const uint32_t key[10][2], uint64_t blk, uint64_t t);
    const char *rng_path; /* which vector paths the generator runs, for tests' messages */
    ag__attn_small_fwd_fn *attn_small_fwd;
    ag__attn_small_bwd_fn *attn_small_bwd;
} ag__kernel_table;

/* the table in use (tensor/cpu.c): the generic one until the library's constructor has chosen */
extern const ag__kernel_table *ag__kernels;
/* the table of isa when this build has it and the CPU runs it (the generic one always), else
 * NULL: tests run every path the CPU has through it, whatever AG_ISA chose */
const ag__kernel_table *ag__kernels_for(ag__isa isa);

#ifdef AG_SIMD
/* the per-ISA tables and kernels (tensor/simd/avx2.c, tensor/simd/avx512.c): call one only
 * when ag__kernels_for says the CPU has its ISA */
extern const ag__kernel_table ag__kernels_avx2, ag__kernels_avx512;
extern const ag__sgemm_kernels ag__sgemm_avx2, ag__sgemm_avx512;
ag__attn_small_fwd_fn ag__attn_small_fwd_avx2, ag__attn_small_fwd_avx512;
ag__attn_small_bwd_fn ag__attn_small_bwd_avx2, ag__attn_small_bwd_avx512;
/* the AVX2 kernels the AVX-512 table uses too */
ag__pack_bt_blocks_fn ag__pack_bt_blocks_avx2;
void ag__rng_uniform_avx2(uint64_t seed, uint64_t counter, int64_t n, double *out);
#endif
#endif
