/* Training steps of the toy translation Transformer (examples/translate's model, without its
 * gradient clipping and learning-rate schedule): Embedding·√d + sinusoidal positions →
 * nn.Transformer (batch_first, post-norm, relu, dropout 0.1) → Linear to the vocabulary →
 * cross entropy with label smoothing 0.1 and ignore_index = pad, padding masks on source, target and memory, a causal target mask, Adam.
 * The padded positions (sentence b is len - b % 8 long) are not computed (skip_padding), unless
 * --no-skip-padding; torch computes them, as nn.Transformer does in training.
 * bench/bench_train.py builds the same model in torch with the same data and weights.
 *   --config small: d=128, 4 heads, 2+2 layers, ff=512, batch 64, lengths 20, vocab 40
 *   --config large: d=256, 8 heads, 3+3 layers, ff=1024, batch 64, lengths 32, vocab 1000
 *   --rss: a few steps only, then print the peak resident set (run it in its own process)
 *   --recompute: each attention block recomputed in backward (recompute_attention, as
 *     attograd-translate --recompute-attention trains); the row is then train_<config>_recompute
 *   --keep-ff: the feed-forward blocks keep their hidden activation for backward, as torch does,
 *     instead of recomputing it (keep_ff_activation); the row is then train_<config>_keepff
 *   --no-skip-padding: compute the padded positions too (skip_padding off; on by default, as
 *     attograd-translate trains: the loss ignores them); the row is then train_<config>_padded
 *   --busy: only names the row train_<config>_busy: bench/run.sh runs it while a busy loop
 *     (another process's work) occupies one core
 *   --dist: data-parallel under mpirun (nn/dist/dist.h): each of the ranks takes its share of
 *     the batch's rows (the same global batch); rank 0 prints the row train_<config>_np<ranks>
 *     (bench_train.py --ddp is PyTorch's DistributedDataParallel on the same split)
 * Notes printed: loss0 (eval loss before training: both sides must agree), final (loss of the
 * last step: equal for every thread count), allocs (heap allocations during the timed steps),
 * used (the threads the timed steps ran with: fewer than asked while following the load), gemm
 * (the GEMM work of one step of this process, ag_gemm_flops: with skip_padding less than the
 * model FLOPs the rates count, which include the padded positions). */

#include <omp.h>

#include "../attograd.h"
#ifdef AG_HAVE_MPI
#include "../nn/dist/dist.h"
#endif
#include "bench_util.h"

enum { PAD = 0, BOS = 1, EOS = 2 };

typedef struct {
    const char *name;
    int d, heads, enc, dec, ff, batch, len, vocab, reps;
} config;

static const config CONFIGS[] = {
    {"small", 128, 4, 2, 2, 512, 64, 20, 40, 30},
    {"large", 256, 8, 3, 3, 1024, 64, 32, 1000, 8},
};

/* GEMM flops of one forward: projections, attention products, feed-forward, generator */
static double forward_flops(const config *c) {
    double N = c->batch, S = c->len, T = c->len, d = c->d, ff = c->ff, V = c->vocab;
    double enc = 8 * N * S * d * d + 4 * N * S * S * d + 4 * N * S * d * ff;
    double dec = 8 * N * T * d * d + 4 * N * T * T * d          /* self-attention */
                 + 4 * N * T * d * d + 4 * N * S * d * d + 4 * N * T * S * d /* cross-attention */
                 + 4 * N * T * d * ff;
    return c->enc * enc + c->dec * dec + 2 * N * T * d * V;
}

/* Sentence b has length len - b % 8 (so every batch has padding), tokens from a formula:
 * src (N,S), tgt_in = BOS + y[:-1], tgt_out = y; PAD after the end. */
static void make_batch(const config *c, int64_t *src, int64_t *tgt_in, int64_t *tgt_out) {
    int L = c->len, V = c->vocab;
    for (int b = 0; b < c->batch; b++) {
        int n = L - b % 8;
        for (int i = 0; i < L; i++) {
            src[b * L + i] = i < n - 1 ? 3 + (b * 7 + i * 13) % (V - 3) : i == n - 1 ? EOS : PAD;
            int64_t y = i < n - 1 ? 3 + (b * 5 + i * 11 + 1) % (V - 3) : i == n - 1 ? EOS : PAD;
            tgt_out[b * L + i] = y;
            tgt_in[b * L + i] = i == 0 ? BOS : tgt_out[b * L + i - 1];
        }
        for (int i = 1; i < L; i++)
            if (tgt_out[b * L + i - 1] == PAD) tgt_in[b * L + i] = PAD;
    }
}

typedef struct {
    const config *c;
    ag_embedding_module src_emb, tgt_emb;
    ag_transformer_module tf;
    ag_linear_module generator;
    ag_tensor *pe; /* (len, d) */
} model;

static ag_tensor *embed(const model *m, const ag_embedding_module *e, ag_tensor *ids) {
    /* in place: the embedding rows and their products are read by no backward */
    ag_tensor *x = ag_mul_scalar_(ag_embedding_forward(e, ids), sqrt((double)m->c->d));
    return ag_add_(x, m->pe);
}

/* mean cross entropy of one batch */
static ag_tensor *loss_of(const model *m, ag_tensor *src, ag_tensor *tin, ag_tensor *tout, bool training) {
    const config *c = m->c;
    ag_tensor *spad = ag_eq_scalar(src, PAD), *tpad = ag_eq_scalar(tin, PAD);
    ag_transformer_args a = {.tgt_mask = ag_square_subsequent_mask(c->len, AG_F32),
                             .src_key_padding_mask = spad,
                             .tgt_key_padding_mask = tpad,
                             .memory_key_padding_mask = spad,
                             .training = training};
    ag_tensor *h = ag_transformer_forward(&m->tf, embed(m, &m->src_emb, src), embed(m, &m->tgt_emb, tin), &a);
    ag_tensor *logits = ag_linear_forward(&m->generator, h);
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD;
    lc.label_smoothing = 0.1;
    return ag_cross_entropy(ag_reshape(logits, AG_SHAPE(-1, c->vocab)), ag_reshape(tout, AG_SHAPE(-1)), &lc);
}

int main(int argc, char **argv) {
    const config *c = &CONFIGS[0];
    bool rss = false, recompute = false, keep_ff = false, skip_padding = true, busy = false, dist = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) c = !strcmp(argv[++i], "large") ? &CONFIGS[1] : &CONFIGS[0];
        if (!strcmp(argv[i], "--rss")) rss = true;
        if (!strcmp(argv[i], "--recompute")) recompute = true;
        if (!strcmp(argv[i], "--keep-ff")) keep_ff = true;
        if (!strcmp(argv[i], "--no-skip-padding")) skip_padding = false;
        if (!strcmp(argv[i], "--busy")) busy = true;
        if (!strcmp(argv[i], "--dist")) dist = true;
    }
    int rank = 0, ranks = 1;
#ifdef AG_HAVE_MPI
    if (dist && !ag_dist_init(&argc, &argv)) return 1;
    rank = dist ? ag_dist_rank() : 0;
    ranks = dist ? ag_dist_size() : 1;
#else
    if (dist) {
        fprintf(stderr, "bench_train: --dist needs a build with MPI\n");
        return 1;
    }
#endif
    int reps = rss ? 3 : bench_reps(argc, argv, c->reps), threads = bench_threads(), warm = rss ? 2 : 3;
    ag_arena *persist = ag_arena_new(1 << 20), *step = ag_arena_new(64 << 20);
    ag_arena_use(persist);
    ag_params *p = ag_params_new(AG_F32);
    model m = {.c = c};
    ag_transformer_config tc = ag_transformer_defaults(c->d, c->heads);
    tc.dim_feedforward = c->ff;
    tc.batch_first = true;
    tc.recompute_attention = recompute;
    tc.keep_ff_activation = keep_ff;
    tc.skip_padding = skip_padding;
    m.src_emb = ag_embedding_new(p, "src_emb", c->vocab, c->d, PAD, NULL);
    m.tgt_emb = ag_embedding_new(p, "tgt_emb", c->vocab, c->d, PAD, NULL);
    m.tf = ag_transformer_new(p, "transformer", &tc, c->enc, c->dec, NULL);
    m.generator = ag_linear_new(p, "generator", c->d, c->vocab, true, NULL);
    /* weights from the shared formula, in state_dict order: the torch side fills the same */
    for (int i = 0; i < p->count; i++) {
        ag_tensor *w = p->list[i];
        const char *dot = strrchr(w->name, '.');
        if (w->ndim == 2) bench_fill_tensor(w, 10 + i, 1.0 / sqrt((double)w->shape[1]));
        else if (strstr(w->name, "norm") && !strcmp(dot, ".weight")) ag_fill_(w, 1.0);
        else bench_fill_tensor(w, 10 + i, 0.02);
    }
    m.pe = ag_sinusoidal_positions(c->len, c->d, AG_F32);
    int64_t n = (int64_t)c->batch * c->len;
    int64_t *ids = malloc(sizeof(int64_t) * 3 * (size_t)n);
    make_batch(c, ids, ids + n, ids + 2 * n);
    /* this rank's rows (all of them in one process): each half holds every length class alike,
     * so the ranks' mean losses average to the batch's */
    int64_t r0 = (int64_t)c->batch * rank / ranks, rows = (int64_t)c->batch * (rank + 1) / ranks - r0;
    ag_tensor *src = ag_from_buffer(AG_I64, AG_SHAPE(rows, c->len), ids + r0 * c->len);
    ag_tensor *tin = ag_from_buffer(AG_I64, AG_SHAPE(rows, c->len), ids + n + r0 * c->len);
    ag_tensor *tout = ag_from_buffer(AG_I64, AG_SHAPE(rows, c->len), ids + 2 * n + r0 * c->len);
    ag_adam_config adam = ag_adam_defaults();
    adam.lr = 1e-4;
    adam.betas[1] = 0.98;
    adam.eps = 1e-9;
    ag_optim *opt = ag_adam_new(p, &adam);
#ifdef AG_HAVE_MPI
    ag_dist *d = dist ? ag_dist_new(p, NULL) : NULL;
#endif

    ag_arena_use(step);
    bool prev = ag_set_grad_enabled(false);
    double loss0 = ag_item(loss_of(&m, src, tin, tout, false));
    ag_set_grad_enabled(prev);

    double *t = malloc(sizeof(double) * (size_t)reps), *ts = malloc(sizeof(double) * (size_t)reps), final = 0;
    uint64_t allocs = 0, flops = 0;
    int used_min = 1 << 20, used_max = 0; /* the step's OpenMP count, taken up at the reset */
    for (int i = 0; i < warm + reps; i++) {
        if (i == warm) {
            allocs = ag_alloc_count();
            flops = ag_gemm_flops();
        }
        double t0 = bench_now_ms();
        ag_arena_reset(step);
        if (i >= warm) {
            int used = omp_get_max_threads();
            used_min = used < used_min ? used : used_min;
            used_max = used > used_max ? used : used_max;
        }
        ag_params_zero_grad(p);
        ag_tensor *loss = loss_of(&m, src, tin, tout, true);
        ag_backward(loss, NULL);
#ifdef AG_HAVE_MPI
        double s0 = bench_now_ms();
        if (d) ag_dist_sync_grads(d);
        if (i >= warm) ts[i - warm] = bench_now_ms() - s0;
#endif
        ag_optim_step(opt);
        if (i >= warm) t[i - warm] = bench_now_ms() - t0;
        final = ag_item(loss);
    }
    allocs = ag_alloc_count() - allocs;
    flops = ag_gemm_flops() - flops;
    /* --dist: the wait left after backward (sync) against the whole reduction with nothing to
     * hide behind (comm: a sync with no backward before it starts every bucket then) */
    char comm[128] = "";
#ifdef AG_HAVE_MPI
    if (d) {
        double tc[5];
        for (int i = 0; i < 5; i++) {
            ag_dist_sync_grads(d); /* every rank enters together */
            double s0 = bench_now_ms();
            ag_dist_sync_grads(d);
            tc[i] = bench_now_ms() - s0;
        }
        int64_t first, end;
        ag_dist_bucket_range(d, ag_dist_bucket_count(d) - 1, &first, &end);
        snprintf(comm, sizeof comm, ",sync=%.1fms,comm=%.1fms,grad=%.1fMB,buckets=%d,last=%.1fMB", bench_median(ts, reps),
                 bench_median(tc, 5), (double)p->numel * 4e-6, ag_dist_bucket_count(d), (double)(end - first) * 4e-6);
    }
#endif
    char shape[96], note[256];
    snprintf(shape, sizeof shape, "d%d,h%d,%d+%d,ff%d,N%d,L%d,V%d", c->d, c->heads, c->enc, c->dec, c->ff, c->batch,
             c->len, c->vocab);
    char used[32];
    snprintf(used, sizeof used, used_min == used_max ? "%d" : "%d-%d", used_min, used_max);
    snprintf(note, sizeof note, "loss0=%.6g,final=%.9g,allocs=%llu,arena=%.0fMiB,used=%s,gemm=%.2fGF%s", loss0,
             final, (unsigned long long)allocs, (double)ag_arena_used(step) / (1 << 20), used,
             (double)flops / reps * 1e-9, comm);
    char name[64], np[16] = "";
    if (dist) snprintf(np, sizeof np, "_np%d", ranks);
    snprintf(name, sizeof name, "train_%s%s%s%s%s%s%s", c->name, recompute ? "_recompute" : "", keep_ff ? "_keepff" : "",
             skip_padding ? "" : "_padded", busy ? "_busy" : "", np, rss ? "_rss" : "");
    if (rank > 0) {
    } else if (rss) bench_result(name, shape, threads, bench_peak_rss_mib(), 0, "ru_maxrss");
    else bench_result(name, shape, threads, bench_median(t, reps), 3 * forward_flops(c) * 1e-9, note);
    free(t);
    free(ts);
    free(ids);
    ag_optim_free(opt);
#ifdef AG_HAVE_MPI
    if (d) {
        ag_dist_free(d);
        ag_dist_finalize();
    }
#endif
    ag_arena_use(NULL);
    ag_params_free(p);
    ag_arena_free(step);
    ag_arena_free(persist);
    return 0;
}
