/* HDF5 checkpoints (layout in docs/checkpoint.md).
 *
 * Files are the outside world, so nothing here aborts or calls ag_error: every problem becomes
 * a line of a report that ends up in the caller's message buffer, and HDF5's own error printing
 * is switched off for the duration of each call (its innermost error text is quoted instead).
 * Loading stages everything (slab copies, optimizer hyperparameters, a training-state copy)
 * and commits with memcpy only when the load as a whole succeeds. */
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"

/* Record a problem; returns false, so that "return ag__ck_problem(...)" reads as failing. */
bool ag__ck_problem(report *r, int severity, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (severity > r->worst) r->worst = severity;
    size_t n = strlen(buf);
    if (r->len + n + 3 > sizeof r->text) {
        r->omitted++;
        return false;
    }
    if (r->count++) {
        memcpy(r->text + r->len, "; ", 2);
        r->len += 2;
    }
    memcpy(r->text + r->len, buf, n + 1);
    r->len += n;
    return false;
}

ag_checkpoint_status ag__ck_report_status(const report *r, bool strict) {
    switch (r->worst) {
    case 0: return AG_CHECKPOINT_OK;
    case SKIP: return strict ? AG_CHECKPOINT_EMISMATCH : AG_CHECKPOINT_PARTIAL;
    case MISMATCH: return AG_CHECKPOINT_EMISMATCH;
    case FORMAT: return AG_CHECKPOINT_EFORMAT;
    case IO: return AG_CHECKPOINT_EIO;
    case INVAL: return AG_CHECKPOINT_EINVAL;
    default: return AG_CHECKPOINT_ENOMEM;
    }
}

/* "<path>: <problem>" or "<path>: <lead>N problems: <p1>; <p2>; ..." into msg */
void ag__ck_report_write(const report *r, const char *path, const char *lead, char *msg, size_t size) {
    if (!msg || !size) return;
    int total = r->count + r->omitted, n;
    if (total == 0)
        n = snprintf(msg, size, "%s", "");
    else if (total == 1 && !*lead)
        n = snprintf(msg, size, "%s: %s", path ? path : "(null)", r->text);
    else
        n = snprintf(msg, size, "%s: %s%d problem%s: %s%s", path ? path : "(null)", lead, total, total > 1 ? "s" : "",
                     r->text, r->omitted ? "; ... (more omitted)" : "");
    if (n >= 0 && (size_t)n >= size && size > 4) strcpy(msg + size - 4, "...");
}

const char *ag_checkpoint_status_name(ag_checkpoint_status s) {
    switch (s) {
    case AG_CHECKPOINT_OK: return "ok";
    case AG_CHECKPOINT_PARTIAL: return "partial";
    case AG_CHECKPOINT_EIO: return "io error";
    case AG_CHECKPOINT_EFORMAT: return "format error";
    case AG_CHECKPOINT_EMISMATCH: return "mismatch";
    case AG_CHECKPOINT_EINVAL: return "invalid argument";
    case AG_CHECKPOINT_ENOMEM: return "out of memory";
    }
    return "unknown status";
}

/* ---- HDF5 error handling ------------------------------------------------------------------ */

static pthread_mutex_t hdf5_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t hdf5_once = PTHREAD_ONCE_INIT;

/* After a load that met a corrupted object header, HDF5 1.10.8 keeps a leaked structure, and
 * its exit handler then prints "HDF5: infinite loop closing library" and a line of codes when
 * error printing is on (HDFGroup/hdf5#3790): the load has already said what was wrong, so
 * printing goes off at exit. */
static void quiet_exit(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

/* CRC-32 tables for slicing by 8: crc_table[k][b] is the CRC of byte b followed by k zeros */
static uint32_t crc_table[8][256];

/* H5open registers HDF5's exit handler; ours, registered after it, runs before it. And the
 * table of the CRC-32. */
static void hdf5_init(void) {
    if (H5open() >= 0) atexit(quiet_exit);
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) crc_table[k][i] = crc_table[0][crc_table[k - 1][i] & 0xFF] ^ (crc_table[k - 1][i] >> 8);
}

/* Eight bytes a step (a checkpoint's data is checked on every save and load). */
uint32_t ag__ck_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

hush_t ag__ck_begin(void) {
    pthread_once(&hdf5_once, hdf5_init);
    pthread_mutex_lock(&hdf5_lock);
    hush_t h = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &h.fn, &h.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return h;
}

void ag__ck_end(hush_t h) {
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, h.fn, h.data);
    /* HDF5 keeps what its free lists hold after a file closes (0.9 MiB after a save of the
     * translation model): hand it back to malloc */
    H5garbage_collect();
    pthread_mutex_unlock(&hdf5_lock);
    /* The heap is the program's: HDF5's freed buffers (6-9 MiB after a save of the translation
     * model) stay with malloc, and a program that wants them back calls malloc_trim itself. */
}

/* A failed system call's entry reads "file write failed: time = ..., filename = ..., errno =
 * 28, error message = 'No space left on device', buf = 0x..., ...": only its error message
 * says something to the user. */
static herr_t cause_walk(unsigned n, const H5E_error2_t *e, void *u) {
    cause_t *c = u;
    const char *d = e->desc ? e->desc : "", *m = strstr(d, "error message = '"), *end;
    if (m && (end = strchr(m += 17, '\'')))
        snprintf(c->desc, sizeof c->desc, "%.*s", (int)(end - m), m);
    else
        snprintf(c->desc, sizeof c->desc, "%s", d);
    for (char *p = c->desc; *p; p++)
        if (*p == '\n') *p = ' ';
    c->minor = e->min_num;
    return 0;
}

/* The innermost entry of HDF5's error stack (the actual cause), then clear the stack. */
cause_t ag__ck_cause(void) {
    cause_t c = {"unknown HDF5 error", -1};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, cause_walk, &c);
    H5Eclear2(H5E_DEFAULT);
    return c;
}

const char *ag__ck_type_desc(hid_t ty, char *buf) {
    size_t bits = 8 * H5Tget_size(ty);
    switch (H5Tget_class(ty)) {
    case H5T_INTEGER: sprintf(buf, "%s%zu (integer)", H5Tget_sign(ty) == H5T_SGN_NONE ? "uint" : "int", bits); break;
    case H5T_FLOAT: sprintf(buf, "float%zu", bits); break;
    case H5T_STRING: strcpy(buf, "string"); break;
    case H5T_ENUM: strcpy(buf, "enum (e.g. bool)"); break;
    case H5T_COMPOUND: strcpy(buf, "compound"); break;
    default: strcpy(buf, "a non-numeric type"); break;
    }
    return buf;
}

char *ag__ck_dims_str(int nd, const hsize_t *dims, char *buf) {
    int64_t s[AG_MAX_DIMS];
    if (nd > AG_MAX_DIMS) {
        sprintf(buf, "(%d dims)", nd);
        return buf;
    }
    for (int i = 0; i < nd; i++) s[i] = (int64_t)dims[i];
    return ag__shape_str(nd, s, buf);
}

/* ---- writing ------------------------------------------------------------------------------ */

static herr_t attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hsize_t n, const void *v) {
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, mtype, v);
    if (sp >= 0 && H5Sclose(sp) < 0) r = -1;
    if (a >= 0 && H5Aclose(a) < 0) r = -1; /* last: a failing call's error stack is the cause */
    return r;
}

static herr_t attr_i64(hid_t loc, const char *name, int64_t v) {
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

static herr_t attr_f64(hid_t loc, const char *name, double v) {
    return attr_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &v);
}

/* A fixed-length UTF-8 string of exactly its bytes (null-padded; "" is one null byte), which
 * h5py reads as bytes. Not variable-length: those live in the global heap, whose sizes carry no
 * checksum and which HDF5 1.10 trusts (a damaged one made H5Aread copy past its buffer). */
static hid_t string_type(const char *s) {
    size_t n = strlen(s);
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, n ? n : 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
                   H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
        H5Tclose(t);
        t = -1;
    }
    return t;
}

static herr_t attr_str(hid_t loc, const char *name, const char *s) {
    hid_t t = string_type(s);
    char one = 0;
    herr_t r = t < 0 ? -1 : attr_write(loc, name, t, t, 0, *s ? s : &one);
    if (t >= 0) H5Tclose(t);
    return r;
}

/* Config strings longer than this are datasets of /config, not attributes (docs/checkpoint.md). */
#define ATTR_STRING_MAX 255

/* The CRC-32 of n elements of es bytes at data, as their little-endian bytes. */
uint32_t ag__ck_crc32_le(const void *data, size_t n, size_t es) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return ag__ck_crc32(0, data, n * es);
#else
    uint32_t c = 0;
    const unsigned char *p = data;
    unsigned char le[16];
    for (size_t i = 0; i < n; i++, p += es) {
        for (size_t k = 0; k < es; k++) le[k] = p[es - 1 - k];
        c = ag__ck_crc32(c, le, es);
    }
    return c;
#endif
}

/* A contiguous dataset name of loc with type ftype and space sp from data (mtype in memory),
 * and its "crc32" attribute: the CRC-32 of crc_bytes little-endian bytes (elements of es). The
 * attribute lives in the dataset's checksummed object header, so a load can prove the data it
 * reads (format 2: no chunking, no Fletcher32, no chunk index). */
static herr_t write_dataset(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hid_t sp, const void *data,
                            size_t n, size_t es) {
    hid_t ds = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ds < 0) return -1;
    uint32_t crc = ag__ck_crc32_le(data, n, es);
    herr_t r = n ? H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0;
    if (r >= 0) r = attr_write(ds, AG_CK_CRC_ATTR, H5T_STD_U32LE, H5T_NATIVE_UINT32, 0, &crc);
    /* last: a failing call's error stack is the cause reported */
    if (H5Dclose(ds) < 0) r = -1;
    return r;
}

/* A long config string: a one-element dataset of its fixed-length string type (docs/checkpoint.md).
 * Not an attribute: past 64 KiB an attribute lives in the group's dense storage, whose large
 * objects carry no checksum. */
static herr_t write_string(hid_t loc, const char *name, const char *s) {
    hsize_t one = 1;
    hid_t t = string_type(s), sp = H5Screate_simple(1, &one, NULL);
    herr_t r = t < 0 || sp < 0 ? -1 : write_dataset(loc, name, t, t, sp, s, strlen(s), 1);
    if ((sp >= 0 && H5Sclose(sp) < 0) || (t >= 0 && H5Tclose(t) < 0)) r = -1;
    return r;
}

/* A group that remembers the order its links and attributes were created in, so readers
 * (h5py, the loader's config) see parameters and config keys in the order they were added. */
static hid_t group_new(hid_t loc, const char *name) {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    /* links and attributes stay messages of the group's object header (checksummed), never
     * move to dense storage (fractal heaps and B-trees): fewer structures for libhdf5 to trust */
    H5Pset_link_phase_change(gcpl, COMPACT_MAX, COMPACT_MAX);
    H5Pset_attr_phase_change(gcpl, COMPACT_MAX, COMPACT_MAX);
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
}

/* Dataset name in loc with t's shape from numel(t) contiguous elements at data (t's dtype). */
static herr_t write_tensor(hid_t loc, const char *name, const ag_tensor *t, const void *data) {
    hsize_t dims[AG_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
    hid_t sp = t->ndim ? H5Screate_simple(t->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    bool f32 = t->dtype == AG_F32;
    herr_t r = sp < 0 ? -1 : write_dataset(loc, name, f32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE,
                                            f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, sp, data,
                                            (size_t)ag_numel(t), ag_dtype_size(t->dtype));
    if (sp >= 0 && H5Sclose(sp) < 0) r = -1;
    return r;
}

/* every parameter's slice of slab as a dataset of loc */
static herr_t write_slab(hid_t loc, const ag_params *p, const char *slab) {
    size_t es = ag_dtype_size(p->dtype);
    for (int i = 0; i < p->count; i++) {
        const ag_tensor *t = p->list[i];
        if (write_tensor(loc, t->name, t, slab + (size_t)t->offset * es) < 0) return -1;
    }
    return 0;
}

const char *ag__ck_kind_name(ag_optim_kind k) {
    return k == AG_OPTIM_SGD ? "sgd" : k == AG_OPTIM_ADAM ? "adam" : k == AG_OPTIM_ADAMW ? "adamw" : "?";
}

#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        if ((x) < 0) return -1;                                                                                    \
    } while (0)

/* The whole file. Handles left open on failure are closed by the file's strong close degree. */
static herr_t write_all(hid_t f, const ag_params *p, const ag_optim *o, const ag_train_state *s) {
    hid_t g, sub;
    TRY(attr_str(f, "format", FORMAT_NAME));
    TRY(attr_i64(f, "format_version", FORMAT_VERSION));
    TRY(g = group_new(f, "model"));
    TRY(write_slab(g, p, p->data));
    TRY(H5Gclose(g));
    if (o) {
        TRY(g = group_new(f, "optimizer"));
        TRY(attr_str(g, "kind", ag__ck_kind_name(o->kind)));
        TRY(attr_f64(g, "lr", o->lr));
        TRY(attr_write(g, "betas", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, o->betas));
        TRY(attr_f64(g, "eps", o->eps));
        TRY(attr_f64(g, "weight_decay", o->weight_decay));
        TRY(attr_f64(g, "momentum", o->momentum));
        TRY(attr_f64(g, "dampening", o->dampening));
        TRY(attr_i64(g, "nesterov", o->nesterov));
        if (o->kind != AG_OPTIM_SGD) TRY(attr_i64(g, "amsgrad", o->amsgrad));
        TRY(attr_i64(g, "step", o->step));
        for (int k = 0; k < ag_optim_state_count(o); k++) {
            void *slab;
            const char *name = ag_optim_state(o, k, &slab);
            TRY(sub = group_new(g, name));
            TRY(write_slab(sub, p, slab));
            TRY(H5Gclose(sub));
        }
        TRY(H5Gclose(g));
    }
    if (s) {
        TRY(g = group_new(f, "training"));
        TRY(attr_i64(g, "global_step", s->global_step));
        TRY(attr_i64(g, "epoch", s->epoch));
        TRY(attr_i64(g, "data_position", s->data_position));
        TRY(sub = group_new(g, "rng"));
        for (int i = 0; i < s->nrng; i++) {
            uint64_t v[2] = {s->rng[i].rng.seed, s->rng[i].rng.counter};
            TRY(attr_write(sub, s->rng[i].name, H5T_STD_U64LE, H5T_NATIVE_UINT64, 2, v));
        }
        TRY(H5Gclose(sub));
        TRY(H5Gclose(g));
        TRY(g = group_new(f, "config"));
        for (int i = 0; i < s->nconfig; i++) {
            const ag_config_entry *e = &s->config[i];
            TRY(e->type == AG_CONFIG_INT ? attr_i64(g, e->key, e->i)
                : e->type == AG_CONFIG_DOUBLE                ? attr_f64(g, e->key, e->d)
                : strlen(e->s) <= ATTR_STRING_MAX             ? attr_str(g, e->key, e->s)
                                                              : write_string(g, e->key, e->s));
        }
        TRY(H5Gclose(g));
    }
    return 0;
}

static bool bounded(const char *s, size_t cap) { return memchr(s, 0, cap) && *s; }

/* Arguments a file cannot be made from; reported as INVAL. */
static bool check_save_args(const ag_params *p, const ag_optim *o, const ag_train_state *s, report *r) {
    if (!p) return ag__ck_problem(r, INVAL, "no parameters to save");
    if (p->dtype != AG_F32 && p->dtype != AG_F64) return ag__ck_problem(r, INVAL, "parameters must be f32 or f64");
    for (int i = 0; i < p->count; i++) {
        const char *n = p->list[i]->name;
        if (!n || !*n || strchr(n, '/') || strcmp(n, ".") == 0)
            ag__ck_problem(r, INVAL, "parameter %d's name '%s' cannot name an HDF5 dataset (empty, '.' or contains '/')", i,
                    n ? n : "(null)");
    }
    if (o && (o->params != p || o->numel != p->numel))
        ag__ck_problem(r, INVAL, "the optimizer was made for another parameter set, or before the last parameter was added");
    int64_t count[] = {o ? o->step : 0, s ? s->global_step : 0, s ? s->epoch : 0, s ? s->data_position : 0};
    const char *count_name[] = {"the optimizer's step", "global_step", "epoch", "data_position"};
    for (int i = 0; i < 4; i++)
        if (count[i] < 0 || count[i] > AG_CK_COUNT_MAX)
            ag__ck_problem(r, INVAL, "%s = %lld, expected 0 to %lld", count_name[i], (long long)count[i],
                           (long long)AG_CK_COUNT_MAX);
    if (!s) return !r->worst;
    if (s->nrng < 0 || s->nrng > AG_CHECKPOINT_MAX_RNGS || s->nconfig < 0 || (s->nconfig && !s->config))
        return ag__ck_problem(r, INVAL, "training state holds %d rngs (at most %d) and %d config entries at %p", s->nrng,
                       AG_CHECKPOINT_MAX_RNGS, s->nconfig, (void *)s->config);
    for (int i = 0; i < s->nrng; i++) {
        if (!bounded(s->rng[i].name, AG_CHECKPOINT_NAME_MAX)) ag__ck_problem(r, INVAL, "rng %d has no name", i);
        for (int j = 0; j < i; j++)
            if (strncmp(s->rng[i].name, s->rng[j].name, AG_CHECKPOINT_NAME_MAX) == 0)
                ag__ck_problem(r, INVAL, "rng name '%.63s' appears twice", s->rng[i].name);
    }
    for (int i = 0; i < s->nconfig; i++) {
        const ag_config_entry *e = &s->config[i];
        if (!bounded(e->key, AG_CHECKPOINT_NAME_MAX)) ag__ck_problem(r, INVAL, "config entry %d has no key", i);
        if (e->type == AG_CONFIG_STRING && !e->s) ag__ck_problem(r, INVAL, "config '%.63s': string is NULL", e->key);
        if ((unsigned)e->type > AG_CONFIG_STRING) ag__ck_problem(r, INVAL, "config '%.63s': bad type %d", e->key, e->type);
        for (int j = 0; j < i; j++)
            if (strncmp(e->key, s->config[j].key, AG_CHECKPOINT_NAME_MAX) == 0)
                ag__ck_problem(r, INVAL, "config key '%.63s' appears twice", e->key);
    }
    return !r->worst;
}

/* Strong close (closing the file closes anything a failure left open). No file locks: writers
 * never touch a file at its final path, so locks add nothing but failures on file systems
 * without them. */
hid_t ag__ck_fapl_new(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, false, true);
#endif
    return fapl;
}

static int fsync_path(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd), err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* the directory holding path ("." for a bare name) */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* The buffer of HDF5's core driver, taken over when the file closes instead of freed. */
typedef struct {
    void *mem, *kept;
    size_t size, kept_size;
} image_t;

static void *image_malloc(size_t size, H5FD_file_image_op_t op, void *u) {
    image_t *im = u;
    im->mem = malloc(size);
    im->size = im->mem ? size : 0;
    return im->mem;
}

static void *image_realloc(void *p, size_t size, H5FD_file_image_op_t op, void *u) {
    image_t *im = u;
    void *q = realloc(p, size);
    if (q) im->mem = q, im->size = size;
    return q;
}

static herr_t image_free(void *p, H5FD_file_image_op_t op, void *u) {
    image_t *im = u;
    if (p == im->mem && op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) {
        /* the last file closed is the one made: H5Fcreate first opens and closes an existing
         * file of that name (a stale temporary file) to see whether it is open already */
        free(im->kept);
        im->kept = p;
        im->kept_size = im->size;
    } else {
        free(p);
    }
    im->mem = NULL;
    return 0;
}

static void *image_memcpy(void *dst, const void *src, size_t n, H5FD_file_image_op_t op, void *u) {
    return memcpy(dst, src, n);
}

static void *image_udata_copy(void *u) { return u; }
static herr_t image_udata_free(void *u) { return 0; }

/* The length of the file in an image: the end-of-file address of its version 3 superblock
 * (the 1.10 format: signature, version 3, size of offsets 8, ..., then base, extension and
 * end-of-file addresses), which follows the user block, or 0 if the image has no such
 * superblock that fits in it. */
static size_t image_length(const unsigned char *b, size_t size) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (size < AG_CK_HEADER + 48) return 0;
    b += AG_CK_HEADER;
    if (memcmp(b, sig, 8) != 0 || b[8] != AG_CK_SUPERBLOCK || b[9] != 8) return 0;
    uint64_t eof = 0;
    for (int i = 7; i >= 0; i--) eof = eof << 8 | b[28 + i];
    return eof <= size && eof > AG_CK_HEADER ? (size_t)eof : 0;
}

/* The header in the user block (docs/checkpoint.md): what the loader checks before libhdf5
 * reads a byte of the file. */
static void write_header(char *image, size_t n) {
    memset(image, 0, AG_CK_HEADER);
    snprintf(image, AG_CK_HEADER, AG_CK_MAGIC "length %zu\ncrc32 %08x\n", n,
             (unsigned)ag__ck_crc32(0, image + AG_CK_HEADER, n - AG_CK_HEADER));
}

/* The whole file built in memory by HDF5's core driver (no backing store), its buffer taken
 * over when the file closes: the bytes (*size of them, malloc'd), or NULL with the problem
 * reported. libhdf5 never writes to the disk, so a full disk or a failing device cannot leave
 * it holding a file it failed to close (its exit handler would crash on it), and every write
 * to the disk is checked here. name only names the file in memory. */
static char *build_image(const char *name, const ag_params *p, const ag_optim *o, const ag_train_state *s,
                         size_t *size, report *r) {
    image_t im = {NULL, NULL, 0, 0};
    H5FD_file_image_callbacks_t cb = {image_malloc, image_memcpy, image_realloc, image_free,
                                      image_udata_copy, image_udata_free, &im};
    hid_t fapl = ag__ck_fapl_new();
    /* 1.10 file format: every metadata structure carries a checksum (superblock version 3),
     * readable by any HDF5 >= 1.10 */
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
    H5Pset_fapl_core(fapl, (size_t)1 << 20, false);
    H5Pset_file_image_callbacks(fapl, &cb);
    /* no 2 KiB aggregation blocks for metadata and small data: their unused tails would stay
     * in the file as gaps */
    H5Pset_meta_block_size(fapl, 0);
    H5Pset_small_data_block_size(fapl, 0);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_userblock(fcpl, AG_CK_HEADER);
    hid_t f = H5Fcreate(name, H5F_ACC_TRUNC, fcpl, fapl);
    cause_t c = ag__ck_cause(); /* before the next HDF5 call clears the error stack */
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (f < 0) return ag__ck_problem(r, IO, "HDF5 cannot create '%s' in memory: %s", name, c.desc), NULL;
    bool ok = write_all(f, p, o, s) >= 0;
    c = ag__ck_cause();
    if (H5Fclose(f) < 0 && ok) ok = false, c = ag__ck_cause();
    size_t n = ok ? image_length(im.kept, im.kept_size) : 0;
    if (!ok || !n) {
        free(im.kept);
        free(im.mem);
        if (ok) return ag__ck_problem(r, IO, "HDF5 built '%s' in memory without a version 3 superblock", name), NULL;
        return ag__ck_problem(r, IO, "writing '%s' failed: %s", name, c.desc), NULL;
    }
    write_header(im.kept, n);
    *size = n;
    return im.kept;
}

/* n bytes of buf into a new file path, fsync'd when sync; false with errno set */
static bool write_file(const char *path, const char *buf, size_t n, bool sync) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            close(fd);
            errno = err;
            return false;
        }
        buf += w;
        n -= (size_t)w;
    }
    if (sync && fsync(fd) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return false;
    }
    return close(fd) == 0; /* some file systems (NFS) report a failed write only here */
}

/* build the file in memory, write it to tmp, fsync, read it back, rename over path, fsync the
 * directory */
static bool save_atomic(const char *path, const char *tmp, const ag_params *p, const ag_optim *o,
                        const ag_train_state *s, bool sync, report *r) {
    size_t size = 0;
    char *image = build_image(tmp, p, o, s, &size, r);
    if (!image) return false;
    bool written = write_file(tmp, image, size, sync);
    int err = errno;
    free(image);
    if (!written) {
        ag__ck_problem(r, IO, "cannot %s '%s': %s", access(tmp, F_OK) == 0 ? "write" : "create", tmp, strerror(err));
        unlink(tmp);
        return false;
    }
    if (!ag__ck_read_back(tmp, p, o, s, r)) {
        unlink(tmp);
        return false;
    }
    if (rename(tmp, path) < 0) {
        ag__ck_problem(r, IO, "cannot rename '%s' over it: %s", tmp, strerror(errno));
        unlink(tmp);
        return false;
    }
    char *dir = dir_of(path);
    /* some file systems cannot sync a directory (EINVAL); the rename is then as durable as they get */
    if (sync && dir && fsync_path(dir, O_RDONLY | O_DIRECTORY) < 0 && errno != EINVAL && errno != ENOTSUP)
        ag__ck_problem(r, IO, "saved, but cannot fsync directory '%s' (the new file may not survive a power loss): %s", dir,
                strerror(errno));
    free(dir);
    return !r->worst;
}

ag_checkpoint_status ag_checkpoint_save(const char *path, const ag_params *params, const ag_optim *opt,
                                  const ag_train_state *state, const ag_checkpoint_save_opts *opts, char *msg,
                                  size_t msgsize) {
    report r = {.len = 0};
    if (!path || !*path)
        ag__ck_problem(&r, INVAL, "ag_checkpoint_save: no path given");
    else
        check_save_args(params, opt, state, &r);
    if (!r.worst) {
        size_t n = strlen(path) + 5;
        char *tmp = malloc(n);
        if (!tmp) {
            ag__ck_problem(&r, NOMEM, "out of memory");
        } else {
            snprintf(tmp, n, "%s.tmp", path);
            hush_t h = ag__ck_begin();
            save_atomic(path, tmp, params, opt, state, !(opts && opts->no_fsync), &r);
            ag__ck_end(h);
            free(tmp);
        }
    }
    ag__ck_report_write(&r, path, "", msg, msgsize);
    return ag__ck_report_status(&r, true);
}
