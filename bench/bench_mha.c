/* nn.MultiheadAttention forward, and forward + backward: self-attention, batch_first, a key
 * padding mask over the last quarter of the keys, need_weights off, eval mode (no dropout).
 * bench/bench_mha.py runs the same shapes and data through torch.
 * usage: bench_mha [--quick] [--reps N] [--only B,L,E,H] */

#include "../attograd.h"
#include "bench_util.h"

typedef struct {
    int B, L, E, H;
} shape_t;

/* 2BL(4E² + 2LE): the QKV and output projections and the two attention products */
static double mha_gflop(shape_t s) {
    return 2.0 * s.B * s.L * (4.0 * s.E * s.E + 2.0 * s.L * s.E) * 1e-9;
}

static void run(shape_t s, int reps, int threads) {
    ag_arena *persist = ag_arena_new(16 << 20), *step = ag_arena_new(64 << 20);
    ag_arena_use(persist);
    ag_params *p = ag_params_new(AG_F32);
    ag_mha_config cfg = ag_mha_defaults(s.E, s.H);
    cfg.batch_first = true;
    ag_mha_module m = ag_mha_new(p, "", &cfg, NULL);
    for (int i = 0; i < p->count; i++) bench_fill_tensor(p->list[i], 10 + i, 1.0 / sqrt((double)s.E));
    ag_tensor *x = ag_empty(AG_F32, AG_SHAPE(s.B, s.L, s.E)), *gy = ag_empty(AG_F32, AG_SHAPE(s.B, s.L, s.E));
    bench_fill_tensor(x, 1, 1.0);
    bench_fill_tensor(gy, 2, 1.0);
    ag_tensor *kpm = ag_zeros(AG_BOOL, AG_SHAPE(s.B, s.L));
    for (int b = 0; b < s.B; b++)
        for (int j = s.L - s.L / 4; j < s.L; j++) ag_set(kpm, (int64_t[]){b, j}, 1);
    ag_mha_args args = {.key_padding_mask = kpm};
    char shape[64];
    snprintf(shape, sizeof shape, "%d,%d,%d,%d", s.B, s.L, s.E, s.H);
    double *t = malloc(sizeof(double) * (size_t)reps), gflop = mha_gflop(s);
    int warm = reps / 5 + 2;

    for (int pass = 0; pass < 2; pass++) { /* 0: forward, grad mode off; 1: forward + backward */
        bool bwd = pass == 1;
        double check = 0;
        uint64_t allocs = 0;
        for (int i = 0; i < warm + reps; i++) {
            ag_arena_use(step);
            ag_arena_reset(step);
            if (i == warm) allocs = ag_alloc_count();
            double t0 = bench_now_ms();
            bool prev = ag_set_grad_enabled(bwd);
            ag_tensor *xi = ag_wrap(AG_F32, AG_SHAPE(s.B, s.L, s.E), x->data); /* a fresh leaf, no copy */
            ag_requires_grad_(xi, bwd);
            ag_tensor *y = ag_mha_forward(&m, xi, xi, xi, &args, NULL);
            if (bwd) ag_backward(y, gy);
            ag_set_grad_enabled(prev);
            if (i >= warm) t[i - warm] = bench_now_ms() - t0;
            if (i == 0) check = bench_checksum(bwd ? xi->grad : y);
        }
        allocs = ag_alloc_count() - allocs;
        char note[128];
        snprintf(note, sizeof note, "check=%.6g,allocs=%llu", check, (unsigned long long)allocs);
        bench_result(bwd ? "mha_fwd_bwd" : "mha_fwd", shape, threads, bench_median(t, reps),
                     bwd ? 3 * gflop : gflop, note);
    }
    free(t);
    ag_arena_use(NULL);
    ag_params_free(p);
    ag_arena_free(step);
    ag_arena_free(persist);
}

int main(int argc, char **argv) {
    int reps = bench_reps(argc, argv, 60), threads = bench_threads();
    shape_t shapes[] = {{32, 64, 256, 8}, {64, 16, 64, 4}, {8, 256, 512, 8}};
    const char *only = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "%d,%d,%d,%d", shapes[i].B, shapes[i].L, shapes[i].E, shapes[i].H);
        if (!only || !strcmp(only, key)) run(shapes[i], reps, threads);
    }
    return 0;
}
