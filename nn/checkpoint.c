/* HDF5 checkpoints (layout in docs/checkpoint.md).
 *
 * Files are the outside world, so nothing here aborts or calls ag_error: every problem becomes
 * a line of a report that ends up in the caller's message buffer, and HDF5's own error printing
 * is switched off for the duration of each call (its innermost error text is quoted instead).
 * Loading stages everything (slab copies, optimizer hyperparameters, a training-state copy)
 * and commits with memcpy only when the load as a whole succeeds. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tensor/internal.h"
#include "checkpoint.h"

#define FORMAT_NAME "attograd-checkpoint"
#define FORMAT_VERSION 1
/* Largest chunk written: HDF5 caps chunks at 4 GiB, and a dataset must be chunked to carry a
 * Fletcher32 checksum. */
#define CHUNK_MAX ((hsize_t)1 << 30)

/* ---- the report: every problem found, joined into one message ----------------------------- */

/* Severity of a problem; the worst one decides the status. SKIP problems are what a non-strict
 * load leaves out (a missing, unexpected or misshapen tensor); the rest always fail. */
enum { SKIP = 1, MISMATCH, FORMAT, IO, INVAL, NOMEM };

typedef struct {
    char text[8192];
    size_t len;
    int count, omitted, worst;
} report;

/* Record a problem; returns false, so that "return problem(...)" reads as failing. */
static bool problem(report *r, int severity, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool problem(report *r, int severity, const char *fmt, ...) {
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

static ag_ckpt_status report_status(const report *r, bool strict) {
    switch (r->worst) {
    case 0: return AG_CKPT_OK;
    case SKIP: return strict ? AG_CKPT_EMISMATCH : AG_CKPT_PARTIAL;
    case MISMATCH: return AG_CKPT_EMISMATCH;
    case FORMAT: return AG_CKPT_EFORMAT;
    case IO: return AG_CKPT_EIO;
    case INVAL: return AG_CKPT_EINVAL;
    default: return AG_CKPT_ENOMEM;
    }
}

/* "<path>: <problem>" or "<path>: <lead>N problems: <p1>; <p2>; ..." into msg */
static void report_write(const report *r, const char *path, const char *lead, char *msg, size_t size) {
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

const char *ag_ckpt_status_name(ag_ckpt_status s) {
    switch (s) {
    case AG_CKPT_OK: return "ok";
    case AG_CKPT_PARTIAL: return "partial";
    case AG_CKPT_EIO: return "io error";
    case AG_CKPT_EFORMAT: return "format error";
    case AG_CKPT_EMISMATCH: return "mismatch";
    case AG_CKPT_EINVAL: return "invalid argument";
    case AG_CKPT_ENOMEM: return "out of memory";
    }
    return "unknown status";
}

/* ---- HDF5 error handling ------------------------------------------------------------------ */

typedef struct {
    H5E_auto2_t fn;
    void *data;
} hush_t;

static hush_t hush(void) {
    hush_t h = {NULL, NULL};
    H5Eget_auto2(H5E_DEFAULT, &h.fn, &h.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return h;
}

static void unhush(hush_t h) {
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, h.fn, h.data);
}

typedef struct {
    char desc[300];
    hid_t minor;
} cause_t;

static herr_t cause_walk(unsigned n, const H5E_error2_t *e, void *u) {
    cause_t *c = u;
    snprintf(c->desc, sizeof c->desc, "%s", e->desc ? e->desc : "");
    for (char *p = c->desc; *p; p++)
        if (*p == '\n') *p = ' ';
    c->minor = e->min_num;
    return 0;
}

/* The innermost entry of HDF5's error stack (the actual cause), then clear the stack. */
static cause_t cause(void) {
    cause_t c = {"unknown HDF5 error", -1};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, cause_walk, &c);
    H5Eclear2(H5E_DEFAULT);
    return c;
}

static const char *type_desc(hid_t ty, char *buf) {
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

static char *dims_str(int nd, const hsize_t *dims, char *buf) {
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
    hid_t a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t r = a < 0 ? -1 : H5Awrite(a, mtype, v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return r;
}

static herr_t attr_i64(hid_t loc, const char *name, int64_t v) {
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &v);
}

static herr_t attr_f64(hid_t loc, const char *name, double v) {
    return attr_write(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &v);
}

/* variable-length UTF-8, which h5py reads as str */
static herr_t attr_str(hid_t loc, const char *name, const char *s) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    herr_t r = attr_write(loc, name, t, t, 0, &s);
    H5Tclose(t);
    return r;
}

/* A group that remembers the order its links and attributes were created in, so readers
 * (h5py, the loader's config) see parameters and config keys in the order they were added. */
static hid_t group_new(hid_t loc, const char *name) {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
}

/* Dataset name in loc with t's shape from numel(t) contiguous elements at data (t's dtype). */
static herr_t write_tensor(hid_t loc, const char *name, const ag_tensor *t, const void *data) {
    hsize_t dims[AG_MAX_DIMS], chunk[AG_MAX_DIMS], bytes = ag_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) bytes *= chunk[d] = dims[d] = (hsize_t)t->shape[d];
    hid_t sp = t->ndim ? H5Screate_simple(t->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (t->ndim && bytes) {
        /* checksummed data lets a load tell a flipped bit from a weight */
        hsize_t row = bytes / dims[0];
        if (bytes > CHUNK_MAX) chunk[0] = row >= CHUNK_MAX ? 1 : CHUNK_MAX / row;
        if (chunk[0] * row < ((hsize_t)1 << 32)) {
            H5Pset_chunk(dcpl, t->ndim, chunk);
            H5Pset_fletcher32(dcpl);
        }
    }
    bool f32 = t->dtype == AG_F32;
    hid_t ds = H5Dcreate2(loc, name, f32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    herr_t r = ds < 0 ? -1 : bytes ? H5Dwrite(ds, f32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL,
                                              H5P_DEFAULT, data) : 0;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
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

static const char *kind_name(ag_optim_kind k) {
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
    H5Gclose(g);
    if (o) {
        TRY(g = group_new(f, "optimizer"));
        TRY(attr_str(g, "kind", kind_name(o->kind)));
        TRY(attr_f64(g, "lr", o->lr));
        TRY(attr_write(g, "betas", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, o->betas));
        TRY(attr_f64(g, "eps", o->eps));
        TRY(attr_f64(g, "weight_decay", o->weight_decay));
        TRY(attr_f64(g, "momentum", o->momentum));
        TRY(attr_f64(g, "dampening", o->dampening));
        TRY(attr_i64(g, "nesterov", o->nesterov));
        TRY(attr_i64(g, "step", o->step));
        for (int k = 0; k < ag_optim_state_count(o); k++) {
            void *slab;
            const char *name = ag_optim_state(o, k, &slab);
            TRY(sub = group_new(g, name));
            TRY(write_slab(sub, p, slab));
            H5Gclose(sub);
        }
        H5Gclose(g);
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
        H5Gclose(sub);
        H5Gclose(g);
        TRY(g = group_new(f, "config"));
        for (int i = 0; i < s->nconfig; i++) {
            const ag_config_entry *e = &s->config[i];
            TRY(e->type == AG_CONFIG_INT ? attr_i64(g, e->key, e->i)
                : e->type == AG_CONFIG_DOUBLE ? attr_f64(g, e->key, e->d) : attr_str(g, e->key, e->s));
        }
        H5Gclose(g);
    }
    return 0;
}

static bool bounded(const char *s, size_t cap) { return memchr(s, 0, cap) && *s; }

/* Arguments a file cannot be made from; reported as INVAL. */
static bool check_save_args(const ag_params *p, const ag_optim *o, const ag_train_state *s, report *r) {
    if (!p) return problem(r, INVAL, "no parameters to save");
    if (p->dtype != AG_F32 && p->dtype != AG_F64) return problem(r, INVAL, "parameters must be f32 or f64");
    for (int i = 0; i < p->count; i++) {
        const char *n = p->list[i]->name;
        if (!n || !*n || strchr(n, '/') || strcmp(n, ".") == 0)
            problem(r, INVAL, "parameter %d's name '%s' cannot name an HDF5 dataset (empty, '.' or contains '/')", i,
                    n ? n : "(null)");
    }
    if (o && (o->params != p || o->numel != p->numel))
        problem(r, INVAL, "the optimizer was made for another parameter set, or before the last parameter was added");
    if (!s) return !r->worst;
    if (s->nrng < 0 || s->nrng > AG_CKPT_MAX_RNGS || s->nconfig < 0 || s->nconfig > AG_CKPT_MAX_CONFIG)
        return problem(r, INVAL, "training state holds %d rngs and %d config entries (at most %d and %d)", s->nrng,
                       s->nconfig, AG_CKPT_MAX_RNGS, AG_CKPT_MAX_CONFIG);
    for (int i = 0; i < s->nrng; i++) {
        if (!bounded(s->rng[i].name, AG_CKPT_NAME_MAX)) problem(r, INVAL, "rng %d has no name", i);
        for (int j = 0; j < i; j++)
            if (strncmp(s->rng[i].name, s->rng[j].name, AG_CKPT_NAME_MAX) == 0)
                problem(r, INVAL, "rng name '%.63s' appears twice", s->rng[i].name);
    }
    for (int i = 0; i < s->nconfig; i++) {
        const ag_config_entry *e = &s->config[i];
        if (!bounded(e->key, AG_CKPT_NAME_MAX)) problem(r, INVAL, "config entry %d has no key", i);
        if (e->type == AG_CONFIG_STRING && !memchr(e->s, 0, AG_CKPT_STRING_MAX))
            problem(r, INVAL, "config '%.63s': string is not terminated", e->key);
        if ((unsigned)e->type > AG_CONFIG_STRING) problem(r, INVAL, "config '%.63s': bad type %d", e->key, e->type);
        for (int j = 0; j < i; j++)
            if (strncmp(e->key, s->config[j].key, AG_CKPT_NAME_MAX) == 0)
                problem(r, INVAL, "config key '%.63s' appears twice", e->key);
    }
    return !r->worst;
}

/* Strong close (closing the file closes anything a failure left open). No file locks: writers
 * never touch a file at its final path, so locks add nothing but failures on file systems
 * without them. */
static hid_t fapl_new(void) {
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

/* write tmp, flush, close, fsync, rename over path, fsync the directory */
static bool save_atomic(const char *path, const char *tmp, const ag_params *p, const ag_optim *o,
                        const ag_train_state *s, bool sync, report *r) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return problem(r, IO, "cannot create '%s': %s", tmp, strerror(errno));
    close(fd);
    hid_t fapl = fapl_new();
    /* 1.8 file format: checksummed metadata, readable by any HDF5 >= 1.8 */
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    cause_t c = cause(); /* before the next HDF5 call clears the error stack */
    H5Pclose(fapl);
    if (f < 0) {
        problem(r, IO, "HDF5 cannot create '%s': %s", tmp, c.desc);
        unlink(tmp);
        return false;
    }
    bool ok = write_all(f, p, o, s) >= 0 && H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0;
    c = cause();
    ok = H5Fclose(f) >= 0 && ok;
    if (!ok) {
        problem(r, IO, "writing '%s' failed: %s", tmp, c.desc);
        unlink(tmp);
        return false;
    }
    if (sync && fsync_path(tmp, O_RDWR) < 0) {
        problem(r, IO, "cannot fsync '%s': %s", tmp, strerror(errno));
        unlink(tmp);
        return false;
    }
    if (rename(tmp, path) < 0) {
        problem(r, IO, "cannot rename '%s' over it: %s", tmp, strerror(errno));
        unlink(tmp);
        return false;
    }
    char *dir = dir_of(path);
    /* some file systems cannot sync a directory (EINVAL); the rename is then as durable as they get */
    if (sync && dir && fsync_path(dir, O_RDONLY | O_DIRECTORY) < 0 && errno != EINVAL && errno != ENOTSUP)
        problem(r, IO, "saved, but cannot fsync directory '%s' (the new file may not survive a power loss): %s", dir,
                strerror(errno));
    free(dir);
    return !r->worst;
}

ag_ckpt_status ag_checkpoint_save(const char *path, const ag_params *params, const ag_optim *opt,
                                  const ag_train_state *state, const ag_ckpt_save_opts *opts, char *msg,
                                  size_t msgsize) {
    report r = {.len = 0};
    if (!path || !*path)
        problem(&r, INVAL, "ag_checkpoint_save: no path given");
    else
        check_save_args(params, opt, state, &r);
    if (!r.worst) {
        size_t n = strlen(path) + 5;
        char *tmp = malloc(n);
        if (!tmp) {
            problem(&r, NOMEM, "out of memory");
        } else {
            snprintf(tmp, n, "%s.tmp", path);
            hush_t h = hush();
            save_atomic(path, tmp, params, opt, state, !(opts && opts->no_fsync), &r);
            unhush(h);
            free(tmp);
        }
    }
    report_write(&r, path, "", msg, msgsize);
    return report_status(&r, true);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* One scalar attribute (integer, float or string; a one-element array counts) into e.
 * Returns false with *why set when it is none of these. */
static bool attr_value(hid_t a, ag_config_entry *e, const char **why) {
    hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t cls = ty < 0 ? H5T_NO_CLASS : H5Tget_class(ty);
    bool ok = false;
    *why = "cannot be read (corrupted?)";
    if (sp < 0 || ty < 0) {
    } else if (H5Sget_simple_extent_npoints(sp) != 1 || H5Sget_simple_extent_type(sp) == H5S_NULL) {
        *why = "is not a single value";
    } else if (cls == H5T_INTEGER) {
        e->type = AG_CONFIG_INT;
        ok = H5Aread(a, H5T_NATIVE_INT64, &e->i) >= 0;
    } else if (cls == H5T_FLOAT) {
        e->type = AG_CONFIG_DOUBLE;
        ok = H5Aread(a, H5T_NATIVE_DOUBLE, &e->d) >= 0;
    } else if (cls == H5T_STRING) {
        e->type = AG_CONFIG_STRING;
        hid_t m = H5Tcopy(ty);
        if (H5Tis_variable_str(ty) > 0) {
            char *s = NULL;
            ok = H5Aread(a, m, &s) >= 0 && s && strlen(s) < AG_CKPT_STRING_MAX;
            if (ok) strcpy(e->s, s);
            if (s) H5free_memory(s);
        } else {
            size_t n = H5Tget_size(ty);
            char buf[AG_CKPT_STRING_MAX];
            ok = n < AG_CKPT_STRING_MAX && H5Aread(a, m, buf) >= 0;
            if (ok) {
                buf[n] = 0;
                for (size_t i = strlen(buf); i > 0 && buf[i - 1] == ' '; i--) buf[i - 1] = 0; /* space padding */
                strcpy(e->s, buf);
            }
        }
        if (!ok) *why = "is not a string this build can hold (at most 255 bytes)";
        H5Tclose(m);
    } else {
        *why = "has a type other than integer, float or string";
    }
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

/* Attribute name of loc (called where in messages); -1 with FORMAT reported when missing. */
static hid_t attr_open(hid_t loc, const char *where, const char *name, report *r) {
    htri_t ex = H5Aexists(loc, name);
    hid_t a = ex > 0 ? H5Aopen(loc, name, H5P_DEFAULT) : -1;
    if (a < 0) problem(r, FORMAT, "%s has no '%s' attribute%s", where, name, ex != 0 ? " (corrupted?)" : "");
    return a;
}

/* Attribute name of loc into e; false (FORMAT reported) when it is missing or not of type want
 * (an integer is accepted for a double). */
static bool attr_get(hid_t loc, const char *where, const char *name, ag_config_type want, ag_config_entry *e,
                     report *r) {
    static const char *const tn[] = {"an integer", "a number", "a string"};
    const char *why;
    hid_t a = attr_open(loc, where, name, r);
    if (a < 0) return false;
    bool ok = attr_value(a, e, &why);
    H5Aclose(a);
    if (ok && e->type == AG_CONFIG_INT && want == AG_CONFIG_DOUBLE) {
        e->type = AG_CONFIG_DOUBLE;
        e->d = (double)e->i;
    }
    if (!ok) return problem(r, FORMAT, "attribute '%s' of %s %s", name, where, why);
    if (e->type != want) return problem(r, FORMAT, "attribute '%s' of %s is not %s", name, where, tn[want]);
    return true;
}

/* An n-element attribute of class cls read as mtype into out; false (FORMAT reported) otherwise. */
static bool attr_array(hid_t loc, const char *where, const char *name, H5T_class_t cls, hid_t mtype, hssize_t n,
                       void *out, report *r) {
    hid_t a = attr_open(loc, where, name, r);
    if (a < 0) return false;
    hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
    bool ok = ty >= 0 && sp >= 0 && H5Tget_class(ty) == cls && H5Sget_simple_extent_npoints(sp) == n &&
              H5Aread(a, mtype, out) >= 0;
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    if (!ok)
        problem(r, FORMAT, "attribute '%s' of %s is not %lld %s", name, where, (long long)n,
                cls == H5T_FLOAT ? "numbers" : "integers");
    return ok;
}

/* Dataset ds (called prefix+name) into dst as t's dtype, when its type and shape fit t. */
static bool read_tensor(hid_t ds, const char *prefix, const char *name, const ag_tensor *t, char *dst, report *r) {
    char b1[128], b2[128];
    hid_t ty = H5Dget_type(ds), sp = H5Dget_space(ds);
    bool ok = false;
    if (ty < 0 || sp < 0) {
        problem(r, FORMAT, "dataset '%s%s' is corrupted: %s", prefix, name, cause().desc);
        goto out;
    }
    size_t size = H5Tget_size(ty);
    bool is_float = H5Tget_class(ty) == H5T_FLOAT && (size == 4 || size == 8);
    if (!is_float)
        problem(r, SKIP, "dataset '%s%s' has type %s, parameters need float32 or float64", prefix, name,
                type_desc(ty, b1));
    hsize_t dims[H5S_MAX_RANK];
    int nd = H5Sget_simple_extent_type(sp) == H5S_NULL ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
    bool same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++) same = dims[d] == (hsize_t)t->shape[d];
    if (nd < 0)
        problem(r, SKIP, "dataset '%s%s' holds no data (null dataspace), model expects %s", prefix, name,
                ag_shape_str(t, b2));
    else if (!same)
        problem(r, SKIP, "dataset '%s%s' has shape %s, model expects %s", prefix, name, dims_str(nd, dims, b1),
                ag_shape_str(t, b2));
    if (!is_float || !same) goto out;
    int64_t n = ag_numel(t);
    size_t es = ag_dtype_size(t->dtype);
    void *buf = size == es ? dst : malloc((size_t)n * size + 1);
    if (!buf) {
        problem(r, NOMEM, "out of memory reading dataset '%s%s'", prefix, name);
        goto out;
    }
    hid_t mtype = size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    ok = n == 0 || H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0;
    if (!ok) problem(r, FORMAT, "dataset '%s%s' is corrupted: %s", prefix, name, cause().desc);
    if (ok && buf != dst) { /* the other float width: round to nearest, as a C conversion does */
        if (t->dtype == AG_F32)
            for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)buf)[i];
        else
            for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)buf)[i];
    }
    if (buf != dst) free(buf);
out:
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

/* Names of g's links (by name order), NULL-terminated; NULL with FORMAT reported on failure. */
static char **link_names(hid_t g, const char *where, report *r) {
    H5G_info_t info;
    char **names = NULL;
    if (H5Gget_info(g, &info) < 0 || !(names = calloc(info.nlinks + 1, sizeof *names))) goto fail;
    for (hsize_t i = 0; i < info.nlinks; i++) {
        ssize_t len = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, NULL, 0, H5P_DEFAULT);
        if (len < 0 || !(names[i] = malloc((size_t)len + 1))) goto fail;
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, names[i], (size_t)len + 1, H5P_DEFAULT);
    }
    return names;
fail:
    problem(r, FORMAT, "cannot list %s: %s", where, cause().desc);
    for (int i = 0; names && names[i]; i++) free(names[i]);
    free(names);
    return NULL;
}

static void free_names(char **names) {
    for (int i = 0; names && names[i]; i++) free(names[i]);
    free(names);
}

static int param_index(const ag_params *p, const char *name) {
    for (int i = 0; i < p->count; i++)
        if (strcmp(p->list[i]->name, name) == 0) return i;
    return -1;
}

/* Every parameter's dataset in group g (called where) into its slice of stage. Messages name
 * datasets as prefix + name and the tensors as what ("parameter", "optimizer state"). */
static void load_slab(hid_t g, const char *where, const char *prefix, const char *what, const ag_params *p,
                      char *stage, report *r) {
    char b[128];
    char **names = link_names(g, where, r);
    bool *seen = calloc((size_t)p->count + 1, 1);
    if (!names || !seen) {
        if (!seen) problem(r, NOMEM, "out of memory");
        free_names(names);
        free(seen);
        return;
    }
    size_t es = ag_dtype_size(p->dtype);
    for (int k = 0; names[k]; k++) {
        int i = param_index(p, names[k]);
        if (i < 0) {
            problem(r, SKIP, "unexpected dataset '%s%s' (the model has no parameter of that name)", prefix, names[k]);
            continue;
        }
        seen[i] = true;
        hid_t obj = H5Oopen(g, names[k], H5P_DEFAULT);
        if (obj < 0)
            problem(r, FORMAT, "'%s%s' is corrupted: %s", prefix, names[k], cause().desc);
        else if (H5Iget_type(obj) != H5I_DATASET)
            problem(r, SKIP, "'%s%s' is a group, not a dataset", prefix, names[k]);
        else
            read_tensor(obj, prefix, names[k], p->list[i], stage + (size_t)p->list[i]->offset * es, r);
        if (obj >= 0) H5Oclose(obj);
    }
    for (int i = 0; i < p->count; i++)
        if (!seen[i])
            problem(r, SKIP, "missing %s '%s%s' %s", what, prefix, p->list[i]->name, ag_shape_str(p->list[i], b));
    free_names(names);
    free(seen);
}

/* open the child group name of loc: 1 opened, 0 absent, -1 broken (reported) */
static int group_open(hid_t loc, const char *name, hid_t *g, report *r) {
    htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
    if (ex == 0) return 0;
    if (ex < 0 || (*g = H5Gopen2(loc, name, H5P_DEFAULT)) < 0) {
        problem(r, FORMAT, "cannot open group '%s': %s", name, cause().desc);
        return -1;
    }
    return 1;
}

static void load_model(hid_t f, const ag_params *p, char *stage, report *r) {
    hid_t g;
    int st = group_open(f, "model", &g, r);
    if (st == 0) problem(r, SKIP, "no /model group: all %d parameters missing", p->count);
    if (st <= 0) return;
    load_slab(g, "/model", "", "parameter", p, stage, r);
    H5Gclose(g);
}

/* hyperparameters into *so, state slabs into stage[k] (parallel to ag_optim_state(opt, k)) */
static void load_optim(hid_t f, const ag_optim *opt, ag_optim *so, char **stage, report *r) {
    const char *W = "/optimizer";
    ag_config_entry e;
    hid_t g;
    int st = group_open(f, "optimizer", &g, r);
    if (st == 0) problem(r, SKIP, "no optimizer state in the file (no /optimizer group)");
    if (st <= 0) return;
    if (!attr_get(g, W, "kind", AG_CONFIG_STRING, &e, r)) goto out;
    if (strcmp(e.s, kind_name(opt->kind)) != 0) {
        problem(r, MISMATCH, "the file holds a '%s' optimizer, the optimizer given is '%s'", e.s, kind_name(opt->kind));
        goto out;
    }
    double *dst[] = {&so->lr, &so->eps, &so->weight_decay, &so->momentum, &so->dampening};
    const char *dn[] = {"lr", "eps", "weight_decay", "momentum", "dampening"};
    for (int i = 0; i < 5; i++)
        if (attr_get(g, W, dn[i], AG_CONFIG_DOUBLE, &e, r)) *dst[i] = e.d;
    attr_array(g, W, "betas", H5T_FLOAT, H5T_NATIVE_DOUBLE, 2, so->betas, r);
    if (attr_get(g, W, "nesterov", AG_CONFIG_INT, &e, r)) so->nesterov = e.i != 0;
    if (attr_get(g, W, "step", AG_CONFIG_INT, &e, r)) {
        so->step = e.i;
        if (e.i < 0) problem(r, FORMAT, "/optimizer has a negative step %lld", (long long)e.i);
    }
    if (so->kind == AG_OPTIM_SGD && so->momentum != 0 && !opt->momentum_buffer)
        problem(r, MISMATCH, "the file's SGD has momentum %g, but the optimizer given keeps no momentum buffer "
                "(create it with momentum != 0)", so->momentum);
    char **names = link_names(g, W, r);
    int nstate = ag_optim_state_count(opt);
    for (int k = 0; names && names[k]; k++) {
        int found = -1;
        for (int j = 0; j < nstate; j++)
            if (strcmp(ag_optim_state(opt, j, NULL), names[k]) == 0) found = j;
        if (found < 0) problem(r, SKIP, "unexpected optimizer state '%s' (a %s optimizer keeps no such state)",
                               names[k], kind_name(opt->kind));
    }
    free_names(names);
    for (int j = 0; j < nstate; j++) {
        char prefix[96], where[96];
        const char *name = ag_optim_state(opt, j, NULL);
        hid_t sg;
        int s = group_open(g, name, &sg, r);
        if (s == 0) problem(r, SKIP, "no optimizer state '%s' in the file (no /optimizer/%s group)", name, name);
        if (s <= 0) continue;
        snprintf(prefix, sizeof prefix, "optimizer/%s/", name);
        snprintf(where, sizeof where, "/optimizer/%s", name);
        load_slab(sg, where, prefix, "optimizer state", opt->params, stage[j], r);
        H5Gclose(sg);
    }
out:
    H5Gclose(g);
}

typedef struct {
    ag_train_state *s;
    report *r;
} iter_ctx;

static herr_t rng_attr(hid_t loc, const char *name, const H5A_info_t *info, void *u) {
    iter_ctx *c = u;
    uint64_t v[2];
    if (strlen(name) >= AG_CKPT_NAME_MAX || c->s->nrng == AG_CKPT_MAX_RNGS)
        problem(c->r, FORMAT, "rng '%s' does not fit (names up to %d bytes, up to %d rngs)", name,
                AG_CKPT_NAME_MAX - 1, AG_CKPT_MAX_RNGS);
    else if (attr_array(loc, "/training/rng", name, H5T_INTEGER, H5T_NATIVE_UINT64, 2, v, c->r)) {
        ag_named_rng *n = &c->s->rng[c->s->nrng++];
        strcpy(n->name, name);
        n->rng = (ag_rng){v[0], v[1]};
    }
    return 0;
}

static herr_t config_attr(hid_t loc, const char *name, const H5A_info_t *info, void *u) {
    iter_ctx *c = u;
    const char *why;
    if (strlen(name) >= AG_CKPT_NAME_MAX || c->s->nconfig == AG_CKPT_MAX_CONFIG) {
        problem(c->r, FORMAT, "config '%s' does not fit (keys up to %d bytes, up to %d entries)", name,
                AG_CKPT_NAME_MAX - 1, AG_CKPT_MAX_CONFIG);
        return 0;
    }
    ag_config_entry *e = &c->s->config[c->s->nconfig];
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a >= 0 && attr_value(a, e, &why)) {
        strcpy(e->key, name);
        c->s->nconfig++;
    } else {
        memset(e, 0, sizeof *e);
        problem(c->r, FORMAT, "config attribute '%s' %s", name, a < 0 ? "cannot be opened" : why);
    }
    if (a >= 0) H5Aclose(a);
    return 0;
}

/* attributes of the child group name of loc, in creation order when the file tracked it */
static void each_attr(hid_t loc, const char *name, H5A_operator2_t fn, iter_ctx *c) {
    hid_t g;
    if (group_open(loc, name, &g, c->r) <= 0) return;
    unsigned flags = 0;
    hid_t gcpl = H5Gget_create_plist(g);
    if (gcpl >= 0) H5Pget_attr_creation_order(gcpl, &flags), H5Pclose(gcpl);
    H5_index_t idx = flags & H5P_CRT_ORDER_INDEXED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    if (H5Aiterate2(g, idx, H5_ITER_INC, NULL, fn, c) < 0)
        problem(c->r, FORMAT, "cannot read the attributes of '%s': %s", name, cause().desc);
    H5Gclose(g);
}

static void load_state(hid_t f, ag_train_state *ss, report *r) {
    const char *W = "/training";
    ag_config_entry e;
    hid_t g;
    int st = group_open(f, "training", &g, r);
    if (st == 0) problem(r, SKIP, "no training state in the file (no /training group)");
    if (st <= 0) return;
    int64_t *dst[] = {&ss->global_step, &ss->epoch, &ss->data_position};
    const char *dn[] = {"global_step", "epoch", "data_position"};
    for (int i = 0; i < 3; i++)
        if (attr_get(g, W, dn[i], AG_CONFIG_INT, &e, r)) *dst[i] = e.i;
    iter_ctx c = {ss, r};
    each_attr(g, "rng", rng_attr, &c);
    H5Gclose(g);
    each_attr(f, "config", config_attr, &c);
}

/* Open path for reading after the checks that give each way of not being a checkpoint its own
 * message; -1 with the problem reported. */
static hid_t open_checkpoint(const char *path, report *r) {
    ag_config_entry e;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        problem(r, IO, "cannot open: %s", strerror(errno));
        return -1;
    }
    int rc = fstat(fd, &st);
    close(fd);
    if (rc == 0 && S_ISDIR(st.st_mode)) {
        problem(r, IO, "is a directory, not a checkpoint file");
        return -1;
    }
    if (rc == 0 && st.st_size == 0) {
        problem(r, FORMAT, "empty file (0 bytes), not an HDF5 checkpoint");
        return -1;
    }
    if (H5Fis_hdf5(path) == 0) {
        problem(r, FORMAT, "not an HDF5 file (no HDF5 signature)");
        return -1;
    }
    hid_t fapl = fapl_new();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    cause_t c = cause();
    H5Pclose(fapl);
    if (f < 0) {
        if (c.minor == H5E_TRUNCATED)
            problem(r, FORMAT, "truncated HDF5 file: %lld bytes, fewer than its superblock records (HDF5: %s)",
                    (long long)st.st_size, c.desc);
        else
            problem(r, FORMAT, "corrupted HDF5 file, cannot open it: %s", c.desc);
        return -1;
    }
    htri_t ex = H5Aexists(f, "format");
    if (ex <= 0) {
        if (ex < 0) problem(r, FORMAT, "corrupted HDF5 file, cannot read the root group: %s", cause().desc);
        else problem(r, FORMAT, "not an attograd checkpoint: no 'format' attribute on the root group");
    } else if (attr_get(f, "/", "format", AG_CONFIG_STRING, &e, r)) {
        if (strcmp(e.s, FORMAT_NAME) != 0)
            problem(r, FORMAT, "not an attograd checkpoint: format is '%s', expected '" FORMAT_NAME "'", e.s);
        else if (attr_get(f, "/", "format_version", AG_CONFIG_INT, &e, r) && e.i != FORMAT_VERSION)
            problem(r, FORMAT, "format_version %lld is not supported: this attograd reads version %d%s",
                    (long long)e.i, FORMAT_VERSION, e.i > FORMAT_VERSION ? " (written by a newer attograd?)" : "");
    }
    if (r->worst) {
        H5Fclose(f);
        return -1;
    }
    return f;
}

ag_ckpt_status ag_checkpoint_load(const char *path, ag_params *params, ag_optim *opt, ag_train_state *state,
                                  const ag_ckpt_load_opts *opts, char *msg, size_t msgsize) {
    report r = {.len = 0};
    bool strict = !(opts && opts->non_strict);
    char *stage = NULL, *ostage[3] = {NULL, NULL, NULL};
    ag_train_state *ss = NULL;
    ag_optim so;
    size_t bytes = 0;
    int nstate = ag_optim_state_count(opt);
    if (!path || !*path)
        problem(&r, INVAL, "ag_checkpoint_load: no path given");
    else if (opt && (opt->params != params || opt->numel != params->numel))
        problem(&r, INVAL, "the optimizer must be loaded together with the parameter set it was made for");
    else if (params && params->dtype != AG_F32 && params->dtype != AG_F64)
        problem(&r, INVAL, "parameters must be f32 or f64");
    if (r.worst) goto done;
    /* staging: copies of everything a load may change, committed only on success */
    bool oom = false;
    if (params) {
        bytes = (size_t)params->numel * ag_dtype_size(params->dtype);
        if ((stage = malloc(bytes + 1))) memcpy(stage, params->data, bytes);
        oom |= !stage;
    }
    if (opt) {
        so = *opt;
        for (int k = 0; k < nstate; k++) {
            void *slab;
            ag_optim_state(opt, k, &slab);
            if ((ostage[k] = malloc(bytes + 1))) memcpy(ostage[k], slab, bytes);
            oom |= !ostage[k];
        }
    }
    if (state) oom |= !(ss = calloc(1, sizeof *ss));
    if (oom) {
        problem(&r, NOMEM, "out of memory staging the load");
        goto done;
    }
    hush_t h = hush();
    hid_t f = open_checkpoint(path, &r);
    if (f >= 0) {
        if (params) load_model(f, params, stage, &r);
        if (opt) load_optim(f, opt, &so, ostage, &r);
        if (state) load_state(f, ss, &r);
        if (H5Fclose(f) < 0) problem(&r, FORMAT, "closing failed: %s", cause().desc);
    }
    unhush(h);
    ag_ckpt_status s = report_status(&r, strict);
    if (s == AG_CKPT_OK || s == AG_CKPT_PARTIAL) {
        if (params) memcpy(params->data, stage, bytes);
        if (opt) {
            for (int k = 0; k < nstate; k++) {
                void *slab;
                ag_optim_state(opt, k, &slab);
                memcpy(slab, ostage[k], bytes);
            }
            opt->lr = so.lr;
            opt->betas[0] = so.betas[0];
            opt->betas[1] = so.betas[1];
            opt->eps = so.eps;
            opt->weight_decay = so.weight_decay;
            opt->momentum = so.momentum;
            opt->dampening = so.dampening;
            opt->nesterov = so.nesterov;
            opt->step = so.step;
        }
        if (state) *state = *ss;
    }
done:
    free(stage);
    for (int k = 0; k < 3; k++) free(ostage[k]);
    free(ss);
    report_write(&r, path, report_status(&r, strict) == AG_CKPT_PARTIAL ? "loaded what matches; " : "", msg,
                 msgsize);
    return report_status(&r, strict);
}

/* ---- training state ----------------------------------------------------------------------- */

static bool name_ok(const char *op, const ag_train_state *s, const char *name) {
    if (!s || !name || !*name || strlen(name) >= AG_CKPT_NAME_MAX) {
        ag_error(op, "'%s': needs a state and a name of 1 to %d bytes", name ? name : "(null)", AG_CKPT_NAME_MAX - 1);
        return false;
    }
    return true;
}

bool ag_state_set_rng(ag_train_state *s, const char *name, const ag_rng *rng) {
    const char *op = "ag_state_set_rng";
    if (!name_ok(op, s, name)) return false;
    if (!rng) {
        ag_error(op, "'%s': rng is NULL", name);
        return false;
    }
    int i = 0;
    while (i < s->nrng && strcmp(s->rng[i].name, name) != 0) i++;
    if (i == AG_CKPT_MAX_RNGS) {
        ag_error(op, "'%s': the state already holds %d rngs, the most it can", name, AG_CKPT_MAX_RNGS);
        return false;
    }
    if (i == s->nrng) {
        memset(&s->rng[i], 0, sizeof s->rng[i]);
        strcpy(s->rng[i].name, name);
        s->nrng++;
    }
    s->rng[i].rng = *rng;
    return true;
}

bool ag_state_get_rng(const ag_train_state *s, const char *name, ag_rng *out) {
    for (int i = 0; s && name && i < s->nrng; i++)
        if (strcmp(s->rng[i].name, name) == 0) {
            if (out) *out = s->rng[i].rng;
            return true;
        }
    return false;
}

static const ag_config_entry *config_find(const ag_train_state *s, const char *key) {
    for (int i = 0; s && key && i < s->nconfig; i++)
        if (strcmp(s->config[i].key, key) == 0) return &s->config[i];
    return NULL;
}

/* the entry for key, zeroed (new or replaced); NULL after reporting */
static ag_config_entry *config_slot(const char *op, ag_train_state *s, const char *key) {
    if (!name_ok(op, s, key)) return NULL;
    ag_config_entry *e = (ag_config_entry *)config_find(s, key);
    if (!e) {
        if (s->nconfig == AG_CKPT_MAX_CONFIG) {
            ag_error(op, "'%s': the state already holds %d config entries, the most it can", key, AG_CKPT_MAX_CONFIG);
            return NULL;
        }
        e = &s->config[s->nconfig++];
    }
    memset(e, 0, sizeof *e);
    strcpy(e->key, key);
    return e;
}

bool ag_config_set_int(ag_train_state *s, const char *key, int64_t value) {
    ag_config_entry *e = config_slot("ag_config_set_int", s, key);
    if (e) e->type = AG_CONFIG_INT, e->i = value;
    return e != NULL;
}

bool ag_config_set_double(ag_train_state *s, const char *key, double value) {
    ag_config_entry *e = config_slot("ag_config_set_double", s, key);
    if (e) e->type = AG_CONFIG_DOUBLE, e->d = value;
    return e != NULL;
}

bool ag_config_set_string(ag_train_state *s, const char *key, const char *value) {
    const char *op = "ag_config_set_string";
    if (!value || strlen(value) >= AG_CKPT_STRING_MAX) {
        ag_error(op, "'%s': value is NULL or longer than %d bytes", key ? key : "(null)", AG_CKPT_STRING_MAX - 1);
        return false;
    }
    ag_config_entry *e = config_slot(op, s, key);
    if (e) e->type = AG_CONFIG_STRING, strcpy(e->s, value);
    return e != NULL;
}

bool ag_config_get_int(const ag_train_state *s, const char *key, int64_t *out) {
    const ag_config_entry *e = config_find(s, key);
    if (!e || e->type != AG_CONFIG_INT) return false;
    if (out) *out = e->i;
    return true;
}

bool ag_config_get_double(const ag_train_state *s, const char *key, double *out) {
    const ag_config_entry *e = config_find(s, key);
    if (!e || e->type == AG_CONFIG_STRING) return false;
    if (out) *out = e->type == AG_CONFIG_INT ? (double)e->i : e->d;
    return true;
}

const char *ag_config_get_string(const ag_train_state *s, const char *key) {
    const ag_config_entry *e = config_find(s, key);
    return e && e->type == AG_CONFIG_STRING ? e->s : NULL;
}
