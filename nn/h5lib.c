/* libhdf5 opened on the first save or load: the table of nn/h5lib.h, filled by dlopen and dlsym. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#define AG__H5_TABLE_ITSELF
#include "h5lib.h"

#include <dlfcn.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) && defined(__GLIBC__)
#include <link.h>
#define AG_H5_DROP_PAGES 1
#endif

#include "../tensor/internal.h" /* ag__drop_pages */

/* AG_HDF5_SONAME: the file name the dynamic loader found libhdf5 under when meson linked a test
 * program against it (its soname), so that dlopen finds the same library a direct link would. */
#ifndef AG_HDF5_SONAME
#error "AG_HDF5_SONAME is set by meson.build"
#endif

ag__h5_table ag__h5;

/* One save or load at a time: the lock is held from acquire to release, since Debian's libhdf5
 * is the serial build, not thread-safe. Once loaded, the library stays: unloading it after each
 * call gave back its ~6 MiB, but libhdf5's dependencies create thread-specific keys when they
 * load (5 a time, never freed: 1024 in all), with destructors that a thread which saved then
 * ran after the unload, crashing at its exit. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *lib;

/* The global scope first, as libhdf5's own relocations resolve: when the program links libhdf5
 * too and reads a variable (H5T_NATIVE_FLOAT_g), the variable lives in the program (a copy
 * relocation) and libhdf5 uses that copy; its own definition, which dlsym(lib) returns, stays
 * unused and would hold an invalid ID. */
static void *lookup(const char *name, char *why, size_t size) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) p = dlsym(lib, name);
    if (!p && !why[0]) snprintf(why, size, "%s has no symbol %s (a different HDF5 version?)", AG_HDF5_SONAME, name);
    return p;
}

/* After a load that met a corrupted object header, HDF5 1.10.8 keeps a leaked structure, and
 * its exit handler then prints "HDF5: infinite loop closing library" and a line of codes when
 * error printing is on (HDFGroup/hdf5#3790): the load has already said what was wrong, so
 * printing goes off at exit. */
static void quiet_exit(void) { ag__h5.H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* Between calls, the pages libhdf5 and its dependencies read from their files (code and
 * read-only data: ~8 MiB after a save, of the ~10 MiB the load adds) would stay in the
 * process's resident set while it trains on, although nothing of HDF5 runs. They are unmapped
 * after each call (ag__drop_pages) and come back from the page cache, by minor page faults, at
 * the next. Only where that changes nothing but residency: the non-writable segments
 * (PT_LOAD without PF_W, whole pages) of the objects that loading libhdf5 added, and
 * not of one with text relocations (whose code pages are private copies that MADV_DONTNEED
 * would drop). The writable segments, relocated data included, stay as they are. */
#ifdef AG_H5_DROP_PAGES
#define MAX_SPANS 512
static struct {
    const char *lo, *hi;
} spans[MAX_SPANS];
static int nspans;

static int count_objects(struct dl_phdr_info *info, size_t size, void *n) {
    (void)info, (void)size;
    ++*(int *)n;
    return 0;
}

static bool has_textrel(const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL))) return true;
    }
    return false;
}

/* objects from index *first on (those loaded after the count was taken): their spans */
static int add_spans(struct dl_phdr_info *info, size_t size, void *first) {
    (void)size;
    if ((*(int *)first)-- > 0 || has_textrel(info)) return 0;
    for (int i = 0; i < info->dlpi_phnum && nspans < MAX_SPANS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W)) continue;
        spans[nspans].lo = (const char *)(info->dlpi_addr + ph->p_vaddr);
        spans[nspans].hi = spans[nspans].lo + ph->p_memsz;
        nspans++;
    }
    return 0;
}
#endif

/* dlopen and fill the table; false with why set (nothing left loaded) */
static bool load(char *why, size_t size) {
    why[0] = 0;
#ifdef AG_H5_DROP_PAGES
    int before = 0;
    dl_iterate_phdr(count_objects, &before);
#endif
    /* RTLD_LOCAL: HDF5's symbols stay out of the global namespace; a program that links libhdf5
     * itself gets that same copy back (same soname) */
    lib = dlopen(AG_HDF5_SONAME, RTLD_LAZY | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(why, size, "cannot load HDF5 (%s): %s; install Debian's libhdf5-103 (or libhdf5-dev)", AG_HDF5_SONAME,
                 e ? e : "unknown error");
        return false;
    }
#define AG__H5_LOOKUP(name) ag__h5.name = (__typeof__(ag__h5.name))lookup(#name, why, size);
    AG__H5_FUNCTIONS(AG__H5_LOOKUP)
    AG__H5_FILE_LOCKING(AG__H5_LOOKUP)
    AG__H5_VARIABLES(AG__H5_LOOKUP)
#undef AG__H5_LOOKUP
    if (why[0]) { /* a half-filled table is never used (nothing of HDF5 has run yet) */
        dlclose(lib);
        lib = NULL;
        memset(&ag__h5, 0, sizeof ag__h5);
        return false;
    }
    /* H5open registers HDF5's exit handler; ours, registered after it, runs before it */
    if (ag__h5.H5open() >= 0) atexit(quiet_exit);
#ifdef AG_H5_DROP_PAGES
    dl_iterate_phdr(add_spans, &before);
#endif
    return true;
}

bool ag__h5_acquire(char *msg, size_t size) {
    char why[512] = "";
    pthread_mutex_lock(&lock);
    if (lib || load(why, sizeof why)) return true; /* the lock stays held */
    pthread_mutex_unlock(&lock);
    if (msg && size) snprintf(msg, size, "%s", why);
    return false;
}

void ag__h5_release(void) {
    /* HDF5 keeps what its free lists hold after a file closes (0.9 MiB after a save of the
     * translation model): hand it back to malloc */
    ag__h5.H5garbage_collect();
#ifdef AG_H5_DROP_PAGES
    for (int i = 0; i < nspans; i++) ag__drop_pages(spans[i].lo, spans[i].hi);
#endif
    pthread_mutex_unlock(&lock);
#ifdef __GLIBC__
    /* and malloc gives freed memory (HDF5's chunk and filter buffers: 6-9 MiB after a save)
     * back to the system */
    malloc_trim(0);
#endif
}
