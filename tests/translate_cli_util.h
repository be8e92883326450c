/* What the attograd-translate end-to-end tests (tests/test_translate_cli_*.c) share: the tiny
 * model options, a toy corpus and trained runs of each model kind made on first use, and the
 * cmocka group setup and teardown that make and remove their directory (translate_run.h). */
#ifndef AG_TESTS_TRANSLATE_CLI_UTIL_H
#define AG_TESTS_TRANSLATE_CLI_UTIL_H
#include <stdbool.h>

#include "attograd.h"

/* a model small enough that a run takes a fraction of a second, and the data options the
 * assertions count on (not the defaults, which may change; word tokens: test_translate_spm
 * covers subwords) */
#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--hidden", "16", "--batch", "8", \
             "--max-eval", "8", "--threads", "1", "--heldout", "0.05", "--max-len", "64", "--min-count", "1", \
             "--seed", "1", "--tokenizer", "word"

bool exists(const char *path);

/* the toy corpus (tu_write_toy_corpus: 40 pairs), written on first use */
const char *toy(void);
/* "transformer", "gru", "lstm", "rnn" -> 0..3 */
int kind_slot(const char *kind);
/* out dir of a finished 6-step run of kind ("transformer", "gru", "lstm" or "rnn"), made on
 * first use; trained_log[kind_slot(kind)] holds its stdout and stderr */
const char *trained_run(const char *kind);
extern char *trained_log[4][2];
/* the checkpoint "last" or "best" of trained_run(kind) */
const char *ckpt_of(const char *kind, const char *which);
/* the training state of a checkpoint that must load */
ag_train_state load_state(const char *path);

/* the lines eval prints for data of pairs pairs with search "greedy" or "beam": "<data>: N
 * pairs, loss L, greedy|beam exact match X%, BLEU Y, chrF2 Z", then sacreBLEU's BLEU and chrF2
 * lines with their signatures */
void check_eval_output(const char *data, int pairs, const char *search);

/* tt_begin("translate-cli"), HDF5's error printing off; tt_end and what the runs kept freed */
int cli_group_setup(void **state);
int cli_group_teardown(void **state);
#endif
