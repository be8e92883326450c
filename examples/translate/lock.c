/* One trainer per --out folder (lock.h). */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "train_dist.h"

static int held = -1; /* the lock file's descriptor while the lock is held */

/* the pid the holder wrote into fd's file, or "unknown" while it has not written it yet */
static void holder_pid(int fd, char *pid, size_t size) {
    ssize_t n = pread(fd, pid, size - 1, 0);
    pid[n > 0 ? n : 0] = 0;
    pid[strcspn(pid, "\n")] = 0;
    if (!*pid) snprintf(pid, size, "unknown");
}

bool tr_lock_out(const char *dir, bool *refused) {
    *refused = false;
    if (tr_dist_rank() != 0 || held >= 0) return true;
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        if (err == EWOULDBLOCK) {
            char pid[32];
            holder_pid(fd, pid, sizeof pid);
            fprintf(stderr, "attograd-translate: %s is in use by another trainer (pid %s): give another --out, or "
                            "stop that one first\n", dir, pid);
            *refused = true;
            close(fd);
            return false;
        }
        fprintf(stderr, "attograd-translate: warning: cannot lock %s: %s: a second trainer on %s would not be "
                        "refused\n", path, strerror(err), dir);
        close(fd);
        return true;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int err = errno;
        close(fd);
        errno = err;
        return false;
    }
    held = fd;
    return true;
}

void tr_unlock_out(void) {
    if (held >= 0) close(held);
    held = -1;
}
