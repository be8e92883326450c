/* attograd-translate train --accum and --keep-last, and the average subcommand, run as a user
 * runs them. The parameters are read back from the checkpoints with libhdf5 directly (not
 * through attograd), and the witnesses are: one batch 4 times larger for 4 micro-batches, a run
 * straight through for a resumed one, last.h5 for the step file of the same step, and the mean
 * of two checkpoints' values computed here. `test_translate_accum dist` (the suite runs it when
 * Open MPI is installed) checks --accum on 2 ranks under mpirun against one process. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "translate_run.h"

static char corpus[512];

/* a tiny Transformer on the shipped corpus, without dropout: every run of these settings and
 * the same data order gives the same parameters up to float rounding */
#define TINY_ARGS "--train", corpus, "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", \
    "--max-eval", "8", "--samples", "0", "--dropout", "0", "--seed", "3", "--threads", "1", "--tokenizer", "word"

/* ---- parameters read with libhdf5 ---- */

typedef struct {
    int n;
    char name[64][96];
    int64_t len[64];
    float *v[64];
} params;

static herr_t add_dataset(hid_t g, const char *name, const H5L_info_t *info, void *data) {
    (void)info;
    params *p = data;
    hid_t d = H5Dopen2(g, name, H5P_DEFAULT), s = H5Dget_space(d);
    if (p->n >= 64 || d < 0 || s < 0) return -1;
    int64_t len = H5Sget_simple_extent_npoints(s);
    float *v = malloc(sizeof *v * (size_t)len);
    herr_t e = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Sclose(s);
    H5Dclose(d);
    snprintf(p->name[p->n], sizeof p->name[0], "%s", name);
    p->len[p->n] = len;
    p->v[p->n++] = v;
    return e;
}

/* the datasets of path's /model group, in name order */
static params read_params(const char *path) {
    params p = {0};
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) fail_msg("cannot open %s", path);
    hid_t g = H5Gopen2(f, "model", H5P_DEFAULT);
    herr_t e = H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, add_dataset, &p);
    H5Gclose(g);
    H5Fclose(f);
    if (e < 0 || p.n == 0) fail_msg("cannot read the parameters of %s", path);
    return p;
}

static void params_free(params *p) {
    for (int i = 0; i < p->n; i++) free(p->v[i]);
}

static void assert_same_layout(const params *a, const params *b) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_string_equal(a->name[i], b->name[i]);
        assert_int_equal(a->len[i], b->len[i]);
    }
}

/* The largest difference between a and b (the same model's), leaving out the key biases: the
 * middle third of each in_proj_bias, which adds one number to all of a query's scores and so
 * has a gradient of 0 but for rounding; Adam divides that noise by its own size and moves the
 * bias a whole learning-rate step either way */
static double largest_difference(const params *a, const params *b, const char **where) {
    assert_same_layout(a, b);
    double worst = 0;
    for (int i = 0; i < a->n; i++) {
        int64_t third = a->len[i] / 3;
        bool key_bias = strstr(a->name[i], "in_proj_bias") != NULL;
        for (int64_t j = 0; j < a->len[i]; j++) {
            if (key_bias && j >= third && j < 2 * third) continue;
            double d = fabs((double)a->v[i][j] - b->v[i][j]);
            if (!(d <= worst)) worst = d, *where = a->name[i];
        }
    }
    return worst;
}

static void assert_bit_identical(const params *a, const params *b) {
    assert_same_layout(a, b);
    for (int i = 0; i < a->n; i++)
        if (memcmp(a->v[i], b->v[i], sizeof(float) * (size_t)a->len[i]) != 0)
            fail_msg("%s differs", a->name[i]);
}

static const char *path_in(const char *dir, const char *name) {
    static char buf[8][600];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tt_in_dir(dir), name);
    return buf[k];
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* A run's parameters after 20 steps: --batch 32, --accum 1 and 4 micro-batches of 8 differ by
 * float rounding alone: ≤ 3e-8 on weights of magnitude ≤ 1 (one unit in the last place is
 * 6e-8 at 1). The bound, 2.5e-7, is 4 such units; summing the micro-batches' mean losses
 * unweighted (a mean of means) moves weights by 5e-5, and 20 steps of batches of 8 by 5e-4. */
#define ROUNDING 2.5e-7

static void test_four_micro_batches_train_as_one_batch_four_times_larger(void **state) {
    (void)state;
    const char *common[] = {"train", TINY_ARGS, "--steps", "20", "--eval-every", "20", NULL};
    const char *runs[3][6] = {{"--batch", "32", "--out", tt_in_dir("big")},
                              {"--batch", "8", "--accum", "4", "--out", tt_in_dir("accum")},
                              {"--batch", "8", "--out", tt_in_dir("small")}};
    for (int r = 0; r < 3; r++) {
        const char *args[64];
        int n = 0;
        for (int i = 0; common[i]; i++) args[n++] = common[i];
        for (int i = 0; i < 6 && runs[r][i]; i++) args[n++] = runs[r][i];
        args[n] = NULL;
        assert_status(tt_run(NULL, args), 0);
        assert_contains(tt.err, "20 steps in");
    }
    params big = read_params(path_in("big", "last.h5")), accum = read_params(path_in("accum", "last.h5")),
           small = read_params(path_in("small", "last.h5"));
    const char *where = "";
    double d = largest_difference(&big, &accum, &where);
    print_message("--batch 32 vs --batch 8 --accum 4: largest difference %.3g (%s)\n", d, where);
    assert_true(d <= ROUNDING);
    d = largest_difference(&big, &small, &where);
    print_message("--batch 32 vs --batch 8: largest difference %.3g (%s)\n", d, where);
    assert_true(d > 100 * ROUNDING); /* the comparison sees a change of the data */
    assert_false(exists(path_in("accum", "step-20.h5"))); /* no --keep-last, no step files */
    params_free(&big);
    params_free(&accum);
    params_free(&small);
}

static void test_resume_keeps_accum_and_refuses_another(void **state) {
    (void)state;
    const char *straight = tt_in_dir("straight"), *resumed = tt_in_dir("resumed");
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--accum", "3", "--steps", "12", "--eval-every", "6",
                      "--out", straight), 0);
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--accum", "3", "--steps", "6", "--eval-every", "6",
                      "--out", resumed), 0);
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--accum", "2", "--steps", "12", "--out", resumed,
                      "--resume"), 1);
    assert_contains(tt.err, "--accum 2 differs from the checkpoint's 3");
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--steps", "12", "--eval-every", "6", "--out", resumed,
                      "--resume"), 0);
    assert_contains(tt.err, "at step 6");
    params a = read_params(path_in("straight", "last.h5")), b = read_params(path_in("resumed", "last.h5"));
    assert_bit_identical(&a, &b); /* resumed with 3 micro-batches a step: the straight run exactly */
    params_free(&a);
    params_free(&b);
}

/* the run --keep-last tests and the averages share: evaluations at 5, 10, 15, 20 */
static const char *keep_run(void) {
    static bool done;
    const char *out = tt_in_dir("keep");
    if (done) return out;
    mkdir(out, 0777);
    tt_write_text(path_in("keep", "step-30.h5"), "a later step's file, from before a resume");
    tt_write_text(path_in("keep", "step-007.h5"), "not a name train writes");
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--steps", "20", "--eval-every", "5", "--save-every", "10",
                      "--keep-last", "2", "--out", out), 0);
    done = true;
    return out;
}

static void test_keep_last_keeps_the_newest_step_files(void **state) {
    (void)state;
    keep_run();
    assert_false(exists(path_in("keep", "step-5.h5")));
    assert_false(exists(path_in("keep", "step-10.h5")));
    assert_true(exists(path_in("keep", "step-15.h5")));
    assert_true(exists(path_in("keep", "step-20.h5")));
    assert_true(exists(path_in("keep", "step-30.h5")));  /* later than the run: left to be overwritten */
    assert_true(exists(path_in("keep", "step-007.h5"))); /* not a step file */
    params last = read_params(path_in("keep", "last.h5")), step = read_params(path_in("keep", "step-20.h5"));
    assert_bit_identical(&last, &step);
    params_free(&last);
    params_free(&step);
    /* a save that fails (a directory where step-10.h5 goes) stops the run and deletes nothing */
    const char *out = tt_in_dir("keepfail");
    mkdir(out, 0777);
    mkdir(path_in("keepfail", "step-10.h5"), 0777);
    assert_status(RUN("train", TINY_ARGS, "--batch", "8", "--steps", "20", "--eval-every", "5", "--keep-last", "1",
                      "--out", out), 1);
    assert_contains(tt.err, "step-10.h5");
    assert_true(exists(path_in("keepfail", "step-5.h5")));
    assert_false(exists(path_in("keepfail", "step-15.h5")));
}

static void test_average_is_the_mean_and_translates(void **state) {
    (void)state;
    keep_run();
    const char *avg = path_in("keep", "avg.h5");
    assert_status(RUN("average", "--out", avg, path_in("keep", "step-15.h5"), path_in("keep", "step-20.h5")), 0);
    assert_contains(tt.out, "averaged 2 checkpoints (steps 15 20)");
    params a = read_params(path_in("keep", "step-15.h5")), b = read_params(path_in("keep", "step-20.h5")),
           m = read_params(avg);
    assert_same_layout(&a, &m);
    for (int i = 0; i < a.n; i++)
        for (int64_t j = 0; j < a.len[i]; j++) {
            float want = (float)(((double)a.v[i][j] + b.v[i][j]) / 2); /* exact in double, rounded once */
            if (m.v[i][j] != want) fail_msg("%s[%lld]: %.9g, expected %.9g", a.name[i], (long long)j, m.v[i][j], want);
        }
    assert_status(RUN("translate", "--checkpoint", avg, "one hundred and two"), 0);
    assert_true(strlen(tt.out) > 1);
    tt_write_text(tt_in_dir("two.tsv"), "one hundred and two\tcent deux\nseven\tsept\n");
    assert_status(RUN("eval", "--checkpoint", avg, "--data", tt_in_dir("two.tsv")), 0);
    assert_contains(tt.out, "2 pairs");
    /* three copies of one checkpoint: that checkpoint, bit for bit */
    const char *copy = path_in("keep", "copies.h5"), *s20 = path_in("keep", "step-20.h5");
    assert_status(RUN("average", "--out", copy, s20, s20, s20), 0);
    params c = read_params(copy);
    assert_bit_identical(&c, &b);
    params_free(&a);
    params_free(&b);
    params_free(&m);
    params_free(&c);
}

static void test_average_refuses_other_models_in_one_line(void **state) {
    (void)state;
    keep_run();
    const char *s20 = path_in("keep", "step-20.h5"), *out = path_in("keep", "refused.h5");
    assert_status(RUN("train", TINY_ARGS, "--d-model", "8", "--batch", "8", "--steps", "1", "--eval-every", "1",
                      "--out", tt_in_dir("narrow")), 0);
    tt_write_text(tt_in_dir("few.tsv"), "one\tun\ntwo\tdeux\nthree\ttrois\nfour\tquatre\n");
    const char *few = tt_in_dir("few.tsv");
    assert_status(RUN("train", "--train", few, "--heldout", "0.25", "--d-model", "16", "--heads", "2", "--layers", "1",
                      "--ff", "32", "--samples", "0", "--tokenizer", "word", "--steps", "1", "--eval-every", "1",
                      "--out", tt_in_dir("few")), 0);
    tt_write_text(out, "what was here before");
    struct {
        const char *other, *says;
    } cases[] = {{path_in("narrow", "last.h5"), "d_model differ (16 and 8)"},
                 {path_in("few", "last.h5"), "src_vocab differ"}};
    for (int k = 0; k < 2; k++) {
        assert_status(RUN("average", "--out", out, s20, cases[k].other), 1);
        assert_contains(tt.err, cases[k].says);
        assert_int_equal(tt_count(tt.err, "\n"), 1);
        char *kept = tt_read_file(out, NULL);
        assert_string_equal(kept, "what was here before");
        free(kept);
    }
    assert_status(RUN("average", "--out", out, s20, path_in("keep", "missing.h5")), 1);
    assert_contains(tt.err, "missing.h5");
    assert_int_equal(tt_count(tt.err, "\n"), 1);
    assert_status(RUN("average", "-h"), 0);
    assert_contains(tt.out, "usage: attograd-translate average --out FILE CKPT...");
    assert_status(RUN("average", s20), 2);
    assert_contains(tt.err, "--out FILE is required");
    assert_status(RUN("average", "--out", out), 2);
    assert_contains(tt.err, "no checkpoints to average");
}

/* ---- under mpirun ---- */

static void test_accum_on_two_ranks_trains_as_one_process(void **state) {
    (void)state;
    const char *bin = tt.bin;
    assert_status(RUN("train", TINY_ARGS, "--batch", "32", "--steps", "20", "--eval-every", "20", "--out",
                      tt_in_dir("one")), 0);
    tt.bin = getenv("AG_MPIRUN");
    assert_non_null(tt.bin);
    int status = RUN("-np", "2", "--oversubscribe", "--allow-run-as-root", bin, "train", TINY_ARGS, "--batch", "8",
                     "--accum", "4", "--steps", "20", "--eval-every", "20", "--out", tt_in_dir("two"));
    tt.bin = bin;
    assert_status(status, 0);
    params one = read_params(path_in("one", "last.h5")), two = read_params(path_in("two", "last.h5"));
    const char *where = "";
    double d = largest_difference(&one, &two, &where);
    print_message("2 ranks x --batch 8 --accum 4 vs 1 process x --batch 32: largest difference %.3g (%s)\n", d, where);
    assert_true(d <= ROUNDING);
    params_free(&one);
    params_free(&two);
}

/* the first 2000 pairs of the shipped corpus: enough for 20 steps of 32 pairs */
static int group_setup(void **state) {
    const char *root = getenv("AG_SOURCE_ROOT");
    char shipped[512], line[1024];
    snprintf(shipped, sizeof shipped, "%s/examples/translate/data/num-en-fr/train.tsv", root ? root : ".");
    if (tt_begin("accum") || tu_setup(state)) return -1;
    snprintf(corpus, sizeof corpus, "%s", tt_in_dir("train.tsv"));
    FILE *in = fopen(shipped, "r"), *out = fopen(corpus, "w");
    for (int n = 0; in && out && n < 2000 && fgets(line, sizeof line, in); n++) fputs(line, out);
    bool ok = in && out && !ferror(in);
    if (in) fclose(in);
    if (out) ok &= fclose(out) == 0;
    return ok ? 0 : -1;
}

static int group_teardown(void **state) {
    tt_end();
    return tu_teardown(state);
}

int main(int argc, char **argv) {
    const struct CMUnitTest local[] = {
        cmocka_unit_test(test_four_micro_batches_train_as_one_batch_four_times_larger),
        cmocka_unit_test(test_resume_keeps_accum_and_refuses_another),
        cmocka_unit_test(test_keep_last_keeps_the_newest_step_files),
        cmocka_unit_test(test_average_is_the_mean_and_translates),
        cmocka_unit_test(test_average_refuses_other_models_in_one_line),
    };
    const struct CMUnitTest dist[] = {cmocka_unit_test(test_accum_on_two_ranks_trains_as_one_process)};
    if (argc > 1 && strcmp(argv[1], "dist") == 0) return cmocka_run_group_tests(dist, group_setup, group_teardown);
    return cmocka_run_group_tests(local, group_setup, group_teardown);
}
