/* attograd-translate train: teacher-forced training with Adam, warmup + inverse square root,
 * label smoothing and clipping; periodic evaluation, checkpoints (last and best), exact resume,
 * Ctrl-C saves and exits, curves as SVG. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "metrics.h"
#include "progress.h"
#include "subword.h"
#include "svg.h"
#include "translate.h"
#include "train_internal.h"
#include "train_dist.h"

/* the learning rate of step `step` (from 1): linear warmup over --warmup steps, then 1/sqrt */
static double lr_at(const train_opts *o, int64_t step) {
    ag_lr_schedule_config sched = ag_lr_schedule_defaults(AG_LR_WARMUP_INV_SQRT, o->lr);
    sched.warmup_steps = o->warmup;
    return ag_lr_schedule_at(&sched, step);
}

static bool interrupted; /* Ctrl-C or SIGTERM on some rank, agreed by all after a step (train_dist.h) */

/* ---- checkpoints ---- */

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Whether a file can be made in dir (it may exist, be a file, be read-only or on a read-only
 * mount): found before the first step, not at the first save. errno says why not. */
static bool writable_dir(const char *dir) {
    char *probe = join(dir, ".attograd-write-probe");
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), err = errno;
    bool ok = fd >= 0 && close(fd) == 0;
    if (!ok) err = fd >= 0 ? errno : err;
    if (fd >= 0) unlink(probe);
    free(probe);
    errno = err;
    return ok;
}

static bool make_dir(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(path, 0777) != 0 && errno != EEXIST) return false;
            *p = '/';
        }
    return mkdir(path, 0777) == 0 || errno == EEXIST;
}

/* One training run: what setup builds, the loop reads and changes, and finish and run_free
 * take down. stage says how far setup got (what run_free has to free). */
typedef struct {
    train_opts o; /* the options, with the checkpoint's settings when resuming */
    const train_opts *given;
    const opt_def *defs; /* the option table, fields of *given */
    const bool *flagged; /* flagged[k]: defs[k] was on the command line */
    char *last_path, *best_path, *curves_path, *attn_path, *log_path;
    trained resumed;
    bool resuming;
    corpora c;
    model_config cfg;
    model *m;
    ag_optim *opt;
    ag_train_state st;
    ag_rng rng; /* dropout and the GRU's teacher-forcing draws, saved in every checkpoint */
    tr_batcher b;
    tr_batch bt;
    tr_progress prog;
    curves cv;
    train_log log;         /* OUT/log.jsonl (rank 0) */
    train_stopper stopper; /* the best evaluation and the patience left */
    double window_loss, t0, curve_loss; /* curve_loss: the steps since the last train loss point */
    double elapsed0;                    /* training seconds before this invocation (train_log.c) */
    int64_t window_n, curve_n, start_step;
    bool noted; /* the metrics' note was printed */
    ag_arena *arena, *prev;
    bool stop, save_failed, write_failed; /* write_failed: curves.svg or attention.svg */
    bool diverged;                         /* a loss or a weight went to NaN or Inf: nothing more is saved */
    double bad_loss;                       /* the train or dev loss (bad_what) that did */
    const char *bad_what;
    enum { RUN_PATHS = 1, RUN_CORPORA, RUN_MODEL, RUN_LOOP } stage;
} run;

/* what train_resume.c reads and writes of r's options */
static run_settings settings_of(run *r) { return (run_settings){&r->o, r->given, r->defs, r->flagged, r->last_path}; }

/* training seconds of the whole run, over every invocation */
static double run_elapsed(const run *r) { return r->elapsed0 + train_clock() - r->t0; }

/* The model, its optimizer and the training state: new, or the checkpoint's when resuming */
static bool setup_model(run *r) {
    const train_opts *o = &r->o;
    char msg[2048];
    model_kind kind = MODEL_TRANSFORMER;
    model_kind_parse(o->model, &kind);
    model_config cfg = model_defaults(kind, r->c.src.size, r->c.tgt.size);
    cfg.d_model = o->d_model;
    cfg.nhead = o->heads;
    cfg.ff = o->ff;
    if (o->layers) cfg.enc_layers = cfg.dec_layers = o->layers;
    cfg.hidden = o->hidden;
    cfg.dropout = o->dropout;
    cfg.max_len = 2 * o->max_len + 8;
    if (r->resuming) cfg = *model_cfg(r->resumed.m);
    cfg.recompute = o->recompute_attention;
    cfg.keep_ff = o->keep_ff_activation;
    r->cfg = cfg;
    if (!train_model_checks(&cfg, o, &r->c)) return false;
    r->m = model_new(&cfg, AG_F32, (uint64_t)o->seed);
    if (!r->m) return false;
    r->stage = RUN_MODEL;
    ag_adam_config adam = ag_adam_defaults(); /* the Transformer paper's betas and eps */
    adam.lr = o->lr;
    adam.betas[1] = 0.98;
    adam.eps = 1e-9;
    r->opt = ag_adam_new(model_params(r->m), &adam);
    r->rng = ag_rng_new((uint64_t)o->seed * 1000003 + 1);
    if (r->resuming) {
        if (ag_checkpoint_load(r->last_path, model_params(r->m), r->opt, &r->st, NULL, msg, sizeof msg) != AG_CHECKPOINT_OK) {
            fprintf(stderr, "attograd-translate: cannot resume: %s\n", msg);
            return false;
        }
        if (!ag_state_get_rng(&r->st, "train", &r->rng)) {
            fprintf(stderr, "attograd-translate: cannot resume: %s has no 'train' rng state (dropout's draws): the "
                            "run cannot continue exactly\n", r->last_path);
            return false;
        }
        fprintf(stderr, "attograd-translate: resuming %s at step %lld (epoch %lld)\n", r->last_path,
                (long long)r->st.global_step, (long long)r->st.epoch);
    } else if (!config_store(&r->st, &cfg, &r->c.src, &r->c.tgt, r->c.mode, o->max_len, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        return false;
    }
    run_settings set = settings_of(r);
    if (!settings_store(&set, &r->st) || !corpora_record(&r->st, &r->c, o, r->resuming)) return false;
    int np = tr_dist_size(), nt = ag_get_num_threads();
    fprintf(stderr, "attograd-translate: %s model, %lld parameters; %lld training pairs, %lld dev pairs; vocabularies "
                    "%d and %d tokens; %d process%s \xc3\x97 %d thread%s\n",
            model_kind_name(cfg.kind), /* when resuming, what the checkpoint holds */
            (long long)model_params(r->m)->numel, (long long)r->c.train.n, (long long)r->c.dev.n, r->c.src.size,
            r->c.tgt.size, np, np == 1 ? "" : "es", nt, nt == 1 ? "" : "s");
    return true;
}

/* Everything before the first step: output paths, resume, corpora, model, batcher, Ctrl-C,
 * progress and the training arena. False after reporting why not. */
static bool run_setup(run *r, const train_opts *given) {
    r->o = *given;
    r->given = given;
    const train_opts *o = &r->o;
    bool refused = false; /* another trainer holds --out (lock.h): it said so */
    if (!make_dir(o->out) || !tr_lock_out(o->out, &refused) || !writable_dir(o->out)) {
        if (!refused)
            fprintf(stderr, "attograd-translate: cannot write checkpoints to %s: %s\n", o->out, strerror(errno));
        return false;
    }
    r->last_path = join(o->out, "last.h5");
    r->best_path = join(o->out, "best.h5");
    r->curves_path = join(o->out, "curves.svg");
    r->attn_path = join(o->out, "attention.svg");
    r->log_path = join(o->out, "log.jsonl");
    r->stage = RUN_PATHS;
    run_settings set = settings_of(r);
    if (o->resume && !(r->resuming = settings_resume(&set, &r->resumed))) return false;
    FILE *test = o->test ? fopen(o->test, "r") : NULL;
    if (o->test && !test) {
        fprintf(stderr, "attograd-translate: cannot read the test file %s: %s\n", o->test, strerror(errno));
        return false;
    }
    if (test) fclose(test);
    r->stage = RUN_CORPORA;
    if (!load_corpora(&r->c, o, r->resuming ? &r->resumed : NULL) || !setup_model(r)) return false;

    char err[TR_ERR_SIZE];
    if (tr_batcher_init(&r->b, &r->c.train, (int)(o->batch * o->accum), (uint64_t)o->seed, true, err, sizeof err) ||
        tr_batch_alloc(&r->bt, &r->b, err, sizeof err)) {
        fprintf(stderr, "attograd-translate: %s\n", err);
        return false;
    }
    tr_batcher_set_epoch(&r->b, r->st.epoch);
    tr_dist_catch_signals(true);

    if (!r->resuming && o->warmup > o->steps)
        fprintf(stderr, "attograd-translate: warning: --warmup %lld is longer than the run (--steps %lld): the "
                        "learning rate only rises to %.3g of --lr %s and never decays; a --warmup of %lld (a fifth "
                        "of the steps) would reach it\n",
                (long long)o->warmup, (long long)o->steps, lr_at(o, o->steps), tr_num_text(o->lr).s,
                (long long)(o->steps / 5 > 1 ? o->steps / 5 : 1));
    tr_progress_init(&r->prog, stderr, o->steps);
    stopper_init(&r->stopper, o->patience, &r->st);
    r->t0 = train_clock();
    r->start_step = r->st.global_step;
    r->arena = ag_arena_new(1 << 22);
    r->prev = ag_arena_use(r->arena);
    r->stage = RUN_LOOP;
    char why[256];
    if (r->resuming && stopper_done(&r->stopper, why, sizeof why)) {
        fprintf(stderr, "attograd-translate: not training on: the run %s; a larger --patience (0: off) trains on\n",
                why);
        r->stop = true;
    }
    if (tr_dist_rank() == 0 && !train_log_open(&r->log, r->log_path, r->resuming ? r->start_step : -1, &r->cv))
        return false;
    r->elapsed0 = r->log.elapsed;
    return true;
}

/* the curves' train loss at this step: the mean over the steps since the last point */
static void train_point(run *r) {
    double loss = r->curve_loss / (double)r->curve_n;
    curves_add_train(&r->cv, (double)r->st.global_step, loss, r->opt->lr);
    train_log_train(&r->log, r->st.global_step, loss, r->opt->lr, run_elapsed(r));
    r->curve_loss = 0;
    r->curve_n = 0;
}

/* One optimizer step on the next batch (a new epoch's order when the last one is done) */
static void run_step(run *r) {
    const train_opts *o = &r->o;
    ag_train_state *st = &r->st;
    double t = train_clock();
    if (st->data_position >= r->b.nbatches) {
        st->epoch++;
        st->data_position = 0;
        tr_batcher_set_epoch(&r->b, st->epoch);
    }
    tr_batch *bt = &r->bt;
    tr_batcher_get(&r->b, &r->c.train, st->data_position, bt);
    double l = train_batch_grads(r->m, bt, o, &r->rng, r->arena); /* --accum micro-batches, all ranks */
    if (!isfinite(l)) r->diverged = true, r->bad_loss = l, r->bad_what = "loss"; /* the same sum on every rank */
    if (o->clip > 0) ag_clip_grad_norm(model_params(r->m), o->clip);
    r->opt->lr = lr_at(o, st->global_step + 1);
    ag_optim_step(r->opt);
    st->global_step++;
    st->data_position++;
    train_log_count(&r->log, bt->ntokens, train_clock() - t);
    r->window_loss += l;
    r->window_n++;
    r->curve_loss += l;
    r->curve_n++;
    if (st->global_step % curves_every(o->steps) == 0) train_point(r);
    tr_progress_update(&r->prog, st->epoch, st->global_step, l, bt->ntokens, r->opt->lr);
    ag_arena_reset(r->arena);
}

/* Whether the run diverged: its loss (on any rank) or dev loss went to NaN or Inf at this step,
 * or, when a save may come (saving), the update made a weight so. Said once, naming the step;
 * the run stops without saving, so no checkpoint is overwritten with such weights. */
static bool run_diverged(run *r, bool saving) {
    if (!r->diverged && saving && !params_finite(model_params(r->m))) r->diverged = true; /* bad_what stays NULL */
    if (!r->diverged) return false;
    tr_progress_clear(&r->prog);
    if (r->bad_what)
        tr_progress_message(&r->prog, "step %lld: the %s is %s; stopping (lower --lr?)", (long long)r->st.global_step,
                            r->bad_what, isnan(r->bad_loss) ? "nan" : r->bad_loss > 0 ? "inf" : "-inf");
    else
        tr_progress_message(&r->prog, "step %lld: the update made weights NaN or Inf; stopping without saving them "
                            "(lower --lr?)", (long long)r->st.global_step);
    r->stop = true;
    return true;
}

/* Evaluate on the dev pairs (at step 0, the untrained model's numbers, without samples): printed,
 * logged and plotted; false when the dev loss diverged */
static bool run_eval(run *r, eval_result *e) {
    const train_opts *o = &r->o;
    int64_t step = r->st.global_step;
    tr_progress_message(&r->prog, "step %lld: evaluating on %lld dev pairs%s%s", (long long)step,
                        (long long)r->c.dev_eval.n, r->noted ? "" : "; ", r->noted ? "" : tr_metrics_note());
    r->noted = true;
    if (r->curve_n) train_point(r); /* logged with the time it was reached, before the evaluation's */
    *e = evaluate(r->m, &r->c.dev_eval, NULL, &r->c.src, &r->c.tgt, r->c.mode, 1, 0, step ? (int)o->samples : 0,
                  stderr);
    char head[64] = "the untrained model (step 0): "; /* no train loss yet */
    if (step)
        snprintf(head, sizeof head, "step %lld: train loss %.4f, ", (long long)step,
                 r->window_loss / (double)r->window_n);
    tr_progress_message(&r->prog, "%sdev loss %.4f, dev exact match %.2f%%, BLEU %.2f, chrF2 %.2f, %.0f s", head,
                        e->loss, 100 * e->exact, e->bleu, e->chrf, train_clock() - r->t0);
    if (!isfinite(e->loss)) r->diverged = true, r->bad_loss = e->loss, r->bad_what = "dev loss";
    if (run_diverged(r, false)) return false;
    curves_add(&r->cv, (double)step, e->loss, 100 * e->exact, e->bleu, e->chrf);
    train_log_eval(&r->log, step, e->loss, e->exact, e->bleu, e->chrf, r->c.dev_eval.n, run_elapsed(r));
    r->write_failed |= !curves_write(&r->cv, r->curves_path);
    r->window_loss = 0;
    r->window_n = 0;
    return true;
}

/* After a step: every --eval-every steps (and after the last) evaluate on the dev pairs, save
 * best.h5 on a new best (train_stop.c), stop at --stop-at or when --patience evaluations bring
 * none; every --save-every steps (and on the last, a stop or Ctrl-C) save last.h5. */
static void run_evaluate_and_save(run *r) {
    const train_opts *o = &r->o;
    ag_train_state *st = &r->st;
    bool last = st->global_step == o->steps, eval = st->global_step % o->eval_every == 0 || last;
    if (run_diverged(r, eval || st->global_step % o->save_every == 0 || interrupted)) return;
    eval_result e;
    if (eval && !run_eval(r, &e)) return;
    char why[256];
    if (eval && stopper_better(&r->stopper, st, st->global_step, e.exact, e.loss)) {
        ag_state_set_rng(st, "train", &r->rng);
        tr_progress_clear(&r->prog);
        r->save_failed |= !train_save(r->best_path, r->m, r->opt, st);
    }
    if (eval && o->stop_at > 0 && e.exact >= o->stop_at) {
        tr_progress_message(&r->prog, "dev exact match reached %.2f%%: stopping", 100 * e.exact);
        r->stop = true;
    } else if (eval && stopper_done(&r->stopper, why, sizeof why)) {
        tr_progress_message(&r->prog, "%s", why);
        r->stop = true;
    }
    bool save_last = st->global_step % o->save_every == 0 || last || r->stop || interrupted;
    if (!r->save_failed && (save_last || (eval && o->keep_last > 0))) {
        tr_progress_clear(&r->prog); /* a failed save's message starts a line of its own */
        ag_state_set_rng(st, "train", &r->rng);
        if (save_last) r->save_failed |= !train_save(r->last_path, r->m, r->opt, st);
        if (o->keep_last > 0 && !r->save_failed)
            r->save_failed |= !train_keep_step(o->out, o->keep_last, r->m, r->opt, st);
    }
    r->stop |= r->save_failed; /* steps after a lost save would be lost too */
}

/* The best checkpoint on the test file, with a few translations, and the attention heatmap of
 * the first dev sentence. False when the test file could not be read. */
static bool report_best(run *r, trained *best) {
    const train_opts *o = &r->o;
    bool ok = true;
    char msg[2048], err[TR_ERR_SIZE];
    if (o->test) {
        tr_corpus tc = {0};
        tr_dataset td = {0};
        if (read_corpus(&tc, o->test, o) &&
            tr_dataset_build(&td, &tc, &best->src, &best->tgt, r->c.mode, eval_limit(o), err, sizeof err) == 0) {
            eval_report_test(best->m, &td, &tc, &best->src, &best->tgt, r->c.mode, (int)o->samples, eval_limit(o));
        } else {
            ok = false;
        }
        tr_dataset_free(&td);
        tr_corpus_free(&tc);
    }
    if (r->c.dev.n > 0) { /* heatmap of the first dev sentence */
        const tr_dataset *dev = &r->c.dev;
        char s[1024];
        tr_vocab_decode(&r->c.src, dev->ids + dev->src_start[0], dev->src_len[0], r->c.mode, s, sizeof s);
        if (attention_svg(best, s, r->attn_path, msg, sizeof msg)) printf("attention of \"%s\": %s\n", s, r->attn_path);
        else fprintf(stderr, "attograd-translate: %s\n", msg), ok = false;
    }
    return ok;
}

/* After the loop: the run's exit status (0, 1 on a failure, 130 when interrupted) */
static int run_finish(run *r) {
    tr_progress_finish(&r->prog);
    /* the training model and its optimizer state are saved: the best checkpoint takes over, and
     * the test evaluation runs in the training arena (already grown, touched and reset) */
    ag_optim_free(r->opt);
    model_free(r->m);
    r->opt = NULL;
    r->m = NULL;
    if (r->save_failed) {
        fprintf(stderr, "attograd-translate: stopped at step %lld: a checkpoint could not be saved (above); the "
                        "steps since the last save are lost\n", (long long)r->st.global_step);
        return 1;
    }
    if (r->diverged) {
        fprintf(stderr, "attograd-translate: stopped at step %lld: training diverged; no checkpoint holds its weights "
                        "(%s and %s keep what was saved before, if anything)\n", (long long)r->st.global_step,
                r->best_path, r->last_path);
        return 1;
    }
    if (interrupted) {
        fprintf(stderr, "attograd-translate: interrupted at step %lld; saved %s (continue with --resume)\n",
                (long long)r->st.global_step, r->last_path);
        return 130;
    }
    fprintf(stderr, "attograd-translate: %lld steps in %.1f s", (long long)(r->st.global_step - r->start_step),
            train_clock() - r->t0);
    if (r->resuming)
        fprintf(stderr, " (resumed at step %lld, now at %lld)", (long long)r->start_step, (long long)r->st.global_step);
    fputc('\n', stderr);
    char msg[2048];
    trained best;
    if (!trained_load(&best, r->best_path, msg, sizeof msg)) {
        fprintf(stderr, "attograd-translate: %s\n", msg);
        return 1;
    }
    if (r->write_failed)
        fprintf(stderr, "attograd-translate: %s could not be written (above)\n", r->curves_path);
    int status = report_best(r, &best) && !r->write_failed ? 0 : 1;
    printf("checkpoints: %s (best dev exact match %.2f%%), %s\ncurves: %s\n", r->best_path, 100 * r->stopper.exact,
           r->last_path, r->curves_path);
    trained_free(&best);
    return status;
}

/* Frees what setup got to, in reverse */
static void run_free(run *r) {
    if (r->stage >= RUN_LOOP) {
        ag_arena_use(r->prev);
        ag_arena_free(r->arena);
        curves_free(&r->cv);
        train_log_close(&r->log);
        tr_batch_free(&r->bt);
        tr_batcher_free(&r->b);
    }
    if (r->stage >= RUN_MODEL) {
        ag_train_state_clear(&r->st);
        ag_optim_free(r->opt);
        model_free(r->m);
    }
    if (r->stage >= RUN_CORPORA) corpora_free(&r->c);
    trained_free(&r->resumed); /* zeroed when never loaded */
    free(r->last_path);
    free(r->best_path);
    free(r->curves_path);
    free(r->attn_path);
    free(r->log_path);
    tr_unlock_out();
}

/* every rank reads the same pairs, vocabularies and model with the same settings */
static bool train_same_run(run *r) {
    const train_opts *o = &r->o;
    const model_config *c = model_cfg(r->m);
    char config[512]; /* the doubles in hexadecimal: exact, so settings differing in the last bit differ */
    snprintf(config, sizeof config, "%s d%lld h%lld ff%lld hidden%lld enc%lld dec%lld batch%lld seed%lld steps%lld "
             "lr%a warmup%lld dropout%a ls%a clip%a tf%a accum%lld", o->model, (long long)c->d_model,
             (long long)c->nhead, (long long)c->ff, (long long)c->hidden, (long long)c->enc_layers,
             (long long)c->dec_layers, (long long)o->batch, (long long)o->seed, (long long)o->steps, o->lr,
             (long long)o->warmup, o->dropout, o->label_smoothing, o->clip, o->teacher_forcing, (long long)o->accum);
    return tr_dist_same_run(&r->c.train, &r->c.src, &r->c.tgt, model_params(r->m), config);
}

/* Under mpirun (train_dist.h) every rank sets up and trains; the ranks agree that set-up
 * worked and on the same run, and after each step on stopping; rank 0 alone evaluates, saves
 * and reports. */
static int train_run(const train_opts *given, const opt_def *defs, const bool *flagged) {
    run r = {.defs = defs, .flagged = flagged};
    int status = 1;
    bool lead = tr_dist_rank() == 0;
    tr_dist_quiet_setup();
    bool ok = tr_dist_setup_agree(run_setup(&r, given)) && train_same_run(&r);
    if (ok) {
        tr_dist_attach(model_params(r.m));
        FILE *devnull = lead ? NULL : fopen("/dev/null", "w"); /* rank 0 alone shows progress */
        if (devnull) r.prog.out = devnull;
        eval_result e0; /* the untrained model: the curves' and the log's step 0 */
        if (lead && !r.resuming && !run_eval(&r, &e0)) r.stop = true;
        r.stop = tr_dist_any(r.stop);
        while (r.st.global_step < r.o.steps && !interrupted && !r.stop) {
            run_step(&r);
            interrupted = tr_dist_step_done(&r.rng, &r.diverged);
            if (lead) run_evaluate_and_save(&r);
            r.stop = tr_dist_any(r.stop);
        }
        tr_dist_detach(&r.rng);
        tr_dist_catch_signals(false);
        if (devnull) {
            fclose(devnull);
            r.prog.out = stderr;
        }
        status = lead ? run_finish(&r) : r.save_failed || r.diverged ? 1 : interrupted ? 130 : 0;
    }
    run_free(&r);
    return status;
}

static const char *TRAIN_USAGE =
    "usage: attograd-translate train --train FILE [--dev FILE | --heldout F] [--test FILE] [options]\n"
    "       attograd-translate train --out DIR --resume [options]\n"
    "Trains with teacher forcing on a UTF-8 TSV corpus (source<TAB>target per line); writes\n"
    "OUT/last.h5, OUT/best.h5 (best dev exact match), OUT/log.jsonl, OUT/curves.svg and OUT/attention.svg.";

int cmd_train(int argc, char **argv) {
    train_opts o = {.out = "runs/translate", .model = "transformer", .steps = 8000, .batch = 64, .d_model = 128,
                    .tokenizer = "spm", .spm_type = "unigram",
                    .heads = 4, .layers = 0, .ff = 512, .hidden = 128, .max_len = 64, .min_count = 1,
                    .eval_every = 100, .save_every = 500, .warmup = 100, .seed = 1, .samples = 3, .beam = 1,
                    .max_eval = 1000, .lr = 1e-3, .dropout = 0.1, .label_smoothing = 0.1, .clip = 1.0,
                    .heldout = 0.05, .teacher_forcing = 1.0, .accum = 1, .patience = TRAIN_DEFAULT_PATIENCE};
    const opt_def defs[] = {
        {"--train", OPT_STRING, &o.train, "FILE  training corpus (TSV)"},
        {"--dev", OPT_STRING, &o.dev, "FILE  development corpus (default: --heldout of the training file)"},
        {"--heldout", OPT_DOUBLE, &o.heldout, "F     fraction held out for development when no --dev (0.05)"},
        {"--test", OPT_STRING, &o.test, "FILE  corpus evaluated with the best checkpoint at the end"},
        {"--out", OPT_STRING, &o.out, "DIR   where checkpoints and pictures go (runs/translate)"},
        {"--model", OPT_STRING, &o.model, "NAME  transformer, gru, lstm or rnn (transformer)"},
        {"--steps", OPT_INT, &o.steps, "N     optimizer steps at most (8000)"},
        {"--batch", OPT_INT, &o.batch, "N     sentence pairs per batch (64)"},
        {"--accum", OPT_INT, &o.accum, "N     batches per optimizer step (gradient accumulation: a step sees N x --batch pairs; 1)"},
        {"--lr", OPT_DOUBLE, &o.lr, "X     peak learning rate after warmup (1e-3)"},
        {"--warmup", OPT_INT, &o.warmup, "N     linear warmup steps, then inverse square root decay (100)"},
        {"--d-model", OPT_INT, &o.d_model, "N     embedding / model size (128)"},
        {"--heads", OPT_INT, &o.heads, "N     attention heads (4)"},
        {"--layers", OPT_INT, &o.layers, "N     encoder and decoder layers each (Transformer 2, recurrent 1)"},
        {"--ff", OPT_INT, &o.ff, "N     feed-forward size (512)"},
        {"--hidden", OPT_INT, &o.hidden, "N     GRU, LSTM, RNN hidden size (128)"},
        {"--dropout", OPT_DOUBLE, &o.dropout, "P     dropout (0.1)"},
        {"--label-smoothing", OPT_DOUBLE, &o.label_smoothing, "E     (0.1)"},
        {"--clip", OPT_DOUBLE, &o.clip, "X     clip the gradient norm (1.0; 0 = off)"},
        {"--teacher-forcing", OPT_DOUBLE, &o.teacher_forcing, "R     recurrent: probability of feeding the reference (1.0)"},
        {"--max-len", OPT_INT, &o.max_len, "N     drop pairs with a side longer than N tokens (64)"},
        {"--min-count", OPT_INT, &o.min_count, "N     vocabulary: tokens seen at least N times (1)"},
        {"--tokenizer", OPT_STRING, &o.tokenizer, "NAME  spm (SentencePiece subwords), word or char (spm)"},
        {"--spm-type", OPT_STRING, &o.spm_type, "NAME  SentencePiece model trained at start: unigram or bpe (unigram)"},
        {"--vocab-size", OPT_INT, &o.vocab_size, "N     SentencePiece pieces per side (0: chosen from the corpus)"},
        {"--spm-model", OPT_STRING, &o.spm_model, "FILE  a trained SentencePiece model for both sides, or SRC,TGT"},
        {"--chars", OPT_FLAG, &o.chars, "      the same as --tokenizer char"},
        {"--strict", OPT_FLAG, &o.strict, "      stop at the first bad corpus line instead of skipping it"},
        {"--eval-every", OPT_INT, &o.eval_every, "N     evaluate on the dev set every N steps (100)"},
        {"--max-eval", OPT_INT, &o.max_eval, "N     dev pairs (a fixed random subset) decoded per evaluation (1000; 0 = all)"},
        {"--save-every", OPT_INT, &o.save_every, "N     write OUT/last.h5 every N steps (500)"},
        {"--keep-last", OPT_INT, &o.keep_last, "N     also keep OUT/step-S.h5 of the last N evaluations and saves (0)"},
        {"--samples", OPT_INT, &o.samples, "N     sample translations shown per evaluation (3)"},
        {"--stop-at", OPT_DOUBLE, &o.stop_at, "A     stop once dev exact match reaches A (off)"},
        {"--patience", OPT_INT, &o.patience, "N     stop after N evaluations without a better dev exact match ("
                                             TRAIN_STR(TRAIN_DEFAULT_PATIENCE) "; 0 = off)"},
        {"--seed", OPT_INT, &o.seed, "N     (1)"},
        {"--threads", OPT_INT, &o.threads, "N     threads (0: the library's default, the free cores)"},
        {"--resume", OPT_FLAG, &o.resume, "      continue exactly from OUT/last.h5"},
        {"--recompute-attention", OPT_FLAG, &o.recompute_attention,
         "      Transformer: recompute attention in backward (less memory, slower steps, same results)"},
        {"--keep-ff-activation", OPT_FLAG, &o.keep_ff_activation,
         "      Transformer: keep the feed-forward activation dense, as PyTorch does, not packed (more memory)"},
        {"--help", OPT_FLAG, &o.help, "      this text"},
        {NULL, 0, NULL, NULL},
    };
    const char *pos[1];
    int npos;
    bool flagged[sizeof defs / sizeof *defs] = {false};
    if (!opts_parse_checked(argc, argv, 2, defs, TRAIN_RANGES, pos, 0, &npos, flagged)) return 2;
    if (o.help) {
        opts_usage(stdout, TRAIN_USAGE, defs, TRAIN_RANGES);
        return 0;
    }
    model_kind kind = MODEL_TRANSFORMER;
    if (!o.train && !o.resume) return opts_error(argv, 2, "--train FILE is required (the training corpus)");
    if (!model_kind_parse(o.model, &kind))
        return opts_error(argv, 2, "--model expects transformer, gru, lstm or rnn, got '%s'", o.model);
    bool recurrent = model_kind_recurrent(kind);
    if (!recurrent && o.d_model % o.heads != 0)
        return opts_error(argv, 2, "--d-model %lld is not a multiple of --heads %lld", (long long)o.d_model,
                          (long long)o.heads);
    if (recurrent && o.layers > AG_RECURRENT_MAX_LAYERS)
        return opts_error(argv, 2, "--layers expects an integer from 0 to %d for --model %s, got '%lld'",
                          AG_RECURRENT_MAX_LAYERS, o.model, (long long)o.layers);
    const char *bad = train_opts_problem(&o); /* what the ranges above cannot say */
    if (bad) return opts_error(argv, 2, "%s", bad);
    if (o.threads > 0) ag_set_num_threads((int)o.threads); /* else the library's: the free cores */
    if (!tr_dist_begin()) return 1;
    int status = train_run(&o, defs, flagged);
    tr_dist_end();
    return status;
}
