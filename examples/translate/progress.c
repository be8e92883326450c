/* Training progress: a redrawn status line on a terminal, periodic plain lines otherwise. */
#include "progress.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static double monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_progress_init(tr_progress *p, FILE *out, int64_t total_steps) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = isatty(fileno(out));
    p->total_steps = total_steps;
    p->log_every_steps = 100;
    p->log_every_seconds = 30;
    p->redraw_seconds = 0.1;
    p->width = 100;
    struct winsize ws;
    if (p->tty && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) p->width = ws.ws_col;
    p->now = monotonic;
    p->t_start = p->t_last = -1;
}

char *tr_format_duration(double s, char *buf, size_t n) {
    if (!(s >= 0) || !isfinite(s) || s > 1e9) {
        snprintf(buf, n, "?");
        return buf;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

/* 12345 → "12.3k" */
static void si(double v, char *buf, size_t n) {
    if (v >= 1e6) snprintf(buf, n, "%.1fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

int tr_progress_format(const tr_progress *p, char *buf, size_t n) {
    double now = p->now(), elapsed = p->t_start >= 0 ? now - p->t_start : 0;
    int64_t done = p->step - p->first_step;
    /* a terminal shows the run's average speed and a smoothed loss; a log line reports the
     * window since the previous line, so consecutive lines are independent measurements */
    double loss, rate;
    if (p->tty) {
        loss = p->ema_weight > 0 ? p->loss_ema / p->ema_weight : p->loss;
        rate = elapsed > 0 ? (double)p->tokens / elapsed : 0;
    } else {
        double w = now - p->t_last;
        loss = p->window_n ? p->window_loss / (double)p->window_n : p->loss;
        rate = w > 0 ? (double)p->window_tokens / w : 0;
    }
    double frac = p->total_steps > 0 ? (double)p->step / (double)p->total_steps : 0;
    if (frac > 1) frac = 1;
    char eta[32], tok[32], bar[64] = "";
    tr_format_duration(done > 0 ? elapsed / (double)done * (double)(p->total_steps - p->step) : -1, eta, sizeof eta);
    si(rate, tok, sizeof tok);
    if (p->tty) {
        int w = 20, fill = (int)(frac * w + 1e-9);
        bar[0] = ' ';
        bar[1] = '[';
        for (int i = 0; i < w; i++) bar[2 + i] = i < fill ? '#' : '.';
        bar[2 + w] = ']';
        bar[3 + w] = 0;
    }
    return snprintf(buf, n, "epoch %lld step %lld/%lld%s %3.0f%% loss %.4f %s tok/s lr %.2e ETA %s",
                    (long long)p->epoch, (long long)p->step, (long long)p->total_steps, bar, 100 * frac, loss, tok,
                    p->lr, eta);
}

static void draw(tr_progress *p, bool final) {
    char line[512];
    int len = tr_progress_format(p, line, sizeof line);
    if (p->tty) {
        if (len >= p->width) line[p->width > 1 ? p->width - 1 : 0] = 0; /* a wrapped line cannot be redrawn */
        fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
        p->drawn = !final;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->t_last = p->now();
    p->last_out_step = p->step;
    p->window_tokens = 0;
    p->window_loss = 0;
    p->window_n = 0;
}

void tr_progress_update(tr_progress *p, int64_t epoch, int64_t step, double loss, int64_t tokens, double lr) {
    double now = p->now();
    if (p->t_start < 0) {
        /* the first update starts the clock: its tokens were processed before time zero */
        p->t_start = p->t_last = now;
        p->first_step = step;
        p->last_out_step = step - 1;
        tokens = 0;
    }
    p->epoch = epoch;
    p->step = step;
    p->loss = loss;
    p->lr = lr;
    p->tokens += tokens;
    p->window_tokens += tokens;
    if (isfinite(loss)) { /* one NaN step must not hide every later loss */
        p->window_loss += loss;
        p->window_n++;
        p->loss_ema = 0.9 * p->loss_ema + 0.1 * loss;
        p->ema_weight = 0.9 * p->ema_weight + 0.1;
    }
    bool due;
    if (p->tty) due = now - p->t_last >= p->redraw_seconds || step == p->total_steps || !p->drawn;
    else
        due = (p->log_every_steps > 0 && step / p->log_every_steps != p->last_out_step / p->log_every_steps) ||
              (p->log_every_seconds > 0 && now - p->t_last >= p->log_every_seconds);
    if (due) draw(p, false);
}

void tr_progress_clear(tr_progress *p) {
    if (!p->tty || !p->drawn) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->drawn = false;
}

void tr_progress_message(tr_progress *p, const char *fmt, ...) {
    tr_progress_clear(p);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

void tr_progress_finish(tr_progress *p) {
    if (p->t_start < 0) return; /* no step was made: nothing to report */
    if (p->tty) draw(p, true);
    else if (p->step != p->last_out_step) draw(p, false);
}
