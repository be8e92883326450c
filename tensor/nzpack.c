/* Packing the nonzero elements of a float array: one bit per element (is it nonzero?) and the
 * nonzero elements in order, bit for bit (a -0.0 or a NaN is kept as it is). ag_feed_forward
 * keeps its hidden activation this way for backward: after relu and dropout about half of it is
 * zero, so it takes about half the memory, and unpacking costs far less than recomputing it.
 *
 * The work goes in chunks of CHUNK elements of the whole array (so each chunk owns whole bytes
 * of the bits), spread over the threads: a first pass writes the bits and counts each chunk's
 * nonzeros, the counts give each chunk its place among the values, a second pass packs. The
 * result never depends on the split. Per chunk, whole bytes of bits run a vector kernel (AVX2:
 * a permutation from a table per byte; AVX-512: compress and expand); edges and f64 run the
 * scalar one. */
#include <pthread.h>
#include <string.h>

#include "gemm.h"
#include "internal.h"

#define CHUNK 2048
#define GROUP 256 /* chunks whose counts are held at a time */

/* One chunk, elements lo .. hi - 1 of the array (x and bits indexed by element; vals where this
 * chunk's values start, cap of them): packing writes the bits and, unless vals is NULL, the
 * values; unpacking writes x. Both return the count. Only vals[0 .. cap - 1] is read or written,
 * so that chunks on other threads can be packed next to it. */
typedef int64_t pack_fn(const char *x, int64_t lo, int64_t hi, uint8_t *bits, char *vals, int64_t cap);
typedef int64_t unpack_fn(const uint8_t *bits, int64_t lo, int64_t hi, const char *vals, int64_t cap, char *x);

static inline bool bit_at(const uint8_t *bits, int64_t e) { return bits[e >> 3] >> (e & 7) & 1; }

/* The scalar kernels on the elements' bits, for f32 (U = uint32_t) and f64 (uint64_t), x read
 * and written by element index; branch-free: every element is stored at vals[c] while there is
 * room (a zero is overwritten by the next nonzero), and bits go a byte at a time. */
#define NZ_SCALAR(U, S)                                                                                       \
    static int64_t pack_##S(const char *x_, int64_t lo, int64_t hi, uint8_t *bits, char *vals_, int64_t cap) { \
        const U *x = (const U *)x_;                                                                           \
        U *vals = (U *)vals_;                                                                                 \
        int64_t c = 0;                                                                                        \
        for (int64_t e = lo; e < hi;) {                                                                       \
            int64_t end = (e | 7) + 1 < hi ? (e | 7) + 1 : hi, byte = e >> 3; /* this byte's elements */      \
            unsigned k = 0, span = 0;                                                                         \
            for (; e < end; e++) {                                                                            \
                bool nz = x[e] != 0;                                                                          \
                if (vals && c < cap) vals[c] = x[e];                                                          \
                k |= (unsigned)nz << (e & 7), span |= 1u << (e & 7);                                          \
                c += nz;                                                                                      \
            }                                                                                                 \
            bits[byte] = (uint8_t)((bits[byte] & ~span) | k);                                                 \
        }                                                                                                     \
        return c;                                                                                             \
    }                                                                                                         \
    static int64_t unpack_##S(const uint8_t *bits, int64_t lo, int64_t hi, const char *vals_, int64_t cap,     \
                              char *x_) {                                                                     \
        const U *vals = (const U *)vals_;                                                                     \
        U *x = (U *)x_;                                                                                       \
        int64_t c = 0;                                                                                        \
        for (int64_t e = lo; e < hi; e++) {                                                                   \
            bool nz = bit_at(bits, e);                                                                        \
            U v = c < cap ? vals[c] : 0;                                                                      \
            x[e] = v & ((U)0 - (U)nz); /* v or 0, without a branch */                                        \
            c += nz;                                                                                          \
        }                                                                                                     \
        return c;                                                                                             \
    }
NZ_SCALAR(uint32_t, u32)
NZ_SCALAR(uint64_t, u64)

/* a vector kernel's share of lo .. hi: [*a, *b), whole bytes of bits in steps of elems; the
 * scalar kernel takes the edges */
static inline void vector_part(int64_t lo, int64_t hi, int64_t elems, int64_t *a, int64_t *b) {
    *a = (lo + 7) & ~(int64_t)7;
    if (*a > hi) *a = hi;
    *b = *a + (hi - *a) / elems * elems;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "gemm_kernels.h" /* ag__avx2_first */
#define NZ_X86 1
#define T2 __attribute__((target("avx2,fma,popcnt")))
#define T512 __attribute__((target("avx512f,popcnt")))

/* per byte m of bits, the lanes' permutations as 8 indices of 4 bits: pack moves the set lanes
 * to the front in order, unpack sends the k-th packed value to the k-th set lane */
static uint32_t PACK_PERM[256], UNPACK_PERM[256];
static pthread_once_t perm_once = PTHREAD_ONCE_INIT;
static void make_perms(void) {
    for (unsigned m = 0; m < 256; m++) {
        uint32_t p = 0, u = 0;
        for (unsigned i = 0, k = 0; i < 8; i++)
            if (m >> i & 1) p |= i << 4 * k, u |= k << 4 * i, k++;
        PACK_PERM[m] = p, UNPACK_PERM[m] = u;
    }
}
static inline T2 __m256i perm_lanes(uint32_t p) {
    return _mm256_srlv_epi32(_mm256_set1_epi32((int)p), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
}

/* One vector of elements: x's (w of them; bits for them at bits, whole bytes), the packed
 * values from vals on with room for room of them; the steps return how many they packed or
 * read. Whole vectors are stored and loaded while there is room (AMD's masked stores are slow). */
#define STEP static inline __attribute__((always_inline))
STEP T2 int pack_step_avx2(const float *x, uint8_t *bits, float *vals, int64_t room) {
    __m256 v = _mm256_loadu_ps(x);
    __m256i zero = _mm256_cmpeq_epi32(_mm256_castps_si256(v), _mm256_setzero_si256());
    unsigned m = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zero)) & 0xFF;
    int k = __builtin_popcount(m);
    *bits = (uint8_t)m;
    if (vals) {
        __m256 packed = _mm256_permutevar8x32_ps(v, perm_lanes(PACK_PERM[m]));
        if (room >= 8) _mm256_storeu_ps(vals, packed);
        else _mm256_maskstore_ps(vals, ag__avx2_first(k), packed);
    }
    return k;
}
STEP T2 int unpack_step_avx2(const uint8_t *bits, const float *vals, int64_t room, float *x) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    unsigned m = *bits;
    int k = __builtin_popcount(m);
    __m256 p = room >= 8 ? _mm256_loadu_ps(vals) : _mm256_maskload_ps(vals, ag__avx2_first(k));
    p = _mm256_permutevar8x32_ps(p, perm_lanes(UNPACK_PERM[m]));
    __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)m), lane_bit), lane_bit);
    _mm256_storeu_ps(x, _mm256_and_ps(_mm256_castsi256_ps(set), p));
    return k;
}
STEP T512 int pack_step_avx512(const float *x, uint8_t *bits, float *vals, int64_t room) {
    __m512i v = _mm512_loadu_si512(x);
    uint16_t m = (uint16_t)_mm512_test_epi32_mask(v, v);
    int k = __builtin_popcount(m);
    memcpy(bits, &m, 2);
    if (vals) _mm512_mask_storeu_epi32(vals, (__mmask16)((1u << k) - 1), _mm512_maskz_compress_epi32(m, v));
    (void)room; /* masked stores are fast here */
    return k;
}
STEP T512 int unpack_step_avx512(const uint8_t *bits, const float *vals, int64_t room, float *x) {
    uint16_t m;
    memcpy(&m, bits, 2);
    int k = __builtin_popcount(m);
    (void)room;
    _mm512_storeu_si512(x, _mm512_maskz_expand_epi32(m, _mm512_maskz_loadu_epi32((__mmask16)((1u << k) - 1), vals)));
    return k;
}

/* a chunk's kernels from the steps of an ISA (W elements each): the scalar ones at the edges */
#define VECTOR_KERNELS(ISA, TGT, W)                                                                               \
    static TGT int64_t pack_##ISA(const char *x, int64_t lo, int64_t hi, uint8_t *bits, char *vals, int64_t cap) { \
        int64_t a, b;                                                                                             \
        vector_part(lo, hi, W, &a, &b);                                                                           \
        int64_t c = pack_u32(x, lo, a, bits, vals, cap);                                                          \
        for (int64_t e = a; e < b; e += W)                                                                        \
            c += pack_step_##ISA((const float *)x + e, bits + (e >> 3), vals ? (float *)vals + c : NULL, cap - c); \
        return c + pack_u32(x, b, hi, bits, vals ? vals + c * 4 : NULL, cap - c);                                 \
    }                                                                                                             \
    static TGT int64_t unpack_##ISA(const uint8_t *bits, int64_t lo, int64_t hi, const char *vals, int64_t cap,   \
                                    char *x) {                                                                    \
        int64_t a, b;                                                                                             \
        vector_part(lo, hi, W, &a, &b);                                                                           \
        int64_t c = unpack_u32(bits, lo, a, vals, cap, x);                                                        \
        for (int64_t e = a; e < b; e += W)                                                                        \
            c += unpack_step_##ISA(bits + (e >> 3), (const float *)vals + c, cap - c, (float *)x + e);            \
        return c + unpack_u32(bits, b, hi, vals + c * 4, cap - c, x);                                             \
    }
VECTOR_KERNELS(avx2, T2, 8)
VECTOR_KERNELS(avx512, T512, 16)
#endif

static void kernels(ag__isa isa, ag_dtype dt, pack_fn **pack, unpack_fn **unpack) {
    *pack = dt == AG_F64 ? pack_u64 : pack_u32;
    *unpack = dt == AG_F64 ? unpack_u64 : unpack_u32;
#ifdef NZ_X86
    if (dt == AG_F32 && isa == AG_ISA_AVX512) *pack = pack_avx512, *unpack = unpack_avx512;
    if (dt == AG_F32 && isa == AG_ISA_AVX2) {
        pthread_once(&perm_once, make_perms);
        *pack = pack_avx2, *unpack = unpack_avx2;
    }
#endif
}

static int64_t popcount_range(const uint8_t *bits, int64_t lo, int64_t hi) {
    int64_t c = 0, e = lo;
    for (; e < hi && e & 7; e++) c += bit_at(bits, e);
    for (; e + 64 <= hi; e += 64) {
        uint64_t w;
        memcpy(&w, bits + (e >> 3), 8);
        c += __builtin_popcountll(w);
    }
    for (; e < hi; e++) c += bit_at(bits, e);
    return c;
}

/* chunk c's part of elements e0 .. e0+n-1: [*lo, *hi) */
static inline void chunk_range(int64_t c, int64_t e0, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = c * CHUNK > e0 ? c * CHUNK : e0;
    *hi = (c + 1) * CHUNK < e0 + n ? (c + 1) * CHUNK : e0 + n;
}

/* The driver of both directions: per group of chunks, their counts (packing: the first pass,
 * which writes the bits; unpacking: from the bits), then each chunk at its offset. */
static int64_t run(ag__isa isa, ag_dtype dt, bool packing, char *x, int64_t n, int64_t e0, uint8_t *bits,
                   char *vals) {
    pack_fn *pack;
    unpack_fn *unpack;
    kernels(isa, dt, &pack, &unpack);
    size_t es = ag_dtype_size(dt);
    char *xe = x - (ptrdiff_t)((size_t)e0 * es); /* element e of the array at xe + e·es */
    int64_t total = 0, first = e0 / CHUNK, end = (e0 + n + CHUNK - 1) / CHUNK, par_work = n;
    for (int64_t g = first; g < end; g += GROUP) {
        int64_t ge = end - g < GROUP ? end : g + GROUP, cnt[GROUP + 1];
        AG_PAR_FOR
        for (int64_t c = g; c < ge; c++) {
            int64_t lo, hi;
            chunk_range(c, e0, n, &lo, &hi);
            cnt[c - g + 1] = packing ? pack(xe, lo, hi, bits, NULL, 0) : popcount_range(bits, lo, hi);
        }
        cnt[0] = total;
        for (int64_t c = g; c < ge; c++) cnt[c - g + 1] += cnt[c - g];
        AG_PAR_FOR
        for (int64_t c = g; c < ge; c++) {
            int64_t lo, hi;
            chunk_range(c, e0, n, &lo, &hi);
            char *v = vals + (size_t)cnt[c - g] * es;
            int64_t cap = cnt[c - g + 1] - cnt[c - g];
            if (packing) pack(xe, lo, hi, bits, v, cap);
            else unpack(bits, lo, hi, v, cap, xe);
        }
        total = cnt[ge - g];
    }
    return total;
}

int64_t ag__nz_pack_isa(ag__isa isa, ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits, void *vals) {
    return run(isa, dt, true, (char *)x, n, e0, bits, vals);
}
int64_t ag__nz_unpack_isa(ag__isa isa, ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n, const void *vals,
                          void *x) {
    return run(isa, dt, false, x, n, e0, (uint8_t *)bits, (char *)vals);
}
int64_t ag__nz_pack(ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits, void *vals) {
    return ag__nz_pack_isa(ag__vector_isa(), dt, x, n, e0, bits, vals);
}
int64_t ag__nz_unpack(ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n, const void *vals, void *x) {
    return ag__nz_unpack_isa(ag__vector_isa(), dt, bits, e0, n, vals, x);
}
