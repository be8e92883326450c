/* The thread count (ag_set_num_threads, ag_get_num_threads, ag_set_follow_load): the count
 * reaches OpenMP in the calling thread and, at their next step, in other threads; a training
 * step gives the same bits at 1 and 2 threads set through it; the defaults (OMP_NUM_THREADS,
 * the affinity mask, the ranks of an mpirun on this machine) and the count that follows the
 * CPU time other processes take. */
#define _GNU_SOURCE /* sched_setaffinity */
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tensor/threads_internal.h"
#include "test_util.h"

static const void *raw(const ag_tensor *t) { return t->data + t->offset * (int64_t)ag_dtype_size(t->dtype); }

/* each test starts from the count the suite runs with (OMP_NUM_THREADS=2), not following the
 * load, and leaves it so */
static int initial_threads;
static int setup(void **s) {
    ag_set_follow_load(false);
    return tu_setup(s);
}
static int teardown(void **s) {
    ag_set_follow_load(false);
    ag_set_num_threads(initial_threads);
    return tu_teardown(s);
}

static void test_set_num_threads_sets_the_openmp_count_of_the_calling_thread(void **s) {
    ag_set_num_threads(1);
    assert_int_equal(ag_get_num_threads(), 1);
    assert_int_equal(omp_get_max_threads(), 1);
    ag_set_num_threads(3);
    assert_int_equal(ag_get_num_threads(), 3);
    assert_int_equal(omp_get_max_threads(), 3);
    int team = 0;
#pragma omp parallel
#pragma omp single
    team = omp_get_num_threads();
    assert_int_equal(team, 3);
}

static void test_set_num_threads_rejects_counts_below_one(void **s) {
    ag_set_num_threads(2);
    ag_set_num_threads(0);
    tu_assert_error("ag_set_num_threads", "positive", "got 0");
    ag_set_num_threads(-3);
    tu_assert_error("ag_set_num_threads", "got -3");
    assert_int_equal(ag_get_num_threads(), 2);
    assert_int_equal(omp_get_max_threads(), 2);
}

/* ag_set_num_threads(100000) overflowed libgomp's stack (it lays out the team on the stack of
 * the thread that starts it): counts past 4 per online CPU, or past OpenMP's thread limit, are
 * refused and the count stays */
static void test_set_num_threads_refuses_more_than_the_machine_can_run(void **s) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int limit = ag__threads_limit();
    assert_int_equal(limit, 4 * online < omp_get_thread_limit() ? 4 * online : omp_get_thread_limit());
    assert_true(ag_set_num_threads(2));
    assert_false(ag_set_num_threads(100000));
    char at_most[64];
    snprintf(at_most, sizeof at_most, "at most %d here (4 per online CPU, %ld online", limit, online);
    tu_assert_error("ag_set_num_threads", "100000 threads", at_most, "OpenMP's thread limit");
    assert_false(ag_set_num_threads(limit + 1));
    tu_assert_error("ag_set_num_threads", "at most");
    assert_false(ag_set_num_threads(INT32_MAX));
    tu_assert_error("ag_set_num_threads", "2147483647 threads");
    assert_int_equal(ag_get_num_threads(), 2);
    assert_int_equal(omp_get_max_threads(), 2);
    /* the limit itself runs: a region of that many threads */
    assert_true(ag_set_num_threads(limit));
    int team = 0;
#pragma omp parallel
#pragma omp single
    team = omp_get_num_threads();
    assert_int_equal(team, limit);
    assert_int_equal(tu_error_count(), 0);
}

static void test_thread_limit_is_4_per_cpu_within_openmps_limit(void **s) {
    assert_int_equal(ag__max_threads(2, 2147483647), 8);
    assert_int_equal(ag__max_threads(2, 3), 3);      /* OMP_THREAD_LIMIT=3 */
    assert_int_equal(ag__max_threads(256, 2147483647), 1024);
    assert_int_equal(ag__max_threads(0, 2147483647), 4); /* no count of CPUs: one */
    assert_int_equal(ag__max_threads(1 << 20, 2147483647), 4 << 20);
    /* OMP_NUM_THREADS above the limit gives the limit */
    char *prev = getenv("OMP_NUM_THREADS") ? strdup(getenv("OMP_NUM_THREADS")) : NULL;
    setenv("OMP_NUM_THREADS", "100000", 1);
    assert_int_equal(ag__threads_from_env(), ag__threads_limit());
    if (prev) setenv("OMP_NUM_THREADS", prev, 1);
    else unsetenv("OMP_NUM_THREADS");
    free(prev);
}

static void *reset_and_report(void *arena) {
    int *before = malloc(2 * sizeof(int));
    before[0] = omp_get_max_threads();
    ag_arena_reset(arena);
    before[1] = omp_get_max_threads();
    return before;
}

/* process-wide, as torch.set_num_threads: another thread takes it up at its next step */
static void test_another_thread_takes_up_the_count_at_its_next_arena_reset(void **s) {
    ag_set_num_threads(3);
    ag_arena *a = ag_arena_new(4096);
    pthread_t t;
    void *r;
    assert_int_equal(pthread_create(&t, NULL, reset_and_report, a), 0);
    pthread_join(t, &r);
    int *seen = r;
    assert_int_equal(seen[1], 3);
    free(seen);
    ag_arena_free(a);
}

/* A program that sets its thread's OpenMP count itself keeps it until ag_set_num_threads */
static void test_omp_set_num_threads_by_the_program_is_kept_until_set_num_threads(void **s) {
    ag_set_num_threads(2);
    omp_set_num_threads(1);
    ag_arena_reset(ag_arena_current());
    assert_int_equal(omp_get_max_threads(), 1);
    ag_set_num_threads(2);
    assert_int_equal(omp_get_max_threads(), 2);
}

/* One training step of a two-layer block, big enough that every kind of region splits (the
 * GEMM's blocks, elementwise, dropout, LayerNorm, softmax, cross entropy, the reductions):
 * the loss and the weight gradients, as bytes, into out. */
static void train_step(unsigned char *out, size_t *len) {
    ag_rng rng = ag_rng_new(3);
    ag_tensor *x = tu_seq(AG_F32, AG_SHAPE(512, 128), 0.37, 0.1);
    ag_tensor *w1 = tu_leaf(tu_seq(AG_F32, AG_SHAPE(256, 128), 0.11, 0.3)), *b1 = tu_leaf(ag_zeros(AG_F32, AG_SHAPE(256)));
    ag_tensor *w2 = tu_leaf(tu_seq(AG_F32, AG_SHAPE(64, 256), 0.07, 0.9)), *b2 = tu_leaf(ag_zeros(AG_F32, AG_SHAPE(64)));
    ag_tensor *g = tu_leaf(ag_ones(AG_F32, AG_SHAPE(256))), *b = tu_leaf(ag_zeros(AG_F32, AG_SHAPE(256)));
    ag_tensor *h = ag_dropout(ag_relu(ag_linear(x, w1, b1)), 0.1, true, &rng);
    ag_tensor *logits = ag_linear(ag_layer_norm(h, g, b, 1e-5), w2, b2);
    int64_t t[512];
    for (int i = 0; i < 512; i++) t[i] = (i * 7) % 64;
    ag_tensor *target = ag_from_buffer(AG_I64, AG_SHAPE(512), t);
    ag_loss_config lc = ag_loss_defaults();
    lc.label_smoothing = 0.1;
    ag_tensor *loss = ag_cross_entropy(logits, target, &lc);
    ag_backward(ag_add(loss, ag_mean(ag_softmax(logits, 1), 0, NULL, false)), NULL);
    size_t n = 0;
    ag_tensor *parts[] = {loss, w1->grad, b1->grad, w2->grad, b2->grad, g->grad, b->grad};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        size_t bytes = (size_t)ag_numel(parts[i]) * ag_dtype_size(parts[i]->dtype);
        memcpy(out + n, raw(parts[i]), bytes);
        n += bytes;
    }
    *len = n;
}

static void test_training_step_same_bits_at_1_and_2_threads_after_set_num_threads(void **s) {
    size_t cap = 4 * (1 + 2 * 256 * 128 + 256 + 64 * 256 + 64 + 512), n1, n2;
    unsigned char *one = malloc(cap), *two = malloc(cap);
    ag_set_num_threads(1);
    assert_int_equal(omp_get_max_threads(), 1);
    train_step(one, &n1);
    ag_arena_reset(ag_arena_current());
    ag_set_num_threads(2);
    assert_int_equal(omp_get_max_threads(), 2);
    train_step(two, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(one, two, n1);
    free(one);
    free(two);
}

static void test_default_shares_the_cpus_among_the_ranks_on_this_machine(void **s) {
    assert_int_equal(ag__default_threads(2, 2, 1), 2);  /* alone */
    assert_int_equal(ag__default_threads(2, 2, 2), 1);  /* mpirun -np 2, unbound */
    assert_int_equal(ag__default_threads(2, 2, 4), 1);  /* more ranks than CPUs */
    assert_int_equal(ag__default_threads(16, 16, 3), 5); /* the remainder stays idle */
    assert_int_equal(ag__default_threads(1, 2, 2), 1);  /* bound to one core each */
    assert_int_equal(ag__default_threads(8, 16, 4), 4); /* a socket of 8 shared by 2 of 4 ranks */
    assert_int_equal(ag__default_threads(1, 8, 1), 1);  /* taskset -c 0 */
}

static void test_local_ranks_from_open_mpi_then_hydra(void **s) {
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    unsetenv("MPI_LOCALNRANKS");
    assert_int_equal(ag__local_ranks(), 1);
    setenv("MPI_LOCALNRANKS", "3", 1);
    assert_int_equal(ag__local_ranks(), 3);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    assert_int_equal(ag__local_ranks(), 2);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "two", 1);
    assert_int_equal(ag__local_ranks(), 3);
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    unsetenv("MPI_LOCALNRANKS");
}

static void test_omp_num_threads_when_set_to_a_count_wins(void **s) {
    char *prev = getenv("OMP_NUM_THREADS") ? strdup(getenv("OMP_NUM_THREADS")) : NULL;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    char ranks[32];
    snprintf(ranks, sizeof ranks, "%ld", online);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", ranks, 1); /* as many ranks as CPUs: 1 each */
    setenv("OMP_NUM_THREADS", "3", 1);
    assert_int_equal(ag__threads_from_env(), 3);
    setenv("OMP_NUM_THREADS", "5,2", 1); /* nested levels: the first is the outer count */
    assert_int_equal(ag__threads_from_env(), 5);
    setenv("OMP_NUM_THREADS", "0", 1);
    assert_int_equal(ag__threads_from_env(), 1);
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(ag__threads_from_env(), 1);
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    assert_int_equal(ag__threads_from_env(), ag__affinity_cpus());
    if (prev) setenv("OMP_NUM_THREADS", prev, 1);
    free(prev);
}

/* The library's own start-up under a simulated mpirun of 2 ranks: this program again, in a
 * child with OMPI_COMM_WORLD_LOCAL_SIZE=2 and no OMP_NUM_THREADS, reports its count. */
static int child_count(const char *local_size) {
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 1);
        unsetenv("OMP_NUM_THREADS");
        if (local_size) setenv("OMPI_COMM_WORLD_LOCAL_SIZE", local_size, 1);
        else unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        execl("/proc/self/exe", "test_threads", "--print-count", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[64] = {0};
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    assert_true(n > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return atoi(buf);
}

static void test_default_count_at_start_under_a_simulated_mpirun(void **s) {
    int cpus = ag__affinity_cpus();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int alone = child_count(NULL), shared = child_count("2");
    assert_int_equal(alone, cpus);
    assert_int_equal(shared, cpus < online / 2 ? cpus : online / 2 > 0 ? online / 2 : 1);
}

static void test_load_of_other_processes_takes_cpus_from_0_4_of_one(void **s) {
    assert_int_equal(ag__threads_for_load(2, 0.0), 2);
    assert_int_equal(ag__threads_for_load(2, 0.05), 2);
    assert_int_equal(ag__threads_for_load(2, 0.39), 2);
    assert_int_equal(ag__threads_for_load(2, 0.45), 1);
    assert_int_equal(ag__threads_for_load(2, 1.0), 1);
    assert_int_equal(ag__threads_for_load(2, 7.5), 1);     /* never fewer than 1 */
    assert_int_equal(ag__threads_for_load(8, 2.5), 5);     /* 3 taken */
    assert_int_equal(ag__threads_for_load(8, 2.3), 6);     /* 2 taken */
    assert_int_equal(ag__threads_for_load(2, -0.02), 2);   /* tick rounding below 0 */
}

/* A busy loop on one CPU of this process's mask takes that CPU: the count set drops below
 * the CPUs there are, and setting follow_load off gives it back. */
static void test_a_busy_loop_on_one_cpu_lowers_the_count_while_following_the_load(void **s) {
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int cpus = CPU_COUNT(&set), last = -1;
    if (cpus < 2) skip(); /* nothing to give up on one CPU */
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) last = c;
    pid_t busy = fork();
    assert_true(busy >= 0);
    if (busy == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(last, &one);
        sched_setaffinity(0, sizeof one, &one);
        for (volatile unsigned long i = 0;; i++) {}
    }
    ag_set_num_threads(cpus);
    ag_set_follow_load(true);
    for (int i = 0; i < 4; i++) { /* sleeping, not competing: the loop has its CPU */
        nanosleep(&(struct timespec){0, 250000000}, NULL);
        ag_arena_reset(ag_arena_current());
    }
    int followed = omp_get_max_threads();
    kill(busy, SIGKILL);
    waitpid(busy, NULL, 0);
    assert_int_equal(ag_get_num_threads(), cpus);
    assert_true(followed >= 1 && followed <= cpus - 1);
    ag_set_follow_load(false);
    ag_arena_reset(ag_arena_current());
    assert_int_equal(omp_get_max_threads(), cpus);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--print-count")) {
        printf("%d\n", ag_get_num_threads());
        return 0;
    }
    initial_threads = ag_get_num_threads();
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_set_num_threads_sets_the_openmp_count_of_the_calling_thread),
        T(test_set_num_threads_rejects_counts_below_one),
        T(test_set_num_threads_refuses_more_than_the_machine_can_run),
        T(test_thread_limit_is_4_per_cpu_within_openmps_limit),
        T(test_another_thread_takes_up_the_count_at_its_next_arena_reset),
        T(test_omp_set_num_threads_by_the_program_is_kept_until_set_num_threads),
        T(test_training_step_same_bits_at_1_and_2_threads_after_set_num_threads),
        T(test_default_shares_the_cpus_among_the_ranks_on_this_machine),
        T(test_local_ranks_from_open_mpi_then_hydra),
        T(test_omp_num_threads_when_set_to_a_count_wins),
        T(test_default_count_at_start_under_a_simulated_mpirun),
        T(test_load_of_other_processes_takes_cpus_from_0_4_of_one),
        T(test_a_busy_loop_on_one_cpu_lowers_the_count_while_following_the_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
