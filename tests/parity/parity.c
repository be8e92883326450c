/* attograd-parity FILE.h5 [...]: run every PyTorch parity case in the files (schema in
 * README.md), one line per case, exit status 1 if any case fails, 2 if a file cannot be read. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parity.h"

#define ABS_TOL 1e-5
#define REL_TOL 1e-4

/* ---- attributes ---- */

static bool attr_exists(hid_t g, const char *key) { return H5Aexists(g, key) > 0; }

int64_t pc_int(parity_case *c, const char *key, int64_t dflt) {
    if (!attr_exists(c->group, key)) return dflt;
    int64_t v = dflt;
    hid_t a = H5Aopen(c->group, key, H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    return v;
}

double pc_double(parity_case *c, const char *key, double dflt) {
    if (!attr_exists(c->group, key)) return dflt;
    double v = dflt;
    hid_t a = H5Aopen(c->group, key, H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    return v;
}

bool pc_bool(parity_case *c, const char *key, bool dflt) { return pc_int(c, key, dflt) != 0; }

/* h5py writes str attributes as variable-length UTF-8 strings */
static bool read_str_attr(hid_t obj, const char *key, char *buf, size_t size) {
    if (!attr_exists(obj, key)) return false;
    hid_t a = H5Aopen(obj, key, H5P_DEFAULT), ft = H5Aget_type(a);
    bool ok = false;
    if (H5Tget_class(ft) == H5T_STRING) {
        if (H5Tis_variable_str(ft) > 0) {
            char *s = NULL;
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ft));
            if (H5Aread(a, mt, &s) >= 0 && s) {
                snprintf(buf, size, "%s", s);
                ok = true;
                H5free_memory(s);
            }
            H5Tclose(mt);
        } else {
            size_t n = H5Tget_size(ft);
            char *s = calloc(n + 1, 1);
            if (H5Aread(a, ft, s) >= 0) {
                snprintf(buf, size, "%s", s);
                ok = true;
            }
            free(s);
        }
    }
    H5Tclose(ft);
    H5Aclose(a);
    return ok;
}

bool pc_str(parity_case *c, const char *key, char *buf, size_t size, const char *dflt) {
    if (read_str_attr(c->group, key, buf, size)) return true;
    snprintf(buf, size, "%s", dflt ? dflt : "");
    return false;
}

/* ---- datasets ---- */

static ag_tensor *read_dataset(hid_t loc, const char *path, ag_dtype dt) {
    if (H5Lexists(loc, path, H5P_DEFAULT) <= 0) return NULL;
    hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t s = H5Dget_space(d);
    int nd = H5Sget_simple_extent_ndims(s);
    hsize_t dims[AG_MAX_DIMS];
    int64_t shape[AG_MAX_DIMS];
    H5Sget_simple_extent_dims(s, dims, NULL);
    for (int i = 0; i < nd; i++) shape[i] = (int64_t)dims[i];
    ag_tensor *t = ag_empty(dt, nd, shape);
    hid_t mt = dt == AG_F32 ? H5T_NATIVE_FLOAT : dt == AG_F64 ? H5T_NATIVE_DOUBLE : dt == AG_I64 ? H5T_NATIVE_INT64
             : dt == AG_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT8;
    if (ag_numel(t) > 0) H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->data);
    H5Sclose(s);
    H5Dclose(d);
    return t;
}

ag_tensor *pc_dataset(parity_case *c, const char *path, ag_dtype dt) { return read_dataset(c->group, path, dt); }

ag_tensor *pc_in(parity_case *c, int k) {
    if (k >= c->nin) {
        snprintf(c->msg, sizeof c->msg, "op needs input in%d, the case has %d inputs", k, c->nin);
        return NULL;
    }
    return c->in[k];
}

ag_params *pc_params(parity_case *c) {
    if (!c->params) c->params = ag_params_new(c->dtype);
    return c->params;
}

/* names of the members of group path, in HDF5's (alphabetical) order */
static int list_group(hid_t loc, const char *path, char names[][256], int max) {
    if (H5Lexists(loc, path, H5P_DEFAULT) <= 0) return 0;
    hid_t g = H5Gopen2(loc, path, H5P_DEFAULT);
    H5G_info_t info;
    H5Gget_info(g, &info);
    int n = 0;
    for (hsize_t i = 0; i < info.nlinks && n < max; i++, n++)
        H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, names[n], 256, H5P_DEFAULT);
    H5Gclose(g);
    return n;
}

bool pc_load_params(parity_case *c) {
    static char names[512][256];
    int n = list_group(c->group, "params", names, 512);
    ag_params *p = pc_params(c);
    size_t used = 0;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        char path[600];
        snprintf(path, sizeof path, "params/%.255s", names[i]);
        ag_tensor *src = read_dataset(c->group, path, c->dtype), *dst = ag_params_find(p, names[i]);
        char b1[128], b2[128];
        if (!dst) {
            used += (size_t)snprintf(c->msg + used, sizeof c->msg - used, "unexpected parameter '%s' %s; ",
                                     names[i], ag_shape_str(src, b1));
            ok = false;
        } else if (!src || src->ndim != dst->ndim || memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim)) {
            used += (size_t)snprintf(c->msg + used, sizeof c->msg - used, "parameter '%s' is %s in the file, %s in attograd; ",
                                     names[i], ag_shape_str(src, b1), ag_shape_str(dst, b2));
            ok = false;
        } else {
            ag_copy_(dst, src);
        }
        if (used >= sizeof c->msg) used = sizeof c->msg - 1;
    }
    for (int k = 0; k < p->count; k++) {
        bool found = false;
        for (int i = 0; i < n && !found; i++) found = strcmp(names[i], p->list[k]->name) == 0;
        if (!found) {
            used += (size_t)snprintf(c->msg + used, sizeof c->msg - used, "missing parameter '%s'; ", p->list[k]->name);
            if (used >= sizeof c->msg) used = sizeof c->msg - 1;
            ok = false;
        }
    }
    return ok;
}

/* ---- running a case ---- */

static char last_error[1024];
static int error_count;
static void record_error(const char *m, void *u) {
    (void)u;
    if (!error_count++) snprintf(last_error, sizeof last_error, "%s", m);
}

typedef struct {
    double max_abs, max_rel;
    char fail[1400];
} compare_t;

/* got vs expected, element by element; records the first element out of tolerance */
static bool compare(compare_t *r, const char *what, ag_tensor *got, ag_tensor *want) {
    char b1[128], b2[128];
    if (!got) {
        snprintf(r->fail, sizeof r->fail, "%s: attograd produced nothing", what);
        return false;
    }
    if (got->ndim != want->ndim || memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim)) {
        snprintf(r->fail, sizeof r->fail, "%s: shape %s, expected %s", what, ag_shape_str(got, b1),
                 ag_shape_str(want, b2));
        return false;
    }
    int64_t n = ag_numel(got);
    double *g = malloc(sizeof(double) * (size_t)(n + 1)), *w = malloc(sizeof(double) * (size_t)(n + 1));
    ag_to_buffer(got, AG_F64, g);
    ag_to_buffer(want, AG_F64, w);
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(g[i] - w[i]), rel = w[i] != 0 ? a / fabs(w[i]) : a;
        bool same = (isnan(g[i]) && isnan(w[i])) || g[i] == w[i];
        if (!same) {
            if (isnan(a)) a = rel = INFINITY;
            if (a > r->max_abs) r->max_abs = a;
            if (rel > r->max_rel && a > ABS_TOL) r->max_rel = rel;
        }
        if (!same && !(a <= ABS_TOL || rel <= REL_TOL) && ok) {
            snprintf(r->fail, sizeof r->fail, "%s element %lld: got %.8g, expected %.8g (abs %.2e, rel %.2e)", what,
                     (long long)i, g[i], w[i], a, rel);
            ok = false;
        }
    }
    free(g);
    free(w);
    return ok;
}

static const parity_op *find_op(const char *name) {
    for (const parity_op *const *t = parity_tables; *t; t++)
        for (const parity_op *o = *t; o->op; o++)
            if (strcmp(o->op, name) == 0) return o;
    return NULL;
}

/* returns true when the case passed */
static bool run_case(hid_t file, const char *fname, const char *name) {
    parity_case c = {.name = name};
    c.group = H5Gopen2(file, name, H5P_DEFAULT);
    ag_arena *arena = ag_arena_new(1 << 20), *prev = ag_arena_use(arena);
    error_count = 0;
    char op[128], dt[16];
    compare_t r = {0};
    bool ok = true;
    ag_tensor *out[PC_MAX_IO] = {0};
    int nout = 0;

    if (!read_str_attr(c.group, "op", op, sizeof op)) {
        snprintf(r.fail, sizeof r.fail, "no 'op' attribute");
        ok = false;
        goto done;
    }
    read_str_attr(c.group, "dtype", dt, sizeof dt);
    c.dtype = strcmp(dt, "f64") == 0 ? AG_F64 : AG_F32;
    const parity_op *o = find_op(op);
    if (!o) {
        snprintf(r.fail, sizeof r.fail, "op '%s' is not registered in tests/parity/ops.c", op);
        ok = false;
        goto done;
    }
    char names[PC_MAX_IO][256];
    c.nin = list_group(c.group, "inputs", names, PC_MAX_IO);
    for (int k = 0; k < c.nin; k++) {
        char path[600];
        snprintf(path, sizeof path, "inputs/in%d", k);
        hid_t d = H5Dopen2(c.group, path, H5P_DEFAULT);
        if (d < 0) {
            snprintf(r.fail, sizeof r.fail, "inputs are not named in0..in%d", c.nin - 1);
            ok = false;
            goto done;
        }
        bool is_bool = attr_exists(d, "bool"), none = attr_exists(d, "none"), rg = attr_exists(d, "requires_grad");
        hid_t ty = H5Dget_type(d);
        H5T_class_t cls = H5Tget_class(ty);
        H5Tclose(ty);
        H5Dclose(d);
        if (none) continue;
        ag_dtype want = is_bool ? AG_BOOL : cls == H5T_INTEGER ? AG_I64 : c.dtype;
        c.in[k] = read_dataset(c.group, path, want);
        if (rg) ag_requires_grad_(c.in[k], true);
    }
    nout = o->run(&c, out);
    if (nout < 0 || error_count) {
        snprintf(r.fail, sizeof r.fail, "%s", error_count ? last_error : c.msg);
        ok = false;
        goto done;
    }
    for (int k = 0; k < nout; k++) {
        char path[64];
        snprintf(path, sizeof path, "grad_outputs/out%d", k);
        ag_tensor *g = read_dataset(c.group, path, c.dtype);
        if (g && out[k]) ag_backward(out[k], g);
    }
    if (error_count) {
        snprintf(r.fail, sizeof r.fail, "backward: %s", last_error);
        ok = false;
        goto done;
    }
    for (int k = 0; ok && k < nout; k++) {
        char path[64];
        snprintf(path, sizeof path, "expected/out%d", k);
        ag_tensor *want = read_dataset(c.group, path, AG_F64);
        if (!want) {
            snprintf(r.fail, sizeof r.fail, "the op returned %d outputs, the case has no %s", nout, path);
            ok = false;
        } else {
            ok = compare(&r, path, out[k], want);
        }
    }
    for (int k = 0; ok && k < c.nin; k++) {
        char path[64];
        snprintf(path, sizeof path, "expected_grads/in%d", k);
        ag_tensor *want = read_dataset(c.group, path, AG_F64);
        if (want) ok = compare(&r, path, c.in[k] ? c.in[k]->grad : NULL, want);
    }
    static char pnames[512][256];
    int np = list_group(c.group, "expected_grads_params", pnames, 512);
    for (int k = 0; ok && k < np; k++) {
        char path[600];
        snprintf(path, sizeof path, "expected_grads_params/%s", pnames[k]);
        ag_tensor *p = c.params ? ag_params_find(c.params, pnames[k]) : NULL;
        ok = compare(&r, path, p ? p->grad : NULL, read_dataset(c.group, path, AG_F64));
    }
done:
    if (ok) printf("ok case %s  max_abs %.2e  max_rel %.2e\n", name, r.max_abs, r.max_rel);
    else printf("FAIL case %s  (%s)  %s\n", name, fname, r.fail);
    ag_params_free(c.params);
    ag_arena_use(prev);
    ag_arena_free(arena);
    H5Gclose(c.group);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: attograd-parity FILE.h5 [...]\n"
                        "Runs every PyTorch parity case in the files (schema: tests/parity/README.md).\n");
        return argc < 2 ? 2 : 0;
    }
    ag_set_error_handler(record_error, NULL);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int failed = 0, passed = 0, bad_files = 0;
    for (int i = 1; i < argc; i++) {
        hid_t f = H5Fis_hdf5(argv[i]) > 0 ? H5Fopen(argv[i], H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
        if (f < 0) {
            fprintf(stderr, "attograd-parity: %s: not a readable HDF5 file\n", argv[i]);
            bad_files++;
            continue;
        }
        static char names[4096][256];
        int n = list_group(f, "/", names, 4096);
        for (int k = 0; k < n; k++) {
            if (run_case(f, argv[i], names[k])) passed++;
            else failed++;
        }
        H5Fclose(f);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return bad_files ? 2 : failed ? 1 : 0;
}
