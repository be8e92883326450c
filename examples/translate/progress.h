/* attograd-translate support: training progress on stderr.
 *
 * On a terminal one status line is redrawn in place with \r (at most every redraw_seconds);
 * otherwise (a log file, CI) a plain line is printed every log_every_steps steps or
 * log_every_seconds seconds, whichever comes first. Updates allocate nothing. */
#ifndef TR_PROGRESS_H
#define TR_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    /* settings: tr_progress_init fills them in; change them before the first update */
    FILE *out;
    bool tty;                 /* redraw in place; default isatty(out) */
    int64_t total_steps;      /* steps of the whole run */
    int64_t log_every_steps;  /* plain mode: at multiples of this step (default 100; 0: off) */
    double log_every_seconds; /* plain mode (default 30; 0: never by time) */
    double redraw_seconds;    /* tty mode (default 0.1) */
    int width;                /* tty mode: columns (default from the terminal, else 100) */
    double (*now)(void);      /* monotonic clock in seconds; default CLOCK_MONOTONIC */
    /* state */
    double t_start, t_last;                  /* first update and last output */
    int64_t first_step, step, last_out_step; /* first_step: step of the first update */
    int64_t epoch;
    int64_t tokens, window_tokens;
    double loss, lr, loss_ema, ema_weight, window_loss;
    int64_t window_n;
    bool drawn; /* tty: a status line is on screen */
} tr_progress;

/* Speed and ETA are measured from the first update on, so setup time and the steps a resumed
 * run skipped do not distort them. */
void tr_progress_init(tr_progress *p, FILE *out, int64_t total_steps);
/* Step number step (1-based, counted over the whole run) of epoch is done: loss of the step,
 * tokens it processed, the learning rate it used. Prints when due. */
void tr_progress_update(tr_progress *p, int64_t epoch, int64_t step, double loss, int64_t tokens, double lr);
/* tty: erase the status line, so that what is printed next starts on an empty line; the next
 * update draws it again. Call it before printing anything else to out (or to a stream that
 * shares its terminal) mid-run. */
void tr_progress_clear(tr_progress *p);
/* Print a line of text (e.g. validation results) where the status line was: the status line is
 * cleared first and drawn again by the next update, below the text (lines printed after the
 * message, before the next update, do not land on it either). */
void tr_progress_message(tr_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the final status (tty: and end its line). */
void tr_progress_finish(tr_progress *p);
/* The status text, e.g. "epoch 3 step 1200/5000 24% loss 1.2345 12.3k tok/s lr 3.00e-04
 * ETA 1:02:03" (tty: with a bar). Returns its length like snprintf. */
int tr_progress_format(const tr_progress *p, char *buf, size_t n);
/* "1:02:03", "2:05" style duration (negative or not finite: "?"); returns buf */
char *tr_format_duration(double seconds, char *buf, size_t n);

#endif
