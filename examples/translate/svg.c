/* SVG attention heatmaps and training curves, built in memory and written atomically. */
#include "svg.h"
#include "data_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"

#define FONT "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""

/* Write s as XML character data: escape the five specials, and replace what XML 1.0 forbids
 * (control characters, malformed UTF-8) with '?' so a stray byte cannot break the file. */
static void xml_text(FILE *f, const char *s) {
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    while (*u) {
        unsigned c = *u;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c == '\'') fputs("&apos;", f);
        else if (c < 0x20) fputc(c == '\t' ? ' ' : '?', f);
        else if (c < 0x80) fputc((int)c, f);
        else {
            int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            int ok = len;
            for (int i = 1; i < len && ok; i++) ok = (u[i] & 0xC0) == 0x80;
            if (ok) {
                fwrite(u, 1, (size_t)len, f);
                u += len;
                continue;
            }
            fputc('?', f);
        }
        u++;
    }
}

/* rough rendered width of s at font size px, counting code points */
static double text_width(const char *s, double px) {
    int n = 0;
    for (const unsigned char *u = (const unsigned char *)(s ? s : ""); *u; u++) n += (*u & 0xC0) != 0x80;
    return 0.62 * px * n;
}

/* a W×H picture on white with the default font at font_px, written into memory (see end) */
static FILE *begin(char **buf, size_t *len, const char *path, double W, double H, double font_px, char *err,
                   size_t errsz) {
    FILE *f = open_memstream(buf, len);
    if (!f) {
        tr__fail(err, errsz, "%s: out of memory", path);
        return NULL;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" " FONT
            " font-size=\"%.0f\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H, font_px);
    return f;
}

/* the memstream's buffer and length are only final after fclose, hence the pointers */
static int end(FILE *f, char **buf, size_t *len, const char *path, char *err, size_t errsz) {
    int rc;
    if (fclose(f) != 0 || !*buf) rc = tr__fail(err, errsz, "%s: out of memory", path);
    else rc = tr_write_atomic(path, *buf, *len, err, errsz);
    free(*buf);
    return rc;
}

/* ---- attention heatmaps ------------------------------------------------------------------ */

/* white → dark blue, v in [0, 1] */
static void shade(double v, char *buf, size_t n) {
    if (!isfinite(v)) {
        snprintf(buf, n, "#bbbbbb");
        return;
    }
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    int r = (int)lround(255 + v * (8 - 255)), g = (int)lround(255 + v * (48 - 255)),
        b = (int)lround(255 + v * (107 - 255));
    snprintf(buf, n, "#%02x%02x%02x", r, g, b);
}

int tr_svg_attention(const char *path, const char *title, int layers, int heads, int tgt_len, int src_len,
                     const double *w, const char *const *src_tokens, const char *const *tgt_tokens, char *err,
                     size_t errsz) {
    if (layers < 1 || heads < 1 || tgt_len < 1 || src_len < 1)
        return tr__fail(err, errsz,
                    "%s: attention of %d layers, %d heads, %d target and %d source tokens: all must be at least 1",
                    path, layers, heads, tgt_len, src_len);
    if (!w || !src_tokens || !tgt_tokens) return tr__fail(err, errsz, "%s: no weights or no tokens given", path);
    const double fs = 12;
    int big = tgt_len > src_len ? tgt_len : src_len;
    double cell = big <= 16 ? 22 : big >= 40 ? 11 : 352.0 / big;
    double row_label = 0, col_label = 0;
    for (int i = 0; i < tgt_len; i++) row_label = fmax(row_label, text_width(tgt_tokens[i], fs));
    for (int j = 0; j < src_len; j++) col_label = fmax(col_label, text_width(src_tokens[j], fs));
    row_label += 8;
    col_label = col_label * 0.82 + 10; /* column labels are turned 55° */
    double gw = cell * src_len, gh = cell * tgt_len;
    double pw = row_label + gw + col_label * 0.6 + 24; /* the turned labels lean right */
    double ph = 24 + col_label + gh + 20;
    double top = title ? 40 : 10, legend = 46;
    /* 500: room for the scale's caption; and the title (bold 16 px) must fit */
    double W = fmax(fmax(pw * heads + 20, 500), title ? 20 + text_width(title, 16) * 1.1 : 0);
    double H = top + ph * layers + legend;

    char *buf = NULL;
    size_t len = 0;
    FILE *f = begin(&buf, &len, path, W, H, fs, err, errsz);
    if (!f) return -1;
    if (title) {
        fprintf(f, "<text x=\"%.1f\" y=\"26\" font-size=\"16\" font-weight=\"bold\">", 10.0);
        xml_text(f, title);
        fprintf(f, "</text>\n");
    }
    char col[16];
    for (int l = 0; l < layers; l++)
        for (int h = 0; h < heads; h++) {
            double x0 = 10 + h * pw, y0 = top + l * ph;
            double gx = x0 + row_label, gy = y0 + 24 + col_label;
            fprintf(f,
                    "<g>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">layer %d head %d</text>\n",
                    x0, y0 + 14, l, h);
            for (int j = 0; j < src_len; j++) {
                double cx = gx + (j + 0.5) * cell, cy = gy - 5;
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-55 %.1f %.1f)\">", cx, cy, cx, cy);
                xml_text(f, src_tokens[j]);
                fprintf(f, "</text>\n");
            }
            for (int i = 0; i < tgt_len; i++) {
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"central\">", gx - 5,
                        gy + (i + 0.5) * cell);
                xml_text(f, tgt_tokens[i]);
                fprintf(f, "</text>\n");
            }
            const double *m = w + ((size_t)l * heads + h) * tgt_len * src_len;
            for (int i = 0; i < tgt_len; i++)
                for (int j = 0; j < src_len; j++) {
                    double v = m[(size_t)i * src_len + j];
                    shade(v, col, sizeof col);
                    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                            gx + j * cell, gy + i * cell, cell, cell, col);
                    xml_text(f, tgt_tokens[i]);
                    fputs(" \xe2\x86\x90 ", f); /* ← */
                    xml_text(f, src_tokens[j]);
                    fprintf(f, ": %.3f</title></rect>\n", v);
                }
            fprintf(
                f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n</g>\n",
                gx, gy, gw, gh);
        }
    /* colour scale */
    double ly = top + ph * layers + 8;
    fprintf(f, "<defs><linearGradient id=\"scale\"><stop offset=\"0\" stop-color=\"#ffffff\"/>"
               "<stop offset=\"1\" stop-color=\"#08306b\"/></linearGradient></defs>\n");
    fprintf(f, "<rect x=\"10\" y=\"%.1f\" width=\"160\" height=\"12\" fill=\"url(#scale)\" stroke=\"#444\"/>\n", ly);
    fprintf(f, "<text x=\"10\" y=\"%.1f\">0</text><text x=\"170\" y=\"%.1f\" text-anchor=\"end\">1</text>\n", ly + 28,
            ly + 28);
    fprintf(f, "<text x=\"180\" y=\"%.1f\">attention weight (rows: target, columns: source)</text>\n", ly + 11);
    fprintf(f, "</svg>\n");
    return end(f, &buf, &len, path, err, errsz);
}

/* ---- training curves --------------------------------------------------------------------- */

/* Tick step of 1, 2 or 5 × 10^k giving about five ticks over [lo, hi]; widens a flat range. */
static double nice_step(double *lo, double *hi) {
    if (*hi - *lo < 1e-12 * fmax(fabs(*lo), 1)) {
        double pad = fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= pad;
        *hi += pad;
    }
    double raw = (*hi - *lo) / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double step = (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
    *lo = floor(*lo / step + 1e-9) * step;
    *hi = ceil(*hi / step - 1e-9) * step;
    return step;
}

static int decimals(double step) {
    int d = (int)ceil(-log10(step) - 1e-9);
    return d < 0 ? 0 : d > 8 ? 8 : d;
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

int tr_svg_curves(const char *path, const char *title, const char *xlabel, const char *ylabel_upper,
                  const char *ylabel_lower, int nseries, const tr_svg_series *s, char *err, size_t errsz) {
    bool lower = false;
    for (int k = 0; s && k < nseries; k++) lower |= s[k].panel > 0; /* tr_svg_panels checks the panels */
    const char *ylabels[2] = {ylabel_upper, ylabel_lower};
    return tr_svg_panels(path, title, xlabel, lower ? 2 : 1, ylabels, nseries, s, err, errsz);
}

int tr_svg_panels(const char *path, const char *title, const char *xlabel, int npanels,
                  const char *const *ylabels, int nseries, const tr_svg_series *s, char *err, size_t errsz) {
    if (nseries < 1 || !s) return tr__fail(err, errsz, "%s: no series to plot", path);
    if (npanels < 1 || npanels > TR_SVG_MAX_PANELS)
        return tr__fail(err, errsz, "%s: %d panels, expected 1 to %d", path, npanels, TR_SVG_MAX_PANELS);
    double xlo = INFINITY, xhi = -INFINITY, ylo[TR_SVG_MAX_PANELS], yhi[TR_SVG_MAX_PANELS];
    for (int p = 0; p < npanels; p++) ylo[p] = INFINITY, yhi[p] = -INFINITY;
    for (int k = 0; k < nseries; k++) {
        if (s[k].n < 0 || (s[k].n > 0 && (!s[k].x || !s[k].y)) || s[k].panel < 0 || s[k].panel >= npanels)
            return tr__fail(err, errsz, "%s: series %d ('%s'): bad point count, arrays or panel %d", path, k,
                        s[k].label ? s[k].label : "", s[k].panel);
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            xlo = fmin(xlo, s[k].x[i]);
            xhi = fmax(xhi, s[k].x[i]);
            ylo[s[k].panel] = fmin(ylo[s[k].panel], s[k].y[i]);
            yhi[s[k].panel] = fmax(yhi[s[k].panel], s[k].y[i]);
        }
    }
    if (!isfinite(xlo)) return tr__fail(err, errsz, "%s: no finite points to plot", path);
    if (xlo > 0) xlo = 0; /* x counts steps: a run starts at 0, before its first point */
    const double W = 760, left = 78, right = 24, ph = npanels > 2 ? 190 : 250, gap = 56, top = title ? 44 : 18,
                 bottom = 58;
    const double pw = W - left - right, H = top + npanels * ph + (npanels - 1) * gap + bottom;
    double xstep = nice_step(&xlo, &xhi);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = begin(&buf, &len, path, W, H, 12, err, errsz);
    if (!f) return -1;
    if (title) {
        fprintf(f, "<text x=\"%.1f\" y=\"28\" font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\">",
                left + pw / 2);
        xml_text(f, title);
        fprintf(f, "</text>\n");
    }
    for (int p = 0; p < npanels; p++) {
        double y0 = top + p * (ph + gap), lo = ylo[p], hi = yhi[p];
        if (!isfinite(lo)) lo = 0, hi = 1; /* a panel whose series have no finite points */
        double ystep = nice_step(&lo, &hi);
#define PX(x) (left + ((x)-xlo) / (xhi - xlo) * pw)
#define PY(y) (y0 + ph - ((y)-lo) / (hi - lo) * ph)
        fprintf(f, "<g>\n");
        for (double t = lo; t <= hi + ystep * 1e-6; t += ystep) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", left, PY(t),
                    left + pw, PY(t));
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"central\">%.*f</text>\n",
                    left - 6, PY(t), decimals(ystep), fabs(t) < ystep * 1e-6 ? 0.0 : t);
        }
        for (double t = xlo; t <= xhi + xstep * 1e-6; t += xstep) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PX(t), y0, PX(t),
                    y0 + ph);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.*f</text>\n", PX(t), y0 + ph + 16,
                    decimals(xstep), fabs(t) < xstep * 1e-6 ? 0.0 : t);
        }
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444\"/>\n", left,
                y0, pw, ph);
        const char *yl = ylabels ? ylabels[p] : NULL;
        if (yl) {
            fprintf(f, "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">",
                    y0 + ph / 2, y0 + ph / 2);
            xml_text(f, yl);
            fprintf(f, "</text>\n");
        }
        if (xlabel && p == npanels - 1) {
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", left + pw / 2, y0 + ph + 40);
            xml_text(f, xlabel);
            fprintf(f, "</text>\n");
        }
        /* the legend goes in the right-hand corner (upper or lower) with fewer points under it */
        int nleg = 0, under[2] = {0, 0};
        double legw = 40;
        for (int k = 0; k < nseries; k++) {
            if (s[k].panel != p) continue;
            nleg++;
            legw = fmax(legw, 40 + text_width(s[k].label, 12));
            for (int i = 0; i < s[k].n; i++) {
                double px = PX(s[k].x[i]), py = PY(s[k].y[i]);
                if (!isfinite(py) || px < left + pw - legw - 20) continue;
                under[0] += py < y0 + 18 * nleg + 24;
                under[1] += py > y0 + ph - 18 * nleg - 24;
            }
        }
        double lx = left + pw - legw - 10, ly0 = under[1] < under[0] ? y0 + ph - 18 * nleg - 8 : y0 + 8;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"white\" fill-opacity=\"0.85\" "
                "stroke=\"#ccc\"/>\n",
                lx - 6, ly0, legw + 6, 18 * nleg + 2);
        int row = 0;
        for (int k = 0; k < nseries; k++) {
            if (s[k].panel != p) continue;
            const char *c = palette[k % (int)(sizeof palette / sizeof *palette)];
            bool open = false;
            for (int i = 0; i < s[k].n; i++) { /* one polyline per run of finite points */
                if (isfinite(s[k].x[i]) && isfinite(s[k].y[i])) {
                    if (!open) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" points=\"", c);
                    open = true;
                    fprintf(f, "%.1f,%.1f ", PX(s[k].x[i]), PY(s[k].y[i]));
                } else if (open) {
                    fprintf(f, "\"/>\n");
                    open = false;
                }
            }
            if (open) fprintf(f, "\"/>\n");
            if (s[k].n <= 40) /* sparse series (validation points) also get markers */
                for (int i = 0; i < s[k].n; i++)
                    if (isfinite(s[k].x[i]) && isfinite(s[k].y[i]))
                        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.8\" fill=\"%s\"/>\n", PX(s[k].x[i]),
                                PY(s[k].y[i]), c);
            double ly = ly0 + 10 + 18 * row++;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
                    lx, ly, lx + 22, ly, c);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" dominant-baseline=\"central\">", lx + 28, ly);
            xml_text(f, s[k].label ? s[k].label : "");
            fprintf(f, "</text>\n");
        }
        fprintf(f, "</g>\n");
#undef PX
#undef PY
    }
    fprintf(f, "</svg>\n");
    return end(f, &buf, &len, path, err, errsz);
}
