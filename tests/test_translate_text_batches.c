/* attograd-translate support code: vocabularies (order, round trips, encoding), encoded pairs,
 * the train/dev split and batches (padding, length grouping, epoch order from the seed). */
#include "test_util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "translate_text_util.h"

/* ---- vocabularies ------------------------------------------------------------------------ */

/* source counts: a 3, b 3, d 2, c 1; target: x 2, y 1 */
static const char small_tsv[] = "a b c\tx\nb a\tx\na d\ty\nd b\t.\n";

static void test_vocab_orders_by_count_then_bytes_after_specials(void **state) {
    (void)state;
    tr_corpus c;
    tr_vocab v;
    char err[TR_ERR_SIZE];
    assert_int_equal(read_corpus(&c, WRITE("small.tsv", small_tsv), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC, TR_WORDS, 2, err, sizeof err), 0);
    assert_int_equal(v.size, 7);
    const char *expect[] = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "d"};
    for (int i = 0; i < 7; i++) assert_string_equal(v.token[i], expect[i]);
    assert_int_equal(tr_vocab_id(&v, "b", 1), 5);
    assert_int_equal(tr_vocab_id(&v, "c", 1), TR_UNK); /* below min count */
    assert_int_equal(tr_vocab_id(&v, "<eos>", 5), TR_EOS);
    assert_int_equal(tr_vocab_id(&v, "bb", 1), 5); /* only len bytes are looked at */
    tr_vocab_free(&v);
    /* min count 1 keeps c; both sides together */
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC | TR_SIDE_TGT, TR_WORDS, 1, err, sizeof err), 0);
    const char *both[] = {"a", "b", "d", "x", ".", "c", "y"}; /* 3,3,2,2 then 1,1,1 in byte order */
    assert_int_equal(v.size, 11);
    for (int i = 0; i < 7; i++) assert_string_equal(v.token[4 + i], both[i]);
    tr_vocab_free(&v);
    tr_corpus_free(&c);
}

static void test_vocab_round_trips_through_string_and_file(void **state) {
    (void)state;
    tr_corpus c;
    tr_vocab v, w, u;
    char err[TR_ERR_SIZE], path[PATH_MAX];
    assert_int_equal(read_corpus(&c, WRITE("small2.tsv", small_tsv), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(&v, &c, TR_SIDE_SRC, TR_WORDS, 2, err, sizeof err), 0);
    char *s = tr_vocab_to_string(&v);
    assert_string_equal(s, "<pad>\n<bos>\n<eos>\n<unk>\na\nb\nd");
    assert_int_equal(tr_vocab_from_string(&w, s, "config", err, sizeof err), 0);
    assert_int_equal(w.size, v.size);
    for (int i = 0; i < v.size; i++) assert_string_equal(w.token[i], v.token[i]);
    assert_int_equal(tr_vocab_id(&w, "d", 1), 6);
    snprintf(path, sizeof path, "%s/vocab.txt", tmpdir);
    assert_int_equal(tr_vocab_save(&v, path, err, sizeof err), 0);
    char *file = read_all(path);
    assert_string_equal(file, "<pad>\n<bos>\n<eos>\n<unk>\na\nb\nd\n");
    assert_int_equal(tr_vocab_load(&u, path, err, sizeof err), 0);
    assert_int_equal(u.size, 7);
    assert_int_equal(tr_vocab_id(&u, "a", 1), 4);
    free(file);
    free(s);
    tr_vocab_free(&u);
    tr_vocab_free(&w);
    tr_vocab_free(&v);
    tr_corpus_free(&c);
}

static void test_vocab_from_string_names_the_bad_line(void **state) {
    (void)state;
    tr_vocab v;
    char err[TR_ERR_SIZE];
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\nmille\ncent\nmille", "cfg", err, sizeof err),
                     -1);
    assert_contains(err, "cfg:7: duplicate token 'mille' (also line 5)");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<eos>\n<bos>\n<unk>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:2: expected the special token <bos> as id 1, found '<eos>'");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\na\n\nb", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:6: empty token");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\r\n<bos>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:1: a tab or carriage return in a token");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\n\xff", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg:5: invalid UTF-8");
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg: 2 lines, expected at least the 4 special tokens");
    assert_int_equal(tr_vocab_from_string(&v, "", "cfg", err, sizeof err), -1);
    assert_contains(err, "cfg: empty vocabulary");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/missing-vocab.txt", tmpdir);
    assert_int_equal(tr_vocab_load(&v, path, err, sizeof err), -1);
    assert_contains(err, "missing-vocab.txt: cannot open");
    assert_int_equal(tr_vocab_load(&v, WRITE("empty-vocab.txt", ""), err, sizeof err), -1);
    assert_contains(err, "empty-vocab.txt: file is empty");
    tr_vocab_free(&v);
}

static void test_vocab_encode_and_decode(void **state) {
    (void)state;
    tr_vocab v;
    char err[TR_ERR_SIZE], out[64];
    assert_int_equal(tr_vocab_from_string(&v, "<pad>\n<bos>\n<eos>\n<unk>\nseventy\n-\none\n,", "cfg", err, sizeof err),
                     0);
    int64_t ids[8];
    assert_int_equal(tr_vocab_encode(&v, "seventy-one, two", TR_WORDS, ids, 8), 5);
    int64_t expect[] = {4, 5, 6, 7, TR_UNK};
    assert_memory_equal(ids, expect, sizeof expect);
    int64_t seq[] = {TR_BOS, 4, 5, 6, TR_PAD, 7, 99, TR_EOS, 4};
    assert_int_equal(tr_vocab_decode(&v, seq, 9, TR_WORDS, out, sizeof out), strlen("seventy-one, <unk>"));
    assert_string_equal(out, "seventy-one, <unk>");
    int64_t trimmed[] = {4, 6, TR_EOS, TR_PAD};
    assert_int_equal(tr_ids_len(trimmed, 4), 2);
    assert_int_equal(tr_ids_len(trimmed, 1), 1);
    tr_vocab_free(&v);
}

/* ---- encoded pairs and batches -------------------------------------------------------------- */

/* n pairs; pair i has 1 + (i*7 % 9) source words and 1 + (i*5 % 6) target words */
static void make_dataset(tr_dataset *d, tr_vocab *sv, tr_vocab *tv, int n, int max_len) {
    size_t cap = (size_t)n * 64 + 1, pos = 0;
    char *text = malloc(cap), err[TR_ERR_SIZE];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 1 + i * 7 % 9; k++)
            pos += (size_t)snprintf(text + pos, cap - pos, "%ss%d", k ? " " : "", (i + k) % 5);
        pos += (size_t)snprintf(text + pos, cap - pos, "\t");
        for (int k = 0; k < 1 + i * 5 % 6; k++)
            pos += (size_t)snprintf(text + pos, cap - pos, "%st%d", k ? " " : "", (i * k) % 4);
        pos += (size_t)snprintf(text + pos, cap - pos, "\n");
    }
    tr_corpus c;
    assert_int_equal(read_corpus(&c, write_file("gen.tsv", text, pos), true, 0, err), 0);
    assert_int_equal(tr_vocab_build(sv, &c, TR_SIDE_SRC, TR_WORDS, 1, err, sizeof err), 0);
    assert_int_equal(tr_vocab_build(tv, &c, TR_SIDE_TGT, TR_WORDS, 1, err, sizeof err), 0);
    assert_int_equal(tr_dataset_build(d, &c, sv, tv, TR_WORDS, max_len, err, sizeof err), 0);
    tr_corpus_free(&c);
    free(text);
}

static void test_dataset_appends_eos_and_filters_by_length(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    make_dataset(&d, &sv, &tv, 40, 0);
    assert_int_equal(d.n, 40);
    assert_int_equal(d.dropped, 0);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(d.src_len[i], 2 + i * 7 % 9);
        assert_int_equal(d.tgt_len[i], 2 + i * 5 % 6);
        assert_int_equal(d.ids[d.src_start[i] + d.src_len[i] - 1], TR_EOS);
        assert_int_equal(d.ids[d.tgt_start[i] + d.tgt_len[i] - 1], TR_EOS);
        assert_int_equal(d.line[i], i + 1);
    }
    /* pair 1 is "s1 s2 s3 s4 s0 s1 s2 s3": its first id is the id of "s1" */
    assert_int_equal(d.ids[d.src_start[1]], tr_vocab_id(&sv, "s1", 2));
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
    /* at most 5 ids: source words ≤ 4 and target words ≤ 4 */
    make_dataset(&d, &sv, &tv, 40, 5);
    int keep = 0;
    for (int i = 0; i < 40; i++) keep += 2 + i * 7 % 9 <= 5 && 2 + i * 5 % 6 <= 5;
    assert_int_equal(d.n, keep);
    assert_int_equal(d.dropped, 40 - keep);
    for (int64_t i = 0; i < d.n; i++) assert_true(d.src_len[i] <= 5 && d.tgt_len[i] <= 5);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_split_is_reproducible_disjoint_and_complete(void **state) {
    (void)state;
    tr_dataset d, tr, he, tr2, he2;
    tr_vocab sv, tv;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 101, 0);
    assert_int_equal(tr_dataset_split(&d, 0.1, 7, &tr, &he, err, sizeof err), 0);
    assert_int_equal(he.n, 10); /* round(10.1) */
    assert_int_equal(tr.n, 91);
    int seen[102] = {0};
    for (int64_t i = 0; i < tr.n; i++) seen[tr.line[i]]++;
    for (int64_t i = 0; i < he.n; i++) seen[he.line[i]]++;
    for (int i = 1; i <= 101; i++) assert_int_equal(seen[i], 1);
    for (int64_t i = 1; i < he.n; i++) assert_true(he.line[i] > he.line[i - 1]); /* original order */
    /* the copies hold the same ids as the original pair */
    int64_t j = he.line[3] - 1;
    assert_int_equal(he.src_len[3], d.src_len[j]);
    assert_memory_equal(he.ids + he.tgt_start[3], d.ids + d.tgt_start[j], (size_t)d.tgt_len[j] * sizeof(int64_t));
    assert_int_equal(tr_dataset_split(&d, 0.1, 7, &tr2, &he2, err, sizeof err), 0);
    assert_memory_equal(he2.line, he.line, 10 * sizeof(int64_t));
    tr_dataset_free(&tr2);
    tr_dataset_free(&he2);
    assert_int_equal(tr_dataset_split(&d, 0.1, 8, &tr2, &he2, err, sizeof err), 0);
    assert_memory_not_equal(he2.line, he.line, 10 * sizeof(int64_t));
    tr_dataset_free(&tr2);
    tr_dataset_free(&he2);
    assert_int_equal(tr_dataset_split(&d, 0.0, 7, &tr2, NULL, err, sizeof err), 0); /* training part only */
    assert_int_equal(tr2.n, 101);
    assert_memory_equal(tr2.ids, d.ids, (size_t)(d.tgt_start[100] + d.tgt_len[100]) * sizeof(int64_t));
    tr_dataset_free(&tr2);
    assert_int_equal(tr_dataset_split(&d, 1.0, 7, &tr2, &he2, err, sizeof err), -1);
    assert_contains(err, "held-out fraction 1 is not in [0, 1)");
    assert_int_equal(tr_dataset_split(&d, 0.999, 7, &tr2, &he2, err, sizeof err), -1);
    assert_contains(err, "holding out 101 of 101 pairs leaves none to train on");
    tr_dataset_free(&tr);
    tr_dataset_free(&he);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_batches_cover_each_pair_once_per_epoch_with_correct_padding(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher b;
    tr_batch bt;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 53, 0);
    assert_int_equal(tr_batcher_init(&b, &d, 8, 11, true, err, sizeof err), 0);
    assert_int_equal(tr_batch_alloc(&bt, &b, err, sizeof err), 0);
    assert_int_equal(b.nbatches, 7); /* 6 × 8 + 5 */
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        tr_batcher_set_epoch(&b, epoch);
        int seen[53] = {0}, total = 0;
        for (int64_t step = 0; step < b.nbatches; step++) {
            assert_int_equal(tr_batcher_get(&b, &d, step, &bt), 0);
            int Ls = 0, Lt = 0;
            int64_t ntok = 0;
            for (int r = 0; r < bt.B; r++) {
                int64_t p = bt.index[r];
                seen[p]++;
                total++;
                int ls = d.src_len[p], lt = d.tgt_len[p];
                Ls = ls > Ls ? ls : Ls;
                Lt = lt > Lt ? lt : Lt;
                ntok += lt;
                assert_int_equal(bt.src_len[r], ls);
                assert_int_equal(bt.tgt_len[r], lt);
                const int64_t *s = d.ids + d.src_start[p], *t = d.ids + d.tgt_start[p];
                for (int k = 0; k < bt.Ls; k++) assert_int_equal(bt.src[r * bt.Ls + k], k < ls ? s[k] : TR_PAD);
                for (int k = 0; k < bt.Lt; k++) {
                    assert_int_equal(bt.tgt_in[r * bt.Lt + k], k == 0 ? TR_BOS : k < lt ? t[k - 1] : TR_PAD);
                    assert_int_equal(bt.tgt_out[r * bt.Lt + k], k < lt ? t[k] : TR_PAD);
                }
                assert_int_equal(bt.tgt_out[r * bt.Lt + lt - 1], TR_EOS);
            }
            assert_int_equal(bt.Ls, Ls); /* padded to the batch maximum, not the global one */
            assert_int_equal(bt.Lt, Lt);
            assert_int_equal(bt.ntokens, ntok);
        }
        assert_int_equal(total, 53);
        for (int i = 0; i < 53; i++) assert_int_equal(seen[i], 1);
    }
    assert_int_equal(tr_batcher_get(&b, &d, 7, &bt), -1);
    assert_int_equal(bt.B, 0);
    assert_int_equal(tr_batcher_get(&b, &d, -1, &bt), -1);
    tr_batch_free(&bt);
    tr_batcher_free(&b);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_batches_group_similar_source_lengths(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher b;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 90, 0);
    assert_int_equal(tr_batcher_init(&b, &d, 10, 3, true, err, sizeof err), 0);
    /* sorted by source length: batch k's longest source is no longer than batch k+1's shortest;
     * source lengths 2..10 occur 10 times each, so every batch has one source length */
    for (int64_t k = 0; k < b.nbatches; k++) {
        int lo = INT32_MAX, hi = 0;
        for (int r = 0; r < b.size[k]; r++) {
            int l = d.src_len[b.order[b.start[k] + r]];
            lo = l < lo ? l : lo;
            hi = l > hi ? l : hi;
        }
        assert_int_equal(lo, hi);
        assert_int_equal(lo, 2 + k);
    }
    tr_batcher_free(&b);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

static void test_epoch_order_depends_only_on_seed_and_epoch(void **state) {
    (void)state;
    tr_dataset d;
    tr_vocab sv, tv;
    tr_batcher a, b, c, fixed;
    char err[TR_ERR_SIZE];
    make_dataset(&d, &sv, &tv, 200, 0);
    assert_int_equal(tr_batcher_init(&a, &d, 4, 42, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&b, &d, 4, 42, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&c, &d, 4, 43, true, err, sizeof err), 0);
    assert_int_equal(tr_batcher_init(&fixed, &d, 4, 42, false, err, sizeof err), 0);
    size_t bytes = (size_t)a.nbatches * sizeof(int64_t);
    int64_t *e3 = malloc(bytes), *e4 = malloc(bytes);
    for (int e = 0; e < 3; e++) tr_batcher_set_epoch(&a, e); /* a walked there, b jumps there (resume) */
    tr_batcher_set_epoch(&a, 3);
    memcpy(e3, a.perm, bytes);
    tr_batcher_set_epoch(&b, 3);
    assert_memory_equal(b.perm, e3, bytes);
    assert_memory_equal(b.order, a.order, (size_t)d.n * sizeof(int64_t));
    tr_batcher_set_epoch(&a, 4);
    memcpy(e4, a.perm, bytes);
    assert_memory_not_equal(e4, e3, bytes);
    tr_batcher_set_epoch(&a, 3);
    assert_memory_equal(a.perm, e3, bytes);
    tr_batcher_set_epoch(&c, 3);
    assert_memory_not_equal(c.perm, e3, bytes);
    /* a permutation of the batches */
    int *seen = calloc((size_t)a.nbatches, sizeof(int));
    for (int64_t k = 0; k < a.nbatches; k++) seen[e4[k]]++;
    for (int64_t k = 0; k < a.nbatches; k++) assert_int_equal(seen[k], 1);
    tr_batcher_set_epoch(&fixed, 5);
    for (int64_t k = 0; k < fixed.nbatches; k++) assert_int_equal(fixed.perm[k], k);
    tr_batcher_free(&fixed);
    assert_int_equal(tr_batcher_init(&fixed, &d, 0, 1, true, err, sizeof err), -1);
    assert_contains(err, "batch size 0: must be at least 1");
    free(seen);
    free(e3);
    free(e4);
    tr_batcher_free(&a);
    tr_batcher_free(&b);
    tr_batcher_free(&c);
    tr_batcher_free(&fixed);
    tr_dataset_free(&d);
    tr_vocab_free(&sv);
    tr_vocab_free(&tv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_orders_by_count_then_bytes_after_specials),
        cmocka_unit_test(test_vocab_round_trips_through_string_and_file),
        cmocka_unit_test(test_vocab_from_string_names_the_bad_line),
        cmocka_unit_test(test_vocab_encode_and_decode),
        cmocka_unit_test(test_dataset_appends_eos_and_filters_by_length),
        cmocka_unit_test(test_split_is_reproducible_disjoint_and_complete),
        cmocka_unit_test(test_batches_cover_each_pair_once_per_epoch_with_correct_padding),
        cmocka_unit_test(test_batches_group_similar_source_lengths),
        cmocka_unit_test(test_epoch_order_depends_only_on_seed_and_epoch)
    };
    return cmocka_run_group_tests(tests, text_group_setup, text_group_teardown);
}
