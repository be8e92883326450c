/* attograd-translate train under mpirun (train_dist.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "train_dist.h"

/* the tokens this rank predicts: non-pad entries of its rows of tgt_out */
static int64_t tokens_of_rows(const tr_batch *bt, int64_t first, int64_t n) {
    int64_t t = 0;
    for (int64_t i = first * bt->Lt; i < (first + n) * bt->Lt; i++) t += bt->tgt_out[i] != PAD_ID;
    return t;
}

void tr_dist_rows(const tr_batch *bt, int64_t lo, int64_t hi, ag_rng *rng, int64_t *first, int64_t *n,
                  double *loss_scale) {
    int r = tr_dist_rank(), size = tr_dist_size();
    if (size == 1 && lo == 0 && hi == bt->B) { /* the whole batch in one process */
        *first = 0;
        *n = bt->B;
        *loss_scale = 1.0;
        return;
    }
    *first = lo + (hi - lo) * r / size;
    *n = lo + (hi - lo) * (r + 1) / size - *first;
    *loss_scale = bt->ntokens ? (double)size * (double)tokens_of_rows(bt, *first, *n) / (double)bt->ntokens : 0.0;
    if (*n > 0) ag_rng_share_batch(rng, *first, *n, bt->B);
}

static volatile sig_atomic_t signalled; /* SIGINT or SIGTERM reached this process */
static void on_signal(int sig) {
    (void)sig;
    signalled = 1;
}

void tr_dist_catch_signals(bool on) {
    struct sigaction sa = {.sa_handler = on ? on_signal : SIG_DFL};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

#ifdef AG_HAVE_MPI
#include "nn/dist/dist.h"

/* ids the dataset's pairs use */
static int64_t ids_used(const tr_dataset *d) {
    int64_t end = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (d->src_start[i] + d->src_len[i] > end) end = d->src_start[i] + d->src_len[i];
        if (d->tgt_start[i] + d->tgt_len[i] > end) end = d->tgt_start[i] + d->tgt_len[i];
    }
    return end;
}

static bool on;        /* MPI started: run by mpirun */
static ag_dist *dist;
static int saved_stderr = -1;
static FILE *quiet;

bool tr_dist_begin(void) {
    if (!getenv("OMPI_COMM_WORLD_SIZE")) return true;
    if (!ag_dist_init(NULL, NULL)) return false;
    on = true;
    return true;
}

void tr_dist_end(void) {
    if (on) ag_dist_finalize();
    on = false;
}

int tr_dist_rank(void) { return on ? ag_dist_rank() : 0; }
int tr_dist_size(void) { return on ? ag_dist_size() : 1; }

void tr_dist_quiet_setup(void) {
    if (!on || ag_dist_rank() == 0) return;
    fflush(stderr);
    quiet = tmpfile();
    if (!quiet) return;
    saved_stderr = dup(2);
    dup2(fileno(quiet), 2);
}

/* the last line of the quiet set-up's messages into buf */
static void last_message(char *buf, size_t size) {
    snprintf(buf, size, "set-up failed");
    if (!quiet) return;
    fflush(stderr);
    rewind(quiet);
    char line[1024];
    while (fgets(line, sizeof line, quiet)) {
        line[strcspn(line, "\n")] = 0;
        const char *text = line, *prefix = "attograd-translate: ";
        if (strncmp(text, prefix, strlen(prefix)) == 0) text += strlen(prefix);
        if (*text) snprintf(buf, size, "%s", text);
    }
}

bool tr_dist_setup_agree(bool ok) {
    if (!on) return ok;
    char mine[1024] = "", msg[1200];
    if (quiet) {
        if (!ok) last_message(mine, sizeof mine);
        fflush(stderr);
        dup2(saved_stderr, 2);
        close(saved_stderr);
        fclose(quiet);
        quiet = NULL;
    }
    if (ag_dist_agree(ok, mine, msg, sizeof msg)) return true;
    if (ag_dist_rank() == 0 && strncmp(msg, "rank 0:", 7) != 0)
        fprintf(stderr, "attograd-translate: %s\n", msg);
    return false;
}

bool tr_dist_same_run(const tr_dataset *train, const tr_vocab *src, const tr_vocab *tgt, const ag_params *p,
                      const char *config) {
    if (!on) return true;
    char msg[512], *s = tr_vocab_to_string(src), *t = tr_vocab_to_string(tgt);
    int64_t sizes[3] = {train->n, ids_used(train), p->numel};
    bool ok = ag_dist_same(sizes, sizeof sizes, "the number of training pairs or parameters", msg, sizeof msg) &&
              ag_dist_same(train->ids, sizeof *train->ids * (size_t)sizes[1], "the training pairs", msg, sizeof msg) &&
              ag_dist_same(s, s ? strlen(s) : 0, "the source vocabulary", msg, sizeof msg) &&
              ag_dist_same(t, t ? strlen(t) : 0, "the target vocabulary", msg, sizeof msg) &&
              ag_dist_same(config, strlen(config), "the model or training settings", msg, sizeof msg);
    free(s);
    free(t);
    if (!ok && ag_dist_rank() == 0) fprintf(stderr, "attograd-translate: %s: every rank must train the same run\n", msg);
    return ok;
}

void tr_dist_attach(ag_params *p) {
    if (on) dist = ag_dist_new(p, NULL);
}

bool tr_dist_step_done(ag_rng *rng, bool *diverged) {
    if (!on) return signalled;
    uint64_t x[3] = {rng->counter, signalled, *diverged};
    ag_dist_max_u64(x, 3);
    rng->counter = x[0];
    *diverged = x[2] != 0;
    return x[1] != 0;
}

void tr_dist_detach(ag_rng *rng) {
    if (!on) return;
    ag_dist_free(dist);
    dist = NULL;
    ag_rng_share_batch(rng, 0, 0, 0);
}

void tr_dist_accumulate(bool accumulate) { ag_dist_accumulate(dist, accumulate); }

void tr_dist_sync(void) { ag_dist_sync_grads(dist); }

double tr_dist_batch_loss(double local_share) { return on ? ag_dist_sum_f64(local_share) : local_share; }

bool tr_dist_any(bool flag) { return on ? ag_dist_any(flag) : flag; }

#else /* one process */
bool tr_dist_begin(void) { return true; }
void tr_dist_end(void) {}
int tr_dist_rank(void) { return 0; }
int tr_dist_size(void) { return 1; }
void tr_dist_quiet_setup(void) {}
bool tr_dist_setup_agree(bool ok) { return ok; }
bool tr_dist_same_run(const tr_dataset *train, const tr_vocab *src, const tr_vocab *tgt, const ag_params *p,
                      const char *config) {
    return true;
}
void tr_dist_attach(ag_params *p) {}
void tr_dist_detach(ag_rng *rng) {}
bool tr_dist_step_done(ag_rng *rng, bool *diverged) { return signalled; }
void tr_dist_accumulate(bool accumulate) {}
void tr_dist_sync(void) {}
double tr_dist_batch_loss(double local_share) { return local_share; }
bool tr_dist_any(bool flag) { return flag; }
#endif
