/* One trainer per --out folder: rank 0 of a training run holds an flock on OUT/lock (which
 * holds its pid) from before it writes anything into the folder until it exits. The kernel
 * drops an flock when its process dies, however it dies: a killed trainer leaves no stale lock. */
#ifndef TRANSLATE_LOCK_H
#define TRANSLATE_LOCK_H
#include <stdbool.h>

/* Takes the lock on dir/lock (rank 0 of a job only; other ranks return true). False after
 * printing why when another process holds it (*refused: "... is in use by pid N"), and false
 * with errno set, printing nothing, when the file cannot be made (the caller's message about an
 * unwritable folder says it). A file system without flock gets a warning and no lock. */
bool tr_lock_out(const char *dir, bool *refused);
/* Lets the lock go (a no-op when not held) */
void tr_unlock_out(void);

#endif
