#define _GNU_SOURCE /* memmem */
/* Damage behind a valid CRC: every byte of a small checkpoint flipped in turn, once with the
 * header rewritten to match (a hand edit: libhdf5 parses it in this process, trusting HDF5's
 * checksums and the datasets' CRC-32s) and once with the header zeroed (a file from another
 * writer: libhdf5 parses it in a child process first). Each load either fails with a message
 * naming the file, leaving the model, optimizer and state as they were, or gives exactly the
 * saved state: parameters, optimizer slabs and hyperparameters, training position, rngs and
 * config compared bit for bit. No flip may crash or hang the caller.
 *
 * Witnesses: the expected state is tests/checkpoint_fixture.h's formulas, not a file; headers
 * and crc32 attributes are recomputed with zlib. The loads run in two forked workers at once
 * (the machine's cores: nearly every load without a header costs the library a fork of its
 * own), each flipping its share of the bytes in its own file and reporting one result byte per
 * flip, so a crash or a hang of one load is counted, not fatal. The
 * format 1 fixture (tests/checkpoint_v1.h5, written by the earlier code) loads, with and
 * without its header, and the same sweep over it (without a header) shows the child turning
 * libhdf5's crashes on that format into messages. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoint_fixture.h"
#include "checkpoint_util.h"

/* the header docs/checkpoint.md describes, recomputed with zlib */
static void rehash(unsigned char *d, size_t n) {
    char head[512] = {0};
    snprintf(head, sizeof head, "attograd-checkpoint\nlength %zu\ncrc32 %08lx\n", n, crc32(0, d + 512, (uInt)(n - 512)));
    memcpy(d, head, 512);
}

static bool slab_same(const ag_params *p, const void *a, const void *b) {
    for (int i = 0; i < p->count; i++) {
        const ag_tensor *t = p->list[i];
        if (memcmp((const float *)a + t->offset, (const float *)b + t->offset, (size_t)ag_numel(t) * 4)) return false;
    }
    return true;
}

static bool config_same(const ag_train_state *a, const ag_train_state *b) {
    if (a->nconfig != b->nconfig) return false;
    for (int i = 0; i < a->nconfig; i++) {
        const ag_config_entry *x = &a->config[i], *y = &b->config[i];
        if (strcmp(x->key, y->key) || x->type != y->type) return false;
        if (x->type == AG_CONFIG_INT && x->i != y->i) return false;
        if (x->type == AG_CONFIG_DOUBLE && memcmp(&x->d, &y->d, sizeof x->d)) return false;
        if (x->type == AG_CONFIG_STRING && strcmp(x->s, y->s)) return false;
    }
    return true;
}

/* Whether b holds exactly a's parameters, optimizer and training state. */
static bool fixture_same(const ckpt_fixture *a, const ckpt_fixture *b) {
    const ag_optim *x = a->opt, *y = b->opt;
    bool hyper = memcmp(&x->lr, &y->lr, sizeof x->lr) == 0 && memcmp(x->betas, y->betas, sizeof x->betas) == 0 &&
                 memcmp(&x->eps, &y->eps, sizeof x->eps) == 0 &&
                 memcmp(&x->weight_decay, &y->weight_decay, sizeof x->weight_decay) == 0 &&
                 x->momentum == y->momentum && x->dampening == y->dampening && x->nesterov == y->nesterov &&
                 x->amsgrad == y->amsgrad && x->step == y->step;
    const ag_train_state *s = &a->st, *t = &b->st;
    bool pos = s->global_step == t->global_step && s->epoch == t->epoch && s->data_position == t->data_position &&
               s->nrng == t->nrng;
    for (int i = 0; pos && i < s->nrng; i++)
        pos = strcmp(s->rng[i].name, t->rng[i].name) == 0 && s->rng[i].rng.seed == t->rng[i].rng.seed &&
              s->rng[i].rng.counter == t->rng[i].rng.counter;
    return slab_same(a->p, a->p->data, b->p->data) && slab_same(a->p, x->exp_avg, y->exp_avg) &&
           slab_same(a->p, x->exp_avg_sq, y->exp_avg_sq) && hyper && pos && config_same(s, t);
}

/* ---- the sweep ---- */

enum { SAME = 's', REFUSED = 'f', SILENT = 'X', NO_MESSAGE = 'm', CHANGED = 'c' };

typedef struct {
    int same, refused, silent, no_message, changed, crashed, hung, child_crash, child_hang;
    size_t first_bad;
} tally;

static unsigned char flip_mask(size_t i) { return (unsigned char)(1u << (i * 5 % 8)); }

/* Load path into a fresh fixture: one result byte. A failure must name the file and leave the
 * fixture as it was made (compared with another fresh one). */
static char load_one(const char *path, const ckpt_fixture *want, const ckpt_fixture *fresh, char *msg, size_t size) {
    ckpt_fixture got;
    ckpt_fixture_make(&got, false);
    ag_config_set_int(&got.st, "before", 1);
    ag_checkpoint_status s = ag_checkpoint_load(path, got.p, got.opt, &got.st, NULL, msg, size);
    char res;
    if (s == AG_CHECKPOINT_OK) {
        res = fixture_same(want, &got) ? SAME : SILENT;
    } else {
        bool kept = slab_same(got.p, got.p->data, fresh->p->data) && got.opt->step == 0 && got.st.nconfig == 1 &&
                    ag_config_get_string(&got.st, "activation") == NULL;
        res = !strstr(msg, path) ? NO_MESSAGE : kept ? REFUSED : CHANGED;
    }
    ckpt_fixture_free(&got);
    return res;
}

/* Flip bytes from to end - 1 of d in turn (the header rewritten or left as it is), loading
 * each; one result byte per flip to out. */
static void worker(int out, unsigned char *d, size_t n, size_t from, size_t end, bool header, const char *path,
                   const ckpt_fixture *want) {
    ckpt_fixture fresh;
    ckpt_fixture_make(&fresh, false);
    char msg[2048];
    for (size_t i = from; i < end; i++) {
        d[i] ^= flip_mask(i);
        if (header) rehash(d, n);
        char res = write_bytes(path, d, n) ? load_one(path, want, &fresh, msg, sizeof msg) : NO_MESSAGE;
        if (res == REFUSED && strstr(msg, "libhdf5 crashed")) res = 'C';
        if (res == REFUSED && strstr(msg, "libhdf5 did not finish")) res = 'H';
        d[i] ^= flip_mask(i);
        if (write(out, &res, 1) != 1) _exit(3);
    }
    _exit(0);
}

static void count(tally *t, size_t i, char res) {
    switch (res) {
    case SAME: t->same++; return;
    case REFUSED: t->refused++; return;
    case 'C': t->refused++, t->child_crash++; return;
    case 'H': t->refused++, t->child_hang++; return;
    case SILENT: t->silent++; break;
    case NO_MESSAGE: t->no_message++; break;
    case CHANGED: t->changed++; break;
    case 'K': t->crashed++; break;
    default: t->hung++; break;
    }
    if (i < t->first_bad) t->first_bad = i;
}

/* A worker's share of a sweep: bytes next to end - 1, flipped into its own file. */
typedef struct {
    size_t next, end;
    pid_t pid;
    int fd;
    long since; /* when it last reported (ms) */
    char path[600];
} lane;

enum { LANES = 2, HANG_MS = 20000 }; /* the library gives its child 5 s (AG_CHECKPOINT_TIMEOUT) */

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void lane_start(lane *l, unsigned char *d, size_t n, bool header, const ckpt_fixture *want) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    l->pid = fork();
    assert_true(l->pid >= 0);
    if (l->pid == 0) {
        close(p[0]);
        worker(p[1], d, n, l->next, l->end, header, l->path, want);
    }
    close(p[1]);
    l->fd = p[0];
    l->since = now_ms();
}

/* The lane's worker ended (res 'K': it crashed) or hung ('T'): counted against the flip it
 * was loading, and a new worker takes the rest. */
static void lane_restart(lane *l, tally *t, char res, unsigned char *d, size_t n, bool header,
                         const ckpt_fixture *want) {
    kill(l->pid, SIGKILL);
    close(l->fd);
    waitpid(l->pid, NULL, 0);
    l->fd = -1;
    count(t, l->next++, res);
    if (l->next < l->end) lane_start(l, d, n, header, want);
}

/* Bytes from to end - 1 of orig flipped in turn, in LANES workers at once, each flipping its
 * share of the bytes in its own file; a worker is restarted after it crashes or hangs. */
static tally sweep(const unsigned char *orig, size_t n, size_t from, size_t end, bool header, const char *path,
                   const ckpt_fixture *want) {
    tally t = {.first_bad = (size_t)-1};
    unsigned char *d = malloc(n);
    memcpy(d, orig, n);
    lane lanes[LANES];
    for (int k = 0; k < LANES; k++) {
        lane *l = &lanes[k];
        l->next = from + (end - from) * (size_t)k / LANES;
        l->end = from + (end - from) * (size_t)(k + 1) / LANES;
        l->fd = -1;
        snprintf(l->path, sizeof l->path, "%s.%d", path, k);
        if (l->next < l->end) lane_start(l, d, n, header, want);
    }
    for (;;) {
        struct pollfd pf[LANES];
        lane *at[LANES];
        int np = 0;
        long wait = HANG_MS;
        for (int k = 0; k < LANES; k++)
            if (lanes[k].fd >= 0) {
                long left = lanes[k].since + HANG_MS - now_ms();
                wait = left < wait ? left : wait;
                at[np] = &lanes[k];
                pf[np++] = (struct pollfd){lanes[k].fd, POLLIN, 0};
            }
        if (np == 0) break;
        int ready = poll(pf, (nfds_t)np, wait > 0 ? (int)wait : 0);
        if (ready < 0 && errno != EINTR) fail_msg("poll: %s", strerror(errno));
        for (int k = 0; k < np; k++) {
            lane *l = at[k];
            char c;
            if (ready > 0 && pf[k].revents) {
                if (read(l->fd, &c, 1) == 1) {
                    count(&t, l->next++, c);
                    l->since = now_ms();
                    if (l->next == l->end) {
                        close(l->fd);
                        waitpid(l->pid, NULL, 0);
                        l->fd = -1;
                    }
                } else {
                    lane_restart(l, &t, 'K', d, n, header, want);
                }
            } else if (now_ms() - l->since >= HANG_MS) {
                lane_restart(l, &t, 'T', d, n, header, want);
            }
        }
    }
    free(d);
    return t;
}

static void print_tally(const char *what, size_t n, const tally *t) {
    print_message("%s: %zu flips: %d refused with a message (%d of them libhdf5 crashes and %d hangs in the child), "
                  "%d loaded the identical state; %d silent changes, %d failures without the file named, %d "
                  "failures that changed the model, %d crashes, %d hangs",
                  what, n, t->refused, t->child_crash, t->child_hang, t->same, t->silent, t->no_message, t->changed,
                  t->crashed, t->hung);
    if (t->first_bad != (size_t)-1) print_message(" (first at byte %zu)", t->first_bad);
    print_message("\n");
}

static unsigned char *saved_fixture(size_t *n, ckpt_fixture *want) {
    ckpt_fixture_make(want, true);
    char msg[1024];
    ag_checkpoint_save_opts o = {.no_fsync = true};
    if (ag_checkpoint_save(in_tmp("good.h5"), want->p, want->opt, &want->st, &o, msg, sizeof msg) != AG_CHECKPOINT_OK)
        fail_msg("%s", msg);
    return read_all(in_tmp("good.h5"), n);
}

static void test_every_byte_flipped_behind_a_rewritten_header_is_refused_or_harmless(void **state) {
    ckpt_fixture want;
    size_t n;
    unsigned char *d = saved_fixture(&n, &want);
    tally t = sweep(d, n, 0, n, true, in_tmp("flip.h5"), &want);
    print_tally("header rewritten", n, &t);
    assert_int_equal(t.same + t.refused, (int)n);
    /* a sweep that refuses nothing, or loads nothing, could not tell */
    assert_true(t.refused > (int)n / 2 && t.same > 0);
    free(d);
    ckpt_fixture_free(&want);
}

static void test_every_byte_flipped_without_a_header_is_refused_or_harmless(void **state) {
    ckpt_fixture want;
    size_t n;
    unsigned char *d = saved_fixture(&n, &want);
    memset(d, 0, 512);
    tally t = sweep(d, n, 0, n, false, in_tmp("flip0.h5"), &want);
    print_tally("no header", n, &t);
    assert_int_equal(t.same + t.refused, (int)n);
    assert_true(t.refused > (int)n / 2 && t.same > 0);
    free(d);
    ckpt_fixture_free(&want);
}

/* ---- format 1 ---- */

static const char *v1_path(void) {
    static char p[600];
    const char *root = getenv("AG_SOURCE_ROOT");
    snprintf(p, sizeof p, "%s/tests/checkpoint_v1.h5", root ? root : "..");
    return p;
}

static void test_a_format_1_file_loads_with_and_without_its_header(void **state) {
    ckpt_fixture want, fresh;
    ckpt_fixture_make(&want, true);
    ckpt_fixture_make(&fresh, false);
    char msg[1024];
    size_t n;
    unsigned char *d = read_all(v1_path(), &n);
    hid_t f = H5Fopen(v1_path(), H5F_ACC_RDONLY, H5P_DEFAULT), a = H5Aopen(f, "format_version", H5P_DEFAULT);
    int64_t v = 0;
    H5Aread(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a), H5Fclose(f);
    assert_int_equal(v, 1);
    assert_int_equal(d[512 + 8], 2); /* the 1.8 format's superblock */
    assert_int_equal(load_one(v1_path(), &want, &fresh, msg, sizeof msg), SAME);
    assert_int_equal(ag_checkpoint_verify(v1_path(), msg, sizeof msg), AG_CHECKPOINT_OK);
    memset(d, 0, 512);
    assert_true(write_bytes(in_tmp("v1_bare.h5"), d, n));
    assert_int_equal(load_one(in_tmp("v1_bare.h5"), &want, &fresh, msg, sizeof msg), SAME);
    /* and a byte of its data flipped, header rewritten: HDF5's Fletcher32 finds it */
    ag_tensor *w = ag_params_find(want.p, "enc.weight");
    float x = ((float *)want.p->data)[w->offset + 1];
    unsigned char *at = memmem(d, n, &x, 4);
    assert_non_null(at);
    at[2] ^= 0x04;
    rehash(d, n);
    assert_true(write_bytes(in_tmp("v1_bad.h5"), d, n));
    assert_int_equal(load_one(in_tmp("v1_bad.h5"), &want, &fresh, msg, sizeof msg), REFUSED);
    assert_non_null(strstr(msg, "Fletcher32"));
    free(d);
    ckpt_fixture_free(&want);
    ckpt_fixture_free(&fresh);
}

/* libhdf5 1.10.8 crashes on some damaged format 1 files (its global heap of variable-length
 * strings has no checksum): through the child those are messages. The first bytes of that heap
 * (its header and the strings' sizes) flipped in turn. Format 1 data has no CRC-32 of its own, so a flip in an unchecked
 * structure may still load a different model; that is counted, not asserted. */
static void test_libhdf5_crashes_on_damaged_format_1_files_become_messages(void **state) {
    ckpt_fixture want;
    ckpt_fixture_make(&want, true);
    size_t n;
    unsigned char *d = read_all(v1_path(), &n);
    memset(d, 0, 512);
    unsigned char *heap = memmem(d, n, "GCOL", 4);
    assert_non_null(heap);
    size_t at = (size_t)(heap - d), len = 256;
    tally t = sweep(d, n, at, at + len, false, in_tmp("flip1.h5"), &want);
    print_tally("format 1, no header, the global heap's first 256 bytes", len, &t);
    assert_int_equal(t.crashed, 0);
    assert_int_equal(t.hung, 0);
    assert_int_equal(t.no_message + t.changed, 0);
    assert_true(t.child_crash + t.child_hang > 0); /* the child did meet libhdf5's crashes */
    free(d);
    ckpt_fixture_free(&want);
}

/* ---- what the files hold, and the verify API ---- */

/* the crc32 attribute of /model/name, and zlib's CRC-32 of its data's little-endian bytes */
static void dataset_crcs(const char *path, const char *name, uint32_t *attr, uint32_t *data) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), g = H5Gopen2(f, "model", H5P_DEFAULT);
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT), sp = H5Dget_space(ds), a = H5Aopen(ds, "crc32", H5P_DEFAULT);
    hssize_t k = H5Sget_simple_extent_npoints(sp);
    float *v = malloc((size_t)k * 4 + 1);
    assert_true(H5Dread(ds, H5T_IEEE_F32LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    assert_true(H5Aread(a, H5T_NATIVE_UINT32, attr) >= 0);
    *data = (uint32_t)crc32(0, (const Bytef *)v, (uInt)k * 4);
    free(v);
    H5Aclose(a), H5Sclose(sp), H5Dclose(ds), H5Gclose(g), H5Fclose(f);
}

static void test_verify_checks_every_dataset_crc_and_names_the_damaged_one(void **state) {
    ckpt_fixture want;
    size_t n;
    unsigned char *d = saved_fixture(&n, &want);
    char msg[1024];
    uint32_t attr, data;
    dataset_crcs(in_tmp("good.h5"), "enc.weight", &attr, &data);
    assert_int_equal(attr, data);
    assert_int_equal(ag_checkpoint_verify(in_tmp("good.h5"), msg, sizeof msg), AG_CHECKPOINT_OK);
    assert_string_equal(msg, "");
    /* a flipped bit in exp_avg of enc.bias (its 2nd value), header rewritten: verify needs no model */
    ag_tensor *b = ag_params_find(want.p, "enc.bias");
    float x = ((float *)want.opt->exp_avg)[b->offset + 1];
    unsigned char *at = memmem(d, n, &x, 4);
    assert_non_null(at);
    at[0] ^= 0x01;
    rehash(d, n);
    assert_true(write_bytes(in_tmp("bad.h5"), d, n));
    assert_int_equal(ag_checkpoint_verify(in_tmp("bad.h5"), msg, sizeof msg), AG_CHECKPOINT_EFORMAT);
    assert_non_null(strstr(msg, "dataset 'optimizer/exp_avg/enc.bias' is damaged: the CRC-32 of its data is"));
    /* without the header too (the child path) */
    memset(d, 0, 512);
    assert_true(write_bytes(in_tmp("bad0.h5"), d, n));
    assert_int_equal(ag_checkpoint_verify(in_tmp("bad0.h5"), msg, sizeof msg), AG_CHECKPOINT_EFORMAT);
    assert_non_null(strstr(msg, "dataset 'optimizer/exp_avg/enc.bias' is damaged"));
    assert_int_equal(ag_checkpoint_verify(in_tmp("missing.h5"), msg, sizeof msg), AG_CHECKPOINT_EIO);
    free(d);
    ckpt_fixture_free(&want);
}

/* A file edited with h5py's habits (a variable-length string attribute), header rewritten:
 * not read in process (the global heap has no checksum) but through the child, and loaded. */
static void test_a_hand_edit_with_a_variable_length_string_loads_through_the_child(void **state) {
    ckpt_fixture want, fresh;
    size_t n;
    free(saved_fixture(&n, &want));
    ckpt_fixture_make(&fresh, false);
    hid_t f = H5Fopen(in_tmp("good.h5"), H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "config", H5P_DEFAULT);
    H5Adelete(g, "activation");
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, H5T_VARIABLE);
    const char *v = "gelu";
    hid_t a = H5Acreate2(g, "activation", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(H5Awrite(a, t, &v) >= 0);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t), H5Gclose(g), H5Fclose(f);
    tu_checkpoint_rehash(in_tmp("good.h5"));
    char msg[1024];
    assert_int_equal(load_one(in_tmp("good.h5"), &want, &fresh, msg, sizeof msg), SAME);
    ckpt_fixture_free(&want);
    ckpt_fixture_free(&fresh);
}

static int setup(void **state) {
    setenv("AG_CHECKPOINT_TIMEOUT", "5", 1);
    return ckpt_group_setup(state) ? -1 : tu_setup(state);
}

static int teardown(void **state) {
    int r = tu_teardown(state);
    return ckpt_group_teardown(state) ? -1 : r;
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test by name (a glob) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_byte_flipped_behind_a_rewritten_header_is_refused_or_harmless),
        cmocka_unit_test(test_every_byte_flipped_without_a_header_is_refused_or_harmless),
        cmocka_unit_test(test_a_format_1_file_loads_with_and_without_its_header),
        cmocka_unit_test(test_libhdf5_crashes_on_damaged_format_1_files_become_messages),
        cmocka_unit_test(test_verify_checks_every_dataset_crc_and_names_the_damaged_one),
        cmocka_unit_test(test_a_hand_edit_with_a_variable_length_string_loads_through_the_child),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
