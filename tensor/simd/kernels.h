/* The one table of tensor/'s vector kernels (tensor/cpu.c fills it once when the library is
 * loaded, for the instruction set op.h's ag__isa_in_use tells) and the types of its entries.
 * Every caller of an intrinsics kernel in tensor/ goes through ag__kernels: the GEMM driver
 * (tensor/gemm.c), nonzero packing (tensor/nzpack.c), the generator's draws and dropout masks
 * (tensor/rng.c). An entry that is NULL (every one in the generic table) means: take the
 * portable C path. The kernels themselves live in tensor/simd/, named by ISA: avx2.c and
 * avx512.c (each ISA's table, GEMM tile, nonzero packing and generator), compiled only with
 * -Dsimd=true (the default) on x86-64. Private to tensor/: the fused attention kernels
 * (nn/attention/simd/) pick their set by ag__isa_in_use and reach the GEMM tile through
 * ag__sgemm_small (op.h). */
#ifndef AG_SIMD_KERNELS_H
#define AG_SIMD_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#include "../op.h" /* ag__isa */

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
/* the AVX2 kernels the AVX-512 table uses too */
ag__pack_bt_blocks_fn ag__pack_bt_blocks_avx2;
void ag__rng_uniform_avx2(uint64_t seed, uint64_t counter, int64_t n, double *out);
#endif
#endif
