/* Packing the nonzero elements of a float array: one bit per element (is it nonzero?) and the
 * nonzero elements in order, bit for bit (a -0.0 or a NaN is kept as it is). ag_feed_forward
 * keeps its hidden activation this way for backward: after relu and dropout about half of it is
 * zero, so it takes about half the memory, and unpacking costs far less than recomputing it.
 *
 * The work goes in chunks of CHUNK elements of the whole array (so each chunk owns whole bytes
 * of the bits), spread over the threads: a first pass writes the bits and counts each chunk's
 * nonzeros, the counts give each chunk its place among the values, a second pass packs. The
 * result never depends on the split. Per chunk, whole bytes of bits run the kernel table's
 * vector kernel (tensor/simd/: AVX2 permutes by a table per byte, AVX-512 compresses and
 * expands); edges, f64 and the generic table run the scalar one. */
#include <string.h>

#include "internal.h"

#define CHUNK 2048
#define GROUP 256 /* chunks whose counts are held at a time */

/* The kernels of one chunk, elements lo .. hi - 1 of the array (x and bits indexed by element;
 * vals where this chunk's values start, cap of them): packing writes the bits and, unless vals
 * is NULL, the values; unpacking writes x. Both return the count. Only vals[0 .. cap - 1] is
 * read or written, so that chunks on other threads can be packed next to it. */

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

/* One chunk on K's path: f64, and f32 with no vector kernel in K, on the scalar kernels; else
 * K's kernel on whole bytes of bits in steps of its width and the scalar one at the edges */
static int64_t pack_chunk(const ag__kernel_table *K, ag_dtype dt, const char *x, int64_t lo, int64_t hi,
                          uint8_t *bits, char *vals, int64_t cap) {
    if (dt == AG_F64) return pack_u64(x, lo, hi, bits, vals, cap);
    if (!K->nz_pack_f32) return pack_u32(x, lo, hi, bits, vals, cap);
    int64_t a, b;
    vector_part(lo, hi, K->nz_width, &a, &b);
    int64_t c = pack_u32(x, lo, a, bits, vals, cap);
    c += K->nz_pack_f32((const float *)x + a, b - a, bits + (a >> 3), vals ? (float *)vals + c : NULL, cap - c);
    return c + pack_u32(x, b, hi, bits, vals ? vals + c * 4 : NULL, cap - c);
}

static int64_t unpack_chunk(const ag__kernel_table *K, ag_dtype dt, const uint8_t *bits, int64_t lo, int64_t hi,
                            const char *vals, int64_t cap, char *x) {
    if (dt == AG_F64) return unpack_u64(bits, lo, hi, vals, cap, x);
    if (!K->nz_unpack_f32) return unpack_u32(bits, lo, hi, vals, cap, x);
    int64_t a, b;
    vector_part(lo, hi, K->nz_width, &a, &b);
    int64_t c = unpack_u32(bits, lo, a, vals, cap, x);
    c += K->nz_unpack_f32(bits + (a >> 3), b - a, (const float *)vals + c, cap - c, (float *)x + a);
    return c + unpack_u32(bits, b, hi, vals + c * 4, cap - c, x);
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
static int64_t run(const ag__kernel_table *K, ag_dtype dt, bool packing, char *x, int64_t n, int64_t e0,
                   uint8_t *bits, char *vals) {
    size_t es = ag_dtype_size(dt);
    char *xe = x - (ptrdiff_t)((size_t)e0 * es); /* element e of the array at xe + e·es */
    int64_t total = 0, first = e0 / CHUNK, end = (e0 + n + CHUNK - 1) / CHUNK, par_work = n;
    for (int64_t g = first; g < end; g += GROUP) {
        int64_t ge = end - g < GROUP ? end : g + GROUP, cnt[GROUP + 1];
        AG_PAR_FOR
        for (int64_t c = g; c < ge; c++) {
            int64_t lo, hi;
            chunk_range(c, e0, n, &lo, &hi);
            cnt[c - g + 1] = packing ? pack_chunk(K, dt, xe, lo, hi, bits, NULL, 0) : popcount_range(bits, lo, hi);
        }
        cnt[0] = total;
        for (int64_t c = g; c < ge; c++) cnt[c - g + 1] += cnt[c - g];
        AG_PAR_FOR
        for (int64_t c = g; c < ge; c++) {
            int64_t lo, hi;
            chunk_range(c, e0, n, &lo, &hi);
            char *v = vals + (size_t)cnt[c - g] * es;
            int64_t cap = cnt[c - g + 1] - cnt[c - g];
            if (packing) pack_chunk(K, dt, xe, lo, hi, bits, v, cap);
            else unpack_chunk(K, dt, bits, lo, hi, v, cap, xe);
        }
        total = cnt[ge - g];
    }
    return total;
}

int64_t ag__nz_pack_with(const ag__kernel_table *K, ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits,
                         void *vals) {
    return run(K, dt, true, (char *)x, n, e0, bits, vals);
}
int64_t ag__nz_unpack_with(const ag__kernel_table *K, ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n,
                           const void *vals, void *x) {
    return run(K, dt, false, x, n, e0, (uint8_t *)bits, (char *)vals);
}
int64_t ag__nz_pack(ag_dtype dt, const void *x, int64_t n, int64_t e0, uint8_t *bits, void *vals) {
    return ag__nz_pack_with(ag__kernels, dt, x, n, e0, bits, vals);
}
int64_t ag__nz_unpack(ag_dtype dt, const uint8_t *bits, int64_t e0, int64_t n, const void *vals, void *x) {
    return ag__nz_unpack_with(ag__kernels, dt, bits, e0, n, vals, x);
}
