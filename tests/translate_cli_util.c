/* What the attograd-translate end-to-end tests share (tests/translate_cli_util.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>

#include "metrics.h"
#include "test_util.h"
#include "translate_cli_util.h"
#include "translate_run.h"

char *trained_log[4][2]; /* stdout and stderr of trained_run(kind), by kind_slot */

bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

int kind_slot(const char *kind) {
    const char *kinds[] = {"transformer", "gru", "lstm", "rnn"};
    int k = 0;
    while (k < 3 && strcmp(kind, kinds[k]) != 0) k++;
    return k;
}

const char *trained_run(const char *kind) {
    static char paths[4][512];
    char *p = paths[kind_slot(kind)];
    if (p[0]) return p;
    snprintf(p, sizeof paths[0], "%s/run-%s", tt.dir, kind);
    int st = RUN("train", "--train", toy(), "--out", p, "--model", kind, TINY, "--steps", "6", "--eval-every", "3",
                 "--save-every", "3");
    assert_status(st, 0);
    trained_log[kind_slot(kind)][0] = strdup(tt.out);
    trained_log[kind_slot(kind)][1] = strdup(tt.err);
    return p;
}

const char *ckpt_of(const char *kind, const char *which) {
    char name[64];
    snprintf(name, sizeof name, "run-%s/%s.h5", kind, which);
    return tt_in_dir(name);
}

int cli_group_setup(void **state) {
    if (tt_begin("translate-cli") != 0) return -1;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* a missing dataset is a test failure, not a stack dump */
    return 0;
}

int cli_group_teardown(void **state) {
    tt_end();
    for (int i = 0; i < 8; i++) free(trained_log[i / 2][i % 2]);
    H5close();
    return 0;
}

ag_train_state load_state(const char *path) {
    ag_train_state st = {0};
    char msg[1024];
    ag_checkpoint_status s = ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg);
    if (s != AG_CHECKPOINT_OK) fail_msg("%s does not load: %s", path, msg);
    return st;
}

/* the lines eval prints: "<data>: N pairs, loss L, greedy|beam exact match X%, BLEU Y, chrF2 Z",
 * then sacreBLEU's BLEU and chrF2 lines with their signatures */
void check_eval_output(const char *data, int pairs, const char *search) {
    char head[600], mode[16];
    snprintf(head, sizeof head, "%s: ", data);
    if (strncmp(tt.out, head, strlen(head)) != 0)
        fail_msg("eval printed '%s', expected it to start with '%s'", tt.out, head);
    int n;
    double loss, exact, bleu, chrf;
    char end;
    int got = sscanf(tt.out + strlen(head), "%d pairs, loss %lf, %15s exact match %lf%%, BLEU %lf, chrF2 %lf%c", &n,
                     &loss, mode, &exact, &bleu, &chrf, &end);
    if (got != 7 || end != '\n') fail_msg("eval printed '%s'", tt.out);
    assert_int_equal(n, pairs);
    assert_string_equal(mode, search);
    assert_true(loss > 0 && isfinite(loss));
    assert_true(exact >= 0 && exact <= 100);
    assert_true(bleu >= 0 && bleu <= 100);
    assert_true(chrf >= 0 && chrf <= 100);
    assert_int_equal(tt_count(tt.out, "\n"), 3);
    /* sacreBLEU's lines say the same numbers */
    char b[64], c[64];
    snprintf(b, sizeof b, "|version:%s = %.2f ", TR_SACREBLEU_VERSION, bleu);
    snprintf(c, sizeof c, "|version:%s = %.2f\n", TR_SACREBLEU_VERSION, chrf);
    assert_contains(tt.out, "\n  BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|");
    assert_contains(tt.out, b);
    assert_contains(tt.out, "\nchrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|");
    assert_contains(tt.out, c);
}
