/* The thread count of attograd's parallel work (tensor/tensor.h, "threads").
 *
 * Every parallel region of the library is an OpenMP region opened by the thread that calls
 * the op, so the count is that thread's OpenMP nthreads setting (omp_set_num_threads). The
 * count the program asks for is process-wide, as torch.set_num_threads: each thread takes it
 * up when it calls ag_set_num_threads and between steps (ag_arena_reset), the way torch sets
 * each thread's OpenMP count before its first parallel op.
 *
 * Following the load: a region waits at its end for its slowest thread, and a thread that
 * shares its core with another busy process runs at a fraction of the speed and wakes late.
 * With hundreds of regions per step, 2 threads on 2 cores of which one is busy are slower
 * than 1. So between steps, at most every SAMPLE_NS, the CPU time other processes spent on
 * the CPUs this process may run on is sampled (/proc/stat's busy time over those CPUs minus
 * this process's own CPU time), and regions use no more threads than the CPUs left free. Every
 * kernel splits its work by shape, never by thread count, so this changes no result. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "threads_internal.h"

/* the load is sampled at most this often (a step of the large benchmark model is ~1 s) */
#define SAMPLE_NS 200000000LL

static atomic_int requested = 1;  /* ag_set_num_threads, or the default */
static atomic_uint generation;    /* moves on at every ag_set_num_threads */
static atomic_bool follow = true; /* ag_set_follow_load */
static atomic_int free_cpus;      /* from the last sample; 0: none taken yet */

/* this thread's OpenMP count as attograd last set it; owned: the program set another one itself */
static _Thread_local struct {
    unsigned generation;
    int applied;
    bool owned;
} mine;

/* ---- the default count ---- */

int ag__affinity_cpus(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* a positive integer at the start of s ("4" or OMP_NUM_THREADS's list form "4,2"), else 0 */
static int leading_count(const char *s) {
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    return end != s && (*end == 0 || *end == ',') && v > 0 && v < 1 << 20 ? (int)v : 0;
}

int ag__local_ranks(void) {
    /* Open MPI's mpirun, then MPICH's and Intel MPI's Hydra */
    int n = leading_count(getenv("OMPI_COMM_WORLD_LOCAL_SIZE"));
    if (!n) n = leading_count(getenv("MPI_LOCALNRANKS"));
    return n ? n : 1;
}

int ag__default_threads(int capacity, int online, int local_ranks) {
    int share = online / (local_ranks > 0 ? local_ranks : 1);
    int n = capacity < share ? capacity : share;
    return n > 0 ? n : 1;
}

static int online_cpus(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 && online < 1 << 20 ? (int)online : 1;
}

int ag__max_threads(int online, int omp_limit) {
    long cap = (long)AG_THREADS_PER_CPU * (online > 0 ? online : 1);
    if (omp_limit > 0 && omp_limit < cap) cap = omp_limit;
    return (int)cap;
}

int ag__threads_limit(void) { return ag__max_threads(online_cpus(), omp_get_thread_limit()); }

int ag__threads_from_env(void) {
    int n = leading_count(getenv("OMP_NUM_THREADS")), limit = ag__threads_limit();
    if (n) return n < limit ? n : limit;
    return ag__default_threads(ag__affinity_cpus(), online_cpus(), ag__local_ranks());
}

/* ---- the load of other processes ---- */

int ag__threads_for_load(int capacity, double others) {
    /* a CPU counts as taken when other processes used at least TAKEN of it: a busy loop shows
     * as 1.0 on its own core and about 0.5-0.9 while it shares one with an attograd thread; a
     * quiet machine's daemons and shells as a few hundredths */
    const double TAKEN = 0.4;
    int taken = others > 0 ? (int)(others + (1 - TAKEN)) : 0;
    int n = capacity - taken;
    return n > 0 ? n : 1;
}

static int64_t ns_of(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Busy time (user, nice, system, irq, softirq, steal; seconds) summed over the CPUs of this
 * thread's affinity mask, from /proc/stat; false where there is none (not Linux). */
static bool busy_seconds(double *busy, int *capacity) {
    static char buf[1 << 15]; /* the per-CPU lines come first: ~80 bytes a CPU */
    cpu_set_t set;
    bool masked = sched_getaffinity(0, sizeof set, &set) == 0;
    int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) {
        n += (size_t)r;
        buf[n] = 0;
        if (strstr(buf, "\nintr")) break; /* past the CPU lines */
    }
    close(fd);
    buf[n] = 0;
    long hz = sysconf(_SC_CLK_TCK);
    unsigned long long ticks = 0;
    int cpus = 0;
    for (char *line = buf; line && !strncmp(line, "cpu", 3); line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (line[3] < '0' || line[3] > '9') continue; /* the "cpu" line of all CPUs */
        char *p;
        long cpu = strtol(line + 3, &p, 10);
        if (masked && (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, &set))) continue;
        unsigned long long v[8] = {0};
        for (int i = 0; i < 8; i++) v[i] = strtoull(p, &p, 10);
        ticks += v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* not idle (3) or iowait (4) */
        cpus++;
    }
    if (!cpus || hz <= 0) return false;
    *busy = (double)ticks / (double)hz;
    *capacity = cpus;
    return true;
}

static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_llong next_sample_ns;
static struct {
    bool valid;
    double busy;          /* seconds */
    int64_t own_ns, wall_ns;
} last;

/* A new sample when SAMPLE_NS have passed since the last: free_cpus from the interval between */
static void sample_load(void) {
    int64_t now = ns_of(CLOCK_MONOTONIC);
    if (now < atomic_load_explicit(&next_sample_ns, memory_order_relaxed)) return;
    if (pthread_mutex_trylock(&sample_lock)) return; /* another thread is at it */
    if (now >= atomic_load(&next_sample_ns)) {
        atomic_store(&next_sample_ns, now + SAMPLE_NS);
        double busy;
        int capacity;
        int64_t own = ns_of(CLOCK_PROCESS_CPUTIME_ID);
        if (busy_seconds(&busy, &capacity)) {
            if (last.valid && now > last.wall_ns) {
                double others = (busy - last.busy - (double)(own - last.own_ns) * 1e-9) / ((double)(now - last.wall_ns) * 1e-9);
                atomic_store(&free_cpus, ag__threads_for_load(capacity, others));
            }
            last.valid = true;
            last.busy = busy;
            last.own_ns = own;
            last.wall_ns = now;
        }
    }
    pthread_mutex_unlock(&sample_lock);
}

/* ---- applying the count ---- */

/* The count this thread's next regions use: the requested one, or fewer CPUs left free */
static int wanted(void) {
    int n = atomic_load(&requested), f = atomic_load(&free_cpus);
    return atomic_load(&follow) && f > 0 && f < n ? f : n;
}

static void apply(int n) {
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
    mine.applied = n;
}

void ag__threads_between_steps(void) {
    if (omp_in_parallel()) return;
    unsigned g = atomic_load(&generation);
    if (mine.generation != g) { /* a new ag_set_num_threads: this thread takes it up */
        mine.generation = g;
        mine.owned = false;
    } else if (mine.applied && omp_get_max_threads() != mine.applied) {
        mine.owned = true; /* the program called omp_set_num_threads itself */
    }
    if (mine.owned) return;
    if (atomic_load(&follow)) sample_load();
    apply(wanted());
}

bool ag_set_num_threads(int n) {
    int limit = ag__threads_limit();
    if (n < 1) {
        ag_error("ag_set_num_threads", "expected a positive number of threads, got %d", n);
        return false;
    }
    if (n > limit) {
        ag_error("ag_set_num_threads", "%d threads: at most %d here (%d per online CPU, %d online; OpenMP's thread "
                 "limit %d)", n, limit, AG_THREADS_PER_CPU, online_cpus(), omp_get_thread_limit());
        return false;
    }
    atomic_store(&requested, n);
    atomic_fetch_add(&generation, 1);
    ag__threads_between_steps();
    return true;
}

int ag_get_num_threads(void) { return atomic_load(&requested); }

bool ag_set_follow_load(bool on) {
    bool prev = atomic_exchange(&follow, on);
    if (on && !prev) { /* start afresh: the interval while off says nothing */
        pthread_mutex_lock(&sample_lock);
        last.valid = false;
        atomic_store(&free_cpus, 0);
        atomic_store(&next_sample_ns, 0);
        pthread_mutex_unlock(&sample_lock);
    }
    ag__threads_between_steps(); /* other threads apply the change at their next step */
    return prev;
}

/* The default count, the first load sample, and the loading thread's OpenMP count */
__attribute__((constructor)) static void threads_init(void) {
    const char *f = getenv("AG_FOLLOW_LOAD");
    atomic_store(&follow, !(f && !strcmp(f, "0")));
    atomic_store(&requested, ag__threads_from_env());
    if (atomic_load(&follow)) sample_load();
    apply(atomic_load(&requested));
}
