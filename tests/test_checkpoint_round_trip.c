/* HDF5 checkpoints that load back what was saved: bit-exact round trips of parameters,
 * optimizers and training state (-0, NaN payloads, infinities, subnormals), dtype conversion on
 * load, the state setters, config strings of any length and number (and their damage named by
 * key), and the layout of the files written while config strings were limited to 255 bytes.
 *
 * Witnesses: round trips compare bytes with what was saved; the files' layout is read back
 * with the raw HDF5 API. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_util.h"

/* ---- round trips ---- */

static void fill_special(ag_params *p, void *slab, uint64_t seed) {
    ag_rng r = ag_rng_new(seed);
    double *v = malloc(sizeof(double) * (size_t)p->numel);
    ag_rng_normal_f64(&r, p->numel, v);
    for (int k = 0; k < p->count; k++)
        for (int64_t i = p->list[k]->offset; i < p->list[k]->offset + ag_numel(p->list[k]); i++) {
            if (p->dtype == AG_F32) ((float *)slab)[i] = (float)v[i];
            else ((double *)slab)[i] = v[i];
        }
    free(v);
    /* values a text or lossy format would not carry: -0, NaN with a payload, infinities, subnormals */
    int64_t o = p->list[0]->offset;
    if (p->dtype == AG_F32) {
        float *f = (float *)slab + o;
        uint32_t nan = 0x7fc01234u;
        f[0] = -0.0f, f[1] = INFINITY, f[2] = -INFINITY, f[3] = 1e-45f, f[4] = 3.4028235e38f;
        memcpy(&f[5], &nan, 4);
    } else {
        double *d = (double *)slab + o;
        uint64_t nan = 0x7ff8000000abcdefull;
        d[0] = -0.0, d[1] = INFINITY, d[2] = -INFINITY, d[3] = 5e-324, d[4] = 1.7976931348623157e308;
        memcpy(&d[5], &nan, 8);
    }
}

static ag_params *round_trip_params(ag_dtype dt) {
    ag_params *p = ag_params_new(dt);
    ag_params_add(p, "encoder.layers.0.linear1.weight", AG_SHAPE(5, 3));
    ag_params_add(p, "encoder.layers.0.linear1.bias", AG_SHAPE(5));
    ag_params_add(p, "scale", 0, NULL);
    ag_params_add(p, "empty", AG_SHAPE(0, 4));
    ag_params_add(p, "cube", AG_SHAPE(2, 3, 4));
    return p;
}

static void round_trip(ag_dtype dt, bool sgd) {
    const char *path = in_tmp(sgd ? "rt_sgd.h5" : "rt_adam.h5");
    ag_params *p = round_trip_params(dt), *q = round_trip_params(dt);
    ag_optim *o =
        sgd ? ag_sgd_new(p, &(ag_sgd_config){.lr = 0.125, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true})
            : ag_adamw_new(p, &(ag_adam_config){.lr = 3e-4, .betas = {0.85, 0.995}, .eps = 1e-7, .weight_decay = 0.05});
    ag_optim *oq = sgd ? ag_sgd_new(q, &(ag_sgd_config){.lr = 1, .momentum = 0.5, .dampening = 0.3})
                       : ag_adamw_new(q, &(ag_adam_config){.lr = 1, .betas = {0.5, 0.5}, .eps = 1e-3});
    fill_special(p, p->data, 1);
    for (int k = 0; k < ag_optim_state_count(o); k++) {
        void *slab;
        ag_optim_state(o, k, &slab);
        fill_special(p, slab, 2 + (uint64_t)k);
    }
    o->step = 123456789012345;
    ag_train_state s = {0}, t = {0};
    s.global_step = (int64_t)1 << 53; /* the largest count accepted */
    s.epoch = 0;
    s.data_position = 77;
    ag_state_set_rng(&s, "shuffle", &(ag_rng){.seed = UINT64_MAX, .counter = 0x8000000000000001ull});
    ag_state_set_rng(&s, "dropout", &(ag_rng){.counter = 42});
    ag_config_set_int(&s, "d_model", INT64_MIN);
    ag_config_set_double(&s, "dropout", 0.1);
    ag_config_set_double(&s, "neg_zero", -0.0);
    ag_config_set_double(&s, "tiny", 5e-324);
    ag_config_set_string(&s, "activation", "gelu");
    ag_config_set_string(&s, "empty", "");
    ag_config_set_string(&s, "unicode", "gr\xc3\xb6\xc3\x9f" "e \xe2\x86\x92");
    ag_config_set_int(&t, "stale", 1); /* a load replaces the whole state */
    save_ok(path, p, o, &s);
    assert_load(AG_CHECKPOINT_OK, path, q, oq, &t, NULL, "");
    assert_string_equal(last_msg, "");
    assert_memory_equal(p->data, q->data, slab_bytes(p));
    for (int k = 0; k < ag_optim_state_count(o); k++) {
        void *a, *b;
        assert_string_equal(ag_optim_state(o, k, &a), ag_optim_state(oq, k, &b));
        assert_memory_equal(a, b, slab_bytes(p));
    }
    assert_memory_equal(&o->lr, &oq->lr, sizeof o->lr);
    assert_memory_equal(o->betas, oq->betas, sizeof o->betas);
    assert_memory_equal(&o->eps, &oq->eps, sizeof o->eps);
    assert_memory_equal(&o->weight_decay, &oq->weight_decay, sizeof o->weight_decay);
    assert_memory_equal(&o->momentum, &oq->momentum, sizeof o->momentum);
    assert_memory_equal(&o->dampening, &oq->dampening, sizeof o->dampening);
    assert_int_equal(o->nesterov, oq->nesterov);
    assert_int_equal(o->step, oq->step);
    /* same entries in the same order, every value */
    tu_assert_same_state(&s, &t);
    ag_train_state_clear(&s);
    ag_train_state_clear(&t);
    ag_optim_free(o);
    ag_optim_free(oq);
    ag_params_free(p);
    ag_params_free(q);
}

static void test_round_trip_f32_adamw_is_bit_exact(void **state) { round_trip(AG_F32, false); }
static void test_round_trip_f64_sgd_nesterov_is_bit_exact(void **state) { round_trip(AG_F64, true); }

static void test_f64_file_loads_into_f32_params_rounded_and_f32_into_f64_exactly(void **state) {
    const char *p64 = in_tmp("conv64.h5"), *p32 = in_tmp("conv32.h5");
    ag_params *a = ag_params_new(AG_F64), *b = ag_params_new(AG_F32), *c = ag_params_new(AG_F64);
    ag_tensor *ta = ag_params_add(a, "w", AG_SHAPE(3));
    ag_tensor *tb = ag_params_add(b, "w", AG_SHAPE(3));
    ag_tensor *tc = ag_params_add(c, "w", AG_SHAPE(3));
    double v[3] = {0.1, 1.0 + 0x1p-30, -1e300};
    memcpy(first(ta), v, sizeof v);
    save_ok(p64, a, NULL, NULL);
    assert_int_equal(ag_version(tb), 0);
    assert_load(AG_CHECKPOINT_OK, p64, b, NULL, NULL, NULL, "");
    assert_int_equal(ag_version(tb), 1); /* changed in place: a graph that saved it would say so */
    const float *f = (const float *)first(tb);
    /* C's double->float conversion rounds to nearest: the witness */
    assert_true(f[0] == (float)0.1 && f[1] == 1.0f && f[2] == -INFINITY);
    save_ok(p32, b, NULL, NULL);
    assert_load(AG_CHECKPOINT_OK, p32, c, NULL, NULL, NULL, "");
    const double *d = (const double *)first(tc);
    assert_true(d[0] == (double)(float)0.1 && d[0] != 0.1 && d[1] == 1.0);
    ag_params_free(a);
    ag_params_free(b);
    ag_params_free(c);
}

static void test_state_setters_replace_by_name_and_report_misuse(void **state) {
    ag_train_state s = {0};
    assert_true(ag_config_set_int(&s, "layers", 2));
    assert_true(ag_config_set_string(&s, "layers", "two")); /* replaces, whatever the type */
    assert_int_equal(s.nconfig, 1);
    assert_string_equal(ag_config_get_string(&s, "layers"), "two");
    char longname[80];
    memset(longname, 'k', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_false(ag_config_set_int(&s, longname, 1));
    tu_assert_error("ag_config_set_int", "1 to 63 bytes");
    for (int i = 0; i < AG_CHECKPOINT_MAX_RNGS; i++) {
        char n[8];
        snprintf(n, sizeof n, "r%d", i);
        assert_true(ag_state_set_rng(&s, n, &(ag_rng){.seed = (uint64_t)i}));
    }
    assert_false(ag_state_set_rng(&s, "one_more", &(ag_rng){0}));
    tu_assert_error("ag_state_set_rng", "one_more", "16 rngs");
    ag_rng r;
    assert_true(ag_state_get_rng(&s, "r7", &r) && r.seed == 7);
    assert_false(ag_state_get_rng(&s, "absent", &r));
    ag_train_state_clear(&s);
    assert_int_equal(s.nconfig, 0);
    assert_null(ag_config_get_string(&s, "layers"));
}

/* ---- config strings of any length, any number of entries ---- */

/* n bytes of text shaped like a vocabulary (a word a line, some two- and three-byte UTF-8
 * letters), from seed */
static char *vocab_text(size_t n, uint64_t seed) {
    static const char *const letters[] = {"a", "e", "k", "s", "t", "\xc3\xa9", "\xc3\x9f", "\xe2\x86\x92"};
    char *s = malloc(n + 1);
    size_t at = 0;
    for (uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1; at < n;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const char *l = x % 11 == 0 ? "\n" : letters[(x >> 8) % 8];
        size_t k = strlen(l);
        if (at + k > n) l = "x", k = 1;
        memcpy(s + at, l, k);
        at += k;
    }
    s[n] = 0;
    return s;
}

/* s with a 1 MiB "src_vocab" first and 499 more entries of every type, strings up to 18 KB */
static void big_config(ag_train_state *s) {
    char *big = vocab_text(1 << 20, 1000); /* a seed of none of the others */
    assert_true(ag_config_set_string(s, "src_vocab", big));
    free(big);
    for (int i = 1; i < 500; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%03d", i);
        if (i % 3 == 0) assert_true(ag_config_set_int(s, key, (int64_t)i * -1000003));
        else if (i % 3 == 1) assert_true(ag_config_set_double(s, key, i / 7.0));
        else {
            char *v = vocab_text((size_t)i * 37, (uint64_t)i);
            assert_true(ag_config_set_string(s, key, v));
            free(v);
        }
    }
    assert_int_equal(s->nconfig, 500);
}

static void test_a_1_mib_config_string_and_500_entries_round_trip_exactly(void **state) {
    const char *path = in_tmp("big_config.h5");
    ag_train_state s = {0}, t;
    config_round_trip("big_config.h5", big_config, &s, &t);
    /* every entry, by key (strings over 255 bytes are datasets, which load after the attributes) */
    assert_int_equal(t.nconfig, 500);
    int ndatasets = 0;
    for (int i = 0; i < s.nconfig; i++) {
        const ag_config_entry *e = &s.config[i];
        int64_t iv;
        double dv;
        if (e->type == AG_CONFIG_INT) assert_true(ag_config_get_int(&t, e->key, &iv) && iv == e->i);
        else if (e->type == AG_CONFIG_DOUBLE) assert_true(ag_config_get_int(&t, e->key, &iv) == false &&
                                                          ag_config_get_double(&t, e->key, &dv) && dv == e->d);
        else assert_string_equal(ag_config_get_string(&t, e->key), e->s);
        ndatasets += e->type == AG_CONFIG_STRING && strlen(e->s) > 255;
    }
    assert_int_equal(ndatasets, 1 + 164); /* src_vocab, and k008, k011, ... k497 (37 i > 255 bytes) */
    const char *v = ag_config_get_string(&t, "src_vocab");
    assert_int_equal(strlen(v), 1 << 20);
    assert_memory_equal(v, ag_config_get_string(&s, "src_vocab"), 1 << 20);
    /* in the file: a one-element dataset /config/src_vocab of a fixed-length UTF-8 string of its
     * 1 MiB, contiguous, with its crc32 attribute; short strings stay attributes */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), g = H5Gopen2(f, "config", H5P_DEFAULT);
    H5O_info_t info;
    assert_true(H5Oget_info(g, &info) >= 0);
    assert_int_equal(info.num_attrs, 500 - ndatasets);
    hid_t ds = H5Dopen2(g, "src_vocab", H5P_DEFAULT), ty = H5Dget_type(ds), dcpl = H5Dget_create_plist(ds);
    assert_int_equal(H5Tis_variable_str(ty), 0);
    assert_int_equal(H5Tget_size(ty), 1 << 20);
    assert_int_equal(H5Tget_cset(ty), H5T_CSET_UTF8);
    assert_int_equal(H5Tget_strpad(ty), H5T_STR_NULLPAD);
    assert_int_equal(H5Pget_layout(dcpl), H5D_CONTIGUOUS);
    assert_true(H5Aexists(ds, "crc32") > 0);
    char *raw = malloc(1 << 20);
    assert_true(H5Dread(ds, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0);
    assert_memory_equal(raw, v, 1 << 20);
    free(raw);
    assert_true(H5Aexists(g, "k005") > 0 && H5Aexists(g, "k008") == 0 && H5Lexists(g, "k008", H5P_DEFAULT) > 0);
    H5Pclose(dcpl), H5Tclose(ty), H5Dclose(ds), H5Gclose(g), H5Fclose(f);
    /* a copy is deep: clearing the original leaves it whole */
    ag_train_state c = {0};
    assert_true(ag_train_state_copy(&c, &t));
    tu_assert_same_state(&t, &c);
    assert_true(ag_config_get_string(&c, "src_vocab") != v);
    ag_train_state_clear(&t);
    assert_true(t.nconfig == 0 && t.config == NULL);
    assert_memory_equal(ag_config_get_string(&c, "src_vocab"), ag_config_get_string(&s, "src_vocab"), (1 << 20) + 1);
    ag_train_state_clear(&c);
    ag_train_state_clear(&s);
}

static void put_i64(hid_t loc, const char *name, int64_t v) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(a), H5Sclose(sp);
}

static void put_vlen_string(hid_t loc, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(H5Awrite(a, t, &v) >= 0);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
}

/* The layout of the checkpoints written while config strings were limited to 255 bytes, built
 * by hand: vlen and fixed-length strings, a text in 255-byte chunks, the 64 entries that was
 * the most a state held. */
static void test_a_checkpoint_written_with_the_old_short_attribute_layout_loads(void **state) {
    const char *path = in_tmp("old_layout.h5");
    ag_params *p = small_params(AG_F32, 3), *q = small_params(AG_F32, 0);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
    H5Pset_attr_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    put_vlen_string(f, "format", "attograd-checkpoint");
    put_i64(f, "format_version", 1);
    hid_t g = H5Gcreate2(f, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int k = 0; k < p->count; k++) {
        ag_tensor *t = p->list[k];
        hsize_t dims[2] = {(hsize_t)t->shape[0], t->ndim > 1 ? (hsize_t)t->shape[1] : 0};
        hid_t sp = H5Screate_simple(t->ndim, dims, NULL);
        hid_t d = H5Dcreate2(g, t->name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        assert_true(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, first(t)) >= 0);
        H5Dclose(d), H5Sclose(sp);
    }
    H5Gclose(g);
    g = H5Gcreate2(f, "training", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    put_i64(g, "global_step", 12);
    put_i64(g, "epoch", 2);
    put_i64(g, "data_position", 5);
    hid_t rg = H5Gcreate2(g, "rng", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    hsize_t two = 2;
    uint64_t rv[2] = {3, 9};
    hid_t sp = H5Screate_simple(1, &two, NULL), a = H5Acreate2(rg, "shuffle", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT64, rv);
    H5Aclose(a), H5Sclose(sp), H5Gclose(rg), H5Gclose(g);
    g = H5Gcreate2(f, "config", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    char *text = vocab_text(61 * 255, 9);
    for (int i = 0; i < 61; i++) {
        char key[32], chunk[256];
        snprintf(key, sizeof key, "src_vocab.%d", i);
        memcpy(chunk, text + 255 * i, 255);
        chunk[255] = 0;
        put_vlen_string(g, key, chunk);
    }
    put_i64(g, "src_vocab.parts", 61);
    set_fixed_string_attr(g, "activation", "relu"); /* fixed-length, as other writers make them */
    hid_t sp1 = H5Screate(H5S_SCALAR);
    double drop = 0.1;
    a = H5Acreate2(g, "dropout", H5T_IEEE_F64LE, sp1, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &drop);
    H5Aclose(a), H5Sclose(sp1), H5Gclose(g), H5Fclose(f), H5Pclose(fapl), H5Pclose(gcpl);

    ag_train_state t = {0};
    assert_load(AG_CHECKPOINT_OK, path, q, NULL, &t, NULL, "");
    assert_memory_equal(q->data, p->data, slab_bytes(p));
    assert_true(t.global_step == 12 && t.epoch == 2 && t.data_position == 5 && t.nrng == 1);
    ag_rng r;
    assert_true(ag_state_get_rng(&t, "shuffle", &r) && r.seed == 3 && r.counter == 9);
    assert_int_equal(t.nconfig, 64);
    char *joined = calloc(61 * 255 + 1, 1);
    for (int i = 0; i < 61; i++) {
        char key[32];
        snprintf(key, sizeof key, "src_vocab.%d", i);
        assert_string_equal(t.config[i].key, key); /* creation order */
        const char *c = ag_config_get_string(&t, key);
        assert_int_equal(strlen(c), 255);
        strcat(joined, c);
    }
    assert_string_equal(joined, text);
    int64_t parts;
    double d;
    assert_true(ag_config_get_int(&t, "src_vocab.parts", &parts) && parts == 61);
    assert_string_equal(ag_config_get_string(&t, "activation"), "relu");
    assert_true(ag_config_get_double(&t, "dropout", &d) && d == 0.1);
    free(joined);
    free(text);
    ag_train_state_clear(&t);
    ag_params_free(p);
    ag_params_free(q);
}

/* A damaged byte in a long config string is a format error naming the entry (the data carry a
 * Fletcher32 checksum), and nothing is changed. */
static void test_a_corrupted_config_string_is_a_format_error_naming_its_key(void **state) {
    const char *good = in_tmp("vocab_good.h5"), *bad = in_tmp("vocab_bad.h5");
    ag_params *p = small_params(AG_F32, 0);
    ag_train_state s = {0};
    big_config(&s);
    save_ok(good, p, NULL, &s);
    size_t n;
    unsigned char *d = read_all(good, &n);
    size_t at = find_bytes(d, n, ag_config_get_string(&s, "src_vocab"), 64);
    for (size_t k = 0; k < 3; k++) { /* its first byte, one in the middle, its last */
        size_t where = at + k * ((1 << 20) - 1) / 2;
        d[where] ^= 0x01;
        write_all_bytes(bad, d, n);
        ag_train_state t = {0};
        ag_config_set_int(&t, "untouched", 1);
        assert_load(AG_CHECKPOINT_EFORMAT, bad, NULL, NULL, &t, NULL, "damaged: the CRC-32 of its contents is");
        tu_checkpoint_rehash(bad); /* then the dataset's own CRC-32 */
        assert_load(AG_CHECKPOINT_EFORMAT, bad, NULL, NULL, &t, NULL, "config dataset 'src_vocab' is damaged",
                    "the CRC-32 of its data");
        ag_train_state_clear(&t);
        d[where] ^= 0x01;
    }
    free(d);
    ag_train_state_clear(&s);
    ag_params_free(p);
}

/* A config string dataset whose type declares more bytes than the file has is refused before
 * anything is allocated for it; one of another shape or type is named too. */
static void test_an_oversized_or_misshapen_config_string_dataset_is_a_format_error_naming_its_key(void **state) {
    const char *good = in_tmp("cfg_good.h5");
    ag_params *p = small_params(AG_F32, 0);
    ag_train_state s = {0};
    ag_config_set_string(&s, "activation", "relu");
    save_ok(good, p, NULL, &s);
    hid_t f = edit_copy(good, "cfg_huge.h5");
    hsize_t one = 1;
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate_simple(1, &one, NULL);
    H5Tset_size(t, (size_t)1 << 31); /* 2 GiB declared, never written: the data is a fill value */
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
    H5Pset_chunk(dcpl, 1, &one);
    hid_t ds = H5Dcreate2(f, "/config/src_vocab", t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds), H5Pclose(dcpl), H5Tclose(t);
    int64_t iv[2] = {1, 2};
    hsize_t two = 2;
    hid_t sp2 = H5Screate_simple(1, &two, NULL);
    ds = H5Dcreate2(f, "/config/numbers", H5T_STD_I64LE, sp2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, iv);
    H5Dclose(ds), H5Sclose(sp2), H5Sclose(sp), close_edit(f);
    ag_train_state u = {0};
    ag_config_set_int(&u, "untouched", 1);
    assert_load(AG_CHECKPOINT_EFORMAT, in_tmp("cfg_huge.h5"), NULL, NULL, &u, NULL,
                "config dataset 'src_vocab' declares a string of 2147483648 bytes, more than the file's",
                "config dataset 'numbers' is not one fixed-length string");
    ag_train_state_clear(&u);
    ag_train_state_clear(&s);
    ag_params_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_f32_adamw_is_bit_exact, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_round_trip_f64_sgd_nesterov_is_bit_exact, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_f64_file_loads_into_f32_params_rounded_and_f32_into_f64_exactly,
                                        tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_state_setters_replace_by_name_and_report_misuse, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_a_1_mib_config_string_and_500_entries_round_trip_exactly, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_a_checkpoint_written_with_the_old_short_attribute_layout_loads, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_a_corrupted_config_string_is_a_format_error_naming_its_key, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(
            test_an_oversized_or_misshapen_config_string_dataset_is_a_format_error_naming_its_key, tu_setup,
            tu_teardown)
    };
    return cmocka_run_group_tests(tests, ckpt_group_setup, ckpt_group_teardown);
}
