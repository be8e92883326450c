/* libhdf5 opened on first use: the table of nn/h5lib.h, filled by dlopen and dlsym. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#define AG__H5_TABLE_ITSELF
#include "h5lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* AG_HDF5_SONAME: the file name the dynamic loader found libhdf5 under when meson linked a test
 * program against it (its soname), so that dlopen finds the same library a direct link would. */
#ifndef AG_HDF5_SONAME
#error "AG_HDF5_SONAME is set by meson.build"
#endif

ag__h5_table ag__h5;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char why[512]; /* empty once the table is complete */

/* The global scope first, as libhdf5's own relocations resolve: when the program links libhdf5
 * too and reads a variable (H5T_NATIVE_FLOAT_g), the variable lives in the program (a copy
 * relocation) and libhdf5 uses that copy; its own definition, which dlsym(lib) returns, stays
 * unused and would hold an invalid ID. */
static void *lookup(void *lib, const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) p = dlsym(lib, name);
    if (!p && !why[0]) snprintf(why, sizeof why, "%s has no symbol %s (a different HDF5 version?)", AG_HDF5_SONAME, name);
    return p;
}

static void load(void) {
    /* RTLD_LOCAL: HDF5's symbols stay out of the global namespace, as a linked library's would
     * not; a program that links libhdf5 itself gets that same copy back (same soname) */
    void *lib = dlopen(AG_HDF5_SONAME, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load HDF5 (%s): %s; install Debian's libhdf5-103 (or libhdf5-dev)", AG_HDF5_SONAME,
                 e ? e : "unknown error");
        return;
    }
#define AG__H5_LOOKUP(name) ag__h5.name = (__typeof__(ag__h5.name))lookup(lib, #name);
    AG__H5_FUNCTIONS(AG__H5_LOOKUP)
    AG__H5_FILE_LOCKING(AG__H5_LOOKUP)
    AG__H5_VARIABLES(AG__H5_LOOKUP)
#undef AG__H5_LOOKUP
    /* a half-filled table must not be used: keep the library (dlclose of HDF5 is not safe after
     * H5open) but report it unusable */
}

bool ag__h5_open(char *msg, size_t size) {
    pthread_once(&once, load);
    if (why[0] && msg && size) snprintf(msg, size, "%s", why);
    return !why[0];
}
