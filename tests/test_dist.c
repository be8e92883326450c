/* Data-parallel training (nn/dist/dist.h), run by the suite as `mpirun -np 2 test_dist`: every
 * rank runs every check; a failed check prints "rank R: ..." and exits 1, and mpirun stops the
 * others. The witness for each distributed result is the same computation in one process. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attograd.h"
#include "dist_check.h"
#include "nn/dist/dist.h"

static int rank, size;

/* ---- a two-layer perceptron: fc1 (in -> hidden), tanh, fc2 (hidden -> classes) ---- */
enum { IN = 32, HIDDEN = 64, CLASSES = 8, BATCH = 16 };

typedef struct {
    ag_params *p;
    ag_linear_module fc1, fc2;
} mlp;

static mlp mlp_new(uint64_t seed) {
    mlp m = {.p = ag_params_new(AG_F32)};
    ag_rng r = ag_rng_new(seed);
    m.fc1 = ag_linear_new(m.p, "fc1", IN, HIDDEN, true, &r);
    m.fc2 = ag_linear_new(m.p, "fc2", HIDDEN, CLASSES, true, &r);
    return m;
}

/* the global batch of a step, the same on every rank: x (BATCH, IN), y (BATCH) */
static float X[BATCH * IN];
static int64_t Y[BATCH];
static void make_batch(int step) {
    ag_rng r = ag_rng_new(1000 + (uint64_t)step);
    double u[BATCH * IN];
    ag_rng_normal_f64(&r, BATCH * IN, u);
    for (int i = 0; i < BATCH * IN; i++) X[i] = (float)u[i];
    ag_rng_uniform_f64(&r, BATCH, u);
    for (int i = 0; i < BATCH; i++) Y[i] = (int64_t)(u[i] * CLASSES);
}

/* mean cross-entropy of rows [first, first + n) of the batch, scaled so that the average over
 * the ranks is the whole batch's mean when the ranks' shares differ (size · n / BATCH; 1 for
 * the whole batch in one process) */
static ag_tensor *mlp_loss(mlp *m, int64_t first, int64_t n) {
    ag_tensor *x = ag_wrap(AG_F32, AG_SHAPE(n, IN), (char *)(X + first * IN));
    ag_tensor *y = ag_wrap(AG_I64, AG_SHAPE(n), (char *)(Y + first));
    ag_tensor *h = ag_tanh(ag_linear_forward(&m->fc1, x));
    ag_tensor *loss = ag_cross_entropy(ag_linear_forward(&m->fc2, h), y, NULL);
    return n == BATCH ? loss : ag_mul_scalar(loss, (double)size * (double)n / BATCH);
}

/* this rank's rows of a batch of b */
static void my_rows(int64_t b, int64_t *first, int64_t *n) {
    *first = b * rank / size;
    *n = b * (rank + 1) / size - *first;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

static float *copy_slab(const char *slab, int64_t n) {
    float *c = malloc(sizeof *c * (size_t)n);
    memcpy(c, slab, sizeof *c * (size_t)n);
    return c;
}

/* the end of a training run: the ranks hold the same parameters (d: a distributed run), and
 * a copy of them is returned (*numel floats) before the model is freed */
static float *finish_training(ag_dist *d, ag_optim *opt, ag_params *p, int64_t *numel) {
    if (d) CHECK(ag_dist_params_identical(d), "ranks hold different parameters after training");
    float *out = copy_slab(p->data, p->numel);
    *numel = p->numel;
    ag_optim_free(opt);
    ag_dist_free(d);
    ag_params_free(p);
    return out;
}

/* rank r starts from seed r + 1; after ag_dist_new every rank holds rank 0's parameters, which
 * seed 1 makes again here */
static void test_broadcast_gives_every_rank_rank0s_parameters(void) {
    mlp m = mlp_new(1 + (uint64_t)rank), ref = mlp_new(1);
    CHECK(size == 1 || rank == 0 || max_abs_diff((float *)m.p->data, (float *)ref.p->data, m.p->numel) > 0,
          "ranks start from different values");
    ag_dist *d = ag_dist_new(m.p, NULL);
    CHECK(memcmp(m.p->data, ref.p->data, sizeof(float) * (size_t)m.p->numel) == 0, "not rank 0's values");
    CHECK(ag_dist_params_identical(d), "ranks differ");
    ag_dist_free(d);
    ag_params_free(m.p);
    ag_params_free(ref.p);
    if (rank == 0) printf("ok broadcast\n");
}

/* each rank's half of the batch, averaged, is the gradient of the whole batch in one process;
 * buckets of 256 bytes: three of them */
static void test_averaged_gradient_equals_single_process_gradient(void) {
    mlp m = mlp_new(7);
    make_batch(0);
    ag_params_zero_grad(m.p);
    ag_backward(mlp_loss(&m, 0, BATCH), NULL);
    float *ref = copy_slab(m.p->grad, m.p->numel);
    ag_arena_reset(ag_arena_current());

    ag_dist *d = ag_dist_new(m.p, &(ag_dist_opts){.bucket_bytes = 256});
    CHECK(ag_dist_bucket_count(d) >= 3, "%d buckets", ag_dist_bucket_count(d));
    int64_t first, n;
    my_rows(BATCH, &first, &n);
    ag_params_zero_grad(m.p);
    ag_backward(mlp_loss(&m, first, n), NULL);
    ag_dist_sync_grads(d);
    double diff = max_abs_diff((float *)m.p->grad, ref, m.p->numel), scale = max_abs(ref, m.p->numel);
    CHECK(diff <= 4e-7 * scale, "largest difference %g (largest gradient %g)", diff, scale);
    CHECK(ag_dist_same(m.p->grad, sizeof(float) * (size_t)m.p->numel, "the gradient", NULL, 0), "ranks differ");
    if (rank == 0) printf("ok averaged gradient: largest difference %.3g (largest gradient %.3g)\n", diff, scale);
    ag_dist_free(d);
    ag_arena_reset(ag_arena_current());
    ag_params_free(m.p);
    free(ref);
}

static ag_tensor *sum_squares(ag_tensor *y) { return ag_sum(ag_mul(y, y), 0, NULL, false); }

/* Parameters a, b, c, unused, one bucket each (bucket 0 = unused, 1 = c, 2 = b, 3 = a).
 * y = ((x cᵀ) aᵀ) bᵀ: backward finishes b first, then a, then c, so buckets become ready in the
 * order 2, 3, 1 and start only once 1 (and the unused 0) can go first. */
static void test_buckets_completing_out_of_order_give_the_right_gradient(void) {
    ag_params *p = ag_params_new(AG_F32);
    ag_tensor *a = ag_params_add(p, "a", 2, (int64_t[]){16, 16});
    ag_tensor *b = ag_params_add(p, "b", 2, (int64_t[]){4, 16});
    ag_tensor *c = ag_params_add(p, "c", 2, (int64_t[]){16, IN});
    ag_params_add(p, "unused", 1, (int64_t[]){8});
    ag_rng r = ag_rng_new(3);
    ag_normal_(&r, p->flat, 0.0, 0.3);
    make_batch(1);
    ag_tensor *x = ag_wrap(AG_F32, AG_SHAPE(BATCH, IN), (char *)X);
    ag_params_zero_grad(p);
    ag_backward(sum_squares(ag_linear(ag_linear(ag_linear(x, c, NULL), a, NULL), b, NULL)), NULL);
    float *ref = copy_slab(p->grad, p->numel);
    ag_arena_reset(ag_arena_current());

    ag_dist *d = ag_dist_new(p, &(ag_dist_opts){.bucket_bytes = 1});
    CHECK(ag_dist_bucket_count(d) == 4, "%d buckets", ag_dist_bucket_count(d));
    int64_t first, n;
    my_rows(BATCH, &first, &n);
    x = ag_wrap(AG_F32, AG_SHAPE(n, IN), (char *)(X + first * IN));
    ag_params_zero_grad(p);
    /* a sum, not a mean: the ranks' gradients add up to the whole batch's, the average is 1/size of it */
    ag_backward(sum_squares(ag_linear(ag_linear(ag_linear(x, c, NULL), a, NULL), b, NULL)), NULL);
    ag_dist_sync_grads(d);
    int order[8], k = ag_dist_ready_order(d, order, 8);
    CHECK(k == 3 && order[0] == 2 && order[1] == 3 && order[2] == 1, "ready order (%d) %d %d %d", k, order[0],
          order[1], order[2]);
    for (int64_t i = 0; i < p->numel; i++) ref[i] /= (float)size;
    double diff = max_abs_diff((float *)p->grad, ref, p->numel), scale = max_abs(ref, p->numel);
    CHECK(diff <= 4e-7 * scale, "largest difference %g (largest gradient %g)", diff, scale);
    if (rank == 0) printf("ok out-of-order buckets: ready order 2 3 1, largest difference %.3g\n", diff);
    ag_dist_free(d);
    ag_arena_reset(ag_arena_current());
    ag_params_free(p);
    free(ref);
}

/* 50 Adam steps with clipping: rank r trains on its half of each batch (distributed), or one
 * process on the whole batch; returns the final parameters (malloc'd) */
static float *train(bool distributed, int threads, int64_t *numel) {
    ag_set_num_threads(threads);
    mlp m = mlp_new(11);
    ag_dist *d = distributed ? ag_dist_new(m.p, &(ag_dist_opts){.bucket_bytes = 4096}) : NULL;
    ag_adam_config adam = ag_adam_defaults();
    adam.lr = 1e-2;
    ag_optim *opt = ag_adam_new(m.p, &adam);
    for (int step = 0; step < 50; step++) {
        make_batch(step);
        int64_t first = 0, n = BATCH;
        if (distributed) my_rows(BATCH, &first, &n);
        ag_params_zero_grad(m.p);
        ag_backward(mlp_loss(&m, first, n), NULL);
        if (d) ag_dist_sync_grads(d);
        ag_clip_grad_norm(m.p, 0.5);
        ag_optim_step(opt);
        ag_arena_reset(ag_arena_current());
    }
    return finish_training(d, opt, m.p, numel);
}

static void test_two_processes_train_as_one_with_the_whole_batch(void) {
    int64_t n;
    float *one = train(false, 1, &n), *dist1 = train(true, 1, &n), *dist2 = train(true, 2, &n);
    CHECK(memcmp(dist1, dist2, sizeof(float) * (size_t)n) == 0, "1 and 2 threads per rank differ");
    double diff = max_abs_diff(one, dist1, n), scale = max_abs(one, n);
    if (rank == 0)
        printf("ok %d processes sharing a batch of %d vs 1 process, 50 steps: largest parameter difference %.3g "
               "(largest parameter %.3g); bit-identical at 1 and 2 threads\n", size, BATCH, diff, scale);
    CHECK(diff <= 2e-6 * scale, "largest parameter difference %g", diff);
    free(one);
    free(dist1);
    free(dist2);
}

/* ---- a Transformer with dropout: the ranks draw each pair's masks as one process does ---- */
enum { TB = 8, TL = 6, TV = 11, TD = 16, PAD = 0 };

typedef struct {
    ag_params *p;
    ag_embedding_module emb;
    ag_transformer_module tf;
    ag_linear_module out;
} seq2seq;

static seq2seq seq2seq_new(void) {
    seq2seq m = {.p = ag_params_new(AG_F32)};
    ag_rng r = ag_rng_new(21);
    ag_transformer_config c = ag_transformer_defaults(TD, 2);
    c.dim_feedforward = 24;
    c.dropout = 0.2;
    c.batch_first = true;
    c.skip_padding = true;
    m.emb = ag_embedding_new(m.p, "emb", TV, TD, PAD, &r);
    m.tf = ag_transformer_new(m.p, "tf", &c, 1, 1, &r);
    m.out = ag_linear_new(m.p, "out", TD, TV, true, &r);
    return m;
}

/* step's batch: pair b has length 2 + (b + step) % 5, tokens from a formula, PAD after */
static int64_t SRC[TB * TL], TGT[TB * TL];
static void make_pairs(int step) {
    for (int b = 0; b < TB; b++) {
        int n = 2 + (b + step) % 5;
        for (int i = 0; i < TL; i++) {
            SRC[b * TL + i] = i < n ? 1 + (b * 3 + i * 5 + step) % (TV - 1) : PAD;
            TGT[b * TL + i] = i < n ? 1 + (b * 7 + i * 2 + step) % (TV - 1) : PAD;
        }
    }
}

static int64_t tokens(int64_t first, int64_t n) {
    int64_t t = 0;
    for (int64_t i = first * TL; i < (first + n) * TL; i++) t += TGT[i] != PAD;
    return t;
}

/* the mean token loss of rows [first, first + n), scaled so that the ranks' average is the
 * whole batch's mean (size · its tokens / the batch's) */
static ag_tensor *seq2seq_loss(seq2seq *m, int64_t first, int64_t n, int ranks, ag_rng *rng) {
    ag_tensor *src = ag_wrap(AG_I64, AG_SHAPE(n, TL), (char *)(SRC + first * TL));
    ag_tensor *tgt = ag_wrap(AG_I64, AG_SHAPE(n, TL), (char *)(TGT + first * TL));
    ag_tensor *spad = ag_eq_scalar(src, PAD), *tpad = ag_eq_scalar(tgt, PAD);
    ag_transformer_args a = {.src_key_padding_mask = spad, .tgt_key_padding_mask = tpad,
                             .memory_key_padding_mask = spad, .tgt_is_causal = true,
                             .tgt_mask = ag_square_subsequent_mask(TL, AG_F32), .training = true, .rng = rng};
    ag_tensor *y =
        ag_transformer_forward(&m->tf, ag_embedding_forward(&m->emb, src), ag_embedding_forward(&m->emb, tgt), &a);
    ag_loss_config lc = ag_loss_defaults();
    lc.ignore_index = PAD;
    ag_tensor *logits = ag_reshape(ag_linear_forward(&m->out, y), AG_SHAPE(-1, TV));
    ag_tensor *loss = ag_cross_entropy(logits, ag_reshape(tgt, AG_SHAPE(-1)), &lc);
    return ag_mul_scalar(loss, (double)ranks * (double)tokens(first, n) / (double)tokens(0, TB));
}

/* 30 steps of SGD with momentum on the Transformer, each rank on its rows (rng shared over the
 * batch), or one process on all of them; returns the final parameters (malloc'd). Not Adam:
 * it turns the rounding noise of gradients that are 0 in exact arithmetic (the key bias's)
 * into steps of the full learning rate. */
static float *train_seq2seq(bool distributed, int64_t *numel) {
    seq2seq m = seq2seq_new();
    ag_dist *d = distributed ? ag_dist_new(m.p, NULL) : NULL;
    ag_sgd_config sgd = ag_sgd_defaults(0.1);
    sgd.momentum = 0.9;
    ag_optim *opt = ag_sgd_new(m.p, &sgd);
    ag_rng rng = ag_rng_new(99);
    for (int step = 0; step < 30; step++) {
        make_pairs(step);
        int64_t first = 0, n = TB;
        if (distributed) {
            my_rows(TB, &first, &n);
            ag_rng_share_batch(&rng, first, n, TB);
        }
        ag_params_zero_grad(m.p);
        ag_backward(seq2seq_loss(&m, first, n, distributed ? size : 1, &rng), NULL);
        if (d) ag_dist_sync_grads(d);
        ag_optim_step(opt);
        ag_arena_reset(ag_arena_current());
    }
    return finish_training(d, opt, m.p, numel);
}

/* with dropout 0.2 on: the same parameters to f32 rounding; a run with other masks (another
 * seed) moves them by far more, so the check tells the masks apart */
static void test_ranks_draw_each_pairs_dropout_masks_as_one_process(void) {
    int64_t n;
    float *one = train_seq2seq(false, &n), *dist = train_seq2seq(true, &n);
    double diff = max_abs_diff(one, dist, n), scale = max_abs(one, n);
    if (rank == 0)
        printf("ok Transformer with dropout, %d processes sharing a batch of %d pairs vs 1 process, 30 steps: "
               "largest parameter difference %.3g (largest parameter %.3g)\n", size, TB, diff, scale);
    CHECK(diff <= 2e-6 * scale, "largest parameter difference %g", diff);
    free(one);
    free(dist);
}

/* one rank's failure, or a difference from rank 0, is known to every rank by the lowest rank */
static void test_agree_and_same_name_the_failing_rank(void) {
    char msg[256];
    CHECK(ag_dist_agree(true, NULL, msg, sizeof msg), "all ok");
    bool ok = ag_dist_agree(rank != size - 1, "cannot open corpus.tsv: No such file or directory", msg, sizeof msg);
    char want[256];
    snprintf(want, sizeof want, "rank %d: cannot open corpus.tsv: No such file or directory", size - 1);
    CHECK(!ok && strcmp(msg, want) == 0, "'%s'", msg);
    int64_t vocab = 100 + (rank == size - 1 && size > 1);
    ok = ag_dist_same(&vocab, sizeof vocab, "the vocabulary", msg, sizeof msg);
    snprintf(want, sizeof want, "rank %d: the vocabulary differs from rank 0's", size - 1);
    CHECK(size == 1 ? ok : !ok && strcmp(msg, want) == 0, "'%s'", msg);
    CHECK(ag_dist_sum_i64(rank + 1) == (int64_t)size * (size + 1) / 2, "sum");
    CHECK(ag_dist_any(rank == size - 1) && !ag_dist_any(false), "any");
    if (rank == 0) printf("ok agreement: '%s'\n", msg);
}

/* `test_dist die signal|exit|exit0|finalize`: the last rank dies (SIGKILL), exits 3, exits 0
 * without ag_dist_finalize, or leaves with ag_dist_finalize in the middle of training while
 * the others wait for its gradients; tests/dist_cli.sh checks that the job stops promptly and
 * names it */
static int die(const char *how) {
    mlp m = mlp_new(5);
    ag_dist *d = ag_dist_new(m.p, NULL);
    for (int step = 0;; step++) {
        make_batch(step);
        int64_t first, n;
        my_rows(BATCH, &first, &n);
        ag_params_zero_grad(m.p);
        ag_backward(mlp_loss(&m, first, n), NULL);
        if (step == 3 && rank == size - 1) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            fprintf(stderr, "rank %d: dying (%s) at %.3f\n", rank, how,
                    (double)now.tv_sec + 1e-9 * (double)now.tv_nsec);
            if (strcmp(how, "signal") == 0) raise(SIGKILL);
            if (strcmp(how, "finalize") == 0) {
                ag_dist_free(d);
                ag_dist_finalize();
            }
            exit(strcmp(how, "exit") == 0 ? 3 : 0);
        }
        ag_dist_sync_grads(d);
        ag_arena_reset(ag_arena_current());
    }
}

int main(int argc, char **argv) {
    if (!ag_dist_init(&argc, &argv)) return 1;
    rank = ag_dist_rank();
    size = ag_dist_size();
    CHECK(size >= 2, "run under mpirun -np 2 (or more)");
    if (argc > 2 && strcmp(argv[1], "die") == 0) return die(argv[2]);
    test_broadcast_gives_every_rank_rank0s_parameters();
    test_averaged_gradient_equals_single_process_gradient();
    test_buckets_completing_out_of_order_give_the_right_gradient();
    test_two_processes_train_as_one_with_the_whole_batch();
    test_ranks_draw_each_pairs_dropout_masks_as_one_process();
    test_agree_and_same_name_the_failing_rank();
    ag_dist_finalize();
    return 0;
}
