/* libhdf5 is opened for each checkpoint save or load and unloaded after it, not loaded with
 * libattograd (nn/h5lib.h). This program links libattograd alone (the cmocka tests link libhdf5
 * themselves, which keeps it loaded and hides the lookups in a dlopen'd copy): libhdf5 must not
 * be mapped at the start, nor after each call: a load of a missing file (which must fail as
 * such), a save, and a load that must give back the saved values bit for bit; then the same
 * again, through a second dlopen. Exit 0 only then. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attograd.h"

static bool hdf5_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) {
        perror("/proc/self/maps");
        exit(1);
    }
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, "libhdf5") != NULL;
    fclose(f);
    return found;
}

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "%s: %s\n", what, msg);
    return 1;
}

int main(void) {
    if (hdf5_mapped()) return fail("start", "libhdf5 is mapped before any checkpoint call");
    ag_rng r = ag_rng_new(11);
    ag_params *p = ag_params_new(AG_F32);
    ag_linear_new(p, "0", 5, 7, true, &r);
    const float *v = (const float *)p->data;
    float *saved = malloc(sizeof(float) * (size_t)p->numel);
    memcpy(saved, v, sizeof(float) * (size_t)p->numel);
    if (hdf5_mapped()) return fail("before any checkpoint call", "libhdf5 is mapped");

    char dir[] = "/tmp/ag_h5_XXXXXX", path[64], msg[2048];
    if (!mkdtemp(dir)) return fail("mkdtemp", "failed");
    for (int round = 1; round <= 2; round++) {
        snprintf(path, sizeof path, "%s/none.h5", dir);
        if (ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CKPT_EIO || !strstr(msg, "none.h5"))
            return fail("loading a missing file", msg);
        if (hdf5_mapped()) return fail("after loading a missing file", "libhdf5 is still mapped");
        snprintf(path, sizeof path, "%s/first.h5", dir);
        if (ag_checkpoint_save(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CKPT_OK) return fail("save", msg);
        if (hdf5_mapped()) return fail("after the save", "libhdf5 is still mapped");
        for (int i = 0; i < p->count; i++) /* the tensors, not the slab's alignment padding */
            ag_fill_(p->list[i], -1.0);
        if (ag_checkpoint_load(path, p, NULL, NULL, NULL, msg, sizeof msg) != AG_CKPT_OK) return fail("load", msg);
        if (memcmp(p->data, saved, sizeof(float) * (size_t)p->numel) != 0)
            return fail("load", "the loaded values differ from the saved ones");
        if (hdf5_mapped()) return fail("after the load", "libhdf5 is still mapped");
    }
    unlink(path);
    rmdir(dir);
    int64_t n = 0;
    for (int i = 0; i < p->count; i++) n += ag_numel(p->list[i]);
    free(saved);
    ag_params_free(p);
    printf("libhdf5 loaded only during checkpoint calls; %lld values round-tripped twice\n", (long long)n);
    return 0;
}
