/* Data-parallel training over MPI: start-up agreement, parameter broadcast, and the gradient
 * slab averaged in buckets whose allreduce overlaps backward (DistributedDataParallel's
 * reducer, on the engine's leaf-gradient hooks). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../tensor/op.h"
#include "dist.h"

static bool started;          /* ag_dist_init called MPI_Init_thread */
static int rank_, size_ = 1, local_rank_, local_size_ = 1;
/* MPI_COMM_WORLD's duplicate for the notes ag_dist_finalize sends: "this rank joins no more
 * collectives" */
static MPI_Comm leaving = MPI_COMM_NULL;
enum { TAG_LEAVING = 7 };

bool ag_dist_init(int *argc, char ***argv) {
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        int provided;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            fprintf(stderr, "attograd: MPI_Init_thread failed: cannot start MPI\n");
            return false;
        }
        started = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    if (leaving == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &leaving);
    return true;
}

/* The note of every other rank that it has left: each rank, leaving, waits for the others' */
static void say_leaving(void) {
    if (leaving == MPI_COMM_NULL) return;
    MPI_Request *req = ag_xmalloc(sizeof *req * (size_t)size_);
    for (int r = 0; r < size_; r++)
        if (r != rank_) MPI_Isend(NULL, 0, MPI_BYTE, r, TAG_LEAVING, leaving, &req[r]);
        else req[r] = MPI_REQUEST_NULL;
    for (int r = 0; r < size_; r++)
        if (r != rank_) MPI_Recv(NULL, 0, MPI_BYTE, r, TAG_LEAVING, leaving, MPI_STATUS_IGNORE);
    MPI_Waitall(size_, req, MPI_STATUSES_IGNORE);
    ag_xfree(req);
    MPI_Comm_free(&leaving);
}

void ag_dist_finalize(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) say_leaving();
    if (started && !done) MPI_Finalize();
    started = false;
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The rank whose leaving note has come, or -1 */
static int rank_left(void) {
    int flag = 0;
    MPI_Status st;
    if (leaving != MPI_COMM_NULL) MPI_Iprobe(MPI_ANY_SOURCE, TAG_LEAVING, leaving, &flag, &st);
    return flag ? st.MPI_SOURCE : -1;
}

/* MPI_Waitall on this rank's part of collectives. A rank that has left (ag_dist_finalize) never
 * joins them: after a grace second (its last messages may still be on the way) the job stops
 * with a message naming it, instead of this rank waiting forever. A rank that dies or exits
 * without ag_dist_finalize is Open MPI's to find: mpirun stops the job. */
static void wait_all(int n, MPI_Request *req) {
    double since = 0;
    for (unsigned spin = 1;; spin++) {
        int done = 0;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (spin % 64) continue;
        int gone = rank_left();
        if (gone < 0) continue;
        if (since == 0) since = seconds();
        else if (seconds() - since > 1.0) {
            fprintf(stderr, "attograd: rank %d left (ag_dist_finalize) while rank %d waits for it in a collective: "
                            "the ranks called different collectives; stopping the job\n", gone, rank_);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
}

static void allreduce(void *x, int n, MPI_Datatype type, MPI_Op op) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, x, n, type, op, MPI_COMM_WORLD, &req);
    wait_all(1, &req);
}

static void bcast(void *x, int n, MPI_Datatype type, int root) {
    MPI_Request req;
    MPI_Ibcast(x, n, type, root, MPI_COMM_WORLD, &req);
    wait_all(1, &req);
}

int ag_dist_rank(void) { return rank_; }
int ag_dist_size(void) { return size_; }
int ag_dist_local_rank(void) { return local_rank_; }
int ag_dist_local_size(void) { return local_size_; }

void ag_dist_abort(int status) { MPI_Abort(MPI_COMM_WORLD, status); }

/* ---- agreement ---- */

/* the lowest rank whose flag is set, or size_ when none is */
static int lowest_flagged(bool flag) {
    int low = flag ? rank_ : size_;
    allreduce(&low, 1, MPI_INT, MPI_MIN);
    return low;
}

bool ag_dist_agree(bool ok, const char *message, char *msg, size_t msgsize) {
    int bad = lowest_flagged(!ok);
    if (bad == size_) return true;
    char text[1024] = "";
    if (rank_ == bad) snprintf(text, sizeof text, "%s", message ? message : "failed");
    bcast(text, (int)sizeof text, MPI_CHAR, bad);
    if (msg && msgsize) snprintf(msg, msgsize, "rank %d: %s", bad, text);
    return false;
}

/* 64-bit hash of n bytes (FNV-1a over 8-byte words, then the tail) */
static uint64_t hash_bytes(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (uint64_t)n;
}

bool ag_dist_same(const void *data, size_t n, const char *what, char *msg, size_t msgsize) {
    uint64_t h = hash_bytes(data, n), h0 = h;
    bcast(&h0, 1, MPI_UINT64_T, 0);
    int bad = lowest_flagged(h != h0);
    if (bad == size_) return true;
    if (msg && msgsize) snprintf(msg, msgsize, "rank %d: %s differs from rank 0's", bad, what);
    return false;
}

int64_t ag_dist_sum_i64(int64_t x) {
    allreduce(&x, 1, MPI_INT64_T, MPI_SUM);
    return x;
}

double ag_dist_sum_f64(double x) {
    allreduce(&x, 1, MPI_DOUBLE, MPI_SUM);
    return x;
}

void ag_dist_max_u64(uint64_t *x, int n) { allreduce(x, n, MPI_UINT64_T, MPI_MAX); }

bool ag_dist_any(bool flag) { return lowest_flagged(flag) < size_; }

void ag_dist_broadcast(void *data, size_t n, int root) {
    char *p = data; /* MPI counts are ints: in pieces of at most 1 GiB */
    for (size_t done = 0; done < n;) {
        size_t k = n - done < ((size_t)1 << 30) ? n - done : (size_t)1 << 30;
        bcast(p + done, (int)k, MPI_BYTE, root);
        done += k;
    }
}

/* ---- buckets ---- */

typedef struct {
    int64_t first, end;  /* slab range in elements */
    int params;          /* parameters in it that the pass uses and whose gradient is not final */
} bucket;

struct ag_dist {
    ag_params *p;
    MPI_Datatype type;
    int nb, next;         /* buckets; the next one to start (they start in index order) */
    bucket *b;
    MPI_Request *req;
    int *bucket_of;       /* per parameter (p->list order) */
    int *uses;            /* per parameter: uses in this pass not yet done */
    int *ready, nready;   /* the order buckets became ready in (tests) */
    bool counting;        /* expect calls of a pass are arriving */
    bool in_flight;       /* some started bucket may not be done */
    bool local;           /* ag_dist_accumulate: passes add to the local gradients only */
    bool passed;          /* a pass has counted its uses since the last sync */
};

static ag_dist *active;

/* the index of parameter t in d->p, or -1 for another leaf */
static int param_index(const ag_dist *d, const ag_tensor *t) {
    const ag_params *p = d->p;
    if (t->data != p->data) return -1;
    int lo = 0, hi = p->count - 1;
    while (lo <= hi) { /* parameters' offsets increase in the order added */
        int mid = (lo + hi) / 2;
        int64_t o = p->list[mid]->offset;
        if (o == t->offset) return p->list[mid] == t ? mid : -1;
        if (o < t->offset) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void start_bucket(ag_dist *d, int k) {
    const bucket *b = &d->b[k];
    char *g = d->p->grad + (size_t)b->first * ag_dtype_size(d->p->dtype);
    MPI_Iallreduce(MPI_IN_PLACE, g, (int)(b->end - b->first), d->type, MPI_SUM, MPI_COMM_WORLD, &d->req[k]);
}

/* start the buckets that are ready, in index order: every rank issues the same collectives in
 * the same order whatever order backward completes them in */
static void start_ready(ag_dist *d) {
    while (d->next < d->nb && d->b[d->next].params == 0) start_bucket(d, d->next++);
}

static void on_expect(void *user, ag_tensor *leaf) {
    ag_dist *d = user;
    if (d->local) return;
    if (!d->counting) { /* a new pass */
        if (d->next > 0)
            ag_error("ag_dist", "a second backward pass before ag_dist_sync_grads: its gradients would change "
                     "buckets already being reduced (call ag_dist_sync_grads after each ag_backward)");
        for (int k = 0; k < d->nb; k++) d->b[k].params = 0;
        memset(d->uses, 0, sizeof *d->uses * (size_t)d->p->count);
        d->nready = 0;
        d->counting = true;
        d->passed = true;
    }
    int i = param_index(d, leaf);
    if (i >= 0 && d->uses[i]++ == 0) d->b[d->bucket_of[i]].params++;
}

/* Open MPI moves a non-blocking collective on only inside MPI calls (no progress thread): the
 * buckets in flight get a turn after the backward of every node that reads a parameter, until
 * they are all done */
static void progress(ag_dist *d) {
    int flag = 1;
    if (d->in_flight) MPI_Testall(d->next, d->req, &flag, MPI_STATUSES_IGNORE);
    d->in_flight = !flag;
}

static void on_done(void *user, ag_tensor *leaf) {
    ag_dist *d = user;
    if (d->local) return;
    d->counting = false;
    int i = param_index(d, leaf);
    if (i >= 0 && d->uses[i] > 0 && --d->uses[i] == 0) {
        int k = d->bucket_of[i];
        if (--d->b[k].params == 0) {
            d->ready[d->nready++] = k;
            int before = d->next;
            start_ready(d);
            d->in_flight |= d->next > before;
        }
    }
    progress(d);
}

static void on_end(void *user) { ((ag_dist *)user)->counting = false; }

ag_dist *ag_dist_new(ag_params *p, const ag_dist_opts *opts) {
    if (!p || p->count == 0) {
        ag_error("ag_dist_new", "needs a parameter set with parameters");
        return NULL;
    }
    if (active) {
        ag_error("ag_dist_new", "another ag_dist is active: free it first (the engine has one set of hooks)");
        return NULL;
    }
    size_t es = ag_dtype_size(p->dtype), cap = opts && opts->bucket_bytes ? opts->bucket_bytes : (size_t)4 << 20;
    ag_dist *d = ag_xmalloc(sizeof *d);
    memset(d, 0, sizeof *d);
    d->p = p;
    d->type = p->dtype == AG_F32 ? MPI_FLOAT : MPI_DOUBLE;
    d->bucket_of = ag_xmalloc(sizeof *d->bucket_of * (size_t)p->count);
    d->uses = ag_xmalloc(sizeof *d->uses * (size_t)p->count);
    d->b = ag_xmalloc(sizeof *d->b * (size_t)p->count); /* at most one per parameter */
    /* reverse parameter order: bucket 0 ends at the slab's end */
    int64_t end = p->numel;
    for (int i = p->count - 1; i >= 0; i--) {
        d->bucket_of[i] = d->nb;
        int64_t first = p->list[i]->offset;
        if ((size_t)(end - first) * es >= cap || i == 0) {
            d->b[d->nb++] = (bucket){first, end, 0};
            end = first;
        }
    }
    d->b[d->nb - 1].first = 0; /* the slab's start, alignment padding included */
    d->req = ag_xmalloc(sizeof *d->req * (size_t)d->nb);
    d->ready = ag_xmalloc(sizeof *d->ready * (size_t)d->nb);
    for (int k = 0; k < d->nb; k++) d->req[k] = MPI_REQUEST_NULL;
    ag_dist_broadcast_params(d);
    active = d;
    ag_set_leaf_grad_hooks(&(ag_leaf_grad_hooks){on_expect, on_done, on_end, d});
    return d;
}

void ag_dist_free(ag_dist *d) {
    if (!d) return;
    if (active == d) {
        ag_set_leaf_grad_hooks(NULL);
        active = NULL;
    }
    if (d->next > 0) wait_all(d->next, d->req);
    ag_xfree(d->bucket_of);
    ag_xfree(d->uses);
    ag_xfree(d->b);
    ag_xfree(d->req);
    ag_xfree(d->ready);
    ag_xfree(d);
}

void ag_dist_sync_grads(ag_dist *d) {
    if (!d) return;
    if (!d->passed) d->nready = 0; /* no pass since the last sync: every bucket starts here */
    while (d->next < d->nb) { /* buckets no pass completed (or no pass at all) */
        if (d->b[d->next].params > 0 || !d->passed) d->ready[d->nready++] = -1;
        d->b[d->next].params = 0;
        start_bucket(d, d->next++);
    }
    wait_all(d->nb, d->req);
    d->next = 0;
    d->counting = false;
    d->in_flight = false;
    d->passed = false;
    if (size_ > 1) ag_mul_scalar_(d->p->flat_grad, 1.0 / size_);
}

void ag_dist_accumulate(ag_dist *d, bool on) {
    if (d) d->local = on;
}

void ag_dist_broadcast_params(ag_dist *d) {
    ag_params *p = d->p;
    ag_dist_broadcast(p->data, (size_t)p->numel * ag_dtype_size(p->dtype), 0);
    ag__bump_version(p->flat); /* every parameter changed in place (the slab's version) */
}

bool ag_dist_params_identical(ag_dist *d) {
    return ag_dist_same(d->p->data, (size_t)d->p->numel * ag_dtype_size(d->p->dtype), "the parameters", NULL, 0);
}

int ag_dist_bucket_count(const ag_dist *d) { return d->nb; }

void ag_dist_bucket_range(const ag_dist *d, int b, int64_t *first, int64_t *end) {
    *first = d->b[b].first;
    *end = d->b[b].end;
}

int ag_dist_ready_order(const ag_dist *d, int *order, int n) {
    int k = d->nready < n ? d->nready : n;
    memcpy(order, d->ready, sizeof *order * (size_t)k);
    return k;
}
