/* SentencePiece subwords in attograd-translate: the tokenizer is lossless on every shipped
 * corpus, deterministic, travels inside the checkpoint, exact match holds whatever pieces spell
 * the reference, and the program's flags and warnings around vocabularies (--tokenizer,
 * --spm-model, --max-len, the vocabulary warning). */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "id_scores.h"
#include "subword.h"
#include "test_util.h"
#include "translate_run.h"

#define TINY "--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "32", "--batch", "8", "--max-eval", "8", \
             "--threads", "1", "--seed", "1", "--samples", "2"

/* ---- files and runs ---- */

static ag_train_state load_state(const char *path) {
    ag_train_state st = {0};
    char msg[512];
    if (ag_checkpoint_load(path, NULL, NULL, &st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) fail_msg("%s", msg);
    return st;
}

static const char *toy(void) {
    static const char *p;
    if (!p) tu_write_toy_corpus(p = tt_in_dir("toy.tsv"), 40, 12345);
    return p;
}

/* ---- the tokenizer ---- */

/* decode(encode(s)) of vocabulary v */
static char *round_trip(const tr_vocab *v, const char *s, bool *unk) {
    int n = tr_vocab_encode(v, s, TR_SPM, NULL, 0);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(n + 1));
    assert_int_equal(tr_vocab_encode(v, s, TR_SPM, ids, n), n);
    *unk = false;
    for (int i = 0; i < n; i++) *unk |= ids[i] == TR_UNK;
    ids[n] = TR_EOS;
    size_t len = tr_vocab_decode(v, ids, n + 1, TR_SPM, NULL, 0);
    char *out = malloc(len + 1);
    assert_int_equal(tr_vocab_decode(v, ids, n + 1, TR_SPM, out, len + 1), len);
    free(ids);
    return out;
}

static int64_t check_lines(const tr_vocab *src, const tr_vocab *tgt, const tr_corpus *c) {
    for (int64_t i = 0; i < c->n; i++)
        for (int side = 0; side < 2; side++) {
            const char *s = side ? c->tgt[i] : c->src[i];
            bool unk;
            char *back = round_trip(side ? tgt : src, s, &unk);
            if (strcmp(back, s) != 0 || unk)
                fail_msg("%s:%lld: '%s' comes back as '%s'%s", c->path, (long long)c->line[i], s, back,
                         unk ? " with <unk>" : "");
            free(back);
        }
    return c->n;
}

static void test_spm_round_trip_is_exact_on_every_line_of_every_shipped_corpus(void **state) {
    const char *root = getenv("AG_SOURCE_ROOT");
    assert_non_null(root);
    char data[1024];
    snprintf(data, sizeof data, "%s/examples/translate/data", root);
    DIR *d = opendir(data);
    assert_non_null(d);
    int corpora = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char train[2048], test[2048], err[TR_ERR_SIZE];
        snprintf(train, sizeof train, "%s/%s/train.tsv", data, e->d_name);
        snprintf(test, sizeof test, "%s/%s/test.tsv", data, e->d_name);
        tr_corpus tc = {0}, sc = {0};
        tr_read_opts strict = {.strict = true};
        if (tr_corpus_read(&tc, train, &strict, err, sizeof err) || tr_corpus_read(&sc, test, &strict, err, sizeof err))
            fail_msg("%s", err);
        for (int type = 0; type < 2; type++) {
            tr_subword_opts o = {type ? "bpe" : "unigram", 0};
            tr_vocab src, tgt;
            if (tr_vocab_train_spm(&src, &tc, TR_SIDE_SRC, &o, err, sizeof err) ||
                tr_vocab_train_spm(&tgt, &tc, TR_SIDE_TGT, &o, err, sizeof err))
                fail_msg("%s", err);
            assert_int_equal(check_lines(&src, &tgt, &tc) + check_lines(&src, &tgt, &sc), tc.n + sc.n);
            /* text the corpus never shows: whitespace kept as it is, unseen characters as bytes */
            const char *odd[] = {"", " ", "  two  spaces  ", "\tтабуляция\t", "漢字 ☃ 🙂 é", "x\u00a0y", NULL};
            for (int k = 0; odd[k]; k++) {
                bool unk;
                char *back = round_trip(&tgt, odd[k], &unk);
                assert_string_equal(back, odd[k]);
                assert_false(unk);
                free(back);
            }
            tr_vocab_free(&src);
            tr_vocab_free(&tgt);
        }
        tr_corpus_free(&tc);
        tr_corpus_free(&sc);
        corpora++;
    }
    closedir(d);
    assert_true(corpora >= 1);
}

static void test_spm_training_gives_the_same_model_bytes_every_time(void **state) {
    char err[TR_ERR_SIZE];
    tr_corpus c = {0};
    if (tr_corpus_read(&c, toy(), NULL, err, sizeof err)) fail_msg("%s", err);
    tr_subword_opts o = {"unigram", 0};
    tr_vocab a, b, other;
    assert_int_equal(tr_vocab_train_spm(&a, &c, TR_SIDE_TGT, &o, err, sizeof err), 0);
    assert_int_equal(tr_vocab_train_spm(&b, &c, TR_SIDE_TGT, &o, err, sizeof err), 0);
    assert_int_equal(tr_vocab_train_spm(&other, &c, TR_SIDE_SRC, &o, err, sizeof err), 0);
    assert_int_equal(a.spm_len, b.spm_len);
    assert_memory_equal(a.spm_model, b.spm_model, a.spm_len);
    /* the comparison can fail: the other side's model differs */
    assert_true(a.spm_len != other.spm_len || memcmp(a.spm_model, other.spm_model, a.spm_len) != 0);
    /* the specials sit at data.h's ids */
    assert_string_equal(a.token[TR_PAD], "<pad>");
    assert_string_equal(a.token[TR_EOS], "<eos>");
    assert_string_equal(a.token[TR_UNK], "<unk>");
    /* a vocabulary size below what the corpus needs is an error naming the side and the size */
    tr_vocab small;
    tr_subword_opts tiny = {"unigram", 20};
    assert_int_equal(tr_vocab_train_spm(&small, &c, TR_SIDE_SRC, &tiny, err, sizeof err), -1);
    assert_non_null(strstr(err, "source side, vocabulary size 20"));
    tr_vocab_free(&a);
    tr_vocab_free(&b);
    tr_vocab_free(&other);
    tr_corpus_free(&c);
}

/* whether one hypothesis counts as an exact match of one reference */
static bool exact_of(const tr_vocab *v, const int64_t *hyp, int hn, const int64_t *ref, int rn, const char *text) {
    tr_id_scores sc;
    assert_true(tr_id_scores_init(&sc));
    assert_true(tr_id_scores_add(&sc, v, TR_SPM, hyp, hn, ref, rn, text));
    double e = tr_scores_exact(&sc.s);
    assert_true(e == 0.0 || e == 1.0);
    tr_id_scores_free(&sc);
    return e == 1.0;
}

/* ids spelling the same text as ids[0..n) with one piece per character (each character of the
 * vocabulary is a piece); the count */
static int one_piece_per_character(const tr_vocab *v, const int64_t *ids, int n, int64_t *out, int max) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        const char *p = v->token[ids[i]];
        for (size_t at = 0, len; p[at]; at += len) {
            len = 1;
            while ((p[at + len] & 0xC0) == 0x80) len++;
            assert_true(k < max);
            out[k] = tr_vocab_id(v, p + at, (int)len);
            assert_int_not_equal(out[k++], TR_UNK);
        }
    }
    return k;
}

static void test_exact_match_is_the_reference_text_whatever_the_pieces(void **state) {
    char err[TR_ERR_SIZE];
    tr_corpus c = {0};
    if (tr_corpus_read(&c, toy(), NULL, err, sizeof err)) fail_msg("%s", err);
    tr_subword_opts o = {"unigram", 0};
    tr_vocab v;
    assert_int_equal(tr_vocab_train_spm(&v, &c, TR_SIDE_TGT, &o, err, sizeof err), 0);
    int64_t ref[64], alt[256];
    int rn = tr_vocab_encode(&v, c.tgt[0], TR_SPM, ref, 64);
    assert_in_range(rn, 1, 64);
    int an = one_piece_per_character(&v, ref, rn, alt, 256);
    assert_true(an > rn); /* another spelling of the same text: a model may well produce it */
    assert_true(exact_of(&v, ref, rn, ref, rn, c.tgt[0]));
    assert_true(exact_of(&v, alt, an, ref, rn, c.tgt[0]));
    assert_true(exact_of(&v, alt, an, ref, rn, NULL));
    /* one character less is wrong */
    assert_false(exact_of(&v, alt, an - 1, ref, rn, c.tgt[0]));
    /* a reference with <unk>: its text ends in " ⁇ ", which a hypothesis holding <unk>
     * reads back as too; only the same ids match it */
    ref[rn - 1] = TR_UNK;
    an = one_piece_per_character(&v, ref, rn - 1, alt, 256);
    alt[an++] = TR_UNK;
    assert_true(an > rn);
    assert_true(exact_of(&v, ref, rn, ref, rn, NULL));
    assert_false(exact_of(&v, alt, an, ref, rn, NULL));
    tr_vocab_free(&v);
    tr_corpus_free(&c);
}

static void test_base64_round_trips_every_byte_and_rejects_other_text(void **state) {
    unsigned char bytes[300];
    for (int i = 0; i < 300; i++) bytes[i] = (unsigned char)(i * 7 + 3);
    for (size_t len = 0; len <= 300; len += (len < 8 ? 1 : 97)) {
        char *s = tr_base64_encode(bytes, len), *back;
        size_t n;
        assert_int_equal(strlen(s), 4 * ((len + 2) / 3));
        assert_int_equal(tr_base64_decode(s, &back, &n), 0);
        assert_int_equal(n, len);
        if (len) assert_memory_equal(back, bytes, len);
        free(s);
        free(back);
    }
    char *back;
    size_t n;
    char *s = tr_base64_encode("Man", 3);
    assert_string_equal(s, "TWFu"); /* RFC 4648's example */
    free(s);
    assert_int_equal(tr_base64_decode("TWE=", &back, &n), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(back, "Ma", 2);
    free(back);
    assert_int_equal(tr_base64_decode("TW=u", &back, &n), -1);
    assert_int_equal(tr_base64_decode("TWF", &back, &n), -1);
    assert_int_equal(tr_base64_decode("TW!u", &back, &n), -1);
}

/* ---- the program ---- */

/* the first sample line "  SRC  ->  HYP..." of text: SRC and HYP into src, hyp */
static void first_sample(const char *text, char *src, char *hyp, size_t n) {
    const char *p = strstr(text, "\n  ");
    assert_non_null(p);
    p += 3;
    const char *arrow = strstr(p, "  ->  "), *end = strchr(p, '\n');
    assert_non_null(arrow);
    snprintf(src, n, "%.*s", (int)(arrow - p), p);
    const char *h = arrow + 6, *exp = strstr(h, "   (expected: ");
    if (exp && exp < end) end = exp;
    snprintf(hyp, n, "%.*s", (int)(end - h), h);
}

static void test_the_checkpoint_carries_the_subword_model_to_translate_and_eval(void **state) {
    const char *out = tt_in_dir("run-spm"), *test = tt_in_dir("toy-test.tsv");
    tu_write_toy_corpus(test, 12, 777);
    assert_status(RUN("train", "--train", toy(), "--test", test, "--out", out, TINY, "--steps", "60",
                      "--eval-every", "60"), 0);
    assert_contains(tt.err, "SentencePiece unigram vocabularies of");
    char *train_out = strdup(tt.out);
    const char *ck = tt_in_dir("run-spm/best.h5");
    ag_train_state st = load_state(ck);
    assert_string_equal(ag_config_get_string(&st, "tokens"), "spm");
    assert_non_null(ag_config_get_string(&st, "src_spm"));
    assert_non_null(ag_config_get_string(&st, "tgt_spm"));
    assert_null(ag_config_get_string(&st, "src_vocab"));
    ag_train_state_clear(&st);
    /* the test samples training printed, translated again by a fresh process with the training
     * file gone: the tokenizers come from the checkpoint */
    char src[256], hyp[256], moved[600];
    const char *t = strstr(train_out, "best checkpoint:");
    assert_non_null(t);
    first_sample(t, src, hyp, sizeof src);
    snprintf(moved, sizeof moved, "%s.away", toy());
    assert_int_equal(rename(toy(), moved), 0);
    int status = RUN("translate", "--checkpoint", ck, src);
    assert_int_equal(rename(moved, toy()), 0);
    assert_status(status, 0);
    char want[300];
    snprintf(want, sizeof want, "%s\n", hyp);
    assert_string_equal(tt.out, want);
    /* eval reports the exact match training reported on the same file */
    double exact_train, exact_eval, a, b;
    const char *line = strstr(train_out, "test loss ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "test loss %lf, greedy exact match %lf%%, BLEU %lf", &a, &exact_train, &b), 3);
    assert_status(RUN("eval", "--checkpoint", ck, "--data", test), 0);
    line = strstr(tt.out, "greedy exact match ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "greedy exact match %lf%%", &exact_eval), 1);
    assert_true(exact_eval == exact_train);
    free(train_out);
}

/* the bytes of config key (base64) of checkpoint path into file */
static void export_model(const char *path, const char *key, const char *file) {
    ag_train_state st = load_state(path);
    char *bytes;
    size_t len;
    assert_int_equal(tr_base64_decode(ag_config_get_string(&st, key), &bytes, &len), 0);
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    free(bytes);
    ag_train_state_clear(&st);
}

static void test_spm_model_flag_uses_a_model_trained_elsewhere_shared_or_per_side(void **state) {
    const char *base = tt_in_dir("run-base");
    assert_status(RUN("train", "--train", toy(), "--out", base, TINY, "--steps", "2", "--eval-every", "2",
                      "--spm-type", "bpe", "--vocab-size", "280"), 0);
    assert_contains(tt.err, "SentencePiece bpe vocabularies of");
    const char *ck = tt_in_dir("run-base/last.h5"), *sm = tt_in_dir("src.model"), *tm = tt_in_dir("tgt.model");
    export_model(ck, "src_spm", sm);
    export_model(ck, "tgt_spm", tm);
    char both[1100];
    snprintf(both, sizeof both, "%s,%s", sm, tm);
    for (int shared = 0; shared < 2; shared++) {
        const char *out = tt_in_dir(shared ? "run-shared" : "run-sides");
        assert_status(RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every", "2",
                          "--spm-model", shared ? tm : both), 0);
        assert_contains(tt.err, "SentencePiece models ");
        char ckpt[600];
        snprintf(ckpt, sizeof ckpt, "%s/last.h5", out);
        ag_train_state a = load_state(ck), b = load_state(ckpt);
        assert_string_equal(ag_config_get_string(&a, "tgt_spm"), ag_config_get_string(&b, "tgt_spm"));
        assert_string_equal(ag_config_get_string(&a, shared ? "tgt_spm" : "src_spm"),
                            ag_config_get_string(&b, "src_spm"));
        ag_train_state_clear(&a);
        ag_train_state_clear(&b);
    }
    /* a file that is not a model: one line naming it */
    assert_status(RUN("train", "--train", toy(), "--out", tt_in_dir("run-bad"), TINY, "--steps", "2", "--spm-model",
                      toy()), 1);
    assert_contains(tt.err, toy());
    assert_contains(tt.err, "not a SentencePiece model");
}

static void test_word_and_char_tokenizers_still_train_and_translate(void **state) {
    const char *const modes[][3] = {{"--tokenizer", "word", "words"}, {"--tokenizer", "char", "chars"},
                                    {"--chars", NULL, "chars"}};
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "run-mode%d", k);
        const char *out = tt_in_dir(name);
        int status = modes[k][1] ? RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every",
                                       "2", modes[k][0], modes[k][1])
                                 : RUN("train", "--train", toy(), "--out", out, TINY, "--steps", "2", "--eval-every",
                                       "2", modes[k][0]);
        assert_status(status, 0);
        char ck[600];
        snprintf(ck, sizeof ck, "%s/last.h5", out);
        ag_train_state st = load_state(ck);
        assert_string_equal(ag_config_get_string(&st, "tokens"), modes[k][2]);
        assert_non_null(ag_config_get_string(&st, "src_vocab"));
        assert_null(ag_config_get_string(&st, "src_spm"));
        ag_train_state_clear(&st);
        assert_status(RUN("translate", "--checkpoint", ck, "a b c"), 0);
        assert_true(strlen(tt.out) >= 1 && tt.out[strlen(tt.out) - 1] == '\n');
    }
    assert_status(RUN("train", "--train", toy(), "--out", tt_in_dir("run-x"), "--tokenizer", "wordz"), 2);
    assert_contains(tt.err, "--tokenizer is spm, word or char");
}

static void test_max_len_says_how_many_pairs_it_leaves_out_and_the_flag_that_keeps_them(void **state) {
    /* 30 pairs: 20 of 3 words, 10 of 9 words (10 tokens with <eos>) */
    char text[4096], *p = text;
    for (int i = 0; i < 30; i++)
        p += sprintf(p, i % 3 == 2 ? "a b c d e f a b c\tA B C D E F A B C\n" : "a b c\tC B A\n");
    const char *path = tt_in_dir("lengths.tsv");
    tt_write_text(path, text);
    assert_status(RUN("train", "--train", path, "--out", tt_in_dir("run-len"), TINY, "--steps", "2", "--eval-every",
                      "2", "--tokenizer", "word", "--max-len", "6", "--heldout", "0.1"),
                  0);
    assert_contains(tt.err, "10 of 30 pairs (33.3%) have a side longer than --max-len 6 tokens and are left out "
                              "of training; --max-len 10 keeps them all");
}

static void test_a_vocabulary_of_words_seen_once_is_warned_about_naming_the_fix(void **state) {
    /* numbers written as one word: every target word is new */
    char *text = malloc(1 << 16), *p = text;
    static const char *ones[] = {"null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"};
    for (int i = 0; i < 300; i++)
        p += sprintf(p, "%d %d %d\t%shundert%sund%s\n", i / 100 + 1, i / 10 % 10, i % 10, ones[i / 100 + 1],
                     ones[i % 10], ones[i / 10 % 10]);
    const char *path = tt_in_dir("onceword.tsv"), *dev = tt_in_dir("onceword-dev.tsv");
    tt_write_text(path, text);
    tt_write_text(dev, "7 7 7\tsiebenhundertsiebenundsieben\n8 8 8\tachthundertachtundacht\n");
    free(text);
    assert_status(RUN("train", "--train", path, "--dev", dev, "--out", tt_in_dir("run-once"), TINY, "--steps", "2",
                      "--eval-every", "2", "--tokenizer", "word"), 0);
    assert_contains(tt.err, "warning: 300 of the 300 target words (100%) occur once");
    assert_contains(tt.err, "--tokenizer spm");
    assert_contains(tt.err, "warning: 2 of the 2 target tokens (100%) of the dev pairs are unknown");
    /* subwords: neither warning */
    assert_status(RUN("train", "--train", path, "--dev", dev, "--out", tt_in_dir("run-once-spm"), TINY, "--steps", "2",
                      "--eval-every", "2"), 0);
    assert_null(strstr(tt.err, "occur once"));
    assert_null(strstr(tt.err, "are unknown"));
}

static int group_setup(void **state) { return tt_begin("translate-spm") != 0 ? -1 : tu_setup(state); }

static int group_teardown(void **state) {
    tt_end();
    return tu_teardown(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_round_trip_is_exact_on_every_line_of_every_shipped_corpus),
        cmocka_unit_test(test_spm_training_gives_the_same_model_bytes_every_time),
        cmocka_unit_test(test_exact_match_is_the_reference_text_whatever_the_pieces),
        cmocka_unit_test(test_base64_round_trips_every_byte_and_rejects_other_text),
        cmocka_unit_test(test_the_checkpoint_carries_the_subword_model_to_translate_and_eval),
        cmocka_unit_test(test_spm_model_flag_uses_a_model_trained_elsewhere_shared_or_per_side),
        cmocka_unit_test(test_word_and_char_tokenizers_still_train_and_translate),
        cmocka_unit_test(test_max_len_says_how_many_pairs_it_leaves_out_and_the_flag_that_keeps_them),
        cmocka_unit_test(test_a_vocabulary_of_words_seen_once_is_warned_about_naming_the_fix),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
