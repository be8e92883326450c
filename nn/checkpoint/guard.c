/* How a checkpoint file is read, decided before libhdf5 sees a byte of it (docs/checkpoint.md):
 * the header check; then libhdf5 parses the file in this process when the header vouches for
 * it and it is in the checksummed 1.10 format, and otherwise only after a child process has
 * parsed it without crashing or hanging, so that a damaged file is one error line, never a
 * crash or a hang of the caller. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "checkpoint_internal.h"

/* The header check (checkpoint_internal.h) of the file of size bytes on fd: 1 when it starts
 * with a header whose length and CRC-32 match it, 0 when it starts with no header (a file
 * written elsewhere or before headers), -1 with FORMAT or IO reported when they do not match. */
static int check_header(int fd, uint64_t size, report *r) {
    char head[AG_CK_HEADER + 1] = {0};
    ssize_t got = pread(fd, head, AG_CK_HEADER, 0);
    if (got < (ssize_t)sizeof AG_CK_MAGIC || memcmp(head, AG_CK_MAGIC, sizeof AG_CK_MAGIC - 1) != 0) return 0;
    unsigned long long length;
    unsigned crc;
    int used = 0;
    if (sscanf(head + sizeof AG_CK_MAGIC - 1, "length %llu\ncrc32 %8x\n%n", &length, &crc, &used) != 2 || !used)
        return ag__ck_problem(r, FORMAT, "damaged: its header (the first %d bytes) is not readable", AG_CK_HEADER), -1;
    if (length != size)
        return ag__ck_problem(r, FORMAT, "damaged: %llu bytes long, its header says %llu (truncated or extended?)",
                              (unsigned long long)size, length), -1;
    char buf[1 << 16];
    uint32_t c = 0;
    for (uint64_t at = AG_CK_HEADER; at < size;) {
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)at);
        if (n <= 0)
            return ag__ck_problem(r, IO, "cannot read: %s", n < 0 ? strerror(errno) : "unexpected end of file"), -1;
        c = ag__ck_crc32(c, buf, (size_t)n);
        at += (uint64_t)n;
    }
    if (c != crc)
        return ag__ck_problem(r, FORMAT, "damaged: the CRC-32 of its contents is %08x, its header says %08x",
                              (unsigned)c, crc), -1;
    return 1;
}

/* Whether the HDF5 superblock after the user block is version 3: the 1.10 format, whose
 * metadata all carries checksums (the superblock's own included, which libhdf5 checks). */
static bool superblock_v3(int fd) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    unsigned char b[9];
    return pread(fd, b, sizeof b, AG_CK_HEADER) == (ssize_t)sizeof b && memcmp(b, sig, 8) == 0 &&
           b[8] == AG_CK_SUPERBLOCK;
}

/* How long the child may take: AG_CHECKPOINT_TIMEOUT seconds when set (tests), else 30 s and
 * 1 s per 8 MiB of file, far beyond what a parse of an intact file takes. */
static long child_timeout_ms(size_t size) {
    const char *env = getenv("AG_CHECKPOINT_TIMEOUT");
    char *end;
    double s = env ? strtod(env, &end) : 0;
    if (env && end != env && s > 0 && s < 1e6) return (long)(s * 1000);
    return 30000 + (long)(size >> 23) * 1000;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* size bytes from fd into buf within timeout_ms: 1 read, 0 end of file first, -1 timed out or
 * failed. */
static int read_within(int fd, void *buf, size_t size, long timeout_ms) {
    long deadline = now_ms() + timeout_ms;
    for (size_t have = 0; have < size;) {
        long left = deadline - now_ms();
        struct pollfd pf = {fd, POLLIN, 0};
        int n = left > 0 ? poll(&pf, 1, (int)(left > 1000000 ? 1000000 : left)) : 0;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        ssize_t got = read(fd, (char *)buf + have, size - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return got == 0 ? 0 : -1;
        have += (size_t)got;
    }
    return 1;
}

/* The child reads the file as the parent then will (the same code on the same bytes: the
 * parent's file descriptor, which name refers to) and sends its report when it finished. A
 * report of a failure no load accepts is taken as it is (the parent's own read would find the
 * same); otherwise the parent reads the file itself. The child runs no OpenMP region and no
 * MPI call, touches nothing the parent sees (its memory is a copy), dies of a crash whatever
 * handlers the caller installed, dies with the parent, and leaves by _exit: no atexit handler,
 * no stdio flush, no MPI finalisation. */
bool ag__ck_child_read(const char *name, const read_req *q, size_t file_size, report *r) {
    int p[2];
    report *cr = malloc(sizeof *cr);
    if (!cr) return ag__ck_problem(r, NOMEM, "out of memory checking it");
    if (pipe(p) < 0) {
        free(cr);
        return ag__ck_problem(r, IO, "cannot check it: pipe: %s", strerror(errno));
    }
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        close(p[0]);
        close(p[1]);
        free(cr);
        return ag__ck_problem(r, IO, "cannot check it: fork: %s", strerror(err));
    }
    if (pid == 0) {
        close(p[0]);
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        /* a crash ends the child: no handler of the caller's (a test framework's, a program's)
         * may carry on in it */
        static const int crash[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS};
        for (size_t i = 0; i < sizeof crash / sizeof *crash; i++) signal(crash[i], SIG_DFL);
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}); /* and leaves no core file */
        static report cr; /* not on the stack: 8 KiB */
        ag__ck_read_hdf5(name, q, file_size, &cr);
        const char *b = (const char *)&cr;
        size_t left = sizeof cr;
        for (ssize_t w; left > 0; b += w, left -= (size_t)w)
            if ((w = write(p[1], b, left)) <= 0) _exit(1);
        _exit(0);
    }
    close(p[1]);
    long limit = child_timeout_ms(file_size);
    int got = read_within(p[0], cr, sizeof *cr, limit);
    if (got < 0) kill(pid, SIGKILL);
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    close(p[0]);
    bool failed = got == 1 && cr->worst > SKIP && cr->len < sizeof cr->text && !r->count;
    if (failed) *r = *cr;
    free(cr);
    if (got == 1) return !failed;
    const char *how = "(a file without a valid attograd header is parsed in a child process first)";
    if (got < 0)
        return ag__ck_problem(r, FORMAT, "damaged: libhdf5 did not finish parsing it in %ld s %s", limit / 1000, how);
    if (w == pid && WIFSIGNALED(status))
        return ag__ck_problem(r, FORMAT, "damaged: libhdf5 crashed parsing it (signal %d, %s) %s", WTERMSIG(status),
                              strsignal(WTERMSIG(status)), how);
    return ag__ck_problem(r, FORMAT, "damaged: libhdf5 failed parsing it (exit status %d) %s",
                          w == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1, how);
}

bool ag__ck_read_file(const char *path, const read_req *q, bool untrusted, report *r) {
    struct stat st = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ag__ck_problem(r, IO, "cannot open: %s", strerror(errno)), true;
    int h = 0;
    if (fstat(fd, &st) != 0)
        ag__ck_problem(r, IO, "cannot read: %s", strerror(errno));
    else if (S_ISDIR(st.st_mode))
        ag__ck_problem(r, IO, "is a directory, not a checkpoint file");
    else if (st.st_size == 0)
        ag__ck_problem(r, FORMAT, "empty file (0 bytes), not an HDF5 checkpoint");
    else
        h = check_header(fd, (uint64_t)st.st_size, r);
    /* libhdf5 opens the file by a name of the descriptor checked, so that what it parses is
     * what was checked (and what the child parsed) even if the path is replaced meanwhile */
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
    const char *at = access(name, R_OK) == 0 ? name : path;
    size_t size = (size_t)st.st_size;
    if (r->worst) {
    } else if (H5Fis_hdf5(at) <= 0) {
        ag__ck_problem(r, FORMAT, "not an HDF5 file (no HDF5 signature)");
    } else if (h > 0 && !untrusted && superblock_v3(fd)) {
        r->trusted = true;
        ag__ck_read_hdf5(at, q, size, r);
        r->trusted = false;
    } else if (ag__ck_child_read(at, q, size, r)) {
        ag__ck_read_hdf5(at, q, size, r);
    }
    close(fd);
    return !r->retry;
}

ag_checkpoint_status ag_checkpoint_verify(const char *path, char *msg, size_t msgsize) {
    report r = {.len = 0};
    if (!path || !*path) {
        ag__ck_problem(&r, INVAL, "ag_checkpoint_verify: no path given");
    } else {
        ag_train_state st = {0};
        read_req q = {.state = &st, .all = true};
        hush_t h = ag__ck_begin();
        if (!ag__ck_read_file(path, &q, false, &r)) {
            ag_train_state_clear(&st);
            r = (report){.len = 0};
            ag__ck_read_file(path, &q, true, &r);
        }
        ag__ck_end(h);
        ag_train_state_clear(&st);
        if (r.worst == SKIP) r = (report){.len = 0}; /* no /training: a file of parameters only */
    }
    ag__ck_report_write(&r, path, "", msg, msgsize);
    return ag__ck_report_status(&r, true);
}
