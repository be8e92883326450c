/* Reading checkpoint files: the header check, the attributes, datasets and groups of each part,
 * each problem reported (layout in docs/checkpoint.md). Staging and committing: stage.c. */
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"

/* ---- reading ------------------------------------------------------------------------------ */

/* One scalar attribute (integer, float or string; a one-element array counts) into e, a string
 * malloc'd into e->s. A string is refused when longer than limit bytes: what the file may hold
 * (its size), checked before allocating what a fixed-length type declares, and after HDF5
 * reads a variable-length one. 1 when read; else 0 (format) or -1 (out of memory) with why
 * (WHY_SIZE bytes) set. */
enum { WHY_SIZE = 400 };
static int attr_value(hid_t a, ag_config_entry *e, size_t limit, char *why, report *r) {
    hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t cls = ty < 0 ? H5T_NO_CLASS : H5Tget_class(ty);
    int ok = 0;
    snprintf(why, WHY_SIZE, "cannot be read (corrupted?)");
    if (sp < 0 || ty < 0) {
    } else if (H5Sget_simple_extent_npoints(sp) != 1 || H5Sget_simple_extent_type(sp) == H5S_NULL) {
        snprintf(why, WHY_SIZE, "is not a single value");
    } else if (cls == H5T_INTEGER) {
        e->type = AG_CONFIG_INT;
        ok = H5Aread(a, H5T_NATIVE_INT64, &e->i) >= 0;
    } else if (cls == H5T_FLOAT) {
        e->type = AG_CONFIG_DOUBLE;
        ok = H5Aread(a, H5T_NATIVE_DOUBLE, &e->d) >= 0;
    } else if (cls == H5T_STRING) {
        hid_t m = H5Tcopy(ty);
        char *s = NULL;
        size_t n = 0;
        if (H5Tis_variable_str(ty) > 0) {
            if (r->trusted) { /* it lives in the global heap, which has no checksum */
                r->retry = true;
                snprintf(why, WHY_SIZE, "is a variable-length string (format 2 holds fixed-length ones)");
            } else if (H5Aread(a, m, &s) < 0 || !s) {
                snprintf(why, WHY_SIZE, "cannot be read (corrupted?): %s", ag__ck_cause().desc);
            } else if ((n = strlen(s)) > limit) {
                snprintf(why, WHY_SIZE, "holds a string of %zu bytes, more than the file's %zu (corrupted)", n, limit);
            } else if (!(e->s = malloc(n + 1))) {
                snprintf(why, WHY_SIZE, "needs %zu bytes: out of memory", n + 1);
                ok = -1;
            } else {
                memcpy(e->s, s, n + 1);
                ok = 1;
            }
            if (s) H5free_memory(s);
        } else if ((n = H5Tget_size(ty)) > limit) {
            snprintf(why, WHY_SIZE, "declares a string of %zu bytes, more than the file's %zu (corrupted)", n, limit);
        } else if (!(e->s = malloc(n + 1))) {
            snprintf(why, WHY_SIZE, "needs %zu bytes: out of memory", n + 1);
            ok = -1;
        } else if (H5Aread(a, m, e->s) < 0) {
            snprintf(why, WHY_SIZE, "cannot be read (corrupted?): %s", ag__ck_cause().desc);
        } else {
            e->s[n] = 0;
            if (H5Tget_strpad(ty) == H5T_STR_SPACEPAD) /* Fortran's padding, not part of the value */
                for (size_t i = strlen(e->s); i > 0 && e->s[i - 1] == ' '; i--) e->s[i - 1] = 0;
            ok = 1;
        }
        if (ok == 1) e->type = AG_CONFIG_STRING;
        else free(e->s), e->s = NULL;
        H5Tclose(m);
    } else {
        snprintf(why, WHY_SIZE, "has a type other than integer, float or string");
    }
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

/* Attribute name of loc (called where in messages); -1 with FORMAT reported when missing. */
static hid_t attr_open(hid_t loc, const char *where, const char *name, report *r) {
    htri_t ex = H5Aexists(loc, name);
    hid_t a = ex > 0 ? H5Aopen(loc, name, H5P_DEFAULT) : -1;
    if (a < 0) ag__ck_problem(r, FORMAT, "%s has no '%s' attribute%s", where, name, ex != 0 ? " (corrupted?)" : "");
    return a;
}

/* Longest string accepted for the attributes the format names (format, optimizer kind): they
 * are short words, and a longer one is reported as the wrong word it is. */
#define WORD_MAX 4096

/* Attribute name of loc into *e (zeroed first; a string is malloc'd, free e->s); false (FORMAT
 * or NOMEM reported) when it is missing or not of type want (an integer is accepted for a
 * double). */
static bool attr_get(hid_t loc, const char *where, const char *name, ag_config_type want, ag_config_entry *e,
                     report *r) {
    static const char *const tn[] = {"an integer", "a number", "a string"};
    char why[WHY_SIZE];
    memset(e, 0, sizeof *e);
    hid_t a = attr_open(loc, where, name, r);
    if (a < 0) return false;
    int ok = attr_value(a, e, WORD_MAX, why, r);
    H5Aclose(a);
    if (ok == 1 && e->type == AG_CONFIG_INT && want == AG_CONFIG_DOUBLE) {
        e->type = AG_CONFIG_DOUBLE;
        e->d = (double)e->i;
    }
    if (ok != 1) return ag__ck_problem(r, ok < 0 ? NOMEM : FORMAT, "attribute '%s' of %s %s", name, where, why);
    if (e->type != want) {
        free(e->s);
        e->s = NULL;
        return ag__ck_problem(r, FORMAT, "attribute '%s' of %s is not %s", name, where, tn[want]);
    }
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
        ag__ck_problem(r, FORMAT, "attribute '%s' of %s is not %lld %s", name, where, (long long)n,
                cls == H5T_FLOAT ? "numbers" : "integers");
    return ok;
}

/* Whether dataset ds has all its data in the file. A chunk that never reached the disk (a save
 * that failed on a full disk) would read back as fill values, without an error. For a chunked
 * dataset, every chunk its extent covers must be in the chunk index (H5Dget_space_status says
 * "partly allocated" of a fully written one in HDF5 1.10); for another layout, its storage
 * must be allocated. */
static bool stored(hid_t ds) {
    hid_t dcpl = H5Dget_create_plist(ds), sp = H5Dget_space(ds);
    bool ok = false;
    if (dcpl >= 0 && sp >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t dims[H5S_MAX_RANK], chunk[H5S_MAX_RANK], want = 1, have = 0;
        int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
        ok = nd >= 0 && H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk) == nd;
        for (int d = 0; ok && d < nd; d++) ok = chunk[d] > 0, want *= ok ? (dims[d] + chunk[d] - 1) / chunk[d] : 0;
        ok = ok && H5Dget_num_chunks(ds, sp, &have) >= 0 && have == want;
    } else if (dcpl >= 0 && sp >= 0) {
        H5D_space_status_t st;
        ok = H5Dget_space_status(ds, &st) >= 0 && st == H5D_SPACE_STATUS_ALLOCATED;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return ok;
}

/* Whether libhdf5 may read ds's data in this process: in a trusted file, only data it finds
 * through checksummed metadata (contiguous or compact, not chunked: a chunk index of another
 * writer may be a v1 B-tree, which has no checksum); else r->retry is set, with FORMAT. */
static bool layout_trusted(hid_t ds, const char *where, report *r) {
    if (!r->trusted) return true;
    hid_t dcpl = H5Dget_create_plist(ds);
    H5D_layout_t l = dcpl < 0 ? H5D_LAYOUT_ERROR : H5Pget_layout(dcpl);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (l == H5D_CONTIGUOUS || l == H5D_COMPACT) return true;
    r->retry = true;
    return ag__ck_problem(r, FORMAT, "%s is not contiguous (format 2 writes no chunks)", where);
}

/* All of ds (called where: n elements of es bytes as mtype, a native type) into buf; in a
 * format 2 file, checked against its crc32 attribute. false with FORMAT reported. */
static bool read_checked(hid_t ds, const char *where, hid_t mtype, void *buf, size_t n, size_t es, report *r) {
    uint32_t want = 0;
    if (r->version >= 2 && !attr_array(ds, where, AG_CK_CRC_ATTR, H5T_INTEGER, H5T_NATIVE_UINT32, 1, &want, r))
        return false;
    if (!layout_trusted(ds, where, r)) return false;
    if (n && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
        return ag__ck_problem(r, FORMAT, "%s is corrupted: %s", where, ag__ck_cause().desc);
    uint32_t got = ag__ck_crc32_le(buf, n, es);
    if (r->version >= 2 && got != want)
        return ag__ck_problem(r, FORMAT, "%s is damaged: the CRC-32 of its data is %08x, its crc32 attribute says %08x",
                              where, (unsigned)got, (unsigned)want);
    return true;
}

/* Dataset ds (called prefix+name) into dst as t's dtype, when its type and shape fit t. */
static bool read_tensor(hid_t ds, const char *prefix, const char *name, const ag_tensor *t, char *dst, report *r) {
    char b1[320], b2[128];
    hid_t ty = H5Dget_type(ds), sp = H5Dget_space(ds);
    bool ok = false;
    if (ty < 0 || sp < 0) {
        ag__ck_problem(r, FORMAT, "dataset '%s%s' is corrupted: %s", prefix, name, ag__ck_cause().desc);
        goto out;
    }
    size_t size = H5Tget_size(ty);
    bool is_float = H5Tget_class(ty) == H5T_FLOAT && (size == 4 || size == 8);
    if (!is_float)
        ag__ck_problem(r, SKIP, "dataset '%s%s' has type %s, parameters need float32 or float64", prefix, name,
                ag__ck_type_desc(ty, b1));
    hsize_t dims[H5S_MAX_RANK];
    int nd = H5Sget_simple_extent_type(sp) == H5S_NULL ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
    bool same = nd == t->ndim;
    for (int d = 0; same && d < nd; d++) same = dims[d] == (hsize_t)t->shape[d];
    if (nd < 0)
        ag__ck_problem(r, SKIP, "dataset '%s%s' holds no data (null dataspace), model expects %s", prefix, name,
                ag_shape_str(t, b2));
    else if (!same)
        ag__ck_problem(r, SKIP, "dataset '%s%s' has shape %s, model expects %s", prefix, name, ag__ck_dims_str(nd, dims, b1),
                ag_shape_str(t, b2));
    if (!is_float || !same) goto out;
    int64_t n = ag_numel(t);
    if (n > 0 && !stored(ds)) {
        ag__ck_problem(r, FORMAT, "dataset '%s%s' has no stored data (written by a save that failed?)", prefix, name);
        goto out;
    }
    size_t es = ag_dtype_size(t->dtype);
    void *buf = size == es ? dst : malloc((size_t)n * size + 1);
    if (!buf) {
        ag__ck_problem(r, NOMEM, "out of memory reading dataset '%s%s'", prefix, name);
        goto out;
    }
    hid_t mtype = size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    snprintf(b1, sizeof b1, "dataset '%s%s'", prefix, name);
    ok = read_checked(ds, b1, mtype, buf, (size_t)n, size, r);
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
    ag__ck_problem(r, FORMAT, "cannot list %s: %s", where, ag__ck_cause().desc);
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

/* H5Oopen of link name of g, after checking, in a trusted file, that it is a hard link (a
 * soft or external link would lead libhdf5 elsewhere, another file included); -1 with
 * r->retry set (FORMAT reported) when it is not, or when the open fails (nothing reported). */
static hid_t link_open(hid_t g, const char *name, report *r) {
    H5L_info_t li;
    if (r->trusted && (H5Lget_info(g, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD)) {
        r->retry = true;
        ag__ck_problem(r, FORMAT, "'%s' is not a hard link (format 2 writes no other)", name);
        return -1;
    }
    return H5Oopen(g, name, H5P_DEFAULT);
}

/* Every parameter's dataset in group g (called where) into its slice of stage. Messages name
 * datasets as prefix + name and the tensors as what ("parameter", "optimizer state"). */
static void load_slab(hid_t g, const char *where, const char *prefix, const char *what, const ag_params *p,
                      char *stage, report *r) {
    char b[128];
    char **names = link_names(g, where, r);
    bool *seen = calloc((size_t)p->count + 1, 1);
    if (!names || !seen) {
        if (!seen) ag__ck_problem(r, NOMEM, "out of memory");
        free_names(names);
        free(seen);
        return;
    }
    size_t es = ag_dtype_size(p->dtype);
    for (int k = 0; names[k]; k++) {
        int i = param_index(p, names[k]);
        if (i < 0) {
            ag__ck_problem(r, SKIP, "unexpected dataset '%s%s' (the model has no parameter of that name)", prefix, names[k]);
            continue;
        }
        seen[i] = true;
        hid_t obj = link_open(g, names[k], r);
        if (obj < 0 && !r->retry)
            ag__ck_problem(r, FORMAT, "'%s%s' is corrupted: %s", prefix, names[k], ag__ck_cause().desc);
        else if (H5Iget_type(obj) != H5I_DATASET)
            ag__ck_problem(r, SKIP, "'%s%s' is a group, not a dataset", prefix, names[k]);
        else
            read_tensor(obj, prefix, names[k], p->list[i], stage + (size_t)p->list[i]->offset * es, r);
        if (obj >= 0) H5Oclose(obj);
    }
    for (int i = 0; i < p->count; i++)
        if (!seen[i])
            ag__ck_problem(r, SKIP, "missing %s '%s%s' %s", what, prefix, p->list[i]->name, ag_shape_str(p->list[i], b));
    free_names(names);
    free(seen);
}

/* Whether the links of group g (called name) may be looked up in a trusted file: they are in
 * its object header or in dense storage, both checksummed, not in an old-style symbol table
 * (a v1 B-tree and a local heap, unchecked); else r->retry is set, with FORMAT. */
enum { STAB_MESSAGE = 0x11 }; /* the symbol table message's type (HDF5 file format) */
static bool group_trusted(hid_t g, const char *name, report *r) {
    H5O_info_t oi;
    if (!r->trusted) return true;
    if (H5Oget_info2(g, &oi, H5O_INFO_HDR) < 0)
        return ag__ck_problem(r, FORMAT, "corrupted HDF5 file, cannot read group '%s': %s", name, ag__ck_cause().desc);
    if (!(oi.hdr.mesg.present & ((uint64_t)1 << STAB_MESSAGE))) return true;
    r->retry = true;
    return ag__ck_problem(r, FORMAT, "group '%s' is an old-style group (format 2 writes none)", name);
}

/* open the child group name of loc: 1 opened, 0 absent, -1 broken (reported) */
static int group_open(hid_t loc, const char *name, hid_t *g, report *r) {
    htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
    if (ex == 0) return 0;
    if (ex < 0 || (*g = link_open(loc, name, r)) < 0) {
        if (!r->retry) ag__ck_problem(r, FORMAT, "cannot open group '%s': %s", name, ag__ck_cause().desc);
        return -1;
    }
    if (H5Iget_type(*g) != H5I_GROUP) {
        H5Oclose(*g);
        return ag__ck_problem(r, FORMAT, "'%s' is not a group", name), -1;
    }
    if (!group_trusted(*g, name, r)) {
        H5Gclose(*g);
        return -1;
    }
    return 1;
}

static void load_model(hid_t f, const ag_params *p, char *stage, report *r) {
    hid_t g;
    int st = group_open(f, "model", &g, r);
    if (st == 0) ag__ck_problem(r, SKIP, "no /model group: all %d parameters missing", p->count);
    if (st <= 0) return;
    load_slab(g, "/model", "", "parameter", p, stage, r);
    H5Gclose(g);
}

/* A value read from the file outside what the library accepts: FORMAT, naming the field, the
 * value and the range. NaN is outside every range. */
static void check_range(const char *where, const char *name, double v, double lo, double hi, bool hi_open,
                        report *r) {
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return;
    ag__ck_problem(r, FORMAT, "%s has %s = %g, expected %g to %g%s (damaged?)", where, name, v, lo, hi,
                   hi_open ? " (excluded)" : "");
}

static void check_count(const char *where, const char *name, int64_t v, report *r) {
    if (v < 0 || v > AG_CK_COUNT_MAX)
        ag__ck_problem(r, FORMAT, "%s has %s = %lld, expected 0 to %lld (damaged?)", where, name, (long long)v,
                       (long long)AG_CK_COUNT_MAX);
}

/* hyperparameters into *so, state slabs into stage[k] (parallel to ag_optim_state(opt, k)) */
static void load_optim(hid_t f, const ag_optim *opt, ag_optim *so, char **stage, report *r) {
    const char *W = "/optimizer";
    ag_config_entry e;
    hid_t g;
    int st = group_open(f, "optimizer", &g, r);
    if (st == 0) ag__ck_problem(r, SKIP, "no optimizer state in the file (no /optimizer group)");
    if (st <= 0) return;
    if (!attr_get(g, W, "kind", AG_CONFIG_STRING, &e, r)) goto out;
    bool same = strcmp(e.s, ag__ck_kind_name(opt->kind)) == 0;
    if (!same)
        ag__ck_problem(r, MISMATCH, "the file holds a '%.64s' optimizer, the optimizer given is '%s'", e.s,
                ag__ck_kind_name(opt->kind));
    free(e.s);
    if (!same) goto out;
    double *dst[] = {&so->lr, &so->eps, &so->weight_decay, &so->momentum, &so->dampening};
    const char *dn[] = {"lr", "eps", "weight_decay", "momentum", "dampening"};
    for (int i = 0; i < 5; i++)
        if (attr_get(g, W, dn[i], AG_CONFIG_DOUBLE, &e, r)) *dst[i] = e.d;
    bool betas = attr_array(g, W, "betas", H5T_FLOAT, H5T_NATIVE_DOUBLE, 2, so->betas, r);
    if (attr_get(g, W, "nesterov", AG_CONFIG_INT, &e, r)) so->nesterov = e.i != 0;
    if (attr_get(g, W, "step", AG_CONFIG_INT, &e, r)) {
        so->step = e.i;
        check_count(W, "step", e.i, r);
    }
    /* what the optimizer constructors accept (nn/training/optim.c) */
    check_range(W, "lr", so->lr, 0, INFINITY, false, r);
    check_range(W, "weight_decay", so->weight_decay, 0, INFINITY, false, r);
    if (so->kind == AG_OPTIM_SGD) {
        check_range(W, "momentum", so->momentum, 0, INFINITY, false, r);
        check_range(W, "dampening", so->dampening, -INFINITY, INFINITY, true, r);
    } else {
        check_range(W, "eps", so->eps, 0, INFINITY, false, r);
        for (int i = 0; betas && i < 2; i++) check_range(W, i ? "betas[1]" : "betas[0]", so->betas[i], 0, 1, true, r);
    }
    /* amsgrad is absent from files written before it existed: those are Adams without it */
    bool amsgrad = false;
    if (so->kind != AG_OPTIM_SGD && H5Aexists(g, "amsgrad") > 0 && attr_get(g, W, "amsgrad", AG_CONFIG_INT, &e, r))
        amsgrad = e.i != 0;
    if (so->kind != AG_OPTIM_SGD && amsgrad != opt->amsgrad)
        ag__ck_problem(r, MISMATCH, "the file's %s has amsgrad %s, the optimizer given %s (create it with amsgrad %s)",
                       ag__ck_kind_name(opt->kind), amsgrad ? "on" : "off", opt->amsgrad ? "on" : "off",
                       amsgrad ? "true" : "false");
    if (so->kind == AG_OPTIM_SGD && so->momentum != 0 && !opt->momentum_buffer)
        ag__ck_problem(r, MISMATCH, "the file's SGD has momentum %g, but the optimizer given keeps no momentum buffer "
                "(create it with momentum != 0)", so->momentum);
    char **names = link_names(g, W, r);
    int nstate = ag_optim_state_count(opt);
    for (int k = 0; names && names[k]; k++) {
        int found = -1;
        for (int j = 0; j < nstate; j++)
            if (strcmp(ag_optim_state(opt, j, NULL), names[k]) == 0) found = j;
        if (found < 0) ag__ck_problem(r, SKIP, "unexpected optimizer state '%s' (a %s optimizer keeps no such state)",
                               names[k], ag__ck_kind_name(opt->kind));
    }
    free_names(names);
    for (int j = 0; j < nstate; j++) {
        char prefix[96], where[96];
        const char *name = ag_optim_state(opt, j, NULL);
        hid_t sg;
        int s = group_open(g, name, &sg, r);
        if (s == 0) ag__ck_problem(r, SKIP, "no optimizer state '%s' in the file (no /optimizer/%s group)", name, name);
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
    size_t limit; /* the file's size: no string in it is longer */
} iter_ctx;

static herr_t rng_attr(hid_t loc, const char *name, const H5A_info_t *info, void *u) {
    iter_ctx *c = u;
    uint64_t v[2];
    if (strlen(name) >= AG_CHECKPOINT_NAME_MAX || c->s->nrng == AG_CHECKPOINT_MAX_RNGS)
        ag__ck_problem(c->r, FORMAT, "rng '%s' does not fit (names up to %d bytes, up to %d rngs)", name,
                AG_CHECKPOINT_NAME_MAX - 1, AG_CHECKPOINT_MAX_RNGS);
    else if (attr_array(loc, "/training/rng", name, H5T_INTEGER, H5T_NATIVE_UINT64, 2, v, c->r)) {
        ag_named_rng *n = &c->s->rng[c->s->nrng++];
        strcpy(n->name, name);
        n->rng = (ag_rng){.seed = v[0], .counter = v[1]};
    }
    return 0;
}

static herr_t config_attr(hid_t loc, const char *name, const H5A_info_t *info, void *u) {
    iter_ctx *c = u;
    char why[WHY_SIZE];
    if (strlen(name) >= AG_CHECKPOINT_NAME_MAX) {
        ag__ck_problem(c->r, FORMAT, "config '%.64s...' does not fit (keys up to %d bytes)", name, AG_CHECKPOINT_NAME_MAX - 1);
        return 0;
    }
    ag_config_entry e = {.type = AG_CONFIG_INT};
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    int ok = a < 0 ? 0 : attr_value(a, &e, c->limit, why, c->r);
    if (a >= 0) H5Aclose(a);
    memcpy(e.key, name, strlen(name) + 1);
    if (ok == 1 && !ag__config_append(c->s, &e)) {
        free(e.s);
        snprintf(why, sizeof why, "does not fit: out of memory for config entry %d", c->s->nconfig + 1);
        ok = -1;
    }
    if (ok != 1)
        ag__ck_problem(c->r, ok < 0 ? NOMEM : FORMAT, "config attribute '%s' %s", name, a < 0 ? "cannot be opened" : why);
    /* out of memory: stop here rather than report every entry after it */
    return ok < 0 ? 1 : 0;
}

/* A long config string: the dataset name of /config (docs/checkpoint.md). */
static herr_t config_dataset(hid_t g, const char *name, const H5L_info_t *info, void *u) {
    iter_ctx *c = u;
    char why[WHY_SIZE] = "cannot be opened (corrupted?)";
    int ok = 0;
    ag_config_entry e = {.type = AG_CONFIG_STRING};
    hid_t ds = -1, ty = -1, sp = -1, m = -1;
    hsize_t n1 = 0;
    size_t n = 0;
    if (strlen(name) >= AG_CHECKPOINT_NAME_MAX) {
        snprintf(why, sizeof why, "does not fit (keys up to %d bytes)", AG_CHECKPOINT_NAME_MAX - 1);
    } else if (ag_config_get_string(c->s, name) || ag_config_get_double(c->s, name, NULL)) {
        snprintf(why, sizeof why, "is also an attribute of /config");
    } else if ((ds = link_open(g, name, c->r)) < 0 || H5Iget_type(ds) != H5I_DATASET) {
        if (ds >= 0) snprintf(why, sizeof why, "is a group, not a dataset");
    } else if ((ty = H5Dget_type(ds)) < 0 || (sp = H5Dget_space(ds)) < 0 || H5Tget_class(ty) != H5T_STRING ||
               H5Tis_variable_str(ty) != 0 || H5Sget_simple_extent_ndims(sp) != 1 ||
               H5Sget_simple_extent_dims(sp, &n1, NULL) != 1 || n1 != 1) {
        snprintf(why, sizeof why, "is not one fixed-length string");
    } else if ((n = H5Tget_size(ty)) > c->limit) {
        snprintf(why, sizeof why, "declares a string of %zu bytes, more than the file's %zu (corrupted)", n, c->limit);
    } else if (!stored(ds)) {
        snprintf(why, sizeof why, "has no stored data (written by a save that failed?)");
    } else if (!(e.s = malloc(n + 1))) {
        snprintf(why, sizeof why, "needs %zu bytes: out of memory", n + 1);
        ok = -1;
    } else if ((m = H5Tcopy(ty)) < 0) {
        snprintf(why, sizeof why, "is corrupted: %s", ag__ck_cause().desc);
    } else if (snprintf(why, sizeof why, "config dataset '%.64s'", name), !read_checked(ds, why, m, e.s, n, 1, c->r)) {
        why[0] = 0; /* reported */
    } else {
        e.s[n] = 0;
        memcpy(e.key, name, strlen(name) + 1);
        ok = ag__config_append(c->s, &e) ? 1 : -1;
        if (ok < 0) snprintf(why, sizeof why, "does not fit: out of memory for config entry %d", c->s->nconfig + 1);
    }
    if (ok != 1) free(e.s);
    if (m >= 0) H5Tclose(m);
    if (ty >= 0) H5Tclose(ty);
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Oclose(ds);
    if (ok != 1 && why[0]) ag__ck_problem(c->r, ok < 0 ? NOMEM : FORMAT, "config dataset '%.64s' %s", name, why);
    return ok < 0 ? 1 : 0;
}

/* attributes of the child group name of loc, in creation order when the file tracked it */
static void each_attr(hid_t loc, const char *name, H5A_operator2_t fn, iter_ctx *c) {
    hid_t g;
    if (group_open(loc, name, &g, c->r) <= 0) return;
    unsigned flags = 0, lflags = 0;
    hid_t gcpl = H5Gget_create_plist(g);
    if (gcpl >= 0) H5Pget_attr_creation_order(gcpl, &flags), H5Pget_link_creation_order(gcpl, &lflags), H5Pclose(gcpl);
    H5_index_t idx = flags & H5P_CRT_ORDER_INDEXED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    H5_index_t lidx = lflags & H5P_CRT_ORDER_INDEXED ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    if (H5Aiterate2(g, idx, H5_ITER_INC, NULL, fn, c) < 0)
        ag__ck_problem(c->r, FORMAT, "cannot read the attributes of '%s': %s", name, ag__ck_cause().desc);
    /* then the long config strings, datasets of the group */
    if (fn == config_attr && H5Literate(g, lidx, H5_ITER_INC, NULL, config_dataset, c) < 0)
        ag__ck_problem(c->r, FORMAT, "cannot list the datasets of '%s': %s", name, ag__ck_cause().desc);
    H5Gclose(g);
}

static void load_state(hid_t f, ag_train_state *ss, size_t file_size, report *r) {
    const char *W = "/training";
    ag_config_entry e;
    hid_t g;
    int st = group_open(f, "training", &g, r);
    if (st == 0) ag__ck_problem(r, SKIP, "no training state in the file (no /training group)");
    if (st <= 0) return;
    int64_t *dst[] = {&ss->global_step, &ss->epoch, &ss->data_position};
    const char *dn[] = {"global_step", "epoch", "data_position"};
    for (int i = 0; i < 3; i++)
        if (attr_get(g, W, dn[i], AG_CONFIG_INT, &e, r)) {
            *dst[i] = e.i;
            check_count(W, dn[i], e.i, r);
        }
    iter_ctx c = {ss, r, file_size};
    each_attr(g, "rng", rng_attr, &c);
    H5Gclose(g);
    each_attr(f, "config", config_attr, &c);
}

/* Every dataset of group g (called where), and of its groups when deep, read whole and checked
 * against its crc32 attribute (format 2): what ag_checkpoint_verify proves without a model. */
static void verify_group(hid_t g, const char *where, bool deep, size_t file_size, report *r) {
    char **names = link_names(g, where, r);
    for (int k = 0; names && names[k]; k++) {
        char sub[300];
        snprintf(sub, sizeof sub, "%s/%s", where, names[k]);
        hid_t obj = link_open(g, names[k], r);
        H5I_type_t type = obj < 0 ? H5I_BADID : H5Iget_type(obj);
        if (obj < 0) {
            if (!r->retry) ag__ck_problem(r, FORMAT, "'%s' is corrupted: %s", sub, ag__ck_cause().desc);
        } else if (type == H5I_GROUP && deep) {
            if (group_trusted(obj, sub, r)) verify_group(obj, sub, false, file_size, r);
        } else if (type == H5I_DATASET) {
            hid_t ty = H5Dget_type(obj), sp = H5Dget_space(obj);
            hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
            size_t es = ty < 0 ? 0 : H5Tget_size(ty);
            bool flt = ty >= 0 && H5Tget_class(ty) == H5T_FLOAT && (es == 4 || es == 8);
            void *buf = NULL;
            snprintf(sub, sizeof sub, "dataset '%s/%s'", where + 1, names[k]);
            if (!flt || n < 0)
                ag__ck_problem(r, FORMAT, "%s is not float32 or float64 data", sub);
            else if ((uint64_t)n * es > file_size)
                ag__ck_problem(r, FORMAT, "%s declares %lld bytes, more than the file's %zu (corrupted)", sub,
                               (long long)n * (long long)es, file_size);
            else if (!(buf = malloc((size_t)n * es + 1)))
                ag__ck_problem(r, NOMEM, "out of memory reading %s", sub);
            else
                read_checked(obj, sub, es == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, buf, (size_t)n, es, r);
            free(buf);
            if (ty >= 0) H5Tclose(ty);
            if (sp >= 0) H5Sclose(sp);
        }
        if (obj >= 0) H5Oclose(obj);
    }
    free_names(names);
}

static void verify_all(hid_t f, size_t file_size, report *r) {
    hid_t g;
    if (group_open(f, "model", &g, r) > 0) verify_group(g, "/model", false, file_size, r), H5Gclose(g);
    if (group_open(f, "optimizer", &g, r) > 0) verify_group(g, "/optimizer", true, file_size, r), H5Gclose(g);
}

/* Open the HDF5 file name (path's contents) and check its format attributes; -1 with the
 * problem reported. */
static hid_t open_hdf5(const char *name, size_t file_size, report *r) {
    ag_config_entry e;
    hid_t fapl = ag__ck_fapl_new();
    hid_t f = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    cause_t c = ag__ck_cause();
    H5Pclose(fapl);
    if (f < 0) {
        if (c.minor == H5E_TRUNCATED)
            ag__ck_problem(r, FORMAT, "truncated HDF5 file: %zu bytes, fewer than its superblock records (HDF5: %s)",
                           file_size, c.desc);
        else
            ag__ck_problem(r, FORMAT, "corrupted HDF5 file, cannot open it: %s", c.desc);
        return -1;
    }
    htri_t ex = group_trusted(f, "/", r) ? H5Aexists(f, "format") : 0;
    if (r->worst) {
    } else if (ex <= 0) {
        if (ex < 0) ag__ck_problem(r, FORMAT, "corrupted HDF5 file, cannot read the root group: %s", ag__ck_cause().desc);
        else ag__ck_problem(r, FORMAT, "not an attograd checkpoint: no 'format' attribute on the root group");
    } else if (attr_get(f, "/", "format", AG_CONFIG_STRING, &e, r)) {
        bool ours = strcmp(e.s, FORMAT_NAME) == 0;
        if (!ours)
            ag__ck_problem(r, FORMAT, "not an attograd checkpoint: format is '%.64s', expected '" FORMAT_NAME "'", e.s);
        free(e.s);
        if (!ours) {
        } else if (attr_get(f, "/", "format_version", AG_CONFIG_INT, &e, r) &&
                   (e.i < FORMAT_VERSION_MIN || e.i > FORMAT_VERSION)) {
            ag__ck_problem(r, FORMAT, "format_version %lld is not supported: this attograd reads versions %d to %d%s",
                           (long long)e.i, FORMAT_VERSION_MIN, FORMAT_VERSION,
                           e.i > FORMAT_VERSION ? " (written by a newer attograd?)" : "");
        } else if (e.i < FORMAT_VERSION && r->trusted) { /* format 1 keeps data HDF5 does not checksum */
            r->retry = true;
            ag__ck_problem(r, FORMAT, "format_version %lld in the 1.10 format", (long long)e.i);
        } else {
            r->version = (int)e.i;
        }
    }
    if (r->worst) {
        H5Fclose(f);
        return -1;
    }
    return f;
}

void ag__ck_read_hdf5(const char *name, const read_req *q, size_t file_size, report *r) {
    hid_t f = open_hdf5(name, file_size, r);
    if (f < 0) return;
    if (q->params) load_model(f, q->params, q->model, r);
    if (q->opt) load_optim(f, q->opt, q->so, q->optim, r);
    if (q->state) load_state(f, q->state, file_size, r);
    if (q->all) verify_all(f, file_size, r);
    if (H5Fclose(f) < 0) ag__ck_problem(r, FORMAT, "closing failed: %s", ag__ck_cause().desc);
}
