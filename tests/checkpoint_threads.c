/* Checkpoint calls from several threads and at exit. First a child process loads a checkpoint
 * with a corrupted object header and exits normally: it must report EFORMAT and print nothing
 * at exit (HDF5 1.10.8's exit handler would). Then saves and loads must give back the saved
 * values bit for bit, twice, and saves and loads from 4 threads at once (they take turns: the
 * serial libhdf5 is not thread-safe) must round-trip each thread's values and exit cleanly.
 * Exit 0 only then. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attograd.h"

/* one thread's work: save its parameters, load them into a copy of another init, compare */
typedef struct {
    ag_params *from, *to;
    char path[64], msg[2048];
    bool ok;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->ok = true;
    for (int k = 0; k < 10 && j->ok; k++)
        j->ok = ag_checkpoint_save(j->path, j->from, NULL, NULL, NULL, j->msg, sizeof j->msg) == AG_CHECKPOINT_OK &&
                ag_checkpoint_load(j->path, j->to, NULL, NULL, NULL, j->msg, sizeof j->msg) == AG_CHECKPOINT_OK &&
                memcmp(j->to->data, j->from->data, sizeof(float) * (size_t)j->from->numel) == 0;
    return NULL;
}

/* in a child: flip a byte of the root group's object header (superblock version 3, after the
 * 512-byte user block: the header's address at byte 36 of it, counted from there) of a saved
 * checkpoint, zero the first byte of attograd's header (so that, like a file from elsewhere,
 * it has none and is parsed in a child process first), load it, and exit(0) through the exit handlers. The child
 * reports its steps through one pipe (0 when the load said EFORMAT) and its stderr through
 * another, read to the end: what the exit handlers print is in err. Not its exit status, which
 * valgrind's --error-exitcode replaces with its report of HDF5's leak. */
static bool corrupted_load_in_child(ag_params *p, const char *path, char *err, size_t size) {
    int out[2], status[2];
    if (pipe(out) != 0 || pipe(status) != 0) return false;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 2);
        close(out[0]);
        close(status[0]);
        char msg[2048], step = 1;
        FILE *f = NULL;
        unsigned char d[512 + 64], h[16];
        uint64_t root = 0;
        if (ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg) == AG_CHECKPOINT_OK && (step = 2) &&
            (f = fopen(path, "r+b")) && fread(d, 1, 512 + 44, f) == 512 + 44 && d[512 + 8] == 3 && (step = 3)) {
            for (int i = 7; i >= 0; i--) root = root << 8 | d[512 + 36 + i];
            root += 512;
            if (!fseek(f, (long)root, SEEK_SET) && fread(h, 1, 16, f) == 16 && !memcmp(h, "OHDR", 4) && (step = 4)) {
                h[12] ^= 1;
                if (!fseek(f, (long)root, SEEK_SET) && fwrite(h, 1, 16, f) == 16 && !fseek(f, 0, SEEK_SET) &&
                    fputc(0, f) == 0 && !fclose(f) && (step = 5) &&
                    ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) == AG_CHECKPOINT_EFORMAT)
                    step = 0;
                f = NULL;
            }
        }
        if (f) fclose(f);
        if (write(status[1], &step, 1) != 1) step = 9;
        exit(0);
    }
    close(out[1]);
    close(status[1]);
    char step = 99;
    bool got_step = read(status[0], &step, 1) == 1;
    ssize_t n, got = 0;
    while (got < (ssize_t)size - 1 && (n = read(out[0], err + got, size - 1 - (size_t)got)) > 0) got += n;
    err[got] = 0;
    close(out[0]);
    close(status[0]);
    waitpid(pid, NULL, 0);
    if (!got_step || step != 0) fprintf(stderr, "the child stopped at step %d\n", step);
    return got_step && step == 0;
}

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "%s: %s\n", what, msg);
    return 1;
}

int main(void) {
    ag_rng r = ag_rng_new(11);
    ag_params *p = ag_params_new(AG_F32);
    ag_linear_new(p, "0", 5, 7, true, &r);
    const float *v = (const float *)p->data;
    float *saved = malloc(sizeof(float) * (size_t)p->numel);
    memcpy(saved, v, sizeof(float) * (size_t)p->numel);
    char dir[] = "/tmp/ag_h5_XXXXXX", path[64], msg[2048];
    if (!mkdtemp(dir)) return fail("mkdtemp", "failed");
    snprintf(path, sizeof path, "%s/corrupt.h5", dir);
    char err[4096];
    if (!corrupted_load_in_child(p, path, err, sizeof err))
        return fail("a corrupted checkpoint's load in a child", err);
    if (strstr(err, "HDF5")) return fail("a child that loaded a corrupted checkpoint printed at exit", err);
    unlink(path);

    snprintf(path, sizeof path, "%s/none.h5", dir);
    if (ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CHECKPOINT_EIO || !strstr(msg, "none.h5"))
        return fail("loading a missing file", msg);
    snprintf(path, sizeof path, "%s/first.h5", dir);
    for (int round = 1; round <= 2; round++) {
        if (ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("save", msg);
        for (int i = 0; i < p->count; i++) /* the tensors, not the slab's alignment padding */
            ag_fill_(p->list[i], -1.0);
        if (ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) return fail("load", msg);
        if (memcmp(p->data, saved, sizeof(float) * (size_t)p->numel) != 0)
            return fail("load", "the loaded values differ from the saved ones");
    }
    unlink(path);

    enum { THREADS = 4 };
    job jobs[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        ag_rng ra = ag_rng_new(100 + (uint64_t)i), rb = ag_rng_new(200 + (uint64_t)i);
        jobs[i].from = ag_params_new(AG_F32);
        jobs[i].to = ag_params_new(AG_F32);
        ag_linear_new(jobs[i].from, "0", 64, 96, true, &ra);
        ag_linear_new(jobs[i].to, "0", 64, 96, true, &rb);
        snprintf(jobs[i].path, sizeof jobs[i].path, "%s/t%d.h5", dir, i);
    }
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (!jobs[i].ok) return fail("a thread's save and load", jobs[i].msg[0] ? jobs[i].msg : "values differ");
        unlink(jobs[i].path);
        ag_params_free(jobs[i].from);
        ag_params_free(jobs[i].to);
    }
    rmdir(dir);
    int64_t n = 0;
    for (int i = 0; i < p->count; i++) n += ag_numel(p->list[i]);
    free(saved);
    ag_params_free(p);
    printf("%lld values round-tripped twice, and from %d threads at once\n", (long long)n, THREADS);
    return 0;
}
