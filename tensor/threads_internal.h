/* The thread count's policy (tensor/threads.c), private to tensor/: the hook between steps and
 * the pure functions behind the defaults, which tests call directly. */
#ifndef AG_THREADS_INTERNAL_H
#define AG_THREADS_INTERNAL_H

/* Called between steps (ag_arena_reset) and by ag_set_num_threads: the calling thread takes
 * up the requested count, or fewer while other processes keep CPUs busy (the load is sampled
 * at most every 200 ms), unless the program set this thread's OpenMP count itself. */
void ag__threads_between_steps(void);

/* The most threads ag_set_num_threads accepts: AG_THREADS_PER_CPU per online CPU, and no more
 * than OpenMP's thread limit (omp_get_thread_limit: OMP_THREAD_LIMIT); ag__threads_limit is
 * it for this machine. */
#define AG_THREADS_PER_CPU 4
int ag__max_threads(int online, int omp_limit);
int ag__threads_limit(void);
/* CPUs in this thread's affinity mask (the online CPUs where there is no mask) */
int ag__affinity_cpus(void);
/* processes of this job on this machine: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI's mpirun) or
 * MPI_LOCALNRANKS (MPICH's and Intel MPI's Hydra), else 1 */
int ag__local_ranks(void);
/* min(capacity, online / local_ranks), at least 1: the CPUs of the mask, shared evenly among
 * the local ranks when the mask covers the machine (ranks bound to their own cores each see
 * their cores only) */
int ag__default_threads(int capacity, int online, int local_ranks);
/* the default from the environment: OMP_NUM_THREADS when it is set to a count (no more than
 * ag__threads_limit), else
 * ag__default_threads of the affinity mask, the online CPUs and the local ranks */
int ag__threads_from_env(void);
/* threads to use on capacity CPUs while other processes use others CPUs' worth of time: a
 * CPU counts as taken from 0.4 of it on; at least 1 */
int ag__threads_for_load(int capacity, double others);

#endif
