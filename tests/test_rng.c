/* Random numbers: Philox4x32-10 known values, reproducibility, counter arithmetic, thread
 * independence, ranges and moments. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../tensor/internal.h"
#include "test_util.h"

/* cmocka 1.1.5 has no double assertion (assert_float_equal casts to float) */
#define assert_double_equal(a, b, tol)                                                             \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) fail_msg("%.17g != %.17g (tol %g)", a_, b_, (double)(tol)); \
    } while (0)

#define N_BIG 100000 /* > AG_PAR_THRESHOLD (32768), so the draws run in parallel */

static double *draw_uniform(ag_rng *rng, int64_t n) {
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)n);
    ag_rng_uniform_f64(rng, n, v);
    return v;
}

static double *draw_normal(ag_rng *rng, int64_t n) {
    double *v = ag_arena_alloc(ag_arena_current(), sizeof(double) * (size_t)n);
    ag_rng_normal_f64(rng, n, v);
    return v;
}

/* Expected values from scripts/philox_values.py: an independent Python Philox4x32-10, checked
 * against the three Random123 known-answer vectors for philox4x32_10, with this library's layout:
 * block b's counter words (b lo, b hi, 0x9E3779B9, 0xBB67AE85), key (seed lo, seed hi); draw d
 * is block d >> 1's words 0, 1 (d even) or 2, 3 (d odd), uniform = ((a << 21) ^ (b >> 11)) ·
 * 2^-53; normal i = sqrt(-2 log(1 - u(c + 2i))) cos(2 pi u(c + 2i + 1)); element e of a mask
 * at counter c is word e % 2 of draw c + e / 2. */
static void test_philox_matches_reference_values(void **state) {
    (void)state;
    ag_rng r = ag_rng_new(42);
    double u[3], n[1];
    ag_rng_uniform_f64(&r, 3, u);
    assert_true(u[0] == 0.6915840691813044);
    assert_true(u[1] == 0.0772980161914606); /* the second half of block 0 */
    assert_true(u[2] == 0.4562672144401939);
    r.counter = 1000001;
    ag_rng_uniform_f64(&r, 1, u);
    assert_true(u[0] == 0.7775000524354675);
    r = ag_rng_new(42);
    ag_rng_normal_f64(&r, 1, n);
    assert_double_equal(n[0], 1.3564495225963873, 1e-15);
    assert_true(r.counter == 2);
    r.counter = 1000001; /* its two draws straddle two blocks */
    ag_rng_normal_f64(&r, 1, n);
    assert_double_equal(n[0], -1.6957224733816765, 1e-15);
    /* both key words and both counter words are used */
    r = ag_rng_new(((uint64_t)7 << 32) | 5);
    ag_rng_uniform_f64(&r, 1, u);
    assert_true(u[0] == 0.17649024756946696);
    r.counter = ((uint64_t)1 << 33) + 7;
    ag_rng_uniform_f64(&r, 1, u);
    assert_true(u[0] == 0.7347358550911959);
    r.counter = ((uint64_t)1 << 33) + 6;
    ag_rng_normal_f64(&r, 1, n);
    assert_double_equal(n[0], -0.03239315495753046, 1e-15);
    /* dropout masks' words: both words of three draws; an odd counter; the carry; the wrap */
    const uint32_t w42[6] = {0xb10ba74f, 0x917c64f6, 0x13c9cd83, 0x96874f54, 0x74cded9c, 0x41f579a5};
    for (int e = 0; e < 6; e++) assert_true(ag__rng_mask_word(42, 0, (uint64_t)e) == w42[e]);
    const uint32_t w42odd[3] = {0xc70a3e51, 0xd93f0c76, 0x888ab6ee};
    for (int e = 0; e < 3; e++) assert_true(ag__rng_mask_word(42, 1000001, (uint64_t)e) == w42odd[e]);
    assert_true(ag__rng_mask_word(((uint64_t)7 << 32) | 5, ((uint64_t)1 << 33) + 7, 3) == 0x5bba6a69);
    assert_true(ag__rng_mask_word(((uint64_t)7 << 32) | 5, ~(uint64_t)0, 1) == 0x73162989);
}

/* ---- the vector path against the one-block-per-draw reference (tensor/rng.c) ---- */

static const uint64_t SEEDS[] = {0, 1, 42, 0x5eed, ((uint64_t)7 << 32) | 5, 0xFFFFFFFFu, ~(uint64_t)0,
                                 0x9E3779B97F4A7C15u};
/* counters whose blocks carry from word 0 into word 1 (draw 2^33), and from 2^64 - 1 around to 0 */
static const uint64_t COUNTERS[] = {0,
                                    1,
                                    1000003,
                                    ((uint64_t)1 << 33) - 1,
                                    ((uint64_t)1 << 33) - 7,
                                    ((uint64_t)1 << 33) - 16,
                                    ((uint64_t)1 << 33) - 40,
                                    ((uint64_t)5 << 33) - 3,
                                    ((uint64_t)1 << 33),
                                    ~(uint64_t)0 - 20,
                                    ~(uint64_t)0};
static const int64_t LENGTHS[] = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 100, 1023, 4099};

static void test_vector_path_draws_the_reference_uniforms_bit_for_bit(void **state) {
    (void)state;
    const char *path = ag__rng_vector_path();
    if (path) print_message("      (the vector path here: %s)\n", path);
    else print_message("      (the generic kernel table: both paths are the scalar one)\n");
    double *a = malloc(4100 * sizeof(double)), *b = malloc(4100 * sizeof(double));
    for (size_t s = 0; s < sizeof SEEDS / sizeof *SEEDS; s++)
        for (size_t c = 0; c < sizeof COUNTERS / sizeof *COUNTERS; c++)
            for (size_t l = 0; l < sizeof LENGTHS / sizeof *LENGTHS; l++) {
                int64_t n = LENGTHS[l];
                for (int i = 0; i < 4100; i++) a[i] = b[i] = -1; /* nothing past n is written */
                ag__rng_uniform_serial(SEEDS[s], COUNTERS[c], n, a);
                ag__rng_uniform_scalar(SEEDS[s], COUNTERS[c], n, b);
                if (memcmp(a, b, 4100 * sizeof(double)))
                    fail_msg("seed %llx counter %llx n %lld", (unsigned long long)SEEDS[s],
                             (unsigned long long)COUNTERS[c], (long long)n);
                for (int isa = AG_ISA_AVX2; isa <= AG_ISA_AVX512; isa++) { /* every vector path the CPU has */
                    const ag__kernel_table *K = ag__kernels_for((ag__isa)isa);
                    if (!K || !K->rng_uniform) continue;
                    for (int i = 0; i < 4100; i++) a[i] = -1;
                    K->rng_uniform(SEEDS[s], COUNTERS[c], n, a);
                    if (memcmp(a, b, 4100 * sizeof(double)))
                        fail_msg("%s: seed %llx counter %llx n %lld", ag__isa_name((ag__isa)isa),
                                 (unsigned long long)SEEDS[s], (unsigned long long)COUNTERS[c], (long long)n);
                }
                if (n > 0) { /* and the public entry (its parallel blocks) draws the same */
                    ag_rng r = {.seed = SEEDS[s], .counter = COUNTERS[c]};
                    ag_rng_uniform_f64(&r, n, a);
                    assert_memory_equal(a, b, (size_t)n * sizeof(double));
                    assert_true(r.counter == COUNTERS[c] + (uint64_t)n);
                }
            }
    free(a);
    free(b);
}

/* The masks' words are the draws' words: element e at counter c is word e % 2 of draw c + e / 2,
 * whose 53-bit integer is (word 0 << 21) ^ (word 1 >> 11). Then each path of ag__rng_keep (the
 * scalar reference and the CPU's vector ones) and ag__rng_keep itself against u < v and u >= v
 * for the words' uniforms u = x · 2^-32, as bytes and as bits (bits past n keep what was there),
 * for masks started part-way (first). */
static void check_keep(uint64_t seed, uint64_t ctr, int64_t first, int64_t n, double v, const uint32_t *x) {
    uint64_t t = ag__u32_count_below(v);
    uint8_t keep[4100], bits[4100 / 8 + 2], keep_ref[4100], bits_ref[4100 / 8 + 2];
    for (int at_least = 0; at_least < 2; at_least++) {
        memset(keep, 0xEE, sizeof keep), memset(bits, 0xA5, sizeof bits);
        memset(keep_ref, 0xEE, sizeof keep_ref), memset(bits_ref, 0xA5, sizeof bits_ref);
        for (int64_t i = 0; i < n; i++) {
            double u = x[i] * 0x1.0p-32;
            unsigned k = at_least ? u >= v : u < v;
            keep_ref[i] = (uint8_t)k;
            bits_ref[i >> 3] = (uint8_t)((bits_ref[i >> 3] & ~(1u << (i & 7))) | k << (i & 7));
        }
        /* the scalar reference, then every vector path this CPU has, whichever ag__rng_keep takes */
        static const char *const NAMES[] = {"scalar", "AVX2", "AVX-512"};
        for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++) {
            const ag__kernel_table *K = ag__kernels_for((ag__isa)isa);
            if (!K) continue;
            ag__rng_keep_with(K, seed, ctr, first, n, t, at_least, keep, bits);
            if (memcmp(keep, keep_ref, sizeof keep) || memcmp(bits, bits_ref, sizeof bits))
                fail_msg("%s: seed %llx counter %llx first %lld n %lld v %.17g at_least %d", NAMES[isa],
                         (unsigned long long)seed, (unsigned long long)ctr, (long long)first, (long long)n, v,
                         at_least);
            memset(keep, 0xEE, sizeof keep), memset(bits, 0xA5, sizeof bits);
        }
        /* each output alone */
        ag__rng_keep(seed, ctr, first, n, t, at_least, keep, NULL);
        ag__rng_keep(seed, ctr, first, n, t, at_least, NULL, bits);
        assert_memory_equal(keep, keep_ref, sizeof keep);
        assert_memory_equal(bits, bits_ref, sizeof bits);
    }
}

static void test_keep_decisions_equal_comparisons_of_the_mask_words(void **state) {
    (void)state;
    static const int64_t FIRSTS[] = {0, 1, 2, 3, 5, 64 + 3, 2048};
    uint32_t x[4100];
    double u[2100];
    for (size_t s = 0; s < sizeof SEEDS / sizeof *SEEDS; s += 3)
        for (size_t c = 0; c < sizeof COUNTERS / sizeof *COUNTERS; c++)
            for (size_t f = 0; f < sizeof FIRSTS / sizeof *FIRSTS; f++)
                for (size_t l = 0; l < sizeof LENGTHS / sizeof *LENGTHS; l++) {
                    int64_t n = LENGTHS[l], e0 = FIRSTS[f];
                    if (f > 0 && n > 1100) continue; /* the long masks from their start only */
                    /* the draws under elements e0 .. e0+n-1 */
                    uint64_t d0 = COUNTERS[c] + (uint64_t)e0 / 2;
                    ag__rng_uniform_scalar(SEEDS[s], d0, (n + 2) / 2, u);
                    for (int64_t i = 0; i < n; i++) {
                        uint64_t e = (uint64_t)(e0 + i), x53 = (uint64_t)(u[(e / 2) - (uint64_t)e0 / 2] * 0x1.0p53);
                        x[i] = ag__rng_mask_word(SEEDS[s], COUNTERS[c], e);
                        if (e % 2 ? x[i] >> 11 != (x53 & 0x1FFFFF) : x[i] != x53 >> 21)
                            fail_msg("seed %llx counter %llx element %llu: word %08x, draw's x %014llx",
                                     (unsigned long long)SEEDS[s], (unsigned long long)COUNTERS[c],
                                     (unsigned long long)e, x[i], (unsigned long long)x53);
                    }
                    /* dropout's 1 - p and p, the ends, and the words' own values and their
                     * neighbours (where < and >= turn) */
                    double vs[16] = {0, 1, 0.1, 0.9, 0.5, 0.25, 1 - 0.1, 1 - 0x1.0p-32, 0x1.0p-32, 1e-300, 0.3};
                    int nv = 11;
                    if (n > 0) {
                        double um = x[n / 2] * 0x1.0p-32;
                        vs[nv++] = um;
                        vs[nv++] = nextafter(um, 0);
                        vs[nv++] = nextafter(um, 1);
                        vs[nv++] = x[n - 1] * 0x1.0p-32;
                        vs[nv++] = nextafter(x[0] * 0x1.0p-32, 1);
                    }
                    for (int k = 0; k < nv; k++) check_keep(SEEDS[s], COUNTERS[c], e0, n, vs[k], x);
                }
}

static void test_u32_count_below_counts_the_integers_under_v(void **state) {
    (void)state;
    assert_true(ag__u32_count_below(0) == 0);
    assert_true(ag__u32_count_below(-1) == 0);
    assert_true(ag__u32_count_below(NAN) == 0);
    assert_true(ag__u32_count_below(1) == (uint64_t)1 << 32);
    assert_true(ag__u32_count_below(0.5) == (uint64_t)1 << 31);            /* x < 2^31 exactly */
    assert_true(ag__u32_count_below(nextafter(0.5, 1)) == ((uint64_t)1 << 31) + 1);
    assert_true(ag__u32_count_below(0x1.0p-32) == 1);                      /* only x = 0 */
    assert_true(ag__u32_count_below(1e-300) == 1);
    assert_true(ag__u32_count_below(1 - 0x1.0p-32) == ((uint64_t)1 << 32) - 1);
    assert_true(ag__u32_count_below(0.1) == 429496730); /* ceil(0.1 · 2^32 = 429496729.6) */
}

static void test_same_seed_gives_same_numbers(void **state) {
    (void)state;
    ag_rng a = ag_rng_new(1234), b = ag_rng_new(1234);
    assert_int_equal(memcmp(draw_uniform(&a, 1000), draw_uniform(&b, 1000), 1000 * sizeof(double)), 0);
    assert_int_equal(memcmp(draw_normal(&a, 1000), draw_normal(&b, 1000), 1000 * sizeof(double)), 0);
    ag_rng c = ag_rng_new(99), d = ag_rng_new(99);
    ag_tensor *x = ag_randn(&c, AG_F32, AG_SHAPE(7, 9));
    ag_tensor *y = ag_randn(&d, AG_F32, AG_SHAPE(7, 9));
    assert_int_equal(memcmp(x->data, y->data, 63 * sizeof(float)), 0);
}

static void test_different_seeds_give_different_numbers(void **state) {
    (void)state;
    uint64_t seeds[] = {1, 2, (uint64_t)1 << 32 | 1, (uint64_t)2 << 32 | 1};
    double *v[4];
    for (int s = 0; s < 4; s++) {
        ag_rng r = ag_rng_new(seeds[s]);
        v[s] = draw_uniform(&r, 1000);
    }
    for (int s = 0; s < 4; s++)
        for (int t = s + 1; t < 4; t++) {
            int same = 0;
            for (int i = 0; i < 1000; i++) same += v[s][i] == v[t][i];
            assert_int_equal(same, 0);
        }
}

static void test_counter_advances_so_two_draws_of_n_equal_one_of_2n(void **state) {
    (void)state;
    int64_t n = 1000;
    ag_rng a = ag_rng_new(5), b = ag_rng_new(5);
    double *first = draw_uniform(&a, n), *second = draw_uniform(&a, n), *both = draw_uniform(&b, 2 * n);
    assert_int_equal(a.counter, 2 * n);
    assert_int_equal(b.counter, 2 * n);
    assert_int_equal(memcmp(first, both, (size_t)n * sizeof(double)), 0);
    assert_int_equal(memcmp(second, both + n, (size_t)n * sizeof(double)), 0);
    /* normals too, and through tensors (two draws per element) */
    a = ag_rng_new(6);
    b = ag_rng_new(6);
    ag_tensor *x1 = ag_randn(&a, AG_F64, AG_SHAPE(3, 5));
    ag_tensor *x2 = ag_randn(&a, AG_F64, AG_SHAPE(15));
    ag_tensor *x = ag_randn(&b, AG_F64, AG_SHAPE(30));
    assert_int_equal(a.counter, 60);
    assert_int_equal(memcmp(x1->data, x->data, 15 * sizeof(double)), 0);
    assert_int_equal(memcmp(x2->data, x->data + 15 * sizeof(double), 15 * sizeof(double)), 0);
}

static void test_draws_are_identical_with_one_and_two_threads(void **state) {
    (void)state;
    int saved = omp_get_max_threads();
    ag_rng a = ag_rng_new(77), b = ag_rng_new(77);
    omp_set_num_threads(1);
    double *u1 = draw_uniform(&a, N_BIG), *n1 = draw_normal(&a, N_BIG);
    ag_tensor *t1 = ag_randn(&a, AG_F32, AG_SHAPE(300, 200));
    omp_set_num_threads(2);
    double *u2 = draw_uniform(&b, N_BIG), *n2 = draw_normal(&b, N_BIG);
    ag_tensor *t2 = ag_randn(&b, AG_F32, AG_SHAPE(300, 200));
    omp_set_num_threads(saved);
    assert_int_equal(memcmp(u1, u2, N_BIG * sizeof(double)), 0);
    assert_int_equal(memcmp(n1, n2, N_BIG * sizeof(double)), 0);
    assert_int_equal(memcmp(t1->data, t2->data, 60000 * sizeof(float)), 0);
    assert_int_equal(a.counter, b.counter);
}

static void test_uniform_stays_in_lo_hi_and_covers_it(void **state) {
    (void)state;
    ag_rng r = ag_rng_new(3);
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F64 : AG_F32;
        ag_tensor *t = ag_uniform(&r, dt, AG_SHAPE(N_BIG), -2, 3);
        double *v = ag_arena_alloc(ag_arena_current(), N_BIG * sizeof(double));
        ag_to_buffer(t, AG_F64, v);
        double lo = 1e9, hi = -1e9, sum = 0;
        for (int i = 0; i < N_BIG; i++) {
            lo = fmin(lo, v[i]);
            hi = fmax(hi, v[i]);
            sum += v[i];
        }
        assert_true(lo >= -2 && hi < 3);
        /* 25 draws are expected within 25/n of the range (width 5) from each end: none there
         * has probability e^-25 */
        assert_true(lo < -2 + 5.0 * 25 / N_BIG);
        assert_true(hi > 3 - 5.0 * 25 / N_BIG);
        /* mean 0.5, sd of the mean 5/sqrt(12 n) = 0.0046; allow 5 sd */
        assert_true(fabs(sum / N_BIG - 0.5) < 5 * 5 / sqrt(12.0 * N_BIG));
    }
}

static void test_uniform_f32_never_reaches_hi(void **state) {
    (void)state;
    /* [1, 1 + 2^-23): every double in the upper half of the range rounds to hi in f32 */
    float hi = nextafterf(1.0f, 2.0f);
    ag_rng r = ag_rng_new(11);
    ag_tensor *t = ag_uniform(&r, AG_F32, AG_SHAPE(10000), 1.0, hi);
    const float *v = (const float *)t->data;
    for (int i = 0; i < 10000; i++) {
        assert_true(v[i] >= 1.0f);
        assert_true(v[i] < hi);
    }
    /* also for the standard range, filled through a strided view */
    ag_tensor *base = ag_full(AG_F32, AG_SHAPE(4, 6), -1);
    ag_uniform_(&r, ag_slice(base, 1, 0, 6, 2), 0, 1);
    for (int i = 0; i < 24; i++) {
        float x = ((float *)base->data)[i];
        if (i % 2) assert_true(x == -1); /* untouched */
        else assert_true(x >= 0 && x < 1);
    }
}

static void test_randn_mean_and_std_within_five_sigma(void **state) {
    (void)state;
    ag_rng r = ag_rng_new(2024);
    for (int k = 0; k < 2; k++) {
        ag_dtype dt = k ? AG_F64 : AG_F32;
        ag_tensor *t = ag_randn(&r, dt, AG_SHAPE(N_BIG));
        double *v = ag_arena_alloc(ag_arena_current(), N_BIG * sizeof(double));
        ag_to_buffer(t, AG_F64, v);
        double sum = 0, sq = 0;
        int64_t within1 = 0;
        for (int i = 0; i < N_BIG; i++) {
            sum += v[i];
            within1 += fabs(v[i]) < 1;
        }
        double mean = sum / N_BIG;
        for (int i = 0; i < N_BIG; i++) sq += (v[i] - mean) * (v[i] - mean);
        double sd = sqrt(sq / (N_BIG - 1));
        /* sd of the sample mean is 1/sqrt(n) = 0.0032; of the sample sd about 1/sqrt(2n) = 0.0022.
         * 5 sigma: a correct generator fails with probability < 1e-6 (and the seed is fixed). */
        assert_true(fabs(mean) < 5 / sqrt((double)N_BIG));
        assert_true(fabs(sd - 1) < 5 / sqrt(2.0 * N_BIG));
        /* shape, not just moments: P(|z| < 1) = 0.682689, sd sqrt(p(1-p)/n) = 0.00147 */
        double p = (double)within1 / N_BIG;
        assert_true(fabs(p - 0.682689) < 5 * sqrt(0.682689 * 0.317311 / N_BIG));
    }
}

static void test_normal_fill_scales_the_standard_draw(void **state) {
    (void)state;
    ag_rng a = ag_rng_new(8), b = ag_rng_new(8);
    ag_tensor *z = ag_randn(&a, AG_F64, AG_SHAPE(50));
    ag_tensor *t = ag_empty(AG_F64, AG_SHAPE(50));
    ag_normal_(&b, t, 3, 0.5);
    for (int i = 0; i < 50; i++)
        assert_double_equal(((double *)t->data)[i], 3 + 0.5 * ((double *)z->data)[i], 1e-15);
}

static void test_manual_seed_drives_the_global_generator(void **state) {
    (void)state;
    ag_manual_seed(123);
    assert_int_equal(ag_rng_global()->seed, 123);
    assert_int_equal(ag_rng_global()->counter, 0);
    ag_tensor *g1 = ag_rand(NULL, AG_F64, AG_SHAPE(20));
    assert_int_equal(ag_rng_global()->counter, 20);
    ag_rng own = ag_rng_new(123);
    ag_tensor *o = ag_rand(&own, AG_F64, AG_SHAPE(20));
    assert_int_equal(memcmp(g1->data, o->data, 20 * sizeof(double)), 0);
    /* reseeding restarts the sequence; a different seed changes it */
    ag_manual_seed(123);
    ag_tensor *g2 = ag_rand(NULL, AG_F64, AG_SHAPE(20));
    assert_int_equal(memcmp(g1->data, g2->data, 20 * sizeof(double)), 0);
    ag_manual_seed(124);
    ag_tensor *g3 = ag_rand(NULL, AG_F64, AG_SHAPE(20));
    assert_int_not_equal(memcmp(g1->data, g3->data, 20 * sizeof(double)), 0);
    double raw[2];
    ag_manual_seed(123);
    ag_rng_uniform_f64(NULL, 2, raw); /* NULL means the global generator */
    assert_true(raw[0] == ((double *)g1->data)[0]);
}

static void test_random_tensors_reject_integer_dtypes(void **state) {
    (void)state;
    assert_null(ag_rand(NULL, AG_I64, AG_SHAPE(3)));
    tu_assert_error("ag_uniform", "i64");
    assert_null(ag_uniform(NULL, AG_BOOL, AG_SHAPE(3), 0, 1));
    tu_assert_error("ag_uniform", "bool");
}

#define T(f) cmocka_unit_test_setup_teardown(f, tu_setup, tu_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_philox_matches_reference_values),
        T(test_vector_path_draws_the_reference_uniforms_bit_for_bit),
        T(test_keep_decisions_equal_comparisons_of_the_mask_words),
        T(test_u32_count_below_counts_the_integers_under_v),
        T(test_same_seed_gives_same_numbers),
        T(test_different_seeds_give_different_numbers),
        T(test_counter_advances_so_two_draws_of_n_equal_one_of_2n),
        T(test_draws_are_identical_with_one_and_two_threads),
        T(test_uniform_stays_in_lo_hi_and_covers_it),
        T(test_uniform_f32_never_reaches_hi),
        T(test_randn_mean_and_std_within_five_sigma),
        T(test_normal_fill_scales_the_standard_draw),
        T(test_manual_seed_drives_the_global_generator),
        T(test_random_tensors_reject_integer_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
