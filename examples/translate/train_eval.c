/* attograd-translate train: evaluation on the dev pairs (teacher-forced loss, greedy or beam
 * exact match, sacreBLEU's BLEU and chrF) and the training curves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "svg.h"
#include "textio.h"
#include "train_internal.h"

/* ---- evaluation: teacher-forced loss, greedy (or beam) exact match, BLEU and chrF ---- */

/* pairs per evaluation batch: training's batch size, so evaluating needs no more memory */
#define EVAL_BATCH 64

/* teacher-forced cross entropy of bt (no label smoothing) summed over its target tokens */
static double batch_loss_sum(model *m, const tr_batch *bt) {
    ag_tensor *src = ag_wrap(AG_I64, AG_SHAPE(bt->B, bt->Ls), bt->src);
    ag_tensor *tin = ag_wrap(AG_I64, AG_SHAPE(bt->B, bt->Lt), bt->tgt_in);
    ag_tensor *tout = ag_wrap(AG_I64, AG_SHAPE(bt->B, bt->Lt), bt->tgt_out);
    return ag_item(model_loss(model_forward(m, src, tin, false, 1.0, NULL), tout, 0.0)) * (double)bt->ntokens;
}

double evaluate_loss(model *m, const tr_dataset *d) {
    char err[TR_ERR_SIZE];
    tr_batcher b;
    tr_batch bt;
    double sum = 0;
    int64_t tokens = 0;
    if (tr_batcher_init(&b, d, EVAL_BATCH, 0, false, err, sizeof err) != 0 ||
        tr_batch_alloc(&bt, &b, err, sizeof err) != 0) {
        fprintf(stderr, "attograd-translate: evaluation: %s\n", err);
        tr_batcher_free(&b);
        return NAN;
    }
    tr_batcher_set_epoch(&b, 0);
    bool grad = ag_set_grad_enabled(false);
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena);
    for (int64_t k = 0; k < b.nbatches; k++) {
        tr_batcher_get(&b, d, k, &bt);
        sum += batch_loss_sum(m, &bt);
        tokens += bt.ntokens;
        ag_arena_rewind(arena, mark);
    }
    ag_set_grad_enabled(grad);
    tr_batch_free(&bt);
    tr_batcher_free(&b);
    return tokens ? sum / (double)tokens : NAN;
}

/* the text of n ids into out (size bytes) as translate prints it: one line, control characters
 * dropped; the decoded length counts, since a byte piece may decode to NUL */
static void sample_text(const tr_vocab *v, const int64_t *ids, int n, tr_tok_mode mode, char *out, size_t size) {
    char raw[512];
    size_t len = tr_vocab_decode(v, ids, n, mode, raw, sizeof raw);
    tr_text_clean(raw, len < sizeof raw ? len : sizeof raw - 1, TR_TEXT_LINE, out, size);
}

/* the target text of each pair of d in text (matched by corpus line; both in file order), NULL
 * where there is none; a malloc'd array, NULL without text or memory */
static const char **reference_texts(const tr_dataset *d, const tr_corpus *text) {
    const char **out = text && d->n ? calloc((size_t)d->n, sizeof *out) : NULL;
    for (int64_t i = 0, j = 0; out && i < d->n; i++) {
        while (j < text->n && text->line[j] < d->line[i]) j++;
        if (j < text->n && text->line[j] == d->line[i]) out[i] = text->tgt[j];
    }
    return out;
}

eval_result evaluate(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                     const tr_vocab *tgt_v, tr_tok_mode mode, int beam, int64_t max_pairs, int samples, FILE *f) {
    eval_result r = {0};
    char err[TR_ERR_SIZE];
    tr_batcher b;
    tr_batch bt;
    tr_id_scores sc;
    if (!tr_id_scores_init(&sc)) snprintf(err, sizeof err, "out of memory");
    if (!sc.s.work || tr_batcher_init(&b, d, EVAL_BATCH, 0, false, err, sizeof err) != 0 ||
        tr_batch_alloc(&bt, &b, err, sizeof err) != 0) {
        fprintf(stderr, "attograd-translate: evaluation: %s\n", err);
        tr_id_scores_free(&sc);
        r.loss = NAN;
        return r;
    }
    tr_batcher_set_epoch(&b, 0);
    double loss_sum = 0;
    int64_t tokens = 0, W = 2 * (int64_t)b.max_len[1] + 8;
    int64_t *hyp = malloc(sizeof(int64_t) * (size_t)(128 * W));
    const char **ref_text = reference_texts(d, text);
    bool grad = ag_set_grad_enabled(false), oom = false;
    /* in the caller's arena (training's, between steps): evaluation reuses that memory */
    ag_arena *arena = ag_arena_current();
    ag_arena_mark mark = ag_arena_get_mark(arena);
    int shown = 0;
    for (int64_t k = 0; k < b.nbatches && (max_pairs <= 0 || r.sentences < max_pairs); k++) {
        tr_batcher_get(&b, d, k, &bt);
        ag_tensor *src = ag_wrap(AG_I64, AG_SHAPE(bt.B, bt.Ls), bt.src);
        loss_sum += batch_loss_sum(m, &bt);
        tokens += bt.ntokens;
        model_translate(m, src, W, beam, 0.6, hyp);
        for (int i = 0; i < bt.B; i++) {
            const int64_t *h = hyp + i * W, *ref = bt.tgt_out + (int64_t)i * bt.Lt;
            oom |= !tr_id_scores_add(&sc, tgt_v, mode, h, tr_ids_len(h, (int)W), ref, tr_ids_len(ref, bt.Lt),
                                     ref_text ? ref_text[bt.index[i]] : NULL);
            if (f && shown < samples && !oom) {
                char s[512], t[512], rf[512]; /* each one line, as translate prints it */
                sample_text(src_v, bt.src + (int64_t)i * bt.Ls, bt.Ls, mode, s, sizeof s);
                sample_text(tgt_v, h, (int)W, mode, t, sizeof t);
                sample_text(tgt_v, ref, bt.Lt, mode, rf, sizeof rf);
                if (strcmp(t, rf) == 0) fprintf(f, "  %s  ->  %s\n", s, t);
                else fprintf(f, "  %s  ->  %s   (expected: %s)\n", s, t, rf);
                shown++;
            }
        }
        r.sentences += bt.B;
        ag_arena_rewind(arena, mark);
    }
    ag_set_grad_enabled(grad);
    if (oom) fprintf(stderr, "attograd-translate: evaluation: out of memory for the metrics\n");
    r.loss = tokens ? loss_sum / (double)tokens : NAN;
    r.exact = tr_scores_exact(&sc.s);
    r.bleu = oom ? NAN : tr_scores_bleu(&sc.s);
    r.chrf = oom ? NAN : tr_scores_chrf(&sc.s);
    r.bleu_stats = sc.s.bleu;
    r.chrf_stats = sc.s.chrf;
    free(ref_text);
    free(hyp);
    tr_id_scores_free(&sc);
    tr_batch_free(&bt);
    tr_batcher_free(&b);
    return r;
}

/* the pairs of text that d lacks (longer than the model's positions): empty hypotheses, as the
 * model cannot translate them */
static void add_untranslated(eval_result *e, const tr_dataset *d, const tr_corpus *text) {
    tr_scores s;
    if (tr_scores_init(&s) != 0) return;
    s.bleu = e->bleu_stats;
    s.chrf = e->chrf_stats;
    for (int64_t i = 0, j = 0; j < text->n; j++) {
        while (i < d->n && d->line[i] < text->line[j]) i++;
        if (i < d->n && d->line[i] == text->line[j]) continue;
        const char *ref[1] = {text->tgt[j]};
        if (tr_scores_add(&s, "", ref, 1, 0) != 0) break;
    }
    e->bleu_stats = s.bleu;
    e->chrf_stats = s.chrf;
    e->bleu = tr_scores_bleu(&s);
    e->chrf = tr_scores_chrf(&s);
    tr_scores_free(&s);
}

void eval_report_test(model *m, const tr_dataset *d, const tr_corpus *text, const tr_vocab *src_v,
                      const tr_vocab *tgt_v, tr_tok_mode mode, int samples, int limit) {
    printf("test (%s, %lld pairs), best checkpoint:\n", text->path, (long long)text->n);
    eval_result e = evaluate(m, d, text, src_v, tgt_v, mode, 1, 0, samples, stdout);
    if (d->dropped) { /* longer than the model's positions: translated wrong, not left out */
        fprintf(stderr, "attograd-translate: %s: %lld pairs longer than %d tokens, beyond the model's positions, count "
                        "as wrong translations\n", text->path, (long long)d->dropped, limit);
        e.exact *= (double)d->n / (double)text->n;
        add_untranslated(&e, d, text);
    }
    printf("test loss %.4f, greedy exact match %.2f%%, BLEU %.2f, chrF2 %.2f\n", e.loss, 100 * e.exact, e.bleu, e.chrf);
    tr_metrics_print(stdout, &e.bleu_stats, &e.chrf_stats, 1, 2, NULL);
}

/* ---- curves ---- */


int64_t curves_every(int64_t total) { return total / 100 < 1 ? 1 : total / 100 > 100 ? 100 : total / 100; }

/* room for one more point in the k arrays a[] of *n points and *cap capacity */
static void grow(int n, int *cap, double **a[], int k) {
    if (n < *cap) return;
    *cap = *cap ? 2 * *cap : 64;
    for (int i = 0; i < k; i++) *a[i] = realloc(*a[i], sizeof(double) * (size_t)*cap);
}

void curves_add_train(curves *c, double step, double loss, double lr) {
    grow(c->n_train, &c->cap_train, (double **[]){&c->train_step, &c->train_loss, &c->train_lr}, 3);
    c->train_step[c->n_train] = step;
    c->train_loss[c->n_train] = loss;
    c->train_lr[c->n_train++] = lr;
}

void curves_add(curves *c, double step, double dl, double exact, double bleu, double chrf) {
    grow(c->n, &c->cap, (double **[]){&c->step, &c->dev_loss, &c->dev_exact, &c->bleu, &c->chrf}, 5);
    c->step[c->n] = step;
    c->dev_loss[c->n] = dl;
    c->dev_exact[c->n] = exact;
    c->bleu[c->n] = bleu;
    c->chrf[c->n] = chrf;
    c->n++;
}

/* four panels: the losses, dev exact match in percent, BLEU and chrF2, the learning rate */
bool curves_write(const curves *c, const char *path) {
    tr_svg_series s[] = {{"train loss (label-smoothed, dropout)", c->train_step, c->train_loss, c->n_train, 0},
                         {"dev loss", c->step, c->dev_loss, c->n, 0},
                         {"dev exact match", c->step, c->dev_exact, c->n, 1},
                         {"dev BLEU", c->step, c->bleu, c->n, 2},
                         {"dev chrF2", c->step, c->chrf, c->n, 2},
                         {"learning rate", c->train_step, c->train_lr, c->n_train, 3}};
    const char *ylabels[] = {"loss", "exact match (%)", "BLEU, chrF2", "learning rate"};
    char err[TR_ERR_SIZE];
    if (tr_svg_panels(path, "attograd-translate training", "step", 4, ylabels, 6, s, err, sizeof err) == 0)
        return true;
    fprintf(stderr, "attograd-translate: %s\n", err);
    return false;
}

void curves_free(curves *c) {
    free(c->step);
    free(c->train_step);
    free(c->train_loss);
    free(c->dev_loss);
    free(c->dev_exact);
    free(c->train_lr);
    free(c->bleu);
    free(c->chrf);
}

